"""`--test probe`: a fabric's latency-and-loss matrix in one phase, no connection per pair.

R-Pingmesh's shape. Each NIC opens one UD QP, on its rail's listening cm_id (UDP port space),
and during one phase probes every peer NIC the schedule gives it, all at once, with
timestamped datagrams, rate-limited (`MAX_RATE` probes a second a NIC at most), while
answering the probes of its peers on the same QP. A peer's QP number comes from rdma_cm's SIDR
(udaddy's exchange: resolve address, route, rdma_connect; the peer's listener answers with its
QP number and qkey): one short exchange per peer, no QP, connection or memory per pair.

A probe carries the prober's send time; the responder stamps when it took the probe from its
CQ and when it posts the reply, so its hold is taken out of the round trip (the network's
round trip is the host's minus the responder's hold; a hold that is not less than the whole is
not taken out). A probe not answered by the phase's end is lost: UD does not retransmit, and
only the fabric (or a responder without receives, which this one never is) drops one. What the
NIC's counters did during the phase travels with the pairs that lost probes or failed.

The coordinator sees each NIC pair reported from both ends, as with connection tests: each end
its own probes (report.Pair merges them). No connection test's rounds: one slot, round 0.
"""

from __future__ import annotations

import heapq
import random
import selectors
import statistics
import struct
import time
from dataclasses import dataclass, field

from rdmacli.diag import counters
from rdmacli.engine.status import event_error
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import RTT_FLOOR_US
from rdmacli.mesh import token as T
from rdmacli.protocols.rping import _pct  # the percentile lat and rping report
from rdmacli.rdma import addr as A
from rdmacli.rdma import cm, verbs
from rdmacli.rdma import constants as C

MAGIC = b"RPRB"
PROBE, REPLY = 1, 2
FORMAT = ">4sB3x8sIIIQQQ"  # magic, kind, run id, seq, prober's NIC, responder's NIC, t1, t2, t3 (ns)
SIZE = struct.calcsize(FORMAT)
PAYLOAD = 64  # bytes sent (SIZE, padded)
SLOT = 128  # a receive slot: the 40-byte GRH and the payload

# the phase (coordinator: phase_s; agent: the same numbers)
RESOLVE_S = 5.0  # from the phase's start, for every peer's SIDR (asked again every ATTEMPT_S)
ATTEMPT_S = 1.0  # one SIDR exchange takes a millisecond on hardware; unanswered, it is asked again,
MAX_ATTEMPT_S = 8.0  # each time waiting twice as long, up to this (a partner starved of CPU
# answers late: the lab's 32 emulated NICs on two CPUs needed seconds, and asking again every
# second only added load)
GAP_S = 0.1  # between two probes to one peer, at least
MAX_RATE = 250.0  # probes a second a NIC sends, at most: 8 NICs of one node share one Python (its GIL)
TAIL_S = 3.0  # after the last probe, for the last replies (a reply later than this is lost)
MAX_RESOLVING = 64  # SIDR exchanges in flight a NIC
SEND_DEPTH, RECV_DEPTH = 256, 1024
SPREAD = 0.6  # of a peer's send window its probes are spread over; the rest is for catching up
# a NIC's QP is up this long before the phase starts, so every partner's first SIDR finds it;
# no less than the coordinator's go lead (plan.GO_LEAD_S): once open, the start no longer moves
OPEN_LEAD_S = 2.0


def attempt_s(attempt: int) -> float:
    """How long SIDR attempt number `attempt` (from 1) waits for its answer."""
    return min(ATTEMPT_S * 2 ** max(attempt - 1, 0), MAX_ATTEMPT_S)


def phase_s(partners: int, count: int) -> float:
    """The probe phase's length for a NIC with `partners` peers, `count` probes each: their
    SIDR, the probes spread at GAP_S or MAX_RATE, whichever is slower, and the tail."""
    return RESOLVE_S + max(count * GAP_S, partners * count / MAX_RATE) + TAIL_S


# ---- the datagram -------------------------------------------------------------------------


@dataclass(frozen=True)
class Datagram:
    kind: int
    run: bytes
    seq: int
    src: int  # the prober's NIC (rank * rails + rail)
    dst: int  # the responder's NIC
    t1: int = 0  # the prober's clock at post (ns)
    t2: int = 0  # the responder's at receive
    t3: int = 0  # the responder's at its reply's post

    def pack(self) -> bytes:
        return struct.pack(FORMAT, MAGIC, self.kind, self.run, self.seq, self.src, self.dst,
                           self.t1, self.t2, self.t3).ljust(PAYLOAD, b"\0")  # fmt: skip


