"""The multicast sequence (mckey): [bind] -> resolve addr -> create qp -> join -> data -> leave.

The QP is created before the join so that librdmacm attaches it to the group (cma.c).
"""

from __future__ import annotations

import errno

from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import ERROR_EVENTS, Flow, call_error
from rdmacli.errors import ExitCode, RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import CmEvent, CmId, RdmaCallError


class McastFlow(Flow):
    side = "mcast"

    def __init__(
        self, *, group: SockAddr, src: SockAddr | None = None, members: int = 1, send_only: bool = False, **kw
    ):
        super().__init__(**kw)
        self.group, self.src, self.n, self.send_only = group, src, members, send_only

    def run(self) -> None:
        for i in range(self.n):
            self.timer.start("create id", i)
            try:
                cm = CmId.create(self.channel, self.options.ps)
                self.timer.end("create id", i)
                conn = Connection(self, i, cm)
                conn.protocol = self.make_protocol()
                conn.remote = str(self.group.host)
                conn.local = self.src.host if self.src else "*"
                self.add_conn(conn)
                if self.src is not None:
                    self.timer.start("bind addr", i)
                    cm.bind(self.src)
                    self.timer.end("bind addr", i)
                self.timer.start("resolve addr", i)
                conn.expect("resolve addr", self.timeouts.resolve_ms / 1000 + 2)
                cm.resolve_addr(self.src, self.group, self.timeouts.resolve_ms)
            except RdmaCallError as exc:
                raise call_error("resolve addr", exc, f"{self.src or '*'} -> {self.group}") from exc
        self.run_loop(lambda: all(c.finished for c in self.all_conns))

    def on_event(self, conn: Connection, ev: CmEvent) -> None:
        if ev.type in ERROR_EVENTS:
            self.fail_on(conn, ev)
        elif ev.type == C.ADDR_RESOLVED:
            self.step_done(conn, "resolve addr")
            conn.learn_addresses()
            conn.remote = self.group.host
            self.timer.start("create qp", conn.index)
            conn.phase = "create qp"
            conn.protocol.setup(conn)
            self.step_done(conn, "create qp")
            self.timer.start("join", conn.index)
            conn.expect("join", self.timeouts.connect_s)
            try:
                conn.cm.join_multicast(self.group, send_only=self.send_only)
            except RdmaCallError as exc:
                if exc.errno not in (524, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                raise RdmacliError(
                    f"join: {conn.device} cannot join {self.group.host}: {exc}",
                    hint="this kernel or device does not support this multicast group (Soft-RoCE "
                    "on Linux 6.1 rejects IPv6 groups; mckey fails the same way): use an "
                    "IPv4 group",
                    exit_code=ExitCode.ENVIRONMENT,
                    details={"step": "join"},
                ) from exc
            conn.group = self.group
        elif ev.type == C.MULTICAST_JOIN:
            self.step_done(conn, "join")
            conn.connected = True
            self.emit({"type": "joined", "conn": conn.index, **conn.protocol.joined(conn, ev)})
            conn.expect("data", self.timeouts.idle_s)
            conn.protocol.on_established(conn)
