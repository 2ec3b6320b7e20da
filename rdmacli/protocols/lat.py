"""`rdmacli lat`: latency, perftest's ib_send_lat / ib_write_lat job, rdmacli to rdmacli.

A ping-pong of `size`-byte messages: the client sends, the server answers each one as soon as
its completion is polled, the client times the round trip. `--op send` is SEND/RECV; `--op
write` is RDMA WRITE with immediate into the peer's advertised buffer (the immediate raises a
completion at the responder: rdmacli's loop learns of data by completions, not by polling
memory as ib_write_lat does). Busy-polled by default.

The data path: where rdmacli.native is built and the connection's CQ is its own, the
ping-pong after the first exchange runs in C (rdmacli/native/lat.c), in slices of
SLICE_S between which the engine's loop turns (CM events, deadlines, signals); the figures say
which path measured (`data_path`). Messages up to perftest's inline sizes go inline there.

Beyond perftest: the responder measures its own hold time (its receive completion polled to its
reply posted, on its clock) and carries it back in the first 8 bytes of the reply, so the client
reports the network round trip (host RTT minus the responder's hold) next to the host's. What
the responder carries is untrusted: a hold that leaves less than a wire's round trip (RTT_FLOOR_S)
is ignored.
"""

from __future__ import annotations

import struct
import time
from dataclasses import replace

from rdmacli import native as N
from rdmacli.engine.protocol import Protocol, stopped_like_ping
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import RTT_FLOOR_US, LatFigures, LatServed, Percentiles, network_rtt, percentile
from rdmacli.protocols import hello as H
from rdmacli.protocols.rping import INFO, RttStats, advertised, pack_info
from rdmacli.protocols.slices import go_on, later
from rdmacli.protocols.table import LAT
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

OPS = {"send": 0, "write": 1}
OP_NAMES = {v: k for k, v in OPS.items()}
RECV, SEND = 0, 1
NATIVE_SEND = 2  # the native loop's sends: their completions are its own (Python's are SEND)
HOLD = struct.Struct(">Q")  # the responder's hold time in ns, first 8 bytes of each reply
RTT_FLOOR_S = RTT_FLOOR_US / 1e6  # a responder's hold that would leave less is not believed
DEPTH = 2  # receives kept posted: the next one is always there before the peer sends
SEND_DEPTH = 8  # sends: one an exchange, and room for those whose ACK is late (the native
# loop posts the next message when the answer is in, its send's completion may come later)
MAX_SENDS = SEND_DEPTH - DEPTH  # a loop's sends in flight, either loop's (room for the other's)
INLINE = {"send": 236, "write": 220}  # perftest's default inline sizes (RC), asked of the device
SLICE_S = 0.05  # a native slice: the engine's loop turns between two (deadlines, CM, signals)
SLICE_CAP = 1 << 16  # round trips a native slice may return (its buffers: 1 MiB)
SERVER_IDLE_S = 0.02  # a native responder hands the CQ back after this long without a message
# without --busy-poll (the mesh's pairs), a native wait spins this long, then sleeps on the CQ's
# completion channel: far more than a hardware round trip (2 µs), and the CPU is given up to a
# partner that shares it (the lab's emulated nodes; eight rails' tests on one host)
SPIN_S = 100e-6


class _PingPong(Protocol):
    name = "lat"
    nic_clock = False  # its CQ with the NIC's completion timestamps, where the device has them

    def __init__(self, op: str = "send", size: int = LAT.default_size):
        self.op, self.size = op, size
        self.send_mr = self.recv_mr = None
        self.remote: tuple[int, int] | None = None
        self.native: N.LatLoop | None = None  # the native loop, once this QP may use one
        self.clock: N.NicClock | None = None  # how the native loop times completions
        self.native_count = 0  # exchanges the native loop did (the rest: Python's)

    def pinned_bytes(self) -> int:
        return 2 * self.size

    def setup(self, conn) -> None:
        inline = self.size if self.size <= INLINE[self.op] else 0
        conn.create_qp(qp_type=C.QPT_RC, send_wr=SEND_DEPTH, recv_wr=DEPTH, inline=inline,
                       nic_clock=self.nic_clock)  # fmt: skip
        self.send_mr = conn.reg(self.size)
        access = C.ACCESS_LOCAL_WRITE | (C.ACCESS_REMOTE_WRITE if self.op == "write" else 0)
        self.recv_mr = conn.reg(self.size, access)
        conn.post_recv(RECV, self.recv_mr, 0, self.size, n=DEPTH)

    def send(self, conn) -> None:
        if self.op == "write":
            addr, rkey = self.remote
            conn.post_send(SEND, self.send_mr, 0, self.size, opcode=C.WR_RDMA_WRITE_WITH_IMM,
                           imm=0, remote_addr=addr, rkey=rkey)  # fmt: skip
        else:
            conn.post_send(SEND, self.send_mr, 0, self.size)

    def received(self, conn, wc) -> bool:
        """A message arrived (its receive is reposted); False for our own send's completion."""
        if not wc.opcode & C.WC_RECV:
            return False
        conn.post_recv(RECV, self.recv_mr, 0, self.size)
        return True

    def learn_remote(self, conn, data: bytes, who: str) -> None:
        if self.op == "write":
            self.remote = advertised(conn, data, self.size, who, "lat")

    def advert(self) -> bytes:
        return pack_info(self.recv_mr.addr, self.recv_mr.rkey, self.size) if self.op == "write" else b""

    def native_loop(self, conn) -> N.LatLoop | None:
        """The native loop for this QP, when it can be had (built, and the CQ is this QP's)."""
        if self.native is None:
            handles = conn.native_handles()
            if handles is not None:
                self.clock = conn.cq.clock
                self.native = N.LatLoop(
                    *handles, op=OPS[self.op], size=self.size, send=(self.send_mr.addr, self.send_mr.lkey),
                    recv=(self.recv_mr.addr, self.recv_mr.lkey), remote=self.remote,
                    max_inline=conn.max_inline, max_sends=MAX_SENDS, send_wr_id=NATIVE_SEND,
                    recv_wr_id=RECV, spin_s=None if conn.flow.options.busy_poll else SPIN_S,
                    clock=self.clock,
                )  # fmt: skip
        return self.native

    def data_path(self, python_count: int) -> str:
        return N.NATIVE if self.native_count > python_count else N.PYTHON


