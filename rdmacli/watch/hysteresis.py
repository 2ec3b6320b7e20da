"""A verdict over time for one subject (a pair of NICs, or a NIC), with hysteresis.

`rdmacli watch` probes all the time, so its question is not "did this pair pass?" but "has it
been bad long enough to say so, and good long enough to stop saying it?". Evidence comes in
windows (a window: one judgement of a few probes' worth: a cause such as LOSS, DEAD or SLOW, or
good). A bad window makes a subject *suspect* (shown, not alerted); `raise_after` bad windows
among the last `raise_window` make it *bad* (named and alerted, with the cause of its last bad
window); `clear_after` good windows in a row clear it (a lossy link has good windows now and
then: one must not clear it). A subject that becomes bad `flap_count` times within
`flap_window` windows is *flapping*: said once, held until it has been quiet (no bad window) for
`flap_window` windows, instead of an alert per flap (ByteRobust's "two network alerts in five
minutes" is the same idea). Going back to bad before it cleared is the same episode, not a flap.
Becoming bad counts from each onset (a bad window after good ones, from OK or while suspect),
so a link down for less than raise_after windows each time, again and again (5 s every 30 s at
10 s windows: one bad window in three, suspect for ever under a count of episodes that reached
bad), is a flap at its flap_count-th onset, once raise_after bad windows were seen in all.

The transitions are a table (h11's `_state.py` shape: the next state is the value); the counts
that decide which event a window is live in `Tracker`, which reads no clock: windows are
counted, and what a window is in seconds is the caller's. Nothing here knows of probes, sockets
or Prometheus.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import Enum


class State(str, Enum):
    OK = "ok"
    SUSPECT = "suspect"  # bad windows, not yet enough evidence: shown, not alerted
    BAD = "bad"  # raise_after bad windows of the last raise_window: named, alerted
    CLEARING = "clearing"  # bad, then good windows, not yet clear_after of them in a row
    FLAPPING = "flapping"  # bad flap_count times within flap_window windows


class Event(str, Enum):
    GOOD = "good"
    GOOD_ENOUGH = "good_enough"  # enough good windows to clear what was suspect or bad
    BAD = "bad"
    BAD_ENOUGH = "bad_enough"  # enough bad windows to be bad (or bad again, before it cleared)
    FLAPS = "flaps"  # becoming bad for the flap_count-th time within flap_window windows
    QUIET = "quiet"  # flapping, and no bad window for flap_window windows


S, E = State, Event
TRANSITIONS: dict[State, dict[Event, State]] = {
    S.OK: {E.GOOD: S.OK, E.BAD: S.SUSPECT, E.BAD_ENOUGH: S.BAD, E.FLAPS: S.FLAPPING},
    S.SUSPECT: {E.GOOD: S.SUSPECT, E.GOOD_ENOUGH: S.OK, E.BAD: S.SUSPECT, E.BAD_ENOUGH: S.BAD,
                E.FLAPS: S.FLAPPING},
    S.BAD: {E.GOOD: S.CLEARING, E.GOOD_ENOUGH: S.OK, E.BAD_ENOUGH: S.BAD, E.FLAPS: S.FLAPPING},
    S.CLEARING: {E.GOOD: S.CLEARING, E.GOOD_ENOUGH: S.OK, E.BAD_ENOUGH: S.BAD, E.FLAPS: S.FLAPPING},
    S.FLAPPING: {E.GOOD: S.FLAPPING, E.BAD: S.FLAPPING, E.QUIET: S.OK},
}  # fmt: skip
ALERTED = frozenset((State.BAD, State.CLEARING, State.FLAPPING))  # named in reports and /metrics
NAMED = frozenset(s.value for s in ALERTED)  # the same, as the state file says them


def _knob(default: int, least: int, help: str):
    """A Policy field that is also `watch run`'s option of its name (cli/watch.policy_options)."""
    return field(default=default, metadata={"least": least, "help": help})


