"""`rdmacli bw`: bandwidth, perftest's ib_write_bw / ib_read_bw / ib_send_bw job, rdmacli to rdmacli.

The client's hello (private data) names the operation and size; the server registers one buffer
of that size (with remote access for WRITE and READ) and advertises it in its accept's private
data (address, rkey, size: rping's 16-byte layout). The client keeps `depth` work requests in
flight on each QP, in chains of one doorbell with only the last signaled, for a count of
messages or a duration, then disconnects; the server ends on that disconnect. For SEND the
server keeps `depth` receives posted and counts what arrives.

What the server advertises is untrusted: the client only ever writes or reads within the size it
asked for and the server confirmed, and never past its own buffer.
"""

from __future__ import annotations

import time

from rdmacli.engine.protocol import Protocol
from rdmacli.errors import Cause, RdmacliError
from rdmacli.protocols import hello as H
from rdmacli.protocols.rping import INFO, pack_info, unpack_info
from rdmacli.protocols.table import BW
from rdmacli.protocols.window import chain, sends_in
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

OPS = {"write": 0, "read": 1, "send": 2}
OP_NAMES = {v: k for k, v in OPS.items()}
OPCODES = {"write": C.WR_RDMA_WRITE, "read": C.WR_RDMA_READ, "send": C.WR_SEND}
RECV = 0
BEAT = 1  # a one-sided test's heartbeat: an empty SEND each PROGRESS_S, so the server sees
# progress (it sees no completion of a WRITE or READ) and keeps an idle deadline that means
# something: a client that stalls or vanishes still ends the server's wait
CHAIN = 16  # work requests per doorbell, at most
PROGRESS_S = 1.0  # between progress records


class BwClient(Protocol):
    name = "bw"

    def __init__(self, op: str = "write", size: int = BW.default_size, count: int | None = None,
                 duration: float | None = None, depth: int = 128):  # fmt: skip
        self.op, self.size, self.count, self.duration, self.depth = op, size, count, duration, depth
        self.mr = None
        self.remote: tuple[int, int] | None = None  # (address, rkey) the server advertised
        self.posted = self.completed = 0
        self.t_start = self.t_end = None
        self.t_stop: float | None = None  # duration mode: post nothing after this
        self.next_progress = 0.0
        self.done_sent = False

    @classmethod
    def from_params(cls, p):
        return cls(p.op, p.size, p.count, p.duration, p.depth)

    def conn_param(self) -> ConnParam:
        hello = H.Hello(H.KIND_BW, 0, self.size, flags=OPS[self.op])  # the count is ours alone
        return ConnParam(private_data=hello.pack(), responder_resources=16, initiator_depth=16,
                         retry_count=7, rnr_retry_count=7)  # fmt: skip

    def setup(self, conn) -> None:
        lim = conn.limits()
        if lim is not None and self.depth > lim.max_qp_wr:  # said, never silently lowered
            raise RdmacliError(
                f"--depth {self.depth} is above {conn.cm.device}'s max_qp_wr {lim.max_qp_wr}",
                hint="use a smaller --depth; `rdmacli devices` shows the device's limits",
                cause=Cause.DEVICE_LIMIT,
                details={"step": "create qp"},
            )
        self.window = min(self.depth, lim.max_qp_wr) if lim is not None else self.depth
        conn.create_qp(qp_type=C.QPT_RC, send_wr=self.window + 1, recv_wr=1)  # + the heartbeat
        access = C.ACCESS_LOCAL_WRITE
        self.mr = conn.reg(max(self.size, 1), access)

    def on_established(self, conn) -> None:
        ev = conn.last_event
        data = ev.private_data if ev is not None else b""
        if self.op != "send":
            if len(data) < INFO.size:
                raise RdmacliError(
                    f"the server advertised no buffer ({len(data)} bytes of private data) "
                    f"[{conn.flow.where(conn)}]",
                    hint="the peer is not an `rdmacli listen --bw` server",
                    cause=Cause.PEER_PROTOCOL,
                )
            addr, rkey, size = unpack_info(data[: INFO.size])
            if size < self.size:  # never past what the server holds, whatever else it says
                raise RdmacliError(
                    f"the server advertised {size} bytes for {self.size}-byte messages "
                    f"[{conn.flow.where(conn)}]",
                    cause=Cause.PEER_PROTOCOL,
                )
            self.remote = (addr, rkey)
        self.t_start = time.monotonic()
        self.next_progress = self.t_start + PROGRESS_S
        if self.duration:
            self.t_stop = self.t_start + self.duration
        self.post(conn)

    def due(self) -> int:
        room = self.window - (self.posted - self.completed)
        if self.count is not None:
            room = min(room, self.count - self.posted)
        if self.t_stop is not None and time.monotonic() >= self.t_stop:
            room = 0
        return max(room, 0)

    def post(self, conn) -> None:
        n = self.due()
        while n > 0:
            k = min(n, CHAIN)
            kw = {"opcode": OPCODES[self.op]}
            if self.remote is not None:
                kw.update(remote_addr=self.remote[0], rkey=self.remote[1])
            conn.post_send(chain(k), self.mr, 0, self.size, n=k, **kw)
            self.posted += k
            n -= k

    def on_wc(self, conn, wc) -> None:
        self.completed += sends_in(wc.wr_id)
        now = time.monotonic()
        if now >= self.next_progress:
            self.next_progress = now + PROGRESS_S
            conn.flow.emit({"type": "bw", "conn": conn.index, **self.figures(now)})
            if self.op != "send" and wc.wr_id != BEAT:
                conn.post_send(BEAT, self.mr, 0, 0)
        self.post(conn)
        if self.completed == self.posted and self.due() == 0 and not self.done_sent:
            self.t_end = now
            self.done_sent = True
            conn.disconnect()

    def on_disconnected(self, conn) -> None:
        if self.done_sent:
            conn.finish()
        else:
            conn.fail(
                RdmacliError(
                    f"the server disconnected after {self.completed} of "
                    f"{self.count if self.count is not None else '?'} messages [{conn.flow.where(conn)}]",
                    hint="the server ended the test (killed, or stopped); check its output",
                    cause=Cause.PEER_ENDED,
                )
            )

    def figures(self, now: float | None = None) -> dict:
        end = self.t_end or now or time.monotonic()
        secs = max(end - (self.t_start or end), 1e-9)
        nbytes = self.completed * self.size
        return {
            "messages": self.completed,
            "bytes": nbytes,
            "seconds": round(secs, 6),
            "gbps": round(nbytes * 8 / secs / 1e9, 4) if self.t_start else 0.0,
            "msg_per_s": round(self.completed / secs, 1) if self.t_start else 0.0,
        }

    def summary(self) -> dict:
        f = self.figures()
        return {
            "op": self.op,
            "size_bytes": self.size,
            "depth": getattr(self, "window", self.depth),
            "messages_sent": self.completed,
            "bytes_sent": f["bytes"],
            "elapsed_us": round(f["seconds"] * 1e6, 1),
            "gbps": f["gbps"],
            "msg_per_s": f["msg_per_s"],
        }


