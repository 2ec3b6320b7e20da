"""An engine flow's outcome: each connection's, as rdmacli.outcome records it. Duck-typed over
engine.conn.Connection and engine.flow.Flow (their states, figures and errors); here, beside the
engine that makes them, rather than in the outcome's own module."""

from __future__ import annotations

import time

from rdmacli.errors import RdmacliError
from rdmacli.outcome import ConnOutcome, Outcome, State


def final_state(state: State, signal: int | None, closing: bool = False) -> State:
    """A connection still open at the end: done if only the peer's answer to our disconnect was
    outstanding (its exchange had finished), else interrupted by a signal, or failed with the run."""
    if state.final:
        return state
    if closing:
        return State.DONE
    return State.INTERRUPTED if signal is not None else State.FAILED


def conn_outcome(c, signal: int | None = None) -> ConnOutcome:
    """One engine connection's outcome (duck-typed: engine.conn.Connection)."""
    return ConnOutcome(
        index=c.index,
        state=final_state(c.state, signal, c.closing),
        local=c.local,
        remote=c.remote,
        device=c.device,
        stats=c.protocol.summary() if c.protocol else None,
        protocol=c.protocol.name if c.protocol else None,
        role=c.protocol.role if c.protocol else None,
        error=c.error,
        teardown_errors=c.teardown_errors,
    )


def from_flow(
    command: str, flow, params: dict, *, error: RdmacliError | None = None, signal: int | None = None
) -> Outcome:
    """The outcome of an engine flow (duck-typed: all_conns, earlier, timer, t0, warnings)."""
    conns = [conn_outcome(c, signal) for c in flow.all_conns]
    earlier = getattr(flow, "earlier", None)
    path = getattr(flow, "data_path", None)  # a client's: which ran its connections (nativeflow)
    return Outcome(
        data={"data_path": path} if path else {},
        earlier=earlier if earlier is not None and earlier.count else None,
        command=command,
        params=params,
        connections=conns,
        error=error,
        signal=signal,
        steps_us=flow.timer.summary(),
        elapsed_ms=round((time.monotonic() - flow.t0) * 1e3, 1),
        warnings=list(getattr(flow, "warnings", [])),
    )
