"""The agent's CPU budget held by its probes a partner (watch/budget.Governor), on numbers alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rdmacli.watch.budget import CPU_BUDGET, MIN_COUNT, Governor


def test_over_budget_the_probes_go_down_in_proportion_and_come_back_when_there_is_room():
    g = Governor(ceiling=20)
    count = 20
    for used in (0.2, 0.04, 0.04):  # the first window's start-up, then 4 % of a core: a third over
        count = g.next_count(count, used)
    assert count == 15  # 20 x 3 / 4
    for _ in range(3):
        count = g.next_count(count, 0.03)  # at budget: held
    assert count == 15
    for _ in range(3):
        count = g.next_count(count, 0.01)  # room again: a step up
    assert count == 18
    for _ in range(9):
        count = g.next_count(count, 0.01)
    assert count == 20  # never above what was configured


def test_a_fixed_cost_over_budget_stops_at_the_floor():
    """What the probes cannot help (each window's QPs, SIDR): down to MIN_COUNT, no lower."""
    g, count = Governor(ceiling=20), 20
    for _ in range(40):
        count = g.next_count(count, 0.5)
    assert count == MIN_COUNT


@given(st.integers(MIN_COUNT, 1000), st.lists(st.floats(0, 2), max_size=60))
def test_the_count_stays_between_the_floor_and_the_ceiling(ceiling, uses):
    g, count = Governor(ceiling=ceiling), ceiling
    for used in uses:
        count = g.next_count(count, used)
        assert MIN_COUNT <= count <= ceiling
    assert g.budget == CPU_BUDGET
