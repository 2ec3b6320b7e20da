"""rping (librdmacm/examples/rping.c) on the wire: RC, TCP port space, port 7174.

Per ping: the client SENDs a 16-byte advert of its source buffer, the server RDMA-READs it and
SENDs 16 zero bytes; the client SENDs an advert of its sink buffer, the server RDMA-WRITEs the
data back and SENDs 16 zero bytes; the client may compare both buffers (reference section 1).
Adverts come from the network: every one is checked before the server acts on it.
"""

from __future__ import annotations

import random
import struct
import time
from dataclasses import replace

from rdmacli.engine.protocol import Protocol, Reject, Transitions, stopped_like_ping
from rdmacli.errors import Cause, RdmacliError
from rdmacli.events import Ping
from rdmacli.figures import PingFigures, PingServed, RttSummary, percentile
from rdmacli.protocols import hello as H
from rdmacli.protocols.table import PING
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

INFO = struct.Struct(">QII")  # struct rping_rdma_info: buf, rkey, size; big-endian, 16 bytes
RW_ACCESS = C.ACCESS_LOCAL_WRITE | C.ACCESS_REMOTE_READ | C.ACCESS_REMOTE_WRITE
RECV, SEND, READ, WRITE = 1, 2, 3, 4  # wr_id tags


def pattern(ping: int, size: int) -> bytes:
    """The client's source buffer for ping number `ping` (rping.c rping_test_client)."""
    buf = bytearray(size)
    text = f"rdma-ping-{ping}: ".encode()[: size - 1]
    buf[: len(text)] = text
    c = 65 + ping % 58  # `start` begins at 'A' and advances once per ping, 'z' wraps to 'A'
    for i in range(len(text), size):
        buf[i] = c
        c = 65 if c >= 122 else c + 1
    buf[size - 1] = 0
    return bytes(buf)


def pack_info(addr: int, rkey: int, size: int) -> bytes:
    return INFO.pack(addr, rkey, size)


def unpack_info(data: bytes) -> tuple[int, int, int]:
    if len(data) != INFO.size:
        raise ValueError(f"Received bogus data, size {len(data)}")
    return INFO.unpack(data)


def advertised(conn, data: bytes, size: int, who: str, command: str) -> tuple[int, int]:
    """(address, rkey) of a buffer a peer of `rdmacli bw` or `lat` advertised in this layout,
    refused unless it holds `size` bytes: never past what the peer holds, whatever it says."""
    if len(data) < INFO.size:
        raise RdmacliError(
            f"the {who} advertised no buffer ({len(data)} bytes) [{conn.flow.where(conn)}]",
            hint=f"the peer is not rdmacli {command} / listen --{command}",
            cause=Cause.PEER_PROTOCOL,
        )
    addr, rkey, got = unpack_info(data[: INFO.size])
    if got < size:
        raise RdmacliError(
            f"the {who} advertised {got} bytes for {size}-byte messages [{conn.flow.where(conn)}]",
            cause=Cause.PEER_PROTOCOL,
        )
    return addr, rkey


def conn_param(private_data: bytes = b"") -> ConnParam:
    return ConnParam(
        private_data=private_data, responder_resources=1, initiator_depth=1, retry_count=7, rnr_retry_count=7
    )


# The client's stages: it sends an advert of its source buffer (read_adv), the server READs it
# and answers with a go-ahead; it sends an advert of its sink buffer (write_adv), the server
# WRITEs into it and answers with a go-ahead: one ping done (pinged).
CLIENT_STAGES = {
    ("idle", "next"): "read_adv",
    ("read_adv", "go_ahead"): "write_adv",
    ("write_adv", "go_ahead"): "pinged",
    ("pinged", "next"): "read_adv",
    ("pinged", "pause"): "wait",
    ("wait", "next"): "read_adv",
    ("pinged", "finish"): "done",
}
# The server's stages: an advert to READ from, then an advert to WRITE back into.
SERVER_STAGES = {
    ("read_adv", "advert"): "reading",
    ("reading", "read_done"): "write_adv",
    ("write_adv", "advert"): "writing",
    ("writing", "write_done"): "read_adv",
}


