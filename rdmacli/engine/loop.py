"""One thread, one selector: the CM channel fd plus each connection's completion channel fd."""

from __future__ import annotations

import heapq
import itertools
import selectors
import time
from typing import Callable

from rdmacli.errors import ExitCode, RdmacliError
from rdmacli.rdma.cm import CmEvent
from rdmacli.rdma.verbs import WorkCompletion


class DeadlineExpired(RdmacliError):
    exit_code = ExitCode.TIMEOUT


class Loop:
    def __init__(self, channel, *, busy_poll: bool = False):
        self.channel = channel
        self.busy_poll = busy_poll
        self.sel = selectors.DefaultSelector()
        self.sel.register(channel.fd, selectors.EVENT_READ, self._read_cm)
        self.cm_handlers: dict[int, Callable[[CmEvent], None]] = {}
        self.observers: list[Callable[[CmEvent], None]] = []
        self.cqs: dict[int, tuple] = {}  # comp channel fd -> (comp channel, CQ, handler)
        self.timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def call_later(self, seconds: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.timers, (time.monotonic() + seconds, next(self._seq), fn))

    def _fire_timers(self) -> None:
        now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            heapq.heappop(self.timers)[2]()

    # -- registration ------------------------------------------------------------------------
    def on_cm(self, id_key: int, handler: Callable[[CmEvent], None]) -> None:
        self.cm_handlers[id_key] = handler

    def forget_cm(self, id_key: int) -> None:
        self.cm_handlers.pop(id_key, None)

    def watch_cq(self, comp, cq, handler: Callable[[WorkCompletion], None]) -> None:
        cq.req_notify()
        self.cqs[comp.fd] = (comp, cq, handler)
        self.sel.register(comp.fd, selectors.EVENT_READ, lambda: self._read_cq(comp.fd))

    def unwatch_cq(self, comp) -> None:
        if comp.ptr is not None and comp.fd in self.cqs:
            self.sel.unregister(comp.fd)
            del self.cqs[comp.fd]

    # -- dispatch ----------------------------------------------------------------------------
    def _read_cm(self) -> None:
        while True:
            ev = self.channel.get()
            if ev is None:
                return
            for obs in self.observers:
                obs(ev)
            handler = self.cm_handlers.get(ev.id) or self.cm_handlers.get(ev.listen_id)
            if handler is not None:
                handler(ev)

    def _read_cq(self, fd: int) -> None:
        entry = self.cqs.get(fd)
        if entry is None:
            return
        comp, cq, handler = entry
        n = 0
        while comp.get_event() is not None:
            n += 1
        cq.ack_events(n)
        cq.req_notify()
        self.drain(cq, handler)

    @staticmethod
    def drain(cq, handler) -> None:
        while cq.ptr is not None:
            wcs = cq.poll()
            if not wcs:
                return
            for wc in wcs:
                handler(wc)

    def _spin(self) -> None:
        for _comp, cq, handler in list(self.cqs.values()):
            self.drain(cq, handler)

    # -- running -----------------------------------------------------------------------------
    def run_until(self, done: Callable[[], bool], deadline: Callable[[], tuple[float, str] | None]) -> None:
        """Dispatch until done(); deadline() gives the nearest (monotonic time, what) or None."""
        while not done():
            dl = deadline()
            timeout = 1.0
            if dl is not None:
                left = dl[0] - time.monotonic()
                if left <= 0:
                    raise DeadlineExpired(
                        f"deadline expired while waiting for {dl[1]}",
                        hint="the peer did not answer in time; raise the timeout options or check the peer",
                    )
                timeout = min(timeout, left)
            if self.timers:
                timeout = max(0.0, min(timeout, self.timers[0][0] - time.monotonic()))
            if self.busy_poll:
                self._spin()
                timeout = 0
            for key, _ in self.sel.select(timeout):
                key.data()
            self._fire_timers()

    def close(self) -> None:
        self.sel.close()