@dataclass(frozen=True)
class Policy:
    """How much evidence each step takes, in windows."""

    # each field is also `watch run`'s option of its name (--raise-after ...): its least value
    # and its words, said here once
    raise_after: int = _knob(3, 1, "Bad windows (of --raise-window) before a pair or NIC is named.")
    raise_window: int = _knob(5, 1, "The last windows in which --raise-after bad ones name a pair or NIC.")
    clear_after: int = _knob(5, 1, "Good windows in a row before a named pair or NIC is cleared.")
    flap_count: int = _knob(
        3, 2, "Onsets (bad after good) within --flap-window that make a pair or NIC flapping."
    )
    flap_window: int = _knob(
        100, 1, "Windows a flap is counted in, and quiet windows before a flapping one is cleared."
    )

    def __post_init__(self):
        ok = 1 <= self.raise_after <= self.raise_window <= self.flap_window and self.clear_after >= 1
        if not (ok and self.flap_count >= 2):
            raise ValueError(f"an impossible policy: {self}")


@dataclass
class Tracker:
    """One subject's verdict: feed it each window's judgement (None: good, else the cause code
    it was bad for); it keeps the state, since when, and the cause it is named for."""

    policy: Policy = field(default_factory=Policy)
    state: State = State.OK
    cause: str | None = None  # the last bad window's cause, while not OK
    window: int = 0  # windows fed so far
    since: int = 0  # the window the state was entered in
    good_run: int = 0  # good windows in a row
    last_bad: int | None = None  # the last bad window's number
    recent: deque = field(init=False)  # the last raise_window judgements (True: bad)
    entries: deque = field(default_factory=deque)  # onsets (bad after good), within flap_window
    bads: deque = field(default_factory=deque)  # bad windows, within flap_window

    def __post_init__(self):
        self.recent = deque(maxlen=self.policy.raise_window)

    def event(self, bad: bool, certain: bool = False) -> Event:
        """What this window is, given the evidence so far (the window is already in `recent`)."""
        p, n, state = self.policy, self.window, self.state
        if not bad:
            if state is State.FLAPPING:
                quiet = self.last_bad is None or n - self.last_bad >= p.flap_window
                return Event.QUIET if quiet else Event.GOOD
            if state is State.SUSPECT:
                return Event.GOOD if any(self.recent) else Event.GOOD_ENOUGH
            if state in (State.BAD, State.CLEARING):
                return Event.GOOD_ENOUGH if self.good_run >= p.clear_after else Event.GOOD
            return Event.GOOD
        if state is State.FLAPPING:
            return Event.BAD
        if state in (State.BAD, State.CLEARING) and not certain:
            return Event.BAD_ENOUGH  # the same episode: bad again before it cleared
        for q in (self.entries, self.bads):
            while q and q[0] <= n - p.flap_window:
                q.popleft()
        self.bads.append(n)
        if certain or self.last_bad != n - 1:  # an onset: after a good window, or a new drop
            self.entries.append(n)
        if len(self.entries) >= p.flap_count and (certain or len(self.bads) >= p.raise_after):
            return Event.FLAPS
        return Event.BAD_ENOUGH if certain or sum(self.recent) >= p.raise_after else Event.BAD

    def feed(self, bad: str | None, certain: bool = False) -> State:
        """One window's judgement in (certain: a fact such as the port's link going down, named
        at once); the state after it."""
        self.recent.append(bad is not None)
        self.good_run = 0 if bad is not None else self.good_run + 1
        nxt = TRANSITIONS[self.state][self.event(bad is not None, certain and bad is not None)]
        if bad is not None:
            self.last_bad, self.cause = self.window, bad
        if nxt is not self.state:
            self.state, self.since = nxt, self.window
            if nxt is State.OK:
                self.cause = None
        self.window += 1
        return self.state

    @property
    def alerted(self) -> bool:
        return self.state in ALERTED
