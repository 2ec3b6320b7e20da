"""How every command ends: stop signals held for the run, then its outcome printed and the exit
with its code. Below the App (app.py's errors() ends a run here) and the runner (_run.py)."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

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


def current_stops() -> Stops | None:
    """The innermost run's stop handler (the session polls it between turns), or None."""
    return _current[-1] if _current else None


def finish(app, outcome, render=None) -> None:
    """The one way a command ends: its outcome printed (JSON for scripts, words for people,
    `render(app, outcome)` for a command's own view, from its typed report), then the exit
    with its code."""
    from rdmacli.cli.hints import fit_doc, typed_options
    from rdmacli.render.summary import print_summary, print_warnings

    doc = outcome.to_dict()
    options = typed_options()
    if options is not None:  # a hint names only options of the command typed
        fit_doc(doc, options)
    err = outcome.run_error()
    if render is not None and not app.machine:
        render(app, outcome)
        print_warnings(app, outcome.warnings)  # a person sees what the JSON says
        if err is not None:
            app.report_error(err)
    else:
        if err is not None:
            app.report_error(err)
        if app.machine:
            app.emit_json(doc)
        else:
            print_summary(app, outcome)
    sys.exit(doc["exit_code"])
