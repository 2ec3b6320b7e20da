"""ucmatose (librdmacm/examples/cmatose.c) on the wire: RC send/recv, port 7471.

Server sends `count` messages of `size` bytes on each connection first, the client receives them
all and echoes `count` back, then the server disconnects (reference section 2).
"""

from __future__ import annotations

from rdmacli.engine.protocol import Protocol, Reject
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import ExchangeFigures
from rdmacli.protocols import hello as H
from rdmacli.protocols.table import CONNECT
from rdmacli.protocols.window import Windowed, chain, sends_in
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import ConnParam

RECV = 0  # the wr_id of every receive (one buffer); sends are chains (protocols.window)


class _Exchange(Windowed, Protocol):
    """Queues hold at most a window of work requests (Connection.window), recycled: any count
    fits any device. Up to the window every receive is posted before the connection, as
    ucmatose does; beyond it the peer is asked to retry on RNR instead of failing."""

    name = "connect"

    def __init__(self, count: int = CONNECT.default_count, size: int = CONNECT.default_size):
        self.count = 0 if size == 0 else count  # cmatose: -S 0 forces count 0
        self.size = size
        self.window = 1
        self.received = self.sent = self.sends_posted = self.recvs_posted = 0
        self.unconfirmed = 0  # sends confirmed by the server's disconnect, not their completions
        self.bytes_received = self.bytes_sent = 0
        # one buffer for receives and sends, as ucmatose's node->mem: nobody reads the payload
        self.mr = None

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size)

    @property
    def windowed(self) -> bool:
        return self.count > self.window

    def pinned_bytes(self) -> int:
        return max(self.size, 1)

    def setup(self, conn) -> None:
        self.window = conn.window(self.count)
        conn.create_qp(qp_type=C.QPT_RC, send_wr=self.window, recv_wr=self.window)
        self.mr = conn.reg(max(self.size, 1))  # one registration per connection, not two
        self.post_recvs(conn)

    def post_recvs(self, conn) -> None:
        n = self.recvs_due()
        if n > 0:
            conn.post_recv(RECV, self.mr, 0, self.size, n=n)
            self.recvs_posted += n

    def post_sends(self, conn) -> None:
        """Sends go out in chains (one doorbell each), only the last signaled: its completion
        counts the whole chain, whose length rides in the wr_id (RC completes in order)."""
        n = self.sends_due()
        if n > 0:
            conn.post_send(chain(n), self.mr, 0, self.size, n=n)
            self.sends_posted += n

    def count_wc(self, conn, wc) -> int:
        """Count a completion; returns the sends it stands for (0: a receive). A window that
        holds the whole count was posted at once: nothing to post again (the common case)."""
        n = sends_in(wc.wr_id)
        if n == 0:
            self.received += 1
            self.bytes_received += wc.byte_len
            if self.recvs_posted < self.count:
                self.post_recvs(conn)
        else:
            self.sent += n
            self.bytes_sent += n * self.size
            if self.sends_posted < self.count:
                self.post_sends(conn)
        return n

    @property
    def complete(self) -> bool:
        return self.received == self.count and self.sent == self.count

    def outstanding(self) -> int:
        """Sends whose completions can still complete the exchange: once every send is posted,
        a peer's disconnect is judged only after their completions (or the settle deadline)."""
        return self.sends_posted - self.sent if self.sends_posted == self.count else 0

    def on_disconnected(self, conn) -> None:
        if self.complete:
            conn.finish()
        elif self.role == "client" and self.received == self.count and self.sends_posted == self.count:
            # ucmatose (and rdmacli listen) disconnect only once every message has arrived
            # (cmatose.c run_server): the disconnect itself says the peer received them
            self.unconfirmed = self.count - self.sent
            self.sent = self.count
            self.bytes_sent = self.count * self.size
            conn.flow.warn(
                f"connection {conn.index}: the last {self.unconfirmed} of {self.count} sends were "
                "confirmed by the server's disconnect (it disconnects only once it has received "
                "every message), not by their completions [" + conn.flow.where(conn) + "]"
            )
            conn.finish()
        else:
            posted = self.sends_posted - self.sent
            conn.fail(
                RdmacliError(
                    f"the peer disconnected early: received {self.received}/{self.count}, "
                    f"sent {self.sent}/{self.count} messages"
                    + (f" ({posted} more posted, unacknowledged)" if posted else "")
                    + f" [{conn.flow.where(conn)}]",
                    hint="the peer ended the test (killed, or a different -C/-S); check its output",
                    cause=Cause.PEER_ENDED,
                )
            )

    def summary(self) -> ExchangeFigures:
        return ExchangeFigures(
            messages_expected=self.count,
            messages_received=self.received,
            messages_sent=self.sent,
            bytes_received=self.bytes_received,
            bytes_sent=self.bytes_sent,
            size_bytes=self.size,
            sends_confirmed_by_disconnect=self.unconfirmed,
        )


class CmatoseClient(_Exchange):
    group = 1  # -c: said in the hello, so that a default rdmacli server takes them all
    native_exchange = 1  # RDMACLI_EX_CMATOSE: native/cmconn.c counts and echoes as this class does

    @classmethod
    def from_params(cls, p):
        client = cls(p.count, p.size)
        client.group = p.group
        return client

    def conn_param(self) -> ConnParam:
        # cmatose.c:256-262; the hello is rdmacli's addition (ignored by ucmatose)
        return ConnParam(
            private_data=H.Hello(CONNECT.hello_kind, self.count, self.size, group=self.group).pack(),
            responder_resources=1,
            initiator_depth=1,
            retry_count=5,
            rnr_retry_count=7 if self.windowed else 0,
        )

    def on_wc(self, conn, wc) -> None:
        if self.count_wc(conn, wc) == 0 and self.received == self.count:
            self.post_sends(conn)  # echo only after all of the server's messages arrived


class CmatoseServer(_Exchange):
    role = "server"
    native_exchange = 1  # RDMACLI_EX_CMATOSE: native/cmserve.c serves as this class does

    def __init__(
        self,
        count: int = CONNECT.default_count,
        size: int = CONNECT.default_size,
        *,
        max_size: int = H.MAX_SIZE,
    ):
        super().__init__(count, size)
        self.max_size = max_size

    @classmethod
    def from_params(cls, p):
        return cls(p.count, p.size, **p.limits())

    def companions(self, ev) -> int:
        return H.companions(ev.private_data, CONNECT.hello_kind)

    def on_request(self, conn, ev) -> None:
        hello = H.parse(ev.private_data)
        if hello is None:
            return  # a C client: use our own -C/-S, as ucmatose would
        reason = H.check(hello, CONNECT.hello_kind, self.max_size)
        if reason:
            raise Reject(reason)
        self.count = 0 if hello.size == 0 else hello.count
        self.size = hello.size

    def accept_param(self) -> ConnParam | None:
        if not self.windowed:
            return None  # rdma_accept(id, NULL), as ucmatose
        return ConnParam(responder_resources=1, initiator_depth=1, retry_count=7, rnr_retry_count=7)

    def on_established(self, conn) -> None:
        self.post_sends(conn)
        self._maybe_done(conn)

    def on_wc(self, conn, wc) -> None:
        self.count_wc(conn, wc)
        self._maybe_done(conn)

    def _maybe_done(self, conn) -> None:
        if self.received == self.count and self.sent == self.count:
            conn.disconnect()  # the server ends the test (cmatose.c run_server)
