"""One window's evidence about one pair of NICs, as a cause or good: what a Tracker is fed.

A window's pair record (probe.phase.Phase's, this node's end) says: the partner's NIC never
answered (DEAD), probes were lost (LOSS, from MIN_LOST of them: UD does not retransmit),
the round trips were slow against this NIC's own recent best (SLOW), or nothing wrong (good).
Causes come from the record's typed fields and error cause, never its words. A window in which
this node's own agent was late (its cause AGENT) is no evidence either way: skipped.

Slow is judged as the mesh judges it (mesh/blame.judge_slow), over time instead of across a
run's pairs: a pair's typical round trip above `factor` x the best of this NIC's recent good
windows, and its fastest too (a slow wire is slow every time; a busy host only some of the
time). The reference is this node's own measurements: no peer's word sets it.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rdmacli.mesh.blame import LOCAL
from rdmacli.mesh.report import code_of

if TYPE_CHECKING:
    from rdmacli.probe.phase import ProbeEnd

DEAD, LOSS, SLOW = "DEAD", "LOSS", "SLOW"
CAUSES = (DEAD, LOSS, SLOW, *LOCAL)  # every cause a window can have (window_cause), the state file's
SKIP = object()  # no evidence this window
REFERENCE_WINDOWS = 64  # good windows a NIC's reference remembers
# a window's pair is lossy from two probes lost (and 5 % of them): one datagram in a window is
# counted (the metrics have it) but is no evidence alone; in the lab, 20 probes a partner on 16
# emulated NICs made single drops on healthy pairs, two windows in three, while a
# NIC dropping 5 % both ways loses two or more of a partner's 20 in 60 % of the windows
MIN_LOST = 2
LOSS_FRACTION = 0.05
MIN_REFERENCE = 3  # windows with good round trips before anything is judged slow (windows, not pairs:
# counted by pair, one window of seven partners was a reference, and in the lab a reference learnt
# while eight agents started named a healthy NIC slow two windows later)


@dataclass
class Reference:
    """A NIC's recent good windows' round trips (µs), for slow: the best that stands is the
    median of the lowest quarter (one lucky window does not set it), and the limits take the
    fabric's own jitter, as mesh/blame.judge_slow does across a run's pairs: a window's typical
    round trip is slow above factor x the best and above the recent windows' own spread (the
    90th percentile of their typical round trips); its fastest, above factor x the best fastest
    and above the typical round trip. Measured in the lab under TCG: typical round
    trips 4 to 10 ms, their best 3 to 5 ms, the fastest 0.5 to 1.2 ms; judged against the best
    alone every node of a healthy lab was slow, and against the median p99 (29 to 75 ms: the p99
    of ten probes is their slowest, one host's hiccup) a node 40 ms slower was not."""

    p50: deque = field(default_factory=lambda: deque(maxlen=REFERENCE_WINDOWS))
    p99: deque = field(default_factory=lambda: deque(maxlen=REFERENCE_WINDOWS))
    low: deque = field(default_factory=lambda: deque(maxlen=REFERENCE_WINDOWS))
    windows: int = 0  # windows whose good round trips are in it (MIN_REFERENCE counts these)
    last: int | None = None  # the last of them

    def add(self, p50: float | None, p99: float | None, low: float | None, window: int | None = None) -> None:
        """A good pair's round trips, of `window` (None: a window of its own)."""
        if window is None or window != self.last:
            self.windows, self.last = self.windows + 1, window
        for values, v in ((self.p50, p50), (self.p99, p99), (self.low, low)):
            if v:
                values.append(v)

    def _best(self, values) -> float | None:
        if self.windows < MIN_REFERENCE or not values:
            return None
        ordered = sorted(values)
        return statistics.median(ordered[: max(1, len(ordered) // 4)])

    @staticmethod
    def _typical(values) -> float:
        return statistics.median(values) if values else 0.0

    def figures(self) -> dict:
        """What slow is judged against now (µs), for people: the state file says it per NIC."""
        best, low = self._best(self.p50), self._best(self.low)
        return {"windows": self.windows, "best_p50_us": best and round(best, 1),
                "typical_p50_us": round(self._typical(self.p50), 1),
                "typical_p99_us": round(self._typical(self.p99), 1), "p90_p50_us": round(self._spread(), 1),
                "best_min_us": low and round(low, 1)}  # fmt: skip

    def _spread(self) -> float:
        """The recent windows' 90th percentile typical round trip."""
        ordered = sorted(self.p50)
        return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else 0.0

    def limits(self, factor: float) -> tuple[float | None, float | None]:
        best, low = self._best(self.p50), self._best(self.low)
        limit = best and max(factor * best, self._spread())
        low_limit = low and max(factor * low, self._typical(self.p50))
        return limit, low_limit


def window_cause(end: ProbeEnd, ref: Reference, factor: float = 2.0, window: int | None = None):
    """A window's end of a pair: DEAD, LOSS, SLOW, a LOCAL cause (this NIC's own: its port
    down), None (good), or SKIP (no evidence: this agent was late). `window`: its number, so
    that the reference counts windows, not pairs (None: each record a window of its own)."""
    if end.result != "pass":
        code = code_of(end.error)
        if code == "AGENT":
            return SKIP
        return code if code in LOCAL else DEAD
    f = end.figures
    if f.lost >= max(MIN_LOST, LOSS_FRACTION * f.probes_sent):
        return LOSS
    p50, low = f.rtt_p50_us, f.rtt_min_us
    limit, low_limit = ref.limits(factor)
    if p50 and limit and p50 > limit and (not low or not low_limit or low > low_limit):
        return SLOW
    ref.add(p50, f.rtt_p99_us, low, window)
    return None
