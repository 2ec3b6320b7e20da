"""What an agent may say: each record's type, declared once, and the checks it passes on the way in.

An agent prints typed records (`to_dict`); the coordinator reads them back with `parse_record`,
whose constructors are the checks below. An agent is trusted for its own node only, and only
for records of the right shape: types, ranges and sizes are checked here, and what is used is
copied out (a record's other keys never reach the report). A record that fails is a protocol
violation of the node that sent it. The checks themselves are in
checks.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable

from rdmacli.figures import RTT_FLOOR_US
from rdmacli.mesh.checks import (  # noqa: F401 - MAX_LINE, OVERLONG, RATES, RATE_SLACK: said here too
    FIGURES,
    MAX_INT,
    MAX_LINE,
    OVERLONG,
    RATE_SLACK,
    RATES,
    _figure,
    _int,
    check_pair,
    pair_copy,
)
from rdmacli.mesh.contract import MAX_RAILS, bounded_json, float_in, int_in, side_of

if TYPE_CHECKING:
    from rdmacli.probe.phase import ProbeEnd


class Typed:
    """A record's wire form: its type, then its fields (a record may say more: PairRecord)."""

    TYPE = ""

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}  # type: ignore[call-overload]  # each one is a dataclass


class Violation(ValueError):
    """A record its sender may not send; the words name what was wrong."""


def _rank_of(d: dict) -> int:
    rank = d.get("rank")
    if not (isinstance(rank, int) and not isinstance(rank, bool)):
        raise Violation("a record without a rank")
    return rank


@dataclass(frozen=True)
class RailState:
    """One rail as its agent found it before round 1."""

    rail: int
    address: str
    device: str | None
    port: int
    ready: bool
    rate_gbps: float | None = None  # the line rate of its RDMA port (sysfs), the bound of its pairs


@dataclass(frozen=True)
class AgentRecord(Typed):
    """It is up: which node, its rails and whether each can run pairs."""

    TYPE = "agent"
    run: str
    rank: int
    node: str
    address: str
    rails: tuple[RailState, ...]
    ready: bool
    host: str = ""
    pid: int = 0
    clock: float = 0.0
    rounds: int = 0

    @classmethod
    def parse(cls, d: dict) -> AgentRecord:
        from rdmacli.mesh.rails import DEVICE

        rails = d.get("rails", [])
        if not (
            isinstance(rails, list) and len(rails) <= MAX_RAILS and all(isinstance(r, dict) for r in rails)
        ):
            raise Violation("an agent record whose rails are not a list of objects")
        states = []
        for k, r in enumerate(rails):
            dev = r.get("device")
            states.append(
                RailState(
                    rail=k,
                    address=_text(r.get("address"), 64),
                    device=dev if isinstance(dev, str) and DEVICE.fullmatch(dev) else None,
                    port=r["port"] if int_in(0, 65535)(r.get("port")) else 0,
                    ready=r.get("ready") is not False,
                    rate_gbps=r["rate_gbps"] if _figure(r.get("rate_gbps"), FIGURES["gbps_ab"]) else None,
                )
            )
        return cls(
            run=d["run"], rank=_rank_of(d), node=_text(d.get("node"), 253),
            address=_text(d.get("address"), 64),
            rails=tuple(states), ready=d.get("ready") is not False, host=_text(d.get("host"), 253),
            pid=_or(d, "pid", int_in(0, 2**31), 0), clock=_or(d, "clock", float_in(0, 2**40), 0.0),
            rounds=_or(d, "rounds", int_in(0, 10**6), 0),
        )  # fmt: skip

    def ready_rails(self, rails: int) -> list[int]:
        """The rails it said can run pairs: per rail where it said so for each, else by its
        word for the node (a reason not to re-test, never a verdict)."""
        if len(self.rails) == rails:
            return [s.rail for s in self.rails if s.ready]
        return list(range(rails)) if self.ready else []


def _or(d: dict, key: str, valid: Callable[[Any], bool], default: Any) -> Any:
    """A field an agent may leave out or get wrong without harm: its value when valid, else
    `default` (what is wrong with it is not its sender's violation, only not used)."""
    v = d.get(key)
    return v if valid(v) else default


def _text(v, limit: int) -> str:
    """A word an agent said, for people: printable, bounded; anything else is empty."""
    if not isinstance(v, str):
        return ""
    return "".join(ch for ch in v[:limit] if ch.isprintable())


