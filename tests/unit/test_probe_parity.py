"""The probe's two loops, said once: the native loop (probe.c, built as it ships with its verbs
and clock replaced by a script: probe_twin.c) and the Python loop (datagrams.PythonLoop, the same
script through its own fakes) are given the same completions at the same times, and must send the
same datagrams by the same AHs, make and retire the same AHs, post the same receives again and
come to the same counts and round trips. The script holds what a window meets: partners' probes
and answers, forgeries, a key holder's flood and its churn of QPs, a QP of another node with a
partner's QP number, answers nobody asked for, duplicates, a full send queue, flushed and short
receives, and the send window's end. Partner 1 is found by its GID (RoCE v2 over IPv4: a GRH
area holding an IPv4 header), partner 2 by its LID (InfiniBand, no GRH)."""

from __future__ import annotations

import errno
import heapq
import ipaddress
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
import twins

from rdmacli import native
from rdmacli.probe import datagrams
from rdmacli.probe import nic as nicprobe
from rdmacli.probe.timing import replaced_bound, replies_bound
from rdmacli.probe.wire import GRH_BYTES, PAYLOAD, PROBE, QKEY, REPLY, SLOT, Datagram, parse, partner_source
from rdmacli.rdma import constants as C
from rdmacli.rdma.handle import RdmaCallError
from rdmacli.rdma.verbs import WorkCompletion

HERE = os.path.dirname(os.path.abspath(__file__))
KEY, RUN = bytes(range(16)), b"\7" * 8
NIC, COUNT, RECVS, SENDS = 0, 40, 128, 128
PARTNERS = {1: 101, 2: 202}  # partner NIC -> the QP its SIDR named
PEER_AH = {1: 0x100, 2: 0x200}  # the AHs SIDR's answers made
HOME = {101: "10.0.0.1", 202: 0x22}  # where each partner's QP is: an IPv4 address (RoCE), a LID (IB)
ELSEWHERE = "10.0.0.66"  # every other QP's node
SOURCE = {1: partner_source(True, ipaddress.IPv6Address("::ffff:10.0.0.1").packed, 0),
          2: partner_source(False, bytes(16), 0x22)}  # as SIDR's AH says it  # fmt: skip
TWIN_AH_BASE = 4096  # probe_twin.h: made AH k is TWIN_AH_BASE + 16 k, in both loops
STEP_NS, DUE_NS, SEND_END_NS = 250_000_000, 1_000_000_000, 7_000_000_000
BATCH = 16  # a poll's completions, at most (probe.c's BATCH, verbs.CQ's)


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """probe.c on scripted verbs, compiled as _build compiles it."""
    return twins.build("probe_twin", str(tmp_path_factory.mktemp("twin")), ("probe.c",))


# -- the script ---------------------------------------------------------------------------
def dg(kind, seq, src, dst, t1=0, t2=0, t3=0, key=KEY, run=RUN) -> bytes:
    return Datagram(kind, run, seq, src, dst, t1, t2, t3).pack(key)


@dataclass
class Wc:
    """A completion of the script: a receive (its datagram's bytes, written to its slot), or a
    send's (`sends_done`: every send still in flight completes)."""

    payload: bytes = b""
    src_qp: int = 0
    at: str | int | None = None  # its node: an IPv4 address, a LID; None: HOME's, else ELSEWHERE
    status: int = C.WC_SUCCESS
    opcode: int = C.WC_RECV
    byte_len: int = GRH_BYTES + PAYLOAD
    wr_id: int | None = None  # a receive's slot is the script's next; set: this wr_id as it is
    sends_done: bool = False


@dataclass
class Turn:
    now_ns: int
    wcs: list[Wc] = field(default_factory=list)
    send_fails: int = 0  # the next sends refused (a full send queue)


