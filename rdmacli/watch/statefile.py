"""The watch agent's state file, declared once: what `watch run` writes after each window
(service.state_doc builds a StateDoc) and what `watch status` takes back from every node
(StateDoc.parse, as untrusted input: types, sizes and bounds checked, names only the map's).

It holds only what is not OK (a NIC's verdict, a suspicious pair) and each NIC's facts for
people (its device, why it did not open, the datagrams it dropped): what it holds grows with
rails and with trouble, never with healthy pairs. A field an older agent does not write takes
its default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rdmacli.mesh.contract import MAX_RAILS, int_in
from rdmacli.mesh.shape import take, wire
from rdmacli.watch.hysteresis import State
from rdmacli.watch.judge import CAUSES

VERSION = 1
TYPE = "watch"
STATES = tuple(s.value for s in State)
MAX_PAIRS = 4096  # pairs one agent may say in a small fabric: more is not a state file of ours
PAIR_BYTES = 160  # one pair entry's JSON at most (names of 64 characters): the line bound's share
MAX_TEXT = 300  # a problem's words
MAX_NAME = 64  # an address or a device name
MAX_COUNT = 2**63 - 1
MAX_TIME = 1e13  # seconds, windows: far beyond any clock or run


def max_pairs(nodes: int, rails: int) -> int:
    """Pairs one agent may say: every partner's rail-aligned pair in the fabric (a bound that
    follows its size), never less than MAX_PAIRS."""
    return max(MAX_PAIRS, max(nodes - 1, 0) * rails)


def max_line(nodes: int, rails: int) -> int:
    """The longest `watch show` line an agent of this fabric may answer with."""
    from rdmacli.mesh.records import MAX_LINE

    return MAX_LINE + max_pairs(nodes, rails) * PAIR_BYTES


class Refused(ValueError):
    """A state doc that cannot be taken; the words say what was wrong."""


def _refuse(name: str, words: str) -> Refused:
    return Refused(f"{name} out of bounds")


def _count(v) -> bool:
    return int_in(0, MAX_COUNT)(v)  # the mesh contract's check, one definition of a bounded integer


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < MAX_TIME


def _text(most: int, optional: bool = True):
    return lambda v: (optional and v is None) or (isinstance(v, str) and len(v) <= most)


def _reference(v) -> bool:
    return v is None or (
        isinstance(v, dict) and len(v) <= 8 and all(x is None or _num(x) for x in v.values())
    )


def _state():
    return wire(lambda v: v in STATES, default=State.OK.value)


def _cause():
    return wire(lambda v: v in (None, *CAUSES), default=None)


def _tally():
    return wire(_count, default=0)


def _or(ok, nothing):
    """A figure an agent may leave null: `nothing` then (an older agent's doc)."""
    return wire(lambda v: v is None or ok(v), keep=lambda v: v or nothing, default=nothing)


@dataclass(frozen=True)
class NicEntry:
    """One rail's NIC: its verdict (ok unless named or suspect) and its facts."""

    rail: int = wire(int_in(0, MAX_RAILS - 1))
    address: str = wire(_text(MAX_NAME, False), default="")
    device: str | None = wire(_text(MAX_NAME), default=None)
    state: str = _state()
    cause: str | None = _cause()
    problem: str | None = wire(_text(MAX_TEXT), default=None)  # why it did not open in the last window
    forged: int = _tally()  # datagrams and SIDR requests with a wrong tag, last window
    foreign: int = _tally()  # datagrams with a good tag from another QP than SIDR named, last window
    # what slow is judged against (judge.Reference.figures)
    reference: dict | None = wire(_reference, keep=lambda v: None if v is None else dict(v), default=None)
    # pairs of this NIC named with it and left out of `pairs` (compact form): a NIC its own agent
    # names explains them, and a dead NIC of a 1000-node fabric had 7992 entries to say
    pairs_named: int = _tally()

    @classmethod
    def parse(cls, x, rails: int) -> NicEntry:
        if not isinstance(x, dict):
            raise Refused("a NIC entry that is not an object")
        try:
            entry = cls(**take(cls, x, _refuse))
        except Refused:
            raise Refused("a NIC entry out of bounds") from None
        if entry.rail >= rails:
            raise Refused("a NIC entry out of bounds")
        return entry


@dataclass(frozen=True)
class PairEntry:
    """A pair of NICs this agent does not find OK: suspect, named or clearing."""

    rail: int = wire(int_in(0, MAX_RAILS - 1))
    peer: str = wire(lambda v: isinstance(v, str))
    peer_rail: int = wire(int_in(0, MAX_RAILS - 1))
    state: str = wire(lambda v: v in STATES)
    cause: str | None = _cause()

    @classmethod
    def parse(cls, p, node: str, names, rails: int) -> PairEntry:
        try:
            entry = cls(**take(cls, p, _refuse)) if isinstance(p, dict) else None
        except Refused:
            entry = None
        if not (entry and entry.rail < rails and entry.peer_rail < rails and entry.peer in names
                and entry.peer != node):  # fmt: skip
            raise Refused("a pair entry out of bounds")
        return entry


@dataclass(frozen=True)
class StateDoc:
    """One agent's state after its last window (window None: written at start, before any)."""

    node: str
    port: int = wire(int_in(0, 65535), default=0)
    window: int | None = wire(lambda v: v is None or _count(v), default=None)
    time: float = _or(_num, 0.0)
    window_s: float = _or(_num, 0.0)
    period_s: float = _or(_num, 0.0)
    windows: int = _or(_count, 0)
    skipped: int = _or(_count, 0)
    # windows judged on nothing: this host kept the probes from the CPU (agent.STARVED)
    starved: int = _or(_count, 0)
    # the last window's share of its phase the probe threads waited for a CPU
    host_wait: float = _or(lambda v: _num(v) and v <= 1, 0.0)
    authenticated: bool = wire(
        lambda v: isinstance(v, bool), default=False
    )  # probes tagged with the fabric's key
    nics: tuple[NicEntry, ...] = ()
    pairs: tuple[PairEntry, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"type": TYPE, "v": VERSION, **asdict(self)}

    @classmethod
    def parse(cls, doc, node: str, names, rails: int) -> StateDoc:
        """`node`'s doc as it answered `watch show`, checked; Refused says why not."""
        head = _Head(**take(_Head, doc, _refuse)) if isinstance(doc, dict) else None
        if head is None or head.type != TYPE or head.node != node:
            raise Refused("not this node's watch state")
        nics, pairs = head.nics, head.pairs
        if nics is None or pairs is None or len(nics) > rails or len(pairs) > max_pairs(len(names), rails):
            raise Refused("nics or pairs of the wrong shape or size")
        return cls(
            node=node,
            **take(cls, doc, _refuse),
            nics=tuple(NicEntry.parse(x, rails) for x in nics),
            pairs=tuple(PairEntry.parse(p, node, names, rails) for p in pairs),
        )


def _list_or_none():
    return wire(lambda v: isinstance(v, list), lenient=True, default=None)


@dataclass(frozen=True)
class _Head:
    """What a state doc is before its fields are read: its type, its node, its lists."""

    type: object = wire(default=None)
    node: object = wire(default=None)
    nics: list | None = _list_or_none()
    pairs: list | None = _list_or_none()
