"""`--test probe` at fleet size: healthy pairs held as columns of figures, never as objects.

At 1000 nodes x 8 rails a probe phase has 4 million NIC pairs; nearly all are healthy, and a
healthy pair needs nothing from the verdict but its round trips (to find the fabric's best
and its slow pairs) and its place in the counts. Agents say them compactly
(records.HealthyRecord: a NIC's healthy partners, four figures each); `Store` keeps each
NIC's entries in flat arrays as they come, and `Store.split` pairs the two ends up at the end:
a pair both ends called healthy goes into `Healthy`'s columns (about 40 bytes a pair), any
other pair of the schedule becomes a report.Pair with its ends' records (what grows with
trouble). The verdict takes outliers out of the columns as pairs (`Healthy.take`) once it
knows the fabric's best, and reads counts and medians from them.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rdmacli.mesh.records import HEALTHY_ENTRIES, HEALTHY_FIGURES, HealthyRecord, PairRecord
from rdmacli.mesh.report import Pair

if TYPE_CHECKING:
    from rdmacli.mesh.schedule import Schedule

NAN = float("nan")


def healthy(rec: PairRecord, count: int) -> bool:
    """A pair record that says nothing a verdict needs beyond its round trips: passed, every
    one of the run's probes answered, no counters moved."""
    return (rec.result == "pass" and rec.probes_sent == count and rec.probes_answered == count
            and not rec.counters and None not in rec.healthy_figures())  # fmt: skip