class _Rping(Protocol):
    name = "ping"

    def __init__(self, size: int):
        self.size = size
        self.recv_mr = self.send_mr = self.rdma_mr = None

    def setup(self, conn) -> None:
        # rping.c: one CQ of 32 for both queues; 16 send WRs, 2 receive WRs, one 16-byte receive
        conn.create_qp(qp_type=C.QPT_RC, send_wr=16, recv_wr=2)
        self.recv_mr = conn.reg(INFO.size)
        self.send_mr = conn.reg(INFO.size)
        self.rdma_mr = conn.reg(self.size, RW_ACCESS)
        conn.post_recv(RECV, self.recv_mr, 0, INFO.size)

    def take_message(self, conn, wc) -> bytes:
        """The received 16 bytes; the receive is re-posted first, as rping's CQ handler does."""
        if wc.byte_len != INFO.size:
            raise RdmacliError(
                f"Received bogus data, size {wc.byte_len} [{conn.flow.where(conn)}]",
                hint="the peer does not speak rping's 16-byte messages",
                cause=Cause.PEER_PROTOCOL,
            )
        data = self.recv_mr.read(0, INFO.size)
        conn.post_recv(RECV, self.recv_mr, 0, INFO.size)
        return data

    def send(self, conn, data: bytes) -> None:
        self.send_mr.write(data)
        conn.post_send(SEND, self.send_mr, 0, INFO.size)


class RpingClient(_Rping):
    def __init__(
        self,
        size: int = PING.default_size,
        count: int | None = None,
        *,
        validate: bool = False,
        interval: float = 0.0,
    ):
        super().__init__(size)
        self.count, self.validate, self.interval = count, validate, interval
        self.ping = 0
        self.stages = Transitions("rping client", CLIENT_STAGES, "idle")
        self.rtts = RttStats()
        self.validated = self.failed = 0
        self.t_start = self.t_end = None
        self.stopped_by: str | None = None  # a deadline or signal that ended the run (ping(8))
        self.start_mr = None
        self._t0 = 0.0

    @classmethod
    def from_params(cls, p):
        return cls(p.size, p.count, validate=p.validate, interval=p.interval)

    def conn_param(self) -> ConnParam:
        return conn_param(H.Hello(PING.hello_kind, self.count or 0, self.size).pack())

    def setup(self, conn) -> None:
        super().setup(conn)
        self.start_mr = conn.reg(self.size, RW_ACCESS)

    def on_established(self, conn) -> None:
        self.t_start = time.monotonic()
        self._next(conn)

    def _next(self, conn) -> None:
        if self.count is not None and self.ping >= self.count:
            self.t_end = time.monotonic()
            self.stages.fire("finish")
            conn.disconnect()  # rping: the client ends the test
            return
        self.start_mr.write(pattern(self.ping, self.size))
        self._t0 = time.monotonic()
        self.stages.fire("next")
        self.send(conn, pack_info(self.start_mr.addr, self.start_mr.rkey, self.size))

    def on_wc(self, conn, wc) -> None:
        if wc.wr_id != RECV:
            return
        self.take_message(conn, wc)
        stage = self.stages.fire("go_ahead", conn.flow.where(conn))
        if stage == "write_adv":  # the server has read our source buffer
            self.send(conn, pack_info(self.rdma_mr.addr, self.rdma_mr.rkey, self.size))
            return
        # pinged: the server has written into our sink buffer
        rtt = time.monotonic() - self._t0
        self.rtts.add(rtt)
        ok = None
        if self.validate:
            ok = self.start_mr.read() == self.rdma_mr.read()
            if ok:
                self.validated += 1
            else:
                self.failed += 1
        data = self.rdma_mr.read().split(b"\0", 1)[0].decode("ascii", "replace")
        conn.flow.emit(
            Ping(
                conn=conn.index,
                ping=self.ping,
                rtt_us=round(rtt * 1e6, 1),
                size_bytes=self.size,
                valid=ok,
                data=data,
            )
        )
        if ok is False:
            conn.fail(
                RdmacliError(
                    f"data mismatch! (ping {self.ping}) [{conn.flow.where(conn)}]",
                    hint="the data written back differs from what was sent",
                    cause=Cause.DATA_MISMATCH,
                )
            )
            return
        self.ping += 1
        if self.interval and not (self.count is not None and self.ping >= self.count):
            self.stages.fire("pause")
            conn.later(self.interval, self._next)
        else:
            self._next(conn)

    def on_stop(self, conn, why: str):
        if self.t_start is None:
            return None  # not connected yet: interrupted, or the deadline's own error
        self.t_end, self.stopped_by = time.monotonic(), why
        return stopped_like_ping(self.rtts.n, self.count, why, "ping", conn.flow.where(conn))

    def on_disconnected(self, conn) -> None:
        if self.stages.stage == "done":
            conn.finish()
        elif self.count is None and self.ping > 0:  # open-ended: the server's end is the end
            conn.flow.warn(
                f"connection {conn.index}: the server ended the run after {self.ping} pings "
                f"[{conn.flow.where(conn)}]"
            )
            conn.finish()
        else:
            conn.fail(
                RdmacliError(
                    f"the server disconnected after {self.ping} of {self.count} pings "
                    f"[{conn.flow.where(conn)}]",
                    hint="see the server's output",
                    cause=Cause.PEER_ENDED,
                )
            )

    def summary(self) -> PingFigures:
        f = ping_stats(
            self.rtts,
            self.ping,
            self.size,
            self.validated if self.validate else None,
            self.failed,
            self.t_start,
            self.t_end or time.monotonic(),
        )
        if self.stopped_by is None:
            return f
        # the ping in flight at the stop is sent and lost, as ping(8) counts it
        sent = max(f.pings_sent, self.ping + (self.stages.stage in ("read_adv", "write_adv")))
        return replace(f, pings_sent=sent, stopped_by=self.stopped_by)