def script() -> list[Turn]:
    """What one NIC's window meets, turn by turn (each partner's probes every STEP_NS from DUE_NS)."""
    forger = [Wc(dg(PROBE, k % 20 + 1, 1, NIC, 5), 666) for k in range(replies_bound(COUNT) + 12)]
    churn = [Wc(dg(PROBE, 1, 2, NIC, 5), 2000 + k) for k in range(replaced_bound(2) + 9)]
    return [
        Turn(DUE_NS),  # each partner's first probe
        Turn(
            DUE_NS + 100_000_000,
            [
                Wc(sends_done=True),
                Wc(dg(REPLY, 1, NIC, 1, 5, 70, 270), 101),  # partner 1's answer: hold 200 ns
                Wc(dg(PROBE, 1, 2, NIC, 11), 202),  # partner 2's probe: answered
                Wc(dg(PROBE, 2, 2, NIC, 11, key=b"another key 16 b"), 202),  # forged
                Wc(dg(REPLY, 1, NIC, 2, 5, 6, 7), 999),  # a good tag from a QP never probed: foreign
                Wc(dg(PROBE, 3, 1, NIC, 12), 666),  # a key holder claiming partner 1: answered
                Wc(dg(PROBE, 31, 1, NIC, 12), 101),  # partner 1's own probe
                Wc(dg(PROBE, 32, 1, NIC, 12), 101, at=ELSEWHERE),  # its QP number, another node's
                Wc(dg(REPLY, 1, NIC, 1, 5, 70, 270), 101),  # the same answer again: counted once
                Wc(dg(REPLY, 9, NIC, 2, 5, 6, 7), 202),  # an answer to a probe never sent
                Wc(dg(PROBE, 4, 2, NIC, 13, run=b"\1" * 8), 202),  # another window's
                Wc(dg(PROBE, 5, 2, NIC, 13), 202, byte_len=GRH_BYTES + 20),  # short
                Wc(dg(PROBE, 6, 2, NIC, 13), 202, status=C.WC_WR_FLUSH_ERR),  # flushed: not posted again
                Wc(dg(PROBE, 7, 2, 7, 13), 202),  # to another NIC
                Wc(dg(PROBE, 8, 5, NIC, 13), 505),  # from a NIC that is no partner
                Wc(dg(REPLY, 1, NIC, 2, 5, 6, 10**12), 202),  # a hold longer than the round trip
                Wc(b"not a datagram at all".ljust(PAYLOAD, b"\0"), 202),
                Wc(wr_id=RECVS + SENDS + 5),  # no wr_id of ours
            ],
        ),
        Turn(DUE_NS + STEP_NS, [Wc(sends_done=True)], send_fails=1),  # partner 1's second probe refused
        Turn(DUE_NS + STEP_NS + 50_000_000, [Wc(sends_done=True), *forger[:60]]),  # it goes now
        Turn(DUE_NS + 2 * STEP_NS, [Wc(sends_done=True), *forger[60:]]),  # the flood past its bound
        Turn(DUE_NS + 2 * STEP_NS + 1, [Wc(sends_done=True), *churn[:40]]),
        Turn(
            DUE_NS + 3 * STEP_NS,
            [Wc(sends_done=True), *churn[40:], Wc(dg(REPLY, 3, NIC, 1, 5, 6, 7), 101, at=ELSEWHERE)],
        ),  # foreign
        Turn(
            DUE_NS + 3 * STEP_NS + 300_000,
            [
                Wc(sends_done=True),
                Wc(dg(REPLY, 2, NIC, 1, 5, 1000, 1100), 101),
                Wc(dg(REPLY, 3, NIC, 2, 5, 1000, 1000), 202),
                Wc(dg(REPLY, 4, NIC, 1, 5, 900, 800), 101),  # t3 before t2: no hold taken out
            ],
        ),
        Turn(SEND_END_NS - 1, [Wc(sends_done=True)]),  # the send window's last moment: catching up
        Turn(SEND_END_NS + STEP_NS, [Wc(sends_done=True)]),  # after it: nothing more leaves
    ]


# -- the two loops, each on the script ------------------------------------------------------
@dataclass
class Seen:
    sends: list[list[tuple]] = field(default_factory=list)  # a turn's: (ah, qpn, qkey, datagram)
    reposted: list[int] = field(default_factory=list)
    ahs_made_for: list[int] = field(default_factory=list)
    retired: int = 0
    released: set[int] = field(default_factory=set)  # the AHs destroyed at the window's end
    counts: dict[int, tuple] = field(default_factory=dict)  # partner NIC -> sent, answered, host, net
    replies: dict[int, tuple] = field(default_factory=dict)
    forged: int = 0
    foreign: int = 0


