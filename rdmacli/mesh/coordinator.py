"""The coordinator of `rdmacli mesh`: plan the run, launch the agents, collect and judge.

It starts the agents and reads what they print; it never steers them (every agent computes the
same schedule from the same plan). Agent output is untrusted: a record is used only if it
belongs to this run and names a pair the schedule has, seen from the side it claims.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from functools import partial

from rdmacli.diag.counters import ADVICE
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import records, schedule
from rdmacli.mesh.launch import ClusterShellLauncher, SrunLauncher
from rdmacli.mesh.report import LOCAL, Pair, blame, compare, node_table
from rdmacli.outcome import Outcome


@dataclass
class Plan:
    nodes_spec: str
    names: list[str]
    addresses: list[str]
    run_id: str
    round_s: float
    launch_s: float
    port: int
    test: str
    count: int
    quick: bool
    retest_rounds: int = 0  # at most, after the schedule, for the pairs that failed (0: none)
    start_at: float = 0.0
    rounds: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def duration_s(self) -> float:
        return self.launch_s + (len(self.rounds) + self.retest_rounds) * self.round_s + RETEST_DECIDE_S

    def main_end(self) -> float:
        """When the schedule's last slot ends (wall clock)."""
        return self.start_at + len(self.rounds) * self.round_s

    def agent_args(self) -> list[str]:
        return [
            "mesh-agent",
            "--run-id", self.run_id,
            "--start-at", f"{self.start_at:.3f}",
            "--round-time", f"{self.round_s:g}",
            "--port", str(self.port),
            "--test", self.test,
            "--count", str(self.count),
            "--names", ",".join(self.names),
            "--addresses", ",".join(self.addresses),
            *(["--quick"] if self.quick else []),
            *(["--retests"] if self.retest_rounds else []),
        ]  # fmt: skip


