"""Step timing where cmtime measures (issue 55): a step that a CM event ends is over when the
event was read from the channel, and rdmacli's own time from that read to its next CM call is
a row apart ("dispatch (rdmacli)"). On the scripted backend, with an observer as slow as a
rendering terminal can be."""

from __future__ import annotations

import time

from fakerdma import FakeBackend

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.settings import Timeouts
from rdmacli.engine.timing import DISPATCH, STEP_ORDER, StepTimer
from rdmacli.protocols.cmatose import CmatoseServer
from rdmacli.rdma.addr import SockAddr

SLOW_S = 0.05  # the observer's time per CM event record


class _EndAtOnce(CmatoseServer):
    def __init__(self):
        super().__init__(0, 0)

    def on_established(self, conn):
        conn.finish()


def steps_of_a_connection_with_a_slow_observer() -> dict[str, dict]:
    def observer(rec) -> None:
        if rec.TYPE == "cm_event":
            time.sleep(SLOW_S)

    flow = ClientFlow(
        dst=SockAddr(2, "10.0.0.1", 7471),
        make_protocol=_EndAtOnce,
        observer=observer,
        timeouts=Timeouts(resolve_ms=500, connect_s=5, idle_s=5),
        backend=FakeBackend(),
    )
    try:
        flow.run()
    finally:
        flow.close()
    return {row.step: row for row in flow.timer.summary()}


def test_a_step_ends_when_its_event_was_read_and_rdmacli_dispatch_is_a_row_apart():
    steps = steps_of_a_connection_with_a_slow_observer()
    # the scripted CM answers at once: what the CM's steps took is far below the observer's time
    for name in ("resolve addr", "resolve route", "cm connect"):
        assert steps[name].max_us < SLOW_S * 1e6 / 2, (name, steps[name])
    # ADDR_RESOLVED -> resolve route and ROUTE_RESOLVED -> create qp: two dispatches, each with
    # the observer's time in it; ESTABLISHED starts no CM call (its data phase has no step)
    assert steps[DISPATCH].count == 2 and steps[DISPATCH].min_us >= SLOW_S * 1e6
    assert list(steps)[-1] == DISPATCH


def test_a_span_measured_elsewhere_is_counted_with_its_first_start_and_last_end():
    timer = StepTimer()
    assert timer.start("create id", 0, t=1.0) == 1.0
    timer.end("create id", 0, t=1.5)
    timer.add(DISPATCH, 2.0, 2.25)
    timer.add(DISPATCH, 1.75, 2.0)
    rows = {r.step: r for r in timer.summary()}
    assert rows[DISPATCH].count == 2 and rows[DISPATCH].total_us == 500_000.0
    assert rows[DISPATCH].min_us == 250_000.0 and DISPATCH not in STEP_ORDER


def test_figures_merged_from_elsewhere_are_those_the_spans_would_have_made():
    """The native runner keeps each step's figures itself (cmflow.c cm_log_step) and hands them
    over once: merged into a timer that has spans of its own, the rows are add()'s, span by span."""
    spans = [("cm connect", 1.0, 1.5), ("cm connect", 1.2, 1.3), ("create id", 0.9, 0.95),
             ("cm connect", 0.8, 2.0)]  # fmt: skip
    one, other = StepTimer(), StepTimer()
    for step, a, b in spans:
        one.add(step, a, b)
    other.add(*spans[0])
    rest = [(a, b) for step, a, b in spans[1:] if step == "cm connect"]
    d = [b - a for a, b in rest]
    other.merge(
        "cm connect", min(a for a, _ in rest), max(b for _, b in rest), len(rest), sum(d), min(d), max(d)
    )
    other.merge("create id", 0.9, 0.95, 1, 0.05, 0.05, 0.05)
    by_step = lambda t: {r.step: r for r in t.summary()}  # noqa: E731
    assert by_step(other) == by_step(one)
    assert by_step(one)["cm connect"].count == 3 and by_step(one)["cm connect"].total_us == 1.2e6
