"""The probe checks, a row each: what `mesh --test NAME` and `rdmacli watch` run on every NIC at
once, in one phase, with no connection per pair (probe.phase.Phase drives whichever the row names).

A new probe-based check is one module (its NIC prober) and a row here: the mesh's `--test` choices,
its words in `mesh --help`, the at-once schedule, the agents' port space and watch's plan all read
this table. The prober is named by its import path, not imported: reading the table (the
coordinator, `--help`) loads no prober; an agent imports it when its phase opens.

What a prober is: `Prober` below (probe.nic.NicProbe is one), made with the keywords run, key,
nic, address, port, peers, count, begin, end and stop.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from rdmacli.transports import DATAGRAMS


class Prober(Protocol):
    """One NIC's part in a phase, as probe.phase.Phase drives it."""

    nic: int  # its number in the datagrams and tokens
    address: str
    port: int
    key: bytes
    device: str | None  # as its open found them
    ib_port: int
    listen_id: Any  # None once closed (a run that lost its device closes its NIC)
    counters: Any  # its port's counters where a pair failed or lost probes

    def open(self) -> None: ...

    def retarget(self, run: bytes, peers: list, count: int) -> None: ...

    def phase(self, begin: float, end: float) -> None: ...

    def run(self) -> None: ...

    def results(self) -> list: ...  # (peer, "pass" or "fail", RdmacliError or None) a partner

    def close(self) -> None: ...

    def forged_seen(self) -> int: ...

    def foreign_seen(self) -> int: ...


@dataclass(frozen=True)
class ProbeKind:
    name: str  # mesh's --test, watch's plan
    words: str  # what it measures, in `mesh --help` and the run's summary
    prober: str  # "module:Class" of its NIC prober
    port_space: str = "udp"  # of the listening cm_id each NIC's SIDR answers on
    needs: tuple[str, ...] = (DATAGRAMS,)  # of each NIC's transport (rdmacli.transports): UD QPs

    def nic_class(self) -> Callable[..., Prober]:
        module, _, name = self.prober.partition(":")
        return getattr(importlib.import_module(module), name)


KINDS: dict[str, ProbeKind] = {
    k.name: k
    for k in (
        ProbeKind(
            "probe",
            "connectionless UD probes of every partner NIC in one phase: latency and loss",
            "rdmacli.probe.nic:NicProbe",
        ),
    )
}
DEFAULT = "probe"  # watch's
