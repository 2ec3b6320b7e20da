"""Step timing under cmtime's step names: per step, total wall time and per-connection spread.

A step that ends with a CM event ends where cmtime's does: when the event was read from the
channel (its CmEvent.t), not when rdmacli's handler got to it. What rdmacli itself spends from
that read to its next call of the CM (its observers, the table's handler, what it learns of the
connection) is a row of its own, DISPATCH: the CM's steps and rdmacli's overhead, apart."""

from __future__ import annotations

import time

from rdmacli.figures import StepRow

# cmtime's names (v59 cmtime.c:93-111) for the steps rdmacli performs, in flow order.
STEP_ORDER = [
    "create id",
    "bind addr",
    "resolve addr",
    "resolve route",
    "create qp",
    "join",
    "cm connect",
    "accept",
    "establish",
    "disconnect",
    "leave",
    "destroy qp",
    "destroy id",
]
DISPATCH = "dispatch (rdmacli)"  # not cmtime's: from an event's read to rdmacli's next CM call


class StepStats:
    """One step over every connection, as running figures: a persistent server that serves a
    million clients holds the same few numbers as one that served one. Kept by StepTimer's
    own code (a few calls per connection's step, not one per figure: `make profile`)."""

    __slots__ = ("first_start", "last_end", "count", "total", "least", "most")

    def __init__(self, first_start: float | None = None):
        self.first_start = first_start
        self.last_end: float | None = None
        self.count = 0
        self.total = 0.0  # the durations' sum
        self.least = float("inf")
        self.most = 0.0


class StepTimer:
    def __init__(self):
        self.steps: dict[str, StepStats] = {}
        self._open: dict[int, dict[str, float]] = {}  # connection -> its steps begun, not ended

    def start(self, step: str, conn: int = 0, t: float | None = None) -> float:
        """Open the step (at t, or now); returns when."""
        if t is None:
            t = time.monotonic()
        opened = self._open.get(conn)
        if opened is None:
            opened = self._open[conn] = {}
        opened[step] = t
        s = self.steps.get(step)
        if s is None:
            self.steps[step] = StepStats(t)
        elif s.first_start is None or t < s.first_start:
            s.first_start = t
        return t

    def add(self, step: str, start: float, end: float) -> None:
        """A span of the step: an ended one's, or one measured elsewhere (DISPATCH: from an
        event's read to the next call)."""
        d = end - start
        self.merge(step, start, end, 1, d, d, d)

    def merge(self, step: str, first: float, last: float, count: int, total: float, least: float,
              most: float) -> None:  # fmt: skip
        """A step's figures over `count` spans (one: add's; the native runner's, over all its
        spans, handed over once)."""
        s = self.steps.get(step)
        if s is None:
            s = self.steps[step] = StepStats(first)
        elif s.first_start is None or first < s.first_start:
            s.first_start = first
        s.count += count
        s.total += total
        s.least = min(s.least, least)
        s.most = max(s.most, most)
        if s.last_end is None or last > s.last_end:
            s.last_end = last

    def end(self, step: str, conn: int = 0, t: float | None = None) -> float | None:
        """Close the step; returns its duration in microseconds (None if it was not started)."""
        opened = self._open.get(conn)
        t0 = opened.pop(step, None) if opened is not None else None
        if t0 is None:
            return None
        if not opened:
            del self._open[conn]
        if t is None:
            t = time.monotonic()
        self.add(step, t0, t)
        return (t - t0) * 1e6

    def forget(self, conn: int) -> None:
        """A connection gone with steps never ended (a client that vanished mid-accept): their
        starts go with it, not kept for the life of a persistent server."""
        self._open.pop(conn, None)

    def summary(self) -> list[StepRow]:
        rows = []
        names = [n for n in STEP_ORDER if n in self.steps]
        names += [n for n in self.steps if n not in STEP_ORDER and n != DISPATCH]
        names += [DISPATCH] if DISPATCH in self.steps else []
        for name in names:
            s = self.steps[name]
            if not s.count or s.last_end is None or s.first_start is None:
                continue
            rows.append(
                StepRow(
                    step=name,
                    count=s.count,
                    total_us=round((s.last_end - s.first_start) * 1e6, 1),
                    avg_us=round(s.total / s.count * 1e6, 1),
                    min_us=round(s.least * 1e6, 1),
                    max_us=round(s.most * 1e6, 1),
                )
            )
        return rows