def compact(sched, count: int, recs: list[PairRecord]) -> list[PairRecord | HealthyRecord]:
    """The phase's records as the agent prints them (records.HealthyRecord, PairRecord): its
    healthy pairs a NIC at a time, four figures each, in the order of the schedule's tests
    (Schedule.nic_tests); every other pair in a record of its own. At 1000 nodes x 8 rails an
    agent's output is about 200 KB instead of 4 MB, and the coordinator's intake follows."""
    out: list[PairRecord | HealthyRecord] = []
    cols: dict[int, dict[int, tuple[Any, ...]]] = {}
    for rec in recs:
        i = sched.nic_index(rec.rank, rec.rail, rec.peer, rec.peer_rail) if healthy(rec, count) else None
        if i is None:  # not healthy, or not a test of the schedule: said as it is, the coordinator judges
            out.append(rec)
            continue
        cols.setdefault(rec.rail, {})[i] = rec.healthy_figures()
        run, rank = rec.run, rec.rank
    for rail, entries in sorted(cols.items()):
        top = max(entries) + 1
        for first in range(min(entries) // HEALTHY_ENTRIES * HEALTHY_ENTRIES, top, HEALTHY_ENTRIES):
            none = (None,) * len(HEALTHY_FIGURES)
            span = [entries.get(i, none) for i in range(first, min(first + HEALTHY_ENTRIES, top))]
            if any(e[0] is not None for e in span):
                figures = dict(zip(HEALTHY_FIGURES, zip(*span)))
                out.append(HealthyRecord(run=run, rank=rank, rail=rail, round=0, first=first, probes=count,
                                         **figures))  # fmt: skip
    return out


def passed(run: str, rank: int, rail: int, peer: int, peer_rail: int, figures, count: int) -> PairRecord:
    """The pair record a healthy entry stands for: passed, every probe answered, its four
    round trips (p50, p99, host p50, min)."""
    p50, p99, host, low = figures
    return PairRecord(run=run, rank=rank, peer=peer, round=0, result="pass", rail=rail, peer_rail=peer_rail,
                      rtt_p50_us=p50, rtt_p99_us=p99, host_rtt_p50_us=host, rtt_min_us=low, probes_sent=count,
                      probes_answered=count)  # fmt: skip


class Store:
    """Each NIC's healthy entries as its own agent said them: four figures per test of the
    schedule (NaN: not said healthy), allocated when a NIC first says one."""

    def __init__(self, sched, count: int):
        self.sched, self.count, self.rails = sched, count, sched.rails
        self.cols: dict[int, tuple[array, ...]] = {}  # NIC (rank * rails + rail) -> figures
        self.detailed: dict[int, set[int]] = {}  # NIC -> its tests it reported in a pair record
        self.entries = 0

    def take(self, rec: HealthyRecord) -> str | None:
        """A healthy record of its sender's own: taken in, or why it may not be (nothing taken)."""
        if rec.round != 0 or not 0 <= rec.rail < self.rails:
            return f"a healthy record of round {rec.round}, rail {rec.rail}: not a NIC of the probe phase"
        if rec.probes != self.count:
            return f"a healthy record of {rec.probes} probes a partner, in a run of {self.count}"
        size = self.sched.nic_tests_count(rec.rank)
        if rec.first + len(rec.rtt_p50_us) > size:
            return f"a healthy record past its NIC's {size} partners"
        x = rec.rank * self.rails + rec.rail
        cols = self.cols.get(x)
        if cols is None:
            cols = self.cols[x] = tuple(array("d", [NAN]) * size for _ in range(4))
        mine, taken = self.detailed.get(x, ()), list(rec.entries())
        for i, *_ in taken:
            if not math.isnan(cols[0][i]) or i in mine:
                return f"a second report of its test {i} on rail {rec.rail}"
        p50s, p99s, hosts, mins = cols
        for i, p50, p99, host, low in taken:
            p50s[i], p99s[i], hosts[i], mins[i] = p50, p99, host, low
        self.entries += len(taken)
        return None

    def said(self, rank: int, rail: int, peer: int, peer_rail: int) -> bool:
        """Did NIC (rank, rail) call its test with (peer, peer_rail) healthy?"""
        cols = self.cols.get(rank * self.rails + rail)
        i = self.sched.nic_index(rank, rail, peer, peer_rail)
        return cols is not None and i is not None and not math.isnan(cols[0][i])

    def detail(self, rank: int, rail: int, peer: int, peer_rail: int) -> None:
        """NIC (rank, rail) reported that test in a pair record of its own."""
        i = self.sched.nic_index(rank, rail, peer, peer_rail)
        if i is not None:
            self.detailed.setdefault(rank * self.rails + rail, set()).add(i)

    def record(self, run: str, rank: int, rail: int, i: int, peer: int, peer_rail: int) -> PairRecord:
        """An end's healthy entry as the pair record it stands for."""
        cols = self.cols[rank * self.rails + rail]
        return passed(run, rank, rail, peer, peer_rail, (col[i] for col in cols), self.count)

    def split(self, run: str, pairs: dict[tuple, Pair]) -> tuple[list[Pair], Healthy]:
        """Every pair of the schedule, once: (those with trouble or a missing end, as Pairs with
        the reports their ends gave, healthy entries as records; the healthy ones, as columns).
        `pairs`: the pairs some end reported in a record of its own. The store is emptied."""
        sched, rails, n = self.sched, self.rails, self.sched.n
        out = Healthy(rails=rails, count=self.count, sched=sched)
        trouble = []
        nan = math.isnan
        index = sched.nic_index
        for a in range(n):
            for ra in range(rails):
                cx = self.cols.get(a * rails + ra)
                for i, (b, rb) in enumerate(sched.nic_tests(a, ra)):
                    if b < a:
                        continue
                    key = (a, ra, b, rb)
                    cy = self.cols.get(b * rails + rb)
                    j = index(b, rb, a, ra)
                    ok_a = cx is not None and not nan(cx[0][i])
                    ok_b = cy is not None and not nan(cy[0][j])
                    p = pairs.get(key)
                    if ok_a and ok_b and p is None and cy is not None:  # ok_b: cy is there
                        out.add(a * rails + ra, b * rails + rb, cy[0][j], cy[1][j], cy[2][j], cy[3][j])
                        continue
                    if p is None:
                        p = Pair(a, b, 0, ra=ra, rb=rb)
                    if ok_a:
                        p.reports["listen"] = self.record(run, a, ra, i, b, rb)
                    if ok_b:
                        p.reports["connect"] = self.record(run, b, rb, j, a, ra)
                    trouble.append(p)
        self.cols.clear()
        return trouble, out


@dataclass
class Healthy:
    """The pairs both ends called healthy, as columns: the connector's figures (the pair's, as
    report.Pair.metric takes them) and the two NICs (rank * rails + rail, the lower rank's
    first). What the verdict takes out (`take`) is no longer here."""

    rails: int
    count: int
    sched: Schedule | None = None
    p50: array = field(default_factory=lambda: array("d"))
    p99: array = field(default_factory=lambda: array("d"))
    host: array = field(default_factory=lambda: array("d"))
    low: array = field(default_factory=lambda: array("d"))  # each pair's fastest round trip
    x: array = field(default_factory=lambda: array("l"))
    y: array = field(default_factory=lambda: array("l"))
    gone: set = field(default_factory=set)  # indices taken out as pairs

    def add(self, x: int, y: int, p50: float, p99: float, host: float, low: float) -> None:
        self.p50.append(p50)
        self.p99.append(p99)
        self.host.append(host)
        self.low.append(low)
        self.x.append(x)
        self.y.append(y)

    def __len__(self) -> int:
        return len(self.p50) - len(self.gone)

    def rows(self):
        """(index, NIC x, NIC y, p50, p99) of every pair still here."""
        gone = self.gone
        for k, row in enumerate(zip(self.x, self.y, self.p50, self.p99)):
            if k not in gone:
                yield (k, *row)

    def pair(self, k: int, run: str) -> Pair:
        """Pair k as a report.Pair of two passing ends (the listener's figures are the
        connector's: the columns keep one end's, the one the verdict reads)."""
        (a, ra), (b, rb) = divmod(self.x[k], self.rails), divmod(self.y[k], self.rails)
        p = Pair(a, b, 0, ra=ra, rb=rb)
        figures = (self.p50[k], self.p99[k], self.host[k], self.low[k])
        for rank, rail, peer, peer_rail, side in ((a, ra, b, rb, "listen"), (b, rb, a, ra, "connect")):
            p.reports[side] = passed(run, rank, rail, peer, peer_rail, figures, self.count)
        return p

    def lows(self):
        """(NIC x, NIC y, fastest round trip) of every pair still here."""
        gone = self.gone
        for k, row in enumerate(zip(self.x, self.y, self.low)):
            if k not in gone:
                yield row

    def take(self, run: str, keep) -> list[Pair]:
        """The pairs whose (aligned, p50) `keep` refuses, out of the columns, as Pairs."""
        rails = self.rails
        ks = [k for k, x, y, p50, _ in self.rows() if not keep(x % rails == y % rails, p50)]
        self.gone.update(ks)
        return [self.pair(k, run) for k in ks]

    def has(self, x: int, y: int, trouble: set) -> bool:
        """Is the schedule's pair of NICs x and y one of these (not in `trouble`, the keys of
        every pair taken out or reported with trouble)?"""
        (a, ra), (b, rb) = sorted((divmod(x, self.rails), divmod(y, self.rails)))
        assert self.sched is not None  # a Store's Healthy has its schedule
        return (a, ra, b, rb) not in trouble and self.sched.nic_index(a, ra, b, rb) is not None

    def per_nic(self) -> dict[int, array]:
        """Each NIC's pairs' p50s (its count is their number)."""
        out: dict[int, array] = {}
        for _, x, y, p50, _ in self.rows():
            for nic in (x, y):
                col = out.get(nic)
                if col is None:
                    col = out[nic] = array("d")
                col.append(p50)
        return out

    def per_node_p99(self) -> dict[int, array]:
        """Each node's pairs' p99s."""
        out: dict[int, array] = {}
        rails = self.rails
        for _, x, y, _, p99 in self.rows():
            for node in (x // rails, y // rails):
                col = out.get(node)
                if col is None:
                    col = out[node] = array("d")
                col.append(p99)
        return out