def grh(at: str) -> bytes:
    """A receive's GRH area as rxe and mlx5 fill it for RoCE v2 over IPv4: 20 zero bytes, then
    the IPv4 header (here its version, length and source address)."""
    ip = bytearray(20)
    ip[0], ip[12:16] = 0x45, ipaddress.IPv4Address(at).packed
    return bytes(20) + bytes(ip)


def completions(turn: Turn, inflight: list[int], next_slot: list[int], write) -> list[WorkCompletion]:
    out = []
    for w in turn.wcs:
        if w.sends_done:
            out += [WorkCompletion(s, C.WC_SUCCESS, C.WC_SEND, PAYLOAD, None, 0, 0) for s in inflight]
            inflight.clear()
            continue
        slot, at = w.wr_id, w.at if w.at is not None else HOME.get(w.src_qp, ELSEWHERE)
        if slot is None:
            slot = next_slot[0] % RECVS
            next_slot[0] += 1
            write(slot * SLOT + GRH_BYTES, w.payload)
            if isinstance(at, str):
                write(slot * SLOT, grh(at))
        lid = at if isinstance(at, int) else 0
        out.append(
            WorkCompletion(slot, w.status, w.opcode, w.byte_len, None, 0, w.src_qp, grh=lid == 0, slid=lid)
        )
    return out


def sent_record(ah, qpn, qkey, payload) -> tuple:
    d = parse(bytes(payload), KEY)
    return (ah, qpn, qkey, (d.kind, d.seq, d.src, d.dst, d.t1, d.t2, d.t3))


def twin_loop(twin, monkeypatch, count: int, partners: list[int]):
    """A native ProbeLoop on the scripted extension, and a writer into its buffer (which the
    writer keeps alive)."""
    monkeypatch.setitem(native._state, "lib", (twin.ffi, twin.lib))
    ffi = twin.ffi
    buf = ffi.new("unsigned char[]", (RECVS + SENDS) * SLOT)
    loop = native.ProbeLoop(
        1, 2, 3, run=RUN, key=KEY, nic=NIC, count=count, recvs=RECVS, sends=SENDS,
        buf=(int(ffi.cast("uintptr_t", buf)), 9), port_num=1, partners=partners,
        replaced=replaced_bound(len(partners)), max_replies=replies_bound(count),
    )  # fmt: skip

    def write(off: int, data: bytes) -> None:
        ffi.memmove(buf + off, data, len(data))

    return loop, write


def twin_turn(twin, loop, wcs: list[WorkCompletion], now_ns: int, send_fails: int = 0) -> list:
    """One turn of probe.c on the script: `wcs` polled, the clock at now_ns; the sends it made."""
    t = twin.lib.twin
    t.nwc, t.polled, t.nsent, t.send_fails, t.now_ns = len(wcs), 0, 0, send_fails, now_ns
    for k, wc in enumerate(wcs):
        w = t.wc[k]
        w.wr_id, w.status, w.opcode = wc.wr_id, wc.status, wc.opcode
        w.byte_len, w.src_qp = wc.byte_len, wc.src_qp
        w.wc_flags, w.slid = C.WC_GRH if wc.grh else 0, wc.slid
    loop.state.send_end_ns = SEND_END_NS
    twin.lib.rdmacli_probe_turn(loop.qp, loop.cq, loop.state)
    assert loop.state.status == 0
    return [t.sent[k] for k in range(t.nsent)]


def run_native(twin, monkeypatch) -> Seen:
    t = twin.lib.twin
    loop, write = twin_loop(twin, monkeypatch, COUNT, list(PARTNERS))
    for i, (partner, qpn) in enumerate(PARTNERS.items()):
        loop.resolved(i, PEER_AH[partner], qpn, QKEY, SOURCE[partner], STEP_NS, DUE_NS)
    seen, inflight, next_slot = Seen(), [], [0]
    for turn in script():
        wcs = completions(turn, inflight, next_slot, write)
        turn_sends = []
        for s in twin_turn(twin, loop, wcs, turn.now_ns, turn.send_fails):
            assert s.length == PAYLOAD
            turn_sends.append(sent_record(s.ah, s.qpn, s.qkey, twin.ffi.buffer(s.payload)))
            inflight.append(s.wr_id)
        seen.sends.append(turn_sends)
    seen.reposted = list(t.reposted[0 : t.nreposted])
    seen.ahs_made_for = list(t.ah_qpn[0 : t.nahs])
    seen.retired = loop.state.nretired
    seen.forged, seen.foreign = loop.state.forged, loop.state.foreign
    for i, partner in enumerate(PARTNERS):
        sent, answered, host, net = loop.counts(i)
        seen.counts[partner] = (sent, answered, host, net)
        seen.replies[partner] = tuple(loop.peers[i].replies)
    t.ndestroyed = 0
    loop.release()
    seen.released = set(t.destroyed[0 : t.ndestroyed])
    return seen