class Collector:
    """Records in, pairs and per-node state out; `on_change` is the renderer's callback."""

    def __init__(self, plan: Plan, on_change=lambda collector, rec: None):
        self.plan = plan
        self.on_change = on_change
        self.pairs: dict[tuple[int, int], Pair] = {}
        for rnd in plan.rounds:
            for a, b in schedule.pairs(plan.n, rnd):
                self.pairs[(a, b)] = Pair(a, b, rnd)
        self.agents: dict[int, dict] = {}  # rank -> its "agent" record
        self.done: set[int] = set()
        self.exits: dict[str, int | None] = {}
        self.stderr: dict[str, list[str]] = {}
        self.ignored = 0
        self.violations: dict[int, list[str]] = {}  # rank -> what its agent sent that it may not
        self.by_name = {name: rank for rank, name in enumerate(plan.names)}
        self.go = None  # the launcher's go(text), set by run()
        self.t_launch = time.monotonic()
        self.agents_up_s: float | None = None  # launch to the last agent's first record
        self.cut = False  # the launcher stopped agents still running at end_at()
        self.slowest: tuple[float, Pair] | None = None  # the longest a pair took of its slot
        self.margin_said = False
        self.retest_at: float | None = None  # when the re-test rounds start (None: not decided)
        self.retests: dict[int, dict[tuple[int, int], Pair]] = {}  # round -> its re-tested pairs
        self.complete = 0  # pairs of the schedule both ends reported (counted, never scanned)

    GO_LEAD_S = 2.0  # between the go line and round 1: for it to reach every agent

    def grace_s(self) -> float:
        """After the schedule's last slot, for the agents' last records and exits."""
        return max(END_GRACE_S, self.plan.round_s)

    def end_at(self) -> float:
        """When the coordinator stops waiting (monotonic): the schedule's end, and its re-test
        rounds, plus grace. It moves earlier with the go line; agents still running then are
        stopped and named. The launchers ask every half second: the moment to decide the
        re-tests too, if every record has not already decided them."""
        self.decide_retests()
        end = self.plan.main_end()
        if self.plan.retest_rounds:
            if self.retest_at is None:  # not decided yet: the longest they may take
                end += RETEST_DECIDE_S + Collector.GO_LEAD_S + self.plan.retest_rounds * self.plan.round_s
            else:
                end = self.retest_at + len(self.retests) * self.plan.round_s
        return time.monotonic() + (end + self.grace_s() - time.time())

    def decide_retests(self) -> None:
        """Once every pair of the schedule is in (or RETEST_DECIDE_S after its end), the failed
        pairs whose agents both ran are tested again in up to --retest-rounds extra rounds of
        disjoint pairs; every agent is told the rounds (possibly none) through the launcher."""
        if not self.plan.retest_rounds or self.retest_at is not None or self.go is None:
            return
        complete = self.complete == len(self.pairs)
        if not (complete or time.time() >= self.plan.main_end() + RETEST_DECIDE_S):
            return
        ran = {r for r, rec in self.agents.items() if rec.get("ready") is not False}
        # a node that said the fault is its own (its port down, its port held, its agent late)
        # has said what a re-test would say again
        failed = [p for p in self.pairs.values() if p.result == "fail" and {p.a, p.b} <= ran
                  and p.cause not in LOCAL]  # fmt: skip
        # a node that fails with most partners is named anyway: its pairs come last, so the
        # rounds go first to what could be a link, or a fault that came and went
        first = blame(self.plan.n, list(self.pairs.values()), self.plan.names)
        blamed = {b["rank"] for b in first["nodes"]}
        failed.sort(key=lambda p: (bool({p.a, p.b} & blamed), p.round, p.a))
        rounds = schedule.retest_rounds([(p.a, p.b) for p in failed], self.plan.retest_rounds)
        base = schedule.retest_base(self.plan.n)
        self.retests = {base + k: {ab: Pair(*ab, base + k) for ab in prs} for k, prs in enumerate(rounds)}
        self.retest_at = max(time.time(), self.plan.main_end()) + Collector.GO_LEAD_S
        msg = {"at": round(self.retest_at, 3), "rounds": [[list(ab) for ab in prs] for prs in rounds]}
        self.go(json.dumps({"retest": msg}) + "\n")

    def late(self) -> list[int]:
        """Agents that were up but had not finished when the run was cut at its end."""
        if not self.cut:
            return []
        return [r for r in sorted(self.agents) if r not in self.done]

    def all_up(self) -> None:
        """Every agent reported: start round 1 now rather than at the launch deadline."""
        self.agents_up_s = round(time.monotonic() - self.t_launch, 3)
        at = time.time() + self.GO_LEAD_S
        if self.go is not None and at < self.plan.start_at:
            self.plan.start_at = at
            self.go(json.dumps({"go": round(at, 3)}) + "\n")

    @property
    def judged(self) -> int:
        return sum(1 for p in self.pairs.values() if len(p.reports) == 2 or self._settled(p))

    def _settled(self, p: Pair) -> bool:
        return any(r.get("result") != "pass" for r in p.reports.values())

    def counts(self) -> dict:
        passed = sum(1 for p in self.pairs.values() if len(p.reports) == 2 and p.result == "pass")
        failed = sum(1 for p in self.pairs.values() if p.reports and p.result == "fail")
        return {"pairs": len(self.pairs), "passed": passed, "failed": failed}

    def violation(self, rank: int, what: str) -> None:
        """The agent of `rank` said something it may not: named in the report, never used."""
        seen = self.violations.setdefault(rank, [])
        if len(seen) < 100:
            seen.append(what)

    def on_line(self, node: str | None, line: str, is_err: bool) -> None:
        """One line an agent printed, with the node the launcher read it from: the only
        rank it may speak for."""
        sender = self.by_name.get(node) if node is not None else None
        if len(line) > records.MAX_LINE:
            if sender is not None:
                self.violation(sender, f"a line of {len(line)} bytes")
            else:
                self.ignored += 1
            return
        line = line.strip()
        if not line:
            return
        if is_err or not line.startswith("{"):
            self.stderr.setdefault(node or "?", []).append(line[:300])
            del self.stderr[node or "?"][:-5]
            return
        if sender is None:  # no launcher said whose it is: nobody's word
            self.ignored += 1
            return
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            self.violation(sender, "a line that is not JSON")
            return
        if self.accept(rec, sender):
            self.on_change(self, rec)
        else:
            self.ignored += 1

    def accept(self, rec, sender: int) -> bool:
        """Use a record only if it is of this run, its sender's own, of the right shape and
        consistent with the schedule. Another run's records are ignored; anything else that
        fails is a violation of the sender."""
        if not isinstance(rec, dict) or rec.get("run") != self.plan.run_id:
            return False
        rank = rec.get("rank")
        if rank != sender or isinstance(rank, bool):
            self.violation(sender, f"a record for rank {str(rank)[:20]}")
            return True  # handled: named, not used
        kind = rec.get("type")
        if kind == "agent":
            self.agents[rank] = rec
            if len(self.agents) == self.plan.n:
                self.all_up()
            return True
        if kind == "go":
            return True
        if kind == "done":
            self.done.add(rank)
            return True
        if kind != "pair":
            return False
        why = records.check_pair(rec)
        if why:
            self.violation(sender, f"a pair record whose {why}")
            return True
        rnd, peer = rec["round"], rec["peer"]
        if rnd in self.retests:  # a re-test: of the rounds this coordinator sent
            pair = self.retests[rnd].get((min(rank, peer), max(rank, peer)))
        elif 0 <= peer < self.plan.n and schedule.partner(rank, rnd, self.plan.n) == peer:
            pair = self.pairs.get((min(rank, peer), max(rank, peer)))
        else:
            pair = None
        if pair is None or pair.round != rnd:
            self.violation(sender, f"a pair the schedule does not have (round {rnd}, peer {peer})")
            return True
        side = "listen" if rank < peer else "connect"
        if side in pair.reports:
            self.violation(sender, f"a second report of its pair in round {rnd}")
            return True
        report = records.pair_copy(rec)
        report["side"], report["a"], report["b"] = side, pair.a, pair.b  # ours, not the agent's
        pair.reports[side] = report
        if len(pair.reports) == 2 and pair.round == rnd and rnd not in self.retests:
            self.complete += 1
        took = report.get("took_s")  # a healthy pair's: a failing one runs to the wall
        if (
            report["result"] == "pass"
            and took is not None
            and (self.slowest is None or took > self.slowest[0])
        ):
            self.slowest = (took, pair)
        self.decide_retests()
        return True

    SLOT_FULL = 0.7  # of a slot: a pair that takes more is close to overrunning

    def margin(self) -> str | None:
        """Words when pairs take most of their slot (measured by the agents: a pair's setup,
        test and teardown), with the round time that would leave room."""
        if self.slowest is None or self.slowest[0] <= self.SLOT_FULL * self.plan.round_s:
            return None
        took, p = self.slowest
        names = self.plan.names
        want = math.ceil(took / self.SLOT_FULL * 2) / 2
        return (
            f"pairs take up to {took:.1f} s of their {self.plan.round_s:g} s slot ({names[p.a]}-"
            f"{names[p.b]}, round {p.round}): a slower pair will overrun; "
            f"raise --round-time to {want:g} or more"
        )

    def new_margin_words(self) -> str | None:
        """margin(), the first time it has something to say (said once, live)."""
        if self.margin_said:
            return None
        words = self.margin()
        self.margin_said = words is not None
        return words

    def on_exit(self, node: str | None, rc: int | None) -> None:
        if node is not None:
            self.exits[node] = rc

    def retested(self) -> list[Pair]:
        return [p for prs in self.retests.values() for p in prs.values()]

    def fill_silent_ends(self) -> None:
        """A pair one end reported and the other never did: the silent end's own failure (a
        pair passes only when both ends say so). An agent cut at the run's end is named so."""
        late = set(self.late())
        for p in [*self.pairs.values(), *self.retested()]:
            if len(p.reports) != 1:
                continue
            side = "connect" if "listen" in p.reports else "listen"
            rank = p.b if side == "connect" else p.a
            if rank not in self.agents:
                continue  # fill_missing_agents says why
            name = self.plan.names[rank]
            if rank in late:
                message = (
                    f"{name}'s agent was still running {self.grace_s():g} s after the schedule's "
                    f"end and was stopped; it never reported its side of round {p.round}"
                )
                error = RdmacliError(message, cause=Cause.AGENT, hint="see that node's agent (hung, or "
                                     "its clock behind the coordinator's)")  # fmt: skip
            else:
                message = f"{name} never reported its side of the pair in round {p.round}"
                error = RdmacliError(message, cause=Cause.SILENT)
            p.reports[side] = {"rank": rank, "result": "fail", "error": error.to_dict()}

    def missing_agents(self) -> list[int]:
        return [r for r in range(self.plan.n) if r not in self.agents]

    def fill_missing_agents(self) -> None:
        """A node whose agent never spoke: its side of each pair is an AGENT failure, in the
        words its launcher left (exit status, last lines of stderr)."""
        for rank in self.missing_agents():
            name = self.plan.names[rank]
            rc = self.exits.get(name)
            why = " / ".join(self.stderr.get(name, [])[-2:])
            message = f"the agent on {name} never reported" + (
                f" (exit status {rc})" if rc is not None else " (no exit status: timed out or never started)"
            )
            if why:
                message += f": {why}"
            for p in self.pairs.values():
                if rank in (p.a, p.b):
                    side = "listen" if rank == p.a else "connect"
                    p.reports.setdefault(
                        side,
                        {
                            "rank": rank,
                            "result": "fail",
                            "error": RdmacliError(message, cause=Cause.AGENT).to_dict(),
                        },
                    )


