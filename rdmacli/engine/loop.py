"""One thread, one selector: the CM channel fd plus each connection's completion channel fd.

One dispatch turn runs the handlers of every fd that select() returned, then the timers that are
due. A handler may tear down what a later handler of the same turn would touch (a CM disconnect
releasing the last connection on a shared CQ while that CQ's channel is in the batch), so nothing
runs for what is gone: a key unregistered in this turn is skipped, a cancelled timer never fires,
a forgotten cm_id gets no handler (issue 24).
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import time
from typing import Callable

from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma.cm import CmEvent
from rdmacli.rdma.verbs import WorkCompletion


class DeadlineExpired(RdmacliError):
    cause = Cause.DEADLINE


# what a deadline that passed advises (the loop's, and the native client's: engine.nativeflow)
DEADLINE_HINT = "the peer did not answer in time; raise the timeout options or check the peer"


class Timer:
    """A call_later; cancel() makes sure it never runs (its owner was torn down)."""

    __slots__ = ("when", "fn", "cancelled")

    def __init__(self, when: float, fn: Callable[[], None]):
        self.when, self.fn, self.cancelled = when, fn, False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self, channel, *, busy_poll: bool = False):
        self.channel = channel
        self.busy_poll = busy_poll
        self.sel = selectors.DefaultSelector()
        self.sel.register(channel.fd, selectors.EVENT_READ, self.read_cm)
        self.cm_handlers: dict[int, Callable[[CmEvent], None]] = {}
        self.observers: list[Callable[[CmEvent], None]] = []
        self.cqs: dict[int, tuple] = {}  # comp channel fd -> (comp channel, CQ, handler)
        self.timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self.backlog: dict[int, tuple] = {}  # CQs a turn left with completions (fairness)
        self.now = time.monotonic()  # this turn's clock, read once as select() returns
        # stop requests (a signal handler's) end a select() at once instead of at its timeout
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.sel.register(self._wake_r, selectors.EVENT_READ, self._drain_wake)

    def call_later(self, seconds: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + seconds, fn)
        heapq.heappush(self.timers, (timer.when, next(self._seq), timer))
        return timer

    def fire_timers(self) -> None:
        """The timers that are due, run now (a native flow's, between two of C's slices)."""
        self._fire_timers()

    def _fire_timers(self) -> None:
        now = self.now = time.monotonic()
        while self.timers and self.timers[0][0] <= now:
            timer = heapq.heappop(self.timers)[2]
            if not timer.cancelled:
                timer.fn()

    def wake(self) -> None:
        """End the current or next select() at once (safe from a signal handler)."""
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):  # full (a wake is pending anyway) or closed
            pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- registration ------------------------------------------------------------------------
    def on_cm(self, id_key: int, handler: Callable[[CmEvent], None]) -> None:
        self.cm_handlers[id_key] = handler

    def forget_cm(self, id_key: int) -> None:
        self.cm_handlers.pop(id_key, None)

    def watch_cq(self, comp, cq, handler: Callable[[list[WorkCompletion]], None]) -> None:
        """handler gets each batch a poll returns (one call a batch, not one a completion)."""
        cq.req_notify()
        fd = comp.fd
        self.cqs[fd] = (comp, cq, handler)
        self.sel.register(fd, selectors.EVENT_READ, lambda: self._read_cq(fd))

    def unwatch_cq(self, comp) -> None:
        """Before comp is destroyed: its fd leaves the selector (a key of it already returned
        by this turn's select() is skipped, see dispatch)."""
        if comp.alive and comp.fd in self.cqs:
            self.sel.unregister(comp.fd)
            del self.cqs[comp.fd]

    # -- dispatch ----------------------------------------------------------------------------
    def read_cm(self) -> None:
        """Every CM event the channel holds (it never blocks: the channel is non-blocking); the
        loop's own turn, and a flow that reads between its calls (cmtime's resolve step)."""
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
        if not self.busy_poll:  # a spinning loop polls its CQs itself: no wake-ups to pay for
            cq.req_notify()
        if not self.drain(cq, handler, batches=self.FAIR_BATCHES):
            self.backlog[fd] = entry

    FAIR_BATCHES = 64  # polls of one CQ per turn before the CM channel and the others get theirs

    @staticmethod
    def drain(cq, handler, batches: int | None = None) -> bool:
        """Handle what cq holds: all of it, or at most `batches` polls. True when it is empty
        (the channel was re-armed before: only new completions raise a new event)."""
        while cq.alive and batches != 0:
            wcs = cq.poll()
            if not wcs:
                return True
            handler(wcs)
            if batches is not None:
                batches -= 1
        return not cq.alive

    def _serve_backlog(self) -> None:
        """CQs left non-empty by a fair turn are polled again, before anything waits."""
        backlog, self.backlog = self.backlog, {}
        for fd, entry in backlog.items():
            if self.cqs.get(fd) is entry and not self.drain(entry[1], entry[2], batches=self.FAIR_BATCHES):
                self.backlog[fd] = entry

    SPIN_TURNS = 64  # busy poll: CQ-only turns between two looks at the CM channel and timers
    SPIN_S = 0.002  # ... or this long, whichever comes first

    def _spin(self) -> bool:
        """Poll every CQ once through; True if anything was handled."""
        handled = False
        for _comp, cq, handler in list(self.cqs.values()):
            wcs = cq.poll() if cq.alive else []
            if wcs:
                handled = True
                handler(wcs)
                self.drain(cq, handler, batches=self.FAIR_BATCHES)
        return handled

    def _spin_turns(self, done: Callable[[], bool]) -> None:
        """Busy poll: CQ polls only (no system call), until done(), a while without any
        completion, or SPIN_TURNS turns with completions: then the caller's full turn."""
        until = time.monotonic() + self.SPIN_S
        turns = 0
        while turns < self.SPIN_TURNS:
            if self._spin():  # only a completion can change done(): asked then, not per spin
                turns += 1
                if done():
                    return
            elif (now := time.monotonic()) >= until:
                self.now = now
                return

    # -- running -----------------------------------------------------------------------------
    def run_until(
        self, done: Callable[[], bool], deadline: Callable[[float], tuple[float, str] | None]
    ) -> None:
        """Dispatch until done(); deadline(now) gives the nearest (monotonic time, what) or None.
        One clock read per turn, handed to deadline(): a bound it keeps may be judged against the
        same instant it is compared with here (two reads let a stale bound pass between them,
        and a deadline that was no longer anybody's ended a run mid-stream)."""
        while not done():
            now = time.monotonic()
            dl = deadline(now)
            timeout = 1.0
            if dl is not None:
                left = dl[0] - now
                if left <= 0:
                    raise DeadlineExpired(
                        f"deadline expired while waiting for {dl[1]}",
                        hint=DEADLINE_HINT,
                    )
                timeout = min(timeout, left)
            if self.timers:
                timeout = max(0.0, min(timeout, self.timers[0][0] - now))
            if self.busy_poll:
                self._spin_turns(done)
                if done():
                    return
                timeout = 0
            if self.backlog:
                timeout = 0
            self.dispatch(timeout)

    def dispatch(self, timeout: float | None) -> int:
        """One turn: the handlers of every ready fd still registered, then the timers due.
        Returns how many fds were ready."""
        ready = self.sel.select(timeout)
        self.now = time.monotonic()
        registered = self.sel.get_map()
        for key, _ in ready:
            # an earlier handler of this turn may have unregistered this fd (and a new
            # registration may have reused the number): only the key select() saw may run
            if registered.get(key.fd) is key:
                key.data()
        if self.backlog:
            self._serve_backlog()
        self._fire_timers()
        return len(ready) + len(self.backlog)

    def settle(self, turns: int = 8) -> None:
        """Handle what has already arrived, without waiting: before a stopped run is judged,
        the disconnects and completions queued in the channels count (issue 22)."""
        for _ in range(turns):
            if not self.dispatch(0):
                return

    def close(self) -> None:
        if self._wake_r < 0:
            return
        self.sel.close()
        self.timers.clear()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self._wake_r = self._wake_w = -1
