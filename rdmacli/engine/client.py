"""The active side of rdma_cm(7), one state machine per connection.

create id -> resolve addr -> ADDR_RESOLVED -> resolve route -> ROUTE_RESOLVED -> create qp ->
connect -> ESTABLISHED -> data -> disconnect -> DISCONNECTED. Error events end their connection
(flow.Flow.fail_on).
"""

from __future__ import annotations

import errno
import time

from rdmacli import events as E
from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import Flow
from rdmacli.engine.status import call_error, nobody_listens, refused_at_once
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import CmEvent, RdmaCallError

PHASE_ORDER = {phase: k for k, phase in enumerate(L.Phase)}  # C's numbers (RDMACLI_PH_*)


class ActiveFlow(Flow):
    """Flows whose connections start by resolving an address (clients, multicast members)."""

    def __init__(self, *, dst: SockAddr, src: SockAddr | None = None, connections: int = 1, **kw):
        super().__init__(**kw)
        self.dst, self.src, self.n = dst, src, connections
        self.restarting: set[int] = set()  # connections waiting to be made again
        self._names: tuple[str, str] | None = None  # (where, remote): the same for every connection

    def bind_first(self) -> bool:
        return False

    def run(self) -> None:
        if self.lockstep:  # cmtime's order: every id, every bind (-b), every address asked for
            conns = [self.open(i) for i in range(self.n)]
            for conn in conns if self.src is not None else ():
                self.bind(conn)
            for conn in conns:  # read as they come, as cmtime's event thread does: the step
                self.resolve(conn)  # ends at the last event's read, not after every request
                self.loop.read_cm()
        else:
            for i in range(self.n):
                self.start(i)
        self.run_loop(lambda: not self.restarting and self.all_finished())

    def start(self, index: int) -> None:
        """Create connection `index`'s id and start resolving (the first step of rdma_cm(7))."""
        self.resolve(self.open(index))

    def open(self, index: int) -> Connection:
        if self._names is None:
            self._names = (f"{self.src or '*'} -> {self.dst}", self.remote_name())
        where, remote = self._names
        cm = self.create_id(index, where)
        return self.new_conn(index, cm, remote=remote, local=self.src.host if self.src else "*")

    def bind(self, conn: Connection) -> None:
        """cmtime's "bind addr": the source address taken before the address is asked for."""
        self.timer.start("bind addr", conn.index)
        self.resolve_call(conn.cm.bind, self.src)
        self.timer.end("bind addr", conn.index)

    def resolve(self, conn: Connection) -> None:
        if self.src is not None and self.bind_first():
            self.bind(conn)
        self.enter(conn, L.RESOLVE_ADDR)
        self.resolve_call(conn.cm.resolve_addr, self.src, self.dst, self.timeouts.resolve_ms)

    def resolve_call(self, fn, *args) -> None:
        """A call of the resolution's first step; a failure is said as that step's."""
        try:
            fn(*args)
        except RdmaCallError as exc:
            raise call_error("resolve addr", exc, self._names[0] if self._names else "") from exc

    def remote_name(self) -> str:
        return str(self.dst)


