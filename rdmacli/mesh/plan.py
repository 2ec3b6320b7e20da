"""A mesh run as the coordinator holds it: the spec every agent gets, and what only it needs.

Frozen: once the spec is sent nothing here changes. What moves during a run (round 1's start,
brought forward by the go line; the re-test rounds) is the run loop's state (mesh/run.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import cached_property

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import schedule
from rdmacli.mesh.config import GAP
from rdmacli.mesh.contract import OfSpec, RunSpec
from rdmacli.probe.timing import phase_s
from rdmacli.probe.token import MAX_ROUND

# the coordinator's own defaults (the agents' are the spec's, contract.SPEC_FIELDS)
LAUNCH_S = 20.0  # for the launcher to start every agent, once their start-up was measured (at least)
# --launch-timeout's default follows the launch (launch_deadline, run.StartupClock): with nothing
# measured, UNMEASURED_S and PER_NODE_S a node (ssh's connections at fleet size; eight agents
# starting at once on the emulated lab take over 20 s); a discovery launch then waits, after each
# report, as long again as the slowest start-up so far (LAUNCH_S at least), and the run's deadline
# is STARTUP_FACTOR x discovery's slowest agent; never past MAX_LAUNCH_S
UNMEASURED_S = 60.0
PER_NODE_S = 0.02
STARTUP_FACTOR = 2.0
MAX_LAUNCH_S = 600.0
RETEST_ROUNDS = 2
SLOW_FACTOR = 2.0
SLOW_FRACTION = 0.9
END_GRACE_S = 10.0  # at least, after the last slot (a round, if longer)
RETEST_DECIDE_S = 3.0  # after the schedule's end, re-tests are decided with the records in
GO_LEAD_S = 2.0  # between the go line and round 1 (or the re-tests): for it to reach every agent


def launch_deadline(n: int, slowest_startup_s: float | None = None) -> float:
    """The seconds a launch of n agents may take before round 1 (--launch-timeout's default):
    twice the slowest start-up measured (discovery's), or, with nothing measured, UNMEASURED_S
    and a little a node. Round 1 starts as soon as every agent is ready (the go line): a long
    deadline costs only when a node never starts."""
    if slowest_startup_s is not None:
        wanted = max(LAUNCH_S, STARTUP_FACTOR * slowest_startup_s)
    else:
        wanted = UNMEASURED_S + PER_NODE_S * n
    return round(min(wanted, MAX_LAUNCH_S), 1)


@dataclass(frozen=True)
class Plan(OfSpec):
    spec: RunSpec
    nodes_spec: str  # the node set as given (srun's --nodelist)
    launch_s: float  # for the launcher to start every agent before round 1 at the latest
    retest_rounds: int = 0  # at most, after the schedule, for the pairs that failed (0: none)
    slow_factor: float = SLOW_FACTOR
    slow_fraction: float = SLOW_FRACTION
    devices: tuple | None = None  # by rank and rail, where discovery named them
    discovery_s: float | None = None  # the rails' discovery launch, before this plan's
    rounds: tuple[int, ...] = field(default=())

    @classmethod
    def start(cls, spec: RunSpec, *, launch_s: float, retest_rounds: int = 0, **kw) -> Plan:
        """A plan whose schedule starts launch_s from now (the go line may bring it forward);
        `kw`: the plan's other fields."""
        start_at = time.time() + launch_s
        sched = schedule.Schedule.of(spec)
        if sched.at_once:  # one probe phase, as long as its busiest NIC needs; nothing to re-test
            partners = max(sched.most_partners(), 1) * (spec.rails if spec.cross_rail else 1)
            need = phase_s(partners, spec.count) / (1 - GAP)
            spec = replace(spec, round_s=round(max(spec.round_s, need), 1))
            retest_rounds = 0
        spec = replace(spec, start_at=round(start_at, 3), retests=retest_rounds > 0)
        sched = schedule.Schedule.of(spec)
        rounds = sched.rounds()
        last = sched.retest_base() + retest_rounds
        if last > MAX_ROUND:  # the connection token numbers rounds in 16 bits
            raise RdmacliError(
                f"a run of {spec.n} nodes x {spec.rails} rails"
                + (" with --cross-rail" if spec.cross_rail else "")
                + f" has {last} rounds; a run numbers {MAX_ROUND} at most",
                hint="test fewer nodes a run, rail-aligned (without --cross-rail), or with --quick; "
                "or use --test probe (one phase, every pair at once)",
                cause=Cause.USAGE,
            )
        return cls(spec=spec, rounds=tuple(rounds), launch_s=launch_s, retest_rounds=retest_rounds, **kw)

    @cached_property
    def schedule(self) -> schedule.Schedule:
        return schedule.Schedule.of(self.spec)

    @property
    def first_node_round(self) -> tuple[int, ...]:
        """The rounds of the first node round (cross-rail: its R sub-rounds)."""
        return self.rounds[: schedule.subrounds(self.rails, True)]

    @cached_property
    def first_node_round_tests(self) -> int:
        return sum(len(self.schedule.nic_pairs(r)) for r in self.first_node_round)

    @property
    def duration_s(self) -> float:
        return self.launch_s + (len(self.rounds) + self.retest_rounds) * self.spec.round_s + RETEST_DECIDE_S

    def main_end(self, start_at: float | None = None) -> float:
        """When the schedule's last slot ends (wall clock), round 1 starting at start_at."""
        return (self.spec.start_at if start_at is None else start_at) + len(self.rounds) * self.spec.round_s

    def grace_s(self) -> float:
        """After the schedule's last slot, for the agents' last records and exits."""
        return max(END_GRACE_S, self.spec.round_s)
