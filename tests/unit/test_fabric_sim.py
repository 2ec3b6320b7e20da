"""The fabric simulator in `make test` (benchmarks/fabric_sim.py: agents' records made from
injected faults with their ground truth, through the real intake, verdict and blame): at a size
the unit suite affords, every scenario of a fixed set meets the goals `make scale-bench` holds
at fleet size, so a change of blame or of the probe that moves them fails here, not a session
later. `make scale-bench` runs the fleet sizes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rdmacli.mesh.blame import LIARS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fabric_sim as F  # noqa: E402


@pytest.mark.parametrize("test", ["ping", "probe"])
def test_the_simulator_meets_its_goals_at_sixteen_nodes_by_two_rails(test):
    row = F.summarize(F.run_size(16, 2, "all", 40, seed0=1, test=test))
    assert F.missed_goals(row, healthy=False) == [], row["wrong"]
    assert row["scenarios"] == 40


def test_its_liar_is_named_and_nobody_else_for_it():
    """The simulator's liar forges the round trips it carries (far faster than any wire, its
    record consistent): named by the verdict (inconsistent reports or violations), at its level,
    wherever it told more than f lies (it carries figures as the higher rank of a pair: rank 5
    and up has three partners below it that no other fault of the scenario took)."""
    seen = 0
    for seed in range(120):
        s = F.random_scenario(16, 2, "all", seed)
        liar = next((f for f in s.faults if f.kind == "liar"), None)
        if liar is None or liar.node < 5:
            continue
        doc, _ = F.coordinate(s)
        assert ("liars", liar.node) in F.named(doc), (seed, s.faults, doc["warnings"])
        seen += 1
    assert seen >= 5


def test_up_to_f_colluding_liars_blame_no_innocent_and_real_faults_are_still_found():
    """Issue 53: 1, 2 and 3 agents accusing one innocent node (every NIC, one, one under
    --cross-rail), each lie (a deadline, their own counters moved or probes lost, refusing it),
    beside one real fault, through the real intake and blame. Within f (blame.LIARS) no innocent
    is named and every real fault is found; one liar more than f can name the victim (the rule's
    edge is where the docs say it is)."""
    import liar_sim as L

    rows = L.run(16, 2, "all")
    table = {row["liars"]: row for row in L.summarize("16x2:all", rows)}
    for liars in range(1, LIARS + 1):
        assert L.missed_goals(table[liars]) == [], table[liars]["wrong"]
    past = table[LIARS + 1]
    assert not past["within_f"] and past["innocents_blamed"] > 0, past
    assert {r["lie"] for r in rows if r["innocents"]} <= {"counters", "refuse"}  # a deadline is disputed


def test_the_cabal_tolerated_grows_with_a_nics_partners():
    """Issue 70: at 32 nodes a NIC has 31 partners, and blame asks for more than an eighth of
    them besides f: 3 liars (one more than f) name no innocent, 4 (one past the share) can."""
    import liar_sim as L

    assert L.tolerated(15) == LIARS and L.tolerated(31) == 3 and L.tolerated(999) == 124
    within, past = L.summarize("32x2:all@t,t+1", L.run(32, 2, "all", 1, ("t", "t+1")))
    assert (within["liars"], within["tolerated"], within["within_f"]) == (3, 3, True), within
    assert L.missed_goals(within) == [], within["wrong"]
    assert (past["liars"], past["within_f"]) == (4, False) and past["innocents_blamed"] > 0, past
