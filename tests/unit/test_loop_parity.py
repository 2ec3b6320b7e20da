"""lat's and bw's two loops, said once (issue 51): the native loops (lat.c, bw.c, built as they
ship with their verbs and clocks replaced by a scripted peer: loops_twin.c) and the Python loops
(protocols/lat.py's LatClient, protocols/bw.py's Stream: what runs where the extension is not
built, RDMACLI_DATA_PATH=python) face the same peer, whose answers and completions land when the
script says, and must come to the same figures: lat's round trips and holds, host and network
(a hold that leaves less than the floor ignored), with send completions late and early; bw's
chains, in-flight window, count and completions. The probe's loops have their own
(test_probe_parity.py)."""

from __future__ import annotations

import heapq
import itertools
import os
import struct
from types import SimpleNamespace

import pytest
import twins

from rdmacli import native
from rdmacli.protocols import bw as B
from rdmacli.protocols import lat as L
from rdmacli.protocols.window import sends_in
from rdmacli.rdma import constants as C

HERE = os.path.dirname(os.path.abspath(__file__))
START_NS = 1_000_000_000
BIG_S = 10**6  # a slice and a deadline the scripts never reach


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """lat.c and bw.c on a scripted peer, compiled as _build compiles them."""
    return twins.build("loops_twin", str(tmp_path_factory.mktemp("loops")), ("lat.c", "bw.c"))


def fresh(twin, mode: int, send_done: list[int], rtt=(), hold=(), recv_addr: int = 0) -> None:
    t = twin.lib.lt
    size = twin.ffi.sizeof("struct loops_twin")
    twin.ffi.memmove(twin.ffi.addressof(t), bytes(size), size)
    t.now_ns, t.idle_step_ns, t.mode = START_NS, 1_000_000, mode
    for i, v in enumerate(send_done):
        t.send_done[i] = v
    for i, (r, h) in enumerate(zip(rtt, hold)):
        t.rtt[i], t.hold[i] = r, h
    t.recv_addr, t.recv_wr_id = recv_addr, L.RECV


class Peer:
    """The twin's peer in Python: what each post brings back, and when (ties: as scheduled)."""

    def __init__(self, send_done, rtt=(), hold=()):
        self.send_done, self.rtt, self.hold = list(send_done), list(rtt), list(hold)
        self.now, self.posts, self.events, self.seq = START_NS, [], [], itertools.count()
        self.recvs_posted = 0

    def post(self, wr_id: int, n: int, opcode: int, length: int, answer: bool) -> None:
        i = len(self.posts)
        self.posts.append((self.now, wr_id, n, opcode, length))
        done_op = C.WC_SEND if opcode == C.WR_SEND else C.WC_RDMA_WRITE
        heapq.heappush(self.events, (self.now + self.send_done[i], next(self.seq), wr_id, done_op, 0))
        if answer:
            heapq.heappush(
                self.events, (self.now + self.rtt[i], next(self.seq), L.RECV, C.WC_RECV, self.hold[i])
            )

    def next(self):
        at, _, wr_id, opcode, hold = heapq.heappop(self.events)
        self.now = max(self.now, at)
        return SimpleNamespace(wr_id=wr_id, opcode=opcode, status=0, hold=hold)


# -- lat ------------------------------------------------------------------------------------
# each exchange: the answer's round trip, the hold it carries, when our send completes (ns)
EXCHANGES = [
    (30_000, 5_000, 2_000),
    (31_000, 0, 2_000),
    (29_500, 2_000, 45_000),  # our send completes after its answer (its ACK late)
    (100_000, 99_600, 1_000),  # a hold that leaves less than the floor (500 ns): not believed
    (100_000, 99_400, 1_000),  # one that leaves more: believed
    (25_000, 25_000, 3_000),  # a hold as long as the round trip: not believed
    (40_000, 1_000, 90_000),  # late again, across the next exchanges
    (26_000, 30_000, 2_000),  # a hold longer than the round trip
    (27_000, 4_000, 2_000),
    (28_000, 4_000, 27_999),  # completes a nanosecond before its answer
    (33_000, 4_000, 33_000),  # at the same moment as its answer
]
# a NIC that acknowledges late (coalesced ACKs): every send's completion 400 us after it, while
# the answers come in 30: more sends outstanding than the send queue was made for
LATE_ACKS = [(30_000 + 100 * i, 1_000, 400_000) for i in range(20)]


