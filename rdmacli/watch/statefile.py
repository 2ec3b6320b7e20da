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

from rdmacli.mesh.contract import int_in
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


def _int(v, lo: int, hi: int) -> bool:
    return int_in(lo, hi)(v)  # the mesh contract's check, one definition of a bounded integer


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < MAX_TIME


def _text(v, most: int, optional: bool = True) -> bool:
    return (optional and v is None) or (isinstance(v, str) and len(v) <= most)


@dataclass(frozen=True)
class NicEntry:
    """One rail's NIC: its verdict (ok unless named or suspect) and its facts."""

    rail: int
    address: str = ""
    device: str | None = None
    state: str = State.OK.value
    cause: str | None = None
    problem: str | None = None  # why it did not open in the last window
    forged: int = 0  # datagrams and SIDR requests with a wrong tag, last window
    foreign: int = 0  # datagrams with a good tag from another QP than SIDR named, last window
    reference: dict | None = None  # what slow is judged against (judge.Reference.figures)
    # pairs of this NIC named with it and left out of `pairs` (compact form): a NIC its own agent
    # names explains them, and a dead NIC of a 1000-node fabric had 7992 entries to say
    pairs_named: int = 0

    @classmethod
    def parse(cls, x, rails: int) -> NicEntry:
        if not isinstance(x, dict):
            raise Refused("a NIC entry that is not an object")
        ok = (_int(x.get("rail"), 0, rails - 1) and x.get("state", State.OK.value) in STATES
              and x.get("cause") in (None, *CAUSES) and _text(x.get("address", ""), MAX_NAME, False)
              and _text(x.get("device"), MAX_NAME) and _text(x.get("problem"), MAX_TEXT)
              and _int(x.get("forged", 0), 0, MAX_COUNT)
              and _int(x.get("foreign", 0), 0, MAX_COUNT)
              and _int(x.get("pairs_named", 0), 0, MAX_COUNT))  # fmt: skip
        ref = x.get("reference")
        if ref is not None and not (
            isinstance(ref, dict) and len(ref) <= 8 and all(v is None or _num(v) for v in ref.values())
        ):
            ok = False
        if not ok:
            raise Refused("a NIC entry out of bounds")
        return cls(x["rail"], x.get("address", ""), x.get("device"), x.get("state", State.OK.value),
                   x.get("cause"), x.get("problem"), x.get("forged", 0), x.get("foreign", 0),
                   dict(ref) if ref is not None else None, x.get("pairs_named", 0))  # fmt: skip


@dataclass(frozen=True)
class PairEntry:
    """A pair of NICs this agent does not find OK: suspect, named or clearing."""

    rail: int
    peer: str
    peer_rail: int
    state: str
    cause: str | None = None

    @classmethod
    def parse(cls, p, node: str, names, rails: int) -> PairEntry:
        if not (isinstance(p, dict) and _int(p.get("rail"), 0, rails - 1)
                and _int(p.get("peer_rail"), 0, rails - 1) and p.get("peer") in names
                and p.get("peer") != node and p.get("state") in STATES
                and p.get("cause") in (None, *CAUSES)):  # fmt: skip
            raise Refused("a pair entry out of bounds")
        return cls(p["rail"], p["peer"], p["peer_rail"], p["state"], p.get("cause"))


@dataclass(frozen=True)
class StateDoc:
    """One agent's state after its last window (window None: written at start, before any)."""

    node: str
    port: int = 0
    window: int | None = None
    time: float = 0.0
    window_s: float = 0.0
    period_s: float = 0.0
    windows: int = 0
    skipped: int = 0
    starved: int = 0  # windows judged on nothing: this host kept the probes from the CPU (agent.STARVED)
    host_wait: float = 0.0  # the last window's share of its phase the probe threads waited for a CPU
    authenticated: bool = False  # probes tagged with the fabric's key (--key-file)
    nics: tuple[NicEntry, ...] = ()
    pairs: tuple[PairEntry, ...] = field(default=())

    def to_dict(self) -> dict:
        return {"type": TYPE, "v": VERSION, **asdict(self)}

    @classmethod
    def parse(cls, doc, node: str, names, rails: int) -> StateDoc:
        """`node`'s doc as it answered `watch show`, checked; Refused says why not."""
        if not isinstance(doc, dict) or doc.get("type") != TYPE or doc.get("node") != node:
            raise Refused("not this node's watch state")
        nics, pairs = doc.get("nics"), doc.get("pairs")
        if (
            not isinstance(nics, list)
            or not isinstance(pairs, list)
            or len(nics) > rails
            or len(pairs) > max_pairs(len(names), rails)
        ):
            raise Refused("nics or pairs of the wrong shape or size")
        for key in ("time", "window_s", "period_s", "window", "windows", "skipped", "starved", "host_wait"):
            v = doc.get(key)
            whole = key in ("window", "windows", "skipped", "starved")
            if v is not None and not (_int(v, 0, MAX_COUNT) if whole else _num(v)):
                raise Refused(f"{key} out of bounds")
        if doc.get("host_wait") is not None and doc["host_wait"] > 1:  # a share of a phase, >= 0 (_num)
            raise Refused("host_wait out of bounds")
        if not _int(doc.get("port", 0), 0, 65535) or not isinstance(doc.get("authenticated", False), bool):
            raise Refused("port or authenticated out of bounds")
        return cls(
            node=node,
            port=doc.get("port", 0),
            window=doc.get("window"),
            time=doc.get("time") or 0.0,
            window_s=doc.get("window_s") or 0.0,
            period_s=doc.get("period_s") or 0.0,
            windows=doc.get("windows") or 0,
            skipped=doc.get("skipped") or 0,
            starved=doc.get("starved") or 0,
            host_wait=doc.get("host_wait") or 0.0,
            authenticated=doc.get("authenticated", False),
            nics=tuple(NicEntry.parse(x, rails) for x in nics),
            pairs=tuple(PairEntry.parse(p, node, names, rails) for p in pairs),
        )
