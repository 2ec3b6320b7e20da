"""perftest's test QP, from either side: `Stream` for ib_*_bw, `PingPong` for ib_*_lat, and what
both sides of a test are given alike (`Setting`). A `perftest_session.Session` makes them at the
CONNECT step and walks the steps around them; these run the test's loops: a WRITE or READ stream
in C (rdmacli.native.BwLoop) where it is built, a ping-pong in C (LatLoop), else the same in
Python. What the peer names (its buffer's address and rkey) is untrusted: a WRITE or READ goes
only to the buffer the peer named, `size` bytes at its start.
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, replace

from rdmacli import native as N
from rdmacli.engine.protocol import Protocol
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import BwFigures, BwServed, LatFigures, LatServed, Rate
from rdmacli.native.header import const
from rdmacli.protocols import perftest as P
from rdmacli.protocols.bw import CHAIN, OPCODES, SLICE_S
from rdmacli.protocols.bw import Stream as Window
from rdmacli.protocols.lat import SERVER_IDLE_S, SLICE_CAP, SPIN_S, perftest_figures
from rdmacli.protocols.rping import RttStats
from rdmacli.protocols.slices import go_on, later
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

SLOT = 64  # a control message's buffer (perftest's are 56 bytes at most)
CONTROL_RECVS = 4
OUT_READS = 16  # READs in flight, each way (perftest asks its device's max_qp_rd_atom)
RECV_DEPTH = 512  # SEND: receives kept posted (perftest's rx_depth)
LAT_OPS = {"send": const("RDMACLI_OP_SEND"), "write": const("RDMACLI_OP_WRITE_POLL")}  # the native loop's
RECV, SEND = 0, 1


@dataclass(frozen=True)
class Setting:
    """What both sides of a perftest test are given alike (perftest exchanges none of it)."""

    test: str  # "bw" or "lat"
    op: str  # write, read, send
    size: int
    count: int | None = None  # -n (None with a duration)
    duration: float | None = None  # -D
    depth: int = 128  # -t
    sweep: tuple[int, ...] = ()  # -a: every one of these sizes in turn, on the same QPs (not -D)

    @property
    def binary(self) -> str:
        return P.BINARIES[(self.test, self.op)]


MAX_CYCLE = 1 << 24  # a peer's cycle buffer (its page size) beyond this is no page size


def violation(text: str) -> RdmacliError:
    return RdmacliError(
        f"perftest peer: {text}",
        hint="the peer speaks another version of perftest's exchange, or is not perftest",
        cause=Cause.PEER_PROTOCOL,
    )


class TestSession(typing.Protocol):
    """What a test QP reads of its session (perftest_session.Session): the setting and sizes, the
    peer's dest and report as perftest sent them, and the calls by which it says where it is."""

    setting: Setting
    role: str
    sizes: tuple[int, ...]
    peer_dest: P.Dest | None
    peer_report: P.Report | None

    @property
    def buffer(self) -> int: ...

    @property
    def size(self) -> int: ...

    def test_up(self, conn, protocol) -> None: ...

    def test_done(self) -> None: ...

    def progress(self) -> None: ...

    def ended(self, conn) -> None: ...


class _TestQP(Protocol):
    """What the test's QP of either kind shares: its buffer (the peer's to write or read), its
    connection parameters, and what it says of itself in perftest's dest."""

    def __init__(self, session: TestSession):
        self.session, self.setting, self.role = session, session.setting, session.role
        self.mr = None
        self.qpn = 0
        # a server sees nothing of a WRITE or READ, and perftest sends no heartbeat: it waits for
        # the client's end on the control connection, bounded by --timeout
        self.waits_for_peer = self.role == "server"

    def buffer(self, conn) -> None:
        """The QP exists: its buffer, registered for the peer's WRITEs and READs."""
        access = C.ACCESS_LOCAL_WRITE | C.ACCESS_REMOTE_WRITE | C.ACCESS_REMOTE_READ
        self.mr = conn.reg(self.session.buffer, access)
        self.qpn = conn.cm.qp_num

    def pinned_bytes(self) -> int:
        return self.session.buffer

    def conn_param(self) -> ConnParam:
        return ConnParam(
            responder_resources=OUT_READS, initiator_depth=OUT_READS, retry_count=7, rnr_retry_count=7
        )

    accept_param = conn_param

    def on_established(self, conn) -> None:
        self.qpn = conn.cm.qp_num
        self.session.test_up(conn, self)

    def dest(self) -> P.Dest:
        return P.Dest(
            out_reads=OUT_READS,
            qpn=self.qpn,
            rkey=self.mr.rkey if self.mr else 0,
            vaddr=self.mr.addr if self.mr else 0,
        )

    def remote(self) -> tuple[int, int]:
        """The peer's buffer, `size` bytes at its start: only there is anything written or read."""
        d = self.session.peer_dest
        if not d.vaddr or not d.rkey:
            raise violation("its dest names no buffer (address or rkey 0) for an RDMA WRITE or READ")
        return d.vaddr, d.rkey

    def report(self) -> P.Report:
        return P.Report()

    def on_disconnected(self, conn) -> None:
        conn.finish()

    def on_ended(self, conn) -> None:
        self.session.ended(conn)