class RpingServer(_Rping):
    """Serves rping and rdmacli clients. Its buffer grows to what a client asks for, up to
    max_size: to an rdmacli client's hello before the accept, to a C client's first advert."""

    role = "server"

    def __init__(
        self,
        size: int = PING.default_size,
        *,
        max_size: int = PING.max_size,
        corrupt: bool = False,
    ):
        super().__init__(size)
        self.max_size = max_size
        self.corrupt = corrupt  # test hook: flip a byte before writing back
        self.stages = Transitions("rping server", SERVER_STAGES, "read_adv")
        self.pings = 0

    @classmethod
    def from_params(cls, p):
        return cls(p.size, corrupt=p.corrupt, **p.limits())

    def pinned_bytes(self) -> int:
        return 2 * INFO.size + max(self.size, self.max_size)  # a C client's advert grows it so far

    def on_request(self, conn, ev) -> None:
        hello = H.parse(ev.private_data)
        if hello is None:
            return  # a C rping client: its adverts size the buffer (up to max_size)
        reason = H.check(hello, PING.hello_kind, self.max_size)
        if reason:
            raise Reject(reason)
        self.size = max(self.size, hello.size)

    def _advert(self, conn, data: bytes) -> tuple[int, int, int]:
        addr, rkey, size = unpack_info(data)
        if size == 0 or size > self.max_size:
            raise RdmacliError(
                f"the client advertised {size} bytes, the server accepts 1 to {self.max_size} "
                f"[{conn.flow.where(conn)}]",
                hint="start the server with a larger --max-size, or the client with a smaller -S",
                cause=Cause.PEER_PROTOCOL,
            )
        if addr == 0:
            raise RdmacliError(
                f"the client advertised address 0 [{conn.flow.where(conn)}]", cause=Cause.PEER_PROTOCOL
            )
        if size > self.rdma_mr.length:
            # a C client larger than our -S: grow the one buffer once, to the most it may ask
            # for (--max-size); a client that asks for more each ping pins nothing more
            self.rdma_mr = conn.replace_mr(self.rdma_mr, self.max_size, RW_ACCESS)
        self.size = size
        return addr, rkey, size

    def on_wc(self, conn, wc) -> None:
        where = conn.flow.where(conn)
        if wc.wr_id == RECV:
            addr, rkey, size = self._advert(conn, self.take_message(conn, wc))
            stage = self.stages.fire("advert", where)
            if stage == "reading":
                conn.post_send(
                    READ, self.rdma_mr, 0, size, opcode=C.WR_RDMA_READ, remote_addr=addr, rkey=rkey
                )
                return
            # writing: the data read, up to its NUL (strlen + 1), bounded by both buffers
            data = self.rdma_mr.read(0, self.rdma_mr.length)
            nul = data.find(b"\0")
            length = min(nul + 1 if nul >= 0 else len(data), size)
            if self.corrupt and length > 1:
                self.rdma_mr.write(bytes([data[0] ^ 0x20]), 0)
            conn.post_send(
                WRITE, self.rdma_mr, 0, length, opcode=C.WR_RDMA_WRITE, remote_addr=addr, rkey=rkey
            )
        elif wc.wr_id == READ:
            self.stages.fire("read_done", where)
            self.send(conn, bytes(INFO.size))  # rping's server sends 16 zero bytes as go-ahead
        elif wc.wr_id == WRITE:
            self.stages.fire("write_done", where)
            self.pings += 1
            self.send(conn, bytes(INFO.size))

    def on_disconnected(self, conn) -> None:
        # rping's server learns of the end only from DISCONNECTED; between pings it is normal
        if self.stages.stage == "read_adv":
            conn.finish()
        else:
            conn.fail(
                RdmacliError(
                    f"the client went away during ping {self.pings} ({self.stages.stage}) "
                    f"[{conn.flow.where(conn)}]",
                    cause=Cause.PEER_ENDED,
                )
            )

    def summary(self) -> PingServed:
        return PingServed(pings_served=self.pings, size_bytes=self.size)


