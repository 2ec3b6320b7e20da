"""The fabric's word on this node, for `rdmacli check`: the verdict the local `rdmacli watch`
agent keeps on this node's NICs, judged from its partners' probes (what no scheduler's own health
check knows: whether the rest of the fabric can reach this NIC).

The state file is read as untrusted input, by the state file's own NicEntry rules: a bad, stale
or oversized one is said, never taken.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from rdmacli.diag.doctor import Check
from rdmacli.errors import Cause
from rdmacli.mesh.contract import MAX_RAILS
from rdmacli.mesh.shape import take, wire
from rdmacli.watch.hysteresis import NAMED
from rdmacli.watch.statefile import TYPE, NicEntry, Refused, _Head, _num, _refuse

MAX_STATE_BYTES = 16 << 20  # the watch state of a 1000-node x 8-rail fabric is about 1.3 MB
STALE_WINDOWS = 3  # a watch state older than this many of its periods is not the fabric's word now
STALE_FLOOR_S = 600.0
SEE_STATUS = "its partners' probes fail through it: `rdmacli watch status` shows the fabric's view"


@dataclass(frozen=True)
class _When:
    """When the state was written and the agent's period: what makes it the fabric's word now."""

    time: float = wire(_num)
    period_s: float = wire(_num)


@dataclass(frozen=True)
class FabricWord:
    """The local watch agent's word on one of this node's NICs."""

    rail: int
    device: str | None
    state: str
    cause: str | None


def read_watch_state(path: str, now: float | None = None) -> tuple[list[FabricWord] | None, str]:
    """The local agent's verdicts on this node's NICs, or None with why there are none (no
    agent here, a stale or unreadable state). The file is checked as untrusted input (the
    state file's own NicEntry rules): a bad one is said, never taken."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None, f"no watch agent's state at {path} (`rdmacli watch run` keeps it)"
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    if len(raw) > MAX_STATE_BYTES:
        return None, f"{path}: larger than {MAX_STATE_BYTES >> 20} MB, not a watch state"
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None, f"{path}: not JSON"
    head = _Head(**take(_Head, doc, _refuse)) if isinstance(doc, dict) else None
    if head is None or head.type != TYPE or head.nics is None or len(head.nics) > MAX_RAILS:
        return None, f"{path}: not a watch state"
    try:
        entries = [NicEntry.parse(x, MAX_RAILS) for x in head.nics]
    except Refused as exc:
        return None, f"{path}: {exc}"
    try:  # the state file's own bound of a time
        when = _When(**take(_When, doc, _refuse))
    except Refused:
        return None, f"{path}: its time is not a time"
    at, period = when.time, when.period_s
    now = time.time() if now is None else now
    stale = max(STALE_WINDOWS * period, STALE_FLOOR_S)
    if now - at > stale:
        return None, f"{path}: written {now - at:.0f} s ago, older than {stale:.0f} s (is the agent running?)"
    return [FabricWord(e.rail, e.device, e.state, e.cause) for e in entries], ""


def fabric_checks(path: str, now: float | None = None) -> list[Check]:
    """What this node's partners see of its NICs, as the watch agent judged it: a NIC it names
    (bad, clearing or flapping) fails; without an agent's fresh state, said and not judged."""
    words, why = read_watch_state(path, now)
    if words is None:
        return [Check("fabric", "info", why)]
    out = []
    for w in words:
        name = f"fabric rail {w.rail}" + (f" ({w.device})" if w.device else "")
        if w.state in NAMED:
            said = f"the watch agent names it {w.state}: {w.cause or 'bad'}"
            out.append(Check(name, "fail", said, SEE_STATUS, Cause.CHECK_FAILED))
        else:
            out.append(Check(name, "pass", f"the watch agent's verdict: {w.state}"))
    return out or [Check("fabric", "info", "the watch agent's state names no NIC yet")]
