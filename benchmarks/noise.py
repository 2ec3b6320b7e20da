"""A figure and its noise: rdmacli's runs against the C tool's, and whether this lab can tell
them apart at the goal's margin.

A ratio of two medians from three runs each says nothing when the runs of either tool spread
wider than the goal's margin (the lab's 64 KiB WRITE: perftest's runs from 0.084 to 0.17 Gb/s,
rdmacli's from 0.052 to 0.145, for a goal of 0.95x). So each figure keeps its runs, their
minimum, median and maximum, and a bootstrap interval for the ratio of the medians; runs
alternate (drift hits both tools) until that interval is narrower than the goal's margin, or
until the most runs allowed, and then the verdict is the words "not separable in this lab"
instead of a ratio. Pure functions of the runs (seeded), so the rule is tested without a lab.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass
from typing import Callable

LEVEL = 0.9  # the interval's coverage
DRAWS = 2000  # bootstrap resamples
LEAST, MOST = 3, 12  # runs of each tool: at least, and at most before "not separable"
NOT_SEPARABLE = "not separable in this lab"


@dataclass(frozen=True)
class Spread:
    """One tool's runs of one figure."""

    runs: tuple[float, ...]

    @property
    def low(self) -> float:
        return min(self.runs)

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def high(self) -> float:
        return max(self.runs)


def interval(ours: Spread, theirs: Spread, level: float = LEVEL, draws: int = DRAWS,
             seed: int = 0) -> tuple[float, float]:  # fmt: skip
    """A percentile bootstrap interval for median(ours) / median(theirs): each tool's runs
    resampled with replacement, `draws` times."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        a = statistics.median(rng.choices(ours.runs, k=len(ours.runs)))
        b = statistics.median(rng.choices(theirs.runs, k=len(theirs.runs)))
        if b > 0:
            ratios.append(a / b)
    ratios.sort()
    if not ratios:
        return float("nan"), float("nan")
    cut = (1 - level) / 2
    return ratios[int(cut * (len(ratios) - 1))], ratios[int((1 - cut) * (len(ratios) - 1))]


@dataclass(frozen=True)
class Figure:
    """A figure of both tools, the goal (the ratio rdmacli / C must stay at or above, `at_least`,
    or at or below) and what the runs say of it."""

    name: str
    ours: Spread
    theirs: Spread
    goal: float
    at_least: bool
    unit: str = ""  # of both tools' runs (Gb/s, µs, ms): said beside every figure that shows them

    @property
    def ratio(self) -> float:
        return self.ours.median / self.theirs.median if self.theirs.median > 0 else float("nan")

    @property
    def interval(self) -> tuple[float, float]:
        return interval(self.ours, self.theirs)

    @property
    def margin(self) -> float:
        """How far from parity the goal allows: 0.05 for >= 0.95x, 0.1 for <= 1.1x."""
        return abs(self.goal - 1.0) or 0.05

    @property
    def narrow(self) -> bool:
        lo, hi = self.interval
        return hi - lo < self.margin

    @property
    def verdict(self) -> str:
        """met, missed (the whole interval on one side of the goal), else not separable."""
        lo, hi = self.interval
        if self.at_least:
            met, missed = lo >= self.goal, hi < self.goal
        else:
            met, missed = hi <= self.goal, lo > self.goal
        return "met" if met else "missed" if missed else NOT_SEPARABLE

    def to_dict(self) -> dict:
        lo, hi = self.interval
        side = lambda s: {**asdict(s), "low": s.low, "median": s.median, "high": s.high}  # noqa: E731
        return {"name": self.name, "ours": side(self.ours), "theirs": side(self.theirs),
                "ratio": round(self.ratio, 4), "interval": [round(lo, 4), round(hi, 4)],
                "level": LEVEL, "goal": self.goal, "at_least": self.at_least,
                "verdict": self.verdict, "unit": self.unit}  # fmt: skip

    def line(self) -> str:
        lo, hi = self.interval
        said = (f"{self.ratio:.2f}x [{lo:.2f}, {hi:.2f}]" if self.verdict != NOT_SEPARABLE
                else f"{NOT_SEPARABLE} ([{lo:.2f}, {hi:.2f}] wider than {self.margin:.2f})")  # fmt: skip
        return (f"  {self.name:<10} ours {self.ours.low:.3g}/{self.ours.median:.3g}/{self.ours.high:.3g} "
                f"theirs {self.theirs.low:.3g}/{self.theirs.median:.3g}/{self.theirs.high:.3g} {self.unit} "
                f"(min/median/max of {len(self.ours.runs)}/{len(self.theirs.runs)}): {said}, "
                f"goal {'>=' if self.at_least else '<='} {self.goal:g}x: {self.verdict}")  # fmt: skip


def alternate(name: str, ours: Callable[[], float | None], theirs: Callable[[], float | None], goal: float,
              at_least: bool, least: int = LEAST, most: int = MOST,
              unit: str = "") -> Figure | None:  # fmt: skip
    """Runs of each tool in turn (theirs first) until the ratio's interval is narrower than the
    goal's margin (after `least` each) or `most` each; None if a run failed (a failure is never
    averaged away: the caller says which)."""
    figures = alternate_each({name: ours}, theirs, goal, at_least, least, most, unit)
    return figures[name] if figures else None


def alternate_each(ours: dict[str, Callable[[], float | None]], theirs: Callable[[], float | None],
                   goal: float, at_least: bool, least: int = LEAST, most: int = MOST,
                   unit: str = "") -> dict[str, Figure] | None:  # fmt: skip
    """alternate() for several contenders against one C tool: each round runs theirs, then each
    of ours in turn, so every figure shares the C tool's runs and the same drift (a floor beside
    rdmacli: what no engine costs, measured in the same rounds). Until every interval is narrow
    (after `least` rounds) or `most` rounds; None if any run failed."""
    mine: dict[str, list[float]] = {name: [] for name in ours}
    b: list[float] = []

    def figures() -> dict[str, Figure]:
        c_tool = Spread(tuple(b))
        return {
            name: Figure(name, Spread(tuple(a)), c_tool, goal, at_least, unit) for name, a in mine.items()
        }

    while len(b) < most:
        got = theirs()
        if got is None:
            return None
        b.append(got)
        for name, run in ours.items():
            got = run()
            if got is None:
                return None
            mine[name].append(got)
        if len(b) >= least and all(f.narrow for f in figures().values()):
            break
    return figures()


def crossed(moved_bytes: int | None, claimed_bytes: float) -> bool:
    """Whether a run crossed the wire: the sending netdev's transmitted bytes moved at least by
    the payload the run claims (headers only add). None (no counter to read): not shown."""
    return moved_bytes is not None and moved_bytes >= claimed_bytes
