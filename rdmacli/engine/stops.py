"""Stop requests for a running test, from a signal handler or another thread (engine.session)."""

from __future__ import annotations

from contextlib import contextmanager

from rdmacli.errors import Stopped


class Stops:
    """Stop requests for a running test: a signal (SIGINT, SIGTERM, SIGHUP) or another thread.

    While a flow runs or tears down, a request only asks it to stop: the flow ends between two
    loop turns, so no stop lands inside a CM handler or a teardown. Outside a flow a signal
    raises Stopped (the command's own wait ends there). Only the first signal counts."""

    def __init__(self):
        self.signum: int | None = None
        self.flow = None  # the engine.flow.Flow running now
        self.requested = False

    def handler(self, signum, frame) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        if self.flow is None:
            raise Stopped(signum)
        self.flow.stop()

    def stop(self) -> None:
        """Stop the test now, or as soon as it starts (another thread's request)."""
        self.requested = True
        if self.flow is not None:
            self.flow.stop()

    @contextmanager
    def running(self, flow):
        self.flow = flow
        if self.signum is not None or self.requested:  # came before the flow existed
            flow.stop()
        try:
            yield
        finally:
            self.flow = None
