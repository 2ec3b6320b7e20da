"""An agent's view of a run (`AgentConfig`: the spec, its rank, the coordinator's later lines)
and running its tests at once: what the agent, its pairs (pair.py) and its probe phase
(probe.py) share, below all three so that none of them imports another's caller."""

from __future__ import annotations

import json
import math
import time

from rdmacli.engine.stops import Stops
from rdmacli.errors import Stopped
from rdmacli.mesh.contract import OfSpec, RunSpec, SpecError

GAP = 0.15  # of a slot, kept free at its end for teardown before the next round
# a start this far ahead of this node's clock is no coordinator's (--launch-timeout is an hour
# at most): its clock and ours disagree, or the spec was made by hand; waited for, it would
# hold the agent until it is killed
MAX_START_AHEAD_S = 7200.0


class AgentConfig(OfSpec):
    """This node's view of a run: the spec (immutable, as the coordinator sent it), its rank,
    and what the coordinator's later lines change: round 1's start (its go line, only ever
    earlier) and the re-test rounds."""

    def __init__(self, spec: RunSpec, rank: int):
        if not 0 <= rank < spec.n:
            raise SpecError(f"rank {rank} is not one of the spec's {spec.n} nodes")
        ahead = spec.start_at - time.time()
        if ahead > MAX_START_AHEAD_S:
            raise SpecError(
                f"its start is {ahead:.0f} s after this node's clock (more than {MAX_START_AHEAD_S:.0f} s): "
                "this node's clock and the coordinator's disagree (NTP?), or the spec is not a run's"
            )
        self.spec, self.rank = spec, rank
        self.start_at = spec.start_at  # moved earlier by the coordinator's go line
        self.retest: dict | None = None  # {"at": T, "rounds": [[(a, ra, b, rb), ...], ...]}, by take()

    def address(self, rank: int, rail: int) -> str:
        return self.spec.addresses[rank][rail]

    def port_of(self, rail: int) -> int:
        """The listener port of a rail: each rail its own (a node listens on all at once)."""
        return self.spec.port + rail

    @property
    def probe_key(self) -> bytes:
        """The probe's MAC key: the run's (the spec's), else the public one."""
        from rdmacli.probe.siphash import PUBLIC_KEY

        return bytes.fromhex(self.spec.probe_key) if self.spec.probe_key else PUBLIC_KEY

    def nic(self, rank: int, rail: int) -> int:
        """A NIC's number in the tokens: rank * rails + rail (the rank itself with one rail)."""
        return rank * self.rails + rail

    def record(self, kind, **fields):
        """A record of this agent's (contract's types), run and rank filled in."""
        return kind(run=self.spec.run_id, rank=self.rank, **fields)

    def take(self, line: str) -> str | None:
        """A line from the coordinator: "go" or "retest" if it was one and was taken."""
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if isinstance(msg, dict) and "go" in msg:
            return "go" if self.go(msg["go"]) else None
        if isinstance(msg, dict) and "retest" in msg and self.spec.retests and self.retest is None:
            plan = retest_plan(msg["retest"], self.n, self.rails)
            if plan is not None:
                self.retest = plan  # one assignment: the rounds' thread sees all of it or none
                return "retest"
        return None

    def go(self, value) -> bool:
        """The coordinator's `{"go": T}` (every agent is up): round 1 starts at T instead of the
        --start-at fallback. Only ever earlier, and never in the past."""
        try:
            t = float(value)
        except (ValueError, TypeError):
            return False
        if time.time() - 1 <= t < self.start_at:
            self.start_at = t
            return True
        return False


MAX_RETEST_ROUNDS = 64


def retest_plan(value, n: int, rails: int = 1) -> dict | None:
    """The coordinator's re-test rounds, checked (its line reaches us through the launcher, but
    is input all the same): a start time that is not past, and rounds of tests [a, rail of a,
    b, rail of b] between two ranks of this run, no NIC in two tests of a round. None if
    anything is off (the agent then just ends)."""
    try:
        at, rounds = float(value["at"]), value["rounds"]
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(at) and at >= time.time() - 60) or not isinstance(rounds, list):
        return None
    if len(rounds) > MAX_RETEST_ROUNDS:
        return None
    out = []
    for rnd in rounds:
        if not isinstance(rnd, list) or len(rnd) > n * rails:
            return None
        seen: set[tuple[int, int]] = set()
        tests = []
        for t in rnd:
            if not (isinstance(t, list) and len(t) == 4 and _rank(t[0], n) and _rank(t[2], n)
                    and _rank(t[1], rails) and _rank(t[3], rails)):  # fmt: skip
                return None
            a, ra, b, rb = t
            if a == b or (a, ra) in seen or (b, rb) in seen:
                return None
            seen.update(((a, ra), (b, rb)))
            tests.append((a, ra, b, rb) if a < b else (b, rb, a, ra))
        out.append(tests)
    return {"at": at, "rounds": out}


def _rank(x, n: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n


def at_once(fn, items: list, stops: Stops | None) -> list:
    """fn over items, each in a thread of its own (inline when there is one), results in order.
    A stop signal stops every running test (Stops holds them all); the first exception of a
    thread (Stopped) is raised here once every thread has ended."""
    if len(items) == 1:
        return [fn(items[0])]
    import threading

    results: list = [None] * len(items)
    errors: list = []

    def work(i, item):
        try:
            results[i] = fn(item)
        except BaseException as exc:  # raised in the caller's thread, below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, it), daemon=True) for i, it in enumerate(items)]
    for t in threads:
        t.start()
    stopped = None
    for t in threads:
        while t.is_alive():
            try:
                t.join(0.2)
            except Stopped as exc:  # a signal between two flows: the threads' flows stop at start
                stopped = stopped or exc
                if stops is not None:
                    stops.stop()
    if stopped is not None:
        raise stopped
    if errors:
        raise errors[0]
    return results
