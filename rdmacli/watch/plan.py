"""Which peers a `rdmacli watch` agent probes when: windows on the wall clock, a rotation.

Every agent of a fabric computes the same plan from the same map and options, with no
coordinator: time is cut into windows of `window_s` seconds counted from the UNIX epoch
(window k begins at k x window_s), and window k holds `per_window` rounds of the mesh's own
schedule (mesh/schedule.partner: each round pairs every node with one other), rotating through
all of them. Both ends of a pair probe each other in the same window, so each NIC's UD QP is
open when its partners ask for its QP number; every pair of the map is covered once every
`period_windows()` windows. Clocks need to agree to well under a second (NTP or PTP does; the
window's margins are OPEN_LEAD_S and CLOSE_S).

With groups (the map's group= column, `--pairs group|sample:K` as mesh takes them) the rounds
are mesh's grouped schedule instead (mesh/schedule.Schedule): every pair inside each group, and
with sample:K, K node pairs between every two groups; each cycle (a period) takes the next
rotation of the sampled pairs, so every pair between two groups of a and b nodes is probed
within ceil(a x b / K) periods, and each group's own pairs once a period.

A window's probes carry a run id derived from the window's number and the port, so a probe of
another window (a clock behind) or another fabric's watch is not answered or counted.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from functools import cached_property

import rdmacli.watch as defaults
from rdmacli.mesh import schedule
from rdmacli.probe import timing
from rdmacli.probe.kinds import DEFAULT, KINDS
from rdmacli.probe.siphash import PUBLIC_KEY, tag

OPEN_LEAD_S = timing.OPEN_LEAD_S  # a window's NICs are open this long before it begins
CLOSE_S = 0.5  # and closed this long before the next window's open
MIN_WINDOW_S = 5.0  # SIDR, a few probes, the tail: less is not a window
# probes a second a NIC sends at most, as a service: the CPU budget (~3 % of a core per NIC) under
# the prober's own limit (timing.MAX_RATE, what a one-off mesh may use)
RATE_BUDGET = min(100.0, timing.MAX_RATE)
ROTATIONS_SIZED = 8  # a grouped period fits the longest of this many rotations' schedules


@dataclass(frozen=True)
class WatchPlan:
    names: tuple[str, ...]
    addresses: tuple[tuple[str, ...], ...]  # by rank, its rails' addresses in order
    rank: int
    port: int = defaults.PORT  # rail k listens on port + k
    window_s: float = defaults.WINDOW_S
    count: int = defaults.COUNT  # probes to each partner in a window
    per_window: int = 1  # schedule rounds a window holds (partners of each NIC a window)
    groups: tuple[str, ...] = ()  # by rank, its group: probed inside, sampled between ((): all pairs)
    sample: int = 0  # with groups: node pairs between every two groups a period (0: none)
    # the probe's MAC key (watch/key.py): the fabric's, else token.PUBLIC_KEY (nothing authenticated)
    probe_key: bytes = field(default=PUBLIC_KEY, repr=False)
    test: str = DEFAULT  # the probe check its windows run (probe.kinds: a row each)

    def __post_init__(self):
        n = len(self.names)
        if n < 2 or len(self.addresses) != n or not 0 <= self.rank < n:
            raise ValueError("a watch plan needs two nodes or more, each with addresses, this one among them")
        if len({len(a) for a in self.addresses}) != 1:
            raise ValueError("every node of a watch plan has the same number of rails")
        if self.window_s < MIN_WINDOW_S or not 1 <= self.count <= 1000 or self.per_window < 1:
            raise ValueError(f"a window of {MIN_WINDOW_S:g} s or more, 1 to 1000 probes a partner")
        if self.test not in KINDS:
            raise ValueError(f"{self.test!r} is no probe check ({', '.join(KINDS)})")
        if self.groups and len(self.groups) != n or self.sample and not self.groups:
            raise ValueError("a watch plan's groups name every node's, and a sample needs groups")
        if self.rate() > RATE_BUDGET:
            raise ValueError(
                f"{self.rate():.0f} probes a second a NIC: above the budget of {RATE_BUDGET:g} "
                "(fewer probes a partner, fewer partners a window, or longer windows)"
            )

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def rails(self) -> int:
        return len(self.addresses[0])

    def rate(self) -> float:
        """Probes a second each NIC sends at most: a partner's probes are spread over SPREAD of
        the window's send span (probe/timing.step_s)."""
        return timing.rate(self.per_window * self.count, send_span(self.window_s))

    @staticmethod
    def most_per_window(window_s: float, count: int) -> int:
        """The most schedule rounds a window may hold within RATE_BUDGET (rate() solved for it)."""
        return math.floor(timing.most_probes(RATE_BUDGET, send_span(window_s)) / count)

    def period_windows(self) -> int:
        """Windows until every pair of the map (with groups: of each group, and this period's
        sample between them) has been probed once."""
        return math.ceil(self.rounds / self.per_window)

    @cached_property
    def rounds(self) -> int:
        """Node rounds a period: the circle's over every node, or the grouped schedule's (the
        longest of the first ROTATIONS_SIZED rotations: a rotation's sampled pairs pack into
        about as many rounds as another's, and one that needs more leaves its last ones out)."""
        if not self.groups:
            return schedule.round_count(self.n)
        return max(max(self.grouped(c).node_rounds() for c in range(ROTATIONS_SIZED)), 1)

    def grouped(self, cycle: int) -> schedule.Schedule:
        return _grouped(self.n, self.groups, self.sample, cycle)

    def period_s(self) -> float:
        return self.period_windows() * self.window_s

    def window(self, t: float) -> int:
        """The window that time t (UNIX seconds) falls in."""
        return math.floor(t / self.window_s)

    def begin(self, k: int) -> float:
        return k * self.window_s

    def phase_end(self, k: int) -> float:
        """When window k's probing ends (relative to its begin when k is 0): the NICs close
        then, before the next window opens them again."""
        return self.begin(k) + self.window_s - OPEN_LEAD_S - CLOSE_S

    def partners(self, k: int) -> list[int]:
        """The ranks this node probes (and is probed by) in window k."""
        cycle, slot = divmod(k, self.period_windows())  # a period is a cycle of the rounds
        out = []
        for i in range(self.per_window):
            rnd = slot * self.per_window + i
            if rnd >= self.rounds:
                break
            if self.groups:
                p = self.grouped(cycle).node_partner(self.rank, rnd)
            else:
                p = schedule.partner(self.rank, rnd, self.n)
            if p is not None and p not in out:
                out.append(p)
        return out

    def tests(self, k: int) -> list[tuple[int, int, int]]:
        """Window k's tests as probe.phase.Phase takes them: (rail, partner, partner's rail),
        rail k with rail k (each rail its own network)."""
        return [(r, p, r) for p in self.partners(k) for r in range(self.rails)]

    # the probe's topology (probe.phase.Topology), as mesh's AgentConfig numbers it
    def nic(self, rank: int, rail: int) -> int:
        return rank * self.rails + rail

    def address(self, rank: int, rail: int) -> str:
        return self.addresses[rank][rail]

    def port_of(self, rail: int) -> int:
        return self.port + rail

    @property
    def authenticated(self) -> bool:
        """Whether the probes carry tags only this fabric's agents can make (a key file)."""
        return self.probe_key != PUBLIC_KEY

    def run_id(self, k: int) -> str:
        """Window k's run id (16 hex digits), the same at every agent of this fabric: keyed
        when the fabric has a key (no one without it learns which run a window is)."""
        if self.authenticated:
            return tag(self.probe_key, f"rdmacli-watch run {self.port} {k}".encode()).hex()
        return hashlib.sha256(f"rdmacli-watch {self.port} {k}".encode()).hexdigest()[:16]


