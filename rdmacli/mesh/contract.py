"""What the mesh's coordinator and its agents share, declared once: the run spec and the records.

The coordinator describes a run in one frozen `RunSpec` and hands it to every agent as the first
line of its stdin (ClusterShell's worker write, srun --input=all), never on its command line: a
spec grows with nodes x rails (10 000 x 8 is about 1.5 MB of names and addresses) and argv has
the kernel's limit. An agent's argv carries only what differs per node: its rank. Discovery
(each node reports its rails) is the same spec with `discover` set and no addresses. Each field
is declared once in `SPEC_FIELDS`: its default, its check, its words; the CLI takes its
defaults from there.

Agents' lines come back as typed records (`AgentRecord`, `RailsRecord`, `PairRecord`, ...):
`to_dict` is what an agent prints, `parse_record` is the coordinator's check (an agent is
trusted for its own node only, and only for records of the right shape: records.py's checks).
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import selectors
import time
import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from rdmacli.mesh import records
from rdmacli.mesh.inputs import valid_name

VERSION = 1
TESTS = ("ping", "rping", "connect", "ud", "bw")  # the kinds of test a pair runs (agent.SPECS)
MAX_NODES = 100_000
MAX_RAILS = 16
MAX_SPEC = 64 * 2**20  # bytes of a spec, as sent or inflated: 10 000 x 8 needs about 1.5 MB
ZIP_OVER = 64 * 1024  # a spec longer than this travels compressed (zlib, base64)
SPEC_WAIT_S = 120.0  # an agent waits this long for its spec on stdin, then says so and ends
RUN_ID = re.compile(r"[0-9a-f]{16}")


class SpecError(ValueError):
    """A spec that cannot be used; the words say which field and why."""


def _int_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _float_in(lo: float, hi: float) -> Callable[[Any], bool]:
    return lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
    )


def _bool(v) -> bool:
    return isinstance(v, bool)


def _names(v) -> bool:
    return (
        isinstance(v, (list, tuple))
        and 2 <= len(v) <= MAX_NODES
        and all(valid_name(x) for x in v)
        and len(set(v)) == len(v)
    )


def _addresses(v) -> bool:
    """Every node's rails (IP literals or names), as many for each node; () for discovery."""
    if not isinstance(v, (list, tuple)) or len(v) > MAX_NODES:
        return False
    widths = {len(rails) if isinstance(rails, (list, tuple)) else -1 for rails in v}
    if v and not (len(widths) == 1 and 1 <= widths.pop() <= MAX_RAILS):
        return False
    return all(valid_name(a) for rails in v for a in rails)


def _discover(v) -> bool:
    if v is None:
        return True
    if not isinstance(v, dict) or set(v) != {"rails", "family"} or v["family"] not in (4, 6):
        return False
    return v["rails"] is None or (isinstance(v["rails"], str) and 0 < len(v["rails"]) <= 4096)


@dataclass(frozen=True)
class SpecField:
    name: str
    default: Any
    check: Callable[[Any], bool]
    words: str  # what a good value is, for a refusal


# The run spec, field by field (scapy's fields_desc): defaults here and nowhere else.
SPEC_FIELDS = (
    SpecField("run_id", None, lambda v: isinstance(v, str) and bool(RUN_ID.fullmatch(v)), "16 hex digits"),
    SpecField("names", (), _names, "2 or more distinct node names"),
    SpecField("addresses", (), _addresses, "each node's rails, as many for every node (1-16)"),
    SpecField("start_at", 0.0, _float_in(0, 2**40), "a UNIX time"),
    SpecField("round_s", 3.0, _float_in(0.5, 3600), "seconds, 0.5 to 3600"),
    SpecField("port", 7490, _int_in(1, 65535), "a port number"),
    SpecField("test", "ping", lambda v: v in TESTS, "one of " + ", ".join(TESTS)),
    SpecField("count", 20, _int_in(1, 100_000), "1 to 100000"),
    SpecField("quick", False, _bool, "true or false"),
    SpecField("cross_rail", False, _bool, "true or false"),
    SpecField("retests", False, _bool, "true or false"),
    SpecField("discover", None, _discover, '{"rails": devices or null, "family": 4 or 6}, or null'),
)
_BY_NAME = {f.name: f for f in SPEC_FIELDS}


def default(name: str):
    """A spec field's default (the CLI's `default=`)."""
    return _BY_NAME[name].default


