"""No data at all: the documented rdma_cm(7) flow for `rdmacli events` (cmtime's steps)."""

from __future__ import annotations

from rdmacli.engine.protocol import Protocol
from rdmacli.rdma import constants as C


class BareClient(Protocol):
    name = "events"
    native_exchange = 0  # RDMACLI_EX_BARE: native/cmflow.c connects and disconnects as this does
    lockstep = True  # cmtime's order: each step for every connection before the next (client.py)

    def setup(self, conn) -> None:
        conn.create_qp(qp_type=C.QPT_RC, send_wr=1, recv_wr=1)

    def on_established(self, conn) -> None:
        conn.disconnect()


class BareServer(BareClient):
    role = "server"

    def on_established(self, conn) -> None:
        pass  # the client disconnects
