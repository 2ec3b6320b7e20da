"""The rdma_cm(7) client and server sequences as per-connection state machines.

Client: create id -> resolve addr -> resolve route -> create qp -> connect -> ESTABLISHED -> data
-> disconnect. Server: bind -> listen -> CONNECT_REQUEST -> create qp -> accept -> ESTABLISHED
-> data -> disconnect. The wire protocol (protocols/) plugs in through engine.protocol.Protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from rdmacli.engine.conn import Connection
from rdmacli.engine.loop import DeadlineExpired, Loop
from rdmacli.engine.protocol import Protocol, Reject
from rdmacli.engine.status import event_error, short_status
from rdmacli.engine.timing import StepTimer
from rdmacli.errors import ExitCode, RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import CmEvent, CmId, EventChannel, RdmaCallError
from rdmacli.rdma.verbs import WorkCompletion

ERROR_EVENTS = (
    C.ADDR_ERROR,
    C.ROUTE_ERROR,
    C.CONNECT_ERROR,
    C.UNREACHABLE,
    C.REJECTED,
    C.DEVICE_REMOVAL,
    C.MULTICAST_ERROR,
)
Observer = Callable[[dict], None]


@dataclass
class Timeouts:
    resolve_ms: int = 2000  # handed to rdma_resolve_addr/route, as the C tools do
    connect_s: float = 10.0  # connect/accept until ESTABLISHED, and disconnect
    idle_s: float = 10.0  # data phase: longest time without progress
    overall_s: float | None = None  # the whole run


@dataclass
class Options:
    ps: int = C.PS_TCP
    tos: int | None = None
    ack_timeout: int | None = None
    busy_poll: bool = False


def call_error(step: str, exc: RdmaCallError, where: str) -> RdmacliError:
    from rdmacli.engine.status import ERRNO_ADVICE

    code = ExitCode.RESOLVE if "resolve" in exc.call or "bind" in exc.call else ExitCode.FAILED
    if exc.call in ("ibv_reg_mr", "ibv_create_cq", "rdma_create_qp") and exc.errno == 12:
        return RdmacliError(
            f"{step}: {exc} [{where}]",
            exit_code=ExitCode.ENVIRONMENT,
            hint="locked memory is limited (RLIMIT_MEMLOCK); raise it with "
            "`ulimit -l unlimited` or LimitMEMLOCK=infinity",
        )
    return RdmacliError(
        f"{step}: {exc} [{where}]",
        hint=ERRNO_ADVICE.get(exc.errno),
        exit_code=code,
        details={"step": step, "call": exc.call},
    )


class Flow:
    side = "?"

    def __init__(
        self,
        *,
        make_protocol: Callable[[], Protocol],
        observer: Observer | None = None,
        timeouts: Timeouts | None = None,
        options: Options | None = None,
    ):
        self.make_protocol = make_protocol
        self.observer = observer or (lambda rec: None)
        self.timeouts = timeouts or Timeouts()
        self.options = options or Options()
        self.timer = StepTimer()
        self.t0 = time.monotonic()
        self.channel = EventChannel()
        self.loop = Loop(self.channel, busy_poll=self.options.busy_poll)
        self.loop.observers.append(self._observe)
        self.conns: dict[int, Connection] = {}  # cm id key -> connection
        self.all_conns: list[Connection] = []
        self.deadline_all = (self.t0 + self.timeouts.overall_s) if self.timeouts.overall_s else None
        self.closed = False
        self.stopping = False  # set by stop(), possibly from another thread

    # -- observation ---------------------------------------------------------------------------
    def emit(self, rec: dict) -> None:
        rec.setdefault("t_us", round((time.monotonic() - self.t0) * 1e6, 1))
        rec.setdefault("side", self.side)
        self.observer(rec)

    def _observe(self, ev: CmEvent) -> None:
        conn = self.conns.get(ev.id)
        rec = {
            "type": "cm_event",
            "t_us": round((ev.t - self.t0) * 1e6, 1),
            "conn": conn.index if conn else None,
            "event": ev.name,
            "status": ev.status,
            "status_text": short_status(ev.type, ev.status),
        }
        rec.update(ev.params())
        self.emit(rec)

    def step_done(self, conn: Connection, step: str) -> None:
        us = self.timer.end(step, conn.index)
        if us is not None:
            self.emit({"type": "step", "conn": conn.index, "step": step, "us": round(us, 1)})

    # -- shared event handling -----------------------------------------------------------------
    def add_conn(self, conn: Connection) -> None:
        self.conns[conn.cm.key] = conn
        self.all_conns.append(conn)
        self.loop.on_cm(conn.cm.key, lambda ev: self.guarded(conn, self._dispatch, ev))

    def _dispatch(self, conn: Connection, ev: CmEvent) -> None:
        conn.last_event = ev
        self.on_event(conn, ev)

    def guarded(self, conn: Connection, fn, *args) -> None:
        """A failing call fails its connection, not the whole loop."""
        try:
            fn(conn, *args)
        except RdmaCallError as exc:
            conn.fail(call_error(conn.phase, exc, self.where(conn)))
        except RdmacliError as exc:
            conn.fail(exc)
        if conn.finished:
            self.on_finished(conn)

    def where(self, conn: Connection) -> str:
        return f"{conn.local} -> {conn.remote}" + (f" on {conn.device}" if conn.device else "")

    def on_wc(self, conn: Connection, wc: WorkCompletion) -> None:
        if conn.finished:
            return
        if not wc.ok:
            if wc.status == C.WC_WR_FLUSH_ERR and (conn.disconnect_sent or not conn.connected):
                return  # flushed by our own or the peer's disconnect
            conn.fail(
                RdmacliError(
                    f"{conn.phase}: work completion failed: {wc.status_str} (status {wc.status}, "
                    f"opcode {wc.opcode}) [{self.where(conn)}]",
                    hint="the peer went away or misbehaved; RETRY_EXC means no ACKs (peer dead, "
                    "wrong GID/MTU), REM_ACCESS means a bad rkey/address from the peer",
                    exit_code=ExitCode.FAILED,
                )
            )
            self.on_finished(conn)
            return
        conn.progress()
        self.guarded(conn, lambda c, w: c.protocol.on_wc(c, w), wc)

    def on_established(self, conn: Connection) -> None:
        conn.connected = True
        conn.learn_addresses()
        conn.expect("data", self.timeouts.idle_s)
        conn.protocol.on_established(conn)

    def on_disconnected(self, conn: Connection, ev: CmEvent) -> None:
        # Completions may wait in the CQ while the CM fd was served first: count them before
        # judging the exchange, and before our own disconnect flushes what is left.
        if conn.cq is not None:
            self.loop.drain(conn.cq, lambda wc: self.on_wc(conn, wc))
        was_ours = conn.disconnect_sent
        if was_ours:
            self.step_done(conn, "disconnect")
        else:
            conn.disconnect()  # answer the peer's DREQ: flushes our QP
            self.timer.end("disconnect", conn.index)
        conn.connected = False
        conn.protocol.on_disconnected(conn)

    def fail_on(self, conn: Connection, ev: CmEvent) -> None:
        """An error event ends its connection, decoded into words and an exit code."""
        conn.connected = False
        conn.fail(event_error(ev, step=conn.phase, local=conn.local, remote=conn.remote, device=conn.device))

    def on_finished(self, conn: Connection) -> None:
        """Hook: a connection finished (well or not)."""

    def nearest_deadline(self) -> tuple[float, str] | None:
        best = (self.deadline_all, "the overall --timeout") if self.deadline_all else None
        for conn in self.conns.values():
            if not conn.finished and conn.deadline and (best is None or conn.deadline < best[0]):
                best = (conn.deadline, f"{conn.phase} on connection {conn.index}")
        return best

    def first_error(self) -> RdmacliError | None:
        return next((c.error for c in self.all_conns if c.error), None)

    def stop(self) -> None:
        """Ask a running flow to end at its next loop turn (within a second)."""
        self.stopping = True

    def run_loop(self, done: Callable[[], bool]) -> None:
        """Run until done(); a connection whose own deadline passes fails, the others go on."""
        while True:
            try:
                self.loop.run_until(lambda: self.stopping or done(), self.nearest_deadline)
                return
            except DeadlineExpired as exc:
                now = time.monotonic()
                expired = [
                    c for c in self.conns.values() if not c.finished and c.deadline and c.deadline <= now
                ]
                if not expired:
                    raise  # the overall timeout
                for conn in expired:
                    conn.fail(
                        conn.protocol.on_deadline(conn)
                        or DeadlineExpired(
                            f"{conn.phase}: no progress within its deadline [{self.where(conn)}]",
                            hint=exc.hint,
                            details={"step": conn.phase},
                        )
                    )
                    self.on_finished(conn)

    # -- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for conn in self.all_conns:
            conn.teardown()
        self.close_extra()
        self.loop.close()
        self.channel.close()

    def close_extra(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ClientFlow(Flow):
    side = "client"

    def __init__(
        self,
        *,
        dst: SockAddr,
        src: SockAddr | None = None,
        connections: int = 1,
        route_only: bool = False,
        **kw,
    ):
        super().__init__(**kw)
        self.dst, self.src, self.n = dst, src, connections
        self.route_only = route_only  # stop after ROUTE_RESOLVED (doctor's resolution probe)

    def run(self) -> None:
        for i in range(self.n):
            self.timer.start("create id", i)
            try:
                cm = CmId.create(self.channel, self.options.ps)
            except RdmaCallError as exc:
                raise call_error("create id", exc, str(self.dst)) from exc
            self.timer.end("create id", i)
            conn = Connection(self, i, cm)
            conn.protocol = self.make_protocol()
            conn.remote = str(self.dst)
            conn.local = str(self.src.host) if self.src else "*"
            self.add_conn(conn)
            self.timer.start("resolve addr", i)
            conn.expect("resolve addr", self.timeouts.resolve_ms / 1000 + 2)
            try:
                cm.resolve_addr(self.src, self.dst, self.timeouts.resolve_ms)
            except RdmaCallError as exc:
                raise call_error("resolve addr", exc, f"{self.src or '*'} -> {self.dst}") from exc
        self.run_loop(lambda: all(c.finished for c in self.all_conns))

    def on_event(self, conn: Connection, ev: CmEvent) -> None:
        t = ev.type
        if t in ERROR_EVENTS:
            self.fail_on(conn, ev)
        elif t == C.ADDR_RESOLVED:
            self.step_done(conn, "resolve addr")
            conn.learn_addresses()
            if self.options.tos is not None:
                conn.cm.set_tos(self.options.tos)
            if self.options.ack_timeout is not None:
                conn.cm.set_ack_timeout(self.options.ack_timeout)
            self.timer.start("resolve route", conn.index)
            conn.expect("resolve route", self.timeouts.resolve_ms / 1000 + 2)
            conn.cm.resolve_route(self.timeouts.resolve_ms)
        elif t == C.ROUTE_RESOLVED:
            self.step_done(conn, "resolve route")
            conn.learn_addresses()
            if self.route_only:
                conn.finish()
                return
            self.timer.start("create qp", conn.index)
            conn.phase = "create qp"
            conn.protocol.setup(conn)
            self.step_done(conn, "create qp")
            self.timer.start("cm connect", conn.index)
            conn.expect("cm connect", self.timeouts.connect_s)
            conn.cm.connect(conn.protocol.conn_param())
        elif t == C.ESTABLISHED:
            self.step_done(conn, "cm connect")
            self.on_established(conn)
        elif t == C.DISCONNECTED:
            self.on_disconnected(conn, ev)


class ServerFlow(Flow):
    side = "server"

    def __init__(self, *, bind: SockAddr, max_clients: int | None = 1, backlog: int = 0, **kw):
        super().__init__(**kw)
        self.bind_addr, self.max_clients, self.backlog = bind, max_clients, backlog
        self.listen_id: CmId | None = None
        self.accepted = 0
        self.finished_conns: list[Connection] = []
        self.rejected = 0

    def run(self) -> None:
        self.timer.start("create id", -1)
        try:
            self.listen_id = CmId.create(self.channel, self.options.ps)
            self.timer.end("create id", -1)
            self.timer.start("bind addr", -1)
            self.listen_id.bind(self.bind_addr)
            self.timer.end("bind addr", -1)
            self.listen_id.listen(self.backlog)
        except RdmaCallError as exc:
            raise call_error("listen", exc, str(self.bind_addr)) from exc
        self.loop.on_cm(self.listen_id.key, self.on_listen_event)
        self.emit(
            {
                "type": "ready",
                "address": self.bind_addr.host,
                "port": self.bind_addr.port,
                "port_space": self.options.ps,
            }
        )
        self.run_loop(self.done)

    def done(self) -> bool:
        return (
            self.max_clients is not None
            and len(self.finished_conns) + self.rejected >= self.max_clients
            and all(c.finished for c in self.all_conns)
        )

    def on_listen_event(self, ev: CmEvent) -> None:
        if ev.type != C.CONNECT_REQUEST:
            if ev.type == C.DEVICE_REMOVAL:
                raise RdmacliError(
                    "the RDMA device under the listener was removed", exit_code=ExitCode.ENVIRONMENT
                )
            return
        index = self.accepted + self.rejected
        conn = Connection(self, index, CmId(ev.raw_id, self.channel))
        conn.protocol = self.make_protocol()
        conn.learn_addresses()
        self.add_conn(conn)
        # the CONNECT_REQUEST row itself was shown without a connection number: name it here
        self.emit(
            {
                "type": "request",
                "t_us": round((ev.t - self.t0) * 1e6, 1),
                "conn": index,
                "local": conn.local,
                "remote": conn.remote,
                "device": conn.device,
            }
        )
        capacity = self.max_clients is None or self.accepted < self.max_clients
        try:
            if not capacity:
                raise Reject("rdmacli: server is full")
            conn.protocol.on_request(conn, ev)
        except Reject as r:
            self.reject(conn, str(r))
            return
        self.accepted += 1
        self.timer.start("accept", index)
        conn.expect("accept", self.timeouts.connect_s)
        try:
            if self.options.ack_timeout is not None:
                conn.cm.set_ack_timeout(self.options.ack_timeout)
            conn.phase = "create qp"
            self.timer.start("create qp", index)
            conn.protocol.setup(conn)
            self.step_done(conn, "create qp")
            conn.phase = "accept"
            conn.cm.accept(conn.protocol.accept_param())
            if conn.datagram:  # UD: the SIDR REP is sent, no ESTABLISHED follows
                self.step_done(conn, "accept")
                self.on_established(conn)
        except RdmaCallError as exc:
            conn.fail(call_error(conn.phase, exc, self.where(conn)))
        except RdmacliError as exc:
            conn.fail(exc)
        if conn.finished:
            self.on_finished(conn)

    def reject(self, conn: Connection, reason: str) -> None:
        self.rejected += 1
        self.emit({"type": "rejected", "conn": conn.index, "remote": conn.remote, "reason": reason})
        try:
            conn.cm.reject(reason.encode()[:140] + b"\0")
        except RdmaCallError:
            pass
        conn.finished = conn.rejected = True
        conn.teardown()
        self.conns.pop(conn.cm.key, None)

    def on_event(self, conn: Connection, ev: CmEvent) -> None:
        t = ev.type
        if t in ERROR_EVENTS:
            self.fail_on(conn, ev)
        elif t == C.ESTABLISHED:
            self.step_done(conn, "accept")
            self.on_established(conn)
        elif t == C.DISCONNECTED:
            self.on_disconnected(conn, ev)

    def on_finished(self, conn: Connection) -> None:
        if conn in self.finished_conns:
            return
        self.finished_conns.append(conn)
        rec = {
            "type": "connection",
            "conn": conn.index,
            "remote": conn.remote,
            "result": "fail" if conn.error else "pass",
        }
        rec.update(conn.protocol.summary())
        if conn.error:
            rec["error"] = conn.error.to_dict()
        conn.teardown()
        self.conns.pop(conn.cm.key, None)
        self.emit(rec)

    def close_extra(self) -> None:
        if self.listen_id is not None:
            try:
                self.listen_id.destroy()
            except RdmaCallError:
                pass
            self.listen_id = None