class BwServer(Protocol):
    name = "bw"
    role = "server"

    def __init__(self, size: int = BW.default_size, *, max_size: int = BW.max_size, depth: int = 128):
        self.size, self.max_size, self.depth = size, max_size, depth
        self.op = "write"
        self.mr = None
        self.received = self.bytes_received = 0

    @classmethod
    def from_params(cls, p):
        return cls(p.size, **p.limits())

    def on_request(self, conn, ev) -> None:
        self.op, self.size = H.operation(ev.private_data, H.KIND_BW, self.max_size, OP_NAMES, BW.min_size)

    def setup(self, conn) -> None:
        recv = conn.window(self.depth) if self.op == "send" else 1  # write, read: heartbeats only
        self.window = recv
        conn.create_qp(qp_type=C.QPT_RC, send_wr=1, recv_wr=recv)
        access = C.ACCESS_LOCAL_WRITE | C.ACCESS_REMOTE_WRITE | C.ACCESS_REMOTE_READ
        self.mr = conn.reg(self.size, access)
        conn.post_recv(RECV, self.mr, 0, self.size if self.op == "send" else 1, n=recv)

    def accept_param(self) -> ConnParam:
        data = pack_info(self.mr.addr, self.mr.rkey, self.size) if self.mr is not None else b""
        return ConnParam(private_data=data, responder_resources=16, initiator_depth=16,
                         retry_count=7, rnr_retry_count=7)  # fmt: skip

    def on_wc(self, conn, wc) -> None:
        if wc.opcode & C.WC_RECV:
            if self.op == "send":
                self.received += 1
                self.bytes_received += wc.byte_len
                conn.post_recv(RECV, self.mr, 0, self.size)
            else:  # a heartbeat (empty): the engine counted it as progress
                conn.post_recv(RECV, self.mr, 0, 1)

    def on_disconnected(self, conn) -> None:
        conn.finish()  # the client ends the test; its figures are its own

    def summary(self) -> dict:
        return {
            "op": self.op,
            "size_bytes": self.size,
            "messages_received": self.received,
            "bytes_received": self.bytes_received,
        }
