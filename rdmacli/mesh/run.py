"""A mesh session: `run(request, launch, observer) -> Outcome`, from node list to verdict.

Discovery (when the addresses are not given: every node's agent reports its rails), the plan,
the launch, the run loop, and the verdict. The run loop is the only place decisions are taken
while agents run: the go line once every agent is up, the re-test rounds once every pair is in
(or soon after the schedule's end), the refusal of a cross-rail run on separate networks. The
launcher calls `on_line` for each line and `tick` every half second; `end_at` only answers.
No click and no rich here: the CLI passes an Observer for what people see as it happens.
"""

from __future__ import annotations

import json
import signal as signals
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Callable, ContextManager

from rdmacli.errors import Cause, RdmacliError, Stopped, internal_error
from rdmacli.mesh import midrun, said, verdict
from rdmacli.mesh import plan as P
from rdmacli.mesh.config import Retests
from rdmacli.mesh.contract import RunSpec
from rdmacli.mesh.intake import Intake
from rdmacli.mesh.plan import GO_LEAD_S, RETEST_DECIDE_S, Plan
from rdmacli.mesh.records import AgentRecord, PairRecord
from rdmacli.outcome import Outcome

if TYPE_CHECKING:
    from rdmacli.mesh.inputs import BaselinePair


class Observer:
    """What people see as it happens; every method may be left as is."""

    def started(self, run: MeshRun) -> None:
        """The agents are being launched."""

    def record(self, run: MeshRun, rec) -> None:
        """A record was taken in (a pair's report, an agent up, ...)."""

    def warning(self, words: str) -> None:
        """Something to say now, once (the summary repeats it)."""

    def ended(self, run: MeshRun) -> None:
        """The agents are done (or were stopped); the verdict comes next."""


@dataclass(frozen=True)
class Request:
    """What a person asked: the spec (addresses empty and `discover` set when the agents are
    to find their rails), and what only the coordinator uses."""

    spec: RunSpec
    nodes_spec: str
    launch_s: float | None = None  # None: follows the launch (plan.launch_deadline)
    retest_rounds: int = P.RETEST_ROUNDS
    slow_factor: float = P.SLOW_FACTOR
    slow_fraction: float = P.SLOW_FRACTION
    baseline: tuple[BaselinePair, ...] | None = None
    show_rail: int | None = None  # checked against the rails found
    # --matrix FILE: a context manager's factory yielding a sink (`add(doc)`, `error`) for every
    # pair's document (the CLI's render.matrix.matrix_file), opened only once the verdict is made
    matrix: Callable[[], ContextManager] | None = None


@dataclass
class Launch:
    """How agents start: the launcher and its options, the same for discovery and the run."""

    launcher: str
    agent_cmd: list[str] | None = None
    ssh_options: str | None = None
    srun_args: str | None = None
    connect_timeout: float = 10
    fanout: int | None = None
    topology: str | None = None  # ssh in ClusterShell's tree mode: a topology file's path

    def start(self, nodes_spec: str, spec: RunSpec, on_line, on_exit, timeout: float, end_at=None, tick=None):
        """The launcher, and a call that runs every node's agent on `spec` to the end."""
        from rdmacli.mesh.launch import ClusterShellLauncher, SrunLauncher

        base = self.agent_cmd or (
            [sys.executable, "-m", "rdmacli"] if self.launcher == "exec" else ["rdmacli"]
        )
        names, line = list(spec.names), spec.to_line()
        if self.launcher == "srun":
            srun = SrunLauncher(srun_args=self.srun_args)
            cmd = srun.command(nodes_spec, len(names), [*base, "mesh-agent", "--rank-from-env"])
            return srun, partial(srun.run, cmd, names, line, on_line, on_exit, timeout, end_at, tick)
        lau = ClusterShellLauncher(self.launcher, connect_timeout=self.connect_timeout,
                                   ssh_options=self.ssh_options, fanout=self.fanout,
                                   topology=self.topology)  # fmt: skip
        extra = ["--stop-on-eof"] if self.launcher == "ssh" else []
        if self.topology is not None:  # tree mode: one command for every node (a gateway keeps one
            # worker a channel), each agent its rank from its name (mesh-agent --rank-from-host)
            commands = {nodes_spec: [*base, "mesh-agent", "--rank-from-host", *extra]}
        else:
            commands = {
                name: [*base, "mesh-agent", "--rank", str(rank), *extra] for rank, name in enumerate(names)
            }
        return lau, partial(lau.run, commands, line, on_line, on_exit, timeout, end_at, tick)