@dataclass(frozen=True)
class PairRecord(Typed):
    """One end's report of one test with one partner's NIC. `error` is an RdmacliError's
    document; the latency figures are the connector's; with `--test bw` each end gives the
    rate of the stream that came to it (the listener a's gbps_ba, the connector b's gbps_ab),
    the rate it sent at (gbps_sent) and its counts both ways; with `--test probe` each end its
    own probes to the partner and how many were answered."""

    TYPE = "pair"
    run: str
    rank: int
    peer: int
    round: int
    result: str  # pass or fail
    rail: int = 0
    peer_rail: int = 0
    slot: int | None = None
    error: dict | None = None
    retest: bool = False
    took_s: float | None = None  # of its slot, torn down too (the agent's measure)
    setup_us: float | None = None
    rtt_p50_us: float | None = None
    rtt_p99_us: float | None = None
    rtt_avg_us: float | None = None
    host_rtt_p50_us: float | None = None
    rtt_min_us: float | None = None  # the fastest round trip: the wire's, least touched by the hosts
    gbps_ab: float | None = None
    gbps_ba: float | None = None
    gbps_sent: float | None = None
    messages_sent: int | None = None
    messages_received: int | None = None
    probes_sent: int | None = None
    probes_answered: int | None = None
    steps_us: dict | None = None
    stats: dict | None = None
    counters: tuple[dict, ...] = ()

    @property
    def side(self) -> str:
        return side_of(self.rank, self.peer)

    def to_dict(self) -> dict:
        d = {"type": self.TYPE, **{f.name: getattr(self, f.name) for f in fields(self)}}
        d["counters"] = list(self.counters) or None
        d["side"] = self.side
        d["a"], d["b"] = sorted((self.rank, self.peer))
        return {k: v for k, v in d.items() if v is not None or k in ("error", "result")}

    @classmethod
    def parse(cls, d: dict) -> PairRecord:
        why = check_pair(d)
        if why:
            raise Violation(f"a pair record whose {why}")
        if not (d.get("slot") is None or int_in(0, 10**6)(d.get("slot"))):
            raise Violation("a pair record whose slot is not a number")
        copy = pair_copy(d)
        copy.pop("type", None)
        copy["counters"] = tuple(copy.get("counters") or ())
        copy["retest"] = d.get("retest") is True
        return cls(**copy)

    def healthy_figures(self) -> tuple[float | None, ...]:
        """Its round trips as a healthy record says them (HEALTHY_FIGURES' order)."""
        return (self.rtt_p50_us, self.rtt_p99_us, self.host_rtt_p50_us, self.rtt_min_us)

    @classmethod
    def of_probe(cls, run: str, rank: int, end: ProbeEnd) -> PairRecord:
        """A probe phase's end of a test (probe.phase.ProbeEnd) as the agent says it."""
        return cls(run=run, rank=rank, peer=end.peer, round=0, result=end.result, rail=end.rail,
                   peer_rail=end.peer_rail, slot=0, error=end.error.to_dict() if end.error else None,
                   counters=end.counters, **end.figures.to_dict())  # fmt: skip

    @classmethod
    def failed(cls, run: str, rank: int, peer: int, rnd: int, error: dict, rail: int = 0,
               peer_rail: int = 0) -> PairRecord:  # fmt: skip
        """An end's failure the coordinator fills in (a missing agent, a silent end)."""
        return cls(run=run, rank=rank, peer=peer, round=rnd, result="fail", error=error, rail=rail,
                   peer_rail=peer_rail)  # fmt: skip


HEALTHY_ENTRIES = 1024  # partners of one healthy record: a line of tens of KB, under MAX_LINE
HEALTHY_FIGURES = ("rtt_p50_us", "rtt_p99_us", "host_rtt_p50_us", "rtt_min_us")


@dataclass(frozen=True)
class HealthyRecord(Typed):
    """`mesh --test probe`: one NIC's healthy partners at once, compactly (what grows with pairs
    is four figures a partner). Entry i stands for the test at `first + i` of the NIC's
    tests in the schedule's order (schedule.Schedule.nic_tests): that pair passed, each of
    its `probes` probes answered, with these round trips; null where the pair had trouble and
    has a pair record of its own. Up to HEALTHY_ENTRIES entries a record."""

    TYPE = "healthy"
    run: str
    rank: int
    rail: int
    round: int
    first: int
    probes: int
    rtt_p50_us: tuple = ()
    rtt_p99_us: tuple = ()
    host_rtt_p50_us: tuple = ()
    rtt_min_us: tuple = ()

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **{f.name: getattr(self, f.name) for f in fields(self)}}

    def entries(self):
        """(index in the NIC's tests, p50, p99, host p50, min) of each healthy partner it names."""
        figures = zip(self.rtt_p50_us, self.rtt_p99_us, self.host_rtt_p50_us, self.rtt_min_us)
        for i, (p50, p99, host, low) in enumerate(figures):
            if p50 is not None:
                yield self.first + i, p50, p99, host, low

    @classmethod
    def parse(cls, d: dict) -> HealthyRecord:
        for key in ("rail", "round", "first", "probes"):
            if not (_int(d.get(key)) and 0 <= d[key] <= MAX_INT):
                raise Violation(f"a healthy record whose {key} is not a count")
        cols: list[Any] = [d.get(k) for k in HEALTHY_FIGURES]
        if not all(isinstance(c, list) and len(c) <= HEALTHY_ENTRIES for c in cols):
            raise Violation(f"a healthy record whose figures are not lists of {HEALTHY_ENTRIES} at most")
        if len({len(c) for c in cols}) != 1:
            raise Violation("a healthy record whose figure lists differ in length")
        low, high, number = RTT_FLOOR_US, FIGURES["rtt_p50_us"], (int, float)
        for p50, p99, host, least in zip(*cols):  # _rtts' rules, inline: millions of entries at fleet size
            if p50 is None and p99 is None and host is None and least is None:
                continue
            if not (type(p50) in number and type(p99) in number and type(host) in number
                    and type(least) in number and low <= least <= p50 <= p99 <= high
                    and p50 <= host <= high):  # fmt: skip
                raise Violation(
                    f"a healthy record with an entry that is no round trip ({low:g} µs <= min <= p50 <= "
                    f"p99, p50 <= host p50, none above {high:g})"
                )
        return cls(run=d["run"], rank=_rank_of(d), rail=d["rail"], round=d["round"], first=d["first"],
                   probes=d["probes"], **{k: tuple(c) for k, c in zip(HEALTHY_FIGURES, cols)})  # fmt: skip