def partner_counts(names: list[str], groups: tuple[str, ...], sample: int) -> dict[str, int]:
    """Each node's partners a period in the grouped schedule the agents rotate through (its
    partner_sets, not a formula): its group's other nodes, and its share of the sampled pairs
    between groups, as the mean over ROTATIONS_SIZED rotations (a rotation's sample gives a
    node none, one or a few)."""
    rotations = range(ROTATIONS_SIZED if sample else 1)  # without a sample every rotation is alike
    total = [0] * len(names)
    for c in rotations:
        for rank, partners in (_grouped(len(names), groups, sample, c).partner_sets or {}).items():
            total[rank] += len(partners)
    return {name: max(round(t / len(rotations)), 1) for name, t in zip(names, total)}


@functools.lru_cache(maxsize=16)
def _grouped(n: int, groups: tuple[str, ...], sample: int, rotation: int) -> schedule.Schedule:
    """Mesh's grouped schedule of one rotation, built once (its table is a few rounds of n)."""
    return schedule.Schedule(n, pairs="sample" if sample else "group", groups=groups, sample=sample,
                             rotation=rotation)  # fmt: skip


def send_span(window_s: float) -> float:
    """Seconds of a window in which probes go: its phase less the tail for the last replies."""
    span = window_s - OPEN_LEAD_S - CLOSE_S
    return max(span - timing.tail_s(span), 1.0)