class MeshRun:
    """One run's loop state: the intake, round 1's start (moved by the go line), the re-test
    rounds once chosen, a refusal."""

    def __init__(self, plan: Plan, observer: Observer | None = None):
        self.plan = plan
        self.intake = Intake(plan)
        self.observer = observer or Observer()
        self.start_at = plan.spec.start_at  # the go line brings it forward
        self.retest_at: float | None = None  # when the re-test rounds start (None: not decided)
        self.refused: RdmacliError | None = None  # the run cannot go on (cross-rail, no route)
        self.go = None  # the launcher's write to every agent
        self.t_launch = time.monotonic()
        self.agents_up_s: float | None = None
        self.go_sent: float | None = None  # when round 1 was told to start (the go line)
        self.margin_said = False

    def end_at(self) -> float:
        """When the coordinator stops waiting (monotonic): the schedule's end and its re-test
        rounds, plus grace. Agents still running then are stopped and named."""
        if self.refused is not None:  # the launcher stops the agents at its next look
            return time.monotonic() - 1
        plan = self.plan
        end = plan.main_end(self.start_at)
        if plan.retest_rounds:
            if self.retest_at is None:  # not decided yet: the longest they may take
                end += RETEST_DECIDE_S + GO_LEAD_S + plan.retest_rounds * plan.spec.round_s
            else:
                end = self.retest_at + len(self.intake.retests) * plan.spec.round_s
        return time.monotonic() + (end + plan.grace_s() - time.time())

    def on_line(self, node: str | None, line: str, is_err: bool) -> None:
        rec = self.intake.on_line(node, line, is_err)
        if rec is None:
            return
        if isinstance(rec, AgentRecord) and self.go_sent is None and self.up_or_gone():
            self.all_up()
        if isinstance(rec, PairRecord):
            self.check_cross_rail()
            self.decide_retests()
        self.observer.record(self, rec)
        if not self.margin_said and (words := said.margin(self.plan, self.intake.slowest)):
            self.margin_said = True
            self.observer.warning(words)

    def on_exit(self, node: str | None, rc: int | None) -> None:
        self.intake.on_exit(node, rc)
        if self.go_sent is None and self.intake.agents and self.up_or_gone():
            self.all_up()  # no one left to wait for: a node whose agent died costs no launch time

    def up_or_gone(self) -> bool:
        """Every node's agent reported, or ended without a word (its launcher said so)."""
        gone = {self.intake.by_name[n] for n in self.intake.exits if n in self.intake.by_name}
        return len(set(self.intake.agents) | gone) == self.plan.n

    def tick(self) -> None:
        """Every half second, from the launcher's loop: the decisions a clock triggers."""
        self.decide_retests()

    def all_up(self) -> None:
        """Every agent reported (or ended): start round 1 now rather than at the launch deadline."""
        self.agents_up_s = round(time.monotonic() - self.t_launch, 3)
        at = time.time() + GO_LEAD_S
        self.go_sent = at
        if self.go is not None and at < self.start_at:
            self.start_at = at
            self.go(json.dumps({"go": round(at, 3)}, allow_nan=False) + "\n")

    def decide_retests(self) -> None:
        """Once every pair of the schedule is in (or RETEST_DECIDE_S after its end), choose the
        re-test rounds and tell every agent (possibly none)."""
        plan, intake = self.plan, self.intake
        if not plan.retest_rounds or self.retest_at is not None or self.go is None:
            return
        if not (intake.all_in() or time.time() >= plan.main_end(self.start_at) + RETEST_DECIDE_S):
            return
        rounds = midrun.choose_retests(plan, list(intake.pairs.values()), intake.ready_nics())
        intake.set_retests(rounds, plan.schedule.retest_base())
        self.retest_at = max(time.time(), plan.main_end(self.start_at)) + GO_LEAD_S
        self.go(Retests(self.retest_at, tuple(tuple(keys) for keys in rounds)).to_line())

    def check_cross_rail(self) -> None:
        plan, intake = self.plan, self.intake
        if not plan.spec.cross_rail or plan.rails == 1 or self.refused is not None or plan.schedule.at_once:
            return  # the probe's records all come at its phase's end: judged there (verdict)
        if len(intake.first_in) < plan.first_node_round_tests:
            return
        first = set(plan.first_node_round)
        self.refused = midrun.cross_rail_refusal(plan, [p for p in intake.pairs.values() if p.round in first])


def launch_and_collect(run: MeshRun, launch: Launch) -> tuple[bool, bool]:
    """Launch the agents and collect until the schedule's end, plus grace: (cut, abandoned).
    A stop signal propagates after the agents were asked to stop."""
    plan = run.plan
    timeout = plan.duration_s + 15  # a backstop: run.end_at() ends the run first
    lau, runner = launch.start(
        plan.nodes_spec, plan.spec, run.on_line, run.on_exit, timeout, run.end_at, run.tick
    )
    run.go, run.t_launch = lau.go, time.monotonic()
    try:
        runner()
    except BaseException:
        lau.stop()
        raise
    finally:
        run.observer.ended(run)
    return lau.cut, lau.abandoned