@dataclass(frozen=True)
class RailsRecord(Typed):
    """Discovery: the rails this node found (checked by rails.check_report against the family)."""

    TYPE = "rails"
    run: str
    rank: int
    rails: list = field(default_factory=list)

    @classmethod
    def parse(cls, d: dict) -> RailsRecord:
        rails = d.get("rails")
        if not isinstance(rails, list) or len(rails) > 4 * MAX_RAILS:
            raise Violation("a rails record whose rails are not a list")
        return cls(run=d["run"], rank=_rank_of(d), rails=rails)


@dataclass(frozen=True)
class DoneRecord(Typed):
    """Its schedule is over."""

    TYPE = "done"
    run: str
    rank: int
    failed: int = 0
    # the probe's NICs that dropped datagrams: (rail, with a wrong tag, from another QP than SIDR
    # named), none for a NIC that dropped none
    dropped: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def parse(cls, d: dict) -> DoneRecord:
        failed = d.get("failed", 0)
        dropped = d.get("dropped", ())
        count, rail = int_in(0, MAX_INT), int_in(0, MAX_RAILS - 1)
        if (
            not isinstance(dropped, (list, tuple))
            or len(dropped) > MAX_RAILS
            or not all(
                isinstance(x, (list, tuple)) and len(x) == 3 and rail(x[0]) and count(x[1]) and count(x[2])
                for x in dropped
            )
        ):
            raise Violation("a done record whose dropped datagrams are not (rail, count, count) per rail")
        return cls(run=d["run"], rank=_rank_of(d), failed=failed if int_in(0, 10**9)(failed) else 0,
                   dropped=tuple((x[0], x[1], x[2]) for x in dropped))  # fmt: skip


@dataclass(frozen=True)
class ErrorRecord(Typed):
    """It could not run (bad spec, no rank, its own environment): words for people."""

    TYPE = "error"
    run: str | None
    rank: int | None
    message: str
    cause: str | None = None

    @classmethod
    def parse(cls, d: dict) -> ErrorRecord:
        cause = d.get("cause")
        return cls(run=d["run"], rank=_rank_of(d), message=_text(d.get("message"), 200),
                   cause=cause if isinstance(cause, str) and len(cause) <= 64 else None)  # fmt: skip


@dataclass(frozen=True)
class GoRecord(Typed):
    """It read the coordinator's go line: round 1 starts at `start_at`."""

    TYPE = "go"
    run: str
    rank: int
    start_at: float

    @classmethod
    def parse(cls, d: dict) -> GoRecord:
        return cls(run=d["run"], rank=_rank_of(d), start_at=_or(d, "start_at", float_in(0, 2**40), 0.0))


@dataclass(frozen=True)
class StoppedRecord(Typed):
    """A signal ended it (the current pair torn down first)."""

    TYPE = "stopped"
    run: str
    rank: int
    signal: int

    @classmethod
    def parse(cls, d: dict) -> StoppedRecord:
        return cls(run=d["run"], rank=_rank_of(d), signal=_or(d, "signal", int_in(1, 64), 0))


def described() -> dict[str, str]:
    """Each record type in words, for the man page: its docstring's first sentence, its fields."""
    out = {}
    for kind, cls in RECORDS.items():
        words = " ".join((cls.__doc__ or "").split()).split(". ")[0].rstrip(".")
        out[kind] = f"{words}; fields: " + ", ".join(f.name for f in fields(cls))
    return out


RECORDS = {
    r.TYPE: r
    for r in (
        AgentRecord,
        RailsRecord,
        PairRecord,
        HealthyRecord,
        DoneRecord,
        ErrorRecord,
        GoRecord,
        StoppedRecord,
    )
}


def parse_record(line: str, run_id: str):
    """A line an agent printed: its record, None when it is not a record of this run (another
    run's, or not a record at all: ignored), or Violation (its sender's fault)."""
    d = bounded_json(line, MAX_LINE, Violation, "a line of {n} bytes", "a line that is not JSON")
    if not isinstance(d, dict) or d.get("run") != run_id:
        return None
    kind = RECORDS.get(d["type"]) if isinstance(d.get("type"), str) else None  # a list is unhashable
    if kind is None:
        return None
    return kind.parse(d)