class LatClient(_PingPong):
    """The requester. Where its device has completion timestamps (ibv_create_cq_ex with
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) and the native loop measures, it also times each
    answer's completion by the NIC's clock: the period from one answer to the next, as
    rc_pingpong --ts does, halved as perftest halves its own (nic_latency_us). The host's
    figures stay what perftest's are (its cycle counter); the summary says which clocks
    measured and, where not the NIC's, why."""

    nic_clock = True

    def __init__(self, op: str = "send", size: int = LAT.default_size, count: int = LAT.default_count):
        super().__init__(op, size)
        self.count = count
        self.host = RttStats()
        self.network = RttStats()
        self.nic = RttStats()  # the NIC's periods between answers (s)
        self.iterations = 0
        self.t_post = 0.0
        self.t_start: float | None = None
        self.t_end = 0.0
        self.stopped_by: str | None = None  # a deadline or signal that ended the run (ping(8))
        self.group = 1  # -a: the sweep's connections, one per size, said so that a server waits
        self.sends_out = 0  # Python's messages whose completion has not come
        self.held = False  # the next message waits for a send's completion (post_next)

    @classmethod
    def from_params(cls, p):
        client = cls(p.op, p.size, p.count or LAT.default_count)
        client.group = p.group
        return client

    def conn_param(self) -> ConnParam:
        hello = H.Hello(LAT.hello_kind, 0, self.size, flags=OPS[self.op], group=self.group)
        data = hello.pack()
        return ConnParam(private_data=data, retry_count=7, rnr_retry_count=7)

    def on_established(self, conn) -> None:
        ev = conn.last_event
        self.learn_remote(conn, ev.private_data if ev is not None else b"", "server")
        if self.op == "write":
            # the server needs ours too: the first message carries it (then it answers in kind)
            self.send_mr.write(self.advert())
        self.t_start = time.monotonic()
        self.post_next(conn)

    def on_wc(self, conn, wc) -> None:
        if not self.received(conn, wc):
            self.sends_out = max(self.sends_out - 1, 0)
            if self.held:  # the send queue has room again: the next message goes now
                self.held = False
                self.post_next(conn)
            return
        rtt = time.perf_counter() - self.t_post
        self.iterations += 1
        first = self.iterations == 1
        if first and self.native_loop(conn) is not None:
            later(conn, self.native_slice)  # the first exchange was Python's: a warm-up
            return
        if not first or self.op != "write":  # the first write exchange set up buffers
            hold_ns = HOLD.unpack(self.recv_mr.read(0, HOLD.size))[0] if self.size >= HOLD.size else 0
            self.note(rtt, hold_ns / 1e9)
        if self.host.n >= self.count:
            self.t_end = time.monotonic()
            conn.disconnect()
            return
        self.post_next(conn)

    def post_next(self, conn) -> None:
        """The next message, timed from its post; held while MAX_SENDS of ours await their
        completion (a late ACK): the send queue has room for no more, as the native loop's
        max_sends says."""
        if self.sends_out >= MAX_SENDS:
            self.held = True
            return
        self.t_post = time.perf_counter()
        self.send(conn)
        self.sends_out += 1

    def note(self, rtt: float, hold: float) -> None:
        self.host.add(rtt)
        self.network.add(network_rtt(rtt, hold, RTT_FLOOR_S))

    def native_slice(self, conn) -> None:
        """Round trips in C until the slice's end, then again on the loop's next turn."""
        if self.stopped_by is not None or conn.finished or conn.disconnect_sent or self.native is None:
            return
        wait = conn.flow.timeouts.idle_s
        sl = self.native.client(min(self.count - self.host.n, SLICE_CAP), SLICE_S, wait)
        for rtt, hold in zip(sl.rtt_ns, sl.hold_ns):
            self.note(rtt / 1e9, hold / 1e9)
        for period in sl.nic_ns:
            if period:
                self.nic.add(period / 1e9)
        self.native_count += len(sl.rtt_ns)
        if sl.rtt_ns:
            conn.progress()
        if not go_on(conn, sl):
            return
        if sl.status in N.HANDED_BACK:  # a late answer or a signal: Python's loop waits on, its deadlines
            # its sends not yet completed are in the send queue too: post_next counts them
            self.t_post, self.sends_out = self.native.state.t_post / 1e9, self.native.state.sends_out
            self.native = None
            return
        if self.host.n >= self.count:
            self.t_end = time.monotonic()
            conn.disconnect()
            return
        later(conn, self.native_slice)

    def on_stop(self, conn, why: str):
        if self.t_start is None:
            return None  # not connected yet: interrupted, or the deadline's own error
        self.t_end, self.stopped_by = time.monotonic(), why
        return stopped_like_ping(self.host.n, self.count, why, "iteration", conn.flow.where(conn))

    def on_disconnected(self, conn) -> None:
        if self.host.n >= self.count:
            conn.finish()
        else:
            conn.fail(
                RdmacliError(
                    f"the server disconnected after {self.host.n} of {self.count} iterations "
                    f"[{conn.flow.where(conn)}]",
                    hint="the server ended the test (killed, or stopped); check its output",
                    cause=Cause.PEER_ENDED,
                )
            )

    def summary(self) -> LatFigures:
        f = LatFigures(op=self.op, size_bytes=self.size, iterations=self.host.n, stopped_by=self.stopped_by)
        if not self.host.n:
            return f
        return replace(
            f,
            latency_us=perftest_figures(self.host, half=True),
            rtt_us=perftest_figures(self.host),
            network_rtt_us=perftest_figures(self.network),
            data_path=self.data_path(self.host.n - self.native_count),
            **self.timestamps(),
        )

    def timestamps(self) -> dict:
        """Which clocks measured: the NIC's too when it timed any answer, else why not."""
        if self.nic.n:
            return {"timestamps": "nic", "nic_latency_us": perftest_figures(self.nic, half=True)}
        if self.clock is None:
            why = N.why() or "the Python data path measured"
        else:
            why = self.clock.why or "the native loop timed fewer than two answers"
        return {"timestamps_why": why}