class RttStats:
    """Round-trip times in constant memory, whatever the count: min, max, mean and deviation
    exactly (Welford); p50 and p99 exactly up to SAMPLE pings, beyond that from a uniform
    reservoir sample of SAMPLE of them."""

    SAMPLE = 65536

    def __init__(self):
        self.n = 0
        self.mean = self.m2 = 0.0
        self.min, self.max = float("inf"), 0.0
        self.sample: list[float] = []
        self._rng = random.Random(0x5EED)

    @classmethod
    def of(cls, values) -> RttStats:
        stats = cls()
        for v in values:
            stats.add(v)
        return stats

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)
        self.min, self.max = min(self.min, x), max(self.max, x)
        if len(self.sample) < self.SAMPLE:
            self.sample.append(x)
        else:
            j = self._rng.randrange(self.n)
            if j < self.SAMPLE:
                self.sample[j] = x

    def summary_us(self) -> RttSummary:
        us = sorted(v * 1e6 for v in self.sample)
        return RttSummary(
            min=round(self.min * 1e6, 1),
            avg=round(self.mean * 1e6, 1),
            max=round(self.max * 1e6, 1),
            mdev=round((self.m2 / self.n) ** 0.5 * 1e6, 1),
            p50=round(percentile(us, 50), 1),
            p99=round(percentile(us, 99), 1),
        )


def ping_stats(
    rtts: RttStats,
    sent: int,
    size: int,
    validated: int | None,
    failed: int,
    t_start: float | None,
    t_end: float,
) -> PingFigures:
    elapsed = max(t_end - t_start, 1e-9) if t_start is not None else None
    return PingFigures(
        pings_sent=sent + (1 if failed else 0),
        pings_completed=rtts.n,
        pings_failed=failed,
        size_bytes=size,
        pings_validated=validated,
        rtt_us=rtts.summary_us() if rtts.n else None,
        time_ms=round(elapsed * 1e3, 1) if elapsed else None,
        throughput_mbps=round(rtts.n * size * 2 * 8 / elapsed / 1e6, 3) if elapsed else None,
    )
