"""One agent's verdicts over time: a Tracker per pair of NICs it is an end of, and one per NIC.

Each window brings this node's end of every pair it probed (probe.phase.ProbeEnd). A
pair's tracker is fed that pair's window cause (judge.window_cause). A NIC's tracker is fed the
window's evidence about the NIC itself: bad when two or more of its partners in the window were
bad with one cause and they were more than a third of them (nic_cause), or its own port said
the fault is its own (LOCAL); good otherwise. A port whose link went down in the window is a
fact (nic_evidence): the NIC is named at once, and its pairs take no evidence from the window. A
partner's fault shows on this node as a bad pair (a suspicious peer), never as this NIC bad.

What the whole fabric's verdict is (a bad NIC elsewhere, a bad link) is for `watch status`,
which gathers every agent's pairs and blames them as `mesh` does. Nothing here reads a clock.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rdmacli.mesh.blame import LIARS, LOCAL
from rdmacli.watch import judge
from rdmacli.watch.hysteresis import Policy, State, Tracker

if TYPE_CHECKING:
    from rdmacli.probe.phase import ProbeEnd


@dataclass
class NicWindow:
    """One NIC's window, as counted: probes, their network round trips, the causes seen."""

    sent: int = 0
    answered: int = 0
    rtts_us: list[float] = field(default_factory=list)
    causes: Counter = field(default_factory=Counter)
    partners: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    passed_sent: int = 0  # the probes of partners that answered at all (not DEAD), and lost
    passed_lost: int = 0
    leaky: int = 0  # partners that answered and lost a probe or more
    drops: int = 0  # the port's link went down this many times since the last window (its counter)


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

    def feed(self, ends: list[ProbeEnd], drops: dict[int, int] | None = None, starved: bool = False
             ) -> dict[int, NicWindow]:  # fmt: skip
        """One window's ends (this node's end of each pair) and each NIC's link drops since
        the last window (its port's counter, read by the agent): trackers fed, and per NIC what
        the window counted (for the metrics). A `starved` window (this host kept the probes from
        the CPU: agent.STARVED) is counted and judges nothing, good or bad, but a port's own
        link drop, a fact of the port."""
        by_nic: dict[int, NicWindow] = {
            r: NicWindow(drops=(drops or {}).get(r, 0)) for r in range(self.rails)
        }
        judged = []
        for end in ends:
            rail, f = end.rail, end.figures
            w = by_nic.setdefault(rail, NicWindow())
            ref = self.refs.setdefault(rail, judge.Reference())
            # starved: no cause, and its round trips kept out of the reference slow is judged by
            cause: Any = (
                judge.SKIP if starved else judge.window_cause(end, ref, self.slow_factor, self.windows)
            )
            w.sent += f.probes_sent
            w.answered += f.probes_answered
            if f.rtt_p50_us:
                w.rtts_us.append(f.rtt_p50_us)
            for port in end.counters:
                for name, v in port.moved.items():
                    w.counters[name] = max(w.counters.get(name, 0), v)  # one port: the same delta
            if cause is judge.SKIP:
                continue
            w.partners += 1
            if end.result == "pass":
                w.passed_sent, w.passed_lost = w.passed_sent + f.probes_sent, w.passed_lost + f.lost
                w.leaky += f.lost > 0
            if cause is not None:
                w.causes[cause] += 1
            judged.append((end, cause))
        evidence = {rail: nic_evidence(w) for rail, w in by_nic.items()}
        for end, cause in judged:
            if evidence[end.rail][1]:
                continue  # the port's own fact explains every pair of the window: no evidence of them
            if cause == judge.SLOW and not slower_than_mates(end, by_nic[end.rail], self.slow_factor):
                cause = None  # as slow as its window-mates: this host or this NIC, not that partner
            key = (end.rail, end.peer, end.peer_rail)
            self.pairs.setdefault(key, Tracker(self.policy)).feed(cause)
        for rail, (cause, certain) in evidence.items():
            if starved and not certain:
                continue
            self.nics.setdefault(rail, Tracker(self.policy)).feed(cause, certain)
        self.windows += 1
        self._forget_quiet()
        return by_nic

    def _forget_quiet(self) -> None:
        """Trackers of pairs that are OK and have nothing in their recent windows are dropped:
        what the agent holds grows with trouble, not with partners."""
        for key in [k for k, t in self.pairs.items() if t.state is State.OK and not any(t.recent)]:
            del self.pairs[key]

    def rekey(self, old_names: tuple[str, ...], new_names: tuple[str, ...], rails: int) -> None:
        """A new map (a reload): the pair trackers follow their partners by name to their new
        ranks, and those of a partner or rail no longer in the map are dropped (a node taken
        out is forgotten, a reordered map keeps each verdict under its own name); NICs of rails
        no longer there are dropped."""
        rank_of = {name: rank for rank, name in enumerate(new_names)}
        pairs = {}
        for (rail, peer, peer_rail), t in self.pairs.items():
            name = old_names[peer] if 0 <= peer < len(old_names) else None
            if name in rank_of and rail < rails and peer_rail < rails:
                pairs[(rail, rank_of[name], peer_rail)] = t
        self.pairs = pairs
        self.nics = {r: t for r, t in self.nics.items() if r < rails}
        self.refs = {r: ref for r, ref in self.refs.items() if r < rails}
        self.rails = rails

    def alerted_pairs(self) -> dict[tuple[int, int, int], Tracker]:
        return {k: t for k, t in self.pairs.items() if t.alerted}