def parse(data: bytes) -> Datagram | None:
    """A datagram from the wire (anyone's): None unless it is a probe or reply of this format."""
    if len(data) < SIZE or not data.startswith(MAGIC):
        return None
    _, kind, run, seq, src, dst, t1, t2, t3 = struct.unpack(FORMAT, data[:SIZE])
    if kind not in (PROBE, REPLY):
        return None
    return Datagram(kind, run, seq, src, dst, t1, t2, t3)


# ---- one peer's probes, counted --------------------------------------------------------------


@dataclass
class Tally:
    """What one NIC's probes to one peer came to: the prober's own counts and clock."""

    sent: int = 0
    answered: int = 0
    pending: dict[int, int] = field(default_factory=dict)  # seq -> t1 (ns)
    host_ns: list[int] = field(default_factory=list)
    net_ns: list[int] = field(default_factory=list)

    def posted(self, seq: int, t1: int) -> None:
        self.sent += 1
        self.pending[seq] = t1

    def replied(self, seq: int, t4: int, hold_ns: int) -> bool:
        """A reply to probe `seq`: counted once; the responder's hold (its word) is taken out
        only when it is less than the whole round trip, never below the wire's floor."""
        t1 = self.pending.pop(seq, None)
        if t1 is None or t4 < t1:
            return False
        host = max(t4 - t1, FLOOR_NS)
        net = host - hold_ns if hold_ns >= 0 and host - hold_ns >= FLOOR_NS else host
        self.answered += 1
        self.host_ns.append(host)
        self.net_ns.append(net)
        return True

    @property
    def lost(self) -> int:
        return self.sent - self.answered

    def figures(self) -> dict:
        """The pair record's figures (records.PairRecord): counts, and the round trips in µs."""
        out: dict = {"probes_sent": self.sent, "probes_answered": self.answered}
        if self.net_ns:
            net = sorted(self.net_ns)
            out.update(
                rtt_p50_us=_us(_pct(net, 50)),
                rtt_p99_us=_us(_pct(net, 99)),
                rtt_min_us=_us(net[0]),
                rtt_avg_us=_us(statistics.fmean(net)),
                host_rtt_p50_us=_us(statistics.median(self.host_ns)),
            )
        return out


FLOOR_NS = round(RTT_FLOOR_US * 1000)  # no wire's round trip is shorter


def _us(ns: float) -> float:
    return round(ns / 1000.0, 1)


def verdict(tally: Tally, resolved: bool, error: RdmacliError | None,
            attempts: int = 1) -> tuple[str, RdmacliError | None]:  # fmt: skip
    """One end's result for a pair: pass when any probe came back (its loss is its figure,
    which the verdict reads); fail when the peer never resolved or nothing came back."""
    if not resolved and not attempts and error is None:  # this end's own lateness, not the partner's
        return "fail", RdmacliError(
            "this NIC never asked the partner for its QP number: its loop first ran after the "
            "phase's SIDR window (this node's agent was late or starved of CPU)",
            cause=Cause.AGENT,
        )
    if not resolved:
        return "fail", error or RdmacliError(
            "the partner's NIC never answered its SIDR request (no QP number to probe)",
            cause=Cause.UNREACHABLE,
        )
    if tally.sent == 0:
        return "fail", RdmacliError(
            "the partner's NIC answered too late in the phase for any probe: raise --round-time",
            cause=Cause.DEADLINE,
        )
    if tally.answered == 0:
        return "fail", RdmacliError(
            f"no probe answered: {tally.sent} of {tally.sent} lost (the SIDR exchange worked, "
            "datagrams did not)",
            hint="check the fabric between the two NICs (MTU, ACLs, the switch port) and their counters",
            cause=Cause.LOSS,
        )
    return "pass", None


# ---- one NIC's phase, on the real stack -----------------------------------------------------


def verbs_address(ptr) -> int:
    from rdmacli import native

    return native.as_address(ptr, verbs.ffi())


def native_loop(nic: NicProbe, recvs: int, sends: int, free: list[int] | None = None):
    """The native datagram loop for an open NIC, or None (not built, or RDMACLI_DATA_PATH=python:
    the Python loop below does the same, slower). `free`: the send slots not in flight (a NIC
    kept open from the window before: its sends still in flight complete into this loop)."""
    from rdmacli import native

    if native.load() is None:
        return None
    lid = nic.listen_id
    return native.ProbeLoop(
        verbs_address(lid.qp), verbs_address(nic.cq.ptr), verbs_address(lid.pd), run=nic.run_id, nic=nic.nic,
        count=nic.count, recvs=recvs, sends=sends, buf=(nic.mr.addr, nic.mr.lkey), port_num=nic.ib_port,
        partners=[p.nic for p in nic.peers], free=free,
    )  # fmt: skip


