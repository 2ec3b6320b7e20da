"""One agent's verdicts over time: a Tracker per pair of NICs it is an end of, and one per NIC.

Each window brings this node's end of every pair it probed (mesh/probe.Phase's records). A
pair's tracker is fed that pair's window cause (judge.window_cause). A NIC's tracker is fed the
window's evidence about the NIC itself: bad when two or more of its partners in the window were
bad with one cause and they were more than a third of them (nic_cause), or its own port said
the fault is its own (LOCAL); good otherwise. A
partner's fault shows on this node as a bad pair (a suspicious peer), never as this NIC bad.

What the whole fabric's verdict is (a bad NIC elsewhere, a bad link) is for `watch status`,
which gathers every agent's pairs and blames them as `mesh` does. Nothing here reads a clock.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from rdmacli.mesh.blame import LOCAL
from rdmacli.watch import judge
from rdmacli.watch.hysteresis import Policy, State, Tracker


@dataclass
class NicWindow:
    """One NIC's window, as counted: probes, their network round trips, the causes seen."""

    sent: int = 0
    answered: int = 0
    rtts_us: list[float] = field(default_factory=list)
    causes: Counter = field(default_factory=Counter)
    partners: int = 0
    counters: dict[str, int] = field(default_factory=dict)


@dataclass
class WatchState:
    """Trackers keyed (rail, peer rank, peer rail) for pairs and rail for this node's NICs."""

    rails: int
    policy: Policy = field(default_factory=Policy)
    slow_factor: float = 2.0
    pairs: dict[tuple[int, int, int], Tracker] = field(default_factory=dict)
    nics: dict[int, Tracker] = field(default_factory=dict)
    refs: dict[int, judge.Reference] = field(default_factory=dict)
    windows: int = 0

    def feed(self, records: list[dict]) -> dict[int, NicWindow]:
        """One window's records (this node's end of each pair): trackers fed, and per NIC what
        the window counted (for the metrics)."""
        by_nic: dict[int, NicWindow] = {r: NicWindow() for r in range(self.rails)}
        judged = []
        for rec in records:
            rail = rec["rail"]
            w = by_nic.setdefault(rail, NicWindow())
            ref = self.refs.setdefault(rail, judge.Reference())
            cause = judge.window_cause(rec, ref, self.slow_factor)
            w.sent += rec.get("probes_sent") or 0
            w.answered += rec.get("probes_answered") or 0
            if rec.get("rtt_p50_us"):
                w.rtts_us.append(rec["rtt_p50_us"])
            for port in rec.get("counters") or ():
                for name, v in port.get("moved", {}).items():
                    w.counters[name] = max(w.counters.get(name, 0), v)  # one port: the same delta
            if cause is judge.SKIP:
                continue
            w.partners += 1
            if cause is not None:
                w.causes[cause] += 1
            judged.append((rec, cause))
        for rec, cause in judged:
            if cause == judge.SLOW and not slower_than_mates(rec, by_nic[rec["rail"]], self.slow_factor):
                cause = None  # as slow as its window-mates: this host or this NIC, not that partner
            key = (rec["rail"], rec["peer"], rec["peer_rail"])
            self.pairs.setdefault(key, Tracker(self.policy)).feed(cause)
        for rail, w in by_nic.items():
            self.nics.setdefault(rail, Tracker(self.policy)).feed(nic_cause(w))
        self.windows += 1
        self._forget_quiet()
        return by_nic

    def _forget_quiet(self) -> None:
        """Trackers of pairs that are OK and have nothing in their recent windows are dropped:
        what the agent holds grows with trouble, not with partners."""
        for key in [k for k, t in self.pairs.items() if t.state is State.OK and not any(t.recent)]:
            del self.pairs[key]

    def alerted_pairs(self) -> dict[tuple[int, int, int], Tracker]:
        return {k: t for k, t in self.pairs.items() if t.alerted}


def slower_than_mates(rec: dict, w: NicWindow, factor: float) -> bool:
    """A pair judged slow against this NIC's past is a slow partner only when it is also slower
    than factor x the typical of its window-mates (this NIC's other partners, the same window):
    a slowdown of this host, or of this NIC, moves every pair of the window alike (the lab under
    TCG: one host-wide slowdown named six healthy NICs' pairs slow). With no mates it stands."""
    p50 = rec.get("rtt_p50_us")
    mates = list(w.rtts_us)
    if p50 in mates:
        mates.remove(p50)
    if not p50 or not mates:
        return True
    return p50 > factor * statistics.median(mates)


def nic_cause(w: NicWindow) -> str | None:
    """The window's evidence about the NIC itself: its own port's fault on any pair, or one
    cause on two or more partners that are more than a third of the window's. A third, not a
    half as mesh's blame asks of a whole run: a window is ten probes a partner, and a NIC
    dropping 5 % both ways leaves a partner's ten untouched a third of the time (the lab: half
    the windows then had four of seven partners lossy); a partner's own fault shows on one
    partner, two bad NICs elsewhere on two. The window's verdicts need confirming in later
    windows all the same (Policy.raise_after)."""
    for cause in w.causes:
        if cause in LOCAL:
            return cause
    if not w.causes:
        return None
    cause, n = w.causes.most_common(1)[0]
    return cause if n >= 2 and n * 3 > w.partners else None
