"""What a fabric check found, as types: the pairs, the blame, the node and NIC rows (the mesh's
report that holds them: meshreport.py).

The verdict (verdict.judge) and blame (blame.blame) make these; the renderers, the scheduler's
drain and the exporters read their fields. Each type writes its own JSON (`to_json`), the one
place its document's keys and their order are said: the summary's `data` is written from them
at the edge (outcome.Outcome.to_dict), and the documented schema is what these methods make
(tests/unit/test_golden.py holds the bytes). Nothing here judges; it holds what was judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Culprit:
    """A bad node (`rail` None: every rail of it bad) or a bad NIC: how many of its tested
    pairs failed (or were slow or lossy), their causes, and the trouble counters of those
    pairs, both ends' (`counters`) and its own port's alone (`own_counters`)."""

    node: str
    rank: int
    failed: int
    tested: int
    causes: Mapping[str, int]
    rail: int | None = None
    counters: Mapping[str, int] = field(default_factory=dict)
    own_counters: Mapping[str, int] = field(default_factory=dict)
    device: str | None = None  # a NIC's RDMA device, where the agents said it

    @property
    def nic(self) -> bool:
        return self.rail is not None

    def name(self) -> str:
        """As people read it: n03, or n03:1 (mlx5_1) for a NIC."""
        if self.rail is None:
            return self.node
        return f"{self.node}:{self.rail}" + (f" ({self.device})" if self.device else "")

    def to_json(self) -> Json:
        d: Json = {"node": self.node, "rank": self.rank}
        if self.rail is not None:
            d["rail"] = self.rail
        d.update(failed=self.failed, tested=self.tested, causes=dict(self.causes))
        if self.counters:
            d["counters"] = dict(self.counters)
        if self.own_counters:
            d["own_counters"] = dict(self.own_counters)
        if self.rail is not None:
            d["device"] = self.device
        return d


@dataclass(frozen=True)
class End:
    """One end of a pair as the blame names it: its node, and with several rails its rail and
    device (`rail` None on a one-rail fabric, where the node is the NIC)."""

    node: str
    rail: int | None = None
    device: str | None = None

    def name(self) -> str:
        return self.node if self.rail is None else f"{self.node}:{self.rail}"


@dataclass(frozen=True)
class ErrorDoc:
    """An end's error as its agent sent it (RdmacliError.to_dict, checked by error_doc): its words
    and its cause read once, here, and the document kept whole for the summary's JSON."""

    message: str
    cause: str | None
    doc: Mapping[str, Any]

    @classmethod
    def of(cls, d: Mapping[str, Any]) -> ErrorDoc:
        """A checked document's (or one of the coordinator's own errors, to_dict)."""
        cause = d.get("cause")
        return cls(d["message"], cause if isinstance(cause, str) else None, d)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.doc)


@dataclass(frozen=True)
class PairError:
    """A pair's most telling error: the document its end sent (RdmacliError.to_dict, as intake
    checked it), its code for the matrix, which rank and side said it, and the code the end
    reported when the mesh explains it otherwise (a transfer that failed while both ends' loss
    counters moved: LOSS, not FAIL). `doc` is that end's own; the rest is the mesh's."""

    doc: ErrorDoc
    code: str
    reported_by: int | None = None
    side: str | None = None
    reported_code: str | None = None

    @property
    def message(self) -> str:
        """The end's words."""
        return self.doc.message

    @property
    def cause(self) -> str | None:
        """The end's own cause (errors.Cause's value), as it said it."""
        return self.doc.cause

    def to_json(self) -> Json:
        d: Json = {**self.doc.doc, "code": self.code}
        if self.reported_by is not None:
            d.update(reported_by=self.reported_by, side=self.side)
        if self.reported_code is not None:
            d["reported_code"] = self.reported_code
        return d


@dataclass(frozen=True)
class Slow:
    """Why a passing pair is slow: its figure (rtt_p50_us, or a direction's gbps_ab or gbps_ba),
    its value, the best comparable pair's and the limit it crossed (blame.judge_slow)."""

    figure: str
    value: float
    best: float
    limit: float

    def to_json(self) -> Json:
        return {"figure": self.figure, "value": self.value, "best": self.best, "limit": self.limit}


