"""Running an engine flow for a command: observer wiring, stop signals, summary and exit status."""

from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager, nullcontext

from rdmacli.cli.app import App
from rdmacli.errors import RdmacliError, Stopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_signals():
    """SIGINT, SIGTERM and SIGHUP raise Stopped once; a second one during teardown is ignored,
    so the cm_ids, QPs and MRs are still released and the summary still printed."""
    fired = []

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Stopped(signum)

    try:
        previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    except ValueError:  # not the main thread: leave signals to whoever owns them
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_flow(app: App, command: str, flow_factory, *, show_events: bool, params: dict, progress=None) -> None:
    """Build the flow, run it, always tear it down, print the summary, exit with its status."""
    from rdmacli.outcome import Outcome, from_flow
    from rdmacli.render.events import EventView

    view = EventView(app, show_events=show_events)
    error: RdmacliError | None = None
    signum: int | None = None
    flow = None
    with view, progress or nullcontext():
        try:
            flow = flow_factory(view)
            flow.run()
        except Stopped as exc:
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
            )
        finally:
            if flow is not None:
                flow.close()
    if flow is None:  # failed before anything existed (no device, bad address)
        outcome = Outcome(command, params, error=error, signal=signum)
    else:
        outcome = from_flow(command, flow, params, error=error, signal=signum)
    finish(app, outcome)


def finish(app: App, outcome) -> None:
    """Print an outcome (JSON for scripts, words for people) and exit with its code."""
    from rdmacli.render.summary import print_summary

    doc = outcome.to_dict()
    if doc["error"]:
        app.report_error(RdmacliError(doc["error"]["message"], hint=doc["error"].get("hint")))
    if app.machine:
        app.emit_json(doc)
    else:
        print_summary(app, doc)
    sys.exit(doc["exit_code"])