class Stream(_TestQP):
    """ib_write_bw, ib_read_bw, ib_send_bw: the client streams `size`-byte messages, `depth` in
    flight, for -n of them or -D seconds; a SEND's server counts what arrives."""

    name = "bw"

    def __init__(self, session: TestSession):
        super().__init__(session)
        self.window: Window | None = None
        self.native: N.BwLoop | None = None
        self.sends = 1
        self.arrived = self.bytes_arrived = 0
        self.t_first = self.t_last = None

    def setup(self, conn) -> None:
        s = self.setting
        recvs = conn.window(RECV_DEPTH) if s.op == "send" and self.role == "server" else 1
        self.sends = conn.window(s.depth) if self.role == "client" else 1
        conn.create_qp(qp_type=C.QPT_RC, send_wr=self.sends, recv_wr=recvs, own_cq=self.role == "client")
        self.buffer(conn)
        self.window = Window(s.op, self.session.size, self.sends, s.count, s.duration)
        if s.op == "send" and self.role == "server":
            conn.post_recv(RECV, self.mr, 0, max(self.session.sizes), n=recvs)
        if self.role == "server":  # accepted: the client connects, then says so on the control QP
            self.session.test_up(conn, self)

    def on_established(self, conn) -> None:
        self.qpn = conn.cm.qp_num
        if self.role == "client":
            self.session.test_up(conn, self)

    def start_test(self, conn) -> None:
        if self.role == "server":  # perftest's server waits: its client says when it is done
            self.session.test_done()
            return
        s, size = self.setting, self.session.size
        w = self.window = Window(s.op, size, self.sends, s.count, s.duration)  # this size's
        if s.op != "send":
            w.remote = self.remote()
        w.start()
        handles = conn.native_handles() if s.op != "send" else None
        if handles is not None:
            buf = (self.mr.addr, self.mr.lkey)
            self.native = N.BwLoop(
                *handles,
                opcode=OPCODES[s.op],
                size=size,
                buf=buf,
                remote=w.remote,
                window=w.window,
                chain=CHAIN,
                limit=w.count,
            )
            later(conn, self.native_slice)
        else:
            w.post(conn, self.mr)

    def native_slice(self, conn) -> None:
        w = self.window
        if conn.finished:
            return
        _, sl = self.native.stream(w.completed, w.t_stop, SLICE_S, conn.flow.timeouts.idle_s)
        if self.native.state.completed > w.completed:
            self.session.progress()
        w.posted, w.completed = self.native.state.posted, self.native.state.completed
        if not go_on(conn, sl) or sl.status == N.DEADLINE:
            return
        if w.finished():
            self.session.test_done()
        else:
            later(conn, self.native_slice)

    def on_wc(self, conn, wc) -> None:
        if wc.opcode & C.WC_RECV:  # a SEND's server: one message arrived
            now = time.monotonic()
            self.t_first = self.t_first or now
            self.t_last, self.arrived = now, self.arrived + 1
            self.bytes_arrived += wc.byte_len
            conn.post_recv(RECV, self.mr, 0, max(self.session.sizes))
            self.session.progress()
            return
        self.window.completion(wc)
        self.session.progress()
        if self.native is None:
            self.window.post(conn, self.mr)
        if self.window.finished():
            self.session.test_done()

    def report(self) -> P.Report:
        r = self.window.figures() if self.window is not None else Rate()
        mbs = P.mib_s(r.bytes, r.seconds)
        return P.Report(self.session.size, r.messages, mbs, mbs, r.msg_per_s / 1e6)

    def summary(self):
        s = replace(self.setting, size=self.session.size)  # a sweep's current size
        if self.role == "client":
            r = self.window.figures() if self.window is not None else Rate()
            depth = self.window.window if self.window else s.depth
            path = N.NATIVE if self.native is not None else N.PYTHON
            return BwFigures(
                messages_sent=r.messages,
                bytes_sent=r.bytes,
                op=s.op,
                size_bytes=s.size,
                depth=depth,
                elapsed_us=round(r.seconds * 1e6, 1),
                gbps=r.gbps,
                msg_per_s=r.msg_per_s,
                data_path=path,
            )
        if s.op == "send":
            secs = (self.t_last - self.t_first) if self.t_first and self.t_last else 0.0
            rate = Rate.of(max(self.arrived - 1, 0), s.size, secs) if self.arrived > 1 else None
            return BwServed(
                messages_received=self.arrived,
                bytes_received=self.bytes_arrived,
                op=s.op,
                size_bytes=s.size,
                gbps_received=rate.gbps if rate else None,
            )
        told = self.session.peer_report  # WRITE and READ: the client's own report, as perftest prints it
        gbps = round(told.bw_avg_mbs * 0x100000 * 8 / 1e9, 4) if told else None
        return BwServed(
            messages_received=told.iters if told else None, op=s.op, size_bytes=s.size, gbps_received=gbps
        )


