"""The active side of rdma_cm(7), one state machine per connection.

create id -> resolve addr -> ADDR_RESOLVED -> resolve route -> ROUTE_RESOLVED -> create qp ->
connect -> ESTABLISHED -> data -> disconnect -> DISCONNECTED. Error events end their connection
(flow.Flow.fail_on).
"""

from __future__ import annotations

from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import Flow, call_error
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import CmEvent, RdmaCallError


class ActiveFlow(Flow):
    """Flows whose connections start by resolving an address (clients, multicast members)."""

    def __init__(self, *, dst: SockAddr, src: SockAddr | None = None, connections: int = 1, **kw):
        super().__init__(**kw)
        self.dst, self.src, self.n = dst, src, connections

    def bind_first(self) -> bool:
        return False

    def run(self) -> None:
        where = f"{self.src or '*'} -> {self.dst}"
        for i in range(self.n):
            cm = self.create_id(i, where)
            conn = self.new_conn(i, cm, remote=self.remote_name(), local=self.src.host if self.src else "*")
            try:
                if self.src is not None and self.bind_first():
                    self.timer.start("bind addr", i)
                    cm.bind(self.src)
                    self.timer.end("bind addr", i)
                self.timer.start("resolve addr", i)
                conn.expect("resolve addr", self.timeouts.resolve_ms / 1000 + 2)
                cm.resolve_addr(self.src, self.dst, self.timeouts.resolve_ms)
            except RdmaCallError as exc:
                raise call_error("resolve addr", exc, where) from exc
        self.run_loop(lambda: all(c.finished for c in self.all_conns))

    def remote_name(self) -> str:
        return str(self.dst)


class ClientFlow(ActiveFlow):
    side = "client"

    def __init__(self, *, route_only: bool = False, **kw):
        super().__init__(**kw)
        self.route_only = route_only  # stop after ROUTE_RESOLVED (doctor's resolution probe)

    def on_event(self, conn: Connection, ev: CmEvent) -> None:
        t = ev.type
        if t == C.ADDR_RESOLVED:
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
            self.setup_qp(conn)
            self.timer.start("cm connect", conn.index)
            conn.expect("cm connect", self.timeouts.connect_s)
            conn.cm.connect(conn.protocol.conn_param())
        elif t == C.ESTABLISHED:
            self.step_done(conn, "cm connect")
            self.on_established(conn)
        elif t == C.DISCONNECTED:
            self.on_disconnected(conn, ev)
