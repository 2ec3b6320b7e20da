"""The fleet's verdict acted on: `mesh --slurm-drain` and `watch status --slurm-drain` drain the
nodes it blames and resume the ones they drained that it now clears, within a cap.

Which nodes, by a stated policy (POLICY): a node blamed, or any of its NICs, is drained (a node
with one dead rail of eight cannot run the jobs that need all eight); a link is never a node's
drain (it has two ends, and the cable or the switch port between them may be the fault), nor are
pairs left unexplained or disputed, nor a node named only for its agent (it did not run, was late)
or for inconsistent reports (its word is in doubt, not its fabric). A node is cleared, and so may
be resumed, only when its agent ran and nothing in the verdict touches it.

The cap: more nodes to drain than --max-drain (a count, or a share of the run's nodes; default
DEFAULT_CAP) drains none of them, and the words say why: a fabric-wide fault or a broken switch
must not empty the cluster. Liars cannot drain an innocent beyond what they can get blamed, and
blame already tolerates them (mesh/blame.py: more than f partner nodes and a share of its pairs).

One `sinfo -R` finds the nodes this front-end drained before (its own reason prefix); every node
acted on is read and updated through sched/slurm.py's table, so an operator's drain, NHC's or
`check --slurm`'s is never touched. What the coordinator holds grows with trouble, not with nodes.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Protocol

from rdmacli.errors import Cause, RdmacliError
from rdmacli.sched import slurm

DEFAULT_CAP = "10%"
# short causes that are the node's agent, not its fabric (a node named for inconsistent reports is
# never in blame's nodes or NICs: mesh/verdict.py says it as the run's error, so it drains nothing)
NOT_DRAINED_FOR = frozenset({"AGENT"})
POLICY = ("a node blamed, or any of its NICs, is drained; links, unexplained and disputed pairs, "
          "and a node named only for its agent or inconsistent reports are not")  # fmt: skip
HELD = (
    "drained by rdmacli and still named, though not for a drain (a pair both ends name, or its "
    "agent): left drained until a verdict clears it"
)
MAX_DRAIN_WORDS = "a count of nodes (3) or a share of the run's (10%)"


def cap_of(spec: str, nodes: int) -> int:
    """--max-drain's nodes: N, or P% of the run's nodes rounded down (at least one where P > 0)."""
    m = re.fullmatch(r"(\d{1,6})(%?)", spec.strip())
    if not m or (m.group(2) and int(m.group(1)) > 100):
        raise ValueError(f"{spec[:40]!r} is not {MAX_DRAIN_WORDS}")
    k = int(m.group(1))
    if not m.group(2):
        return k
    return max(1, math.floor(nodes * k / 100)) if k else 0


@dataclass(frozen=True)
class Plan:
    """What the verdict asks: node -> reason to drain it for; nodes it clears; nodes it holds
    (named, but not for a drain: in a pair both ends name, or for its agent), which stay as they
    are, said so a drain of ours left standing is explained. A pair one end names alone (disputed)
    holds nobody: one lying agent must not keep an innocent node drained."""

    prefix: str
    drain: dict[str, str] = field(default_factory=dict)
    clear: tuple[str, ...] = ()
    held: tuple[str, ...] = ()


def _line(text: str) -> str:
    """One printable line (a device name an agent gave reaches a reason only this way)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


class Verdict(Protocol):
    """A verdict's blame as the drain reads it (mesh.findings.Blame, watch.findings.StatusBlame)."""

    def culprits(self) -> list[tuple[str, str, list[str]]]: ...

    def pair_ends(self) -> set[str]: ...


def plan(blame: Verdict, ran: list[str], prefix: str) -> Plan:
    """From a verdict's blame (mesh's or watch status's) and the nodes whose agents ran
    (answered): what to drain and what is cleared."""
    drain: dict[str, list[str]] = {}
    touched: set[str] = set()
    for node, what, codes in blame.culprits():
        touched.add(node)
        if not codes or set(codes) <= NOT_DRAINED_FOR:
            continue
        drain.setdefault(node, []).append(f"{what} {', '.join(codes[:3])}")
    touched |= blame.pair_ends()
    clear = tuple(n for n in ran if n not in touched)
    held = tuple(n for n in ran if n in touched and n not in drain)
    reasons = {n: _line(f"{prefix} {'; '.join(w)}")[: slurm.MAX_REASON] for n, w in drain.items()}
    return Plan(prefix, reasons, clear, held)


@dataclass
class Done:
    """What the drain did, node by node, for the summary's data.slurm and the words."""

    policy: str = POLICY
    cap: int = 0
    over_cap: bool = False
    dry_run: bool = False
    actions: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    words: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"policy": self.policy, "cap": self.cap, "over_cap": self.over_cap, "dry_run": self.dry_run,
                "actions": self.actions, "errors": self.errors}  # fmt: skip


def drained_by(prefix: str, env: dict | None = None, end: float | None = None) -> set[str]:
    """The nodes whose drain reason is this front-end's: one `sinfo -R`, a line per node."""
    r = slurm.call(["sinfo", "-R", "-h", "-N", "-o", "%N|%E"], env, end)
    if r.returncode != 0:
        raise RdmacliError(f"sinfo -R: exit {r.returncode}: {slurm.said(r)}",
                           hint="is slurmctld up (scontrol ping)?", cause=Cause.ENVIRONMENT)  # fmt: skip
    out = set()
    for line in r.stdout.splitlines()[: 100 * 1000]:
        name, _, reason = line.partition("|")
        if reason.startswith(prefix) and slurm.NODE_NAME.fullmatch(name.strip()):
            out.add(name.strip())
    return out


def apply(p: Plan, cap: int, *, dry_run: bool = False, env: dict | None = None,
          deadline_s: float = 120.0) -> Done:  # fmt: skip
    """Drain (unless over the cap) and resume, each node on its own: one that fails is said
    with scontrol's words and the others go on (a partial drain, reported node by node)."""
    end = time.monotonic() + deadline_s
    done = Done(cap=cap, dry_run=dry_run)
    drain = dict(p.drain)
    if len(drain) > cap:
        done.over_cap = True
        done.words.append(f"{len(drain)} nodes to drain, above --max-drain ({cap}): none drained (a fault "
                          "this wide is the fabric's or a switch's, not these nodes')")  # fmt: skip
        drain = {}
    todo: list[tuple[str, str | None]] = list(drain.items())
    mine: set[str] = set()
    if p.clear or p.held:
        try:
            mine = drained_by(p.prefix, env, end)
        except RdmacliError as exc:  # said; the drains go on
            done.errors.append({"node": None, "message": exc.message})
            done.words.append(f"slurm: cannot tell which nodes to resume: {exc.message}")
        todo += [(n, None) for n in p.clear if n in mine]
    for node in (n for n in p.held if n in mine):  # ours, not resumed: the verdict still names it
        # (a keep needs no scontrol: the sinfo line that made it ours is the read)
        done.actions.append(slurm.Action(node, "keep", HELD).to_dict())
        done.words.append(f"slurm: {node}: {HELD}")
    for node, reason in todo:
        try:
            a = slurm.act(node, reason, prefix=p.prefix, dry_run=dry_run, env=env, end=end)
        except RdmacliError as exc:
            done.errors.append({"node": node, "message": exc.message})
            done.words.append(f"slurm: {node}: {exc.message}")
            continue
        done.actions.append(a.to_dict())
        if a.verb != "keep" or a.words.startswith("unhealthy, but"):
            done.words.append(f"slurm: {node}: " + (f"would {a.verb}" if dry_run and a.argv else a.words))
    return done
