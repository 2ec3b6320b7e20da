"""Who is bad: blame (a bad node, NIC or link from the pairs' results) and slow pairs.

Blame tells a bad NIC or node (it fails with most of its partners) from a bad link (a pair that
fails while both its NICs pass elsewhere); slow is judged against the best comparable pair and
the fabric's own tail. Functions of typed pairs (report.Pair) alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from itertools import chain
from typing import Any

from rdmacli.mesh.findings import BadPair, Blame, ClassReference, Culprit, End, Slow, SlowReference
from rdmacli.mesh.report import LOCAL, Pair, cause_of, device_of

# f: how many agents lying together (or refusing their partners on purpose) blame is proof
# against. A NIC or node is blamed from its own node's word (LOCAL causes) or from the pairs of
# more than LIARS distinct partner nodes (a node's rails count once): f agents that fail their
# pairs with one innocent NIC, or claim their own counters moved on them, name nobody. The cost,
# said in the docs: a real fault seen by only f partner nodes is left as links (or unexplained).
LIARS = 2
# ... and the witnesses must be more than this share of the NIC's tested pairs too, so the cabal
# a fleet tolerates grows with it: f alone let three accounts out of a thousand name an innocent
# (issue 70). An eighth, where the majority rule asks for half: up to 16 partners it asks no more
# than f does (a NIC losing a few packets shows on a few of its pairs only: the simulator's goals
# at 16 x 2 hold), at 64 it takes 8 witnesses, at a full mesh of 1 000 nodes 125.
LIAR_SHARE = 0.125


def enough_witnesses(pairs, node: int, tested: int) -> bool:
    """Whether bad `pairs` of a NIC of `node` can blame it: from more than LIARS partner nodes,
    and more than LIAR_SHARE of its `tested` pairs."""
    return partner_nodes(pairs, node) > LIARS and len(pairs) > LIAR_SHARE * tested


def partner_nodes(pairs, node: int) -> int:
    """How many distinct nodes other than `node` the pairs reach (cross-rail: a partner node's
    rails are one witness, not several)."""
    return len({p.b if p.a == node else p.a for p in pairs})


def late(p: Pair | None, spoke: frozenset | None = None) -> bool:
    """Whether p failed because one end's agent was late (it reached the pair's slot after the
    slot ended, was paused, or hung past the schedule): AGENT said of an agent that ran (`spoke`;
    None: every agent did). That is the agent's own condition, no evidence about a NIC or a link
    (issue 70: a late agent's pair was blamed as a bad link). An agent that never ran is its
    node's fault, and stays evidence against it."""
    if p is None or p.result != "fail":
        return False
    e = p.error()
    return e is not None and e.code == "AGENT" and (spoke is None or e.reported_by in spoke)


def blame(
    n: int,
    pairs: list[Pair],
    names: Sequence[str],
    rails: int = 1,
    devices: Sequence[Sequence[Any]] | None = None,
    healthy=None,
    spoke: frozenset | None = None,
) -> Blame:
    """Bad NICs first: a NIC whose node says the fault is its own (LOCAL causes) on most of its
    pairs; then, greedily, the NIC failing (or slow, or lossy, in either attempt) with the
    largest share of its not yet explained partners, more than half and from more than LIARS
    partner nodes, explains those; repeat; then a NIC common to bad pairs of more than LIARS
    partner nodes that are those partners' only ones (common_ends). A node whose every rail is
    a bad NIC is a bad node (with one rail, a bad NIC is its node). A pair still bad whose NICs
    both pass elsewhere is a bad link; any other is unexplained (two NICs alone cannot tell a
    NIC from a link). O(M^2) per bad NIC, M NICs. `healthy` (mesh/healthy.Healthy): the
    probe's healthy pairs, counted per NIC, never listed."""
    m = n * rails
    judged = [p for p in pairs if p.result in ("pass", "fail") and not late(p, spoke)]
    counted = Counted(m, rails, healthy, {p.key for p in pairs})

    def ends(p: Pair) -> tuple[int, int]:
        return p.a * rails + p.ra, p.b * rails + p.rb

    # NIC -> (its pair, the other NIC, whether the pair counts against them): judged once
    of: list[list[tuple[Pair, int, bool]]] = [[] for _ in range(m)]
    for p in judged:
        x, y = ends(p)
        # one end's word against the other's counts against neither; a first attempt failed by a
        # late agent and passed on its re-test is no evidence either
        ever_bad = p.bad or (p.first is not None and (p.first.result == "fail" and not late(p.first, spoke)
                                                      or p.first.lossy))  # fmt: skip
        against = ever_bad and p.disputed is None
        of[x].append((p, y, against))
        of[y].append((p, x, against))
    bad: dict[int, list] = {}  # NIC -> [its bad pairs, pairs counted]
    for x in range(m):
        own = [p for p, _, against in of[x] if against and own_cause(p, x // rails) in LOCAL]
        if own and len(own) * 2 > len(of[x]) + counted.of[x]:
            bad[x] = [own, len(of[x]) + counted.of[x]]
    while True:
        best = None
        for x in range(m):
            if x in bad:
                continue
            mine = [(p, against) for p, y, against in of[x] if y not in bad]
            failed = [p for p, against in mine if against]
            if len(failed) < 2 or partner_nodes(failed, x // rails) <= LIARS:
                continue
            tested = len(mine) + counted.left(x, bad)
            if len(failed) * 2 > tested:
                share = len(failed) / tested
                if best is None or share > best[0]:
                    best = (share, x, failed, tested)
        if best is None:
            break
        _, x, failed, tested = best
        bad[x] = [failed, tested]
    common_ends(of, bad, rails, counted.of)
    whole = [r for r in range(n) if all(r * rails + k in bad for k in range(rails))]
    nodes = []
    for r in whole:
        failed = [p for k in range(rails) for p in bad[r * rails + k][0]]
        tested = sum(bad[r * rails + k][1] for k in range(rails))
        nodes.append(_bad(names, r, None, failed, tested))
    nics = [
        _bad(names, x // rails, x % rails, bad[x][0], bad[x][1], device_of(devices, x // rails, x % rails))
        for x in sorted(bad)
        if x // rails not in whole
    ]
    passes = [
        counted.of[x] > 0 or any(p.result == "pass" and not p.lossy and p.slow is None for p, _, _ in of[x])
        for x in range(m)
    ]
    links: list[BadPair] = []
    unexplained: list[BadPair] = []
    disputed: list[BadPair] = []
    for p in judged:
        x, y = ends(p)
        if not p.bad or x in bad or y in bad:
            continue
        cause = p.cause or ("SLOW" if p.slow else "LOSS")
        if rails > 1:
            a, b = (
                End(names[p.a], p.ra, device_of(devices, p.a, p.ra)),
                End(names[p.b], p.rb, device_of(devices, p.b, p.rb)),
            )
        else:
            a, b = End(names[p.a]), End(names[p.b])
        if p.disputed is not None:  # blamed on nobody: the end that failed it is said
            disputed.append(BadPair(a, b, cause, failed_by=names[p.disputed]))
            continue
        entry = BadPair(a, b, cause, counters=p.trouble() if p.lossy else None, slow=p.slow or None)
        (links if passes[x] and passes[y] else unexplained).append(entry)
    return Blame(tuple(nodes), tuple(nics), tuple(links), tuple(unexplained), tuple(disputed))


class Counted:
    """The probe's healthy pairs in blame's sums: per NIC how many (`of`), and how many of
    them are with NICs already found bad (each bad NIC's partners walked once: what the
    greedy rule leaves out of a NIC's tested pairs)."""

    def __init__(self, m: int, rails: int, healthy, trouble: set):
        self.healthy, self.rails, self.trouble = healthy, rails, trouble
        self.of = [0] * m
        self.with_bad = [0] * m
        self.walked: set[int] = set()
        if healthy is not None:
            for _, x, y, _, _ in healthy.rows():
                self.of[x] += 1
                self.of[y] += 1

    def left(self, x: int, bad: dict) -> int:
        """NIC x's healthy pairs with NICs not in `bad`."""
        if self.healthy is None:
            return 0
        for z in bad.keys() - self.walked:
            self.walked.add(z)
            for peer, peer_rail in self.healthy.sched.nic_tests(z // self.rails, z % self.rails):
                y = peer * self.rails + peer_rail
                if self.healthy.has(z, y, self.trouble):
                    self.with_bad[y] += 1
        return self.of[x] - self.with_bad[x]


def common_ends(
    of: list[list[tuple[Pair, int, bool]]], bad: dict[int, list], rails: int, healthy_of=None
) -> None:
    """What the majority rule leaves: a NIC at the end of two or more bad pairs whose other
    NICs are bad nowhere else explains them as one fault, where calling each a bad link would
    take as many (a NIC dropping 5 % of its packets shows on a few of its pairs only: each
    pair's handful of packets may all get through). Greedy, the most such pairs first. Only
    telling pairs count here (Pair.telling): a few first attempts that failed without a counter
    moving and passed again are the host's noise, not a NIC's fault. And only pairs of one
    symptom (Pair.symptom): a NIC that reached all its partners but one, and was slow with
    another, is not one fault; a lossy NIC's pairs all show loss, a flapping one's all fail.
    And only from more than LIARS partner nodes, and more than LIAR_SHARE of its tested pairs:
    f agents agreeing on one NIC are not a fault, nor is a fleet's handful."""
    left = {
        x: [(p, y) for p, y, against in pairs if against and p.telling and y not in bad]
        for x, pairs in enumerate(of)
    }
    count = {x: len(v) for x, v in left.items() if v and x not in bad}
    while True:
        best = None
        for x in count:
            if x in bad:
                continue
            lone = [p for p, y in left[x] if y not in bad and count.get(y) == 1]
            by_symptom: dict[str, list[Pair]] = {}
            for p in lone:
                by_symptom.setdefault(p.symptom, []).append(p)
            lone = max(by_symptom.values(), key=len, default=[])
            tested = len(of[x]) + (healthy_of[x] if healthy_of else 0)
            if (
                len(lone) >= 2
                and enough_witnesses(lone, x // rails, tested)
                and (best is None or len(lone) > len(best[1]))
            ):
                best = (x, lone, tested)
        if best is None:
            return
        x, lone, tested = best
        bad[x] = [lone, tested]
        for _, y in left[x]:
            if y in count:
                count[y] -= 1


def _healthy_rows(healthy, aligned: bool):
    """A callable giving the probe's healthy pairs of one class afresh: (p50, p99, node a, node b)."""

    def rows():
        if healthy is None:
            return
        rails = healthy.rails
        for _, x, y, p50, p99 in healthy.rows():
            if (x % rails == y % rails) == aligned:
                yield p50, p99, x // rails, y // rails

    return rows


def _healthy_lows(healthy, aligned: bool):
    """A callable giving the probe's healthy pairs' fastest round trips afresh: (min, a, b)."""

    def rows():
        if healthy is None:
            return
        rails = healthy.rails
        for x, y, low in healthy.lows():
            if (x % rails == y % rails) == aligned and low == low:  # NaN: an older agent said none
                yield low, x // rails, y // rails

    return rows


def _hosts_only(low: float | None, ref: ClassReference) -> bool:
    """A pair whose typical round trip is slow but whose fastest is within the fabric's own
    (under factor x the fastest of all, or under the typical pair's median): the wire carried
    it fast at least once, and what made the rest slow was the hosts (a prober or responder
    waiting for a CPU). Precise about the wire, not the host: not slow."""
    return low is not None and ref.min_limit_us is not None and low <= ref.min_limit_us


def within(reference: SlowReference, factor: float):
    """keep(aligned, p50) for Healthy.take: a healthy pair stays in the columns unless the
    reference would call it slow (above the limit) or implausible (under best / 2 x factor)."""

    def keep(aligned: bool, p50: float) -> bool:
        ref = reference.of(aligned)
        limit, best = ref.limit_us, ref.rtt_p50_us
        return not ((limit and p50 > limit) or (best and p50 < best / (2 * factor)))

    return keep


def own_cause(p: Pair, x: int) -> str | None:
    """The cause node x itself reported for pair p (its own side of it)."""
    r = p.reports.get(p.side_of(x))
    return cause_of(r.error) if r and r.result != "pass" else None


def _bad(names: Sequence[str], x: int, rail: int | None, failed: list[Pair], tested: int,
         device: str | None = None) -> Culprit:  # fmt: skip
    """A bad NIC's or node's entry: its causes, and the trouble counters of its bad pairs, both
    ends' (`counters`: a NIC that drops packets makes its partners retransmit as often as
    itself) and its own port's alone (`own_counters`)."""
    causes: dict[str, int] = {}
    both: dict[str, int] = {}
    own: dict[str, int] = {}
    for p in failed:
        code = p.cause or ("SLOW" if p.slow else "LOSS")  # passed, slow or with counters moving
        if p.first is not None and not p.bad:  # bad only in its first attempt
            code = p.first.cause or "LOSS"
        causes[code] = causes.get(code, 0) + 1
        for into, side in ((both, None), (own, p.side_of(x))):
            for name, v in p.trouble(side).items():
                into[name] = into.get(name, 0) + v
    return Culprit(names[x], x, len(failed), tested, causes, rail, both, own, device)


MIN_COMPARABLE = 3  # pairs of a class: fewer have no "best" worth judging against


def standing_best(rows, best, worse) -> float:
    """The best figure that stands without any one node's word: the best pair's ends are left
    out in turn and the worse of the two bests left is taken. One liar's forged figure cannot
    set the reference the others are judged by (its pairs all have it as an end), and when it
    is an end of the honest best, the other removal keeps an honest figure. `rows()` gives
    (figure, node a, node b) afresh each time (millions of them, never held as a list)."""
    _, top_a, top_b = best(rows(), key=lambda r: r[0])
    left = [best((v for v, a, b in rows() if x != a and x != b), default=None) for x in (top_a, top_b)]
    return worse(left) if None not in left else best(v for v, _, _ in rows())


def implausible(pairs: list[Pair], reference: SlowReference, factor: float) -> dict[int, set[int]]:
    """Passing pairs whose round trip is under the standing best / (2 x factor x jitter), by
    node: no NIC is that much faster than the rest of the fabric (a pair's round trip has its
    partner's share in it). A node at the end of several such pairs is the one whose words are
    wrong (its own figures, or the hold time its responder claimed). `jitter` is the fabric's
    own (its typical p99 over its typical p50, at least 1): where the hosts' time is most of
    every figure (the lab under TCG: p99 3 to 4 x p50, typical pairs 7 x the best), one lightly
    loaded node's pairs are honestly several times faster than the rest, and one was called
    inconsistent in a healthy lab run; on a quiet fabric (hardware: p99 near p50) a
    forged figure is still far out. The reference stands without any one node's word either way
    (standing_best), so what this misses in a noisy fabric moves no verdict."""
    out: dict[int, set[int]] = {}
    for p in pairs:
        ref = reference.of(p.ra == p.rb)
        best, jitter = ref.rtt_p50_us, max(1.0, ref.jitter or 1.0)
        lat = p.metric("rtt_p50_us")
        if p.result == "pass" and lat and best and lat < best / (2 * factor * jitter):
            out.setdefault(p.a, set()).add(p.b)
            out.setdefault(p.b, set()).add(p.a)
    return out


def judge_slow(pairs: list[Pair], factor: float, fraction: float, reference: SlowReference | None = None,
               healthy=None) -> SlowReference:  # fmt: skip
    """Mark passing pairs slow against the best comparable pair (same test, rail-aligned or
    cross-rail) that stands without any one node's word (standing_best). Latency: a pair's p50
    above factor x the best p50, and above the class's median p99 too (the fabric's own jitter:
    a loaded or emulated fabric whose typical tail reaches that far cannot tell a slow pair
    from a busy moment); and, where the pair says its fastest round trip, that too above
    factor x the fastest pair's and above the class's median p50 (a slow wire is slow every
    time; hosts that were busy make only some round trips slow: _hosts_only). Bandwidth: a
    direction's Gb/s below fraction x the best direction's. The reference is computed from
    these pairs unless given (a re-test is judged by its first round's). Returns it."""
    if reference is None:
        passed = [p for p in pairs if p.result == "pass"]
        reference = SlowReference(
            aligned=class_reference([p for p in passed if p.ra == p.rb], True, factor, fraction, healthy),
            cross=class_reference([p for p in passed if p.ra != p.rb], False, factor, fraction, healthy),
        )
    for p in pairs:
        p.slow = None
        ref = reference.of(p.ra == p.rb)
        if p.result != "pass":
            continue
        lat, low = p.metric("rtt_p50_us"), p.metric("rtt_min_us")
        if lat and ref.limit_us and ref.rtt_p50_us and lat > ref.limit_us and not _hosts_only(low, ref):
            p.slow = Slow("rtt_p50_us", lat, ref.rtt_p50_us, ref.limit_us)
            continue
        for key in ("gbps_ab", "gbps_ba"):
            g = p.metric(key)
            if g is not None and ref.limit_gbps and ref.gbps and g < ref.limit_gbps:
                p.slow = Slow(key, g, ref.gbps, ref.limit_gbps)
                break
    return reference


def class_reference(members: list[Pair], aligned: bool, factor: float, fraction: float, healthy=None
                    ) -> ClassReference | None:  # fmt: skip
    """One class's reference (judge_slow) from its passing pairs and the probe's healthy
    columns; None when fewer than MIN_COMPARABLE pairs of the class passed."""
    more = _healthy_rows(healthy, aligned)
    extra = sum(1 for _ in more()) if healthy is not None else 0
    if len(members) + extra < MIN_COMPARABLE:
        return None
    ref = ClassReference(pairs=len(members) + extra)
    p50s = [(v, p.a, p.b) for p in members if (v := p.metric("rtt_p50_us"))]
    if p50s or extra:
        rows = lambda: chain(p50s, ((v, a, b) for v, _, a, b in more()))  # noqa: E731
        p99s = [v for p in members if (v := p.metric("rtt_p99_us"))]
        p99s += [p99 for _, p99, _, _ in more()]
        best = standing_best(rows, min, max)
        typical = statistics.median(v for v, _, _ in rows())  # the class's typical pair
        ref = replace(
            ref,
            rtt_p50_us=best,
            limit_us=round(max(factor * best, statistics.median(p99s) if p99s else 0), 1),
            rtt_p50_median_us=round(typical, 1),
            # the fabric's own jitter: its typical tail over its typical pair
            jitter=round(statistics.median(p99s) / typical, 2) if p99s and typical > 0 else None,
        )
        lows = [(v, p.a, p.b) for p in members if (v := p.metric("rtt_min_us"))]
        more_lows = _healthy_lows(healthy, aligned)
        if lows or (extra and any(True for _ in more_lows())):
            low = standing_best(lambda: chain(lows, more_lows()), min, max)
            ref = replace(ref, rtt_min_us=low, min_limit_us=round(max(factor * low, typical), 1))
    gbps = [(v, p.a, p.b) for p in members for k in ("gbps_ab", "gbps_ba") if (v := p.metric(k))]
    if gbps:
        best = standing_best(lambda: gbps, max, min)
        ref = replace(ref, gbps=best, limit_gbps=round(fraction * best, 3))
    return ref
