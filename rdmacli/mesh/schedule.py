"""The round-robin schedule every agent computes for itself: no controller hands out pairs.

Circle method: with m = N rounded up to even, node m-1 stays put and the others turn around it;
in round r (0 <= r < m-1) node x < m-1 meets (2r - x) mod (m-1), and the node that would meet
itself meets m-1 (a bye when N is odd). So every pair meets exactly once in m-1 rounds, and no
node is in two tests at once. O(1) per lookup: a node of a 1000-node run never builds the table.

Rails (a node's several NICs) ride on the same node rounds: rail-aligned, rail k of a node meets
rail k of its partner, all rails of the pair at once (they are separate NICs); with cross-rail,
each node round becomes R sub-rounds, and in sub-round s rail k of the lower rank meets rail
(k + s) mod R of the higher, so every rail pair meets once and no NIC is in two tests at once.
A round's number is node_round * R + s then (node_round when aligned).
"""

from __future__ import annotations

import math


def round_count(n: int) -> int:
    return n - 1 if n % 2 == 0 else n


def partner(rank: int, rnd: int, n: int) -> int | None:
    """Whom `rank` meets in round `rnd` of an n-node mesh (None: a bye)."""
    m = n + (n % 2)
    k = m - 1
    if rank == k:
        p = rnd % k
    else:
        p = (2 * rnd - rank) % k
        if p == rank:
            p = k
    return None if p >= n else p


def rounds_for(n: int, quick: bool = False) -> list[int]:
    """The rounds that are run: all of them, or with quick about log2(n) spread evenly (each
    node then meets that many partners at spread distances, enough to tell a node from a link)."""
    total = round_count(n)
    if not quick or n <= 4:
        return list(range(total))
    want = min(total, max(2, math.ceil(math.log2(n))))
    return sorted({(i * total) // want for i in range(want)})


def pairs(n: int, rnd: int) -> list[tuple[int, int]]:
    """The disjoint pairs (low, high) of one round."""
    out = []
    for x in range(n):
        p = partner(x, rnd, n)
        if p is not None and x < p:
            out.append((x, p))
    return out


def subrounds(rails: int, cross: bool) -> int:
    """Rounds per node round: R with cross-rail, else 1."""
    return rails if cross and rails > 1 else 1


def rail_pairs(rails: int, cross: bool, sub: int) -> list[tuple[int, int]]:
    """(rail of the lower rank, rail of the higher) tested at once in one sub-round."""
    if not cross:
        return [(k, k) for k in range(rails)]
    return [(k, (k + sub) % rails) for k in range(rails)]


def tests_of(rank: int, rnd: int, n: int, rails: int = 1, cross: bool = False) -> list[tuple[int, int, int]]:
    """What `rank` runs in round `rnd`: (its rail, its partner, the partner's rail) per test."""
    s = subrounds(rails, cross)
    peer = partner(rank, rnd // s, n)
    if peer is None:
        return []
    out = []
    for lo, hi in rail_pairs(rails, cross, rnd % s):
        out.append((lo, peer, hi) if rank < peer else (hi, peer, lo))
    return out


def nic_pairs(n: int, rnd: int, rails: int = 1, cross: bool = False) -> list[tuple[int, int, int, int]]:
    """The tests of one round as (a, rail of a, b, rail of b), a < b."""
    s = subrounds(rails, cross)
    return [(a, ra, b, rb) for a, b in pairs(n, rnd // s) for ra, rb in rail_pairs(rails, cross, rnd % s)]


def main_rounds(n: int, quick: bool = False, rails: int = 1, cross: bool = False) -> list[int]:
    """The round numbers of a run's schedule, in order."""
    s = subrounds(rails, cross)
    return [r * s + k for r in rounds_for(n, quick) for k in range(s)]


def retest_base(n: int, rails: int = 1, cross: bool = False) -> int:
    """The round number of the first re-test round: past every round of the schedule, so a
    re-test's token never matches a first test's."""
    return round_count(n) * subrounds(rails, cross)


def retest_rounds(todo: list[tuple], limit: int) -> list[list[tuple]]:
    """Pairs of members (nodes, or (node, rail) NICs) to test again, packed in the order given
    into at most `limit` rounds in which no member is in two tests (first fit: each pair in the
    first round where both are free); pairs that do not fit are left out."""
    rounds: list[list[tuple]] = []
    busy: list[set] = []
    for a, b in todo:
        for k in range(limit):
            if k == len(rounds):
                rounds.append([])
                busy.append(set())
            if a not in busy[k] and b not in busy[k]:
                rounds[k].append((a, b))
                busy[k].update((a, b))
                break
    return rounds
