"""What an agent may say: each record's type, declared once, and the checks it passes on the way in.

An agent prints typed records (`to_dict`); the coordinator reads them back with `parse_record`,
whose constructors are the checks below. An agent is trusted for its own node only, and only
for records of the right shape: types, ranges and sizes are checked here, and what is used is
copied out (a record's other keys never reach the report). A record that fails is a protocol
violation of the node that sent it. One module over 350 lines on purpose: the wire format of
every record and the checks that guard it belong side by side.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields

from rdmacli.figures import RTT_FLOOR_US
from rdmacli.mesh.contract import MAX_RAILS, float_in, int_in, side_of

RTT_MIN = "rtt_min_us"
MAX_LINE = 64 * 1024  # an agent's records are a few hundred bytes
# what a launcher passes on for a line past MAX_LINE (its head, then this): the rest was dropped
# as it was read, never held whole (launch.LineSplitter); the intake takes it as a violation
OVERLONG = "\0(a line past the limit, dropped as it was read)"
MAX_TEXT = 4096  # an error message or hint
MAX_KEY = 64
MAX_ENTRIES = 64  # steps_us, stats
# every figure an agent may give, with the most it can be: above it, no hardware measured it
# (and arithmetic on it could overflow: a verdict must never end in an exception)
FIGURES = {
    "rtt_p50_us": 1e9,  # a round trip of 1000 s is no round trip
    "rtt_p99_us": 1e9,
    "rtt_avg_us": 1e9,
    "rtt_min_us": 1e9,
    "host_rtt_p50_us": 1e9,
    "setup_us": 1e10,
    "took_s": 86400.0,  # of a slot of at most an hour
    "gbps_ab": 1e4,  # 10 Tb/s: beyond any port made (the port's own rate is checked by the verdict)
    "gbps_ba": 1e4,
    "gbps_sent": 1e4,
}
RATES = ("gbps_ab", "gbps_ba", "gbps_sent")  # what a port's line rate bounds
# `--test bw`'s counts: each end's messages sent (its completions: the partner's NIC acknowledged
# them) and received (its receive completions), checked against the partner's on the way to the
# verdict (report.disagreement): each direction counted at both of its ends
COUNTS = ("messages_sent", "messages_received")
# `--test probe`'s counts (rdmacli/probe): this end's probes to its partner, and those answered
# by the phase's end (the rest were lost); an end cannot have more answers than probes
PROBES = ("probes_sent", "probes_answered")
# figures.RTT_FLOOR_US: a round trip below it was not measured, and would make every honest
# pair look slow beside it
RATE_SLACK = 1.1  # a rate above the slower port's line rate by more than this is no measure
MAX_STEP_US = 1e10
MAX_INT = 2**63 - 1  # counters and counts: 64-bit, as the hardware's
MAX_PORTS = 8  # ports whose counters a pair reports (one, on every driver we know)
MAX_COUNTERS = 256  # counters of one port (mlx5: about a hundred)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _figure(v, high: float = MAX_STEP_US) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= high


def _scalar(v) -> bool:
    if isinstance(v, str):
        return len(v) <= MAX_TEXT
    if isinstance(v, float):
        return math.isfinite(v) and abs(v) <= 1e300
    return v is None or isinstance(v, bool) or (_int(v) and abs(v) <= MAX_INT)


def _table(d, value_ok) -> bool:
    return (
        isinstance(d, dict)
        and len(d) <= MAX_ENTRIES
        and all(isinstance(k, str) and len(k) <= MAX_KEY and value_ok(v) for k, v in d.items())
    )


def _list(v, value_ok) -> bool:
    return isinstance(v, list) and len(v) <= MAX_ENTRIES and all(map(value_ok, v))


def _error(e) -> str | None:
    if e is None:
        return None
    if not isinstance(e, dict) or len(e) > MAX_ENTRIES:
        return "its error is not an object"
    if not isinstance(e.get("message"), str) or len(e["message"]) > MAX_TEXT:
        return "its error has no message of text"
    for k, v in e.items():
        if not (isinstance(k, str) and len(k) <= MAX_KEY):
            return "its error has a key that is not a short text"
        if not (_scalar(v) or _table(v, _scalar) or (k == "holders" and _list(v, _scalar))):
            return f"its error's {k[:20]!r} is not a short value"
    return None


def _port_counters(p) -> bool:
    """One port's counter deltas: {"device": name, "port": n, "moved": {name: n}, "reset": [name]}."""
    return (
        isinstance(p, dict)
        and isinstance(p.get("device"), str)
        and 0 < len(p["device"]) <= MAX_KEY
        and _int(p.get("port"))
        and 0 <= p["port"] < 256
        and isinstance(p.get("moved"), dict)
        and len(p["moved"]) <= MAX_COUNTERS
        and all(
            isinstance(k, str) and len(k) <= MAX_KEY and _int(v) and 0 <= v <= MAX_INT
            for k, v in p["moved"].items()
        )
        and isinstance(p.get("reset", []), list)
        and len(p.get("reset", [])) <= MAX_COUNTERS
        and all(isinstance(k, str) and len(k) <= MAX_KEY for k in p.get("reset", []))
    )