@dataclass
class Peer:
    rank: int
    rail: int
    nic: int
    address: str
    port: int
    tally: Tally = field(default_factory=Tally)
    resolving: object = None  # the CmId of the SIDR exchange in flight
    attempts: int = 0
    ah: object = None
    qpn: int = 0
    qkey: int = 0
    error: RdmacliError | None = None
    seq: int = 0
    index: int = 0  # in its NIC's list
    resolved: bool = False
    step: float = GAP_S  # between its probes, once resolved
    known: Known | None = None  # its QP number and AH from an earlier window (a NIC kept open)
    cached: bool = False  # resolved from `known`, not by SIDR this window


@dataclass
class Known:
    """A partner that answered in an earlier window on a NIC kept open (`rdmacli watch`): its
    QP number and the AH to it, so the next window probes it without SIDR. Dropped when it
    answers nothing in a window; asked again by SIDR when its own probes come from another QP
    (its agent restarted)."""

    address: str
    port: int
    ah: object
    qpn: int
    qkey: int


MAX_KNOWN = 4096  # partners a NIC keeps from window to window, at most


class NicProbe:
    """One NIC's phase: its UD QP answers every scheduled partner's probes from set-up to the
    phase's end, and probes each of its partners between `begin` and `send_end`. Every wait is
    bounded by the phase's end; everything is torn down whatever happened."""

    def __init__(self, *, run: bytes, nic: int, address: str, port: int, peers: list[Peer], count: int,
                 begin: float, end: float, stop=lambda: False):  # fmt: skip
        self.run_id, self.nic, self.address, self.port, self.count = run, nic, address, port, count
        self.peers = peers
        for i, p in enumerate(peers):
            p.index = i
        self.by_nic = {p.nic: p for p in peers}
        self.stop = stop
        self.phase(begin, end)
        self.channel = self.listen_id = self.comp = self.cq = self.mr = None
        self.ahs: dict[int, tuple] = {}  # a partner NIC -> (its QP number, the AH replies go by)
        self.free_sends: list[int] = []
        self.due: list[tuple[float, int]] = []  # (when, peer index): its next probe
        self.inflight: dict[int, tuple[int, float]] = {}  # cm_id key -> (peer index, give up at)
        self.device: str | None = None
        self.ib_port = 1
        self.counters_before: dict[str, int] = {}
        self.counters: list[dict] = []
        self.native = None  # the datagrams' loop in C (rdmacli.native.ProbeLoop), when built
        self.known: dict[int, Known] = {}  # a partner NIC -> what an earlier window learnt of it
        self.retired: list = []  # AHs no longer used: a send may still hold one until the next window
        self.offset = 0.0  # of a step, the known partners' first probes (retarget)

    def phase(self, begin: float, end: float) -> None:
        """The phase's times (the go line may move its start after the NIC is open). Partners
        are asked for their QP numbers from `begin` for as long as their probes still fit in the
        send window (at least RESOLVE_S): a SIDR slowed by a busy host costs probes, not the
        pair."""
        self.begin, self.end = begin, end
        span = max(end - begin, 1.0)
        self.send_end = end - min(TAIL_S, span / 3)
        room = self.count * max(GAP_S / 4, len(self.peers) / MAX_RATE) / SPREAD  # the last peer's probes
        self.resolve_end = max(
            begin + 0.5, min(max(begin + RESOLVE_S, self.send_end - room), self.send_end - 0.5)
        )
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
        self.comp = verbs.CompChannel(self.listen_id.verbs)
        self.cq = verbs.CQ(self.listen_id.verbs, sends + recvs, self.comp)
        self.listen_id.create_qp(qp_type=C.QPT_UD, send_cq=self.cq.ptr, recv_cq=self.cq.ptr,
                                 max_send_wr=sends, max_recv_wr=recvs, sq_sig_all=1)  # fmt: skip
        self.recvs = recvs  # wr_ids below are receive slots, the rest send slots
        self.mr = verbs.MR(self.listen_id.pd, (recvs + sends) * SLOT, C.ACCESS_LOCAL_WRITE)
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
            try:
                ah.destroy()
            except Exception:  # noqa: BLE001 - teardown goes on
                pass
        self.retired = []
        for p in self.peers:
            if p.resolving is not None:
                try:
                    p.resolving.destroy()
                except Exception:  # noqa: BLE001
                    pass
                p.resolving = None
            old = self.known.pop(p.nic, None)
            if p.resolved and p.ah is not None and p.tally.answered > 0:
                self.known[p.nic] = Known(p.address, p.port, p.ah, p.qpn, p.qkey)  # the newest last
                if old is not None and old.ah is not p.ah:
                    self.retired.append(old.ah)
            else:
                self.retired += [x for x in (p.ah, old and old.ah) if x is not None]
            p.ah = None
        while len(self.known) > MAX_KNOWN:
            self.retired.append(self.known.pop(next(iter(self.known))).ah)
        if self.native is not None:
            self.native.release()
        for _, ah in self.ahs.values():
            self.retired.append(ah)
        self.ahs.clear()
        self.run_id, self.count, self.peers = run, count, peers
        for i, p in enumerate(peers):
            p.index = i
            k = self.known.get(p.nic)
            if k is not None and (k.address, k.port) == (p.address, p.port):
                p.known = k
        self.by_nic = {p.nic: p for p in peers}
        self.due, self.inflight = [], {}
        # the known partners' probes go together, a NIC's own random part of a step into the
        # window: one wake sends them all (their replies come back together too), and no two
        # NICs' bursts line up (in step, every NIC of the lab probed at once and the round
        # trips measured the queue for its two CPUs: 3.3-5.2 ms typical against 1.1)
        self.offset = random.random()
        if self.native is not None:
            self.native = native_loop(self, self.recvs, self.sends, free=self.native.free_slots())
        self._counters_start()

    def close(self) -> None:
        """Everything this NIC's phase made, in the order the stack needs (AHs and the MR before
        the last cm_id takes librdmacm's PD with it); errors here are not the pairs'."""
        steps = [self.native.release] if self.native is not None else []  # its reply AHs
        steps += [p.resolving.destroy for p in self.peers if p.resolving is not None]
        held = [p.ah for p in self.peers] + [k.ah for k in self.known.values()] + self.retired
        ahs = {id(x): x for x in held + [ah for _, ah in self.ahs.values()] if x is not None}  # each once
        steps += [ah.destroy for ah in ahs.values()]
        if self.listen_id is not None:
            steps.append(self.listen_id.destroy_qp)
        steps += [x for x in (self.cq and self.cq.destroy, self.comp and self.comp.destroy,
                              self.mr and self.mr.dereg) if x]  # fmt: skip
        if self.listen_id is not None:
            steps.append(self.listen_id.destroy)
        if self.channel is not None:
            steps.append(self.channel.close)
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - teardown goes on: the next object still needs it
                pass
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
            d = counters.delta(self.device, self.ib_port, self.counters_before,
                               counters.read(self.device, self.ib_port))  # fmt: skip
            if d.moved or d.reset:
                self.counters = [{"device": d.device, "port": d.port, "moved": dict(d.moved),
                                  "reset": list(d.reset)}]  # fmt: skip

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
        their agent restarted, and the probes sent to the old QP were nobody's to answer. Each
        is asked again by SIDR, its count started afresh (never a dead window of our making)."""
        for p in self.peers:
            if not p.cached:
                continue
            seen = (
                self.native.reply_qpn_of(p.index) if self.native is not None else self.ahs.get(p.nic, (0,))[0]
            )
            if seen and seen != p.qpn:
                p.cached = p.resolved = False
                self.known.pop(p.nic, None)
                self.retired.append(p.ah)
                p.ah, p.tally, p.seq = None, Tally(), 0
                if self.native is not None:
                    self.native.forget(p.index)
                heapq.heappush(self.asks, (now, p.index))

    def _datagrams(self, now: float) -> None:
        """The CQ's completions and the probes due (the Python loop). Probes go only once the
        phase has begun."""
        self._completions()
        if now >= self.begin:
            self._send_due(now)

    def _check(self, status: int) -> None:
        if status != 0:
            from rdmacli import native

            raise RdmacliError(f"the probe's native loop stopped: {native.STATUS_WORDS.get(status, status)}",
                               cause=Cause.CALL_FAILED)  # fmt: skip

    def _mono(self, t: float) -> int:
        """A time.time() as CLOCK_MONOTONIC ns, the native loop's clock."""
        return max(int((t - time.time()) * 1e9) + time.monotonic_ns(), 0)

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

    # -- SIDR: each peer's QP number ------------------------------------------------------------
    def _ask(self, now: float) -> None:
        """Start SIDR exchanges that are due (at most MAX_RESOLVING in flight, none after the
        resolve window); an exchange unanswered for ATTEMPT_S is dropped and asked again."""
        for i, give_up in list(self.inflight.values()):
            if now >= give_up:
                p = self.peers[i]
                self._failed(p, RdmacliError(
                    f"no answer to SIDR from {p.address}:{p.port} within {attempt_s(p.attempts):g} s "
                    f"({p.attempts} attempt(s))", cause=Cause.UNREACHABLE), now, again=0.0)  # fmt: skip
        while self.asks and self.asks[0][0] <= now and len(self.inflight) < MAX_RESOLVING:
            _, i = heapq.heappop(self.asks)
            p = self.peers[i]
            if p.resolved or p.resolving is not None or now >= self.resolve_end:
                continue
            if p.known is not None:  # answered in an earlier window on this open NIC: no SIDR
                k, p.known = p.known, None
                p.ah, p.qpn, p.qkey, p.resolved, p.cached = k.ah, k.qpn, k.qkey, True, True
                self._schedule(p, now)
                continue
            p.attempts += 1
            wait = attempt_s(p.attempts)
            try:
                p.resolving = cm.CmId.create(self.channel, C.PS_UDP)
                p.resolving.resolve_addr(
                    A.resolve(self.address, 0, passive=True, what="this node's address"),
                    A.resolve(p.address, p.port, what="the partner's address"),
                    int(wait * 1000),
                )
            except Exception as exc:  # noqa: BLE001 - a peer that cannot be asked now: its error
                self._failed(p, exc if isinstance(exc, RdmacliError) else RdmacliError(
                    f"SIDR to {p.address}: {exc}", cause=Cause.CALL_FAILED), now)  # fmt: skip
                continue
            self.inflight[p.resolving.key] = (i, now + wait + 0.5)

    def _failed(self, p: Peer, error: RdmacliError, now: float, again: float = 0.25) -> None:
        """An attempt that ended without the peer's QP number: its error is the pair's (the
        last one stands), and it is asked again `again` seconds later while the window lasts."""
        if p.resolving is not None:
            self.inflight.pop(p.resolving.key, None)
            try:
                p.resolving.destroy()
            except Exception:  # noqa: BLE001
                pass
            p.resolving = None
        p.error = error
        if now + again < self.resolve_end:
            heapq.heappush(self.asks, (now + again, p.index))

    def _cm_events(self) -> None:
        while (ev := self.channel.get()) is not None:
            if ev.type == C.CONNECT_REQUEST:  # a partner's SIDR: our QP number, if it is one
                child = cm.CmId(ev.raw_id, self.channel)
                got = T.parse(ev.private_data or b"")
                mine = got is not None and got.run == self.run_id and got.dst == self.nic
                ok = mine and got.src in self.by_nic
                try:
                    if ok:
                        child.accept(cm.ConnParam(qp_num=self.listen_id.qp_num))
                    else:
                        child.reject(b"rdmacli mesh: not a probe of this run")
                except Exception:  # noqa: BLE001 - the requester asks again
                    pass
                try:
                    child.destroy()
                except Exception:  # noqa: BLE001
                    pass
                continue
            if ev.id not in self.inflight:
                continue
            p = self.peers[self.inflight[ev.id][0]]
            now = time.time()
            try:
                if ev.type == C.ADDR_RESOLVED:
                    p.resolving.resolve_route(int(attempt_s(p.attempts) * 1000))
                elif ev.type == C.ROUTE_RESOLVED:
                    tok = T.Token(self.run_id, 0, self.nic, p.nic).pack()
                    p.resolving.connect(cm.ConnParam(private_data=b"\0" * T.OFFSET + tok,
                                                     qp_num=self.listen_id.qp_num))  # fmt: skip
                elif ev.type == C.ESTABLISHED and ev.ah_attr is not None:
                    p.ah = verbs.AH.from_attr(self.listen_id.pd, ev.ah_attr)
                    p.qpn, p.qkey, p.error, p.resolved = ev.ud_qp_num, ev.ud_qkey, None, True
                    self.inflight.pop(ev.id, None)
                    p.resolving.destroy()
                    p.resolving = None
                    self._schedule(p, now)
                else:  # ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, REJECTED: asked again after a pause
                    self._failed(p, event_error(ev, step="probe SIDR", local=self.address,
                                 remote=f"{p.address}:{p.port}", device=self.device), now)  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - this peer's attempt ends; it is asked again
                self._failed(p, exc if isinstance(exc, RdmacliError) else RdmacliError(
                    f"SIDR to {p.address}: {exc}", cause=Cause.CALL_FAILED), now)  # fmt: skip

    # -- probes out ---------------------------------------------------------------------------
    def _schedule(self, p: Peer, now: float) -> None:
        """A resolved peer's probes, spread over SPREAD of what is left of the send window (a
        busy host that falls behind catches up in the rest: each probe is due a step after the
        one before was due, not after it went)."""
        left = self.count - p.tally.sent
        if left > 0:
            p.step = max(SPREAD * (self.send_end - now) / left, GAP_S / 4, len(self.peers) / MAX_RATE)
            if p.cached:  # no SIDR spread these: a part of a step of this NIC's own, for all of them
                now += self.offset * p.step
            if self.native is not None:
                self.native.resolved(p.index, verbs_address(p.ah.ptr), p.qpn, p.qkey, int(p.step * 1e9),
                                     self._mono(now))  # fmt: skip
            else:
                heapq.heappush(self.due, (now, p.index))

    def _send_due(self, now: float) -> None:
        while self.due and self.due[0][0] <= now and self.free_sends:
            when, i = heapq.heappop(self.due)
            p = self.peers[i]
            if p.ah is None or now >= self.send_end or p.tally.sent >= self.count:
                continue
            slot = self.free_sends.pop()
            p.seq += 1
            t1 = time.perf_counter_ns()
            self.mr.write(Datagram(PROBE, self.run_id, p.seq, self.nic, p.nic, t1).pack(), slot * SLOT)
            try:
                verbs.post_send(self.listen_id.qp, slot, self.mr, slot * SLOT, PAYLOAD, ah=p.ah.ptr,
                                remote_qpn=p.qpn, remote_qkey=p.qkey)  # fmt: skip
            except Exception:  # noqa: BLE001 - a full queue: this probe is not sent, nor counted
                self.free_sends.append(slot)
                heapq.heappush(self.due, (now + p.step, i))
                return
            p.tally.posted(p.seq, t1)
            if p.tally.sent < self.count:
                heapq.heappush(self.due, (when + p.step, i))

    # -- completions: probes in (answered), replies in (counted), sends done --------------------
    def _completions(self) -> None:
        while True:
            wcs = self.cq.poll()
            # one time for the whole batch, taken as it came out of the CQ: a completion's
            # stamp must not include the handling of the ones before it (replies posted, AHs)
            t_in = time.perf_counter_ns()
            if not wcs:
                return
            again = []  # the batch's receive slots, posted again in one call
            for wc in wcs:
                if wc.wr_id >= self.recvs:  # a send's completion: its slot is free again
                    self.free_sends.append(wc.wr_id)
                    continue
                slot = wc.wr_id
                if wc.ok and wc.opcode == C.WC_RECV and wc.byte_len >= C.GRH_BYTES + SIZE:
                    data = self.mr.read(slot * SLOT + C.GRH_BYTES, SIZE)
                    d = parse(data)
                    if d is not None and d.run == self.run_id:
                        if d.kind == PROBE:
                            self._answer(d, wc, slot, t_in)
                        else:
                            self._counted(d, wc, t_in)
                if wc.status != C.WC_WR_FLUSH_ERR:
                    again.append(slot)
            try:
                verbs.post_recv_slots(self.listen_id.qp, self.mr, again, SLOT)
            except Exception:  # noqa: BLE001 - receives fewer; the queue is deep
                pass

    def _answer(self, d: Datagram, wc, slot: int, t2: int) -> None:
        """A partner's probe: its reply, the probe's fields back with our two stamps."""
        if d.dst != self.nic or d.src not in self.by_nic or not self.free_sends:
            return
        got = self.ahs.get(d.src)  # one AH a partner NIC: whatever claims to be it, bounded
        if got is None or got[0] != wc.src_qp:
            try:
                ah = verbs.AH.from_wc(self.listen_id.pd, wc, self.mr.addr + slot * SLOT, self.ib_port)
            except Exception:  # noqa: BLE001
                return
            if got is not None:
                got[1].destroy()
            got = self.ahs[d.src] = (wc.src_qp, ah)
        ah = got[1]
        out = self.free_sends.pop()
        t3 = time.perf_counter_ns()
        reply = Datagram(REPLY, self.run_id, d.seq, d.src, d.dst, d.t1, t2, t3)
        self.mr.write(reply.pack(), out * SLOT)
        try:
            verbs.post_send(self.listen_id.qp, out, self.mr, out * SLOT, PAYLOAD, ah=ah.ptr,
                            remote_qpn=wc.src_qp, remote_qkey=C.RDMA_UDP_QKEY)  # fmt: skip
        except Exception:  # noqa: BLE001
            self.free_sends.append(out)

    def _counted(self, d: Datagram, wc, t4: int) -> None:
        """A reply to one of our probes: from the QP the peer's SIDR named, for a probe we sent."""
        if d.src != self.nic:
            return
        p = self.by_nic.get(d.dst)
        if p is None or wc.src_qp != p.qpn:
            return
        hold = d.t3 - d.t2 if d.t3 >= d.t2 else -1
        p.tally.replied(d.seq, t4, hold)

    # -- what came of it ------------------------------------------------------------------------
    def results(self) -> list[tuple[Peer, str, RdmacliError | None]]:
        if self.native is not None:  # the native loop's counts and round trips are the tallies
            for p in self.peers:
                p.tally.sent, p.tally.answered, p.tally.host_ns, p.tally.net_ns = self.native.counts(p.index)
        return [(p, *verdict(p.tally, p.resolved, p.error, p.attempts)) for p in self.peers]


