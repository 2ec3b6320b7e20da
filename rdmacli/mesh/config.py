"""An agent's view of a run (`AgentConfig`: the spec, its rank, the coordinator's later lines)
and running its tests at once: what the agent, its pairs (pair.py) and its probe phase
(probe.py) share, below all three so that none of them imports another's caller."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass

from rdmacli.engine.stops import Stops
from rdmacli.errors import Stopped
from rdmacli.mesh.contract import OfSpec, RunSpec, SpecError
from rdmacli.mesh.shape import take, wire

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
        self.retest: Retests | None = None  # the coordinator's re-test rounds, by take()

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
            msg = _Line(**take(_Line, json.loads(line), _Refused))
        except (ValueError, RecursionError):  # not JSON, or not an object
            return None
        if msg.go is not None:
            return "go" if self.go(msg.go) else None
        if msg.retest is not None and self.spec.retests and self.retest is None:
            plan = retest_plan(msg.retest, self.n, self.rails)
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


class _Refused(ValueError):
    pass


@dataclass(frozen=True)
class _Line:
    """A line of the coordinator's, to its agents' stdin (`go` or `retest`)."""

    go: object = wire(default=None)  # the time round 1 starts (AgentConfig.go checks it)
    retest: object = wire(default=None)  # Retests.to_json (retest_plan checks it)


@dataclass(frozen=True)
class Retests:
    """The re-test rounds the coordinator chose: from `at`, a slot each, tests (a, rail of a,
    b, rail of b) with a < b."""

    at: float
    rounds: tuple[tuple[tuple[int, int, int, int], ...], ...]

    def to_line(self) -> str:
        """As the coordinator writes it to every agent's stdin."""
        msg = {"at": round(self.at, 3), "rounds": [[list(t) for t in tests] for tests in self.rounds]}
        return json.dumps({"retest": msg}, allow_nan=False) + "\n"


@dataclass(frozen=True)
class _Said:
    at: object = wire(default=None)
    rounds: object = wire(default=None)


def retest_plan(value, n: int, rails: int = 1) -> Retests | None:
    """The coordinator's re-test rounds, checked (its line reaches us through the launcher, but
    is input all the same): a start time that is not past, and rounds of tests [a, rail of a,
    b, rail of b] between two ranks of this run, no NIC in two tests of a round. None if
    anything is off (the agent then just ends)."""
    try:
        said = _Said(**take(_Said, value, _Refused))
        at, rounds = float(said.at), said.rounds  # type: ignore[arg-type]  # checked here
    except (TypeError, ValueError):
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
        out.append(tuple(tests))
    return Retests(at, tuple(out))


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