END_GRACE_S = 10.0  # at least, after the last slot (a round, if longer)
RETEST_DECIDE_S = 3.0  # after the schedule's end, re-tests are decided with the records in


def start_plan(plan: Plan) -> None:
    plan.rounds = schedule.rounds_for(plan.n, plan.quick)
    plan.start_at = time.time() + plan.launch_s


def run(
    plan: Plan,
    collector: Collector,
    *,
    launcher: str,
    agent_cmd: list[str] | None = None,
    ssh_options: str | None = None,
    srun_args: str | None = None,
    connect_timeout: float = 10,
    fanout: int | None = None,
) -> None:
    """Launch the agents of a started plan (start_plan) and collect until the schedule's end,
    plus grace. A stop signal propagates after the agents were asked to stop."""
    base = agent_cmd or ([sys.executable, "-m", "rdmacli"] if launcher == "exec" else ["rdmacli"])
    timeout = plan.duration_s + 15  # a backstop: collector.end_at() ends the run first
    if launcher == "srun":
        lau = SrunLauncher(srun_args=srun_args)
        cmd = lau.command(plan.nodes_spec, plan.n, [*base, *plan.agent_args(), "--rank-from-env"])
        runner = partial(
            lau.run, cmd, plan.names, collector.on_line, collector.on_exit, timeout, collector.end_at
        )
    else:
        lau = ClusterShellLauncher(
            launcher, connect_timeout=connect_timeout, ssh_options=ssh_options, fanout=fanout
        )
        extra = ["--stop-on-eof"] if launcher == "ssh" else []
        commands = {
            name: [*base, *plan.agent_args(), "--rank", str(rank), *extra]
            for rank, name in enumerate(plan.names)
        }
        runner = partial(lau.run, commands, collector.on_line, collector.on_exit, timeout, collector.end_at)
    collector.go = lau.go
    collector.t_launch = time.monotonic()
    try:
        runner()
    except BaseException:
        lau.stop()
        raise
    finally:
        collector.cut = lau.cut


