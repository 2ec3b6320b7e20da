"""Slurm's side of a verdict: drain a node with rdmacli's reason, resume it when it is healthy
again, and never touch a drain that is not rdmacli's.

Slurm asks a HealthCheckProgram to act by itself ("execute `scontrol update NodeName=foo
State=drain Reason=tbd`", slurm.conf(5)), and NHC shows the etiquette this follows: a drain is
ours when its reason starts with our prefix (`rdmacli:`, as NHC's start with `NHC:`); only those
are resumed or reworded. An operator's drain, NHC's or another tool's stays as it is, with its
words. Every word goes to scontrol as an argv element (no shell); a reason is one printable line
(render.health folds it). Each scontrol call has a deadline: a health check has 60 s in all.

What to do is a table (RULES) of (healthy, drained, ours) -> verb and words, pure and tested on
its own; `act` reads the node, looks its row up and runs what it says.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError

PREFIX = "rdmacli:"  # `check --slurm`'s drain reasons; NHC's are `NHC:`
# the fleet's, one per front-end: each resumes only its own drains (a node check finds healthy
# stays drained while the mesh still names its NIC)
MESH_PREFIX, WATCH_PREFIX = "rdmacli mesh:", "rdmacli watch:"
MAX_REASON = 200  # characters of a drain reason: readable in `sinfo -R`, a line in `scontrol show node`
SCONTROL_S = 15.0  # one scontrol call's deadline (a HealthCheckProgram is killed after 60 s)
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a Slurm node name as slurm.conf has them
DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})
_STAMP = re.compile(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$")  # scontrol's " [user@time]" after a reason


@dataclass(frozen=True)
class Node:
    """A node as `scontrol show node` has it: its state's words (IDLE, DRAIN, ...) and reason."""

    name: str
    states: frozenset[str]
    reason: str = ""

    @property
    def drained(self) -> bool:
        return bool(DRAINED & self.states)

    def drained_by(self, prefix: str) -> bool:
        return self.drained and self.reason.startswith(prefix)


@dataclass(frozen=True)
class Action:
    """What was (or, with dry_run, would be) done to one node, and why, for the summary."""

    node: str
    verb: str  # drain, resume or keep
    words: str
    argv: tuple[str, ...] = ()
    done: bool = False

    def to_dict(self) -> dict:
        return {"node": self.node, "action": self.verb, "words": self.words,
                "command": list(self.argv) or None, "done": self.done}  # fmt: skip


# (healthy, drained, ours) -> (verb, words); "drain" with our own reason already there is a keep
RULES: dict[tuple[bool, bool, bool], tuple[str, str]] = {
    (True, False, False): ("keep", "healthy, not drained"),
    (True, False, True): ("keep", "healthy, not drained"),
    (True, True, True): ("resume", "healthy again: resumed (rdmacli had drained it)"),
    (True, True, False): ("keep", "healthy, but drained by someone else: left as it is"),
    (False, False, False): ("drain", "unhealthy: drained"),
    (False, False, True): ("drain", "unhealthy: drained"),
    (False, True, True): ("drain", "unhealthy, drained by rdmacli: its reason brought up to date"),
    (False, True, False): ("keep", "unhealthy, but drained by someone else: their reason kept"),
}


def decide(node: Node, reason: str | None, prefix: str = PREFIX) -> Action:
    """The row for this node and verdict (reason None: healthy); ours: a reason with `prefix`."""
    ours = node.reason.startswith(prefix)
    verb, words = RULES[(reason is None, node.drained, ours)]
    if verb == "drain" and node.drained and node.reason == reason:
        verb, words = "keep", "unhealthy, already drained by rdmacli for this"
    if verb == "keep" and node.drained and not ours:
        words += f" ({node.reason or 'no reason given'})"
    argv: tuple[str, ...] = ()
    if verb == "drain":
        argv = ("scontrol", "update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}")
    elif verb == "resume":
        argv = ("scontrol", "update", f"NodeName={node.name}", "State=RESUME")
    return Action(node.name, verb, words, argv)