@dataclass(frozen=True)
class BadPair:
    """A pair still bad whose NICs are not blamed: a bad link (both NICs pass elsewhere), an
    unexplained one (too few passing pairs to tell), or disputed (`failed_by`: the one end
    that failed it while the other passed it cleanly; blamed on nobody)."""

    a: End
    b: End
    cause: str
    failed_by: str | None = None
    counters: Mapping[str, int] | None = None  # a lossy pair's: what moved (empty: probes lost)
    slow: Slow | None = None

    def name(self) -> str:
        return f"{self.a.name()}-{self.b.name()}"

    def to_json(self) -> Json:
        d: Json = {"a": self.a.node, "b": self.b.node, "cause": self.cause}
        if self.a.rail is not None and self.b.rail is not None:
            d.update(rail_a=self.a.rail, rail_b=self.b.rail, device_a=self.a.device, device_b=self.b.device)
        if self.failed_by is not None:
            d["failed_by"] = self.failed_by
            return d
        if self.counters is not None:
            d["counters"] = dict(self.counters)
        if self.slow:
            d["slow"] = self.slow.to_json()
        return d


@dataclass(frozen=True)
class ClassReference:
    """What one class of pairs (rail-aligned or cross-rail) is judged slow against: how many
    passed, the best p50 that stands without any one node's word and the limit from it, the
    typical p50, the fabric's jitter (typical p99 over typical p50), the fastest round trip and
    its limit, and for bw the best rate and its limit. None: not measured in this run."""

    pairs: int = 0
    rtt_p50_us: float | None = None
    limit_us: float | None = None
    rtt_p50_median_us: float | None = None
    jitter: float | None = None
    rtt_min_us: float | None = None
    min_limit_us: float | None = None
    gbps: float | None = None
    limit_gbps: float | None = None

    def to_json(self) -> Json:
        return {k: v for k, v in vars(self).items() if v is not None}


NO_REFERENCE = ClassReference()


@dataclass(frozen=True)
class SlowReference:
    """The run's references, a class each (absent: too few pairs of that class passed)."""

    aligned: ClassReference | None = None
    cross: ClassReference | None = None

    def of(self, aligned: bool) -> ClassReference:
        """The reference of a pair's class (NO_REFERENCE when it has none: nothing is slow)."""
        return (self.aligned if aligned else self.cross) or NO_REFERENCE

    def to_json(self) -> Json:
        return {
            k: v.to_json() for k, v in (("aligned", self.aligned), ("cross", self.cross)) if v is not None
        }


@dataclass(frozen=True)
class Retest:
    """A pair tested again at the run's end: its round, and what its first attempt said.
    Confirmed: failed (or was slow or lossy) again; transient: passed this time."""

    round: int
    verdict: str  # confirmed or transient
    first_result: str
    first_cause: str | None
    first_error: PairError | None
    first_slow: Slow | None

    def to_json(self) -> Json:
        first: Json = {
            "result": self.first_result,
            "cause": self.first_cause,
            "error": self.first_error.to_json() if self.first_error else None,
            "slow": self.first_slow.to_json() if self.first_slow else None,
        }
        return {"round": self.round, "verdict": self.verdict, "first": first}


# a pair's figures, each the connector's (or the calmer end's round trips; verdict: Pair.metric)
FIGURES = ("setup_us", "rtt_p50_us", "rtt_p99_us", "rtt_avg_us", "rtt_min_us", "host_rtt_p50_us")


@dataclass(frozen=True)
class PairResult:
    """One pair of NICs as the run judged it: rail `rail_a` of node `a` (the lower rank, it
    listened) and rail `rail_b` of `b`; pass, fail or missing, its short cause (the matrix's
    code), the error that says it, slow's figures where it passed slow, and its figures. A
    direction's rate is present only with `--test bw`, the probes' counts only with `--test
    probe`; `counters` are the trouble counters that moved, per end."""

    a: str
    b: str
    a_rank: int
    b_rank: int
    rail_a: int
    rail_b: int
    device_a: str | None
    device_b: str | None
    round: int
    result: str
    cause: str | None
    error: PairError | None
    slow: Slow | None
    figures: tuple[float | None, ...]  # FIGURES, in order
    steps_us: Any = None
    gbps_ab: float | None = None
    gbps_ba: float | None = None
    probes: tuple[int, int] | None = None  # (sent, answered), both ends'
    counters: Mapping[str, Mapping[str, int]] | None = None
    retest: Retest | None = None

    def figure(self, name: str) -> float | None:
        return self.figures[FIGURES.index(name)]

    @property
    def rtt_p50_us(self) -> float | None:
        return self.figures[1]

    @property
    def bw(self) -> bool:
        return self.gbps_ab is not None or self.gbps_ba is not None

    def nics(self) -> frozenset[tuple[str, int]]:
        """The pair of NICs, (node, rail) at each end, in no order."""
        return frozenset(((self.a, self.rail_a), (self.b, self.rail_b)))

    def to_json(self) -> Json:
        d: Json = {"a": self.a, "b": self.b, "a_rank": self.a_rank, "b_rank": self.b_rank,
                   "rail_a": self.rail_a, "rail_b": self.rail_b, "device_a": self.device_a,
                   "device_b": self.device_b, "round": self.round, "result": self.result, "cause": self.cause,
                   "error": self.error.to_json() if self.error else None,
                   "slow": self.slow.to_json() if self.slow else None}  # fmt: skip
        d.update(zip(FIGURES, self.figures))
        d["steps_us"] = self.steps_us
        if self.gbps_ab is not None:
            d["gbps_ab"] = self.gbps_ab
        if self.gbps_ba is not None:
            d["gbps_ba"] = self.gbps_ba
        if self.probes is not None:
            d.update(zip(("probes_sent", "probes_answered"), self.probes))
        d["counters"] = self.counters
        d["retest"] = self.retest.to_json() if self.retest is not None else None
        return d


