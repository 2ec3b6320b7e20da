"""The agents' lines in, typed and trusted only as far as they may be: pairs and per-node state out.

Every line comes with the node the launcher read it from: the only rank it may speak for. A
record is used only if it is of this run, its sender's own, of the right shape (contract's
records) and a pair the schedule (or the re-test rounds sent) has, seen from the side it claims.
Another run's records are ignored; anything else that fails is a violation of its sender,
named in the report and never used. Nothing here decides: the run loop (mesh/run.py) and the
verdict (mesh/verdict.py) read what was taken in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rdmacli.mesh import records
from rdmacli.mesh.healthy import Store
from rdmacli.mesh.launched import LAUNCHER_OWN
from rdmacli.mesh.plan import Plan
from rdmacli.mesh.rails import DEVICE
from rdmacli.mesh.records import (
    AgentRecord,
    DoneRecord,
    ErrorRecord,
    HealthyRecord,
    PairRecord,
    RailsRecord,
    Violation,
)
from rdmacli.mesh.report import Pair
from rdmacli.mesh.verdict import Evidence

MAX_VIOLATIONS = 100  # kept per node: the first ones say enough
STDERR_TAIL = 5  # lines of an agent's stderr kept (for a node that never reports)


def pair_key(rank: int, rail: int, peer: int, peer_rail: int) -> tuple[int, int, int, int]:
    """(a, rail of a, b, rail of b), a the lower rank (the listener)."""
    return (rank, rail, peer, peer_rail) if rank < peer else (peer, peer_rail, rank, rail)


class Intake:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.pairs: dict[tuple[int, int, int, int], Pair] = {}
        sched = plan.schedule
        # the probe (at once): a pair is made when an end reports it in a record of its own;
        # healthy ones stay compact (mesh/healthy.py) and are paired up at the end
        self.store = Store(sched, plan.spec.count) if sched.at_once else None
        if self.store is None:
            for rnd in plan.rounds:
                for a, ra, b, rb in sched.nic_pairs(rnd):
                    self.pairs[(a, ra, b, rb)] = Pair(a, b, rnd, ra=ra, rb=rb)
            self.expected = len(self.pairs)
        else:
            combos = len(sched.rail_combos(0))
            self.expected = sum(len(sched.partners(r)) for r in range(plan.n)) // 2 * combos
        self.retests: dict[int, dict[tuple, Pair]] = {}  # round -> its re-tested pairs (as sent)
        self.agents: dict[int, AgentRecord] = {}
        self.done: set[int] = set()
        self.dropped: dict[int, tuple] = {}  # rank -> its NICs' dropped probe datagrams (DoneRecord)
        self.exits: dict[str, int | None] = {}
        self.stderr: dict[str, list[str]] = {}
        self.ignored = 0
        self.violations: dict[int, list[str]] = {}  # rank -> what its agent sent that it may not
        self.by_name = {name: rank for rank, name in enumerate(plan.spec.names)}
        self.devices: list[list] = [list(r) for r in plan.devices] if plan.devices else [
            [None] * plan.rails for _ in range(plan.n)
        ]  # fmt: skip
        self.complete = 0  # pairs of the schedule both ends reported (counted, never scanned)
        self.first_in: set[tuple] = set()  # cross-rail: pairs of the first node round settled
        self.slowest: tuple[float, Pair] | None = None  # the longest a healthy pair took of its slot
        self.discovered: dict[int, RailsRecord] = {}  # discovery's records, by rank
        self.said: dict[int, str] = {}  # an agent's own words for why it could not run
        # rank -> the partners whose ports its figures (or theirs) contradict: the figures are
        # set aside; a node contradicting several partners is named (verdict: inconsistent)
        self.contradicted: dict[int, set[int]] = {}

    # ---- what came in ----------------------------------------------------------------------

    def settled(self, p: Pair) -> bool:
        """Both ends reported, or one end failed it (a pass needs both; a fail needs one)."""
        return len(p.reports) == 2 or any(r.result != "pass" for r in p.reports.values())

    def counts(self) -> tuple[int, int, int]:
        """For the progress line: pairs of the schedule, passed and failed so far (the probe's
        healthy ones counted by their ends' entries)."""
        passed = sum(1 for p in self.pairs.values() if len(p.reports) == 2 and p.result == "pass")
        failed = sum(1 for p in self.pairs.values() if p.reports and p.result == "fail")
        if self.store is not None:
            passed += self.store.entries // 2
        return self.expected, min(passed, self.expected), failed

    def all_in(self) -> bool:
        if self.store is not None:  # the probe: every record comes at the phase's end
            return len(self.done) == self.plan.n
        return self.complete == len(self.pairs)

    def retested(self) -> list[Pair]:
        return [p for prs in self.retests.values() for p in prs.values()]

    def ready_nics(self) -> set[tuple[int, int]]:
        """The NICs whose agents said they can run pairs."""
        return {(r, k) for r, rec in self.agents.items() for k in rec.ready_rails(self.plan.rails)}

    def set_retests(self, rounds: list[list[tuple]], base: int) -> None:
        """The re-test rounds the run loop sent: their pairs are the only ones a re-test may report."""
        self.retests = {
            base + k: {key: Pair(key[0], key[2], base + k, ra=key[1], rb=key[3]) for key in keys}
            for k, keys in enumerate(rounds)
        }

    def evidence(self, *, cut: bool = False, abandoned: bool = False, agents_up_s: float | None = None):
        """What came in, for the verdict (verdict.Evidence): agents up but not done when the
        run was cut at its end are late."""
        late = frozenset(r for r in self.agents if r not in self.done) if cut else frozenset()
        healthy = None
        pairs = list(self.pairs.values())
        if self.store is not None:
            pairs, healthy = self.store.split(self.plan.spec.run_id, self.pairs)
        return Evidence(
            pairs=pairs, healthy=healthy, retested=self.retested(), agents=dict(self.agents), late=late,
            exits=dict(self.exits), stderr=dict(self.stderr), violations=dict(self.violations),
            ignored=self.ignored, slowest=self.slowest, abandoned=abandoned, agents_up_s=agents_up_s,
            devices=tuple(tuple(r) for r in self.devices) if any(any(r) for r in self.devices) else None,
            retest_rounds=len(self.retests),
            contradicted={r: frozenset(p) for r, p in self.contradicted.items()},
            dropped=dict(self.dropped),
        )  # fmt: skip

    def rate_of(self, rank: int, rail: int) -> float | None:
        """A NIC's line rate, as its own agent said it (None: not said)."""
        agent = self.agents.get(rank)
        return agent.rails[rail].rate_gbps if agent is not None and 0 <= rail < len(agent.rails) else None

    def within_ports(self, rec: PairRecord) -> PairRecord | None:
        """A pair record whose rates the ports allow: one above its sender's own port's line
        rate is its sender's violation (None); one above only the partner's port (as the
        partner said it) is a contradiction between two nodes' words: the rates are set aside,
        the result stands, and both are counted against (a liar contradicts many partners)."""
        rates = {k: v for k in records.RATES if (v := getattr(rec, k)) is not None}
        if not rates:
            return rec
        top_key, top = max(rates.items(), key=lambda kv: kv[1])
        own, theirs = self.rate_of(rec.rank, rec.rail), self.rate_of(rec.peer, rec.peer_rail)
        if own and top > own * records.RATE_SLACK:
            self.violation(
                rec.rank, f"{top_key} of {top:g} Gb/s, above its own port's line rate ({own:g} Gb/s)"
            )
            return None
        if theirs and top > theirs * records.RATE_SLACK:
            self.contradicted.setdefault(rec.rank, set()).add(rec.peer)
            self.contradicted.setdefault(rec.peer, set()).add(rec.rank)
            blank: dict[str, Any] = dict.fromkeys(records.RATES)
            return replace(rec, **blank)
        return rec

    # ---- lines in --------------------------------------------------------------------------

    def violation(self, rank: int, what: str) -> None:
        seen = self.violations.setdefault(rank, [])
        if len(seen) < MAX_VIOLATIONS:
            seen.append(what)

    def on_exit(self, node: str | None, rc: int | None) -> None:
        if node is not None:
            self.exits[node] = rc

    def on_line(self, node: str | None, line: str, is_err: bool):
        """One line an agent printed: the record taken in, or None."""
        sender = self.by_name.get(node) if node is not None else None
        if len(line) > records.MAX_LINE or line.endswith(records.OVERLONG):
            if sender is not None:
                size = f"over {records.MAX_LINE}" if len(line) <= records.MAX_LINE else str(len(line))
                self.violation(sender, f"a line of {size} bytes")
            else:
                self.ignored += 1
            return None
        line = line.strip()
        if not line:
            return None
        if is_err or not line.startswith("{"):
            tail = self.stderr.setdefault(node or LAUNCHER_OWN, [])  # srun's own words: nobody's
            tail.append(line[:300])
            del tail[:-STDERR_TAIL]
            return None
        if sender is None:  # no launcher said whose it is: nobody's word
            self.ignored += 1
            return None
        try:
            rec = records.parse_record(line, self.plan.spec.run_id)
        except Violation as exc:
            self.violation(sender, str(exc))
            return None
        if rec is None:
            self.ignored += 1
            return None
        if rec.rank != sender:
            self.violation(sender, f"a record for rank {str(rec.rank)[:20]}")
            return None
        return self.take(rec)

    def take(self, rec):
        """A checked record of its sender's own: taken in, or a violation."""
        if isinstance(rec, AgentRecord):
            self.agents[rec.rank] = rec
            self.take_devices(rec)
        elif isinstance(rec, DoneRecord):
            self.done.add(rec.rank)
            if rec.dropped:
                self.dropped[rec.rank] = rec.dropped
        elif isinstance(rec, RailsRecord):
            self.discovered[rec.rank] = rec
        elif isinstance(rec, ErrorRecord):
            self.said[rec.rank] = rec.message
        elif isinstance(rec, PairRecord):
            return rec if self.take_pair(rec) else None
        elif isinstance(rec, HealthyRecord):
            why = self.store.take(rec) if self.store is not None else "a healthy record in a run of rounds"
            if why:
                self.violation(rec.rank, why)
                return None
        return rec

    def take_devices(self, rec: AgentRecord) -> None:
        """The device names an agent found behind its rails' addresses: words for the report
        (checked as device names), never used to decide anything."""
        if len(rec.rails) != self.plan.rails:
            return
        for state in rec.rails:
            row = self.devices[rec.rank]
            if row[state.rail] is None and state.device and DEVICE.fullmatch(state.device):
                row[state.rail] = state.device

    def take_pair(self, rec: PairRecord) -> bool:
        plan, rank, rnd = self.plan, rec.rank, rec.round
        key = pair_key(rank, rec.rail, rec.peer, rec.peer_rail)
        store = self.store
        if rnd in self.retests:  # a re-test: of the rounds this coordinator sent
            pair = self.retests[rnd].get(key)
        elif plan.schedule.has_test(rank, rnd, rec.rail, rec.peer, rec.peer_rail):
            pair = self.pairs.get(key)
            if pair is None and store is not None:  # the probe's: made as an end reports it
                pair = self.pairs[key] = Pair(key[0], key[2], rnd, ra=key[1], rb=key[3])
        else:
            pair = None
        if pair is None or pair.round != rnd:
            self.violation(
                rank, f"a pair the schedule does not have (round {rnd}, peer {rec.peer}, rail {rec.rail})"
            )
            return False
        kept = self.within_ports(rec)
        if kept is None:
            return False
        rec = kept
        if (rec.probes_sent or 0) > plan.spec.count:
            self.violation(rank, f"{rec.probes_sent} probes to one partner, of a run of {plan.spec.count}")
            return False
        side = rec.side
        if side in pair.reports or (
            store is not None and store.said(rank, rec.rail, rec.peer, rec.peer_rail)
        ):
            self.violation(rank, f"a second report of its pair in round {rnd} (rail {rec.rail})")
            return False
        pair.reports[side] = rec
        if store is not None:
            store.detail(rank, rec.rail, rec.peer, rec.peer_rail)
        if rnd not in self.retests:
            if len(pair.reports) == 2:
                self.complete += 1
            if plan.spec.cross_rail and rnd in plan.first_node_round and self.settled(pair):
                self.first_in.add(key)
        took = rec.took_s  # a healthy pair's: a failing one runs to the wall
        if rec.result == "pass" and took is not None and (self.slowest is None or took > self.slowest[0]):
            self.slowest = (took, pair)
        return True