@dataclass(frozen=True)
class RunSpec:
    """One mesh run as every agent sees it; immutable once sent."""

    run_id: str
    names: tuple[str, ...]
    addresses: tuple[tuple[str, ...], ...] = default("addresses")  # by rank, its rails in order
    start_at: float = default("start_at")  # UNIX time at which round slot 0 begins (the latest)
    round_s: float = default("round_s")
    port: int = default("port")  # rail k listens on port + k
    test: str = default("test")
    count: int = default("count")
    quick: bool = default("quick")
    cross_rail: bool = default("cross_rail")  # every rail pair, not only rail k with rail k
    retests: bool = default("retests")  # agents wait for the coordinator's re-test rounds
    discover: dict | None = default("discover")  # only report this node's rails, and end

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "addresses", tuple(tuple(r) for r in self.addresses))
        for f in SPEC_FIELDS:
            if not f.check(getattr(self, f.name)):
                raise SpecError(f"run spec: bad {f.name} ({f.words})")
        if self.addresses and len(self.addresses) != len(self.names):
            raise SpecError(f"run spec: {len(self.names)} names, {len(self.addresses)} addresses")
        if not self.addresses and self.discover is None:
            raise SpecError("run spec: no addresses (only discovery goes without)")
        if self.port + self.rails - 1 > 65535:
            raise SpecError(f"run spec: rail {self.rails - 1} would listen past port 65535")

    @property
    def n(self) -> int:
        return len(self.names)

    @property
    def rails(self) -> int:
        return len(self.addresses[0]) if self.addresses else 1

    def to_dict(self) -> dict:
        return {"v": VERSION, **{f.name: _plain(getattr(self, f.name)) for f in fields(self)}}

    def to_line(self) -> bytes:
        """The spec as one line for an agent's stdin; compressed when long (1000 nodes' names
        and addresses shrink about tenfold)."""
        text = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        if len(text) > ZIP_OVER:
            text = json.dumps(
                {"v": VERSION, "zlib": base64.b64encode(zlib.compress(text, 6)).decode()}
            ).encode()
        return text + b"\n"

    @classmethod
    def from_line(cls, line: bytes | str) -> RunSpec:
        """A spec line, checked field by field; SpecError says what is wrong."""
        if len(line) > MAX_SPEC:
            raise SpecError(f"run spec: longer than {MAX_SPEC} bytes")
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise SpecError("run spec: not JSON") from exc
        if isinstance(doc, dict) and isinstance(doc.get("zlib"), str) and set(doc) == {"v", "zlib"}:
            try:
                inflater = zlib.decompressobj()
                text = inflater.decompress(base64.b64decode(doc["zlib"], validate=True), MAX_SPEC)
            except (ValueError, zlib.error) as exc:
                raise SpecError("run spec: bad compressed form") from exc
            if inflater.unconsumed_tail:
                raise SpecError(f"run spec: inflates past {MAX_SPEC} bytes")
            return cls.from_line(text)
        if not isinstance(doc, dict) or doc.get("v") != VERSION:
            raise SpecError(f"run spec: not version {VERSION} (another rdmacli on this node?)")
        doc.pop("v")
        unknown = set(doc) - set(_BY_NAME)
        if unknown:
            raise SpecError(f"run spec: unknown field {sorted(unknown)[0][:40]!r}")
        if "run_id" not in doc or "names" not in doc:
            raise SpecError("run spec: no run_id or names")
        return cls(**doc)


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


class LineReader:
    """Lines from an agent's stdin, each bounded in size and in wait: the spec first, then the
    coordinator's go and re-test lines. On a file descriptor it never blocks past its deadline;
    a stream without one (a test's) is read as it comes."""

    def __init__(self, stream):
        self.stream = stream
        try:
            self.fd = stream.fileno()
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            self.fd = None
        self.buf = b""
        self.eof = False

    def isatty(self) -> bool:
        return self.fd is not None and os.isatty(self.fd)

    def readline(self, deadline: float | None = None, limit: int = MAX_SPEC) -> bytes | None:
        """The next line (without its newline); None at EOF or past `deadline` (monotonic)."""
        if self.fd is None:
            line = self.stream.readline(limit + 1)
            if len(line) > limit:
                raise SpecError(f"a line of more than {limit} bytes on stdin")
            return line.rstrip(b"\n") if line else None
        sel = selectors.DefaultSelector()
        sel.register(self.fd, selectors.EVENT_READ)
        try:
            while b"\n" not in self.buf and not self.eof:
                if len(self.buf) > limit:
                    raise SpecError(f"a line of more than {limit} bytes on stdin")
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                if not sel.select(wait):
                    continue
                chunk = os.read(self.fd, 1 << 20)
                self.buf += chunk
                self.eof = not chunk
        finally:
            sel.close()
        line, nl, self.buf = self.buf.partition(b"\n")
        if not nl and not line:
            return None
        return line


