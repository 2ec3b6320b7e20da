"""The watch's verdict over time (rdmacli/watch/hysteresis.py), on sequences of windows alone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rdmacli.watch.hysteresis import ALERTED, TRANSITIONS, Event, Policy, State, Tracker


def run(pattern: str, policy: Policy | None = None, cause: str = "LOSS") -> tuple[Tracker, list[State]]:
    """Feed a pattern of windows: '.' good, 'x' bad."""
    t = Tracker(policy or Policy())
    return t, [t.feed(cause if c == "x" else None) for c in pattern]


def test_a_dead_link_is_bad_after_raise_after_windows_with_its_cause():
    t, states = run("xxxx", cause="DEAD")
    assert states == [State.SUSPECT, State.SUSPECT, State.BAD, State.BAD]
    assert t.alerted and t.cause == "DEAD" and t.since == 2


def test_a_blip_is_suspect_then_clears_without_an_alert():
    t, states = run("..x......")
    assert not any(s in ALERTED for s in states)
    assert states[2] is State.SUSPECT and states[-1] is State.OK and t.cause is None
    # the suspicion holds while the bad window is among the last raise_window
    assert states[3:7] == [State.SUSPECT] * 4 and states[7] is State.OK


def test_a_lossy_link_with_good_windows_now_and_then_stays_bad_and_is_no_flap():
    """Most windows bad, a good one or two in between: bad after three, never cleared (five good
    in a row clear it), never called flapping (bad again before it cleared is one episode)."""
    t, states = run("xx.x.xx..x.xxx.x..xx.x" * 3)
    first = states.index(State.BAD)
    assert first == 3
    assert all(s in (State.BAD, State.CLEARING) for s in states[first:]), states
    assert t.alerted and len(t.entries) == 2  # its two onsets before it was named; none after (one episode)


def test_a_flapping_link_is_said_once_as_a_flap_then_cleared_when_quiet():
    """Down 5 windows every 30 (the issue's 5 s every 30 s, at 1 s windows): bad, cleared, bad
    again, and at the third time within the flap window flapping, held through the flaps that
    follow; 100 quiet windows clear it."""
    down_up = "xxxxx" + "." * 25
    t, states = run(down_up * 6 + "." * 100)
    assert states[2] is State.BAD and states[12] is State.OK  # first episode: bad, then cleared
    entered = [i for i, (a, b) in enumerate(zip([State.OK, *states], states)) if a is not b and b in ALERTED]
    B, C, F = State.BAD, State.CLEARING, State.FLAPPING
    assert [states[i] for i in entered] == [B, C, B, C, F]  # alerted twice, then one flap
    flapping = states.index(State.FLAPPING)
    assert flapping == 60  # the third episode's first bad window: its onset
    last_bad = 5 * 30 + 4
    assert all(s is State.FLAPPING for s in states[flapping : last_bad + 100])
    assert states[last_bad + 100] is State.OK and states[-1] is State.OK and t.cause is None


def test_an_impossible_policy_is_refused():
    for bad in ({"raise_after": 0}, {"raise_after": 6, "raise_window": 5}, {"flap_count": 1},
                {"clear_after": 0}, {"raise_window": 200}):  # fmt: skip
        with pytest.raises(ValueError):
            Policy(**bad)


policies = st.builds(
    Policy,
    raise_after=st.integers(1, 4),
    raise_window=st.integers(4, 8),
    clear_after=st.integers(1, 6),
    flap_count=st.integers(2, 4),
    flap_window=st.integers(8, 40),
)


@given(policies, st.lists(st.sampled_from(["x", "."]), max_size=200))
def test_any_sequence_moves_only_along_the_table_and_alerts_only_on_enough_evidence(policy, windows):
    t = Tracker(policy)
    bads = 0
    for w in windows:
        before = t.state
        after = t.feed("LOSS" if w == "x" else None)
        bads += w == "x"
        assert after in TRANSITIONS[before].values() or after is before, (before, after)
        if after in ALERTED:
            assert bads >= policy.raise_after
        assert (t.cause is None) == (after is State.OK), (after, t.cause)
    # then quiet long enough for every rule: whatever came before, it ends OK
    for _ in range(policy.flap_window + policy.clear_after + policy.raise_window):
        t.feed(None)
    assert t.state is State.OK and not t.alerted


def test_every_state_has_its_good_and_bad_ways_out():
    for state, ways in TRANSITIONS.items():
        assert Event.GOOD in ways and (Event.BAD in ways or Event.BAD_ENOUGH in ways), state


def test_a_link_down_for_less_than_raise_after_windows_again_and_again_is_a_flap():
    """The lab's flap at 10 s windows (down 5 s every 30 s): one bad window in three. Under a
    count of episodes that reached bad it stayed suspect for ever, never named; counted from
    its onsets it is a flap at the third, and held."""
    t, states = run("x.." * 10, Policy(raise_after=2, raise_window=3, clear_after=2), cause="DEAD")
    assert states[:6] == [State.SUSPECT] * 6
    assert states[6] is State.FLAPPING and all(s is State.FLAPPING for s in states[6:])
    assert t.cause == "DEAD"


def test_a_certain_window_names_at_once_and_a_port_that_keeps_dropping_is_a_flap():
    """A port's own link going down is a fact, not a statistic: named in its first window (not
    after raise_after), cleared after clear_after good ones; at its flap_count-th drop within
    flap_window it is flapping, said once and held."""
    p = Policy(raise_after=2, raise_window=3, clear_after=2, flap_window=12)
    t = Tracker(p)
    states = [t.feed("DOWN", certain=True)]
    states += [t.feed(None) for _ in range(2)]
    assert states == [State.BAD, State.CLEARING, State.OK]
    t.feed("DOWN", certain=True)
    assert t.state is State.BAD and t.cause == "DOWN"  # the second drop: named again at once
    t.feed(None), t.feed(None)
    assert t.feed("DOWN", certain=True) is State.FLAPPING  # the third: a flap
    assert [t.feed(None) for _ in range(11)] == [State.FLAPPING] * 11 and t.feed(None) is State.OK
    # the same drop seen as one lost window each time (no port fact) is only suspect at first
    assert Tracker(p).feed("DEAD") is State.SUSPECT


def test_each_drop_of_a_port_is_an_onset_even_when_its_outage_spans_two_windows():
    """The 5 s outage every 30 s across a window boundary: the drop's window is certain (the
    counter moved), the next lost probes (bad), one good window, the next drop. It never clears
    in between, and is still a flap at its third drop, not one long episode."""
    t = Tracker(Policy(raise_after=2, raise_window=3, clear_after=2, flap_window=9))
    states = []
    for _ in range(3):
        states += [t.feed("DOWN", certain=True), t.feed("DEAD"), t.feed(None)]
    assert states[:6] == [State.BAD, State.BAD, State.CLEARING] * 2 and states[6] is State.FLAPPING
