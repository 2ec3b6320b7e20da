"""The multicast sequence (mckey): [bind] -> resolve addr -> create qp -> join -> data -> leave.

The QP is created before the join so that librdmacm attaches it to the group (cma.c). A
receiver waits for its sender's first datagram without an idle deadline (a person starts the
sender, maybe minutes later; bounded only by --wait or --timeout); the idle deadline starts once
datagrams flow.
"""

from __future__ import annotations

import errno

from rdmacli import events as E
from rdmacli.engine import lifecycle as L
from rdmacli.engine.client import ActiveFlow
from rdmacli.engine.conn import Connection
from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma.cm import CmEvent, RdmaCallError


class McastFlow(ActiveFlow):
    side = "mcast"
    rows = L.MULTICAST

    def __init__(self, *, group, send_only: bool = False, **kw):
        super().__init__(dst=group, **kw)
        self.group, self.send_only = group, send_only

    def bind_first(self) -> bool:
        return True

    def remote_name(self) -> str:
        return str(self.group.host)

    def on_addr_resolved(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.leave(conn, ev)
        conn.learn_addresses()
        conn.remote = self.group.host
        self.setup_qp(conn)
        self.enter(conn, to)
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
                cause=Cause.ENVIRONMENT,
                details={"step": "join"},
            ) from exc
        conn.group = self.group

    def on_joined(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.leave(conn, ev)
        joined = E.Joined(conn=conn.index, info=conn.protocol.joined(conn, ev))
        self.start_data(conn, to)
        self.emit(joined)  # a readiness record: a receiver's buffers are posted by now