def run_python(monkeypatch) -> Seen:
    peers = [nicprobe.Peer(partner, 0, partner, f"10.0.0.{partner}", 7490) for partner in PARTNERS]
    nic = nicprobe.NicProbe(run=RUN, key=KEY, nic=NIC, address="10.0.0.9", port=7490, peers=peers,
                            count=COUNT, begin=0.0, end=10.0)  # fmt: skip
    assert nic.send_end == SEND_END_NS / 1e9
    buf = bytearray((RECVS + SENDS) * SLOT)
    seen, inflight, next_slot = Seen(), [], [0]
    clock, pending, refuse, turn_sends = [0], [], [0], []

    def write(off, data):
        buf[off : off + len(data)] = data

    def post_send(qp, wr_id, mr, off, n, *, ah, remote_qpn, remote_qkey, **kw):
        if refuse[0]:
            refuse[0] -= 1
            raise RdmaCallError("ibv_post_send", errno.ENOMEM)  # the send queue is full
        assert n == PAYLOAD
        turn_sends.append(sent_record(ah, remote_qpn, remote_qkey, buf[off : off + n]))
        inflight.append(wr_id)

    def from_wc(pd, wc, grh, port):
        seen.ahs_made_for.append(wc.src_qp)
        ptr = TWIN_AH_BASE + 16 * (len(seen.ahs_made_for) - 1)
        return SimpleNamespace(ptr=ptr, destroy=lambda: None)

    def poll():
        batch, pending[:] = pending[:BATCH], pending[BATCH:]
        return batch

    monkeypatch.setattr(datagrams, "time", SimpleNamespace(perf_counter_ns=lambda: clock[0]))
    monkeypatch.setattr(datagrams.verbs, "post_send", post_send)
    monkeypatch.setattr(
        datagrams.verbs, "post_recv_slots", lambda qp, mr, slots, n: seen.reposted.extend(slots)
    )
    monkeypatch.setattr(datagrams.verbs.AH, "from_wc", from_wc)
    nic.recvs, nic.sends, nic.free_sends = RECVS, SENDS, list(range(RECVS, RECVS + SENDS))
    nic.mr = SimpleNamespace(read=lambda off, n: bytes(buf[off : off + n]),
                             write=lambda data, off: write(off, data), addr=0)  # fmt: skip
    nic.listen_id = SimpleNamespace(qp=None, pd=None, own=lambda ah: ah)
    nic.cq = SimpleNamespace(poll=poll)
    for p in peers:
        p.ah, p.qpn, p.qkey, p.resolved = SimpleNamespace(ptr=PEER_AH[p.nic]), PARTNERS[p.nic], QKEY, True
        p.source = SOURCE[p.nic]
        p.step = STEP_NS / 1e9
        heapq.heappush(nic.due, (DUE_NS / 1e9, p.index))
    for turn in script():
        pending[:] = completions(turn, inflight, next_slot, write)
        clock[0], refuse[0], turn_sends = turn.now_ns, turn.send_fails, []
        nic._datagrams(turn.now_ns / 1e9)
        seen.sends.append(turn_sends)
    seen.retired = nic.replaced
    seen.forged, seen.foreign = nic.forged, nic.foreign
    for p in peers:
        t = p.tally
        seen.counts[p.nic] = (t.sent, t.answered, t.host_ns, t.net_ns)
        seen.replies[p.nic] = tuple(p.replies)
    seen.released = {ah.ptr for ah in nic.retired} | {v[-1].ptr for v in nic.ahs.values()}
    return seen


def ordered(sends: list[list[tuple]]) -> list[list[tuple]]:
    """A turn's sends as a set: C walks its partners in turn, Python's heap takes the earliest
    due first (a loop catching up sends the same probes in another order)."""
    return [sorted(turn) for turn in sends]


