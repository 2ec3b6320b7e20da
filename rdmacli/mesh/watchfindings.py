"""What `rdmacli watch status` found, as types: the agents' names for bad NICs, nodes and links.

Beside mesh's own (findings.py), in the mesh layer that owns the fabric's verdicts, below the
renderers that read them. watch/status.blame makes a StatusBlame from the gathered state files;
watch/gather.judged wraps it in a StatusReport with each agent's freshness. The text
(render/watch.py), the JSON (written once, here, by `to_json`: the documented data.blame of
watch status) and the scheduler's drain (sched/drain.py) read these fields. Nothing here judges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class NamedNode:
    """A node every rail of which is named (its causes, one each)."""

    node: str
    causes: tuple[str, ...]

    def to_json(self) -> Json:
        return {"node": self.node, "causes": list(self.causes)}


@dataclass(frozen=True)
class NamedNic:
    """A NIC its own agent names, or most of its partners do."""

    node: str
    rail: int
    cause: str
    flapping: bool = False

    def to_json(self) -> Json:
        return {"node": self.node, "rail": self.rail, "cause": self.cause, "flapping": self.flapping}


@dataclass(frozen=True)
class NamedPair:
    """A pair of NICs: a link both ends name (`cause`), or one end alone names (disputed:
    no cause, blamed on nobody)."""

    a: str
    rail_a: int
    b: str
    rail_b: int
    cause: str | None = None
    flapping: bool = False

    def name(self, rails: int) -> str:
        return f"{self.a}:{self.rail_a}-{self.b}:{self.rail_b}" if rails > 1 else f"{self.a}-{self.b}"

    def to_json(self) -> Json:
        d: Json = {"a": self.a, "rail_a": self.rail_a, "b": self.b, "rail_b": self.rail_b}
        if self.cause is not None:
            d.update(cause=self.cause, flapping=self.flapping)
        return d


@dataclass(frozen=True)
class StatusBlame:
    """The fabric's verdict from the agents' state: in mesh's levels (nodes, NICs, links), the
    pairs one end names alone, the nodes that did not answer and those whose answer was
    refused (why); `fabric_slow` when most NICs were slow at once (nobody blamed for it)."""

    fabric_slow: bool
    nodes: tuple[NamedNode, ...]
    nics: tuple[NamedNic, ...]
    links: tuple[NamedPair, ...]
    disputed: tuple[NamedPair, ...]
    missing: tuple[str, ...]
    refused: Mapping[str, str]

    @property
    def named(self) -> int:
        return len(self.nodes) + len(self.nics) + len(self.links)

    def names(self, rails: int) -> list[str]:
        """The named nodes, NICs and links, as people read them (n03, n03:1, n01:0-n04:0)."""
        return [*(x.node for x in self.nodes), *(f"{x.node}:{x.rail}" for x in self.nics),
                *(x.name(rails) for x in self.links)]  # fmt: skip

    def culprits(self) -> list[tuple[str, str, list[str]]]:
        """(node, what: "node" or "rail 1", its causes) of each named node and NIC: what a
        scheduler's drain says (sched/drain.py)."""
        return [*((x.node, "node", list(x.causes)) for x in self.nodes),
                *((x.node, f"rail {x.rail}", [x.cause]) for x in self.nics)]  # fmt: skip

    def pair_ends(self) -> set[str]:
        """The nodes of the links both ends name: not cleared. A disputed pair, one end's word
        alone, holds no one (a liar would keep an innocent drained)."""
        return {n for x in self.links for n in (x.a, x.b)}

    def to_json(self) -> Json:
        return {
            "fabric_slow": self.fabric_slow,
            "nodes": [x.to_json() for x in self.nodes],
            "nics": [x.to_json() for x in self.nics],
            "links": [x.to_json() for x in self.links],
            "disputed": [x.to_json() for x in self.disputed],
            "missing": list(self.missing),
            "refused": dict(self.refused),
        }


@dataclass(frozen=True)
class Freshness:
    """When an agent wrote what it said (its last window), and whether its host starved it."""

    time: float
    window: int | None  # none yet before its first
    windows: int
    skipped: int
    host_wait: float
    starved: int

    def to_json(self) -> Json:
        return {"time": self.time, "window": self.window, "windows": self.windows, "skipped": self.skipped,
                "host_wait": self.host_wait, "starved": self.starved}  # fmt: skip


@dataclass(frozen=True)
class StatusTotals:
    """watch status's counts: the summary's `totals` (written at the edge from `to_json`)."""

    nodes: int  # asked
    answered: int
    rails: int
    bad_nodes: int
    bad_nics: int
    bad_links: int
    disputed: int
    windows_min: int  # the fewest windows an agent that answered has judged

    def to_json(self) -> Json:
        return asdict(self)


@dataclass(frozen=True)
class StatusReport:
    """watch status's data: the blame, each agent's freshness, and the liars it tolerates."""

    blame: StatusBlame
    agents: Mapping[str, Freshness]
    liars_tolerated: int
    totals: StatusTotals | None = None  # the summary's totals, not its data

    def to_json(self) -> Json:
        return {"blame": self.blame.to_json(), "agents": {n: f.to_json() for n, f in self.agents.items()},
                "liars_tolerated": self.liars_tolerated}  # fmt: skip
