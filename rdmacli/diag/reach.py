"""The partners' word, asked now: `rdmacli check --partners N` has each rail of this node ask N
partners' connection managers, from its own address to theirs, for a port nobody listens on.

A reject ("nothing is listening") or an accept is the partner's CM answering: this NIC, the path
and the partner's NIC carried a request and its answer, both ways, on the rail's own addresses.
It needs nothing running on the partner (no agent, no listener) and moves no data: the data path
is what `mesh` and `watch` judge. Nothing here is a pair verdict either: a partner that does not
answer may be down itself. So a rail fails only when two or more partners were asked and none
answered; one that some answered is a warning naming who did not (their fault or their path's,
never a reason to drain this node).

The partners are the N nodes after this one in the map's order (a ring: every node's check asks
its next N, and the fleet's checks cover every node). The probes run one after another (a flow
each, as `doctor`'s), each within its share of the check's deadline and PROBE_MAX_S; a probe the
deadline leaves no time for is said, not counted.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from rdmacli.diag.doctor import Check, probe
from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma.constants import PS_TCP

PORT = 1  # RDMA_PS_TCP's port 1 (tcpmux's number): no RDMA service listens there
PROBE_MAX_S = 3.0  # one partner's answer at most: a CM answers a request in under a millisecond
PROBE_MIN_S = 0.5  # less than this left: the probe is not started (said, not counted)
ANSWERED = (Cause.NOBODY_LISTENING, Cause.REJECTED)  # the partner's CM said no: it answered


@dataclass(frozen=True)
class Partner:
    name: str
    addresses: tuple[str, ...]  # by rail, as the map says them


@dataclass(frozen=True)
class Asked:
    """One rail's question to one partner: answered (and how fast), or why not."""

    partner: str
    address: str
    answered: bool
    ms: float
    words: str  # the engine's words of what happened
    cause: Cause | None = None


def partners_of(nodes: list[Partner], me: int, n: int) -> list[Partner]:
    """The n nodes after `me` in the map's order, wrapping; never this node, each once."""
    count = min(n, len(nodes) - 1)
    return [nodes[(me + k) % len(nodes)] for k in range(1, count + 1)]


def on_this_host(address: str) -> bool:
    """Whether the address is one of this host's (the map's word for this node's rail): a
    socket binds to it."""
    try:
        family, _, _, _, where = socket.getaddrinfo(address, 0, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind(where)
    except (OSError, UnicodeError):
        return False
    return True


def ask(src: str, dst: str, partner: str, seconds: float) -> Asked:
    """One CM request from src to dst's PORT, within `seconds` (the address's resolution in
    half of them, as the C tools hand rdma_resolve_addr its own limit)."""
    t0 = time.monotonic()
    resolve_ms = max(100, int(seconds * 1000 / 2))
    try:
        _, err = probe(dst, PORT, PS_TCP, route_only=False, resolve_ms=resolve_ms, connect_s=seconds, src=src)
    except RdmacliError as exc:  # refused before any flow ran (an address that is no address)
        err = exc
    ms = round((time.monotonic() - t0) * 1e3, 1)
    if err is None:
        return Asked(partner, dst, True, ms, "accepted")
    return Asked(partner, dst, err.cause in ANSWERED, ms, err.message, err.cause)


def rail_check(rail: int, src: str, asked: list[Asked], untried: list[str]) -> Check:
    """One rail's row from its answers (the module's rule)."""
    name = f"reach rail {rail}"
    answered = [a for a in asked if a.answered]
    silent = [a for a in asked if not a.answered]
    late = f"; not asked in time: {', '.join(untried)}" if untried else ""
    if asked and not silent:
        said = ", ".join(f"{a.partner} {a.ms:g} ms" for a in answered)
        return Check(name, "pass", f"{src}: {len(answered)} partner(s) answered ({said}){late}")
    why = "; ".join(f"{a.partner} {a.address}: {a.words}" for a in silent)
    if answered:
        return Check(
            name, "warn", f"{src}: {len(answered)} of {len(asked)} partner(s) answered; not {why}{late}",
            "a partner that does not answer while others do is its own fault or its path's "
            "(`rdmacli doctor PARTNER` from here, `rdmacli check` there)",
        )  # fmt: skip
    if len(asked) < 2:
        words = f"{src}: {why}{late}" if asked else f"{src}: no partner asked{late}"
        return Check(
            name, "warn", words, "one partner cannot tell whose fault it is: ask two or more (--partners)"
        )
    return Check(
        name, "fail", f"{src}: none of {len(asked)} partners answered ({why}){late}",
        "this rail's NIC, cable or switch port: `rdmacli doctor PARTNER` from here; the port's "
        "counters (`rdmacli check`'s) and the switch's", Cause.UNREACHABLE,
    )  # fmt: skip


def reach_checks(nodes: list[Partner], me: int, n: int, end: float, step=lambda what: None) -> list[Check]:
    """Each rail of node `me` asks its partners (partners_of), one probe after another, the
    first partner of every rail before any rail's second (a dead rail's silences cannot starve
    the others of their first answers), every probe within `end`: a row per rail of this node."""
    mine = nodes[me]
    absent = {r for r, src in enumerate(mine.addresses) if not on_this_host(src)}
    jobs = [(r, p) for p in partners_of(nodes, me, n)
            for r in range(len(mine.addresses)) if r not in absent and r < len(p.addresses)]  # fmt: skip
    step(f"asking {n} partner(s) from {len(mine.addresses) - len(absent)} rail(s)")
    answers: list[Asked | None] = []
    for k, (r, p) in enumerate(jobs):
        left = end - time.monotonic()
        # its share of what is left, at least PROBE_MIN_S (an answer takes a millisecond; only a
        # silence takes all of it), at most PROBE_MAX_S; none left: not asked, and said
        share = min(PROBE_MAX_S, max(PROBE_MIN_S, left / (len(jobs) - k)), left)
        answers.append(
            ask(mine.addresses[r], p.addresses[r], p.name, share) if share >= PROBE_MIN_S else None
        )
    asked: dict[int, list[Asked]] = {}
    untried: dict[int, list[str]] = {}
    for (r, p), a in zip(jobs, answers, strict=True):
        if a is None:
            untried.setdefault(r, []).append(p.name)
        else:
            asked.setdefault(r, []).append(a)
    rows = []
    for r, src in enumerate(mine.addresses):
        if r in absent:
            said = f"{src} (the map's) is not an address of this host: not asked"
            rows.append(
                Check(f"reach rail {r}", "warn", said, "fix this node's map line, or name it with --node")
            )
        else:
            rows.append(rail_check(r, src, asked.get(r, []), untried.get(r, [])))
    return rows