class ClientFlow(ActiveFlow):
    """With timeouts.wait_s a client started before its server waits for it: a request that
    finds nothing listening is made again, with a new cm_id, until the wait is over."""

    side = "client"
    rows = L.ACTIVE
    RETRY_S = 0.5  # between requests that found nothing listening

    def __init__(self, *, route_only: bool = False, **kw):
        super().__init__(**kw)
        self.route_only = route_only  # stop after ROUTE_RESOLVED (doctor's resolution probe)
        self.wait_until = self.t0 + self.timeouts.wait_s if self.timeouts.wait_s else None
        self.held: dict[int, tuple[Connection, CmEvent, L.Bound]] = {}  # lockstep's, by index
        self.ended = 0  # connections finished (and heard by their protocol)
        self.opening = False  # a gate's handlers are running

    def run(self) -> None:
        self.lockstep = self.in_cmtime_order(self.make_protocol())
        super().run()

    def in_cmtime_order(self, protocol) -> bool:
        """A protocol that times cmtime's steps (bare.py) runs them in cmtime's order."""
        return bool(getattr(protocol, "lockstep", False)) and not self.route_only

    def _dispatch(self, conn: Connection, ev: CmEvent) -> None:
        if ev.status and self.asks_again(ev) and self.may_wait():
            self.retry(conn)
        else:
            super()._dispatch(conn, ev)
        if self.held:  # this one's event may be the last a gate waited for
            self.open_gates()

    # -- lockstep: cmtime's order -----------------------------------------------------------------
    def hold(self, conn: Connection, ev: CmEvent, row: L.Bound) -> None:
        """An event a row expects waits for the gate: the step ended at its read (the handler's
        leave says so); its deadline is over, the slowest connection's is not its own."""
        self.held[conn.index] = (conn, ev, row)
        conn.deadline = None

    def open_gates(self) -> None:
        """Once every live connection has its event held, the held ones of the earliest phase
        go on, their handlers run in the connections' order: cmtime runs each step for every
        connection before the next (a laggard, asked again after --wait, is waited for).
        ROUTE_RESOLVED's are cmtime's two steps: every QP, then every request. A rule C keeps
        too (native/cmflow.c cm_open_gates), held to it by the parity test."""
        if self.opening:
            return  # a handler's connection finished: the gate being opened goes on
        self.opening = True
        try:
            self._open_gates()
        finally:
            self.opening = False

    def _open_gates(self) -> None:
        while self.held:
            if len(self.held) + self.ended < len(self.conns):
                return  # somebody's event is still to come (O(1): called at every event)
            for key in [k for k, (c, _, _) in self.held.items() if c.finished]:
                del self.held[key]
            if len(self.held) + self.ended < len(self.conns):
                return
            first = min(PHASE_ORDER[c.phase] for c, _, _ in self.held.values())
            batch = sorted(h for h in self.held.items() if PHASE_ORDER[h[1][0].phase] == first)
            for index, _ in batch:
                del self.held[index]
            self.gate_opened = time.monotonic()
            try:
                self.release([h for _, h in batch])
            finally:
                self.gate_opened = None

    def release(self, batch: list[tuple[Connection, CmEvent, L.Bound]]) -> None:
        if batch[0][2].action == "route_resolved":
            for conn, ev, _ in batch:
                self.guarded(conn, self.make_qp, ev)
            for conn, _, row in batch:
                if not conn.finished:
                    self.guarded(conn, self.request, row.next)
            return
        for conn, ev, row in batch:
            self.guarded(conn, row.handler.__get__(self), ev, row.next)

    def on_finished(self, conn: Connection) -> None:
        if not conn.ended:
            self.ended += 1  # of self.conns (a client never retires one; a retry drops one unended)
        super().on_finished(conn)
        if self.held:  # the one the others waited for may have ended (a failure, its deadline)
            self.open_gates()

    def asks_again(self, ev: CmEvent) -> bool:
        """Whether an error event means the server is not there yet (ask again while the wait
        lasts): nothing listens."""
        return nobody_listens(ev.type, ev.status)

    def may_wait(self) -> bool:
        """Nothing listens yet: ask again (--wait) while the wait lasts."""
        until = self.wait_until or 0.0
        return not self.stopping and bool(until) and time.monotonic() + self.RETRY_S < until

    def retry(self, conn: Connection) -> None:
        if not self.restarting and not any(c.retries for c in self.all_conns):
            self.emit(E.Waiting(conn=conn.index, remote=conn.remote, until_s=self.timeouts.wait_s))
        retries = conn.retries + 1
        self.drop(conn)
        self.restarting.add(conn.index)

        def again() -> None:
            self.restarting.discard(conn.index)
            self.start(conn.index)
            self.all_conns[-1].retries = retries

        self.loop.call_later(self.RETRY_S, again)

    def on_addr_resolved(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.leave(conn, ev)
        conn.learn_addresses()
        if self.options.tos is not None:
            conn.cm.set_tos(self.options.tos)
        if self.options.ack_timeout is not None:
            conn.cm.set_ack_timeout(self.options.ack_timeout)
        self.enter(conn, to)
        conn.cm.resolve_route(self.timeouts.resolve_ms)

    def on_route_resolved(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.make_qp(conn, ev)
        if not conn.finished:
            self.request(conn, to)

    def make_qp(self, conn: Connection, ev: CmEvent) -> None:
        self.leave(conn, ev)  # addresses and device were learnt at ADDR_RESOLVED: they stay
        if self.route_only:
            conn.finish()
            return
        self.setup_qp(conn)

    def request(self, conn: Connection, to: L.Phase) -> None:
        """The connection request (rdma_connect)."""
        self.enter(conn, to)
        try:
            conn.cm.connect(conn.protocol.conn_param())
        except RdmaCallError as exc:
            if exc.errno != errno.ECONNREFUSED:
                raise
            if self.may_wait():  # iWARP: nobody listens (a TCP reset), said by the call itself
                self.retry(conn)
                return
            raise refused_at_once(
                conn.phase, exc, local=conn.local, remote=conn.remote, device=conn.device
            ) from None

    def on_established(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.leave(conn, ev)
        self.start_data(conn, to)