def slower_than_mates(end: ProbeEnd, w: NicWindow, factor: float) -> bool:
    """A pair judged slow against this NIC's past is a slow partner only when it is also slower
    than factor x the typical of its window-mates (this NIC's other partners, the same window):
    a slowdown of this host, or of this NIC, moves every pair of the window alike (the lab under
    TCG: one host-wide slowdown named six healthy NICs' pairs slow). With no mates it stands."""
    p50 = end.figures.rtt_p50_us
    mates = list(w.rtts_us)
    if p50 in mates:
        mates.remove(p50)
    if not p50 or not mates:
        return True
    return p50 > factor * statistics.median(mates)


def pooled_loss(w: NicWindow) -> bool:
    """The NIC's probes lost, counted over all its partners that answered: at least twice
    MIN_LOST and LOSS_FRACTION of them, spread over more than a third of the partners. A NIC
    dropping 5 % both ways loses about a tenth of its round trips, with every partner, while a
    partner's count of 20 is too few to show it every window (two lost or more in 60 % of them);
    pooled, each window shows it, and the NIC is named in two windows instead of up to four (the
    lab: 34 s against the 30 asked). A partner's own fault is one leaky partner."""
    enough = w.passed_lost >= max(2 * judge.MIN_LOST, judge.LOSS_FRACTION * w.passed_sent)
    return enough and w.leaky > LIARS and w.leaky * 3 > w.partners


LINK_DOWN_COUNTERS = ("link_downed",)  # a port's count of its link going down (rxe, mlx5, IB PMA)


def link_downs(counters: dict) -> int:
    """A port's link-down count (or its moves) from counters as diag.counters names them: the
    port's own, or a device-wide one (`device.` before it)."""
    return sum(counters.get(n) or counters.get(f"device.{n}") or 0 for n in LINK_DOWN_COUNTERS)


def nic_evidence(w: NicWindow) -> tuple[str | None, bool]:
    """The window's evidence about the NIC (nic_cause) and whether it is certain: the NIC's own
    port said its link went down (its link_downed counter moved since the last window, as the
    agent reads it, or in the phase, or the port was down when the window opened) is a fact,
    named at once (Tracker.feed's certain), where probes lost are a statistic that needs confirming."""
    if w.drops or link_downs(w.counters):
        return "DOWN", True
    cause = nic_cause(w)
    return cause, cause == "DOWN"


def nic_cause(w: NicWindow) -> str | None:
    """The window's evidence about the NIC itself: its own port's fault on any pair, or one
    cause on more than LIARS partners that are more than a third of the window's. A third, not a
    half as mesh's blame asks of a whole run: a window is ten probes a partner, and a NIC
    dropping 5 % both ways leaves a partner's ten untouched a third of the time (the lab: half
    the windows then had four of seven partners lossy); a partner's own fault shows on one
    partner, two bad NICs elsewhere on two. The window's verdicts need confirming in later
    windows all the same (Policy.raise_after). Slow asks two thirds: a slow wire or NIC slows
    every partner alike, a busy host some of them (in the lab a test polling eight
    Python starts a second left five healthy NICs named slow, on about half their partners).
    Never from LIARS partners or fewer (mesh's blame.LIARS): agents that refuse to answer one
    NIC's probes make its own window look like that NIC's fault."""
    for cause in w.causes:
        if cause in LOCAL:
            return cause
    if pooled_loss(w):
        return judge.LOSS
    if not w.causes:
        return None
    cause, n = w.causes.most_common(1)[0]
    thirds = 2 if cause == judge.SLOW else 1
    return cause if n > LIARS and n * 3 > thirds * w.partners else None
