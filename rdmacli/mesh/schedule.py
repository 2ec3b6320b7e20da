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

Pairs chosen as fabrics are built (`Schedule`, `--pairs`): `all` is the circle above over every
node; `group` runs the circle inside each group (a leaf, a rack, a plane: the map's group
column), all groups at once, and nothing between them; `sample` adds, after those rounds, K node
pairs between every two groups, taken at a rotation (a run counter) from a walk through all of
them, so that runs with consecutive rotations cover every pair between two groups of a and b
nodes in ceil(a x b / K) runs. The sampled pairs are packed first fit into rounds in which no
node is in two tests. Every agent computes the same from the spec.

A connectionless probe (`at_once`: `--test probe`) has no rounds to keep NICs apart: every
pair of the schedule above is probed in one phase, round 0, each NIC with all its partners at
once (rail-aligned, or with cross-rail every rail of one node with every rail of the other).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property

from rdmacli.mesh.kinds import checks


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


AT_ONCE = tuple(c.name for c in checks().values() if c.at_once)  # no connection: every pair in one phase
PAIRS = ("all", "group", "sample")  # --pairs: every node pair, inside groups, plus K between
MAX_SAMPLE = 10_000  # node pairs sampled between two groups, at most


@dataclass(frozen=True)
class Schedule:
    """A run's schedule, as every agent and the coordinator compute it from the spec. With
    pairs="all" every lookup is the circle's O(1); otherwise the node rounds are a table of
    the (few) pairs chosen, built once."""

    n: int
    rails: int = 1
    cross: bool = False
    quick: bool = False
    pairs: str = "all"
    groups: tuple[str, ...] = ()  # by rank, its group's name ((): one group)
    sample: int = 0  # pairs="sample": node pairs between every two groups
    rotation: int = 0  # which of the walk's windows of `sample` pairs this run takes
    at_once: bool = False  # a connectionless probe: every pair in one phase (round 0)

    @classmethod
    def of(cls, spec) -> Schedule:
        """The schedule of a run spec (contract.RunSpec)."""
        return cls(spec.n, spec.rails, spec.cross_rail, spec.quick, spec.pairs, spec.groups,
                   spec.sample, spec.rotation, spec.test in AT_ONCE)  # fmt: skip

    @property
    def sub(self) -> int:
        return 1 if self.at_once else subrounds(self.rails, self.cross)

    def rail_combos(self, sub: int) -> list[tuple[int, int]]:
        """(rail of the lower rank, rail of the higher) of one sub-round; at once: all of them."""
        if self.at_once and self.cross:
            return [(k, j) for k in range(self.rails) for j in range(self.rails)]
        return rail_pairs(self.rails, self.cross, sub)

    @cached_property
    def partner_sets(self) -> dict[int, frozenset[int]] | None:
        """at_once with a table or --quick: each rank's partners over all node rounds (None:
        every other rank, looked up without a table)."""
        if self.table is None and not self.quick:
            return None
        out: dict[int, set[int]] = {}
        for r in self._node_rounds():
            for x, y in self.node_pairs_of(r):
                out.setdefault(x, set()).add(y)
                out.setdefault(y, set()).add(x)
        return {k: frozenset(v) for k, v in out.items()}

    def partners(self, rank: int) -> list[int]:
        """at_once: whom `rank` probes, in rank order."""
        sets = self.partner_sets
        if sets is None:
            return [p for p in range(self.n) if p != rank]
        return sorted(sets.get(rank, ()))

    def most_partners(self) -> int:
        """at_once: the most partners any rank probes (n - 1 without a table, not counted)."""
        sets = self.partner_sets
        if sets is None:
            return self.n - 1
        return max((len(v) for v in sets.values()), default=0)

    def nic_tests(self, rank: int, rail: int) -> list[tuple[int, int]]:
        """at_once: whom NIC (rank, rail) probes, as (partner, its rail), in rank then rail
        order: the order of a compact record's entries (records.HealthyRecord)."""
        peer_rails = range(self.rails) if self.cross else (rail,)
        return [(p, k) for p in self.partners(rank) for k in peer_rails]

    def nic_tests_count(self, rank: int) -> int:
        """at_once: how many tests each NIC of `rank` has (the length of nic_tests)."""
        sets = self.partner_sets
        partners = self.n - 1 if sets is None else len(sets.get(rank, ()))
        return partners * (self.rails if self.cross else 1)

    @cached_property
    def _partner_lists(self) -> dict[int, list[int]]:
        return {r: sorted(v) for r, v in (self.partner_sets or {}).items()}

    def nic_index(self, rank: int, rail: int, peer: int, peer_rail: int) -> int | None:
        """at_once: where (peer, peer_rail) is in nic_tests(rank, rail), or None: O(1) without a
        table, a bisection with one; never a list of every NIC's tests."""
        if not self.has_test(rank, 0, rail, peer, peer_rail):
            return None
        if self.partner_sets is None:
            i = peer - (peer > rank)
        else:
            i = bisect.bisect_left(self._partner_lists[rank], peer)
        return i * self.rails + peer_rail if self.cross else i

    def _node_rounds(self):
        return rounds_for(self.n, self.quick) if self.table is None else range(len(self.table))

    @cached_property
    def members(self) -> list[list[int]]:
        """Each group's ranks, the groups in order of their names."""
        if not self.groups:
            return [list(range(self.n))]
        by: dict[str, list[int]] = {}
        for rank, g in enumerate(self.groups):
            by.setdefault(g, []).append(rank)
        return [by[g] for g in sorted(by)]

    @cached_property
    def table(self) -> list[dict[int, int]] | None:
        """pairs != "all": each node round as {rank: partner} (both ends); None for "all"."""
        if self.pairs == "all":
            return None
        biggest = max(len(m) for m in self.members)
        out: list[dict[int, int]] = []
        for r in rounds_for(biggest, self.quick) if biggest > 1 else ():
            met: dict[int, int] = {}
            for m in self.members:
                for x, y in pairs(len(m), r) if r < round_count(len(m)) else ():
                    met[m[x]], met[m[y]] = m[y], m[x]
            out.append(met)
        if self.pairs == "sample":
            out += pack(self.between())
        return out

    def between(self) -> list[tuple[int, int]]:
        """The sampled pairs between every two groups: for groups of a and b members, a walk
        through all a x b pairs (step k: the k % a-th of the first, the (k % a + k // a) % b-th
        of the second: consecutive steps take distinct nodes on both sides), and this run's
        window of `sample` steps at `rotation`."""
        out = []
        groups = self.members
        for i, gi in enumerate(groups):
            for j, gj in enumerate(groups[i + 1 :], i + 1):
                a, b = len(gi), len(gj)
                total = a * b
                for t in range(min(self.sample, total)):  # the walk starts at i + j: a group's
                    # pairs with the others start at different members, spread, not on one node
                    k = (self.rotation * self.sample + t + i + j) % total
                    out.append((gi[k % a], gj[(k % a + k // a) % b]))
        return out

    def node_rounds(self) -> int:
        return round_count(self.n) if self.table is None else len(self.table)

    def node_partner(self, rank: int, node_round: int) -> int | None:
        if self.table is None:
            return partner(rank, node_round, self.n)
        return self.table[node_round].get(rank) if 0 <= node_round < len(self.table) else None

    def node_pairs(self, node_round: int) -> list[tuple[int, int]]:
        if self.at_once:  # the one phase has every pair of every node round
            return (
                sorted((x, p) for x in range(self.n) for p in self.partners(x) if x < p)
                if node_round == 0
                else []
            )
        return self.node_pairs_of(node_round)

    def node_pairs_of(self, node_round: int) -> list[tuple[int, int]]:
        if self.table is None:
            return pairs(self.n, node_round)
        met = self.table[node_round] if 0 <= node_round < len(self.table) else {}
        return sorted((x, y) for x, y in met.items() if x < y)

    def rounds(self) -> list[int]:
        """The round numbers of the run's schedule, in order."""
        if self.at_once:
            return [0]
        nodes = self._node_rounds()
        return [r * self.sub + k for r in nodes for k in range(self.sub)]

    def tests_of(self, rank: int, rnd: int) -> list[tuple[int, int, int]]:
        """What `rank` runs in round `rnd`: (its rail, its partner, the partner's rail) per test."""
        if self.at_once:
            combos = self.rail_combos(0)
            return [(lo, p, hi) if rank < p else (hi, p, lo)
                    for p in (self.partners(rank) if rnd == 0 else ()) for lo, hi in combos]  # fmt: skip
        peer = self.node_partner(rank, rnd // self.sub)
        if peer is None:
            return []
        return [(lo, peer, hi) if rank < peer else (hi, peer, lo)
                for lo, hi in rail_pairs(self.rails, self.cross, rnd % self.sub)]  # fmt: skip

    def nic_pairs(self, rnd: int) -> list[tuple[int, int, int, int]]:
        """The tests of one round as (a, rail of a, b, rail of b), a < b."""
        return [(a, ra, b, rb) for a, b in self.node_pairs(rnd // self.sub)
                for ra, rb in self.rail_combos(rnd % self.sub)]  # fmt: skip

    def has_test(self, rank: int, rnd: int, rail: int, peer: int, peer_rail: int) -> bool:
        """Is (rail, peer, peer_rail) one of `rank`'s tests in round `rnd`? O(1) at once."""
        if not self.at_once:
            return (rail, peer, peer_rail) in self.tests_of(rank, rnd)
        if rnd != 0 or peer == rank or not (0 <= peer < self.n and 0 <= rail < self.rails
                                            and 0 <= peer_rail < self.rails):  # fmt: skip
            return False
        if not self.cross and rail != peer_rail:
            return False
        sets = self.partner_sets
        return sets is None or peer in sets.get(rank, ())

    def retest_base(self) -> int:
        """The round number of the first re-test round: past every round of the schedule."""
        return 1 if self.at_once else self.node_rounds() * self.sub


def pack(todo: list[tuple[int, int]]) -> list[dict[int, int]]:
    """Node pairs into rounds in which nobody is in two tests, first fit (each pair in the
    first round where both are free), as many rounds as it takes. A node's busy rounds are the
    bits of one integer: first fit is the lowest bit clear in both."""
    busy: dict[int, int] = {}
    out: list[dict[int, int]] = []
    for x, y in todo:
        taken = busy.get(x, 0) | busy.get(y, 0)
        k = (~taken & (taken + 1)).bit_length() - 1
        while k >= len(out):
            out.append({})
        out[k][x], out[k][y] = y, x
        busy[x], busy[y] = busy.get(x, 0) | 1 << k, busy.get(y, 0) | 1 << k
    return out
