"""Stop requests for a running test, from a signal handler or another thread (engine.session)."""

from __future__ import annotations

from contextlib import contextmanager

from rdmacli.errors import Stopped


class Stops:
    """Stop requests for running tests: a signal (SIGINT, SIGTERM, SIGHUP) or another thread.

    While a flow runs or tears down, a request only asks it to stop: the flow ends between two
    loop turns, so no stop lands inside a CM handler or a teardown. Outside a flow a signal
    raises Stopped (the command's own wait ends there). Only the first signal counts. Several
    flows may run at once, one per thread (a mesh agent's rails): a stop reaches them all."""

    def __init__(self):
        self.signum: int | None = None
        self.flows: list = []  # the engine.flow.Flows running now
        self.requested = False

    @property
    def flow(self):
        return self.flows[-1] if self.flows else None

    def handler(self, signum, frame) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        if not self.flows:
            raise Stopped(signum)
        for flow in list(self.flows):
            flow.stop()

    def stop(self) -> None:
        """Stop the tests now, or as soon as they start (another thread's request)."""
        self.requested = True
        for flow in list(self.flows):
            flow.stop()

    @contextmanager
    def running(self, flow):
        self.flows.append(flow)
        if self.signum is not None or self.requested:  # came before the flow existed
            flow.stop()
        try:
            yield
        finally:
            self.flows.remove(flow)