# ---- what the agent says: healthy partners compactly, trouble pair by pair ----------------------


def healthy(rec: dict, count: int) -> bool:
    """A pair record that says nothing a verdict needs beyond its round trips: passed, every
    one of the run's probes answered, no counters moved."""
    return (rec["result"] == "pass" and rec.get("probes_sent") == count
            and rec.get("probes_answered") == count and not rec.get("counters")
            and all(rec.get(k) is not None for k in ("rtt_p50_us", "rtt_p99_us", "host_rtt_p50_us",
                                                     "rtt_min_us")))  # fmt: skip


def compact(sched, count: int, recs: list[dict]) -> list:
    """The phase's records as the agent prints them (records.HealthyRecord, PairRecord): its
    healthy pairs a NIC at a time, four figures each, in the order of the schedule's tests
    (Schedule.nic_tests); every other pair in a record of its own. At 1000 nodes x 8 rails an
    agent's output is about 200 KB instead of 4 MB, and the coordinator's intake follows."""
    from rdmacli.mesh.records import HEALTHY_ENTRIES, HEALTHY_FIGURES, HealthyRecord, PairRecord

    out, cols = [], {}
    for rec in recs:
        if not healthy(rec, count):
            out.append(PairRecord(**rec))
            continue
        i = sched.nic_index(rec["rank"], rec["rail"], rec["peer"], rec["peer_rail"])
        if i is None:  # not a test of the schedule: said as it is, the coordinator judges
            out.append(PairRecord(**rec))
            continue
        cols.setdefault(rec["rail"], {})[i] = tuple(rec[k] for k in HEALTHY_FIGURES)
        run, rank = rec["run"], rec["rank"]
    for rail, entries in sorted(cols.items()):
        top = max(entries) + 1
        for first in range(min(entries) // HEALTHY_ENTRIES * HEALTHY_ENTRIES, top, HEALTHY_ENTRIES):
            none = (None,) * len(HEALTHY_FIGURES)
            span = [entries.get(i, none) for i in range(first, min(first + HEALTHY_ENTRIES, top))]
            if any(e[0] is not None for e in span):
                figures = dict(zip(HEALTHY_FIGURES, zip(*span)))
                out.append(HealthyRecord(run=run, rank=rank, rail=rail, round=0, first=first, probes=count,
                                         **figures))  # fmt: skip
    return out


# ---- the agent's phase: every rail at once ----------------------------------------------------


class Phase:
    """This node's probe phase (agent.AgentConfig; tests as schedule.Schedule.tests_of gives
    them: its rail, the partner, the partner's rail): one NicProbe a rail. The NICs are opened
    here, before the agent says it is ready, so that the coordinator's go means every NIC of the
    fabric listens with its receives posted: a phase that began while some agents were still
    opening (posting a thousand receives each, sixteen agents on two emulated CPUs) had their
    partners' SIDR windows end unanswered. A rail that cannot open has its problem said in
    `problems` (the agent's per-rail list), as the agent's preflight does."""

    def __init__(self, cfg, tests: list[tuple[int, int, int]], problems: list, *, stop=lambda: False,
                 keep: bool = False):  # fmt: skip
        self.keep = keep  # NICs stay open after a run, for next_window (`rdmacli watch`)
        self.stop = stop
        self.nics: dict[int, NicProbe] = {}
        self.next_window(cfg, tests, problems)

    def next_window(self, cfg, tests: list[tuple[int, int, int]], problems: list) -> None:
        """Take a window's tests: a NIC kept open from the window before (keep) goes on with its
        QP and what it knows of its partners (NicProbe.retarget) when its rail, address and port
        are the same; any other is closed; a rail not open is opened."""
        self.cfg, self.problems = cfg, problems
        self.by_rail: dict[int, list[Peer]] = {}
        for rail, peer, peer_rail in tests:
            self.by_rail.setdefault(rail, []).append(
                Peer(
                    peer,
                    peer_rail,
                    cfg.nic(peer, peer_rail),
                    cfg.address(peer, peer_rail),
                    cfg.port_of(peer_rail),
                )
            )
        run = bytes.fromhex(cfg.spec.run_id)
        for rail, nic in list(self.nics.items()):
            same = (nic.nic, nic.address, nic.port) == (cfg.nic(cfg.rank, rail), cfg.address(cfg.rank, rail),
                                                        cfg.port_of(rail))  # fmt: skip
            try:
                if not same or rail not in self.by_rail or problems[rail] is not None:
                    raise LookupError("not this window's")
                nic.retarget(run, self.by_rail[rail], cfg.spec.count)
            except Exception:  # noqa: BLE001 - closed; opened afresh below when it has tests
                self.drop(rail)
        for rail, peers in sorted(self.by_rail.items()):
            if problems[rail] is not None or rail in self.nics:
                continue
            nic = NicProbe(run=run, nic=cfg.nic(cfg.rank, rail), address=cfg.address(cfg.rank, rail),
                           port=cfg.port_of(rail), peers=peers, count=cfg.spec.count, begin=0.0, end=0.0,
                           stop=self.stop)  # fmt: skip
            self.nics[rail] = nic
            try:
                nic.open()
            except Exception as exc:  # noqa: BLE001 - the stack refused something: this rail's cause
                problems[rail] = exc if isinstance(exc, RdmacliError) else RdmacliError(
                    f"the probe could not open on {cfg.address(cfg.rank, rail)}: {exc}",
                    cause=Cause.CALL_FAILED,
                )  # fmt: skip
                self.drop(rail)

    def drop(self, rail: int) -> None:
        """Close one rail's NIC (the next window opens it afresh: after its link went down, or
        anything that went wrong)."""
        nic = self.nics.pop(rail, None)
        if nic is not None:
            nic.close()

    def run(self, begin: float, end: float) -> list[dict]:
        """Probe from `begin` to `end` on every open NIC, each in a thread (they are separate
        NICs); a pair record's fields for every test."""
        from rdmacli.mesh.config import at_once
        from rdmacli.mesh.pair import pair_record

        cfg = self.cfg

        def one(rail: int) -> list[dict]:
            peers = self.by_rail[rail]
            nic = self.nics.get(rail)
            out = []
            if nic is None:  # this NIC cannot probe: each pair says why
                for p in peers:
                    rec = pair_record(cfg, 0, 0, p.rank, rail, p.rail)
                    rec.update(result="fail", error=self.problems[rail].to_dict())
                    out.append(rec)
                return out
            failed = True
            try:
                nic.phase(begin, end)
                nic.run()
                results = nic.results()
                failed = False
            except RdmacliError as exc:
                results = [(p, "fail", exc) for p in peers]
            except Exception as exc:  # noqa: BLE001 - the stack refused something: every pair says what
                err = RdmacliError(f"the probe could not run on {cfg.address(cfg.rank, rail)}: {exc}",
                                   cause=Cause.CALL_FAILED)  # fmt: skip
                results = [(p, "fail", err) for p in peers]
            finally:
                if failed or not self.keep or self.stop():  # a NIC kept open only when all went well
                    nic.close()
            for p, result, error in results:
                rec = pair_record(cfg, 0, 0, p.rank, rail, p.rail)
                rec.update(p.tally.figures(), result=result, error=error.to_dict() if error else None)
                if nic.counters and (result != "pass" or p.tally.lost):
                    rec["counters"] = tuple(nic.counters)
                out.append(rec)
            return out

        out = [rec for recs in at_once(one, sorted(self.by_rail), None) for rec in recs]
        for rail in [r for r, nic in self.nics.items() if nic.listen_id is None]:  # closed by its run
            self.drop(rail)
        return out

    def close(self) -> None:
        """Whatever is still open (a run that ended before its phase); closing twice is harmless."""
        for nic in self.nics.values():
            nic.close()