class StartupClock:
    """A discovery launch's wait, measured: how long agents took to report, and when to stop
    waiting: `fixed` seconds when a person said so; else for the first report as long as an
    unmeasured launch may take (plan.launch_deadline), then after each report as long again as
    the slowest start-up so far (LAUNCH_S at least), MAX_LAUNCH_S in all. Eight agents starting
    at once on an emulated host take longer than one on hardware, and a thousand over ssh longer
    still; a node that never starts costs only that wait."""

    def __init__(self, intake: Intake, n: int, fixed: float | None):
        self.intake, self.n, self.fixed = intake, n, fixed
        self.t0 = time.monotonic()
        self.slowest: float | None = None  # seconds from launch to the last agent's report
        self.seen = 0

    def on_line(self, node, line, is_err) -> None:
        self.intake.on_line(node, line, is_err)
        if len(self.intake.discovered) > self.seen:
            self.seen = len(self.intake.discovered)
            self.slowest = time.monotonic() - self.t0

    def end_at(self) -> float:
        if self.fixed is not None:
            return self.t0 + self.fixed
        if self.slowest is None:
            return self.t0 + P.launch_deadline(self.n)
        wait = self.slowest + max(P.LAUNCH_S, self.slowest)
        return self.t0 + min(wait, P.MAX_LAUNCH_S)


def launched_failure(launcher: str, names: list[str], ev) -> RdmacliError | None:
    """The launcher's own failure, when no agent said a word and every node's launch ended."""
    from rdmacli.mesh.launched import launcher_failure

    heard = {names[r] for r in (*ev.agents, *ev.violations) if 0 <= r < len(names)}  # any record
    return launcher_failure(launcher, names, heard, ev.exits, ev.stderr)


def discover(request: Request, launch: Launch) -> tuple[list[list[str]], list, float | None]:
    """Every node's rails, found by its own agent (the request's spec, `discover` set: one
    launch before the run): (addresses, device names) by rank, and the slowest agent's start-up
    (seconds). A node that reports none, or a different number from most, or nothing usable,
    is an error that names it."""
    from rdmacli.mesh.nodes import check_rail_counts, check_unique
    from rdmacli.mesh.rails import check_report

    spec, names = request.spec, list(request.spec.names)
    discover = spec.discover
    assert discover is not None  # the discovery launch's spec
    family = discover.family
    backstop = request.launch_s if request.launch_s is not None else P.MAX_LAUNCH_S
    intake = Intake(Plan(spec=spec, nodes_spec=request.nodes_spec, launch_s=backstop))
    clock = StartupClock(intake, spec.n, request.launch_s)
    lau, runner = launch.start(
        request.nodes_spec, spec, clock.on_line, intake.on_exit, backstop, clock.end_at
    )
    try:
        runner()
    except BaseException:
        if lau is not None:
            lau.stop()
        raise
    found, said = {}, {}
    for rank, name in enumerate(names):
        if rank in intake.discovered:
            rails = check_report(intake.discovered[rank].rails, family)
            if isinstance(rails, str):
                said[rank] = f"its agent reported {rails}"
            else:
                found[rank] = rails
        elif rank in intake.said:
            said[rank] = intake.said[rank]
        elif intake.stderr.get(name):
            said[rank] = intake.stderr[name][-1][:200]
    silent = [r for r in range(len(names)) if r not in found]
    if silent and not intake.discovered and not intake.said:
        failed = launched_failure(launch.launcher, names, intake.evidence())
        if failed:
            raise failed
    if silent:
        waited = min(clock.end_at(), time.monotonic()) - clock.t0
        unusable = [r for r in silent if r in intake.discovered]  # reported, in time, what cannot be used
        quiet = [r for r in silent if r not in intake.discovered]
        parts = []
        if unusable:
            why = "; ".join(f"{names[r]}: {said[r]}" for r in unusable[:8])
            parts.append(f"{len(unusable)} node(s) reported rails that cannot be used ({why})")
        if quiet:
            why = "; ".join(f"{names[r]}: {said.get(r, 'no report')}" for r in quiet[:8])
            parts.append(f"{len(quiet)} node(s) did not report their rails after {waited:.1f} s ({why})")
        raise RdmacliError(
            "rail discovery: " + "; ".join(parts),
            hint="check the launcher and rdmacli on those nodes, give a longer --launch-timeout, or "
            "give the addresses with --map",
            cause=Cause.AGENT,
        )
    check_unique(
        names, [[rail.address for rail in found[r]] for r in range(len(names))],
        "rail discovery (one host, or nodes that share their devices, as the lab's do)",
        hint="give each node's addresses with --map, or name each node's devices with --rails "
        "(e.g. 'rxe_{node}')",
    )  # fmt: skip
    what = f"--rails {discover.rails}" if discover.rails else "--rails auto"
    check_rail_counts(
        names, [len(found[r]) for r in range(len(names))],
        hint=f"{what} found these ACTIVE ports with an IPv{family} address; bring the missing ones up, "
        "name the devices with --rails, or give the addresses with --map",
    )  # fmt: skip
    return (
        [[rail.address for rail in found[r]] for r in range(len(names))],
        [[rail.device for rail in found[r]] for r in range(len(names))],
        clock.slowest,
    )


