"""What an agent may say: each record's type, declared once, and the checks it passes on the way in.

An agent prints typed records (`to_dict`); the coordinator reads them back with `parse_record`,
whose constructors are the checks below. An agent is trusted for its own node only, and only
for records of the right shape: types, ranges and sizes are checked here, and what is used is
copied out (a record's other keys never reach the report). A record that fails is a protocol
violation of the node that sent it. The checks themselves are in
checks.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from rdmacli.counters import Deltas
from rdmacli.figures import RTT_FLOOR_US
from rdmacli.mesh.checks import (  # noqa: F401 - MAX_LINE, OVERLONG, RATES, RATE_SLACK: said here too
    MAX_INT,
    MAX_LINE,
    OVERLONG,
    RATE_MOST,
    RATE_SLACK,
    RATES,
    RTT_MOST,
    SETUP_MOST,
    TOOK_MOST,
    _figure,
    _int,
    _scalar,
    count,
    error_doc,
    figure,
    port_counters,
    ports_copy,
    table,
)
from rdmacli.mesh.contract import MAX_RAILS, bounded_json, float_in, int_in, side_of
from rdmacli.mesh.findings import ErrorDoc
from rdmacli.mesh.shape import anything, take, wire

if TYPE_CHECKING:
    from rdmacli.probe.phase import ProbeEnd


class Violation(ValueError):
    """A record its sender may not send; the words name what was wrong."""


def _text(limit: int, **default: Any) -> Any:
    """A word an agent said, for people: printable, bounded; anything else is empty."""

    def keep(v: Any) -> str:
        return "".join(ch for ch in v[:limit] if ch.isprintable()) if isinstance(v, str) else ""

    return wire(anything, keep=keep, absent="", **default)


def _device(v: Any) -> bool:
    from rdmacli.mesh.rails import DEVICE

    return isinstance(v, str) and DEVICE.fullmatch(v) is not None


# each field its own (a dataclass names the field object it is given)
def _run() -> Any:
    return wire(lambda v: isinstance(v, str), "a run")  # parse_record took only this run's


def _rank() -> Any:
    return wire(_int, "a number")


def _ready() -> Any:
    """Said for scheduling, never for blame: anything but false is ready."""
    return wire(anything, keep=lambda v: v is not False, absent=True)


@dataclass(frozen=True)
class Typed:
    """A record's wire form: its type, then its fields (a record may say more: PairRecord);
    every record says its run and its sender's rank."""

    TYPE: ClassVar[str] = ""
    run: str = _run()
    rank: int = _rank()

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}  # type: ignore[call-overload]  # each one is a dataclass

    @classmethod
    def parse(cls, d: dict) -> Any:
        """The record `d` says, its fields checked as declared (shape.take); Violation if not."""
        return cls(**take(cls, d, cls.refuse))

    @classmethod
    def refuse(cls, name: str, words: str) -> Violation:
        return Violation(
            f"a{'n' if cls.TYPE[:1] in 'aeiou' else ''} {cls.TYPE} record whose {name} is not {words}"
        )


@dataclass(frozen=True)
class RailState:
    """One rail as its agent found it before round 1."""

    rail: int
    address: str = _text(64)
    device: str | None = wire(_device, lenient=True, absent=None)
    port: int = wire(int_in(0, 65535), lenient=True, absent=0)
    ready: bool = _ready()
    # the line rate of its RDMA port (sysfs), the bound of its pairs
    rate_gbps: float | None = wire(lambda v: _figure(v, RATE_MOST), lenient=True, default=None)


