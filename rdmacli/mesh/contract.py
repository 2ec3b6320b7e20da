"""What the mesh's coordinator and its agents share, declared once: the run spec and the records.

The coordinator describes a run in one frozen `RunSpec` and hands it to every agent as the first
line of its stdin (ClusterShell's worker write, srun --input=all), never on its command line: a
spec grows with nodes x rails (10 000 x 8 is about 1.5 MB of names and addresses) and argv has
the kernel's limit. An agent's argv carries only what differs per node: its rank. Discovery
(each node reports its rails) is the same spec with `discover` set and no addresses. Each field
is declared once in `SPEC_FIELDS`: its default, its check, its words; the CLI takes its
defaults from there.

Agents' lines come back as typed records (records.py): `to_dict` is what an agent prints,
`parse_record` the coordinator's check.
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
from dataclasses import dataclass, fields
from typing import Any, Callable, TypeGuard

from rdmacli.mesh.inputs import GROUP, valid_name
from rdmacli.mesh.kinds import checks
from rdmacli.mesh.schedule import MAX_SAMPLE, PAIRS

VERSION = 1
# what a mesh runs, and in words: a row each (mesh.kinds), the pair checks, then the probe's
TEST_WORDS = {c.name: c.words for c in checks().values()}
TESTS = tuple(TEST_WORDS)
MAX_NODES = 100_000
MAX_RAILS = 16
MAX_SPEC = 64 * 2**20  # bytes of a spec, as sent or inflated: 10 000 x 8 needs about 1.5 MB
ZIP_OVER = 64 * 1024  # a spec longer than this travels compressed (zlib, base64)
SPEC_WAIT_S = 120.0  # an agent waits this long for its spec on stdin, then says so and ends
RUN_ID = re.compile(r"[0-9a-f]{16}")
PROBE_KEY = re.compile(r"[0-9a-f]{32}")


def bounded_json(line: bytes | str, limit: int, error: type[Exception], too_long: str, not_json: str) -> Any:
    """A line of JSON from an untrusted sender (a spec, an agent's record): at most `limit` bytes
    and parsed whole, else `error` in the caller's words (`too_long` may name the line's length,
    {n}). Nesting too deep is not JSON."""
    if len(line) > limit:
        raise error(too_long.format(n=len(line)))
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise error(not_json) from exc


class SpecError(ValueError):
    """A spec that cannot be used; the words say which field and why."""


def int_in(lo: int, hi: int) -> Callable[[Any], TypeGuard[int]]:
    def check(v: Any) -> TypeGuard[int]:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

    return check


def float_in(lo: float, hi: float) -> Callable[[Any], TypeGuard[float]]:
    def check(v: Any) -> TypeGuard[float]:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi

    return check


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


@dataclass(frozen=True)
class Discover:
    """A discovery spec's ask: each agent reports its rails (the devices --rails names, or all:
    None) with an address of `family`."""

    rails: str | None
    family: int

    def to_dict(self) -> dict:
        return {"rails": self.rails, "family": self.family}


def _discover(v) -> bool:
    if v is None:
        return True
    return (
        isinstance(v, Discover)
        and v.family in (4, 6)
        and (v.rails is None or (isinstance(v.rails, str) and 0 < len(v.rails) <= 4096))
    )


def _groups(v) -> bool:
    """Each node's group, by rank (or none)."""
    return (
        isinstance(v, (list, tuple))
        and len(v) <= MAX_NODES
        and all(isinstance(g, str) and GROUP.fullmatch(g) for g in v)
    )


@dataclass(frozen=True)
class SpecField:
    name: str
    default: Any
    check: Callable[[Any], bool]
    words: str  # what a good value is, for a refusal


MAX_ROUND_S = 3600  # a slot (--round-time) at most, seconds