def run(request: Request, launch: Launch, observer: Observer | None = None, *, params: dict | None = None,
        debug: bool = False) -> Outcome:  # fmt: skip
    """The whole session. A stop signal (Stopped, KeyboardInterrupt) stops the agents and the
    verdict still comes, of what came in; a bug is an internal error, with the same summary."""
    params = dict(params or {})
    t0 = time.monotonic()
    elapsed = lambda: round((time.monotonic() - t0) * 1e3, 1)  # noqa: E731
    spec, devices, discovery_s, startup_s = request.spec, None, None, None
    if spec.discover is not None:
        try:
            addresses, devices, startup_s = discover(request, launch)
        except (Stopped, KeyboardInterrupt) as exc:  # the agents were stopped; say where it was
            return Outcome(
                "mesh", params, signal=getattr(exc, "signum", signals.SIGINT), elapsed_ms=elapsed(),
                warnings=[f"stopped during rail discovery, after {(time.monotonic() - t0):.1f} s on "
                          f"{spec.n} node(s): no pair was tested"],
            )  # fmt: skip
        discovery_s = round(time.monotonic() - t0, 3)
        spec = replace(spec, addresses=tuple(map(tuple, addresses)), discover=None)
    if request.show_rail is not None and request.show_rail >= spec.rails:
        raise RdmacliError(
            f"--rail {request.show_rail}: the nodes have {spec.rails} rail(s)", cause=Cause.USAGE
        )
    launch_s = request.launch_s if request.launch_s is not None else P.launch_deadline(spec.n, startup_s)
    params["launch_timeout_s"] = launch_s
    plan = Plan.start(
        spec, nodes_spec=request.nodes_spec, launch_s=launch_s, retest_rounds=request.retest_rounds,
        slow_factor=request.slow_factor, slow_fraction=request.slow_fraction,
        devices=tuple(tuple(r) for r in devices) if devices else None, discovery_s=discovery_s,
    )  # fmt: skip
    params["run_id"] = plan.spec.run_id
    if "round_time_s" in params:  # a probe's phase is as long as it needs (Plan.start)
        params["round_time_s"] = plan.spec.round_s
        params["retest_rounds"] = plan.retest_rounds
    mesh = MeshRun(plan, observer)
    mesh.observer.started(mesh)
    signum = internal = None
    cut = abandoned = False
    try:
        cut, abandoned = launch_and_collect(mesh, launch)
    except (Stopped, KeyboardInterrupt) as exc:
        signum = getattr(exc, "signum", signals.SIGINT)
    except RdmacliError:
        raise
    except Exception as exc:  # a bug: the agents were stopped; report what came in
        if debug:
            raise
        internal = internal_error(exc)
    if mesh.refused is not None:
        return Outcome("mesh", params, error=mesh.refused, signal=signum, elapsed_ms=elapsed())
    try:
        evidence = mesh.intake.evidence(cut=cut, abandoned=abandoned, agents_up_s=mesh.agents_up_s)
        failed = signum is None and launched_failure(launch.launcher, list(plan.spec.names), evidence)
        if failed:
            return Outcome("mesh", params, error=failed, elapsed_ms=elapsed())
        if plan.schedule.at_once and (refused := midrun.probe_cross_rail_refusal(plan, evidence)):
            return Outcome("mesh", params, error=refused, signal=signum, elapsed_ms=elapsed())
        with request.matrix() if request.matrix is not None else nullcontext() as matrix:
            outcome = verdict.judge(plan, evidence, params, baseline=request.baseline, signal=signum,
                                    elapsed_ms=elapsed(), matrix=matrix and matrix.add)  # fmt: skip
        if matrix is not None and matrix.error:
            outcome.warnings.append(matrix.error)
    except Exception as exc:  # a bug after the rounds: the summary still comes, in words
        if debug:
            raise
        outcome = Outcome("mesh", params, error=internal_error(exc), signal=signum)
    if internal is not None:
        outcome.error = internal
    return outcome
