"""What a wire protocol plugs into the engine: per-connection callbacks with no-op defaults,
and a transition table for protocols with stages (rping), h11-style."""

from __future__ import annotations

from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import Figures, JoinInfo
from rdmacli.rdma.cm import CmEvent, ConnParam
from rdmacli.rdma.verbs import WorkCompletion


def stopped_like_ping(answered: int, count: int | None, why: str, what: str, where: str):
    """ping(8)'s meaning of success for a run ended by a deadline or a signal: a normal end
    (True) once answers came, a failure when none did, or when a count was given and the
    deadline came first; an unanswered ping is lost, never a dead peer."""
    if answered == 0:
        return RdmacliError(
            f"no {what} was answered before the run was stopped ({why}) [{where}]",
            hint="the connection was up but nothing came back: see the counters and the server's output",
            cause=Cause.UNANSWERED,
        )
    if why == "deadline" and count is not None and answered < count:
        return RdmacliError(
            f"{answered} of {count} {what}s answered before the deadline [{where}]",
            hint="raise --timeout, or give no -C to count what the deadline allows (ping(8)'s -w)",
            cause=Cause.UNANSWERED,
        )
    return True


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


@dataclass(frozen=True)
class Params:
    """What a test is built from, for every protocol alike (each reads the fields it uses), so
    that every protocol is constructed one way: `cls.from_params(params)`."""

    count: int | None = None  # messages, pings (None: until stopped), datagrams
    size: int = 0  # bytes per message or ping buffer
    max_size: int | None = None  # a server's largest request (None: the protocol's default)
    validate: bool = False  # rping -V
    interval: float = 0.0  # rping -D: the pause between pings
    send_delay: float = 0.0  # mckey: the pause between the join and the first send
    no_loopback: bool = False  # mckey: block multicast loopback
    corrupt: bool = False  # fault injection: a ping server that writes back wrong data
    op: str = "write"  # bw: write, read, send; lat: send, write
    duration: float | None = None  # bw: seconds to run instead of a count
    depth: int | None = None  # bw: work requests in flight per QP (None: bw.auto_depth)
    bidir: bool = False  # bw: both ways at once
    group: int = 1  # client: the connections of this test (bw --qps, connect -c), said to the server

    def limits(self) -> dict:
        """max_size as a keyword, where given."""
        return {} if self.max_size is None else {"max_size": self.max_size}


class Protocol:
    """One instance per connection. `conn` is an engine.conn.Connection."""

    name = "protocol"  # protocols.table's name: connect, ping, ud, mcast, events
    role = "client"  # or "server" (a multicast receiver too): with name, what renderers key on
    waits_for_peer = False  # a receiver that waits for a person to start its peer (no idle deadline)
    # the exchange native/cmrun.c runs for this very class (RDMACLI_EX_*; engine.nativeflow)
    native_exchange: int | None = None

    @classmethod
    def from_params(cls, p: Params) -> Protocol:
        """The one way every protocol is built (engine.session)."""
        return cls()

    def conn_param(self) -> ConnParam:
        """Client: the parameters of rdma_connect()."""
        return ConnParam()

    def accept_param(self) -> ConnParam | None:
        """Server: the parameters of rdma_accept(); None passes NULL like the C tools."""
        return None

    def companions(self, ev: CmEvent) -> int:
        """Server: how many connections (this one included) the requesting client opens as one
        test (its hello says so): a server counts them as one client."""
        return 1

    def on_request(self, conn, ev: CmEvent) -> None:
        """Server: a CONNECT_REQUEST arrived; raise Reject to refuse it."""

    def pinned_bytes(self) -> int:
        """Server, after on_request: the memory this connection will register for what its
        request asked (checked against the server's --max-pinned before it is accepted)."""
        return 0

    def setup(self, conn) -> None:
        """Create the QP and MRs and pre-post receives (before connect/accept)."""

    def joined(self, conn, ev: CmEvent) -> JoinInfo:
        """Multicast: the group was joined (MULTICAST_JOIN): what was joined, as figures."""
        raise NotImplementedError(f"{self.name} does not join a multicast group")

    def on_established(self, conn) -> None:
        pass

    def on_wc(self, conn, wc: WorkCompletion) -> None:
        pass

    def on_wcs(self, conn, wcs: list[WorkCompletion]) -> None:
        """A run of one connection's successful completions (Flow.on_wcs), one by one until
        the connection is finished."""
        for wc in wcs:
            if conn.finished:
                return
            self.on_wc(conn, wc)

    def outstanding(self) -> int:
        """Work requests posted whose completions are still evidence of the exchange (sends
        the peer may not have acknowledged yet): a disconnect is judged once they are in."""
        return 0

    def on_disconnected(self, conn) -> None:
        """The peer disconnected. Default: finish if the exchange is complete."""
        conn.finish()

    def on_ended(self, conn) -> None:
        """This connection is over, well or not (once). A protocol whose connections stand or
        fall together (perftest's control and test QPs) ends the others here: nothing else
        would end one that waits for its peer without a deadline of its own."""

    def on_stop(self, conn, why: str):
        """The run was ended from outside (`why`: "deadline" for the overall --timeout, or the
        signal's name) while this connection was open: True if that is a normal end of this
        protocol (ping(8): an open-ended run), an RdmacliError if it is a failure of its own,
        None for the engine's default (interrupted, or the deadline's error)."""
        return None

    def on_deadline(self, conn):
        """The connection's deadline passed: an RdmacliError that says more than "deadline
        expired" (UD: how many datagrams were lost), or None for the generic one."""
        return None

    def summary(self) -> Figures | None:
        """This connection's figures (rdmacli.figures), or None: the protocol counts nothing."""
        return None
