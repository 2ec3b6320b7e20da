"""One NIC's probe phase on the real stack: its UD QP answers every scheduled partner's probes
from set-up to the phase's end and probes each partner between `begin` and `send_end`. The SIDR
half is `sidr.Resolving`, the datagrams' Python loop `datagrams.PythonLoop` (the native loop in
probe.c when built); here are the set-up, the loop's turns, the teardown and the results."""

from __future__ import annotations

import heapq
import random
import selectors
import time
import typing

from rdmacli import counters
from rdmacli.errors import Cause, RdmacliError
from rdmacli.probe.datagrams import PythonLoop, native_loop, verbs_address
from rdmacli.probe.sidr import Resolving
from rdmacli.probe.state import Known, Peer
from rdmacli.probe.tally import verdict
from rdmacli.probe.timing import MAX_KNOWN, MAX_RESOLVING, RECV_DEPTH, SEND_DEPTH, resolve_end, tail_s
from rdmacli.probe.wire import SLOT
from rdmacli.rdma import addr as A
from rdmacli.rdma import cm, verbs
from rdmacli.rdma import constants as C


class NicProbe(Resolving, PythonLoop):
    """One NIC's phase: its UD QP answers every scheduled partner's probes from set-up to the
    phase's end, and probes each of its partners between `begin` and `send_end`. Every wait is
    bounded by the phase's end; everything is torn down whatever happened."""

    def __init__(
        self,
        *,
        run: bytes,
        key: bytes,
        nic: int,
        address: str,
        port: int,
        peers: list[Peer],
        count: int,
        begin: float,
        end: float,
        stop=lambda: False,
    ):
        self.run_id, self.nic, self.address, self.port, self.count = run, nic, address, port, count
        self.key = key  # the datagrams' and SIDR tokens' MAC key (wire.py)
        self.forged = 0  # forged SIDR tokens and the Python loop's datagrams, this window
        self.answers_lost = self.reposts_failed = self.teardown_errors = 0
        self.foreign = 0  # the Python loop's answers from another QP than SIDR named, this window
        self.peers = peers
        for i, p in enumerate(peers):
            p.index = i
        self.by_nic = {p.nic: p for p in peers}
        self.stop = stop
        self.phase(begin, end)
        self.channel = self.listen_id = self.comp = self.cq = self.mr = None
        # (a partner NIC, 0: the QP SIDR named, 1: another) -> (that QP, where it is, the AH replies go by)
        self.ahs: dict[tuple[int, int], tuple] = {}
        self.replaced = 0  # the Python loop's reply AHs replaced (retired) this window
        self.free_sends: list[int] = []
        self.due: list[tuple[float, int]] = []  # (when, peer index): its next probe
        self.inflight: dict[int, tuple[int, float]] = {}  # cm_id key -> (peer index, give up at)
        self.device: str | None = None
        self.ib_port = 1
        self.counters_before: dict[str, int] = {}
        self.counters: list[counters.Deltas] = []
        self.native = None  # the datagrams' loop in C (rdmacli.native.ProbeLoop), when built
        self.known: dict[int, Known] = {}  # a partner NIC -> what an earlier window learnt of it
        self.retired: list = []  # AHs no longer used: a send may still hold one until the next window
        self.offset = 0.0  # of a step, the known partners' first probes (retarget)

    def phase(self, begin: float, end: float) -> None:
        """The phase's times (the go line may move its start after the NIC is open); partners are
        asked for their QP numbers from `begin` until timing.resolve_end."""
        self.begin, self.end = begin, end
        self.send_end = end - tail_s(max(end - begin, 1.0))
        self.resolve_end = resolve_end(begin, self.send_end, len(self.peers), self.count)
        self.asks = [(begin, i) for i in range(len(self.peers))]  # (when, peer): SIDR

    # -- set-up and teardown ---------------------------------------------------------------
    def open(self) -> None:
        self.channel = cm.EventChannel()
        self.listen_id = cm.CmId.create(self.channel, C.PS_UDP)
        self.listen_id.bind(A.resolve(self.address, self.port, passive=True, what="this node's address"))
        self.listen_id.listen()
        self.device, self.ib_port = self.listen_id.device, self.listen_id.port_num
        limits = verbs.query_limits(self.listen_id.verbs)
        sends, recvs = SEND_DEPTH, RECV_DEPTH
        if limits is not None:
            sends, recvs = min(sends, limits.max_qp_wr), min(recvs, limits.max_qp_wr)
            cqe = min(sends + recvs, limits.max_cqe)
            sends, recvs = min(sends, cqe // 4), cqe - min(sends, cqe // 4)
        # what the phase makes hangs on its listener (rdma.handle): closed with it, the newest
        # first: AHs, the MR, the QP, the completion channel with its CQ, then the id
        self.comp = self.listen_id.own(verbs.CompChannel(self.listen_id.verbs))
        self.cq = verbs.CQ(self.listen_id.verbs, sends + recvs, self.comp)
        self.listen_id.create_qp(
            qp_type=C.QPT_UD,
            send_cq=self.cq.ptr,
            recv_cq=self.cq.ptr,
            max_send_wr=sends,
            max_recv_wr=recvs,
            sq_sig_all=1,
        )
        self.recvs = recvs  # wr_ids below are receive slots, the rest send slots
        mr = verbs.MR(self.listen_id.pd, (recvs + sends) * SLOT, C.ACCESS_LOCAL_WRITE)
        self.mr = self.listen_id.own(mr)
        verbs.post_recv_slots(self.listen_id.qp, self.mr, range(recvs), SLOT)
        self.free_sends = list(range(recvs, recvs + sends))
        self.sends = sends
        self.native = native_loop(self, recvs, sends)
        self.cq.req_notify()
        self._counters_start()

    def _counters_start(self) -> None:
        self.counters = []
        if self.device:
            self.counters_before = counters.read(self.device, self.ib_port)

    def retarget(self, run: bytes, peers: list[Peer], count: int) -> None:
        """The next window on this NIC, kept open (`rdmacli watch`): its QP, CQ, buffer and
        receives stay, and so does what it learnt of partners that answered (`known`: no SIDR
        for them again). Under TCG, opening a NIC and asking each partner by SIDR every window
        was a fifth of the agent's CPU. A partner that answered nothing is forgotten and asked
        again; so is one whose probes come from another QP than the one known (_stale). AHs
        retired a window ago are destroyed now (no send can still hold them): a NIC kept open
        for days holds a window's worth, never more."""
        for ah in self.retired:
            self._destroyed(ah.destroy)
        self.retired = []
        for p in self.peers:
            if p.resolving is not None:
                self._destroyed(p.resolving.destroy)
                p.resolving = None
            old = self.known.pop(p.nic, None)
            if p.resolved and p.ah is not None and p.tally.answered > 0:
                self.known[p.nic] = Known(p.address, p.port, p.ah, p.qpn, p.qkey, p.source)  # the newest last
                if old is not None and old.ah is not p.ah:
                    self.retired.append(old.ah)
            else:
                self.retired += [x for x in (p.ah, old and old.ah) if x is not None]
            p.ah = None
        while len(self.known) > MAX_KNOWN:
            self.retired.append(self.known.pop(next(iter(self.known))).ah)
        if self.native is not None:
            self.native.release()
        for *_, ah in self.ahs.values():
            self.retired.append(ah)
        self.ahs.clear()
        self.run_id, self.count, self.peers = run, count, peers
        self.forged = self.foreign = self.replaced = 0
        for i, p in enumerate(peers):
            p.index = i
            k = self.known.get(p.nic)
            if k is not None and (k.address, k.port) == (p.address, p.port):
                p.known = k
                # its QP from now, not from the begin: a partner's probes that come before are
                # answered by its own AH and bound, never in the slot a QP claiming it shares
                p.qpn, p.source = k.qpn, k.source
        self.by_nic = {p.nic: p for p in peers}
        self.due, self.inflight = [], {}
        # the known partners' probes go together, a NIC's own random part of a step into the
        # window: one wake sends them all (their replies come back together too), and no two
        # NICs' bursts line up (in step, every NIC of the lab probed at once and the round
        # trips measured the queue for its two CPUs: 3.3-5.2 ms typical against 1.1)
        self.offset = random.random()
        if self.native is not None:
            self.native = native_loop(self, self.recvs, self.sends, free=self.native.free_slots())
            for p in peers:
                if p.known is not None:
                    self.native.expect(p.index, p.qpn, p.source)
        self._counters_start()

    def close(self) -> None:
        """Everything this NIC's phase made: the native loop's reply AHs, then the event channel
        with what hangs on it (rdma.handle), in the order the stack needs: SIDR's ids, then the
        listener's AHs, MR, QP and CQ before the listener takes librdmacm's PD with it. Errors
        here are not the pairs': counted (teardown_errors)."""
        if self.native is not None:
            self._destroyed(self.native.release)
        if self.channel is not None:
            self.teardown_errors += len(self.channel.close())
        for p in self.peers:
            p.resolving = p.ah = None
        self.ahs.clear()
        self.known.clear()
        self.retired.clear()
        self.listen_id = self.cq = self.comp = self.mr = self.channel = None  # closed: twice is harmless
        self.native = None

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        """The phase, until its end or a stop: SIDR in Python; the datagrams in C when the
        native loop runs (it sleeps there too, handing back for CM events and Python's own
        times), else here on a selector."""
        sel = None
        if self.native is None:
            sel = selectors.DefaultSelector()
            sel.register(self.channel.fd, selectors.EVENT_READ, "cm")
            sel.register(self.comp.fd, selectors.EVENT_READ, "cq")
        try:
            while not self.stop():
                now = time.time()
                if now >= self.end:
                    break
                if now >= self.begin:
                    self._ask(now)
                if sel is None:
                    self._native_turn(now)
                else:
                    self._python_turn(now, sel)
                self._stale(time.time())
        finally:
            if sel is not None:
                sel.close()
        if self.device:
            d = counters.delta(
                self.device, self.ib_port, self.counters_before, counters.read(self.device, self.ib_port)
            )
            if d.moved or d.reset:
                self.counters = [d]

    def _native_turn(self, now: float) -> None:
        """One call of the native loop: until a CM event (handled here) or Python's next time."""
        send_end = self._mono(self.send_end if now >= self.begin else now)  # none before the begin
        channel = verbs_address(self.comp.ptr)
        if self.native.wait(channel, self.channel.fd, send_end, self._mono(now + self._next_wake(now))):
            self._cm_events()
        self._check(self.native.state.status)

    def _python_turn(self, now: float, sel) -> None:
        """One turn of the Python loop: the datagrams, a sleep on both channels, what woke it."""
        if now >= self.begin:
            self._datagrams(now)
        for key, _ in sel.select(self._next_wake(now)):
            if key.data == "cm":
                self._cm_events()
            else:
                while self.comp.get_event() is not None:
                    self.cq.ack_events(1)
                self.cq.req_notify()
        self._datagrams(time.time())

    def _stale(self, now: float) -> None:
        """Partners resolved from `known` whose own probes this window come from another QP:
        their agent restarted, or a key holder claims to be them from a QP of its own. SIDR
        tells which (the partner's address answers with its QP number): asked now, the count
        going on meanwhile; a new QP number is a restart (Resolving: the count started afresh,
        never a dead window of our making), the known one a claim, dismissed and counted as
        foreign. Too late in the window to ask, the claim is dismissed and nothing forgotten:
        taken as a restart, a key holder's claim late in each window made the agent forget a
        healthy partner every window, whose probes were then answered in the slot the claimer
        floods, past its bound (the lab's forger test: the partner named bad, DEAD). A partner
        that did restart answers nothing at its old QP, and is asked again the next window."""
        for p in self.peers:
            if not p.cached or p.confirming:
                continue
            seen = (
                self.native.reply_qpn_of(p.index)
                if self.native is not None
                else (self.ahs.get((p.nic, 1)) or self.ahs.get((p.nic, 0)) or (0,))[0]
            )
            if seen and seen not in (p.qpn, p.dismissed):
                if now < self.resolve_end:
                    p.confirming = seen
                    heapq.heappush(self.asks, (now, p.index))
                else:
                    p.dismissed = seen
                    self.foreign += 1

    def _datagrams(self, now: float) -> None:
        """The CQ's completions and the probes due (the Python loop). Probes go only once the
        phase has begun."""
        self._completions()
        if now >= self.begin:
            self._send_due(now)

    def _check(self, status: int) -> None:
        if status != 0:
            from rdmacli import native

            raise RdmacliError(
                f"the probe's native loop stopped: {native.STATUS_WORDS.get(status, status)}",
                cause=Cause.CALL_FAILED,
            )

    def _next_wake(self, now: float) -> float:
        """How long the loop may sleep: until the phase's begin or end, the next probe due in
        Python's loop (the native loop wakes for its own), the next SIDR to ask or give up, and
        never more than 0.2 s (the stop flag)."""
        wake = self.end
        if now < self.begin:
            wake = min(wake, self.begin)
        if self.due and self.free_sends:
            wake = min(wake, self.due[0][0])
        if self.asks and len(self.inflight) < MAX_RESOLVING:
            wake = min(wake, max(self.asks[0][0], now))
        for _, give_up in self.inflight.values():
            wake = min(wake, give_up)
        return min(max(wake - now, 0.0), 0.2)

    def forged_seen(self) -> int:
        """Datagrams with a wrong tag dropped this window (since open or retarget)."""
        return self.forged + (int(self.native.state.forged) if self.native is not None else 0)

    def foreign_seen(self) -> int:
        """Answers with a good tag from another QP than the partner's SIDR named, dropped this
        window: a key holder's forgery (a partner answers from the QP SIDR names)."""
        return self.foreign + (int(self.native.state.foreign) if self.native is not None else 0)

    def results(self) -> list[tuple[Peer, str, RdmacliError | None]]:
        if self.native is not None:  # the native loop's counts and round trips are the tallies
            for p in self.peers:
                p.tally.sent, p.tally.answered, p.tally.host_ns, p.tally.net_ns = self.native.counts(p.index)
        return [(p, *verdict(p.tally, p.resolved, p.error, p.attempts)) for p in self.peers]


if typing.TYPE_CHECKING:  # NicProbe is a probe.kinds.Prober: mypy holds the two together
    from rdmacli.probe.kinds import Prober

    _PROBER: type[Prober] = NicProbe
