"""mckey (librdmacm/examples/mckey.c) on the wire: UD multicast in the UDP (or IPoIB) port space.

A sender posts `count` SEND_WITH_IMM datagrams (imm = its QP number) to QPN 0xFFFFFF with the
group's QKey; receivers count what arrives. C receivers ignore content and immediate data.
"""

from __future__ import annotations

import errno
import ipaddress

from rdmacli.errors import ExitCode, RdmacliError
from rdmacli.protocols.udaddy import SEND, _Datagrams, check_mtu
from rdmacli.rdma import constants as C
from rdmacli.rdma import verbs
from rdmacli.rdma._ffi import ffi
from rdmacli.rdma.addr import format_gid
from rdmacli.rdma.cm import RdmaCallError


class McastMember(_Datagrams):
    name = "mcast"

    def __init__(
        self, count: int, size: int, *, sender: bool, no_loopback: bool = False, send_delay: float = 0.0
    ):
        super().__init__(count, size)
        self.sender, self.no_loopback, self.send_delay = sender, no_loopback, send_delay
        self.join_info: dict = {}

    def setup(self, conn) -> None:
        conn.datagram = True
        check_mtu(conn, self.size)
        depth = max(self.count, 1)
        flags = C.QP_CREATE_BLOCK_SELF_MCAST_LB if self.no_loopback else 0
        try:
            conn.create_qp(qp_type=C.QPT_UD, send_wr=depth, recv_wr=depth, create_flags=flags)
        except RdmaCallError as exc:
            if not self.no_loopback or exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            raise RdmacliError(
                f"{conn.cm.device} cannot block multicast loopback: creating a QP with "
                f"IBV_QP_CREATE_BLOCK_SELF_MCAST_LB failed ({errno.errorcode[exc.errno]})",
                hint="run without --no-loopback (this host's own QPs then receive what it "
                "sends), or use a device that supports it",
                exit_code=ExitCode.ENVIRONMENT,
                details={"step": "create qp"},
            ) from exc
        self.mr = conn.reg(self.slot * (depth + 1))
        if not self.sender:  # receivers post before joining, as mckey does
            for i in range(self.count):
                verbs.post_recv(conn.qp, i, self.mr, i * self.slot, self.slot)

    def joined(self, conn, ev) -> dict:
        """What was joined: mckey prints 'joined dgid: %s mlid 0x%x sl %d'."""
        attr = ev.ah_attr
        dgid = bytes(ffi().buffer(attr.grh.dgid.raw, 16))
        self.remote_qpn, self.remote_qkey = ev.ud_qp_num, ev.ud_qkey
        self.ah = conn.ah_from_attr(attr)
        self.join_info = {
            "mgid": format_gid(str(ipaddress.IPv6Address(dgid))),
            "mlid": attr.dlid,
            "sl": attr.sl,
            "qkey": ev.ud_qkey,
            "group": conn.remote,
        }
        return self.join_info

    def on_established(self, conn) -> None:
        if not self.sender:
            if self.count == 0:
                conn.finish()
            return
        if self.send_delay:
            conn.flow.loop.call_later(
                self.send_delay, lambda: conn.flow.guarded(conn, lambda c: self._send(c))
            )
        else:
            self._send(conn)

    def _send(self, conn) -> None:
        self.post_sends(conn)
        if self.count == 0:
            conn.finish()

    def on_wc(self, conn, wc) -> None:
        if wc.wr_id == SEND:
            self.sent += 1
            if self.sent == self.count:
                conn.finish()
        else:
            self.received += 1
            if self.received == self.count:
                conn.finish()

    def on_deadline(self, conn) -> RdmacliError | None:
        return None if self.sender else super().on_deadline(conn)

    def summary(self) -> dict:
        d = {"role": "sender" if self.sender else "receiver", "size_bytes": self.size, **self.join_info}
        if self.sender:
            d.update(datagrams_sent=self.sent, datagrams_expected=self.count)
        else:
            d.update(
                datagrams_received=self.received,
                datagrams_expected=self.count,
                datagrams_lost=max(self.count - self.received, 0),
            )
        return d
