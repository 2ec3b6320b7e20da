"""One perftest test, from either side: its two connections and where their exchange is.

`Session` walks the binary's STEPS (protocols/perftest.py) over two connections of one engine
flow: the control connection (`Control`: lock-step SENDs of perftest's structs) and the test's
QP (`Stream` for ib_*_bw, `PingPong` for ib_*_lat). The flow's protocol factory is the
session's (`Session.make_protocol`): the first connection is the control one, every one after
the session asked for the test's (a client connects it at the CONNECT step; a server is sent it
by perftest then, and counts it as the same client's: `companions`).

The test's loops are rdmacli's own: a WRITE or READ stream in C (rdmacli.native.BwLoop) where
it is built, a ping-pong in C (LatLoop: SEND, or perftest's WRITE whose last byte counts, seen
by polling memory), else the same in Python. What perftest sends (its version, its buffer's
address and rkey, the client's report) is untrusted: a message shorter than its format or a
version whose formats differ ends the test in words; a WRITE or READ goes only to the buffer
the peer named, `size` bytes at its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from rdmacli.engine.protocol import Protocol, Reject
from rdmacli.errors import RdmacliError
from rdmacli.protocols import perftest as P
from rdmacli.protocols.perftest_qps import (  # noqa: F401 - Setting: what the commands hand over
    CONTROL_RECVS,
    MAX_CYCLE,
    RECV,
    SEND,
    SLOT,
    PingPong,
    Setting,
    Stream,
    violation,
)
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

MAX_EARLY = 2  # control messages a server keeps ahead of its step (the lock step allows one)


class Session:
    """Where one test's exchange is, for both of its connections: what both roles share. Its
    two roles (`Session.of`) differ in who speaks first (ClientSession sends each step's
    message, ServerSession answers it) and who ends (the client disconnects both)."""

    role = "?"

    @staticmethod
    def of(setting: Setting, role: str) -> Session:
        return (ClientSession if role == "client" else ServerSession)(setting)

    def __init__(self, setting: Setting):
        self.setting = setting
        self.sizes = setting.sweep or (setting.size,)
        self.steps = P.BINARY_STEPS[setting.binary].walk(len(self.sizes), sweep=bool(setting.sweep))
        self.k = -1
        self.round = 0  # which of `sizes` the test is at (or comes to next)
        self.rows: list = []  # each size's figures as it ends (a sweep's table)
        self.control: Control | None = None
        self.test: Stream | PingPong | None = None
        self.control_conn: Any = None  # engine.conn.Connection: the control's, the test's
        self.test_conn: Any = None
        self.want_test = False
        self.early: list[bytes] = []  # a server's: a message that came before its step
        self.peer_version: str | None = None
        self.peer_dest: P.Dest | None = P.Dest()
        self.peer_report: P.Report | None = None
        self.report_fields: dict = {}
        self.cycle_buffer = P.CYCLE_BUFFER  # the larger of the two sides' (check_sys_data)

    @property
    def buffer(self) -> int:
        """The buffer each side offers the other: perftest's BUFF_SIZE(size, cycle buffer) (a
        WRITE or READ of a message smaller than half of it walks through it, cache line by
        cache line)."""
        return max(max(self.sizes), self.cycle_buffer)

    @property
    def size(self) -> int:
        """The size of the test now (a sweep's current one)."""
        return self.sizes[self.round]

    # -- the flow's protocols ------------------------------------------------------------------
    def make_protocol(self) -> Protocol:
        if not self.want_test:
            return Control(self)
        return (Stream if self.setting.test == "bw" else PingPong)(self)

    @property
    def step(self) -> str | None:
        return self.steps[self.k] if 0 <= self.k < len(self.steps) else None

    # -- the steps ------------------------------------------------------------------------------
    def control_up(self, conn) -> None:
        self.control_conn = conn
        if self.k < 0:
            self.advance()

    def advance(self) -> None:
        self.k += 1
        step = self.step
        if step is None:
            self.end()
        elif step == P.CONNECT:
            self.want_test = True
            self.connect_test()
        elif step == P.TEST:
            self.round = self.steps[: self.k].count(P.TEST)
            # the control keeps its idle deadline while the test QP connects and the test runs,
            # pushed out by the test's progress: a WRITE server sees none, and a client stalled
            # mid-stream must not hold it for ever (left quiet, the lab's 64 KiB case waited
            # past 180 s)
            if self.test is not None:  # it is: CONNECT came first
                self.test.start_test(self.test_conn)
        else:  # an exchange step: a peer that goes silent here meets the idle deadline
            self.control_conn.progress()
            self.exchange(step)

    def connect_test(self) -> None:
        """The CONNECT step: the test's QP comes (a client connects it; a server is sent it)."""

    def exchange(self, step: str) -> None:
        """An exchange step begins: this role's part in it."""

    def end(self) -> None:
        """The last step is over."""

    def test_up(self, conn, protocol) -> None:
        """The test's QP is connected (client) or accepted (server)."""
        self.test_conn, self.test = conn, protocol
        if self.step == P.CONNECT:
            self.advance()

    def test_done(self) -> None:
        """This size's test is over (on a server: once it has answered or seen all of it)."""
        if self.step == P.TEST and self.test is not None:
            self.rows.append(self.test.summary())
            self.advance()

    def progress(self) -> None:
        """The test moved: both connections' idle deadlines start again (the control
        connection is silent while the test runs)."""
        for conn in (self.test_conn, self.control_conn):
            if conn is not None and not conn.finished:
                conn.progress()

    def ended(self, conn) -> None:
        """One of the test's two connections is over. A failure ends the other with it, and a
        control connection's end ends the test's QP: a server sees nothing of a WRITE or READ
        stream, so its test QP waits for the client with no deadline of its own, bounded only
        by the control connection's (a client stalled mid-stream held the lab's 64 KiB case
        past 180 s while the control connection had long failed). Another client's connection
        (refused: one test at a time) is none of this test's."""
        if conn is not self.control_conn and conn is not self.test_conn:
            return
        for other in (self.control_conn, self.test_conn):
            if other is None or other is conn or other.finished:
                continue
            if conn.error is not None:
                err = conn.error
                other.fail(RdmacliError(f"the test's other connection failed: {err.message}",
                                        cause=err.cause, hint=err.hint))  # fmt: skip
                other.flow.on_finished(other)
            elif conn is self.control_conn:
                other.disconnect()  # the exchange is over: so is the test

    def received(self, data: bytes) -> None:
        """A control message from the peer: its step's, taken (and answered, by a server)."""
        step = self.step
        if step is None or step in (P.CONNECT, P.TEST):
            self.out_of_step(step, data)
            return
        try:
            value = P.read(step, data)
        except ValueError as exc:
            raise violation(str(exc)) from exc
        taken = EXCHANGES[step].take
        if taken is not None:
            taken(self, value)
        self.answer(step)
        self.advance()

    def out_of_step(self, step: str | None, data: bytes) -> None:
        raise violation(f"a control message came at step {step or 'end'} ({len(data)} bytes)")

    def answer(self, step: str) -> None:
        """A message of the peer's taken: this role's answer, if it gives one."""

    def message(self, step: str) -> bytes:
        return P.message(step, EXCHANGES[step].say(self))

    def send(self, data: bytes) -> None:
        if self.control is not None:  # it is: the control connection is up
            self.control.send(self.control_conn, data)

    # -- what each step's message says, and what the peer's does here -------------------------
    def _take_version(self, value: str) -> None:
        if not P.version_ok(value):
            raise violation(f"it says version {value!r}: rdmacli speaks the exchange of 5.33 and later")
        self.peer_version = value

    def _take_cycle_buffer(self, value: int) -> None:
        if not 0 < value <= MAX_CYCLE:
            raise violation(f"its cycle buffer is {value} bytes: no page size")
        self.cycle_buffer = max(P.CYCLE_BUFFER, value)

    def _take_dest(self, value: P.Dest) -> None:
        self.peer_dest = value

    def _my_dest(self) -> P.Dest:
        return self.test.dest() if self.test is not None else P.Dest()

    def report(self) -> P.Report:
        """The report this side sends (a client's: its test's figures; a server's: zeros)."""
        return P.Report()


class ClientSession(Session):
    """perftest's client side: sends each step's message first, connects the test's QP, and
    disconnects both connections at the end (the test's first, as perftest does)."""

    role = "client"

    def connect_test(self) -> None:
        self.control_conn.flow.start(1)  # the test's QP: the flow's next connection

    def exchange(self, step: str) -> None:
        self.send(self.message(step))

    def report(self) -> P.Report:
        return self.test.report() if self.test is not None else P.Report()

    def end(self) -> None:
        for conn in (self.test_conn, self.control_conn):
            if conn is not None and not conn.finished:
                conn.disconnect()


class ServerSession(Session):
    """perftest's server side: answers each of the client's messages; keeps what comes before
    its step (the lock step allows one message ahead, never more); waits for the client to
    end (perftest's client tears down at its end)."""

    role = "server"

    def exchange(self, step: str) -> None:
        if self.early:
            self.received(self.early.pop(0))

    def out_of_step(self, step: str | None, data: bytes) -> None:
        if step is None:
            super().out_of_step(step, data)
        if len(self.early) >= MAX_EARLY:  # lock step: perftest waits for each answer
            raise violation(
                f"{len(self.early) + 1} control messages came before the test's QP was up: "
                "perftest's lock step sends one and waits for its answer"
            )
        self.early.append(data)  # perftest went on before this side's step: kept

    def answer(self, step: str) -> None:
        self.send(self.message(step))

    def _take_report(self, step: str, value) -> None:
        self.report_fields[step] = value
        if len(self.report_fields) == len(P.REPORT):
            self.peer_report = P.Report(*(self.report_fields[k] for k in P.REPORT))


@dataclass(frozen=True)
class Exchange:
    """One exchange step: what this side's message says (`say`), and what the peer's does here
    (`take`: None, nothing; perftest's fields this side does not use are read and dropped)."""

    say: Callable[[Any], object]  # (session) -> the value its message carries
    take: Callable[[Any, Any], None] | None = None  # (session, the peer's value)


def _report_field(step: str) -> Exchange:
    k = P.REPORT.index(step)

    def take(s, value) -> None:
        if isinstance(s, ServerSession):  # the client's report, for the server's figures
            s._take_report(step, value)

    return Exchange(lambda s: s.report().values()[k], take)


# step -> its Exchange: the binaries' steps (protocols/perftest.py) say which come when
EXCHANGES: dict[str, Exchange] = {
    "version": Exchange(lambda s: P.VERSION, Session._take_version),
    "cycle_buffer": Exchange(lambda s: P.CYCLE_BUFFER, Session._take_cycle_buffer),
    "cache_line": Exchange(lambda s: P.CACHE_LINE),
    "mtu": Exchange(lambda s: 5),  # the largest: the peer keeps its own (the CM sets the path's)
    "dest": Exchange(Session._my_dest, Session._take_dest),
    **{step: _report_field(step) for step in P.REPORT},
}  # fmt: skip


class Control(Protocol):
    """The control connection: one message a step, each way."""

    name = "perftest"

    def __init__(self, session: Session):
        self.session = session
        self.role = session.role
        # the idle deadline from the start (a client that connects and says nothing is cut
        # after --idle-timeout, not kept until --timeout), and through every step
        self.waits_for_peer = False

    def companions(self, ev) -> int:
        return 2  # the control connection and the test's: one client

    def on_request(self, conn, ev) -> None:
        if self.session.control is not None:
            raise Reject("rdmacli: serving one perftest client at a time")

    def setup(self, conn) -> None:
        self.session.control = self
        conn.create_qp(qp_type=C.QPT_RC, send_wr=2, recv_wr=CONTROL_RECVS)
        self.out = conn.reg(SLOT)
        self.inbox = conn.reg(SLOT * CONTROL_RECVS)
        for slot in range(CONTROL_RECVS):
            conn.post_recv(slot, self.inbox, slot * SLOT, SLOT)

    def conn_param(self) -> ConnParam:
        return ConnParam(retry_count=7, rnr_retry_count=7)

    accept_param = conn_param

    def on_established(self, conn) -> None:
        self.session.control_up(conn)

    def send(self, conn, data: bytes) -> None:
        self.out.write(data)
        conn.post_send(SEND, self.out, 0, len(data))

    def on_wc(self, conn, wc) -> None:
        if not wc.opcode & C.WC_RECV:
            return
        slot = wc.wr_id
        data = self.inbox.read(slot * SLOT, min(wc.byte_len, SLOT))
        conn.post_recv(slot, self.inbox, slot * SLOT, SLOT)
        if self.session.control_conn is None:  # a server's first message before ESTABLISHED
            self.session.control_up(conn)
        self.session.received(data)

    def on_disconnected(self, conn) -> None:
        conn.finish()

    def on_ended(self, conn) -> None:
        self.session.ended(conn)


class flow_factory:  # noqa: N801 - called as the function it stands for
    """An engine.session.FlowFactory whose flow's connections are one perftest test's; its
    `session` keeps the test's rows (a sweep's figures by size: the command's summary)."""

    def __init__(self, setting: Setting, role: str):
        self.session = Session.of(setting, role)

    def __call__(self, test, common: dict):
        from rdmacli.engine.session import default_flow

        return default_flow(test, {**common, "make_protocol": self.session.make_protocol})
