"""Step timing under cmtime's step names: per step, total wall time and per-connection spread."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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


@dataclass
class StepStats:
    first_start: float | None = None
    last_end: float | None = None
    durations: list[float] = field(default_factory=list)


class StepTimer:
    def __init__(self):
        self.steps: dict[str, StepStats] = {}
        self._open: dict[tuple[str, int], float] = {}

    def start(self, step: str, conn: int = 0, t: float | None = None) -> None:
        t = time.monotonic() if t is None else t
        self._open[(step, conn)] = t
        s = self.steps.setdefault(step, StepStats())
        if s.first_start is None or t < s.first_start:
            s.first_start = t

    def end(self, step: str, conn: int = 0, t: float | None = None) -> float | None:
        """Close the step; returns its duration in microseconds (None if it was not started)."""
        t = time.monotonic() if t is None else t
        t0 = self._open.pop((step, conn), None)
        if t0 is None:
            return None
        s = self.steps[step]
        s.durations.append(t - t0)
        s.last_end = t if s.last_end is None else max(s.last_end, t)
        return (t - t0) * 1e6

    def summary(self) -> list[dict]:
        rows = []
        names = [n for n in STEP_ORDER if n in self.steps]
        names += [n for n in self.steps if n not in STEP_ORDER]
        for name in names:
            s = self.steps[name]
            if not s.durations:
                continue
            d = s.durations
            rows.append(
                {
                    "step": name,
                    "count": len(d),
                    "total_us": round((s.last_end - s.first_start) * 1e6, 1),
                    "avg_us": round(sum(d) / len(d) * 1e6, 1),
                    "min_us": round(min(d) * 1e6, 1),
                    "max_us": round(max(d) * 1e6, 1),
                }
            )
        return rows