@dataclass(frozen=True)
class Blame:
    """Who is bad, and what stays unexplained or disputed (mesh/blame.py decides)."""

    nodes: tuple[Culprit, ...] = ()
    nics: tuple[Culprit, ...] = ()
    links: tuple[BadPair, ...] = ()
    unexplained: tuple[BadPair, ...] = ()
    disputed: tuple[BadPair, ...] = ()

    @property
    def named(self) -> bool:
        """A node, NIC or link is blamed (the unexplained and disputed name nobody)."""
        return bool(self.nodes or self.nics or self.links)

    def names(self) -> list[str]:
        """The blamed nodes, NICs and links, as people read them (n03, n03:1 (mlx5_1), n01-n04)."""
        return [
            *(b.name() for b in self.nodes),
            *(b.name() for b in self.nics),
            *(x.name() for x in self.links),
        ]

    def culprits(self) -> list[tuple[str, str, list[str]]]:
        """(node, what: "node" or "rail 1 (mlx5_1)", its causes most first) of each blamed node
        and NIC: what a scheduler's drain says (sched/drain.py)."""
        out = []
        for b in (*self.nodes, *self.nics):
            what = "node" if b.rail is None else f"rail {b.rail}" + (f" ({b.device})" if b.device else "")
            out.append((b.node, what, [c for c, _ in sorted(b.causes.items(), key=lambda kv: -kv[1])]))
        return out

    def pair_ends(self) -> set[str]:
        """The nodes of the pairs both ends' results name (links, unexplained): not cleared. A
        disputed pair, one end's word alone, holds no one (a liar would keep an innocent drained)."""
        return {n for x in (*self.links, *self.unexplained) for n in (x.a.node, x.b.node)}

    def to_json(self) -> Json:
        return {
            "nodes": [b.to_json() for b in self.nodes],
            "nics": [b.to_json() for b in self.nics],
            "links": [x.to_json() for x in self.links],
            "unexplained": [x.to_json() for x in self.unexplained],
            "disputed": [x.to_json() for x in self.disputed],
        }


@dataclass(frozen=True)
class Tally:
    """Pairs a node or NIC took part in, by how they ended (the probe's healthy ones counted
    among the passed)."""

    passed: int = 0
    failed: int = 0
    missing: int = 0
    slow: int = 0

    def tested(self) -> int:
        return self.passed + self.failed + self.missing

    def to_json(self) -> Json:
        return {"passed": self.passed, "failed": self.failed, "missing": self.missing, "slow": self.slow}


@dataclass(frozen=True)
class NodeRow:
    """One node of the run: its pairs' tally, the median p99 of its passing pairs, how its
    agent fared (ran, late, not ready, missing), what it sent that it may not, and the
    partners its figures contradict."""

    node: str
    rank: int
    addresses: tuple[str, ...]
    tally: Tally
    p99_us: float | None
    agent: str = "ran"
    group: str | None = None
    violations: int = 0
    contradicted: tuple[str, ...] = ()

    def to_json(self) -> Json:
        return {"node": self.node, "rank": self.rank, "address": self.addresses[0],
                "addresses": list(self.addresses), **self.tally.to_json(), "p99_us": self.p99_us,
                "agent": self.agent, "group": self.group, "violations": self.violations,
                "contradicted": list(self.contradicted)}  # fmt: skip


@dataclass(frozen=True)
class NicRow:
    """One NIC (node, rail): its pairs' tally and the median p50 of its passing pairs."""

    node: str
    rank: int
    rail: int
    device: str | None
    address: str
    tally: Tally
    p50_us: float | None

    def to_json(self) -> Json:
        return {"node": self.node, "rank": self.rank, "rail": self.rail, "device": self.device,
                "address": self.address, **self.tally.to_json(), "p50_us": self.p50_us}  # fmt: skip
