"""The mesh schedule: every pair exactly once, nobody twice in a round, for N = 2..1000."""

from __future__ import annotations

import itertools

import pytest

from rdmacli.mesh.schedule import pairs, partner, round_count, rounds_for

# every N up to 160, then a spread of even and odd sizes up to 1000 (each N costs N^2)
SIZES = [*range(2, 161), 255, 256, 257, 500, 511, 512, 513, 777, 998, 999, 1000]


@pytest.mark.parametrize("n", SIZES)
def test_every_pair_meets_exactly_once_and_nobody_twice_in_a_round(n):
    seen = bytearray(n * n)
    for rnd in range(round_count(n)):
        busy = bytearray(n)
        for x in range(n):
            p = partner(x, rnd, n)
            if p is None:
                assert n % 2 == 1  # a bye only when N is odd
                continue
            assert p != x and partner(p, rnd, n) == x  # a pair, seen the same way from both ends
            assert not busy[x]
            busy[x] = 1
            if x < p:
                assert not seen[x * n + p], (x, p)
                seen[x * n + p] = 1
    assert sum(seen) == n * (n - 1) // 2


def test_round_pairs_are_disjoint_and_the_counts_are_right():
    assert round_count(8) == 7 and round_count(7) == 7
    for n in (2, 3, 8, 9):
        for rnd in range(round_count(n)):
            nodes = list(itertools.chain.from_iterable(pairs(n, rnd)))
            assert len(nodes) == len(set(nodes)) == n - (n % 2)


@pytest.mark.parametrize("n", [2, 5, 8, 16, 64, 1000])
def test_quick_runs_about_log2_rounds_each_a_full_round(n):
    rounds = rounds_for(n, quick=True)
    assert len(rounds) == len(set(rounds)) and all(0 <= r < round_count(n) for r in rounds)
    if n > 4:
        assert len(rounds) <= max(2, (n - 1).bit_length())
        partners = {partner(0, r, n) for r in rounds}
        assert len(partners) == len(rounds)  # distinct partners for every node
    else:
        assert rounds == list(range(round_count(n)))


def test_retest_rounds_are_disjoint_keep_order_and_stop_at_the_limit():
    from rdmacli.mesh.schedule import retest_rounds

    todo = [(0, 1), (0, 2), (0, 3), (2, 3), (4, 5), (0, 4)]
    rounds = retest_rounds(todo, 2)
    assert rounds == [[(0, 1), (2, 3), (4, 5)], [(0, 2)]]  # (0, 3), (0, 4): no round left for node 0
    for rnd in rounds:
        nodes = [x for pair in rnd for x in pair]
        assert len(nodes) == len(set(nodes))
    assert retest_rounds([], 3) == [] and retest_rounds(todo, 0) == []


def test_a_retest_line_is_checked_before_the_agent_uses_it():
    import time

    from rdmacli.mesh.config import retest_plan

    now = time.time()
    plan = retest_plan({"at": now, "rounds": [[[0, 0, 1, 0], [3, 0, 2, 0]], []]}, 4)
    assert plan is not None and (plan.at, plan.rounds) == (now, (((0, 0, 1, 0), (2, 0, 3, 0)), ()))
    # two rails: node 0 in two tests of a round, on different NICs, is fine
    assert retest_plan({"at": now, "rounds": [[[0, 0, 1, 0], [0, 1, 2, 1]]]}, 4, 2) is not None
    for bad in (
        None,
        {"at": "soon", "rounds": []},
        {"at": now - 3600, "rounds": []},  # long past
        {"at": float("nan"), "rounds": []},
        {"at": now, "rounds": [[[0, 0, 1, 0], [1, 0, 2, 0]]]},  # NIC (1, 0) twice in a round
        {"at": now, "rounds": [[[0, 0, 4, 0]]]},  # no rank 4
        {"at": now, "rounds": [[[0, 0, 1, 1]]]},  # no rail 1 with one rail
        {"at": now, "rounds": [[[0, 0, 0, 0]]]},
        {"at": now, "rounds": [[[0, 0, True, 0]]]},
        {"at": now, "rounds": [[[0, 0, 1, 0]]] * 65},  # too many rounds
        {"at": now, "rounds": [[[0, 1]]]},  # the one-rail form of before
    ):
        assert retest_plan(bad, 4) is None, bad


# ---- --pairs: inside groups, and a sample between them ------------------------------------------
def grouped(sizes: list[int]) -> tuple[str, ...]:
    """Group names by rank, ranks interleaved (a map lists nodes in any order)."""
    out = []
    for g, size in enumerate(sizes):
        out += [f"leaf{g}"] * size
    import random

    random.Random(len(out)).shuffle(out)
    return tuple(out)


