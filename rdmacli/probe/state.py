"""What one NIC's phase holds, declared in one place: its partners (Peer, Known) and the NIC's
own state (NicState), which both halves of NicProbe (sidr.Resolving, datagrams.PythonLoop) read
and write. The stack's handles are `Any` until rdma/ is typed: None before open() and after
close()."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rdmacli.errors import RdmacliError
from rdmacli.probe.tally import Tally
from rdmacli.probe.timing import GAP_S


@dataclass
class Peer:
    rank: int
    rail: int
    nic: int
    address: str
    port: int
    tally: Tally = field(default_factory=Tally)
    resolving: Any = None  # the CmId of the SIDR exchange in flight
    attempts: int = 0
    ah: Any = None
    qpn: int = 0
    qkey: int = 0
    source: bytes = b""  # where its QP is (wire.partner_source): a QP number alone is one device's
    error: RdmacliError | None = None
    seq: int = 0
    index: int = 0  # in its NIC's list
    resolved: bool = False
    step: float = GAP_S  # between its probes, once resolved
    known: Known | None = None  # its QP number and AH from an earlier window (a NIC kept open)
    cached: bool = False  # resolved from `known`, not by SIDR this window
    # its probes came from another QP than `qpn`: that QP, while SIDR is asked whether the
    # partner restarted (NicProbe._stale), and one SIDR said is not the partner's (a key holder
    # claiming it), whose probes are answered but never make us forget the partner again
    confirming: int = 0
    dismissed: int = 0
    # its probes answered this window, from the QP SIDR named and from any other (at most
    # timing.replies_bound each: a flood in its name neither starves it nor our send queue)
    replies: list[int] = field(default_factory=lambda: [0, 0])


@dataclass
class Known:
    """A partner that answered in an earlier window on a NIC kept open (`rdmacli watch`): its
    QP number and the AH to it, so the next window probes it without SIDR. Dropped when it
    answers nothing in a window; asked again by SIDR when its own probes come from another QP
    (its agent restarted)."""

    address: str
    port: int
    ah: Any
    qpn: int
    qkey: int
    source: bytes


class NicState:
    """A NIC's phase state (NicProbe.__init__ sets every field)."""

    run_id: bytes
    key: bytes  # the datagrams' and SIDR tokens' MAC key (wire.py, token.seal)
    forged: int  # tokens and (Python loop) datagrams with a wrong tag, this window
    foreign: int  # (Python loop) answers with a good tag from another QP than SIDR named, and
    # probes claiming a known partner from another QP that SIDR showed is not its (sidr.Resolving)
    nic: int
    address: str
    port: int
    count: int
    peers: list[Peer]
    by_nic: dict[int, Peer]
    stop: Callable[[], bool]
    begin: float
    end: float
    send_end: float
    resolve_end: float
    asks: list[tuple[float, int]]  # (when, peer index): a SIDR due, a heap
    due: list[tuple[float, int]]  # (when, peer index): its next probe (the Python loop), a heap
    inflight: dict[int, tuple[int, float]]  # cm_id key -> (peer index, give up at)
    channel: Any  # the stack's handles (rdmacli.rdma): the CM's event channel,
    listen_id: Any  # the listening cm_id (its QP and PD are the NIC's),
    comp: Any  # the CQ's completion channel, the CQ and the buffer
    cq: Any
    mr: Any
    native: Any  # the datagrams' loop in C (rdmacli.native.ProbeLoop), when built
    ahs: dict[
        tuple[int, int], tuple[int, bytes, Any]
    ]  # (partner NIC, 0: SIDR's QP, 1: another) -> (QP, source, AH)
    replaced: int  # (Python loop) reply AHs replaced and retired this window (timing.replaced_bound)
    free_sends: list[int]
    recvs: int
    sends: int
    device: str | None
    ib_port: int
    known: dict[int, Known]  # a partner NIC -> what an earlier window learnt of it
    retired: list[Any]  # AHs no longer used: a send may still hold one until the next window
    offset: float  # of a step, the known partners' first probes (retarget)
    # what the stack refused that the probe goes on without, counted over the NIC's life: a SIDR
    # request it could not answer (the requester asks again), receives it could not post again
    # (the queue is deep), an object it could not destroy (the last such error's words kept)
    answers_lost: int
    reposts_failed: int
    teardown_errors: int

    def _destroyed(self, step: Callable[[], Any]) -> None:
        """One object's teardown: a call the stack refuses (RdmaCallError), or a bug in ours, is
        counted, and teardown goes on (the next object still needs it); each destroy is
        idempotent, so a wrapper already destroyed is no error."""
        try:
            step()
        except Exception:  # noqa: BLE001 - counted (teardown_errors, /metrics), never passed over
            self.teardown_errors += 1

    @staticmethod
    def _mono(t: float) -> int:
        """A time.time() as CLOCK_MONOTONIC ns, the native loop's clock."""
        return max(int((t - time.time()) * 1e9) + time.monotonic_ns(), 0)