# The run spec, field by field (scapy's fields_desc): defaults here and nowhere else.
SPEC_FIELDS = (
    SpecField("run_id", None, lambda v: isinstance(v, str) and bool(RUN_ID.fullmatch(v)), "16 hex digits"),
    SpecField("names", (), _names, "2 or more distinct node names"),
    SpecField("addresses", (), _addresses, "each node's rails, as many for every node (1-16)"),
    SpecField("start_at", 0.0, float_in(0, 2**40), "a UNIX time"),
    SpecField("round_s", 3.0, float_in(0.5, MAX_ROUND_S), f"seconds, 0.5 to {MAX_ROUND_S:g}"),
    SpecField("port", 7490, int_in(1, 65535), "a port number"),
    SpecField("test", "ping", lambda v: v in TESTS, "one of " + ", ".join(TESTS)),
    SpecField("count", 20, int_in(1, 100_000), "1 to 100000"),
    SpecField("quick", False, _bool, "true or false"),
    SpecField("cross_rail", False, _bool, "true or false"),
    SpecField("retests", False, _bool, "true or false"),
    SpecField("discover", None, _discover, '{"rails": devices or null, "family": 4 or 6}, or null'),
    SpecField("pairs", "all", lambda v: v in PAIRS, "one of " + ", ".join(PAIRS)),
    SpecField("groups", (), _groups, "each node's group name (letters, digits, . _ : -), or none"),
    SpecField("sample", 0, int_in(0, MAX_SAMPLE), f"0 to {MAX_SAMPLE}"),
    SpecField("rotation", 0, int_in(0, 2**40), "0 to 2^40"),
    # the key of the probe's datagram and SIDR tags (probe/wire.py): the run's own, made by the
    # coordinator, carried to the agents on their stdin with the spec (never in argv, never
    # printed); "": the public key (a spec of an older coordinator), no authentication
    SpecField(
        "probe_key",
        "",
        lambda v: v == "" or isinstance(v, str) and bool(PROBE_KEY.fullmatch(v)),
        "32 hex digits, or none",
    ),
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
    discover: Discover | None = default("discover")  # only report this node's rails, and end
    pairs: str = default("pairs")  # all node pairs, those inside groups, or those plus a sample between
    groups: tuple[str, ...] = default("groups")  # by rank, its group (a leaf, rack or plane)
    sample: int = default("sample")  # pairs="sample": node pairs between every two groups
    rotation: int = default("rotation")  # which window of the sampled pairs (a run counter)
    probe_key: str = default("probe_key")  # the probe's MAC key (hex), the run's secret

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "addresses", tuple(tuple(r) for r in self.addresses))
        if isinstance(self.groups, list):  # a string stays one, and is refused
            object.__setattr__(self, "groups", tuple(self.groups))
        if isinstance(self.discover, dict) and set(self.discover) == {"rails", "family"}:  # the wire's
            object.__setattr__(self, "discover", Discover(**self.discover))
        for f in SPEC_FIELDS:
            if not f.check(getattr(self, f.name)):
                raise SpecError(f"run spec: bad {f.name} ({f.words})")
        if self.addresses and len(self.addresses) != len(self.names):
            raise SpecError(f"run spec: {len(self.names)} names, {len(self.addresses)} addresses")
        if self.groups and len(self.groups) != len(self.names):
            raise SpecError(f"run spec: {len(self.names)} names, {len(self.groups)} groups")
        if (self.pairs == "sample") != (self.sample > 0):
            raise SpecError("run spec: a sample (1 or more) with pairs=sample, and only then")
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
        text = json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False).encode()
        if len(text) > ZIP_OVER:
            packed = base64.b64encode(zlib.compress(text, 6)).decode()
            text = json.dumps({"v": VERSION, "zlib": packed}, allow_nan=False).encode()
        return text + b"\n"

    @classmethod
    def from_line(cls, line: bytes | str) -> RunSpec:
        """A spec line, checked field by field; SpecError says what is wrong."""
        doc = bounded_json(
            line, MAX_SPEC, SpecError, f"run spec: longer than {MAX_SPEC} bytes", "run spec: not JSON"
        )
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
    return v.to_dict() if isinstance(v, Discover) else v


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
            self.eof = not line
            return line.rstrip(b"\n") if line else None
        made = selectors.DefaultSelector()
        sel: selectors.BaseSelector | None = made
        try:
            made.register(self.fd, selectors.EVENT_READ)
        except (OSError, ValueError):  # a regular file or /dev/null (epoll refuses them): never blocks
            made.close()
            sel = None
        try:
            while b"\n" not in self.buf and not self.eof:
                if len(self.buf) > limit:
                    raise SpecError(f"a line of more than {limit} bytes on stdin")
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                if sel is not None and not sel.select(wait):
                    continue
                chunk = os.read(self.fd, 1 << 20)
                self.buf += chunk
                self.eof = not chunk
        finally:
            if sel is not None:
                sel.close()
        line, nl, self.buf = self.buf.partition(b"\n")
        if not nl and not line:
            return None
        return line


def read_spec(reader: LineReader, wait_s: float = SPEC_WAIT_S) -> RunSpec:
    """The run spec, the first line on stdin (the launcher's write). SpecError when none came."""
    line = reader.readline(time.monotonic() + wait_s)
    if line is None and reader.eof:
        raise SpecError("stdin ended before the run spec came (the coordinator writes it at launch)")
    if line is None:
        raise SpecError(f"no run spec on stdin within {wait_s:g} s (the coordinator writes it at launch)")
    return RunSpec.from_line(line)


def new_run_id() -> str:
    import secrets

    return secrets.token_hex(8)


def new_probe_key() -> str:
    """A run's probe key: 16 random bytes, hex (the agents' datagrams and SIDR tokens are tagged
    with it; a process on the fabric without the spec cannot forge them)."""
    import secrets

    return secrets.token_hex(16)


LISTEN, CONNECT = "listen", "connect"  # a pair's two ends


def side_of(rank: int, peer: int) -> str:
    """The one side rule: in a pair the lower rank listens, the higher connects."""
    return LISTEN if rank < peer else CONNECT


class OfSpec:
    """What the coordinator's plan and an agent's view both read of their run spec, said once:
    its nodes and its rails."""

    spec: RunSpec

    @property
    def n(self) -> int:
        return self.spec.n

    @property
    def rails(self) -> int:
        return self.spec.rails