def python_lat(monkeypatch, size: int, exchanges) -> L.LatClient:
    rtt, hold, done = zip(*exchanges)
    peer = Peer(done, rtt, hold)
    monkeypatch.setattr(L, "time", SimpleNamespace(perf_counter=lambda: peer.now / 1e9,
                                                    monotonic=lambda: peer.now / 1e9))  # fmt: skip
    client = L.LatClient("send", size, len(exchanges))
    buf = bytearray(64)
    client.send_mr = SimpleNamespace(addr=1)
    client.recv_mr = SimpleNamespace(read=lambda off, n: bytes(buf[off : off + n]))
    ended = []

    def post_recv(wr_id, mr, off, length, n=1):
        peer.recvs_posted += n

    conn = SimpleNamespace(
        last_event=None,
        post_send=lambda wr_id, mr, off, length, **kw: peer.post(wr_id, 1, C.WR_SEND, length, True),
        post_recv=post_recv,
        native_handles=lambda: None,
        disconnect=lambda: ended.append(True),
    )
    client.on_established(conn)
    while not ended:
        wc = peer.next()
        if wc.opcode == C.WC_RECV and size >= 8:
            buf[:8] = struct.pack(">Q", wc.hold)
        client.on_wc(conn, wc)
    client.peer = peer
    return client


def native_lat(twin, monkeypatch, size: int, exchanges) -> tuple[L.LatClient, native.Slice]:
    rtt, hold, done = zip(*exchanges)
    ffi = twin.ffi
    send, recv = ffi.new("unsigned char[]", 64), ffi.new("unsigned char[]", 64)  # the twin writes 8
    fresh(twin, 1, done, rtt, hold, int(ffi.cast("uintptr_t", recv)))
    monkeypatch.setitem(native._state, "lib", (ffi, twin.lib))
    qp, cq = (int(ffi.cast("uintptr_t", h)) for h in (twin.lib.lt_qp(), twin.lib.lt_cq()))
    twin.lib.lt.calibrating = 1
    loop = native.LatLoop(qp, cq, op=L.OPS["send"], size=size, send=(int(ffi.cast("uintptr_t", send)), 1),
                          recv=(int(ffi.cast("uintptr_t", recv)), 2), remote=None, max_inline=0,
                          max_sends=L.SEND_DEPTH - L.DEPTH, send_wr_id=L.NATIVE_SEND, recv_wr_id=L.RECV,
                          spin_s=None)  # fmt: skip
    s = loop.state
    twin.lib.lt.calibrating, twin.lib.lt.now_ns = 0, START_NS  # one cycle a ns from here
    s.ns_per_cycle, s.cal_ns, s.cal_cycles = 1.0, 0, 0
    client = L.LatClient("send", size, len(exchanges))
    sl = loop.client(len(exchanges), BIG_S, BIG_S)
    for r, h in zip(sl.rtt_ns, sl.hold_ns):  # as LatClient.native_slice notes a slice
        client.note(r / 1e9, h / 1e9)
    client.slice, client.keep = sl, (send, recv)
    return client, sl


def ns(stats) -> list[int]:
    """A loop's samples in ns (Python's are differences of float seconds: equal to the ns)."""
    return [round(x * 1e9) for x in stats.sample]


@pytest.mark.parametrize("size,exchanges", [(64, EXCHANGES), (4, EXCHANGES), (64, LATE_ACKS)])
def test_lat_both_loops_measure_the_same_round_trips(twin, monkeypatch, size, exchanges):
    """Every round trip and hold, the host's and the network's, alike; each message posted at
    the same moment (with late ACKs, both hold the next one until the send queue has room);
    the native loop ends with nothing in flight (every send's completion reaped, however
    late), having posted as many messages and receives as the Python loop."""
    py = python_lat(monkeypatch, size, exchanges)
    c, sl = native_lat(twin, monkeypatch, size, exchanges)
    t = twin.lib.lt
    assert sl.status == native.OK, sl
    assert py.host.n == c.host.n == len(exchanges)
    assert ns(py.host) == ns(c.host) == [r for r, _, _ in exchanges]
    assert ns(py.network) == ns(c.network)
    if size >= 8:  # the unbelievable holds are not taken out, the rest are
        want = [r - h if h <= r - round(L.RTT_FLOOR_S * 1e9) else r for r, h, _ in exchanges]
    else:
        want = [r for r, _, _ in exchanges]
    assert ns(c.network) == want
    assert t.nev == 0  # every completion reaped
    assert [p.at for p in t.posts[0 : t.nposts]] == [at for at, *_ in py.peer.posts]
    if exchanges is LATE_ACKS:  # the queue's room was waited for: a post as an old send completed
        at = [a for a, *_ in py.peer.posts]
        assert any(b + 400_000 in at for b in at)
    assert t.recvs_posted == py.peer.recvs_posted


# -- bw -------------------------------------------------------------------------------------
def stream_script(n_posts: int) -> list[int]:
    """When each chain completes after its post: steady, then a slow one, then a burst."""
    return [10_000 + (500_000 if i == 3 else 0) + (i % 5) * 1_000 for i in range(n_posts)]


