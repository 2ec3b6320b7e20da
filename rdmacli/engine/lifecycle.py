"""The rdma_cm(7) lifecycle of each side as tables, h11 `_state.py` style.

A connection is always in one phase. PHASES says what each phase is: the step it times (cmtime's
names, for the step table) and the timeout that bounds it (for its deadline and its message).
The side tables say which CM event is expected in which phase and what the flow does with it
(the name of its `on_<action>` method). An event a table does not have is an error that names
the side, the phase and the event; error events (ADDR_ERROR, REJECTED, ...) end a connection
in any phase (flow.Flow.fail_on). Adding a protocol adds no row here; adding a CM sequence
adds its rows, and nothing else decides what a phase means.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdmacli.rdma import constants as C

# the phases; their names are what people and JSON see as `step`
START = "start"
RESOLVE_ADDR = "resolve addr"
RESOLVE_ROUTE = "resolve route"
CREATE_QP = "create qp"
CONNECT = "cm connect"
ACCEPT = "accept"
JOIN = "join"
WAIT_FOR_PEER = "wait for sender"  # a multicast receiver waits for a person to start a sender
DATA = "data"
DISCONNECT = "disconnect"  # we disconnected; the peer's answer is outstanding
# the peer disconnected while our sends' completions were outstanding: our answer (which flushes
# the QP) waits for them, so that no verdict is taken before its evidence is in (an ACK can be
# overtaken by the peer's DREQ, and RNR retries widen that window)
SETTLE = "settle"


@dataclass(frozen=True)
class Phase:
    step: str | None  # the step it times (StepTimer), None for phases that are not a step
    limit: str | None  # which timeout bounds it: resolve, connect, idle, wait (None: none)


PHASES = {
    START: Phase(None, None),
    RESOLVE_ADDR: Phase("resolve addr", "resolve"),
    RESOLVE_ROUTE: Phase("resolve route", "resolve"),
    CREATE_QP: Phase("create qp", None),
    CONNECT: Phase("cm connect", "connect"),
    ACCEPT: Phase("accept", "connect"),
    JOIN: Phase("join", "connect"),
    WAIT_FOR_PEER: Phase(None, "wait"),
    DATA: Phase(None, "idle"),
    DISCONNECT: Phase("disconnect", "connect"),
    SETTLE: Phase(None, "settle"),
}

# (phase, CM event) -> action: the flow's on_<action>(conn, event)
ACTIVE = {
    (RESOLVE_ADDR, C.ADDR_RESOLVED): "addr_resolved",
    (RESOLVE_ROUTE, C.ROUTE_RESOLVED): "route_resolved",
    (CONNECT, C.ESTABLISHED): "established",
    (CONNECT, C.DISCONNECTED): "disconnected",  # accepted, then gone before any data
    (DATA, C.DISCONNECTED): "disconnected",
    (DISCONNECT, C.DISCONNECTED): "disconnected",
}
PASSIVE = {
    (ACCEPT, C.ESTABLISHED): "established",
    (ACCEPT, C.DISCONNECTED): "disconnected",  # the client gave up before our RTU counted
    (DATA, C.DISCONNECTED): "disconnected",
    (DISCONNECT, C.DISCONNECTED): "disconnected",
}
MULTICAST = {
    (RESOLVE_ADDR, C.ADDR_RESOLVED): "addr_resolved",
    (JOIN, C.MULTICAST_JOIN): "joined",
}
# events that say nothing about a connection's exchange: never an error, in any phase
INFORMATIONAL = (C.ADDR_CHANGE, C.TIMEWAIT_EXIT)
