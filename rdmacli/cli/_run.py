"""Running an engine flow for a command: observer wiring, stop signals, summary and exit status."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager, nullcontext

from rdmacli.cli.app import App
from rdmacli.errors import Cause, RdmacliError, Stopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stops:
    """What a stop signal does now. Outside a flow it raises Stopped (the command's wait ends
    there); while a flow runs or tears down it only asks the flow to stop, so no signal can
    land in the middle of a CM handler or a teardown. Only the first signal counts."""

    def __init__(self):
        self.signum: int | None = None
        self.flow = None

    def handler(self, signum, frame) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        if self.flow is None:
            raise Stopped(signum)
        self.flow.stop()

    @contextmanager
    def running(self, flow):
        self.flow = flow
        if self.signum is not None:  # came between the flow's creation and this
            flow.stop()
        try:
            yield
        finally:
            self.flow = None


_current: list[Stops] = []


@contextmanager
def stop_signals():
    """SIGINT, SIGTERM and SIGHUP end the run once (see Stops); a second one is ignored, so the
    cm_ids, QPs and MRs are still released and the summary still printed."""
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


def run_flow(app: App, command: str, flow_factory, *, show_events: bool, params: dict, progress=None) -> None:
    """Build the flow, run it, always tear it down, print the summary, exit with its status."""
    from rdmacli.outcome import Outcome, from_flow
    from rdmacli.render.events import EventView

    view = EventView(app, show_events=show_events)
    stops = _current[-1] if _current else Stops()
    error: RdmacliError | None = None
    signum: int | None = None
    flow = None
    with view, progress or nullcontext():
        try:
            flow = flow_factory(view)
            with stops.running(flow):  # from here a signal asks the flow to stop, nothing more
                try:
                    flow.run()
                    if flow.stopping and stops.signum is not None:
                        signum = stops.signum
                finally:
                    flow.close()  # never raises, on success, error and signal alike
        except Stopped as exc:  # before the flow existed
            signum = exc.signum
        except KeyboardInterrupt:
            signum = signal.SIGINT
        except RdmacliError as exc:
            error = exc
        except Exception as exc:  # a bug: still tear down and report in words
            if os.environ.get("RDMACLI_DEBUG"):
                raise
            error = RdmacliError(
                f"internal error: {type(exc).__name__}: {exc}",
                hint="rerun with RDMACLI_DEBUG=1 for the traceback, and please report it",
                cause=Cause.INTERNAL,
            )
    if flow is None:  # failed before anything existed (no device, bad address)
        outcome = Outcome(command, params, error=error, signal=signum)
    else:
        if signum is None and stops.signum is not None:
            flow.warnings.append(
                f"{signal.Signals(stops.signum).name} arrived after the run had ended; its result stands"
            )
        outcome = from_flow(command, flow, params, error=error, signal=signum)
    finish(app, outcome)


def finish(app: App, outcome) -> None:
    """Print an outcome (JSON for scripts, words for people) and exit with its code."""
    from rdmacli.render.summary import print_summary

    doc = outcome.to_dict()
    err = outcome.run_error()
    if err is not None:
        app.report_error(err)
    if app.machine:
        app.emit_json(doc)
    else:
        print_summary(app, doc)
    sys.exit(doc["exit_code"])
