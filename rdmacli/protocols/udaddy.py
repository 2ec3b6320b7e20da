"""udaddy (librdmacm/examples/udaddy.c) on the wire: UD, UDP port space, port 7174.

The client sends `count` SEND_WITH_IMM datagrams whose immediate data is its own QP number; the
server builds the reply address from the first receive's work completion and GRH, replies `count`
times to that QP number, and both count what arrived. UD loses datagrams: a receive wait ends at
its deadline and the summary reports the loss (reference section 3).
"""

from __future__ import annotations

from rdmacli.engine.lifecycle import DATA, WAIT_FOR_PEER
from rdmacli.engine.protocol import Protocol, Reject
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import DatagramFigures
from rdmacli.protocols import hello as H
from rdmacli.protocols.table import UD
from rdmacli.protocols.window import Windowed, chain, sends_in
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam


def check_mtu(conn, size: int) -> None:
    """udaddy's verify_test_params: a datagram must fit the port's active MTU."""
    mtu = conn.cm.active_mtu()
    if mtu is not None and size > mtu:
        raise RdmacliError(
            f"message size {size} is larger than the active MTU {mtu} of {conn.cm.device} "
            f"port {conn.cm.port_num}",
            hint=f"use -S {mtu} or less (UD cannot fragment)",
            cause=Cause.USAGE,
            details={"size_bytes": size, "mtu_bytes": mtu},
        )


class _Datagrams(Windowed, Protocol):
    """One receive slot per outstanding receive, so each GRH stays readable (udaddy shares one
    buffer); a window of slots is recycled, so any count fits any device. UD has no flow
    control: a peer's burst lands only in receives already posted, so the window is the whole
    count, as udaddy and mckey post it, bounded by the device alone (not MAX_WINDOW: 10 000
    datagrams from udaddy into 4096 receives lost a thousand in the lab)."""

    name = "ud"
    receives = True  # does this side post receives at setup (a multicast sender does not)

    def __init__(self, count: int = UD.default_count, size: int = UD.default_size):
        self.count, self.size = count, size
        self.window = 1
        self.received = self.sent = self.sends_posted = self.recvs_posted = 0
        self.mr = None
        self.ah = None
        self.remote_qpn = self.remote_qkey = 0

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size)

    @property
    def slot(self) -> int:
        return self.size + C.GRH_BYTES

    def setup(self, conn, create_flags: int = 0) -> None:
        conn.datagram = True
        check_mtu(conn, self.size)
        self.window = conn.window(self.count, cap=None)
        conn.create_qp(qp_type=C.QPT_UD, send_wr=self.window, recv_wr=self.window, create_flags=create_flags)
        self.mr = conn.reg(self.slot * (self.window + 1))  # the last slot holds what we send
        if self.receives:
            for i in range(min(self.count, self.window)):
                conn.post_recv(i, self.mr, i * self.slot, self.slot)
            self.recvs_posted = min(self.count, self.window)

    def recycle(self, conn, wc) -> None:
        """A datagram arrived in slot wc.wr_id: count it and post that slot again if more are due."""
        self.received += 1
        if self.recvs_posted < self.count:
            conn.post_recv(wc.wr_id, self.mr, wc.wr_id * self.slot, self.slot)
            self.recvs_posted += 1

    def lost(self) -> int | None:
        """Datagrams lost, once the exchange began: this side sent, or a datagram arrived.
        Before that nothing was lost: the peer never started, refused or was never reached,
        and a receiver that got nothing cannot tell loss from silence (None: not said)."""
        began = self.received or self.sends_posted
        if self.count and not began:
            return None
        return max(self.count - self.received, 0)

    def post_sends(self, conn) -> None:
        """Chains of sends, one doorbell each, only the last signaled (mckey signals none)."""
        n = self.sends_due()
        if n > 0:
            conn.post_send(
                chain(n),
                self.mr,
                self.window * self.slot,
                self.size,
                n=n,
                opcode=C.WR_SEND_WITH_IMM,
                imm=conn.cm.qp_num,
                ah=self.ah.ptr,
                remote_qpn=self.remote_qpn,
                remote_qkey=self.remote_qkey,
            )
            self.sends_posted += n

    def sent_chain(self, conn, wc) -> None:
        self.sent += sends_in(wc.wr_id)
        self.post_sends(conn)

    def on_deadline(self, conn) -> RdmacliError | None:
        if conn.phase == WAIT_FOR_PEER:
            return RdmacliError(
                f"no datagram arrived within {conn.flow.timeouts.waited()} [{conn.flow.where(conn)}]",
                hint=f"start the sender (or wait longer: {conn.flow.timeouts.words.wait_longer}); "
                "check that it sends to the same group and port space",
                cause=Cause.DEADLINE,
                details={"step": conn.phase},
            )
        if self.received < self.count and conn.phase == DATA:
            return RdmacliError(
                f"received {self.received} of {self.count} datagrams before the deadline "
                f"({self.count - self.received} lost) [{conn.flow.where(conn)}]",
                hint="UD does not retransmit: check the peer's count and the fabric",
                cause=Cause.LOSS,
                details={"step": conn.phase, "datagrams_lost": self.count - self.received},
            )
        return None

    def summary(self) -> DatagramFigures:
        return DatagramFigures(
            datagrams_expected=self.count,
            datagrams_received=self.received,
            datagrams_sent=self.sent,
            datagrams_lost=self.lost(),
            size_bytes=self.size,
            remote_qpn=self.remote_qpn,
        )


