"""The run's nearest deadline, found without scanning every connection on every loop turn: a
flow's connections set deadlines as they change phase, and the loop asks for the nearest one each
turn. Scanning all of them each turn made set-up quadratic in connections."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rdmacli.errors import Cause, RdmacliError


class Deadlines:
    """The nearest of the run's overall deadline and its connections' own, kept as a lower bound
    (`soonest`, kept low by note) and scanned again only once that bound has passed: what
    `nearest` returns has either not passed at `now`, or is exact."""

    def __init__(self, overall_at: float | None, overall_words: str):
        self.overall_at, self.overall_words = overall_at, overall_words
        self.soonest: tuple[float, str] | None = None

    @staticmethod
    def words(conn) -> str:
        return f"{conn.phase} on connection {conn.index}"

    def note(self, when: float, conn) -> None:
        """A connection set a deadline: keep the bound at or before it. (Its words are made only
        then: a data phase pushes its deadline out at every completion.)"""
        if self.soonest is not None and when < self.soonest[0]:
            self.soonest = (when, self.words(conn))

    def nearest(self, conns: Iterable, now: float | None = None) -> tuple[float, str] | None:
        """The nearest deadline at `now` (the loop's clock read) of the run and `conns`."""
        now = time.monotonic() if now is None else now
        soonest = self.soonest
        if soonest is not None and soonest[0] > now:
            return soonest
        best = (self.overall_at, self.overall_words) if self.overall_at else None
        for conn in conns:
            if not conn.finished and conn.deadline and (best is None or conn.deadline < best[0]):
                best = (conn.deadline, self.words(conn))
        self.soonest = best
        return best

    @staticmethod
    def expired(conns: Iterable, now: float) -> list:
        """The unfinished connections whose own deadline has passed at `now`."""
        return [c for c in conns if not c.finished and c.deadline and c.deadline <= now]


def overrun(exc: RdmacliError, live: list, words, where: Callable) -> RdmacliError:
    """The run's overall deadline passed with `live` connections still running: an overrun (the
    command's words for it, Timeouts.words) named at the first of them, else the deadline's error."""
    if words.overrun is None or not live:
        return exc
    conn = live[0]
    return RdmacliError(
        f"{conn.phase}: still running at {words.overall}; torn down there [{where(conn)}]",
        hint=words.overrun,
        cause=Cause.OVERRUN,
        details={"step": conn.phase},
    )