class LatServer(_PingPong):
    role = "server"

    def __init__(self, size: int = LAT.default_size, *, max_size: int = LAT.max_size):
        super().__init__("send", size)
        self.max_size = max_size
        self.answered = 0

    @classmethod
    def from_params(cls, p):
        return cls(p.size, **p.limits())

    def companions(self, ev) -> int:
        return H.companions(ev.private_data, LAT.hello_kind)

    def on_request(self, conn, ev) -> None:
        pd = ev.private_data
        self.op, self.size, _ = H.operation(pd, LAT.hello_kind, self.max_size, OP_NAMES, LAT.min_size)

    def accept_param(self) -> ConnParam:
        return ConnParam(private_data=self.advert(), retry_count=7, rnr_retry_count=7)

    def on_wc(self, conn, wc) -> None:
        t_in = time.perf_counter()
        if not self.received(conn, wc):
            return
        if self.op == "write" and self.remote is None:  # the client's first write: its buffer
            self.learn_remote(conn, self.recv_mr.read(0, INFO.size), "client")
        self.answered += 1
        if self.size >= HOLD.size:
            self.send_mr.write(HOLD.pack(int((time.perf_counter() - t_in) * 1e9)))
        self.send(conn)
        if self.native_loop(conn) is not None:
            self.native_answers(conn)

    def native_answers(self, conn) -> None:
        """Answer in C while messages keep coming (the client's native loop sends the next as
        soon as it has this answer); back to the engine's loop after a quiet SERVER_IDLE_S."""
        sl = self.native.server(SLICE_CAP, SLICE_S, SERVER_IDLE_S)
        self.answered += sl.answered
        self.native_count += sl.answered
        if sl.answered:
            conn.progress()
        if go_on(conn, sl) and sl.answered:
            later(conn, self.native_answers)  # more may come before the loop's next event

    def on_disconnected(self, conn) -> None:
        conn.finish()

    def summary(self) -> LatServed:
        return LatServed(op=self.op, size_bytes=self.size, iterations_answered=self.answered,
                         data_path=self.data_path(self.answered - self.native_count))  # fmt: skip


def perftest_figures(stats: RttStats, half: bool = False) -> Percentiles:
    """perftest's columns (t_min, t_typical = median, t_max, p99, p99.9) in µs; half: one way."""
    k = 0.5 if half else 1.0
    us = sorted(v * 1e6 * k for v in stats.sample)
    return Percentiles(
        t_min=round(stats.min * 1e6 * k, 2),
        t_typical=round(percentile(us, 50), 2),
        t_avg=round(stats.mean * 1e6 * k, 2),
        t_max=round(stats.max * 1e6 * k, 2),
        p99=round(percentile(us, 99), 2),
        p99_9=round(percentile(us, 99.9), 2),
    )
