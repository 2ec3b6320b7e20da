"""mckey (librdmacm/examples/mckey.c) on the wire: UD multicast in the UDP (or IPoIB) port space.

A sender posts `count` SEND_WITH_IMM datagrams (imm = its QP number) to QPN 0xFFFFFF with the
group's QKey; receivers count what arrives. C receivers ignore content and immediate data.
"""

from __future__ import annotations

import errno
import ipaddress

from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import DatagramFigures, JoinInfo
from rdmacli.protocols.table import MCAST
from rdmacli.protocols.udaddy import _Datagrams
from rdmacli.protocols.window import sends_in
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import format_gid
from rdmacli.rdma.cm import RdmaCallError


class McastMember(_Datagrams):
    name = "mcast"
    sender = False

    def __init__(
        self, count: int = MCAST.default_count, size: int = MCAST.default_size, *, no_loopback=False
    ):
        super().__init__(count, size)
        self.no_loopback = no_loopback
        self.join_info: JoinInfo | None = None

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size, no_loopback=p.no_loopback)

    def setup(self, conn) -> None:
        flags = C.QP_CREATE_BLOCK_SELF_MCAST_LB if self.no_loopback else 0
        try:
            super().setup(conn, create_flags=flags)
        except RdmaCallError as exc:
            if not self.no_loopback or exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            raise RdmacliError(
                f"{conn.cm.device} cannot block multicast loopback: creating a QP with "
                f"IBV_QP_CREATE_BLOCK_SELF_MCAST_LB failed ({errno.errorcode[exc.errno]})",
                hint="run without --no-loopback (this host's own QPs then receive what it "
                "sends), or use a device that supports it",
                cause=Cause.ENVIRONMENT,
                details={"step": "create qp"},
            ) from exc

    def joined(self, conn, ev) -> JoinInfo:
        """What was joined: mckey prints 'joined dgid: %s mlid 0x%x sl %d'."""
        self.remote_qpn, self.remote_qkey = ev.ud_qp_num, ev.ud_qkey
        self.ah = conn.ah_from_attr(ev.ah_attr)
        self.join_info = JoinInfo(
            mgid=format_gid(str(ipaddress.IPv6Address(ev.dgid))),
            mlid=ev.dlid,
            sl=ev.sl,
            qkey=ev.ud_qkey,
            group=conn.remote,
        )
        return self.join_info

    def summary(self) -> DatagramFigures:
        join = self.join_info.to_dict() if self.join_info else {}
        member = "sender" if self.sender else "receiver"
        if self.sender:
            counts = {"datagrams_sent": self.sent}
        else:
            counts = {
                "datagrams_received": self.received,
                "datagrams_lost": self.lost(),
            }
        return DatagramFigures(
            datagrams_expected=self.count, size_bytes=self.size, member=member, **counts, **join
        )


class McastReceiver(McastMember):
    """Posts its receives before joining, as mckey does; waits for the sender without an idle
    deadline (a person starts it), then counts what arrives."""

    role = "server"

    waits_for_peer = True

    def on_established(self, conn) -> None:
        if self.count == 0:
            conn.finish()

    def on_wc(self, conn, wc) -> None:
        if not sends_in(wc.wr_id):
            self.recycle(conn, wc)
            if self.received == self.count:
                conn.finish()


class McastSender(McastMember):
    sender = True
    receives = False

    def __init__(
        self, count: int = MCAST.default_count, size: int = MCAST.default_size, *, send_delay=0.0, **kw
    ):
        super().__init__(count, size, **kw)
        self.send_delay = send_delay

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size, no_loopback=p.no_loopback, send_delay=p.send_delay)

    def on_established(self, conn) -> None:
        if self.send_delay:
            conn.later(self.send_delay, self._send)
        else:
            self._send(conn)

    def _send(self, conn) -> None:
        self.post_sends(conn)
        if self.count == 0:
            conn.finish()

    def on_wc(self, conn, wc) -> None:
        if sends_in(wc.wr_id):
            self.sent_chain(conn, wc)
            if self.sent == self.count:
                conn.finish()

    def on_deadline(self, conn):
        return None  # a sender loses nothing it can count: the generic deadline error
