"""The agent's CPU budget, held: fewer probes a partner while the agent uses more than its share.

The budget is 3 % of one core per NIC. What an agent spends has a part that grows with the
probes it sends (the native loop's posts and polls, their bookkeeping and judgement in Python)
and a fixed part (each window's QPs opened and closed, SIDR, the state file). After each window
the agent's process time over the window's length, per NIC, is fed here; when the median of the
last few windows is over budget, the probes a partner go down in proportion (never below
MIN_COUNT, where a NIC's loss still shows pooled over its partners), and back up a step at a time
toward the configured count while under 80 % of it. Only this node's own probes change: a
partner answers whatever probe comes and each end counts its own losses, so the plan every agent
computes alike (who probes whom, when) is untouched. When the fixed part alone is over budget
nothing here can help: the CPU metric and the RdmaWatchOverBudget rule say so.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

CPU_BUDGET = 0.03  # of one core, per NIC
MIN_COUNT = 5  # probes a partner a window, at least
RECENT = 5  # windows the median is taken over
JUDGED_AFTER = 3  # windows at a count before it is changed again


@dataclass
class Governor:
    ceiling: int  # the configured probes a partner (--count)
    budget: float = CPU_BUDGET
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT))

    def next_count(self, count: int, used: float) -> int:
        """The probes a partner for the next window, given this window's CPU per NIC."""
        self.recent.append(used)
        if len(self.recent) < JUDGED_AFTER:
            return count
        typical = statistics.median(self.recent)
        new = count
        if typical > self.budget and count > MIN_COUNT:
            new = max(MIN_COUNT, min(count - 1, math.floor(count * self.budget / typical)))
        elif typical < 0.8 * self.budget and count < self.ceiling:
            new = min(self.ceiling, count + max(1, count // 5))
        if new != count:
            self.recent.clear()  # the new count is judged on its own windows
        return new
