"""What a wire protocol plugs into the engine: per-connection callbacks with no-op defaults,
and a transition table for protocols with stages (rping), h11-style."""

from __future__ import annotations

from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma.cm import CmEvent, ConnParam
from rdmacli.rdma.verbs import WorkCompletion


class Reject(Exception):
    """Raised by on_request to refuse a client; the text travels back as private data."""


class ProtocolViolation(RdmacliError):
    """The peer (or a bug) drove a protocol through a transition its table does not have."""

    cause = Cause.PEER_PROTOCOL


class Transitions:
    """A protocol's stages as one table: (stage, event) -> next stage. Anything else is an
    error that names the role, the stage and the event."""

    def __init__(self, role: str, table: dict[tuple[str, str], str], initial: str):
        self.role, self.table, self.stage = role, table, initial

    def fire(self, event: str, where: str = "") -> str:
        nxt = self.table.get((self.stage, event))
        if nxt is None:
            raise ProtocolViolation(
                f"{self.role}: {event} is not allowed in stage {self.stage}"
                + (f" [{where}]" if where else ""),
                hint="the peer does not follow the protocol (or sent out of turn)",
                details={"role": self.role, "stage": self.stage, "event": event},
            )
        self.stage = nxt
        return nxt


class Protocol:
    """One instance per connection. `conn` is an engine.conn.Connection."""

    name = "protocol"
    waits_for_peer = False  # a receiver that waits for a person to start its peer (no idle deadline)

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
