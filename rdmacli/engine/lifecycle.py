"""The rdma_cm(7) lifecycle of each side as tables, h11 `_state.py` style.

A connection is always in one phase (a `Phase`). PHASES says what bounds each: the step it times
(cmtime's names, for the step table) and the timeout that bounds it (for its deadline and its
message). The side tables say which CM event is expected in which phase, which phase it leads
to (the value: the next state), and what the flow does on the way (its `on_<action>` method).
An event a table does not have is an error that names the side, the phase and the event; error
events (ADDR_ERROR, REJECTED, ...) end a connection in any phase (flow.Flow.fail_on). Adding a
protocol adds no row here; adding a CM sequence adds its rows, and nothing else decides what a
phase means.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from rdmacli.rdma import constants as C


class Phase(str, Enum):
    """Where a connection is. Its value is what people and JSON see as `step`; a Phase is
    equal to, hashes as, prints and serializes as that string."""

    START = "start"
    RESOLVE_ADDR = "resolve addr"
    RESOLVE_ROUTE = "resolve route"
    CREATE_QP = "create qp"
    CONNECT = "cm connect"
    ACCEPT = "accept"
    JOIN = "join"
    WAIT_FOR_PEER = "wait for sender"  # a receiver's data phase until a person starts its peer
    DATA = "data"
    DISCONNECT = "disconnect"  # we disconnected; the peer's answer is outstanding
    # the peer disconnected while our sends' completions were outstanding: our answer (which
    # flushes the QP) waits for them, so that no verdict is taken before its evidence is in (an
    # ACK can be overtaken by the peer's DREQ, and RNR retries widen that window)
    SETTLE = "settle"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    __hash__ = str.__hash__


# the phases by their short names, as the flows and protocols use them
START, RESOLVE_ADDR, RESOLVE_ROUTE = Phase.START, Phase.RESOLVE_ADDR, Phase.RESOLVE_ROUTE
CREATE_QP, CONNECT, ACCEPT, JOIN = Phase.CREATE_QP, Phase.CONNECT, Phase.ACCEPT, Phase.JOIN
WAIT_FOR_PEER, DATA, DISCONNECT, SETTLE = Phase.WAIT_FOR_PEER, Phase.DATA, Phase.DISCONNECT, Phase.SETTLE


@dataclass(frozen=True)
class Bounds:
    step: str | None  # the step it times (StepTimer), None for phases that are not a step
    limit: str | None  # which timeout bounds it: resolve, connect, idle, wait (None: none)


PHASES = {
    START: Bounds(None, None),
    RESOLVE_ADDR: Bounds("resolve addr", "resolve"),
    RESOLVE_ROUTE: Bounds("resolve route", "resolve"),
    CREATE_QP: Bounds("create qp", None),
    CONNECT: Bounds("cm connect", "connect"),
    ACCEPT: Bounds("accept", "connect"),
    JOIN: Bounds("join", "connect"),
    WAIT_FOR_PEER: Bounds(None, "wait"),
    DATA: Bounds(None, "idle"),
    DISCONNECT: Bounds("disconnect", "connect"),
    SETTLE: Bounds(None, "settle"),
}


@dataclass(frozen=True)
class Row:
    """What a CM event in a phase leads to: the next phase, and the flow's on_<action>(conn,
    event, next) that does the work and enters `next` when its call is made (a step's time
    starts before the call it waits for). None: the connection ends there."""

    next: Phase | None
    action: str


@dataclass(frozen=True)
class Bound:
    """A row with its handler: the flow class's own on_<action> function, taken once."""

    next: Phase | None
    handler: Callable[..., None]  # (flow, conn, event, next)
    action: str = ""  # the row's (lockstep runs route_resolved's two steps apart: client.py)


def bind(rows: dict, flow_class: type) -> dict:
    """A side's rows with their handlers, taken from the flow class as it is made (a subclass's
    own override included): a row whose handler the class lacks fails at import, never at the
    event that needs it."""
    out = {}
    for key, row in rows.items():
        handler = getattr(flow_class, "on_" + row.action, None)
        if not callable(handler):
            raise TypeError(f"{flow_class.__name__} has no on_{row.action} for its row {key}")
        out[key] = Bound(row.next, handler, row.action)
    return out


# (phase, CM event) -> Row. A DISCONNECTED leads to SETTLE when completions of ours are still
# outstanding (their ACKs are the evidence), else straight to the verdict: the action decides
# which, as it is a count and not an event.
ACTIVE = {
    (RESOLVE_ADDR, C.ADDR_RESOLVED): Row(RESOLVE_ROUTE, "addr_resolved"),
    (RESOLVE_ROUTE, C.ROUTE_RESOLVED): Row(CONNECT, "route_resolved"),
    (CONNECT, C.ESTABLISHED): Row(DATA, "established"),
    (CONNECT, C.DISCONNECTED): Row(SETTLE, "disconnected"),  # accepted, then gone before any data
    (DATA, C.DISCONNECTED): Row(SETTLE, "disconnected"),
    # a side that waits for its peer's word (perftest's control connection): the peer's end
    (WAIT_FOR_PEER, C.DISCONNECTED): Row(SETTLE, "disconnected"),
    (DISCONNECT, C.DISCONNECTED): Row(None, "disconnected"),  # the answer to ours: the end
}
PASSIVE = {
    (ACCEPT, C.ESTABLISHED): Row(DATA, "established"),
    (ACCEPT, C.DISCONNECTED): Row(SETTLE, "disconnected"),  # the client gave up before our RTU counted
    (DATA, C.DISCONNECTED): Row(SETTLE, "disconnected"),
    # a server that waits for its client's word (perftest's WRITE and READ: nothing arrives on
    # the test QP): the client's end
    (WAIT_FOR_PEER, C.DISCONNECTED): Row(SETTLE, "disconnected"),
    (DISCONNECT, C.DISCONNECTED): Row(None, "disconnected"),
}
MULTICAST = {
    (RESOLVE_ADDR, C.ADDR_RESOLVED): Row(JOIN, "addr_resolved"),
    (JOIN, C.MULTICAST_JOIN): Row(DATA, "joined"),
}
# events that say nothing about a connection's exchange: never an error, in any phase
INFORMATIONAL = (C.ADDR_CHANGE, C.TIMEWAIT_EXIT)
# events that fail their connection in any phase, said in words by engine.status.event_error
ERROR_EVENTS = (
    C.ADDR_ERROR,
    C.ROUTE_ERROR,
    C.CONNECT_ERROR,
    C.UNREACHABLE,
    C.REJECTED,
    C.DEVICE_REMOVAL,
    C.MULTICAST_ERROR,
)
# phases not reached by a CM event: the first of each side (entered by the flow's start, or by
# a CONNECT_REQUEST on the listener), a step inside a phase, a receiver's DATA, our disconnect
ENTERED_BY_THE_FLOW = (RESOLVE_ADDR, ACCEPT, CREATE_QP, WAIT_FOR_PEER, DISCONNECT)