def read_spec(reader: LineReader, wait_s: float = SPEC_WAIT_S) -> RunSpec:
    """The run spec, the first line on stdin (the launcher's write). SpecError when none came."""
    line = reader.readline(time.monotonic() + wait_s)
    if line is None:
        raise SpecError(f"no run spec on stdin within {wait_s:g} s (the coordinator writes it at launch)")
    return RunSpec.from_line(line)


def new_run_id() -> str:
    import secrets

    return secrets.token_hex(8)


def side_of(rank: int, peer: int) -> str:
    """The one side rule: in a pair the lower rank listens, the higher connects."""
    return "listen" if rank < peer else "connect"


# ---- records: what an agent prints, one JSON object a line --------------------------------


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


@dataclass(frozen=True)
class AgentRecord:
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

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

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
                    port=r["port"] if _int_in(0, 65535)(r.get("port")) else 0,
                    ready=r.get("ready") is not False,
                )
            )
        clock = d.get("clock")
        return cls(
            run=d["run"], rank=_rank_of(d), node=_text(d.get("node"), 253),
            address=_text(d.get("address"), 64),
            rails=tuple(states), ready=d.get("ready") is not False, host=_text(d.get("host"), 253),
            pid=d["pid"] if _int_in(0, 2**31)(d.get("pid")) else 0,
            clock=clock if _float_in(0, 2**40)(clock) else 0.0,
            rounds=d["rounds"] if _int_in(0, 10**6)(d.get("rounds")) else 0,
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
class PairRecord:
    """One end's report of one test with one partner's NIC. `error` is an RdmacliError's
    document; the figures are the connector's (the listener's stream comes back in gbps_ab)."""

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
    gbps_ab: float | None = None
    gbps_ba: float | None = None
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
        why = records.check_pair(d)
        if why:
            raise Violation(f"a pair record whose {why}")
        if not (d.get("slot") is None or _int_in(0, 10**6)(d.get("slot"))):
            raise Violation("a pair record whose slot is not a number")
        copy = records.pair_copy(d)
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


@dataclass(frozen=True)
class RailsRecord:
    """Discovery: the rails this node found (checked by rails.check_report against the family)."""

    TYPE = "rails"
    run: str
    rank: int
    rails: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def parse(cls, d: dict) -> RailsRecord:
        rails = d.get("rails")
        if not isinstance(rails, list) or len(rails) > 4 * MAX_RAILS:
            raise Violation("a rails record whose rails are not a list")
        return cls(run=d["run"], rank=_rank_of(d), rails=rails)


@dataclass(frozen=True)
class DoneRecord:
    """Its schedule is over."""

    TYPE = "done"
    run: str
    rank: int
    failed: int = 0

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def parse(cls, d: dict) -> DoneRecord:
        failed = d.get("failed", 0)
        return cls(run=d["run"], rank=_rank_of(d), failed=failed if _int_in(0, 10**9)(failed) else 0)


@dataclass(frozen=True)
class ErrorRecord:
    """It could not run (bad spec, no rank, its own environment): words for people."""

    TYPE = "error"
    run: str | None
    rank: int | None
    message: str
    cause: str | None = None

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def parse(cls, d: dict) -> ErrorRecord:
        cause = d.get("cause")
        return cls(run=d["run"], rank=_rank_of(d), message=_text(d.get("message"), 200),
                   cause=cause if isinstance(cause, str) and len(cause) <= 64 else None)  # fmt: skip


@dataclass(frozen=True)
class GoRecord:
    """It read the coordinator's go line: round 1 starts at `start_at`."""

    TYPE = "go"
    run: str
    rank: int
    start_at: float

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def parse(cls, d: dict) -> GoRecord:
        at = d.get("start_at")
        return cls(run=d["run"], rank=_rank_of(d), start_at=at if _float_in(0, 2**40)(at) else 0.0)


@dataclass(frozen=True)
class StoppedRecord:
    """A signal ended it (the current pair torn down first)."""

    TYPE = "stopped"
    run: str
    rank: int
    signal: int

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def parse(cls, d: dict) -> StoppedRecord:
        sig = d.get("signal")
        return cls(run=d["run"], rank=_rank_of(d), signal=sig if _int_in(1, 64)(sig) else 0)


RECORDS = {
    r.TYPE: r
    for r in (AgentRecord, RailsRecord, PairRecord, DoneRecord, ErrorRecord, GoRecord, StoppedRecord)
}
Record = AgentRecord | RailsRecord | PairRecord | DoneRecord | ErrorRecord | GoRecord | StoppedRecord


def parse_record(line: str, run_id: str):
    """A line an agent printed: its record, None when it is not a record of this run (another
    run's, or not a record at all: ignored), or Violation (its sender's fault)."""
    if len(line) > records.MAX_LINE:
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
