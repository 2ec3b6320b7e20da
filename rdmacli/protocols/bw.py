"""`rdmacli bw`: bandwidth, perftest's ib_write_bw / ib_read_bw / ib_send_bw job, rdmacli to rdmacli.

The client's hello (private data) names the operation and size; the server registers one buffer
of that size (with remote access for WRITE and READ) and advertises it in its accept's private
data (address, rkey, size: rping's 16-byte layout). The client keeps `depth` work requests in
flight on each QP, in chains of one doorbell with only the last signaled, for a count of
messages or a duration, then disconnects; the server ends on that disconnect. For SEND the
server keeps `depth` receives posted and counts what arrives.

`--bidir` (perftest's -b): the server sends too, for as long as the client does. Control
messages are SENDs with immediate data, apart from the data: the client's ADVERT (its buffer,
for WRITE and READ) starts the server's stream, its DONE stops it, and the server's RESULT (its
messages and seconds) comes back before the client disconnects, so one side reports both ways.

What the peer advertises or reports is untrusted: each side only ever writes or reads within
the size the client asked for and the server confirmed, never past its own buffer, and a
reported figure outside sane bounds is refused.
"""

from __future__ import annotations

import math
import struct
import time

from rdmacli import native as N
from rdmacli.engine.protocol import Protocol
from rdmacli.errors import Cause, RdmacliError
from rdmacli.events import Progress
from rdmacli.figures import BwFigures, BwServed, Rate
from rdmacli.protocols import hello as H
from rdmacli.protocols.rping import INFO, advertised, pack_info
from rdmacli.protocols.slices import go_on, later
from rdmacli.protocols.table import BW
from rdmacli.protocols.window import chain, sends_in
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

OPS = {"write": 0, "read": 1, "send": 2}
OP_NAMES = {v: k for k, v in OPS.items()}
OPCODES = {"write": C.WR_RDMA_WRITE, "read": C.WR_RDMA_READ, "send": C.WR_SEND}
RECV, BEAT = 0, 1  # BEAT: a one-sided test's heartbeat: an empty SEND each PROGRESS_S, so the server sees
# progress (it sees no completion of a WRITE or READ) and keeps an idle deadline that means
# something: a client that stalls or vanishes still ends the server's wait
CTL = 2  # the wr_id of a control message's send
ADVERT, DONE, RESULT = 1, 2, 3  # control messages, by their immediate data
RESULT_FORMAT = struct.Struct(">Qd")  # the server's stream: messages completed, seconds
CTL_SIZE = 32  # bytes of a control message's buffer
CTL_RECVS = 4  # control receives kept posted (heartbeats, ADVERT, DONE, RESULT)
CHAIN = 16  # work requests per doorbell, at most
RECV_FACTOR = 4  # SEND: receives kept posted per send in flight (perftest's rx_depth 512 over its
# tx_depth 128): a receiver that reposts late still has room, so its sender meets no RNR NAK
PROGRESS_S = 1.0  # between progress records
DEPTH = 128  # work requests in flight per QP (perftest's tx_depth), unless --depth says ...
WINDOW_BYTES = 16 << 20  # ... at most this many bytes in flight: a one-sided test's heartbeat
# waits behind the window, and 128 x 1 MiB under rxe/TCG (13 messages a second) held it ~10 s,
# the server's idle deadline (a fresh `make bench` saw the server give up on a healthy client
# 6 times in 6). 16 MiB is still hundreds of times a hardware link's bandwidth-delay product.
MAX_MESSAGES = 1 << 40
RATE_SLACK = 1.1  # a measured rate above the port's line rate by more than this is no measure
SLICE_S = 0.05  # a native stream's slice: the engine's loop turns between two (progress, CM, signals)
NATIVE_OPS = ("write", "read")  # one-way streams whose whole loop is the sender's (a SEND's
# receiver reposts per message: its Python loop would still set the pace)


