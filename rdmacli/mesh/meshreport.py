"""A mesh run's report as one type: what the summary's `data` and `totals` are written from.

verdict.judge makes it from the pairs, rows and blame of findings.py; the text, the JSON, the
Prometheus file and the scheduler's drain read it. Its documents' keys and order are said here
once (tests/unit/test_golden.py holds the bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rdmacli.mesh.findings import Blame, Json, NicRow, NodeRow, PairResult, SlowReference


@dataclass(frozen=True)
class Change:
    """A pair that started failing or got slower since a baseline run (`--baseline`)."""

    a: str
    b: str
    change: str  # "now failing", or which figure from what to what
    cause: str | None = None  # a failing pair's

    def to_json(self) -> Json:
        return {"a": self.a, "b": self.b, "change": self.change, "cause": self.cause}


@dataclass(frozen=True)
class MeshTotals:
    """A mesh run's counts: the summary's `totals` (written at the edge from `to_json`)."""

    nodes: int
    rounds: int
    retest_rounds: int
    pairs_retested: int
    pairs_transient: int
    pairs: int
    pairs_passed: int
    pairs_failed: int
    pairs_missing: int
    pairs_slow: int
    rails: int
    bad_nodes: int
    bad_nics: int
    bad_links: int

    def to_json(self) -> Json:
        return asdict(self)


@dataclass(frozen=True)
class MeshReport:
    """A mesh run's report: the summary's `data` (docs/reference: the mesh's JSON). `pairs`
    are the pairs' documents as listed (every pair of a small run, those with trouble of a
    large one: verdict.LISTED_PAIRS); `baseline` the changes since an earlier run's summary."""

    run_id: str
    discovery_s: float | None
    agents_up_s: float | None
    rails: int
    cross_rail: bool
    nodes: tuple[NodeRow, ...]
    nics: tuple[NicRow, ...]
    pairs: Sequence[PairResult]
    pairs_listed: str
    pairs_compact: int | None
    slow_reference: SlowReference
    blame: Blame
    liars_tolerated: int
    liars_share: float
    baseline: Sequence[Change] | None = None
    totals: MeshTotals | None = None  # the summary's totals, not its data
    test: str = ""  # the check that ran (mesh.kinds' row; its name is in the summary's params)

    def to_json(self) -> Json:
        d: Json = {
            "run_id": self.run_id,
            "discovery_s": self.discovery_s,
            "agents_up_s": self.agents_up_s,
            "rails": self.rails,
            "cross_rail": self.cross_rail,
            "nodes": [r.to_json() for r in self.nodes],
            "nics": [r.to_json() for r in self.nics],
            "pairs": [p.to_json() for p in self.pairs],
            "pairs_listed": self.pairs_listed,
            "pairs_compact": self.pairs_compact,
            "slow_reference": self.slow_reference.to_json(),
            "blame": self.blame.to_json(),
            "liars_tolerated": self.liars_tolerated,
            "liars_share": self.liars_share,
        }
        if self.baseline is not None:
            d["baseline"] = [c.to_json() for c in self.baseline]
        return d