def _rtts(rec: dict) -> str | None:
    """Round trips a wire can have, consistent among themselves: none under RTT_FLOOR_US, a
    median under its p99, and the network's round trip (the responder's hold taken out) under
    the host's (the hold it took out cannot be more than the whole)."""
    rtts = {k: rec.get(k) for k in ("rtt_p50_us", "rtt_p99_us", "rtt_avg_us", "host_rtt_p50_us", RTT_MIN)}
    for key, v in rtts.items():
        if v is not None and v < RTT_FLOOR_US:
            return f"{key} is {v:g} µs, under any wire's round trip ({RTT_FLOOR_US:g} µs)"
    p50, p99, host, low = rtts["rtt_p50_us"], rtts["rtt_p99_us"], rtts["host_rtt_p50_us"], rtts[RTT_MIN]
    if p50 is not None and p99 is not None and p50 > p99:
        return f"rtt_p50_us ({p50:g}) is above its rtt_p99_us ({p99:g})"
    if p50 is not None and low is not None and low > p50:
        return f"rtt_min_us ({low:g}) is above its rtt_p50_us ({p50:g})"
    if p50 is not None and host is not None and p50 > host:
        return f"the network's round trip ({p50:g} µs) is longer than the host's ({host:g} µs)"
    return None


def check_pair(rec: dict) -> str | None:
    """Why a pair record cannot be used, or None. Run, rank and schedule are the collector's."""
    if not _int(rec.get("round")) or not _int(rec.get("peer")):
        return "round or peer is not a number"
    if not all(_int(rec.get(k, 0)) for k in ("rail", "peer_rail")):
        return "rail or peer_rail is not a number"
    if rec.get("result") not in ("pass", "fail"):
        return "its result is neither pass nor fail"
    why = _error(rec.get("error"))
    if why:
        return why
    for key, high in FIGURES.items():
        if rec.get(key) is not None and not _figure(rec[key], high):
            return f"{key} is not a figure from 0 to {high:g}"
    for key in (*COUNTS, *PROBES):
        v = rec.get(key)
        if v is not None and not (_int(v) and 0 <= v <= MAX_INT):
            return f"{key} is not a count from 0 to 2^63-1"
    if (rec.get("probes_answered") or 0) > (rec.get("probes_sent") or 0):
        return "probes_answered is above its probes_sent"
    why = _rtts(rec)
    if why:
        return why
    if rec.get("steps_us") is not None and not _table(rec["steps_us"], _figure):
        return "steps_us is not a table of figures"
    if rec.get("stats") is not None and not _table(rec["stats"], _scalar):
        return "stats is not a table of short values"
    counters = rec.get("counters")
    if counters is not None and not (
        isinstance(counters, list) and len(counters) <= MAX_PORTS and all(map(_port_counters, counters))
    ):
        return "counters is not a list of ports' counter deltas"
    return None


def pair_copy(rec: dict) -> dict:
    """The keys of a checked pair record that the report uses, and nothing else."""
    keep = (
        "type",
        "run",
        "rank",
        "peer",
        "rail",
        "peer_rail",
        "round",
        "slot",
        "result",
        "error",
        "steps_us",
        "stats",
        *FIGURES,
        *COUNTS,
        *PROBES,
    )
    out = {k: rec[k] for k in keep if k in rec}
    if rec.get("counters"):  # what the report derives (kinds) is derived again, not taken
        out["counters"] = [
            {
                "device": p["device"],
                "port": p["port"],
                "moved": dict(p["moved"]),
                "reset": list(p.get("reset", [])),
            }
            for p in rec["counters"]
        ]
    return out


class Typed:
    """A record's wire form: its type, then its fields (a record may say more: PairRecord)."""

    TYPE = ""

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}


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
        clock = d.get("clock")
        return cls(
            run=d["run"], rank=_rank_of(d), node=_text(d.get("node"), 253),
            address=_text(d.get("address"), 64),
            rails=tuple(states), ready=d.get("ready") is not False, host=_text(d.get("host"), 253),
            pid=d["pid"] if int_in(0, 2**31)(d.get("pid")) else 0,
            clock=clock if float_in(0, 2**40)(clock) else 0.0,
            rounds=d["rounds"] if int_in(0, 10**6)(d.get("rounds")) else 0,
        )  # fmt: skip

    def ready_rails(self, rails: int) -> list[int]:
        """The rails it said can run pairs: per rail where it said so for each, else by its
        word for the node (a reason not to re-test, never a verdict)."""
        if len(self.rails) == rails:
            return [s.rail for s in self.rails if s.ready]
        return list(range(rails)) if self.ready else []


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
        cols = [d.get(k) for k in HEALTHY_FIGURES]
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

    @classmethod
    def parse(cls, d: dict) -> DoneRecord:
        failed = d.get("failed", 0)
        return cls(run=d["run"], rank=_rank_of(d), failed=failed if int_in(0, 10**9)(failed) else 0)


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
        at = d.get("start_at")
        return cls(run=d["run"], rank=_rank_of(d), start_at=at if float_in(0, 2**40)(at) else 0.0)


@dataclass(frozen=True)
class StoppedRecord(Typed):
    """A signal ended it (the current pair torn down first)."""

    TYPE = "stopped"
    run: str
    rank: int
    signal: int

    @classmethod
    def parse(cls, d: dict) -> StoppedRecord:
        sig = d.get("signal")
        return cls(run=d["run"], rank=_rank_of(d), signal=sig if int_in(1, 64)(sig) else 0)


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
    if len(line) > MAX_LINE:
        raise Violation(f"a line of {len(line)} bytes")
    try:
        d = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise Violation("a line that is not JSON") from exc
    if not isinstance(d, dict) or d.get("run") != run_id:
        return None
    kind = RECORDS.get(d.get("type"))
    if kind is None:
        return None
    return kind.parse(d)
