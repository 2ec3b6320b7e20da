"""The records a flow gives its observer as it runs: one typed record per kind of thing said.

A command's view reads their fields (render/events.py); `--json-lines` writes `to_dict()`, at
the edge, with the keys the JSON lines always had, in the same order. A record is stamped with
its time and side when the flow gives it out (Flow.emit), unless it carries the time of the
CM event it tells of.

What only a protocol or the CM knows (a CM event's data, a connection's figures, a stream's rate,
a group's join) rides in one `spliced` field: its keys go into the JSON where it is declared.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from rdmacli.errors import RdmacliError
    from rdmacli.figures import JoinInfo, Rate

OMIT_NONE = {"omit_none": True}  # a field left out of the JSON when it is None


def spliced(words: str, **kw: Any) -> Any:
    """A field whose keys (a dict's, or its to_dict()'s) go in its place; `words` name them."""
    return field(metadata={"splice": words}, **kw)


STAMP = ("t_us", "side")  # every record's, written last (or t_us second: TIMED_FIRST)


@dataclass(kw_only=True)
class Event:
    TYPE: ClassVar[str] = ""
    WORDS: ClassVar[str] = ""  # what the record says, for the docs (schema.RECORD_TYPES)
    TIMED_FIRST: ClassVar[bool] = False  # t_us right after the type: the time of the event told of
    t_us: float | None = None  # µs since the run began: set by Flow.emit unless given
    side: str = ""  # client or server: set by Flow.emit

    @classmethod
    def described(cls) -> str:
        """Its words and its keys, as json.md and rdmacli(1) list them (t_us and side: every one's)."""
        keys = [f.metadata.get("splice") or f.name for f in fields(cls) if f.name not in STAMP]
        return f"{cls.WORDS}: {', '.join(keys)}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = (
            {"type": self.TYPE, "t_us": self.t_us} if self.TIMED_FIRST else {"type": self.TYPE}
        )
        for f in fields(self):
            if f.name in STAMP:
                continue
            value = getattr(self, f.name)
            if f.metadata.get("splice"):
                d.update(value if isinstance(value, dict) else value.to_dict())
            elif value is not None:
                d[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
            elif not f.metadata.get("omit_none"):
                d[f.name] = None
        d.update(t_us=self.t_us, side=self.side)  # t_us stays where TIMED_FIRST put it
        return d


@dataclass(kw_only=True)
class CmEventRecord(Event):
    """A CM event as it was read (the live table's row)."""

    TYPE = "cm_event"
    WORDS = "a CM event as it arrives"
    TIMED_FIRST = True
    conn: int | None
    event: str
    status: int
    status_text: str
    data: dict[str, Any] = spliced("the event's data (private_data_len, qp_num, ...)", default_factory=dict)


@dataclass(kw_only=True)
class Warning(Event):
    TYPE = "warning"
    WORDS = "a warning as it happens"
    message: str


@dataclass(kw_only=True)
class Step(Event):
    """One of cmtime's steps done on a connection (engine.timing)."""

    TYPE = "step"
    WORDS = "a timed step of a connection (cmtime's names)"
    conn: int
    step: str
    us: float


@dataclass(kw_only=True)
class Ready(Event):
    """A server listens: the readiness record scripts and tests wait for."""

    TYPE = "ready"
    WORDS = "a server listens (port_space: tcp, udp, ib, ipoib)"
    address: str
    port: int
    port_space: str | int


@dataclass(kw_only=True)
class Request(Event):
    """A connection request came in (the CONNECT_REQUEST row names no connection yet)."""

    TYPE = "request"
    WORDS = "a server received a connection request"
    TIMED_FIRST = True
    conn: int
    local: str
    remote: str
    device: str | None


@dataclass(kw_only=True)
class Rejected(Event):
    TYPE = "rejected"
    WORDS = "a server refused a request"
    conn: int
    remote: str
    reason: str


@dataclass(kw_only=True)
class Waiting(Event):
    """Nothing listens at the peer yet: a client asks again while --wait lasts."""

    TYPE = "waiting"
    WORDS = "a client waits for its server to appear (--wait)"
    conn: int
    remote: str
    until_s: float | None


@dataclass(kw_only=True)
class Finished(Event):
    """A server's connection ended: its state and what it served (its protocol's figures)."""

    TYPE = "connection"
    WORDS = "a server's client finished"
    conn: int
    remote: str
    state: str
    protocol: str
    role: str
    served: dict[str, Any] = spliced("its counts (its protocol's figures)", default_factory=dict)
    error: RdmacliError | None = field(default=None, metadata=OMIT_NONE)


@dataclass(kw_only=True)
class Joined(Event):
    """A multicast group joined: a readiness record (a receiver's buffers are posted by now)."""

    TYPE = "joined"
    WORDS = "a multicast member joined (its receive buffers are posted)"
    conn: int
    info: JoinInfo = spliced("mgid, mlid, sl, qkey, group")


@dataclass(kw_only=True)
class Progress(Event):
    """A bandwidth stream's figures so far (bw's progress line, once a second)."""

    TYPE = "bw"
    WORDS = "a bw progress line each second"
    conn: int
    rate: Rate = spliced("messages, bytes, seconds, gbps, msg_per_s")


@dataclass(kw_only=True)
class Ping(Event):
    """One ping answered (rping -v's line)."""

    TYPE = "ping"
    WORDS = "one answered ping (valid with -V, data with -v)"
    conn: int
    ping: int
    rtt_us: float
    size_bytes: int
    valid: bool | None = field(default=None, metadata=OMIT_NONE)  # only with --validate
    data: str | None = field(default=None, metadata=OMIT_NONE)  # what the buffer held (-v)


EVENTS: tuple[type[Event], ...] = (
    CmEventRecord, Step, Ready, Waiting, Request, Rejected, Joined, Ping, Progress, Finished, Warning
)  # fmt: skip
