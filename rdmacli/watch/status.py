"""`rdmacli watch status`: the agents' current verdicts for a node set, as one blame.

Each agent's state file (statefile.StateDoc) holds only what is not OK: its NICs' verdicts and
its suspicious pairs. Gathered (through the launcher, `watch show` on each node), they are read
as untrusted records (types and sizes checked, names only those of the map) and blamed with
mesh's rules: a NIC its own agent names (it sees all of its own pairs), or one named by two or
more of its partners that are more than half of them, is a bad NIC; a node whose every rail is
bad is a bad node; a pair named from both ends whose NICs are not bad is a bad link. A pair
named by one end while the other says nothing of it is disputed: listed, never blamed (one
liar cannot move the verdict of an honest node). What this holds grows with nodes x rails and
with trouble: healthy pairs are never said by anyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rdmacli.mesh.blame import LIARS
from rdmacli.mesh.watchfindings import NamedNic, NamedNode, NamedPair, StatusBlame
from rdmacli.watch.hysteresis import NAMED, State
from rdmacli.watch.judge import DEAD, SLOW
from rdmacli.watch.statefile import Refused, StateDoc


@dataclass
class Gathered:
    names: list[str]
    rails: int
    docs: dict[str, StateDoc] = field(default_factory=dict)  # node -> its checked state doc
    refused: dict[str, str] = field(default_factory=dict)  # node -> why its words were not taken
    partners: dict[str, int] = field(default_factory=dict)  # node -> its NICs' partners; n - 1 unless said

    def partners_of(self, node: str) -> int:
        return self.partners.get(node, len(self.names) - 1)

    def take(self, node: str, doc) -> None:
        """A node's state doc as it answered (untrusted): kept checked, or refused in words."""
        try:
            self.docs[node] = StateDoc.parse(doc, node, self.names, self.rails)
        except Refused as exc:
            self.refused[node] = str(exc)


def partner_counts(groups: tuple[str, ...], names: list[str], kind: str, k: int) -> dict[str, int]:
    """Each node's partners a period under `--pairs kind[:k]`, from the agents' own grouped
    schedule (plan.partner_counts): the "most of its partners" of the blame. Empty for all
    (every other node)."""
    if kind == "all" or not groups:
        return {}
    from rdmacli.watch.plan import partner_counts as counted

    return counted(names, tuple(groups), k if kind == "sample" else 0)


def blame(g: Gathered) -> StatusBlame:
    """The fabric's verdict from the gathered docs, in mesh's shape (nodes, nics, links,
    unexplained) with the disputed pairs and the nodes that did not answer."""
    rails = g.rails
    rank = {name: i for i, name in enumerate(g.names)}
    said: dict[tuple, dict[str, str]] = {}  # (nic, nic) sorted -> {an end that names it: cause}
    seen: dict[tuple, set[str]] = {}  # (nic, nic) sorted -> the ends that see trouble on it at all
    flapping: set = set()  # pairs and NICs an end says flap
    for node, doc in g.docs.items():
        for p in doc.pairs:
            key = tuple(sorted(((node, p.rail), (p.peer, p.peer_rail))))
            seen.setdefault(key, set()).add(node)
            if p.state in NAMED:
                said.setdefault(key, {})[node] = p.cause or DEAD
                if p.state == State.FLAPPING.value:
                    flapping.add(key)
    agreed, disputed = {}, []
    for key, by in said.items():
        other = ({key[0][0], key[1][0]} - set(by)).pop() if len(by) == 1 else None
        if other is None or other in seen[key] or other not in g.docs:
            agreed[key] = next(iter(by.values()))  # both ends see it, or the other never answered
        else:
            disputed.append(key)
    bad: dict[tuple, str] = {}
    for node, doc in g.docs.items():  # a NIC its own agent names
        for own in doc.nics:
            if own.state in NAMED:
                bad[(node, own.rail)] = own.cause or DEAD
                if own.state == State.FLAPPING.value:
                    flapping.add((node, own.rail))
    per_nic: dict[tuple, list] = {}
    witnesses: dict[tuple, set] = {}  # NIC -> the partner nodes whose pairs with it are named
    for (x, y), cause in agreed.items():
        per_nic.setdefault(x, []).append(cause)
        per_nic.setdefault(y, []).append(cause)
        witnesses.setdefault(x, set()).add(y[0])
        witnesses.setdefault(y, set()).add(x[0])
    for nic, causes in per_nic.items():  # named by most of its partners (the plan's, not n - 1)
        if nic not in bad and len(witnesses[nic]) > LIARS and len(causes) * 2 > g.partners_of(nic[0]):
            bad[nic] = max(set(causes), key=causes.count)
    # slow is judged against each agent's own past; when most NICs that answered are slow at
    # once, it is the hosts or the whole fabric (as mesh judges slow against the fabric's best):
    # said, nobody blamed for it
    slow = [nic for nic, cause in bad.items() if cause == SLOW]
    fabric_slow = len(slow) * 2 > len(g.docs) * rails
    if fabric_slow:
        for nic in slow:
            del bad[nic]
        agreed = {k: c for k, c in agreed.items() if c != SLOW}
    whole = sorted(
        (name for name in g.names if all((name, r) in bad for r in range(rails))), key=rank.__getitem__
    )
    links = [
        _pair(key, cause, key in flapping)
        for key, cause in sorted(agreed.items())
        if key[0] not in bad and key[1] not in bad
    ]
    return StatusBlame(
        fabric_slow=fabric_slow,
        nodes=tuple(NamedNode(name, tuple(sorted({bad[(name, r)] for r in range(rails)}))) for name in whole),
        nics=tuple(
            NamedNic(a, r, bad[(a, r)], (a, r) in flapping)
            for a, r in sorted(bad, key=lambda k: (rank[k[0]], k[1]))
            if a not in whole
        ),
        links=tuple(links),
        # a pair one end names alone is disputed, unless a NIC named for itself explains it
        disputed=tuple(_pair(k) for k in sorted(disputed) if k[0] not in bad and k[1] not in bad),
        missing=tuple(
            sorted(
                (name for name in g.names if name not in g.docs and name not in g.refused),
                key=rank.__getitem__,
            )
        ),
        refused=dict(sorted(g.refused.items())),
    )


def _pair(key, cause: str | None = None, flapping: bool = False) -> NamedPair:
    (a, ra), (b, rb) = key
    return NamedPair(a, ra, b, rb, cause, flapping)
