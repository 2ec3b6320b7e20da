"""The round-robin schedule every agent computes for itself: no controller hands out pairs.

Circle method: with m = N rounded up to even, node m-1 stays put and the others turn around it;
in round r (0 <= r < m-1) node x < m-1 meets (2r - x) mod (m-1), and the node that would meet
itself meets m-1 (a bye when N is odd). So every pair meets exactly once in m-1 rounds, and no
node is in two tests at once. O(1) per lookup: a node of a 1000-node run never builds the table.
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


def retest_base(n: int) -> int:
    """The round number of the first re-test round: past every round of the schedule, so a
    re-test's token never matches a first test's."""
    return round_count(n)


def retest_rounds(todo: list[tuple[int, int]], limit: int) -> list[list[tuple[int, int]]]:
    """Pairs to test again, packed in the order given into at most `limit` rounds of disjoint
    pairs (first fit: each pair in the first round where both its nodes are free); pairs that do
    not fit are left out."""
    rounds: list[list[tuple[int, int]]] = []
    busy: list[set[int]] = []
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
