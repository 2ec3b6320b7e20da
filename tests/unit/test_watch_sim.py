"""`watch status` at 1000 nodes x 8 rails in leaves of 32 (benchmarks/watch_sim.py: the agents'
docs made from injected faults, fed to the real check and blame): every fault named as itself,
nothing else, no healthy fleet blamed, within a second of CPU and a few MB."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import watch_sim  # noqa: E402


def test_at_fleet_size_every_fault_is_named_as_itself_and_nothing_else():
    rows = [watch_sim.run(1000, 8, 32, seed, healthy=seed == 0) for seed in range(6)]
    for r in rows:
        assert (r["false"], r["missed"], r["healthy_blamed"]) == ([], [], False), r
        assert r["cpu_s"] < 5 and r["peak_mb"] < 64, r
    assert sum(r["faults"] for r in rows) >= 5 * len(watch_sim.KINDS) - 5  # the faults were there to find


def test_a_node_down_in_a_leaf_is_that_node_not_31_links_per_rail():
    """Its partners in the plan are its leaf, not the fleet: counted against n - 1 they were not
    most of its partners, and the 31 x 8 pairs with it were blamed as links."""
    rng = watch_sim.random.Random(1)
    docs, expect = watch_sim.docs_of(1000, 8, 32, [("no_agent", 100, 0, 101)], rng)
    names = [watch_sim.name(i) for i in range(1000)]
    groups = tuple(str(i // 32) for i in range(1000))
    for kind, k in (("group", 0), ("sample", 2)):  # sampled: its leaf and a share of 2 pairs a leaf pair
        counts = watch_sim.S.partner_counts(groups, names, kind, k)
        assert counts["n0100"] <= 34, counts["n0100"]  # a formula of 31 + 2 x 31 said 93
        g = watch_sim.S.Gathered(names, 8, partners=counts)
        for node, doc in docs.items():
            g.take(node, doc)
        blame = watch_sim.judged(g, names, {}).to_dict()["data"]["blame"]
        assert expect == {"n0100"}
        assert [b["node"] for b in blame["nodes"]] == ["n0100"], (kind, blame["nodes"])
        assert blame["links"] == [], kind