def auto_depth(size: int) -> int:
    """--depth's default for `size`-byte messages: DEPTH, fewer where they would pass
    WINDOW_BYTES."""
    return max(1, min(DEPTH, WINDOW_BYTES // max(size, 1)))


class Stream:
    """One direction's sender: `window` work requests in flight, in chains of one doorbell with
    only the last signaled, until its count, its duration or a stop."""

    def __init__(self, op: str, size: int, window: int, count: int | None = None,
                 duration: float | None = None):  # fmt: skip
        self.op, self.size, self.window, self.count, self.duration = op, size, window, count, duration
        self.remote: tuple[int, int] | None = None  # (address, rkey) the peer advertised
        self.posted = self.completed = 0
        self.t_start: float | None = None
        self.t_end: float | None = None
        self.t_stop: float | None = None  # post nothing after this
        self.stopped = False

    def start(self) -> None:
        self.t_start = time.monotonic()
        if self.duration:
            self.t_stop = self.t_start + self.duration

    def due(self) -> int:
        if self.t_start is None or self.stopped:
            return 0
        room = self.window - (self.posted - self.completed)
        if self.count is not None:
            room = min(room, self.count - self.posted)
        if self.t_stop is not None and time.monotonic() >= self.t_stop:
            room = 0
        return max(room, 0)

    def post(self, conn, mr) -> None:
        n = self.due()
        kw = {"opcode": OPCODES[self.op]}
        if self.remote is not None:
            kw.update(remote_addr=self.remote[0], rkey=self.remote[1])
        while n > 0:
            k = min(n, CHAIN)
            conn.post_send(chain(k), mr, 0, self.size, n=k, **kw)
            self.posted += k
            n -= k

    def completion(self, wc) -> None:
        self.completed += sends_in(wc.wr_id)

    def finished(self) -> bool:
        """Started, nothing more due and nothing in flight; marks the end time once."""
        if self.t_start is None or self.completed != self.posted or self.due():
            return False
        if self.t_end is None:
            self.t_end = time.monotonic()
        return True

    def figures(self, now: float | None = None) -> Rate:
        return Rate.of(
            self.completed, self.size, (self.t_end or now or time.monotonic()) - (self.t_start or 0)
        )


class Arrivals:
    """One direction's data as its receiving end saw it (SEND: every message is a receive
    completion): the receiver's own measure of the stream, checked against the sender's count
    (a mesh pair's rates are each direction's receiver's, not a figure the sender relayed)."""

    def __init__(self) -> None:
        self.messages = self.bytes = self.first_bytes = 0
        self.t_first: float | None = None
        self.t_last: float | None = None

    def note(self, nbytes: int, now: float) -> None:
        if self.t_first is None:
            self.t_first, self.first_bytes = now, nbytes
        self.messages += 1
        self.bytes += nbytes
        self.t_last = now

    def gbps(self) -> float | None:
        """The bytes after the first over the time from the first arrival to the last (None
        with fewer than two: one arrival has no time)."""
        if self.messages < 2 or self.t_last is None or self.t_first is None or self.t_last <= self.t_first:
            return None
        return round((self.bytes - self.first_bytes) * 8 / (self.t_last - self.t_first) / 1e9, 4)


class _Side(Protocol):
    """What both ends of a bidirectional run share: a data buffer, control buffers, a stream."""

    name = "bw"

    def pinned_bytes(self) -> int:
        return max(self.size, CTL_SIZE) + 2 * CTL_SIZE  # buffers(): data, and control both ways

    def buffers(self, conn, recv_window: int, remote_access: bool) -> None:
        access = C.ACCESS_LOCAL_WRITE
        if remote_access:
            access |= C.ACCESS_REMOTE_WRITE | C.ACCESS_REMOTE_READ
        self.mr = conn.reg(max(self.size, CTL_SIZE), access)
        self.out = conn.reg(CTL_SIZE) if self.bidir else None  # control messages leave from here
        # receives: data and control alike for SEND; control alone (into its own buffer) else
        self.inbox = self.mr if self.op == "send" else conn.reg(CTL_SIZE) if recv_window else None
        self.recv_len = max(self.size, CTL_SIZE) if self.op == "send" else CTL_SIZE
        if recv_window:
            conn.post_recv(RECV, self.inbox, 0, self.recv_len, n=recv_window)

    def recv_window(self, conn) -> int:
        """Receives kept posted: for SEND, RECV_FACTOR per send in flight (data and control
        land alike); else control messages alone (a WRITE or READ completes no receive)."""
        return conn.window(RECV_FACTOR * self.depth) if self.op == "send" else CTL_RECVS

    def _received(self) -> dict:
        """What arrived of the other end's stream: a server's count (none of a WRITE or READ,
        which complete no receive), and for SEND its rate as timed here; a client's only with
        SEND --bidir (the only stream that comes to it)."""
        a = self.arrivals
        if self.op != "send":
            return {"messages_received": 0, "bytes_received": 0} if self.role == "server" else {}
        if self.role != "server" and not self.bidir:
            return {}
        return {"messages_received": a.messages, "bytes_received": a.bytes, "gbps_received": a.gbps()}

    def tell(self, conn, what: int, payload: bytes = b"") -> None:
        if payload:
            self.out.write(payload)
        conn.post_send(CTL, self.out, 0, len(payload), opcode=C.WR_SEND_WITH_IMM, imm=what)

    def repost(self, conn) -> None:
        conn.post_recv(RECV, self.inbox, 0, self.recv_len)


class BwClient(_Side):
    def __init__(self, op: str = "write", size: int = BW.default_size, count: int | None = None,
                 duration: float | None = None, depth: int | None = None, bidir: bool = False):  # fmt: skip
        self.op, self.size, self.count, self.duration = op, size, count, duration
        self.depth = auto_depth(size) if depth is None else depth  # given: as given
        self.bidir = bidir
        self.mr = None
        self.stream: Stream | None = None
        self.reverse: Rate | None = None  # the server's stream, as it reported it
        self.arrivals = Arrivals()  # SEND --bidir: the server's messages, as they arrived
        self.next_progress = 0.0
        self.done_told = self.done_sent = False
        self.group = 1  # --qps: said in the hello, so that a default server takes them all
        self.native: N.BwLoop | None = None  # the stream's loop in C (rdmacli.native), when it runs there

    @classmethod
    def from_params(cls, p):
        client = cls(p.op, p.size, p.count, p.duration, p.depth, p.bidir)
        client.group = p.group
        return client

    def conn_param(self) -> ConnParam:
        flags = OPS[self.op] | (H.BIDIR if self.bidir else 0)
        depth = min(self.depth, H.MAX_COUNT) if self.bidir else 0  # the server's window, --bidir
        hello = H.Hello(BW.hello_kind, depth, self.size, flags=flags, group=self.group)  # the count is ours
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
        window = min(self.depth, lim.max_qp_wr) if lim is not None else self.depth
        self.stream = Stream(self.op, self.size, window, self.count, self.duration)
        recvs = self.recv_window(conn) if self.bidir else 0
        conn.create_qp(qp_type=C.QPT_RC, send_wr=window + CTL_RECVS, recv_wr=max(recvs, 1))
        # a READ's sink takes the READ responses as tagged writes on iWARP: remote write (rping.c's)
        self.buffers(conn, recvs, remote_access=self.bidir or self.op == "read")

    def on_established(self, conn) -> None:
        ev = conn.last_event
        if self.op != "send":
            data = ev.private_data if ev is not None else b""
            self.stream.remote = advertised(conn, data, self.size, "server", "bw")
        self.stream.start()
        self.next_progress = self.stream.t_start + PROGRESS_S
        if self.bidir:  # the server's stream starts on this (and, for WRITE and READ, needs it)
            mine = pack_info(self.mr.addr, self.mr.rkey, self.size) if self.op != "send" else b""
            self.tell(conn, ADVERT, mine)
        if self.native_loop(conn) is not None:
            later(conn, self.native_slice)
        else:
            self.stream.post(conn, self.mr)

    def native_loop(self, conn) -> N.BwLoop | None:
        """The stream in C: a one-way WRITE or READ on a QP whose CQ is its own, where built."""
        if self.op not in NATIVE_OPS or self.bidir:
            return None
        handles = conn.native_handles()
        if handles is not None:
            s = self.stream
            self.native = N.BwLoop(*handles, opcode=OPCODES[self.op], size=self.size,
                                   buf=(self.mr.addr, self.mr.lkey), remote=s.remote, window=s.window,
                                   chain=CHAIN, limit=s.count)  # fmt: skip
        return self.native

    def native_slice(self, conn) -> None:
        """The stream in C until the slice's end; between slices the engine's loop turns (its
        polls count completions into the stream too) and progress is said."""
        s = self.stream
        if conn.finished or self.done_sent or s.stopped:
            return
        _, sl = self.native.stream(s.completed, s.t_stop, SLICE_S, conn.flow.timeouts.idle_s)
        moved = sl.status == N.OK and self.native.state.completed > s.completed
        s.posted, s.completed = self.native.state.posted, self.native.state.completed
        if moved:
            conn.progress()
        if not go_on(conn, sl):
            return
        if sl.status == N.DEADLINE:  # nothing completes: the engine's idle deadline says so
            return
        if self.turn(conn, time.monotonic(), beat_done=False):
            later(conn, self.native_slice)

    def on_wc(self, conn, wc) -> None:
        now = time.monotonic()
        if wc.opcode & C.WC_RECV:
            if wc.imm_data == RESULT:
                self.reverse = self.result(conn, wc)
            elif wc.imm_data is None and self.op == "send":
                self.arrivals.note(wc.byte_len, now)
            self.repost(conn)
        else:
            self.stream.completion(wc)
        self.turn(conn, now, beat_done=wc.wr_id == BEAT)

    def turn(self, conn, now: float, beat_done: bool) -> bool:
        """Progress said, the stream fed (unless it runs in C), its end handled; True: it goes on."""
        if now >= self.next_progress:
            self.next_progress = now + PROGRESS_S
            conn.flow.emit(Progress(conn=conn.index, rate=self.stream.figures(now)))
            if self.op != "send" and not beat_done:
                conn.post_send(BEAT, self.mr, 0, 0)
        if self.native is None:
            self.stream.post(conn, self.mr)
        if not self.stream.finished():
            return True
        if self.bidir and not self.done_told:
            self.done_told = True
            self.tell(conn, DONE)  # after every data WR on this QP: in order at the server
        if (not self.bidir or self.reverse is not None) and not self.done_sent:
            self.done_sent = True
            conn.disconnect()
        return False

    def result(self, conn, wc) -> Rate:
        """The server's RESULT, checked: a figure no run can have is a protocol violation."""
        raw = self.inbox.read(0, RESULT_FORMAT.size) if wc.byte_len >= RESULT_FORMAT.size else b""
        messages, seconds = RESULT_FORMAT.unpack(raw) if raw else (-1, -1.0)
        if not (0 <= messages <= MAX_MESSAGES and math.isfinite(seconds) and 0 < seconds < 1e7):
            raise RdmacliError(
                f"the server reported an impossible result ({wc.byte_len} bytes) [{conn.flow.where(conn)}]",
                hint="the peer is not rdmacli listen --bw",
                cause=Cause.PEER_PROTOCOL,
            )
        rate = Rate.of(messages, self.size, seconds)
        port = conn.backend.rate_bound_gbps(conn.device, conn.cm.port_num or 1)
        if port and rate.gbps > port * RATE_SLACK:
            raise RdmacliError(
                f"the server reported {rate.gbps:g} Gb/s back, above this port's {port:g} Gb/s "
                f"[{conn.flow.where(conn)}]",
                hint="no port sends faster than its line rate: the peer's figures cannot be trusted",
                cause=Cause.PEER_PROTOCOL,
            )
        return rate

    def on_disconnected(self, conn) -> None:
        if self.done_sent:
            conn.finish()
        else:
            s = self.stream
            conn.fail(
                RdmacliError(
                    f"the server disconnected after {s.completed if s else 0} of "
                    f"{self.count if self.count is not None else '?'} messages [{conn.flow.where(conn)}]",
                    hint="the server ended the test: stopped, or its own --idle-timeout passed (under loss, "
                    "retransmissions hold the heartbeat behind the window: see the counters, "
                    "or use a smaller --depth or a longer --idle-timeout); check its output",
                    cause=Cause.PEER_ENDED,
                )
            )

    def summary(self) -> BwFigures:
        started = self.stream is not None and self.stream.t_start is not None
        f = self.stream.figures() if started else Rate()
        return BwFigures(
            op=self.op,
            size_bytes=self.size,
            depth=self.stream.window if self.stream else self.depth,
            messages_sent=f.messages,
            bytes_sent=f.bytes,
            elapsed_us=round(f.seconds * 1e6, 1),
            gbps=f.gbps,
            msg_per_s=f.msg_per_s,
            bidir=self.bidir,
            reverse=self.reverse,
            data_path=N.NATIVE if self.native is not None else N.PYTHON,
            **self._received(),
        )


class BwServer(_Side):
    role = "server"

    def __init__(self, size: int = BW.default_size, *, max_size: int = BW.max_size, depth: int = DEPTH):
        self.size, self.max_size, self.depth = size, max_size, depth
        self.op = "write"
        self.bidir = False
        self.mr = None
        self.stream: Stream | None = None
        self.arrivals = Arrivals()  # SEND: the client's messages, as they arrived
        self.result_sent = False

    @classmethod
    def from_params(cls, p):
        return cls(p.size, **p.limits())

    def companions(self, ev) -> int:
        return H.companions(ev.private_data, BW.hello_kind)

    def on_request(self, conn, ev) -> None:
        self.op, self.size, extra = H.operation(
            ev.private_data, BW.hello_kind, self.max_size, OP_NAMES, BW.min_size, options=H.BIDIR
        )
        self.bidir = bool(extra & H.BIDIR)
        if self.bidir:  # the client's depth, within what this device and server allow
            self.depth = max(1, min(H.parse(ev.private_data).count or self.depth, self.depth))

    def setup(self, conn) -> None:
        recvs = self.recv_window(conn)
        window = conn.window(self.depth) if self.bidir else 0
        self.stream = Stream(self.op, self.size, window) if self.bidir else None
        conn.create_qp(qp_type=C.QPT_RC, send_wr=window + CTL_RECVS, recv_wr=recvs)
        self.buffers(conn, recvs, remote_access=True)

    def accept_param(self) -> ConnParam:
        data = pack_info(self.mr.addr, self.mr.rkey, self.size) if self.mr is not None else b""
        return ConnParam(private_data=data, responder_resources=16, initiator_depth=16,
                         retry_count=7, rnr_retry_count=7)  # fmt: skip

    def on_wc(self, conn, wc) -> None:
        s = self.stream
        if wc.opcode & C.WC_RECV:
            if wc.imm_data == ADVERT and s is not None and s.t_start is None:
                if self.op != "send":
                    theirs = self.inbox.read(0, min(wc.byte_len, INFO.size))
                    s.remote = advertised(conn, theirs, self.size, "client", "bw")
                s.start()
            elif wc.imm_data == DONE and s is not None:
                s.stopped = True
            elif wc.imm_data is None and self.op == "send":
                self.arrivals.note(wc.byte_len, time.monotonic())
            # else: a heartbeat (empty): the engine counted it as progress
            self.repost(conn)
        elif s is not None:
            s.completion(wc)
        if s is None:
            return
        s.post(conn, self.mr)
        if s.stopped and s.finished() and not self.result_sent:
            self.result_sent = True
            f = s.figures()
            self.tell(conn, RESULT, RESULT_FORMAT.pack(f.messages, f.seconds))

    def on_disconnected(self, conn) -> None:
        conn.finish()  # the client ends the test; its figures are its own

    def summary(self) -> BwServed:
        sent = self.stream.figures() if self.stream is not None and self.stream.t_start is not None else None
        return BwServed(
            op=self.op,
            size_bytes=self.size,
            **self._received(),
            messages_sent=sent and sent.messages,
            bytes_sent=sent and sent.bytes,
            gbps_sent=sent and sent.gbps,
        )