class UdClient(_Datagrams):
    def conn_param(self) -> ConnParam:
        # udaddy: all zero but the private data (a SIDR REQ); librdmacm adds our QP number
        return ConnParam(
            private_data=H.Hello(UD.hello_kind, self.count, self.size).pack(),
            responder_resources=0,
            initiator_depth=0,
            retry_count=0,
            rnr_retry_count=0,
        )

    def on_established(self, conn) -> None:
        ev = conn.last_event  # the SIDR REP: the server's QPN, QKey and a path to it
        self.remote_qpn, self.remote_qkey = ev.ud_qp_num, ev.ud_qkey
        self.ah = conn.ah_from_attr(ev.ah_attr)
        self.post_sends(conn)
        self._maybe_done(conn)

    def on_wc(self, conn, wc) -> None:
        if sends_in(wc.wr_id):
            self.sent_chain(conn, wc)
        else:
            self.recycle(conn, wc)
        self._maybe_done(conn)

    def _maybe_done(self, conn) -> None:
        if self.received == self.count and self.sent == self.count:
            conn.finish()


class UdServer(_Datagrams):
    role = "server"

    def __init__(
        self, count: int = UD.default_count, size: int = UD.default_size, *, max_size: int = UD.max_size
    ):
        super().__init__(count, size)
        self.max_size = max_size

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size, **p.limits())

    def on_request(self, conn, ev) -> None:
        hello = H.parse(ev.private_data)
        if hello is None:
            return  # a C udaddy client: use our own -C/-S, as udaddy would
        reason = H.check(hello, UD.hello_kind, self.max_size)
        if reason:
            raise Reject(reason)
        mtu = conn.cm.active_mtu()
        if mtu is not None and hello.size > mtu:  # refused with words, not a failed server
            raise Reject(f"rdmacli: size {hello.size} is larger than this path's MTU {mtu}")
        self.count, self.size = hello.count, hello.size

    def accept_param(self) -> ConnParam:
        return ConnParam(responder_resources=0, initiator_depth=0, retry_count=0, rnr_retry_count=0, qp_num=0)

    def on_wc(self, conn, wc) -> None:
        if sends_in(wc.wr_id):
            self.sent_chain(conn, wc)
            if self.sent == self.count:
                conn.finish()
            return
        if self.ah is None:  # before the slot is posted again: its GRH is the reply's address
            if wc.imm_data is None:
                raise RdmacliError(
                    "the client's datagram carries no immediate data (its QP number): cannot reply",
                    cause=Cause.PEER_PROTOCOL,
                )
            self.remote_qpn = wc.imm_data & 0xFFFFFF
            self.remote_qkey = C.RDMA_UDP_QKEY
            self.ah = conn.ah_from_wc(wc, self.mr.addr + wc.wr_id * self.slot)
        self.recycle(conn, wc)
        if self.received == self.count:
            self.post_sends(conn)  # udaddy: replies once every datagram has arrived
