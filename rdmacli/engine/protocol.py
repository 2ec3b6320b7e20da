"""What a wire protocol plugs into the engine: per-connection callbacks with no-op defaults."""

from __future__ import annotations

from rdmacli.rdma.cm import CmEvent, ConnParam
from rdmacli.rdma.verbs import WorkCompletion


class Reject(Exception):
    """Raised by on_request to refuse a client; the text travels back as private data."""


class Protocol:
    """One instance per connection. `conn` is an engine.conn.Connection."""

    name = "protocol"

    def conn_param(self) -> ConnParam:
        """Client: the parameters of rdma_connect()."""
        return ConnParam()

    def accept_param(self) -> ConnParam | None:
        """Server: the parameters of rdma_accept(); None passes NULL like the C tools."""
        return None

    def on_request(self, conn, ev: CmEvent) -> None:
        """Server: a CONNECT_REQUEST arrived; raise Reject to refuse it."""

    def setup(self, conn) -> None:
        """Create the QP and MRs and pre-post receives (before connect/accept)."""

    def on_established(self, conn) -> None:
        pass

    def on_wc(self, conn, wc: WorkCompletion) -> None:
        pass

    def on_disconnected(self, conn) -> None:
        """The peer disconnected. Default: finish if the exchange is complete."""
        conn.finish()

    def on_deadline(self, conn):
        """The connection's deadline passed: an RdmacliError that says more than "deadline
        expired" (UD: how many datagrams were lost), or None for the generic one."""
        return None

    def summary(self) -> dict:
        return {}