def node_pairs_of(s) -> list[tuple[int, int]]:
    """Every node pair of a schedule, checking that nobody is in two tests of one round."""
    out = []
    for r in range(s.node_rounds()):
        met = s.node_pairs(r)
        ends = [x for pair in met for x in pair]
        assert len(ends) == len(set(ends)), (r, met)
        for x, y in met:
            assert s.node_partner(x, r) == y and s.node_partner(y, r) == x
        out += met
    return out


@pytest.mark.parametrize("sizes", [[2, 2], [5, 8, 3], [32] * 4, [1, 7, 16, 9]])
def test_group_pairs_are_every_pair_inside_each_group_and_none_between(sizes):
    from rdmacli.mesh.schedule import Schedule

    groups = grouped(sizes)
    s = Schedule(len(groups), pairs="group", groups=groups)
    got = node_pairs_of(s)
    want = {(x, y) for x, y in itertools.combinations(range(len(groups)), 2) if groups[x] == groups[y]}
    assert sorted(got) == sorted(want)  # each once
    assert s.node_rounds() == round_count(max(sizes))  # the groups run at once


@pytest.mark.parametrize("sizes,k", [([4, 4], 3), ([5, 8, 3], 2), ([8] * 6, 5), ([3, 2], 100)])
def test_a_sample_takes_k_pairs_between_every_two_groups_and_rotations_cover_them_all(sizes, k):
    from rdmacli.mesh.schedule import Schedule

    groups = grouped(sizes)
    n = len(groups)
    everyone = {(x, y) for x, y in itertools.combinations(range(n), 2) if groups[x] != groups[y]}
    covered = set()
    runs = max(-(-a * b // k) for a, b in itertools.combinations(sizes, 2))
    for rotation in range(runs):
        s = Schedule(n, pairs="sample", groups=groups, sample=k, rotation=rotation)
        got = node_pairs_of(s)
        between = [(x, y) for x, y in got if groups[x] != groups[y]]
        inside = {(x, y) for x, y in got if groups[x] == groups[y]}
        assert len(inside) == sum(a * (a - 1) // 2 for a in sizes)
        assert (
            len(between)
            == len(set(between))
            == sum(min(k, a * b) for a, b in itertools.combinations(sizes, 2))
        )
        covered |= set(between)
    assert covered == everyone  # ceil(a x b / K) consecutive rotations: every pair between groups


def test_a_fleet_of_1000_nodes_in_32_leaves_is_a_few_dozen_rounds_on_8_rails():
    from rdmacli.mesh.schedule import Schedule

    groups = tuple(f"leaf{x // 32:02d}" for x in range(1000))  # 31 leaves of 32 and one of 8
    s = Schedule(1000, rails=8, pairs="sample", groups=groups, sample=1, rotation=7)
    tests = sum(len(s.nic_pairs(r)) for r in s.rounds())
    inside = 31 * (32 * 31 // 2) + 8 * 7 // 2
    between = 32 * 31 // 2
    assert tests == 8 * (inside + between)  # rail-aligned: 8 NIC pairs a node pair
    assert len(s.rounds()) < 60  # against 999 rounds of the full mesh
    assert s.retest_base() > max(s.rounds())


def test_a_run_with_more_rounds_than_the_token_numbers_is_refused_in_words():
    """4097 nodes x 16 rails with --cross-rail is 65 552 rounds: the connection token numbers a
    run's rounds in 16 bits (packing one past it raised struct.error mid-run). Refused at the
    plan, exit 2, with what to change; 4096 nodes fit."""
    from rdmacli.errors import RdmacliError
    from rdmacli.mesh.contract import RunSpec
    from rdmacli.mesh.plan import Plan

    def spec(n):
        addrs = [[f"10.{k}.{i // 250}.{i % 250}" for k in range(16)] for i in range(n)]
        return RunSpec(run_id="ab" * 8, names=[f"n{i}" for i in range(n)], addresses=addrs, cross_rail=True)

    with pytest.raises(RdmacliError) as got:
        Plan.start(spec(4097), nodes_spec="n[0-4096]", launch_s=30)
    words = got.value.message
    assert got.value.exit_code == 2 and "65552 rounds" in words and "--cross-rail" in words
    assert len(Plan.start(spec(4096), nodes_spec="n[0-4095]", launch_s=30).rounds) <= 0xFFFF
