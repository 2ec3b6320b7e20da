"""Mesh runs as data for the unit tests: plans, an end's report, the verdict of an intake."""

from __future__ import annotations

from rdmacli.mesh import verdict
from rdmacli.mesh.checks import ports_copy
from rdmacli.mesh.contract import RunSpec
from rdmacli.mesh.findings import ErrorDoc
from rdmacli.mesh.plan import Plan
from rdmacli.mesh.records import PairRecord

RUN = "ab" * 8


def make_plan(names, addresses, *, cross: bool = False, retest_rounds: int = 0, **spec) -> Plan:
    """A plan whose schedule starts a second from now, as the coordinator makes one."""
    spec = RunSpec(run_id=RUN, names=names, addresses=addresses, round_s=1, port=7490, count=5,
                   cross_rail=cross, **spec)  # fmt: skip
    return Plan.start(spec, nodes_spec=",".join(names), launch_s=1, retest_rounds=retest_rounds)


def report(rank: int, peer: int, result: str = "pass", error: dict | None = None, rnd: int = 0, **figures):
    """One end's report of a pair, as the intake keeps it (its ports' counters typed as the
    intake types them)."""
    if "counters" in figures:
        figures["counters"] = ports_copy(figures["counters"])
    said = ErrorDoc.of(error) if error is not None else None
    return PairRecord(run=RUN, rank=rank, peer=peer, round=rnd, result=result, error=said, **figures)


def judged(plan: Plan, intake, *, cut: bool = False, **kw):
    """The verdict of what an intake took in, as the run loop asks for it at the end."""
    return verdict.judge(plan, intake.evidence(cut=cut), {}, elapsed_ms=1000.0, **kw)


def parse_metrics(text: str) -> dict:
    """Samples by (name, sorted labels), read back with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def pair_result(a: str, b: str, result: str = "pass", cause: str | None = None, **figures):
    """A pair as the verdict reports it (findings.PairResult), rail 0 to rail 0."""
    from rdmacli.mesh.findings import FIGURES, PairResult

    return PairResult(a=a, b=b, a_rank=0, b_rank=1, rail_a=0, rail_b=0, device_a=None, device_b=None, round=0,
                      result=result, cause=cause, error=None, slow=None,
                      figures=tuple(figures.get(k) for k in FIGURES))  # fmt: skip