def test_the_native_and_the_python_loop_given_one_script_do_the_same(twin, monkeypatch):
    c = run_native(twin, monkeypatch)
    py = run_python(monkeypatch)
    # the script did what it says: every kind of thing happened
    assert c.counts[1][1] == 3 and c.counts[2][1] >= 2, c.counts  # answers counted, never another node's
    replied = {s[3][1]: s[0] for turn in c.sends for s in turn if s[3][0] == REPLY}  # seq -> its AH
    assert replied[32] != replied[31]  # a QP of the partner's number elsewhere: never its AH
    assert c.forged == 1 and c.foreign > 20, (c.forged, c.foreign)  # forgeries, the flood, the churn
    assert c.replies[1][1] == replies_bound(COUNT)  # the flood answered up to its bound, no further
    assert c.retired == replaced_bound(len(PARTNERS))  # the churn's AHs retired up to theirs
    assert any(not turn for turn in c.sends[-1:]) and any(c.sends)  # nothing after the send window
    assert RECVS + SENDS + 5 not in c.reposted
    # and the two loops did it alike
    assert [len(turn) for turn in c.sends] == [len(turn) for turn in py.sends]
    assert ordered(c.sends) == ordered(py.sends)
    assert c.reposted == py.reposted
    assert c.ahs_made_for == py.ahs_made_for
    assert c.retired == py.retired
    assert (c.forged, c.foreign) == (py.forged, py.foreign)
    assert c.replies == py.replies
    assert c.counts == py.counts
    assert c.released == py.released


@pytest.mark.parametrize("told", [True, False])
def test_a_partner_known_from_the_window_before_is_answered_before_the_begin_whatever_claims_it(
    twin, monkeypatch, told
):
    """Issue 52: a window's loop learnt its partners' QPs only at the window's begin; a partner's
    probes before it (a responder late to its own window) shared the other-QP slot with a key
    holder's flood in its name, and went unanswered past that slot's bound. A partner known from
    the window before is told to the loop as the window is set up (NicProbe.retarget: `expect`)."""
    loop, write = twin_loop(twin, monkeypatch, 4, [1])
    if told:
        loop.expect(0, 101, SOURCE[1])
    flood = [Wc(dg(PROBE, k % 20 + 1, 1, NIC, 5), 666) for k in range(replies_bound(4) + 4)]
    partner = Wc(dg(PROBE, 1, 1, NIC, 5), 101)  # after the flood
    wcs = completions(Turn(10, [*flood, partner]), [], [0], write)
    answered = [s.qpn for s in twin_turn(twin, loop, wcs, 10)]
    assert answered.count(666) == replies_bound(4)  # the flood: up to its bound
    assert (101 in answered) is told  # the partner: answered when the loop was told of it
    loop.release()


def test_a_window_set_up_tells_its_loops_the_partners_it_knew(monkeypatch):
    """NicProbe.retarget hands each known partner's QP to the Python loop (Peer.qpn) and to the
    native loop (`expect`) before the window begins; a partner it did not know gets none."""
    told = []
    fake = SimpleNamespace(
        release=lambda: None, free_slots=lambda: [], expect=lambda i, q, s: told.append((i, q, s))
    )
    monkeypatch.setattr(nicprobe, "native_loop", lambda nic, recvs, sends, free=None: fake)
    peers = [nicprobe.Peer(k, 0, k, f"10.0.0.{k}", 7490) for k in (1, 2)]
    nic = nicprobe.NicProbe(run=RUN, key=KEY, nic=NIC, address="10.0.0.9", port=7490, peers=peers, count=4,
                            begin=0.0, end=10.0)  # fmt: skip
    nic.native, nic.recvs, nic.sends = fake, RECVS, SENDS
    for p, qpn in zip(peers, (101, 202)):
        p.ah, p.qpn, p.resolved, p.source = SimpleNamespace(ptr=p.nic), qpn, True, SOURCE[p.nic]
    peers[0].tally.answered = 1  # only partner 1 answered this window
    monkeypatch.setattr(nicprobe.counters, "read", lambda *a: {})
    fresh = [nicprobe.Peer(k, 0, k, f"10.0.0.{k}", 7490) for k in (1, 2)]
    nic.retarget(b"\2" * 8, fresh, 4)
    assert [p.qpn for p in fresh] == [101, 0] and told == [(0, 101, SOURCE[1])]
    assert [p.source for p in fresh] == [SOURCE[1], b""]