class PingPong(_TestQP):
    """ib_send_lat and ib_write_lat: the client sends first, each side answers the other's
    message with its own, -n times (ib_write_lat: an RDMA WRITE whose last byte counts the
    messages, seen by polling the buffer)."""

    name = "lat"

    def __init__(self, session: TestSession):
        super().__init__(session)
        self.native: N.LatLoop | None = None
        self.host = RttStats()
        self.answered = 0
        self.t_post = 0.0
        self.expect = 1  # ib_write_lat: the count the peer's next message ends with
        self.sends_posted = self.sends_done = 0  # this side's own, outside the native loop
        self.draining = False  # this size is over once our last send has completed

    def setup(self, conn) -> None:
        s = self.setting
        conn.create_qp(qp_type=C.QPT_RC, send_wr=8, recv_wr=2, own_cq=True)
        self.buffer(conn)
        self.out = conn.reg(max(self.session.sizes))
        if s.op == "send":  # posted for the largest size: a receive posted in one size takes the next's
            conn.post_recv(RECV, self.mr, 0, max(self.session.sizes), n=2)
        if self.role == "server":
            self.session.test_up(conn, self)

    def on_established(self, conn) -> None:
        self.qpn = conn.cm.qp_num
        if self.role == "client":
            self.session.test_up(conn, self)

    def loop(self, conn) -> N.LatLoop | None:
        if self.native is None:
            handles = conn.native_handles()
            if handles is not None:
                s = self.setting
                remote = self.remote() if s.op == "write" else None
                spin = None if conn.flow.options.busy_poll else SPIN_S
                self.native = N.LatLoop(
                    *handles,
                    op=LAT_OPS[s.op],
                    size=self.session.size,
                    send=(self.out.addr, self.out.lkey),
                    recv=(self.mr.addr, self.mr.lkey),
                    remote=remote,
                    max_inline=conn.max_inline,
                    max_sends=6,
                    send_wr_id=SEND,
                    recv_wr_id=RECV,
                    carries_hold=False,
                    spin_s=spin,
                    recv_size=max(self.session.sizes),
                )
        return self.native

    def start_test(self, conn) -> None:
        if self.loop(conn) is None:
            raise RdmacliError(
                "perftest's latency tests run on rdmacli's native data path, which is not built here",
                hint=N.why(),
                cause=Cause.ENVIRONMENT,
            )
        self.native.resize(self.session.size)  # each size's messages counted from 1, as perftest's
        self.host, self.answered = RttStats(), 0
        # this size's test ends when this side has sent and answered -n (a message of the peer's
        # that comes first, with its next hand shake, waits in the session: TestSession.early);
        # ib_send_lat's client sends first; ib_write_lat's server writes first (perftest's
        # run_iter_lat_write): that side asks, the other answers (and times, if the client)
        asks = (self.role == "client") == (self.setting.op == "send")
        later(conn, self.ask_slice if asks else self.answer_slice)

    def ask_slice(self, conn) -> None:
        if conn.finished:
            return
        left = (self.setting.count or 0) - self.host.n
        if left <= 0:
            self.size_done()
            return
        sl = self.native.client(min(left, SLICE_CAP), SLICE_S, conn.flow.timeouts.idle_s)
        for rtt in sl.rtt_ns:
            self.host.add(rtt / 1e9)
        if sl.rtt_ns:
            self.session.progress()
        if not go_on(conn, sl):
            return
        if sl.status in N.HANDED_BACK:
            peer = "client" if self.role == "server" else "server"
            raise RdmacliError(
                f"perftest's {peer} did not answer within {conn.flow.timeouts.idle_s:g} s "
                f"[{conn.flow.where(conn)}]",
                cause=Cause.DEADLINE,
            )
        if self.host.n >= (self.setting.count or 0):
            self.size_done()
        else:
            later(conn, self.ask_slice)

    def size_done(self) -> None:
        """This size is over once our last message has left: a WRITE of ib_write_lat's
        answering side completes nothing at the peer, whose loop waits for it without end, and
        a disconnect (the test's end) flushes one still in flight (8 MiB took longer than that)."""
        if self.unfinished() > 0:
            self.draining = True
        else:
            self.session.test_done()

    def unfinished(self) -> int:
        s = self.native.state
        return s.sends_posted + self.sends_posted - s.sends_done - self.sends_done

    def on_wc(self, conn, wc) -> None:
        """A completion the engine's loop polled between two native slices (the CQ is left
        armed for it): an ib_send_lat client's message that came then is answered here, as
        the native responder would have; our own sends' completions end a size that waits for
        its last (size_done)."""
        if not wc.opcode & C.WC_RECV:
            self.sends_done += 1
            if self.draining and self.unfinished() <= 0:
                self.draining = False
                self.session.test_done()
            return
        if self.setting.op != "send" or self.role != "server":
            return  # a client's native loop returns only when no answer is outstanding
        conn.post_recv(RECV, self.mr, 0, max(self.session.sizes))
        if self.answered >= (self.setting.count or 0):
            raise violation(f"a message beyond the {self.answered} of -n came")
        conn.post_send(SEND, self.out, 0, self.session.size)
        self.sends_posted += 1
        self.answered += 1
        self.session.progress()

    def answer_slice(self, conn) -> None:
        if conn.finished:
            return
        left = (self.setting.count or 0) - self.answered
        timed = self.role == "client"  # ib_write_lat's server writes first: our figures too
        if left <= 0:
            self.size_done()
            return
        sl = self.native.server(min(left, SLICE_CAP), SLICE_S, SERVER_IDLE_S, timed=timed)
        self.answered += sl.answered
        for rtt in sl.rtt_ns:
            self.host.add(rtt / 1e9)
        if sl.answered:
            self.session.progress()
        if go_on(conn, sl):
            later(conn, self.answer_slice)  # its next turn ends the test once -n are answered

    def summary(self):
        s = replace(self.setting, size=self.session.size)  # a sweep's current size
        if self.role == "server":
            answered = self.answered or self.host.n  # ib_write_lat's server writes first: ours asked
            return LatServed(
                op=s.op,
                size_bytes=s.size,
                iterations_answered=answered,
                data_path=N.NATIVE if self.native is not None else N.PYTHON,
            )
        # as perftest counts them: the messages each way (a client that answers times n - 1)
        iterations = max(self.host.n, self.answered)
        why = "perftest's exchange: timed as perftest times it, by the host's cycle counter"
        f = LatFigures(op=s.op, size_bytes=s.size, iterations=iterations, timestamps_why=why)
        if not self.host.n:
            return f
        rtt = perftest_figures(self.host)
        return LatFigures(
            op=s.op,
            size_bytes=s.size,
            iterations=iterations,
            latency_us=perftest_figures(self.host, half=True),
            rtt_us=rtt,
            network_rtt_us=rtt,
            data_path=N.NATIVE,
            timestamps_why=why,
        )