def python_bw(monkeypatch, window: int, count: int) -> B.Stream:
    peer = Peer(stream_script(1024))
    monkeypatch.setattr(B, "time", SimpleNamespace(monotonic=lambda: peer.now / 1e9))
    stream = B.Stream("write", 4096, window, count)
    stream.remote = (0x1000, 7)
    conn = SimpleNamespace(
        post_send=lambda wr_id, mr, off, length, n=1, **kw: peer.post(wr_id, n, kw["opcode"], length, False)
    )
    stream.start()
    stream.post(conn, None)
    while not stream.finished():
        wc = peer.next()
        stream.completion(wc)
        stream.post(conn, None)  # BwClient.turn feeds the stream after each completion
    stream.peer = peer
    return stream


@pytest.mark.parametrize("window,count", [(128, 1000), (40, 333), (16, 16), (7, 100)])
def test_bw_both_loops_post_the_same_chains_and_count_the_same(twin, monkeypatch, window, count):
    """A one-way WRITE stream: the same chains posted (when, how long, the last signaled and
    naming its length), never more than the window in flight, the count exact, every
    completion counted; the native loop reports done only when all have completed."""
    py = python_bw(monkeypatch, window, count)
    ffi = twin.ffi
    buf = ffi.new("unsigned char[]", 4096)
    fresh(twin, 2, stream_script(1024))
    monkeypatch.setitem(native._state, "lib", (ffi, twin.lib))
    qp, cq = (int(ffi.cast("uintptr_t", h)) for h in (twin.lib.lt_qp(), twin.lib.lt_cq()))
    loop = native.BwLoop(qp, cq, opcode=C.WR_RDMA_WRITE, size=4096, buf=(int(ffi.cast("uintptr_t", buf)), 1),
                         remote=(0x1000, 7), window=window, chain=B.CHAIN, limit=count)  # fmt: skip
    done, sl = loop.stream(0, None, BIG_S, BIG_S)
    t = twin.lib.lt
    assert done and sl.status == native.OK, sl
    posts = [(p.at, p.wr_id, p.n, p.opcode, p.length) for p in t.posts[0 : t.nposts]]
    assert posts == py.peer.posts
    assert all(p.signaled == 1 and sends_in(p.wr_id) == p.n for p in t.posts[0 : t.nposts])
    assert all(p.remote_addr == 0x1000 and p.rkey == 7 for p in t.posts[0 : t.nposts])
    assert loop.state.posted == loop.state.completed == py.posted == py.completed == count
    inflight, peak = 0, 0  # the window, replayed from the posts and their completions
    done = [(a + d, 0, n) for (a, _, n, _, _), d in zip(posts, stream_script(1024))]
    for _, kind, n in sorted([(a, 1, n) for a, _, n, _, _ in posts] + done):  # a completion first at a tie
        inflight += n if kind else -n
        peak = max(peak, inflight)
    assert peak <= window


def test_lat_a_slice_handed_back_leaves_its_sends_counted(monkeypatch):
    """A native slice that hands its exchange back (a late answer past its deadline) may leave
    sends of its own not yet completed: they hold the send queue as the Python loop's own do,
    so its next message waits for one of them to complete, as the native loop would."""
    now = [START_NS]
    monkeypatch.setattr(L, "time", SimpleNamespace(perf_counter=lambda: now[0] / 1e9,
                                                    monotonic=lambda: now[0] / 1e9))  # fmt: skip
    client = L.LatClient("send", 64, 100)
    buf = bytearray(64)
    client.send_mr = SimpleNamespace(addr=1)
    client.recv_mr = SimpleNamespace(read=lambda off, n: bytes(buf[off : off + n]))
    posts = []
    conn = SimpleNamespace(
        finished=False, disconnect_sent=False, flow=SimpleNamespace(timeouts=SimpleNamespace(idle_s=1.0)),
        progress=lambda: None, post_send=lambda *a, **kw: posts.append(now[0]),
        post_recv=lambda *a, **kw: None, native_handles=lambda: None,
    )  # fmt: skip
    client.iterations = 1  # the first exchange was Python's, then the native loop's slices
    handed = native.Slice((30_000,), (0,), 0, native.DEADLINE, 0, 0, 0)
    state = SimpleNamespace(t_post=START_NS, sends_out=L.MAX_SENDS)
    client.native = SimpleNamespace(client=lambda *a: handed, state=state)
    client.native_slice(conn)
    assert client.native is None and client.sends_out == L.MAX_SENDS
    now[0] += 50_000
    client.on_wc(conn, SimpleNamespace(wr_id=L.RECV, opcode=C.WC_RECV, status=0))  # the late answer
    assert posts == []  # the send queue is full of the native loop's sends: held
    now[0] += 10_000
    client.on_wc(conn, SimpleNamespace(wr_id=L.NATIVE_SEND, opcode=C.WC_SEND, status=0))
    assert posts == [START_NS + 60_000]  # one completed: the next message goes
