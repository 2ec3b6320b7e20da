"""What the mesh decides while its run goes on, as functions of data: which pairs to test again,
and when --cross-rail is refused (the rails are separate networks). The run loop (mesh/run.py)
calls these between rounds; verdict.judge gives the verdict at the run's end.
"""

from __future__ import annotations

from dataclasses import replace

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import schedule
from rdmacli.mesh.blame import LOCAL, blame, judge_slow, late
from rdmacli.mesh.findings import PairError
from rdmacli.mesh.plan import Plan
from rdmacli.mesh.report import Pair
from rdmacli.mesh.verdict import Evidence, fill_ends

UNROUTED = ("ADDR", "ROUTE", "UNR")


def choose_retests(plan: Plan, firsts: list[Pair], ready: set[tuple[int, int]]) -> list[list[tuple]]:
    """The re-test rounds: the failed, slow and lossy pairs whose NICs both ran, in up to
    plan.retest_rounds rounds (no NIC in two tests of a round), keys (a, ra, b, rb). A node
    that said the fault is its own (its port down, held, its agent late) has said what a
    re-test would say again; a NIC that fails with most partners is named anyway, so its pairs
    come last and the rounds go first to what could be a link, or a fault that came and went.
    A pair that passed while a loss counter moved is tested again like a failed one: one
    retransmit in a pair's slot (a host too busy to answer before the QP's timer, as the lab's
    loaded CI runs saw) must not blame a link; a lossy link is lossy again (a link is blamed
    only on what stayed bad)."""
    firsts = [replace(p) for p in firsts]  # judged here, the intake's own left as they came
    judge_slow(firsts, plan.slow_factor, plan.slow_fraction)

    def due(p: Pair) -> bool:  # failed for what a re-test may say otherwise, slow or lossy
        return p.result == "fail" and (p.cause not in LOCAL or late(p)) or bool(p.slow) or p.lossy

    again = [p for p in firsts if due(p) and {(p.a, p.ra), (p.b, p.rb)} <= ready]
    first = blame(plan.n, firsts, plan.spec.names, plan.rails)
    blamed = {(b.rank, k) for b in first.nodes for k in range(plan.rails)}
    blamed |= {(b.rank, b.rail or 0) for b in first.nics}
    again.sort(key=lambda p: (bool({(p.a, p.ra), (p.b, p.rb)} & blamed), p.round, p.a, p.ra))
    rounds = schedule.retest_rounds([((p.a, p.ra), (p.b, p.rb)) for p in again], plan.retest_rounds)
    return [[(a, ra, b, rb) for (a, ra), (b, rb) in tests] for tests in rounds]


def probe_cross_rail_refusal(plan: Plan, ev: Evidence) -> RdmacliError | None:
    """cross_rail_refusal for `--test probe`, whose pairs all come at its phase's end: its
    healthy pairs (columns) are passes too, a cross-rail one among them enough to go on."""
    if not plan.spec.cross_rail or plan.rails == 1:
        return None
    rails, healthy = plan.rails, ev.healthy
    aligned = False
    for _, x, y, _, _ in healthy.rows() if healthy is not None else ():
        if x % rails != y % rails:
            return None
        aligned = True
    return cross_rail_refusal(plan, fill_ends(plan, ev, ev.pairs), passed_aligned=aligned)


def cross_rail_refusal(
    plan: Plan, first_round: list[Pair], *, passed_aligned: bool = False
) -> RdmacliError | None:
    """--cross-rail on rails that are separate networks: the first node round's pairs all in,
    every cross-rail one failed to resolve or reach its partner while a rail-aligned one
    passed. Then the run stops there and is refused in words, rather than go on to blame
    every cross-rail pair as a bad link."""
    cross = [p for p in first_round if p.ra != p.rb]
    if not (cross and all(p.result == "fail" and p.cause in UNROUTED for p in cross)):
        return None
    if not (passed_aligned or any(p.result == "pass" for p in first_round if p.ra == p.rb)):
        return None
    p, names = cross[0], plan.spec.names
    return RdmacliError(
        f"--cross-rail: every cross-rail pair of the first round failed to reach its partner "
        f"({p.cause}, e.g. {names[p.a]}:{p.ra} -> {names[p.b]}:{p.rb}: "
        f"{(_words(p.error()) or '')[:160]}) while rail-aligned pairs passed: the "
        "rails are separate networks here; the run was stopped",
        hint="cross-rail tests need routing between the rails' subnets (through the spine, "
        "each rail's source address routed out of its own NIC); run rail-aligned (without "
        "--cross-rail) on this fabric",
        cause=Cause.USAGE,
    )


def _words(e: PairError | None) -> str | None:
    return e.message if e is not None else None