def outcome(
    plan: Plan,
    collector: Collector,
    params: dict,
    *,
    t0: float,
    baseline: dict | None = None,
    signal: int | None = None,
) -> Outcome:
    collector.fill_missing_agents()
    collector.fill_silent_ends()
    late = set(collector.late())
    firsts = sorted(collector.pairs.values(), key=lambda p: (p.round, p.a))
    again = {(p.a, p.b): p for p in collector.retested() if p.reports}
    pairs = [again.get((p.a, p.b), p) for p in firsts]  # what counts: a re-test's result, if run
    pair_docs = []
    for first, p in zip(firsts, pairs):
        d = p.to_dict(plan.names)
        d["round"] = first.round
        d["retest"] = None
        if p is not first:  # confirmed: failed again; transient: passed the second time
            d["retest"] = {
                "round": p.round,
                "verdict": "confirmed" if p.result == "fail" else "transient",
                "first": {"result": first.result, "cause": first.cause, "error": first.error()},
            }
        pair_docs.append(d)
    verdict = blame(plan.n, pairs, plan.names)
    nodes = node_table(plan.n, pairs, plan.names, plan.addresses)
    for row in nodes:
        said = collector.agents.get(row["rank"])
        row["agent"] = (
            "missing"
            if said is None
            else "not ready"
            if said.get("ready") is False
            else "late"
            if row["rank"] in late
            else "ran"
        )
        row["violations"] = len(collector.violations.get(row["rank"], []))
    failed = [p for p in pair_docs if p["result"] == "fail"]
    missing = [p for p in pair_docs if p["result"] == "missing"]
    data = {
        "run_id": plan.run_id,
        "agents_up_s": collector.agents_up_s,
        "nodes": nodes,
        "pairs": pair_docs,
        "blame": verdict,
    }
    warnings = []
    for rank, what in sorted(collector.violations.items()):
        warnings.append(
            f"{plan.names[rank]}'s agent sent {len(what)} record(s) it may not; none was used "
            f"(first: {what[0]})"
        )
    margin = collector.margin()
    if margin:
        warnings.append(margin)
    if late:
        warnings.append(
            f"the run was cut {collector.grace_s():g} s after the schedule's end: agent(s) still "
            f"running on {', '.join(plan.names[r] for r in sorted(late))} were stopped"
        )
    transient = [d for d in pair_docs if d["retest"] and d["retest"]["verdict"] == "transient"]
    if transient:
        warnings.append(
            f"{len(transient)} pair(s) failed once and passed when tested again at the end (transient: "
            f"counted as passed): {', '.join(d['a'] + '-' + d['b'] for d in transient[:8])}"
        )
    if collector.ignored:
        warnings.append(
            f"{collector.ignored} agent output line(s) were not records of this run and were ignored"
        )
    if baseline is not None:
        data["baseline"] = compare(baseline, pair_docs)
    error = None
    if signal is None:
        if not collector.agents:
            error = RdmacliError(
                "no agent ran on any node",
                hint="check that rdmacli is installed on the nodes and the launcher works "
                "(ssh: keys and host names; srun: an allocation); see data.nodes",
                cause=Cause.AGENT,
            )
        elif failed:
            causes = {}
            for p in failed:
                causes[p["cause"]] = causes.get(p["cause"], 0) + 1
            words = ", ".join(f"{n} {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))
            error = RdmacliError(
                f"{len(failed)} of {len(pair_docs)} pairs failed ({words})",
                hint="see the blame: a bad node fails with most partners, a bad link fails alone",
                cause=Cause.CHECK_FAILED,
            )
        elif verdict["nodes"] or verdict["links"]:  # passed, but NICs retransmitted: named
            who = [b["node"] for b in verdict["nodes"]] + [f"{x['a']}-{x['b']}" for x in verdict["links"]]
            error = RdmacliError(
                f"every pair passed, but the NICs' counters show trouble on {', '.join(who)}",
                hint=ADVICE["loss"],
                cause=Cause.PACKET_LOSS,
            )
        elif missing:
            error = RdmacliError(
                f"incomplete: {len(missing)} of {len(pair_docs)} pairs were never reported",
                hint="the run ended before every round did; raise --launch-timeout or --round-time",
                cause=Cause.MISSING,
            )
    retested = [d["retest"]["verdict"] for d in pair_docs if d["retest"]]
    counts = {
        "nodes": plan.n,
        "rounds": len(plan.rounds),
        "retest_rounds": len(collector.retests),
        "pairs_retested": len(retested),
        "pairs_transient": retested.count("transient"),
        "pairs": len(pair_docs),
        "pairs_passed": sum(p["result"] == "pass" for p in pair_docs),
        "pairs_failed": len(failed),
        "pairs_missing": len(missing),
        "bad_nodes": len(verdict["nodes"]),
        "bad_links": len(verdict["links"]),
    }
    return Outcome(
        "mesh",
        params,
        error=error,
        signal=signal,
        counts=counts,
        data=data,
        elapsed_ms=round((time.monotonic() - t0) * 1e3, 1),
        warnings=warnings,
    )