def _rails(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_RAILS and all(isinstance(r, dict) for r in v)


def _rail_states(v: list) -> tuple[RailState, ...]:
    return tuple(
        RailState(rail=k, **take(RailState, r, Typed.refuse, skip=("rail",))) for k, r in enumerate(v)
    )


@dataclass(frozen=True)
class AgentRecord(Typed):
    """It is up: which node, its rails and whether each can run pairs."""

    TYPE = "agent"
    node: str = _text(253)
    address: str = _text(64)
    rails: tuple[RailState, ...] = wire(_rails, "a list of objects", keep=_rail_states, absent=[])
    ready: bool = _ready()
    host: str = _text(253, default="")
    pid: int = wire(int_in(0, 2**31), lenient=True, default=0)
    clock: float = wire(float_in(0, 2**40), lenient=True, default=0.0)
    rounds: int = wire(int_in(0, 10**6), lenient=True, default=0)

    def ready_rails(self, rails: int) -> list[int]:
        """The rails it said can run pairs: per rail where it said so for each, else by its
        word for the node (a reason not to re-test, never a verdict)."""
        if len(self.rails) == rails:
            return [s.rail for s in self.rails if s.ready]
        return list(range(rails)) if self.ready else []


def _whole(v: Any) -> bool:
    return _int(v) and 0 <= v <= MAX_INT


def _error_doc(e: dict | None) -> ErrorDoc | None:
    """A checked error document as the report reads it (ErrorDoc), none for none."""
    return ErrorDoc.of(e) if e is not None else None


@dataclass(frozen=True)
class PairRecord(Typed):
    """One end's report of one test with one partner's NIC. `error` is an RdmacliError's
    document; the latency figures are the connector's; with `--test bw` each end gives the
    rate of the stream that came to it (the listener a's gbps_ba, the connector b's gbps_ab),
    the rate it sent at (gbps_sent) and its counts both ways; with `--test probe` each end its
    own probes to the partner and how many were answered. Run, rank and schedule are the
    collector's to check; the figures are bounded by what hardware can measure (checks.py)."""

    TYPE = "pair"
    peer: int = wire(_int, "a number")
    round: int = wire(_int, "a number")
    result: str = wire(lambda v: v in ("pass", "fail"), "pass or fail")
    rail: int = wire(_int, "a number", default=0)
    peer_rail: int = wire(_int, "a number", default=0)
    slot: int | None = wire(lambda v: v is None or int_in(0, 10**6)(v), "a number", default=None)
    error: ErrorDoc | None = wire(
        error_doc,
        "an error's document (a message, short values)",
        keep=lambda e: e and ErrorDoc.of(e),
        default=None,
    )
    retest: bool = wire(anything, keep=lambda v: v is True, default=False)
    took_s: float | None = figure(TOOK_MOST)  # of its slot, torn down too (the agent's measure)
    setup_us: float | None = figure(SETUP_MOST)
    rtt_p50_us: float | None = figure(RTT_MOST)
    rtt_p99_us: float | None = figure(RTT_MOST)
    rtt_avg_us: float | None = figure(RTT_MOST)
    host_rtt_p50_us: float | None = figure(RTT_MOST)
    rtt_min_us: float | None = figure(
        RTT_MOST
    )  # the fastest round trip: the wire's, least touched by the hosts
    gbps_ab: float | None = figure(RATE_MOST)
    gbps_ba: float | None = figure(RATE_MOST)
    gbps_sent: float | None = figure(RATE_MOST)
    # `--test bw`'s counts: each end's messages sent (its completions: the partner's NIC
    # acknowledged them) and received (its receive completions), checked against the partner's
    # on the way to the verdict (report.disagreement): each direction counted at both ends
    messages_sent: int | None = count()
    messages_received: int | None = count()
    # `--test probe`'s counts (rdmacli/probe): this end's probes to its partner, and those
    # answered by the phase's end (the rest were lost); never more answers than probes
    probes_sent: int | None = count()
    probes_answered: int | None = count()
    steps_us: dict | None = table(_figure, "a table of figures")
    stats: dict | None = table(_scalar, "a table of short values")
    counters: tuple[Deltas, ...] = wire(
        port_counters, "a list of ports' counter deltas", keep=ports_copy, default=()
    )

    def __post_init__(self) -> None:
        """An error given as its document (the simulator's and the tests' records, made as an
        agent prints them) is typed as the intake types it."""
        if isinstance(self.error, dict):
            object.__setattr__(self, "error", ErrorDoc.of(self.error))

    @property
    def side(self) -> str:
        return side_of(self.rank, self.peer)

    def to_dict(self) -> dict:
        d = {"type": self.TYPE, **{f.name: getattr(self, f.name) for f in fields(self)}}
        d["counters"] = [p.to_dict(kinds=False) for p in self.counters] or None
        d["error"] = self.error.to_dict() if self.error is not None else None
        d["side"] = self.side
        d.update(zip("ab", sorted((self.rank, self.peer))))
        return {k: v for k, v in d.items() if v is not None or k in ("error", "result")}

    @classmethod
    def parse(cls, d: dict) -> PairRecord:
        rec = cls(**take(cls, d, cls.refuse))
        why = rec.inconsistency()
        if why:
            raise Violation(f"a pair record whose {why}")
        return rec

    def inconsistency(self) -> str | None:
        """Figures a wire cannot have together: none under RTT_FLOOR_US, a median under its p99,
        the network's round trip (the responder's hold taken out) under the host's (the hold it
        took out cannot be more than the whole), no more answers than probes."""
        if (self.probes_answered or 0) > (self.probes_sent or 0):
            return "probes_answered is above its probes_sent"
        p50, p99, host, low = self.rtt_p50_us, self.rtt_p99_us, self.host_rtt_p50_us, self.rtt_min_us
        for name, v in (("rtt_p50_us", p50), ("rtt_p99_us", p99), ("rtt_avg_us", self.rtt_avg_us),
                        ("host_rtt_p50_us", host), ("rtt_min_us", low)):  # fmt: skip
            if v is not None and v < RTT_FLOOR_US:
                return f"{name} is {v:g} µs, under any wire's round trip ({RTT_FLOOR_US:g} µs)"
        if p50 is not None and p99 is not None and p50 > p99:
            return f"rtt_p50_us ({p50:g}) is above its rtt_p99_us ({p99:g})"
        if p50 is not None and low is not None and low > p50:
            return f"rtt_min_us ({low:g}) is above its rtt_p50_us ({p50:g})"
        if p50 is not None and host is not None and p50 > host:
            return f"the network's round trip ({p50:g} µs) is longer than the host's ({host:g} µs)"
        return None

    def healthy_figures(self) -> tuple[float | None, ...]:
        """Its round trips as a healthy record says them (HEALTHY_FIGURES' order)."""
        return (self.rtt_p50_us, self.rtt_p99_us, self.host_rtt_p50_us, self.rtt_min_us)

    @classmethod
    def of_probe(cls, run: str, rank: int, end: ProbeEnd) -> PairRecord:
        """A probe phase's end of a test (probe.phase.ProbeEnd) as the agent says it."""
        error = _error_doc(end.error.to_dict() if end.error else None)
        return cls(run=run, rank=rank, peer=end.peer, round=0, result=end.result, rail=end.rail,
                   peer_rail=end.peer_rail, slot=0, error=error,
                   counters=end.counters, **end.figures.to_dict())  # fmt: skip

    @classmethod
    def failed(cls, run: str, rank: int, peer: int, rnd: int, error: dict, rail: int = 0,
               peer_rail: int = 0) -> PairRecord:  # fmt: skip
        """An end's failure the coordinator fills in (a missing agent, a silent end)."""
        return cls(run=run, rank=rank, peer=peer, round=rnd, result="fail", error=_error_doc(error),
                   rail=rail, peer_rail=peer_rail)  # fmt: skip


HEALTHY_ENTRIES = 1024  # partners of one healthy record: a line of tens of KB, under MAX_LINE
HEALTHY_FIGURES = ("rtt_p50_us", "rtt_p99_us", "host_rtt_p50_us", "rtt_min_us")


def _column(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= HEALTHY_ENTRIES


def _col() -> Any:
    return wire(_column, f"a list of {HEALTHY_ENTRIES} figures at most", keep=tuple, default=(), needed=True)


def _count() -> Any:
    return wire(_whole, "a count")


@dataclass(frozen=True)
class HealthyRecord(Typed):
    """`mesh --test probe`: one NIC's healthy partners at once, compactly (what grows with pairs
    is four figures a partner). Entry i stands for the test at `first + i` of the NIC's
    tests in the schedule's order (schedule.Schedule.nic_tests): that pair passed, each of
    its `probes` probes answered, with these round trips; null where the pair had trouble and
    has a pair record of its own. Up to HEALTHY_ENTRIES entries a record."""

    TYPE = "healthy"
    rail: int = _count()
    round: int = _count()
    first: int = _count()
    probes: int = _count()
    rtt_p50_us: tuple = _col()
    rtt_p99_us: tuple = _col()
    host_rtt_p50_us: tuple = _col()
    rtt_min_us: tuple = _col()

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
        rec = cls(**take(cls, d, cls.refuse))
        cols = rec.healthy_columns()
        if len({len(c) for c in cols}) != 1:
            raise Violation("a healthy record whose figure lists differ in length")
        low, high, number = RTT_FLOOR_US, RTT_MOST, (int, float)
        for p50, p99, host, least in zip(
            *cols
        ):  # the pair's rules, inline: millions of entries at fleet size
            if p50 is None and p99 is None and host is None and least is None:
                continue
            if not (type(p50) in number and type(p99) in number and type(host) in number
                    and type(least) in number and low <= least <= p50 <= p99 <= high
                    and p50 <= host <= high):  # fmt: skip
                raise Violation(
                    f"a healthy record with an entry that is no round trip ({low:g} µs <= min <= p50 <= "
                    f"p99, p50 <= host p50, none above {high:g})"
                )
        return rec

    def healthy_columns(self) -> tuple[tuple, ...]:
        """Its four figure lists, HEALTHY_FIGURES' order."""
        return (self.rtt_p50_us, self.rtt_p99_us, self.host_rtt_p50_us, self.rtt_min_us)


@dataclass(frozen=True)
class RailsRecord(Typed):
    """Discovery: the rails this node found (checked by rails.check_report against the family)."""

    TYPE = "rails"
    rails: list = wire(lambda v: isinstance(v, list) and len(v) <= 4 * MAX_RAILS, "a list", absent=None)


def _dropped(v: Any) -> bool:
    count, rail = int_in(0, MAX_INT), int_in(0, MAX_RAILS - 1)
    return (
        isinstance(v, (list, tuple))
        and len(v) <= MAX_RAILS
        and all(
            isinstance(x, (list, tuple)) and len(x) == 3 and rail(x[0]) and count(x[1]) and count(x[2])
            for x in v
        )
    )


@dataclass(frozen=True)
class DoneRecord(Typed):
    """Its schedule is over."""

    TYPE = "done"
    failed: int = wire(int_in(0, 10**9), lenient=True, default=0)
    # the probe's NICs that dropped datagrams: (rail, with a wrong tag, from another QP than SIDR
    # named), none for a NIC that dropped none
    dropped: tuple[tuple[int, int, int], ...] = wire(
        _dropped,
        "(rail, count, count) per rail",
        keep=lambda v: tuple((x[0], x[1], x[2]) for x in v),
        default=(),
    )


@dataclass(frozen=True)
class ErrorRecord(Typed):
    """It could not run (bad spec, no rank, its own environment): words for people."""

    TYPE = "error"
    # an agent that failed before it read its spec knows no run or rank: null
    run: str | None = _run()  # type: ignore[assignment]
    rank: int | None = _rank()  # type: ignore[assignment]
    message: str = _text(200)
    cause: str | None = wire(lambda v: isinstance(v, str) and len(v) <= 64, lenient=True, default=None)


@dataclass(frozen=True)
class GoRecord(Typed):
    """It read the coordinator's go line: round 1 starts at `start_at`."""

    TYPE = "go"
    start_at: float = wire(float_in(0, 2**40), lenient=True, absent=0.0)


@dataclass(frozen=True)
class StoppedRecord(Typed):
    """A signal ended it (the current pair torn down first)."""

    TYPE = "stopped"
    signal: int = wire(int_in(1, 64), lenient=True, absent=0)


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
    kind = RECORDS.get(t) if isinstance(t := d.get("type"), str) else None  # a list is unhashable
    if kind is None:
        return None
    return kind.parse(d)