def parse_node(name: str, text: str) -> Node:
    """`scontrol show node NAME`'s lines: State=A+B+... and a Reason line of its own (its
    "[user@time]" stamp taken off). Flags after a state word (IDLE*, DOWN~) are dropped."""
    states: frozenset[str] = frozenset()
    reason = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Reason="):
            reason = _STAMP.sub("", line[len("Reason=") :])
        m = re.search(r"(?:^|\s)State=(\S+)", line)
        if m and not states:
            states = frozenset(w.rstrip("*~#!%$@^-") for w in m.group(1).upper().split("+"))
    if not states:
        raise RdmacliError(f"scontrol show node {name}: no State= in its answer",
                           hint="is this Slurm's scontrol?", cause=Cause.ENVIRONMENT)  # fmt: skip
    return Node(name, states, reason)


def call(argv: list[str], env: dict | None, end: float | None = None) -> subprocess.CompletedProcess:
    """One call of a Slurm command (scontrol, sinfo), ended at SCONTROL_S or at `end` (a
    monotonic time), whichever is first."""
    wait = SCONTROL_S if end is None else min(SCONTROL_S, end - time.monotonic())
    if wait <= 0:
        raise RdmacliError(f"no time left for {' '.join(argv[:2])} within --deadline",
                           hint="raise --deadline (at most 50 s)", cause=Cause.DEADLINE)  # fmt: skip
    import shutil  # here: with bz2 and lzma beneath it, a cost `watch run`'s start need not pay

    if shutil.which(argv[0], path=(env or {}).get("PATH")) is None:
        raise RdmacliError(f"{argv[0]} not found on PATH", hint="install Slurm's client (slurm-client), or "
                           "run where Slurm's commands are", cause=Cause.ENVIRONMENT)  # fmt: skip
    try:
        return subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=wait,
                              env=env, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RdmacliError(f"{' '.join(argv[:3])}: no answer within {wait:.3g} s",
                           hint="is slurmctld up and reachable (scontrol ping)?",
                           cause=Cause.ENVIRONMENT) from None  # fmt: skip


def said(r: subprocess.CompletedProcess) -> str:
    """scontrol's words, one line and bounded (the error renderer shows control characters)."""
    return " ".join((r.stderr or r.stdout or "").split())[:200] or "no words"


def read_node(name: str, env: dict | None = None, end: float | None = None) -> Node:
    if not NODE_NAME.fullmatch(name):
        raise RdmacliError(f"{name[:80]!r} is not a Slurm node name", cause=Cause.USAGE)
    r = call(["scontrol", "show", "node", name], env, end)
    if r.returncode != 0:
        known = "not found" not in (r.stderr + r.stdout).lower()
        raise RdmacliError(
            f"scontrol show node {name}: exit {r.returncode}: {said(r)}",
            hint="is slurmctld up (scontrol ping)?" if known else f"Slurm does not know a node {name}: "
            "give --slurm-node its name in slurm.conf",
            cause=Cause.ENVIRONMENT,
        )  # fmt: skip
    return parse_node(name, r.stdout)


def act(name: str, reason: str | None, *, prefix: str = PREFIX, dry_run: bool = False,
        env: dict | None = None, end: float | None = None) -> Action:  # fmt: skip
    """Read the node, decide, and (unless dry_run) run the scontrol line, all by `end` (a
    monotonic time). A failed update is an error naming scontrol's words and exit code; a drain
    that is not ours is never touched. (Between the read and the update an operator may drain
    the node too: scontrol has no compare-and-set, and the update then rewords their drain.)"""
    action = decide(read_node(name, env, end), reason, prefix)
    if not action.argv or dry_run:
        return action
    r = call(list(action.argv), env, end)
    if r.returncode != 0:
        words = f"scontrol update NodeName={name} ({action.verb}): exit {r.returncode}: {said(r)}"
        raise RdmacliError(words, hint="run it as root or as SlurmUser", cause=Cause.ENVIRONMENT)
    return Action(action.node, action.verb, action.words, action.argv, done=True)
