"""The mesh's judgement, as functions of data: what to test again, when to refuse, and the verdict.

Nothing here reads a clock, a launcher or a socket: each function takes the plan and the pairs
(typed, as intake took them in) and returns a decision or a document, so each is tested on data
alone. The run loop (mesh/run.py) calls midrun.py's decisions while the run goes on, and `judge`
once at its end.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rdmacli.diag.counters import ADVICE
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import said
from rdmacli.mesh.blame import LIAR_SHARE, LIARS, blame, implausible, judge_slow, late, within
from rdmacli.mesh.findings import PairResult, Retest
from rdmacli.mesh.healthy import Healthy
from rdmacli.mesh.meshreport import MeshReport, MeshTotals
from rdmacli.mesh.plan import Plan
from rdmacli.mesh.records import PairRecord
from rdmacli.mesh.report import Pair, compare, nic_table, node_table
from rdmacli.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rdmacli.mesh.inputs import BaselinePair


@dataclass(frozen=True)
class Evidence:
    """What the run took in, for the verdict: the intake's findings and the launcher's."""

    pairs: list[Pair]  # the schedule's, as reported
    retested: list[Pair]  # the re-test rounds', as reported
    agents: dict  # rank -> AgentRecord
    late: frozenset  # ranks still running when the run was cut at its end
    exits: dict  # node -> exit status
    stderr: dict  # node -> its last lines
    violations: dict  # rank -> what it sent that it may not
    ignored: int = 0
    devices: tuple | None = None
    slowest: tuple | None = None
    abandoned: bool = False
    agents_up_s: float | None = None
    retest_rounds: int = 0
    contradicted: dict = field(default_factory=dict)  # rank -> partners whose ports its figures contradict
    healthy: Healthy | None = None  # the probe's healthy pairs, as columns, not in `pairs`
    dropped: dict = field(default_factory=dict)  # rank -> ((rail, forged, foreign), ...): the probe's


# a pair that failed for one of these failed for its node, not the fabric: when every pair did,
# nothing was tested, and the run's error is this host's kind (exit 3), not a test that failed
LOCAL_ENVIRONMENT = (Cause.ENVIRONMENT, Cause.MEMLOCK, Cause.DEVICE_LIMIT, Cause.AGENT)

# partners a node's figures contradict before it is named: more than f (blame.LIARS), or two
# liars whose counts or figures disagree with one innocent's got it named (issue 53)
MIN_CONTRADICTED = LIARS + 1


# pairs the summary (and Prometheus) list one by one: every pair of a run up to this many (the
# lab's 16 nodes x 2 rails are 240), beyond it only those with trouble (--matrix FILE has all)
LISTED_PAIRS = 2000


def inconsistent(ev: Evidence) -> list[int]:
    """The nodes whose figures contradict the ports of several partners: one partner alone
    could be the liar (it said a low rate for its own port); a node at odds with more than f
    partners that agree with everyone else is the one whose words are wrong."""
    return sorted(r for r, partners in ev.contradicted.items() if len(partners) >= MIN_CONTRADICTED)


def disagreeing(pairs: list[Pair]) -> dict[int, set[int]]:
    """Passing pairs whose two ends' counts or rates contradict each other (Pair.disagreement):
    their rates are set aside (the result stands) and each end is counted against the other;
    the one whose words are wrong contradicts all its partners, each of them only one node."""
    out: dict[int, set[int]] = {}
    for p in pairs:
        if p.disagreement() is not None:
            p.set_rates_aside()
            out.setdefault(p.a, set()).add(p.b)
            out.setdefault(p.b, set()).add(p.a)
    return out


def disputing(pairs: list[Pair]) -> dict[int, set[int]]:
    """Pairs one end failed while the other passed them cleanly (Pair.disputed): the failing
    end is counted against, each such partner once; a liar that fails several honest partners
    is named for inconsistent reports, and nobody is blamed for what it alone said."""
    out: dict[int, set[int]] = {}
    for p in pairs:
        accuser = p.disputed
        if accuser is not None:
            out.setdefault(accuser, set()).add(p.b if accuser == p.a else p.a)
    return out


def contradicting(ev: Evidence, more: dict[int, set[int]]) -> Evidence:
    """The evidence with more contradictions between nodes added to those already found."""
    if not more:
        return ev
    merged = {r: set(ps) for r, ps in ev.contradicted.items()}
    for r, ps in more.items():
        merged.setdefault(r, set()).update(ps)
    return replace(ev, contradicted={r: frozenset(ps) for r, ps in merged.items()})


def fill_ends(plan: Plan, ev: Evidence, pairs: list[Pair]) -> list[Pair]:
    """Copies of `pairs` whose unreported ends are filled with their own failure: a node whose
    agent never spoke (AGENT, in its launcher's words), an end that never reported its side
    (SILENT), or one cut at the run's end (AGENT). A pair passes only when both ends say so."""
    out = []
    for p in pairs:
        p = replace(p, reports=dict(p.reports))
        ends = ((p.a, "listen", p.b, p.ra, p.rb), (p.b, "connect", p.a, p.rb, p.ra))
        for rank, side, peer, rail, peer_rail in ends:  # agents that never spoke
            if side not in p.reports and rank not in ev.agents:
                error = _unreported(plan, ev, rank, p.round)
                p.reports[side] = PairRecord.failed(
                    plan.spec.run_id, rank, peer, p.round, error, rail, peer_rail
                )
        for rank, side, peer, rail, peer_rail in ends:  # then the end that stayed silent
            if len(p.reports) == 1 and side not in p.reports:
                error = _unreported(plan, ev, rank, p.round)
                p.reports[side] = PairRecord.failed(
                    plan.spec.run_id, rank, peer, p.round, error, rail, peer_rail
                )
        out.append(p)
    return out


def _unreported(plan: Plan, ev: Evidence, rank: int, rnd: int) -> dict:
    name = plan.spec.names[rank]
    if rank not in ev.agents:
        rc = ev.exits.get(name)
        why = " / ".join(ev.stderr.get(name, [])[-2:])
        message = f"the agent on {name} never reported" + (
            f" (exit status {rc})" if rc is not None else " (no exit status: timed out or never started)"
        )
        return RdmacliError(message + (f": {why}" if why else ""), cause=Cause.AGENT).to_dict()
    if rank in ev.late:
        return RdmacliError(
            f"{name}'s agent was still running {plan.grace_s():g} s after the schedule's end and was "
            f"stopped; it never reported its side of round {rnd}",
            cause=Cause.AGENT,
            hint="see that node's agent (hung, or its clock behind the coordinator's)",
        ).to_dict()
    return RdmacliError(
        f"{name} never reported its side of the pair in round {rnd}", cause=Cause.SILENT
    ).to_dict()


def judge(plan: Plan, ev: Evidence, params: dict, *, baseline: Sequence[BaselinePair] | None = None,
          signal: int | None = None, elapsed_ms: float = 0.0, matrix=None) -> Outcome:  # fmt: skip
    """The run's outcome: each pair's result (a re-test's, where one ran), slow pairs, blame,
    per-node and per-NIC tables, warnings and the one error that decides the exit code. The
    pairs listed are every pair up to LISTED_PAIRS, else those with trouble (failed, missing,
    slow, lossy, re-tested): what it holds and prints grows with nodes x rails and with trouble,
    not with pairs; `matrix(doc)`, when given, receives every pair's document as it is made."""
    firsts = sorted(fill_ends(plan, ev, ev.pairs), key=lambda p: (p.round, p.a, p.ra))
    by_key = {p.key: p for p in firsts}
    again = {
        p.key: replace(p, first=by_key[p.key])
        for p in fill_ends(plan, ev, [p for p in ev.retested if p.reports])
    }
    ev = contradicting(ev, disagreeing([*firsts, *again.values()]))  # before any rate is judged
    ev = contradicting(ev, disputing([again.get(p.key, p) for p in firsts]))
    healthy = ev.healthy
    total = len(firsts) + (len(healthy) if healthy is not None else 0)
    listed_all = total <= LISTED_PAIRS
    reference = judge_slow(firsts, plan.slow_factor, plan.slow_fraction, healthy=healthy)
    if healthy is not None:  # the probe's healthy pairs that are slow or too fast are pairs now
        keep = (lambda aligned, p50: False) if listed_all else within(reference, plan.slow_factor)
        firsts = sorted([*firsts, *healthy.take(plan.spec.run_id, keep)], key=lambda p: p.key)
        judge_slow(firsts, plan.slow_factor, plan.slow_fraction, reference)
    # contradictions of the fabric's own figures, beside those of the ports and the partners
    ev = contradicting(ev, implausible(firsts, reference, plan.slow_factor))
    judge_slow(list(again.values()), plan.slow_factor, plan.slow_fraction, reference)  # by the same best
    pairs = [again.get(p.key, p) for p in firsts]  # what counts: a re-test's result, if run
    devices = ev.devices
    pair_docs: list[PairResult] = []
    for first, p in zip(firsts, pairs):
        troubled = p is not first or p.result != "pass" or p.slow is not None or p.lossy
        if listed_all or troubled or matrix is not None:
            doc = _judged(plan, first, p, devices)
            if matrix is not None:
                matrix(doc)
            if listed_all or troubled:
                pair_docs.append(doc)
    if matrix is not None and healthy is not None:  # every pair, the healthy ones one at a time
        for k, *_ in healthy.rows():
            p = healthy.pair(k, plan.spec.run_id)
            matrix(_judged(plan, p, p, devices))
    spoke = frozenset(ev.agents)
    # an interrupted run blames on what both ends said before the stop, never on an end that had
    # no time to speak (Ctrl-C while the agents started named n1 a bad node)
    heard = {p.key for p in ev.pairs if len(p.reports) == 2} if signal is not None else None
    evidence = pairs if heard is None else [p for p in pairs if p.key in heard]
    verdict = blame(plan.n, evidence, plan.spec.names, plan.rails, devices, healthy, spoke)
    was_late = set(ev.late) | {
        e.reported_by
        for p in (*pairs, *firsts)
        if late(p, spoke) and (e := p.error()) is not None and e.reported_by is not None
    }
    nodes = []
    for row in node_table(plan.n, pairs, plan.spec.names, plan.spec.addresses, healthy):
        agent = ev.agents.get(row.rank)
        nodes.append(replace(
            row,
            agent="missing" if agent is None else "not ready" if not agent.ready
            else "late" if row.rank in was_late else "ran",
            group=plan.spec.groups[row.rank] if plan.spec.groups else None,
            violations=len(ev.violations.get(row.rank, [])),
            contradicted=tuple(sorted(plan.spec.names[r] for r in ev.contradicted.get(row.rank, ()))),
        ))  # fmt: skip
    failed = [p for p in pair_docs if p.result == "fail"]
    missing = [p for p in pair_docs if p.result == "missing"]
    retested = [d.retest.verdict for d in pair_docs if d.retest]
    totals = MeshTotals(
        nodes=plan.n,
        rounds=len(plan.rounds),
        retest_rounds=ev.retest_rounds,
        pairs_retested=len(retested),
        pairs_transient=retested.count("transient"),
        pairs=total,
        pairs_passed=sum(p.result == "pass" for p in pairs) + (len(healthy) if healthy is not None else 0),
        pairs_failed=len(failed),
        pairs_missing=len(missing),
        pairs_slow=sum(bool(p.slow) for p in pair_docs),
        rails=plan.rails,
        bad_nodes=len(verdict.nodes),
        bad_nics=len(verdict.nics),
        bad_links=len(verdict.links),
    )
    report = MeshReport(
        run_id=plan.spec.run_id,
        discovery_s=plan.discovery_s,
        agents_up_s=ev.agents_up_s,
        rails=plan.rails,
        cross_rail=plan.spec.cross_rail,
        nodes=tuple(nodes),
        nics=tuple(
            nic_table(plan.n, plan.rails, pairs, plan.spec.names, plan.spec.addresses, devices, healthy)
        ),
        pairs=pair_docs,
        pairs_listed="all" if listed_all else "trouble",
        # --test probe: pairs both ends said healthy compactly (records.HealthyRecord)
        pairs_compact=len(healthy.p50) if healthy is not None else None,
        slow_reference=reference,
        blame=verdict,
        liars_tolerated=LIARS,  # f: agents lying together that can blame nobody (blame.LIARS)
        liars_share=LIAR_SHARE,  # ... nor witnesses of a NIC no more than this share of its pairs
        baseline=compare(baseline, pair_docs) if baseline is not None else None,
        totals=totals,
        test=plan.spec.test,
    )
    error = None
    if signal is None:
        error = _error(plan, ev, pairs, total, verdict, failed, missing)
    return Outcome("mesh", params, error=error, signal=signal, counts=totals.to_json(), report=report,
                   elapsed_ms=elapsed_ms, warnings=warnings(plan, ev, pair_docs))  # fmt: skip


def _judged(plan: Plan, first: Pair, p: Pair, devices) -> PairResult:
    """The pair as reported: its re-test's result where it had one (`p`), in its first round."""
    d = replace(p.judged(plan.spec.names, devices), round=first.round)
    if p is first:
        return d
    # confirmed: failed (or was slow) again; transient: passed this time
    verdict = "confirmed" if p.bad else "transient"
    first_cause = first.cause or _passed_with(first)
    return replace(d, retest=Retest(p.round, verdict, first.result, first_cause, first.error(), first.slow))


def _passed_with(p: Pair) -> str | None:
    """What was wrong with a pair that passed: slow, or lossy (a loss counter moved)."""
    return "SLOW" if p.slow else "LOSS" if p.lossy else None


def warnings(plan: Plan, ev: Evidence, pair_docs: list[PairResult]) -> list[str]:
    out = []
    for rank, what in sorted(ev.violations.items()):
        out.append(
            f"{plan.spec.names[rank]}'s agent sent {len(what)} record(s) it may not; none was used "
            f"(first: {what[0]})"
        )
    for rank in inconsistent(ev):
        partners = sorted(plan.spec.names[r] for r in ev.contradicted[rank])
        out.append(
            f"{plan.spec.names[rank]}: inconsistent reports: its words of its pairs with "
            f"{len(partners)} partners cannot be true ({', '.join(partners[:8])}: figures above their "
            "ports' line rates, at odds with what the partners counted or far faster than the rest "
            "of the fabric, or failures the partners' clean passes contradict); they judged "
            "nobody, the pairs' results stand"
        )
    words = said.margin(plan, ev.slowest)
    if words:
        out.append(words)
    if ev.late:
        out.append(
            f"the run was cut {plan.grace_s():g} s after the schedule's end: agent(s) still "
            f"running on {', '.join(plan.spec.names[r] for r in sorted(ev.late))} were stopped"
        )
    if ev.abandoned:
        out.append(
            "some agent processes did not exit even when killed (a process held in the kernel, such "
            "as rdma_destroy_id waiting out its disconnect's retries on a cut link): the run ended "
            "without them; check those nodes for leftover rdmacli mesh-agent processes"
        )
    transient = [d for d in pair_docs if d.retest and d.retest.verdict == "transient"]
    if transient:
        out.append(
            f"{len(transient)} pair(s) failed, were slow or lost packets once and passed cleanly when "
            f"tested again at the end (transient: counted as passed): "
            f"{', '.join(d.a + '-' + d.b for d in transient[:8])}"
        )
    if ev.ignored:
        out.append(f"{ev.ignored} agent output line(s) were not records of this run and were ignored")
    out += said.dropped_words(plan, ev.dropped)
    return out


def _error(plan: Plan, ev: Evidence, pairs, total: int, verdict, failed, missing) -> RdmacliError | None:
    """The one error of a run that was not stopped: its cause decides the exit code."""
    if not ev.agents:
        return RdmacliError(
            "no agent ran on any node",
            hint="check that rdmacli is installed on the nodes and the launcher works "
            "(ssh: keys and host names; srun: an allocation); see data.nodes",
            cause=Cause.AGENT,
        )
    local = {c.value for c in LOCAL_ENVIRONMENT}
    errors = [p.error for p in failed]
    if failed and len(failed) == total and all(e is not None and e.cause in local for e in errors):
        first = next((e.message for e in errors if e is not None and e.message is not None), None)
        return RdmacliError(
            "no node could run the test: every pair failed for its nodes' own environment"
            + (f" ({first[:200]})" if first else ""),
            hint="on the nodes, `rdmacli doctor` says what is missing (an RDMA device, a port ACTIVE "
            "with an address, memlock)",
            cause=Cause.ENVIRONMENT,
        )
    if failed:
        causes: dict[str, int] = {}
        for p in failed:
            causes[str(p.cause)] = causes.get(str(p.cause), 0) + 1
        words = ", ".join(f"{n} {c}" for c, n in sorted(causes.items(), key=lambda kv: -kv[1]))
        return RdmacliError(
            f"{len(failed)} of {total} pairs failed ({words})",
            hint="see the blame: a bad NIC or node fails with most partners, a bad link fails alone",
            cause=Cause.CHECK_FAILED,
        )
    if verdict.named:  # passed, yet named
        who = ", ".join(verdict.names())
        if any(p.lossy or (p.first is not None and p.first.lossy) for p in pairs):
            lost = sum(p.lost() for p in pairs)
            what = f"{lost} probes were lost" if lost else "the NICs' counters show trouble"
            return RdmacliError(f"every pair passed, but {what} on {who}", hint=ADVICE["loss"],
                                cause=Cause.PACKET_LOSS)  # fmt: skip
        slow = [p for p in pairs if p.slow]
        if slow:
            return RdmacliError(
                f"every pair passed, but {len(slow)} were slower than the fabric's best "
                f"(x{plan.slow_factor:g} latency, {plan.slow_fraction:g} of the bandwidth): {who}",
                hint="see data.pairs[].slow for the figures judged; a slow NIC or node: its "
                "link speed, PCIe slot, firmware, or congestion on its switch port",
                cause=Cause.SLOW,
            )
        return RdmacliError(
            f"every pair passed when tested again, but {who} failed first with most partners",
            hint="an intermittent fault: see data.pairs[].retest for the first attempts",
            cause=Cause.CHECK_FAILED,
        )
    liars = inconsistent(ev)
    if liars:  # every pair passed, but a node's figures contradict its partners': not clean
        return RdmacliError(
            f"every pair passed, but the figures of {', '.join(plan.spec.names[r] for r in liars[:8])} "
            "cannot be true (inconsistent reports, set aside)",
            hint="see the warnings: a node whose agent lies or is broken (another rdmacli version, "
            "a port rate misread) cannot be trusted until it is looked at",
            cause=Cause.INCONSISTENT,
        )
    if ev.violations:  # every pair passed, but an agent said what it may not: not a clean pass
        who = ", ".join(plan.spec.names[r] for r in sorted(ev.violations)[:8])
        return RdmacliError(
            f"every pair passed, but the agent(s) on {who} sent records they may not (none was used)",
            hint="see the warnings: a node whose agent lies or is broken (another rdmacli version, "
            "a wrapper printing to stdout) cannot be trusted until it is looked at",
            cause=Cause.PEER_PROTOCOL,
        )
    if missing:
        return RdmacliError(
            f"incomplete: {len(missing)} of {total} pairs were never reported",
            hint="the run ended before every round did; raise --launch-timeout or --round-time",
            cause=Cause.MISSING,
        )
    return None
