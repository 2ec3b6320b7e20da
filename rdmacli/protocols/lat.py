"""`rdmacli lat`: latency, perftest's ib_send_lat / ib_write_lat job, rdmacli to rdmacli.

A ping-pong of `size`-byte messages: the client sends, the server answers each one as soon as
its completion is polled, the client times the round trip. `--op send` is SEND/RECV; `--op
write` is RDMA WRITE with immediate into the peer's advertised buffer (the immediate raises a
completion at the responder: rdmacli's loop learns of data by completions, not by polling
memory as ib_write_lat does). Busy-polled by default.

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

from rdmacli.engine.protocol import Protocol, stopped_like_ping
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import RTT_FLOOR_US, LatFigures, LatServed, Percentiles
from rdmacli.protocols import hello as H
from rdmacli.protocols.rping import INFO, RttStats, _pct, advertised, pack_info
from rdmacli.protocols.table import LAT
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

OPS = {"send": 0, "write": 1}
OP_NAMES = {v: k for k, v in OPS.items()}
RECV, SEND = 0, 1
HOLD = struct.Struct(">Q")  # the responder's hold time in ns, first 8 bytes of each reply
RTT_FLOOR_S = RTT_FLOOR_US / 1e6  # a responder's hold that would leave less is not believed
DEPTH = 2  # receives kept posted: the next one is always there before the peer sends


class _PingPong(Protocol):
    name = "lat"

    def __init__(self, op: str = "send", size: int = LAT.default_size):
        self.op, self.size = op, size
        self.send_mr = self.recv_mr = None
        self.remote: tuple[int, int] | None = None

    def pinned_bytes(self) -> int:
        return 2 * self.size

    def setup(self, conn) -> None:
        conn.create_qp(qp_type=C.QPT_RC, send_wr=DEPTH, recv_wr=DEPTH)
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


class LatClient(_PingPong):
    def __init__(self, op: str = "send", size: int = LAT.default_size, count: int = LAT.default_count):
        super().__init__(op, size)
        self.count = count
        self.host = RttStats()
        self.network = RttStats()
        self.iterations = 0
        self.t_post = 0.0
        self.t_start: float | None = None
        self.t_end = 0.0
        self.stopped_by: str | None = None  # a deadline or signal that ended the run (ping(8))

    @classmethod
    def from_params(cls, p):
        return cls(p.op, p.size, p.count or LAT.default_count)

    def conn_param(self) -> ConnParam:
        hello = H.Hello(H.KIND_LAT, 0, self.size, flags=OPS[self.op])
        data = hello.pack()
        return ConnParam(private_data=data, retry_count=7, rnr_retry_count=7)

    def on_established(self, conn) -> None:
        ev = conn.last_event
        self.learn_remote(conn, ev.private_data if ev is not None else b"", "server")
        if self.op == "write":
            # the server needs ours too: the first message carries it (then it answers in kind)
            self.send_mr.write(self.advert())
        self.t_start = time.monotonic()
        self.t_post = time.perf_counter()
        self.send(conn)

    def on_wc(self, conn, wc) -> None:
        if not self.received(conn, wc):
            return
        rtt = time.perf_counter() - self.t_post
        self.iterations += 1
        if self.iterations > 1 or self.op != "write":  # the first write exchange set up buffers
            self.host.add(rtt)
            hold_ns = HOLD.unpack(self.recv_mr.read(0, HOLD.size))[0] if self.size >= HOLD.size else 0
            hold = hold_ns / 1e9
            self.network.add(rtt - hold if 0 <= hold <= rtt - RTT_FLOOR_S else rtt)
        if self.host.n >= self.count:
            self.t_end = time.monotonic()
            conn.disconnect()
            return
        self.t_post = time.perf_counter()
        self.send(conn)

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
        )


class LatServer(_PingPong):
    role = "server"

    def __init__(self, size: int = LAT.default_size, *, max_size: int = LAT.max_size):
        super().__init__("send", size)
        self.max_size = max_size
        self.answered = 0

    @classmethod
    def from_params(cls, p):
        return cls(p.size, **p.limits())

    def on_request(self, conn, ev) -> None:
        pd = ev.private_data
        self.op, self.size, _ = H.operation(pd, H.KIND_LAT, self.max_size, OP_NAMES, LAT.min_size)

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

    def on_disconnected(self, conn) -> None:
        conn.finish()

    def summary(self) -> LatServed:
        return LatServed(op=self.op, size_bytes=self.size, iterations_answered=self.answered)


def perftest_figures(stats: RttStats, half: bool = False) -> Percentiles:
    """perftest's columns (t_min, t_typical = median, t_max, p99, p99.9) in µs; half: one way."""
    k = 0.5 if half else 1.0
    us = sorted(v * 1e6 * k for v in stats.sample)
    return Percentiles(
        t_min=round(stats.min * 1e6 * k, 2),
        t_typical=round(_pct(us, 50), 2),
        t_avg=round(stats.mean * 1e6 * k, 2),
        t_max=round(stats.max * 1e6 * k, 2),
        p99=round(_pct(us, 99), 2),
        p99_9=round(_pct(us, 99.9), 2),
    )
