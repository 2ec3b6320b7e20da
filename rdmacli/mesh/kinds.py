"""The mesh's checks, a row each: its name, its words, how it runs and the figure its matrix shows.

A pair check runs one connection per pair in its slot; its runner is a `mesh.pair.Kind` (the
protocol on the wire, its parameters from the run spec, the figures each end reports), named by
its import path so that reading this table (the coordinator, `mesh --help`) loads no engine. A
probe check runs every pair at once in one phase; its row is probe.kinds' (the probe layer below
the mesh has its own table), taken in here as it stands when this is first read.

`mesh --test`'s choices and words, the run spec's check (contract.TESTS), the at-once schedule
(schedule.AT_ONCE), the agent's runner and the matrix's title all read `checks()`: a new check
is its module and one row here (tests/unit/test_mesh_contract.py adds one and runs it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from rdmacli.probe.kinds import KINDS as PROBE_KINDS

RTT = "p50 network round trip"


@dataclass(frozen=True)
class Check:
    name: str  # mesh's --test
    words: str  # what it measures, in `mesh --help`
    runner: str  # "module:NAME" of its mesh.pair.Kind; "" for a probe check (probe.kinds' row)
    metric: str = "setup time"  # what a passing pair's cell in the matrix shows

    @property
    def at_once(self) -> bool:
        """Every pair in one phase (a probe check), not one connection per pair in its slot."""
        return not self.runner

    def pair_kind(self) -> Any:
        """Its runner's row (mesh.pair.Kind), imported now: only an agent running a pair asks."""
        module, _, name = self.runner.partition(":")
        return getattr(importlib.import_module(module), name)


# `ping` is the latency probe (`rdmacli lat`'s send ping-pong: a network round trip, the
# responder's hold taken out); `rping` is rping's cycle, for a user who asks for that protocol;
# `connect` and `ud` are ucmatose's and udaddy's exchanges; `bw` is `rdmacli bw --op send
# --bidir`, both ways at once
PAIR_CHECKS = {
    c.name: c
    for c in (
        Check("ping", "network round trip p50/p99, the lat probe", "rdmacli.mesh.pair:LATENCY", RTT),
        Check("rping", "rping's cycle", "rdmacli.mesh.pair:RPING", "p50 ping latency"),
        Check("connect", "ucmatose's exchange", "rdmacli.mesh.pair:EXCHANGE"),
        Check("ud", "udaddy's", "rdmacli.mesh.pair:DATAGRAMS"),
        Check("bw", "Gb/s both ways at once", "rdmacli.mesh.pair:BANDWIDTH", "Gb/s, the slower way"),
    )
}


def checks() -> dict[str, Check]:
    """Every check, the pair checks first, then the probe's (as probe.kinds has them now)."""
    probes = {k.name: Check(k.name, k.words, "", RTT) for k in PROBE_KINDS.values()}
    return {**PAIR_CHECKS, **probes}


def check(name: str) -> Check | None:
    return checks().get(name)
