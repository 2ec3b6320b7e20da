"""Running a test for a command: stop signals, the event view, the summary and exit status."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager, nullcontext

from rdmacli.cli.app import App
from rdmacli.engine.stops import Stops

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_current: list[Stops] = []


@contextmanager
def stop_signals():
    """SIGINT, SIGTERM and SIGHUP end the run once (engine.stops.Stops); a second one is
    ignored, so the cm_ids, QPs and MRs are still released and the summary still printed."""
    stops = Stops()
    try:
        previous = {s: signal.signal(s, stops.handler) for s in STOP_SIGNALS}
    except ValueError:  # not the main thread: leave signals to whoever owns them
        yield stops
        return
    _current.append(stops)
    try:
        yield stops
    finally:
        _current.remove(stops)
        for s, h in previous.items():
            signal.signal(s, h)


def run_test(app: App, test, *, show_events: bool, progress=None, on_record=None, then=None,
             factory=None) -> None:  # fmt: skip
    """Run a test (engine.session) with its events shown as they come, print its summary and
    exit with its status. `on_record` sees every record first (a command's own lines); `then`
    adds a command's own figures to the outcome (its `data`) before it is printed; `factory`
    builds the flow (engine.session.FlowFactory: perftest's exchange, whose two connections
    share one session)."""
    from rdmacli.engine.session import run
    from rdmacli.render.events import EventView

    view = EventView(app, show_events=show_events)
    observer = view
    if on_record is not None:

        def observer(rec: dict) -> None:
            on_record(rec)
            view(rec)

        observer.detailed = view.detailed

    with view, progress or nullcontext():
        stops = _current[-1] if _current else None
        outcome = run(test, observer=observer, backend=app.backend, stops=stops, factory=factory)
    if then is not None:
        then(outcome)
    finish(app, outcome)


def finish(app: App, outcome, render=None) -> None:
    """The one way a command ends: its outcome printed (JSON for scripts, words for people,
    `render` for a command's own view), then the exit with its code."""
    from rdmacli.render.summary import print_summary, print_warnings

    doc = outcome.to_dict()
    err = outcome.run_error()
    if render is not None and not app.machine:
        render(app, doc)
        print_warnings(app, doc)  # a person sees what the JSON says
        if err is not None:
            app.report_error(err)
    else:
        if err is not None:
            app.report_error(err)
        if app.machine:
            app.emit_json(doc)
        else:
            print_summary(app, outcome, doc)
    sys.exit(doc["exit_code"])
