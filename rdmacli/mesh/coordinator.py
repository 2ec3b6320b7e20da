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
from rdmacli.mesh.rails import DEVICE
from rdmacli.mesh.report import LOCAL, Pair, blame, compare, judge_slow, nic_table, node_table
from rdmacli.outcome import Outcome


@dataclass
class Plan:
    nodes_spec: str
    names: list[str]
    addresses: list[list[str]]  # by rank, its rails in order
    run_id: str
    round_s: float
    launch_s: float
    port: int
    test: str
    count: int
    quick: bool
    retest_rounds: int = 0  # at most, after the schedule, for the pairs that failed (0: none)
    cross_rail: bool = False
    slow_factor: float = 2.0
    slow_fraction: float = 0.9
    devices: list[list] | None = None  # by rank and rail, where discovery named them
    discovery_s: float | None = None  # the rails' discovery launch, before this plan's
    start_at: float = 0.0
    rounds: list[int] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def rails(self) -> int:
        return len(self.addresses[0])

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
            "--addresses", ",".join("+".join(rails) for rails in self.addresses),
            *(["--quick"] if self.quick else []),
            *(["--cross-rail"] if self.cross_rail else []),
            *(["--retests"] if self.retest_rounds else []),
        ]  # fmt: skip


class Collector:
    """Records in, pairs and per-node state out; `on_change` is the renderer's callback."""

    def __init__(self, plan: Plan, on_change=lambda collector, rec: None):
        self.plan = plan
        self.on_change = on_change
        self.pairs: dict[tuple[int, int, int, int], Pair] = {}  # (a, rail of a, b, rail of b)
        for rnd in plan.rounds:
            for a, ra, b, rb in schedule.nic_pairs(plan.n, rnd, plan.rails, plan.cross_rail):
                self.pairs[(a, ra, b, rb)] = Pair(a, b, rnd, ra=ra, rb=rb)
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
        self.abandoned = False  # ...and some did not exit even when killed: left behind
        self.slowest: tuple[float, Pair] | None = None  # the longest a pair took of its slot
        self.margin_said = False
        self.retest_at: float | None = None  # when the re-test rounds start (None: not decided)
        self.retests: dict[int, dict[tuple, Pair]] = {}  # round -> its re-tested pairs
        self.reference: dict | None = None  # the best figures of the first attempts (slow)
        self.complete = 0  # pairs of the schedule both ends reported (counted, never scanned)
        self.refused: RdmacliError | None = None  # the run cannot go on (cross-rail, no route)
        self.first_in: set[tuple] = set()  # cross-rail: pairs of the first node round that are in

    GO_LEAD_S = 2.0  # between the go line and round 1: for it to reach every agent

    def grace_s(self) -> float:
        """After the schedule's last slot, for the agents' last records and exits."""
        return max(END_GRACE_S, self.plan.round_s)

    def end_at(self) -> float:
        """When the coordinator stops waiting (monotonic): the schedule's end, and its re-test
        rounds, plus grace. It moves earlier with the go line; agents still running then are
        stopped and named. The launchers ask every half second: the moment to decide the
        re-tests too, if every record has not already decided them."""
        if self.refused is not None:  # the launcher stops the agents at its next look
            return time.monotonic() - 1
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
        and slow pairs whose agents both ran are tested again in up to --retest-rounds extra
        rounds (no NIC in two tests of a round); every agent is told the rounds (possibly none)
        through the launcher."""
        if not self.plan.retest_rounds or self.retest_at is not None or self.go is None:
            return
        complete = self.complete == len(self.pairs)
        if not (complete or time.time() >= self.plan.main_end() + RETEST_DECIDE_S):
            return
        plan = self.plan
        ran = {nic for r, rec in self.agents.items() for nic in self.ready_nics(r, rec)}
        firsts = list(self.pairs.values())
        self.reference = judge_slow(firsts, plan.slow_factor, plan.slow_fraction)
        # a node that said the fault is its own (its port down, its port held, its agent late)
        # has said what a re-test would say again
        again = [p for p in firsts if (p.result == "fail" and p.cause not in LOCAL or p.slow)
                 and {(p.a, p.ra), (p.b, p.rb)} <= ran]  # fmt: skip
        # a NIC that fails with most partners is named anyway: its pairs come last, so the
        # rounds go first to what could be a link, or a fault that came and went
        first = blame(plan.n, firsts, plan.names, plan.rails)
        blamed = {(b["rank"], b.get("rail", k)) for b in first["nodes"] for k in range(plan.rails)}
        blamed |= {(b["rank"], b["rail"]) for b in first["nics"]}
        again.sort(key=lambda p: (bool({(p.a, p.ra), (p.b, p.rb)} & blamed), p.round, p.a, p.ra))
        rounds = schedule.retest_rounds([((p.a, p.ra), (p.b, p.rb)) for p in again], plan.retest_rounds)
        base = schedule.retest_base(plan.n, plan.rails, plan.cross_rail)
        self.retests = {}
        for k, tests in enumerate(rounds):
            keys = [(a, ra, b, rb) for (a, ra), (b, rb) in tests]
            self.retests[base + k] = {
                key: Pair(key[0], key[2], base + k, ra=key[1], rb=key[3]) for key in keys
            }
        self.retest_at = max(time.time(), plan.main_end()) + Collector.GO_LEAD_S
        msg = {
            "at": round(self.retest_at, 3),
            "rounds": [[list(key) for key in prs] for prs in self.retests.values()],
        }
        self.go(json.dumps({"retest": msg}) + "\n")

    def ready_nics(self, rank: int, rec: dict) -> list[tuple[int, int]]:
        """The NICs an agent said can run pairs: per rail where it said so, else by its word
        for the node (its record is only a reason not to re-test, never a verdict)."""
        rails = rec.get("rails")
        if (
            isinstance(rails, list)
            and len(rails) == self.plan.rails
            and all(isinstance(x, dict) for x in rails)
        ):
            return [(rank, k) for k, x in enumerate(rails) if x.get("ready") is not False]
        return [(rank, k) for k in range(self.plan.rails)] if rec.get("ready") is not False else []

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

    def take_devices(self, rank: int, rails) -> None:
        """The device names an agent found behind its rails' addresses: words for the report
        (checked as device names), never used to decide anything."""
        plan = self.plan
        if not isinstance(rails, list) or len(rails) != plan.rails:
            return
        if plan.devices is None:
            plan.devices = [[None] * plan.rails for _ in range(plan.n)]
        for k, r in enumerate(rails):
            dev = r.get("device") if isinstance(r, dict) else None
            if plan.devices[rank][k] is None and isinstance(dev, str) and DEVICE.fullmatch(dev):
                plan.devices[rank][k] = dev

    UNROUTED = ("ADDR", "ROUTE", "UNR")

    def check_cross_rail(self, pair: Pair) -> None:
        """--cross-rail on rails that are separate networks: once every pair of the first node
        round is in, if every cross-rail one failed to resolve or reach its partner while a
        rail-aligned one passed, the run stops there and is refused in words, rather than go on
        to blame every cross-rail pair as a bad link."""
        plan = self.plan
        if not plan.cross_rail or plan.rails == 1 or self.refused is not None:
            return
        first = set(plan.rounds[: schedule.subrounds(plan.rails, True)])
        if pair.round not in first or not (len(pair.reports) == 2 or self._settled(pair)):
            return
        self.first_in.add(pair.key)  # counted, so the round is scanned once, when complete
        if len(self.first_in) < (plan.n // 2) * plan.rails * plan.rails:
            return
        mine = [p for p in self.pairs.values() if p.round in first]
        cross = [p for p in mine if p.ra != p.rb]
        if not (cross and all(p.result == "fail" and p.cause in self.UNROUTED for p in cross)):
            return
        if not any(p.result == "pass" for p in mine if p.ra == p.rb):
            return
        p = cross[0]
        names = plan.names
        self.refused = RdmacliError(
            f"--cross-rail: every cross-rail pair of the first round failed to reach its partner "
            f"({p.cause}, e.g. {names[p.a]}:{p.ra} -> {names[p.b]}:{p.rb}: "
            f"{(p.error() or {}).get('message', '')[:160]}) while rail-aligned pairs passed: the "
            "rails are separate networks here; the run was stopped",
            hint="cross-rail tests need routing between the rails' subnets (through the spine, "
            "each rail's source address routed out of its own NIC); run rail-aligned (without "
            "--cross-rail) on this fabric",
            cause=Cause.USAGE,
        )

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
            self.take_devices(rank, rec.get("rails"))
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
        rnd, peer, rail, peer_rail = rec["round"], rec["peer"], rec.get("rail", 0), rec.get("peer_rail", 0)
        key = (rank, rail, peer, peer_rail) if rank < peer else (peer, peer_rail, rank, rail)
        if rnd in self.retests:  # a re-test: of the rounds this coordinator sent
            pair = self.retests[rnd].get(key)
        elif 0 <= peer < self.plan.n and (rail, peer, peer_rail) in schedule.tests_of(
            rank, rnd, self.plan.n, self.plan.rails, self.plan.cross_rail
        ):
            pair = self.pairs.get(key)
        else:
            pair = None
        if pair is None or pair.round != rnd:
            self.violation(
                sender, f"a pair the schedule does not have (round {rnd}, peer {peer}, rail {rail})"
            )
            return True
        side = "listen" if rank < peer else "connect"
        if side in pair.reports:
            self.violation(sender, f"a second report of its pair in round {rnd} (rail {rail})")
            return True
        report = records.pair_copy(rec)
        report["side"], report["a"], report["b"] = side, pair.a, pair.b  # ours, not the agent's
        pair.reports[side] = report
        if len(pair.reports) == 2 and pair.round == rnd and rnd not in self.retests:
            self.complete += 1
        self.check_cross_rail(pair)
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


def blamed_names(verdict: dict, rails: int) -> list[str]:
    """The blamed nodes, NICs and links, as people read them (n03, n03:1, n01-n04)."""
    who = [b["node"] for b in verdict["nodes"]]
    who += [
        f"{b['node']}:{b['rail']}" + (f" ({b['device']})" if b.get("device") else "") for b in verdict["nics"]
    ]
    for x in verdict["links"]:
        if rails > 1:
            who.append(f"{x['a']}:{x['rail_a']}-{x['b']}:{x['rail_b']}")
        else:
            who.append(f"{x['a']}-{x['b']}")
    return who


def start_plan(plan: Plan) -> None:
    plan.rounds = schedule.main_rounds(plan.n, plan.quick, plan.rails, plan.cross_rail)
    plan.start_at = time.time() + plan.launch_s


@dataclass
class Launch:
    """How agents start: the launcher and its options, the same for discovery and the run."""

    launcher: str
    agent_cmd: list[str] | None = None
    ssh_options: str | None = None
    srun_args: str | None = None
    connect_timeout: float = 10
    fanout: int | None = None

    def start(self, nodes_spec: str, names: list[str], args: list[str], on_line, on_exit, timeout: float,
              end_at=None):  # fmt: skip
        """The launcher, and a call that runs `args` (mesh-agent's) on every node to the end."""
        launcher = self.launcher
        base = self.agent_cmd or ([sys.executable, "-m", "rdmacli"] if launcher == "exec" else ["rdmacli"])
        if launcher == "srun":
            lau = SrunLauncher(srun_args=self.srun_args)
            cmd = lau.command(nodes_spec, len(names), [*base, *args, "--rank-from-env"])
            return lau, partial(lau.run, cmd, names, on_line, on_exit, timeout, end_at)
        lau = ClusterShellLauncher(
            launcher, connect_timeout=self.connect_timeout, ssh_options=self.ssh_options, fanout=self.fanout
        )
        extra = ["--stop-on-eof"] if launcher == "ssh" else []
        commands = {name: [*base, *args, "--rank", str(rank), *extra] for rank, name in enumerate(names)}
        return lau, partial(lau.run, commands, on_line, on_exit, timeout, end_at)


def run(plan: Plan, collector: Collector, launch: Launch) -> None:
    """Launch the agents of a started plan (start_plan) and collect until the schedule's end,
    plus grace. A stop signal propagates after the agents were asked to stop."""
    timeout = plan.duration_s + 15  # a backstop: collector.end_at() ends the run first
    lau, runner = launch.start(
        plan.nodes_spec, plan.names, plan.agent_args(), collector.on_line, collector.on_exit, timeout,
        collector.end_at,
    )  # fmt: skip
    collector.go = lau.go
    collector.t_launch = time.monotonic()
    try:
        runner()
    except BaseException:
        lau.stop()
        raise
    finally:
        collector.cut = lau.cut
        collector.abandoned = lau.abandoned


def discover(nodes_spec: str, names: list[str], launch: Launch, *, run_id: str, timeout: float,
             rails_spec: str | None = None, family: int = 4) -> tuple[list[list[str]], list]:  # fmt: skip
    """Every node's rails, found by its own agent (`mesh-agent --discover`, one launch before
    the run): (addresses, device names) by rank. A node that reports none, or a different
    number from most, or nothing usable, is a usage error that names it."""
    from rdmacli.mesh.nodes import check_rail_counts, check_unique
    from rdmacli.mesh.rails import check_report

    by_name = {name: rank for rank, name in enumerate(names)}
    found: dict[int, list] = {}
    said: dict[int, str] = {}

    def on_line(node, line, is_err):
        rank = by_name.get(node)
        if rank is None or is_err or len(line) > records.MAX_LINE or not line.lstrip().startswith("{"):
            if rank is not None and is_err and line.strip():
                said[rank] = line.strip()[:200]
            return
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(rec, dict) or rec.get("run") != run_id or rec.get("rank") != rank:
            return
        if rec.get("type") == "rails":
            rails = check_report(rec.get("rails"), family)
            if isinstance(rails, str):
                said[rank] = f"its agent reported {rails}"
            else:
                found[rank] = rails
        elif rec.get("type") == "error" and isinstance(rec.get("message"), str):
            said[rank] = rec["message"][:200]

    args = ["mesh-agent", "--discover", "--run-id", run_id, "--start-at", "0", "--round-time", "1",
            "--port", "1", "--names", ",".join(names), "--family", str(family),
            *(["--rails", rails_spec] if rails_spec else [])]  # fmt: skip
    lau, runner = launch.start(nodes_spec, names, args, on_line, lambda node, rc: None, timeout)
    try:
        runner()
    except BaseException:
        lau.stop()
        raise
    silent = [r for r in range(len(names)) if r not in found]
    if silent:
        why = "; ".join(f"{names[r]}: {said.get(r, 'no report')}" for r in silent[:8])
        raise RdmacliError(
            f"rail discovery: {len(silent)} node(s) did not report their rails ({why})",
            hint="check the launcher and rdmacli on those nodes, or give the addresses with --map",
            cause=Cause.AGENT,
        )
    check_unique(
        names, [[rail.address for rail in found[r]] for r in range(len(names))],
        "rail discovery (one host, or nodes that share their devices, as the lab's do)",
        hint="give each node's addresses with --map, or name each node's devices with --rails "
        "(e.g. 'rxe_{node}')",
    )  # fmt: skip
    what = f"--rails {rails_spec}" if rails_spec else "--rails auto"
    check_rail_counts(
        names, [len(found[r]) for r in range(len(names))],
        hint=f"{what} found these ACTIVE ports with an IPv{family} address; bring the missing ones up, "
        "name the devices with --rails, or give the addresses with --map",
    )  # fmt: skip
    return (
        [[rail.address for rail in found[r]] for r in range(len(names))],
        [[rail.device for rail in found[r]] for r in range(len(names))],
    )


def outcome(
    plan: Plan,
    collector: Collector,
    params: dict,
    *,
    t0: float,
    baseline: dict | None = None,
    signal: int | None = None,
) -> Outcome:
    if collector.refused is not None:
        return Outcome("mesh", params, error=collector.refused, signal=signal,
                       elapsed_ms=round((time.monotonic() - t0) * 1e3, 1))  # fmt: skip
    collector.fill_missing_agents()
    collector.fill_silent_ends()
    late = set(collector.late())
    firsts = sorted(collector.pairs.values(), key=lambda p: (p.round, p.a, p.ra))
    reference = judge_slow(firsts, plan.slow_factor, plan.slow_fraction, collector.reference)
    again = {p.key: p for p in collector.retested() if p.reports}
    for p in again.values():
        p.first = collector.pairs[p.key]
    judge_slow(list(again.values()), plan.slow_factor, plan.slow_fraction, reference)  # by the same best
    pairs = [again.get(p.key, p) for p in firsts]  # what counts: a re-test's result, if run
    pair_docs = []
    for first, p in zip(firsts, pairs):
        d = p.to_dict(plan.names, plan.devices)
        d["round"] = first.round
        d["retest"] = None
        if p is not first:  # confirmed: failed (or was slow) again; transient: passed this time
            d["retest"] = {
                "round": p.round,
                "verdict": "confirmed" if p.bad else "transient",
                "first": {"result": first.result, "cause": first.cause or ("SLOW" if first.slow else None),
                          "error": first.error(), "slow": first.slow},
            }  # fmt: skip
        pair_docs.append(d)
    verdict = blame(plan.n, pairs, plan.names, plan.rails, plan.devices)
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
        "discovery_s": plan.discovery_s,
        "agents_up_s": collector.agents_up_s,
        "rails": plan.rails,
        "cross_rail": plan.cross_rail,
        "nodes": nodes,
        "nics": nic_table(plan.n, plan.rails, pairs, plan.names, plan.addresses, plan.devices),
        "pairs": pair_docs,
        "slow_reference": reference,
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
    if collector.abandoned:
        warnings.append(
            "some agent processes did not exit even when killed (a process held in the kernel, such "
            "as rdma_destroy_id waiting out its disconnect's retries on a cut link): the run ended "
            "without them; check those nodes for leftover rdmacli mesh-agent processes"
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
                hint="see the blame: a bad NIC or node fails with most partners, a bad link fails alone",
                cause=Cause.CHECK_FAILED,
            )
        elif verdict["nodes"] or verdict["nics"] or verdict["links"]:  # passed, yet named
            who = blamed_names(verdict, plan.rails)
            slow = [p for p in pair_docs if p["slow"]]
            if any(p.lossy or (p.first is not None and p.first.lossy) for p in pairs):
                error = RdmacliError(
                    f"every pair passed, but the NICs' counters show trouble on {', '.join(who)}",
                    hint=ADVICE["loss"],
                    cause=Cause.PACKET_LOSS,
                )
            elif slow:
                error = RdmacliError(
                    f"every pair passed, but {len(slow)} were slower than the fabric's best "
                    f"(x{plan.slow_factor:g} latency, {plan.slow_fraction:g} of the bandwidth): "
                    f"{', '.join(who)}",
                    hint="see data.pairs[].slow for the figures judged; a slow NIC or node: its "
                    "link speed, PCIe slot, firmware, or congestion on its switch port",
                    cause=Cause.SLOW,
                )
            else:
                error = RdmacliError(
                    f"every pair passed when tested again, but {', '.join(who)} failed first with "
                    "most partners",
                    hint="an intermittent fault: see data.pairs[].retest for the first attempts",
                    cause=Cause.CHECK_FAILED,
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
        "pairs_slow": sum(bool(p["slow"]) for p in pair_docs),
        "rails": plan.rails,
        "bad_nodes": len(verdict["nodes"]),
        "bad_nics": len(verdict["nics"]),
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
