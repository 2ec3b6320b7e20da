"""Running a test for a command: the event view, the session, and its end (cli/ending.py)."""

from __future__ import annotations

from contextlib import nullcontext

from rdmacli.cli.app import App
from rdmacli.cli.ending import current_stops, finish


def observed(app: App, show_events: bool, on_record=None):
    """The event view of a run, and what its records go to: the view, after `on_record` (a
    command's own lines) where there is one."""
    from rdmacli.render.events import EventView

    view = EventView(app, show_events=show_events)
    if on_record is None:
        return view, view

    def observer(rec) -> None:
        on_record(rec)
        view(rec)

    observer.detailed = view.detailed
    return view, observer


ENDPOINT = ("host", "port", "bind", "connections")  # Test fields a summary's params name alike


def make_test(command: str, spec, role: str, params=None, *, summary: dict, **kw):
    """A command's engine.session.Test, made the one way: its protocol's Params (default: none),
    its endpoint (host, port, bind, connections) and port space from the summary's `params`,
    where the command said them once (keywords here only where the Test's differ: mcast's group,
    bw's QPs), its engine.settings.Options from the command's connection options (tos,
    ack_timeout, busy_poll, max_open, max_pinned), and the rest as Test's own fields."""
    from rdmacli.engine.protocol import Params
    from rdmacli.engine.session import Test
    from rdmacli.engine.settings import Options
    from rdmacli.rdma.constants import PORT_SPACES

    given = {k: kw.pop(k) for k in ("tos", "ack_timeout", "busy_poll", "max_open", "max_pinned") if k in kw}
    port_space = kw.pop("port_space", summary.get("port_space"))
    if port_space is not None:
        given["ps"] = PORT_SPACES[port_space]
    for name in ENDPOINT:
        if name in summary:
            kw.setdefault(name, summary[name])
    return Test(command, spec, role, params or Params(), options=Options(**given), summary=summary, **kw)


def run_test(
    app: App, test, *, show_events: bool, progress=None, on_record=None, then=None, factory=None
) -> None:
    """Run a test (engine.session) with its events shown as they come, print its summary and
    exit with its status. `on_record` sees every record first (a command's own lines); `then`
    adds a command's own figures to the outcome (its `data`) before it is printed; `factory`
    builds the flow (engine.session.FlowFactory: perftest's exchange, whose two connections
    share one session)."""
    from rdmacli.engine.session import run

    view, observer = observed(app, show_events, on_record)
    with view, progress or nullcontext():
        stops = current_stops()
        outcome = run(test, observer=observer, backend=app.backend, stops=stops, factory=factory)
    if then is not None:
        then(outcome)
    finish(app, outcome)


def run_sweep(app: App, make_test, sizes: list[int], *, show_events: bool, on_record=None) -> None:
    """perftest's -a on rdmacli's own exchange: `make_test(size)` run for each size in turn, one
    connection each (their hello announces them all, so a default server waits for the next);
    the sweep stops at the first size that fails or is stopped. One summary: the connections of
    every size and `data.sweep`, their figures by size."""
    from rdmacli.engine.session import run
    from rdmacli.outcome import merged

    view, observer = observed(app, show_events, on_record)
    outcomes = []
    with view:
        stops = current_stops()
        for size in sizes:
            outcomes.append(run(make_test(size), observer=observer, backend=app.backend, stops=stops))
            if outcomes[-1].exit_code != 0:
                break
    outcome = merged(outcomes)
    outcome.sweep = sweep_rows([c.stats for c in outcome.connections])
    finish(app, outcome)


def sweep_rows(figures: list) -> list:
    """A sweep's table: each size's figures (bw's or lat's client records)."""
    from rdmacli.figures import BwFigures, LatFigures

    return [f for f in figures if isinstance(f, (BwFigures, LatFigures))]


def sweep_of(session):
    """`then` of perftest's -a on one QP (protocols.perftest_session): the figures of each
    size, as the session kept them, into `data.sweep`."""

    def then(outcome) -> None:
        outcome.sweep = sweep_rows(session.rows)

    return then
