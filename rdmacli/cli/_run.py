"""Running an engine flow for a command: observer wiring, Ctrl-C, summary and exit status."""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext

from rdmacli.cli.app import App
from rdmacli.errors import ExitCode, RdmacliError


def run_flow(app: App, command: str, flow_factory, *, show_events: bool, params: dict, progress=None) -> None:
    """Build the flow, run it, always tear it down, print the summary, exit with its status."""
    from rdmacli.render.events import EventView
    from rdmacli.render.summary import build_summary, print_summary

    view = EventView(app, show_events=show_events)
    error: RdmacliError | None = None
    interrupted = False
    flow = None
    with view, progress or nullcontext():
        try:
            flow = flow_factory(view)
            flow.run()
        except KeyboardInterrupt:
            interrupted = True
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
        assert error is not None
        app.report_error(error)
        if app.machine:
            app.emit_json(build_summary(command, None, params, error=error))
        sys.exit(int(error.exit_code))
    doc = build_summary(command, flow, params, error=error, interrupted=interrupted)
    if doc["error"] and not app.machine:
        app.report_error(RdmacliError(doc["error"]["message"], hint=doc["error"].get("hint")))
    if app.machine:
        app.emit_json(doc)
    else:
        print_summary(app, doc)
    sys.exit(ExitCode.INTERRUPTED if interrupted else doc["exit_code"])
