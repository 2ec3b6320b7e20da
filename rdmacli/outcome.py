"""What a run came to: each connection's state, and from those the result, exit code and totals.

One place decides what passed. Every command's JSON summary is built here (`Outcome.to_dict`)
with one schema (schema.py's `SUMMARY_SCHEMA`, documented in the README and rdmacli(1)); render/ only
formats what this module derived. Knows nothing of click, rich or C.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Protocol

from rdmacli.counters import Deltas
from rdmacli.errors import EXIT_OF, Cause, ExitCode, RdmacliError
from rdmacli.figures import BwFigures, BwTotals, Figures, LatFigures, StepRow, Traffic, as_dict

SCHEMA = "rdmacli/1"


class State(str, Enum):
    """Where one connection (or multicast member) is; the last four are final."""

    PENDING = "pending"  # being set up: resolving, connecting, joining
    ESTABLISHED = "established"  # connected or joined, data may be moving
    DONE = "done"  # finished its exchange
    FAILED = "failed"
    REJECTED = "rejected"  # a server of ours refused it (or was full)
    INTERRUPTED = "interrupted"  # still open when a signal ended the run

    @property
    def final(self) -> bool:
        return self in _FINAL  # (a set: asked dozens of times a connection, `make profile` saw)


_FINAL = frozenset((State.DONE, State.FAILED, State.REJECTED, State.INTERRUPTED))


def dumps(doc, **kw) -> str:
    """A document as strict JSON, always: a non-finite number (which no check should let in,
    but a document must never be invalid JSON for it) is written as null."""
    import json

    try:
        return json.dumps(doc, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(_finite(doc), allow_nan=False, **kw)


def _finite(v):
    import math

    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


class Report(Protocol):
    """A command's typed report: it writes its own part of the summary's data."""

    def to_json(self) -> dict[str, Any]: ...


def signal_exit(signum: int) -> int:
    """The shell's convention: 128 + the signal number (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + signum


@dataclass
class ConnOutcome:
    index: int
    state: State
    local: str = "?"
    remote: str = "?"
    device: str | None = None
    stats: Figures | None = None  # the protocol's own figures (messages, pings, rates, ...)
    protocol: str | None = None  # connect, ping, ud, mcast, events
    role: str | None = None  # client or server
    error: RdmacliError | None = None
    teardown_errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d: dict[str, object] = {
            "conn": self.index,
            "state": self.state.value,
            "local": self.local,
            "remote": self.remote,
            "device": self.device,
            "protocol": self.protocol,
            "role": self.role,
        }
        d.update(as_dict(self.stats))
        if self.error is not None:
            d["error"] = self.error.to_dict()
        if self.teardown_errors:
            d["teardown_errors"] = list(self.teardown_errors)
        return d


TRAFFIC = ("messages_received", "messages_sent", "bytes_received", "bytes_sent")


@dataclass
class Earlier:
    """The connections a long-running server no longer lists (engine.flow.Flow.listed): counted
    by state, their traffic summed, the first error kept. Its size does not grow with them."""

    states: dict = field(default_factory=dict)  # State -> how many
    traffic: dict = field(default_factory=dict)  # TRAFFIC key -> its sum
    first_error: RdmacliError | None = None

    @property
    def count(self) -> int:
        return sum(self.states.values())

    def add(self, c: ConnOutcome) -> None:
        self.states[c.state] = self.states.get(c.state, 0) + 1
        if isinstance(c.stats, Traffic):
            for key in TRAFFIC:
                n = getattr(c.stats, key)
                if n is not None:
                    self.traffic[key] = self.traffic.get(key, 0) + n
        if self.first_error is None:
            self.first_error = c.error


@dataclass(frozen=True)
class Tally:
    """A connection command's counts: its connections by how they ended, the traffic its
    connections counted (TRAFFIC: only what some connection counted), and how many of them a
    long-running server no longer lists."""

    connections: int  # not counting the rejected
    passed: int
    failed: int
    rejected: int
    interrupted: int
    traffic: dict[str, int]
    unlisted: int = 0

    def to_dict(self) -> dict:
        d = {"connections": self.connections, "connections_passed": self.passed,
             "connections_failed": self.failed, "connections_rejected": self.rejected,
             "connections_interrupted": self.interrupted, **self.traffic}  # fmt: skip
        if self.unlisted:
            d["connections_unlisted"] = self.unlisted  # counted above, not in `connections`
        return d


@dataclass
class Outcome:
    command: str
    params: dict = field(default_factory=dict)
    connections: list[ConnOutcome] = field(default_factory=list)
    error: RdmacliError | None = None  # what ended the run, if anything did
    signal: int | None = None  # the signal that stopped the run (SIGINT, SIGTERM, SIGHUP)
    failed: bool = False  # a check of a non-connection command (doctor, selftest) failed
    failed_words: str = "a check failed"  # which, for people (the cause is check_failed)
    steps_us: list[StepRow] = field(default_factory=list)
    elapsed_ms: float = 0.0
    warnings: list[str] = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # totals of a non-connection command
    data: dict = field(default_factory=dict)  # what only this command reports (devices, checks)
    counters: list[Deltas] = field(default_factory=list)  # ports' counters that moved
    sweep: list[BwFigures | LatFigures] = field(default_factory=list)  # -a: each size's, in order
    bw: BwTotals | None = None  # bw: all QPs' figures together
    earlier: Earlier | None = None  # a persistent server's connections no longer listed
    # a typed report of this command's own (mesh.findings.MeshReport): the summary's data is
    # written from it here, at the edge, with `data`'s keys after its own
    report: Report | None = None

    # -- derived -------------------------------------------------------------------------------
    def states(self) -> list[State]:
        return [c.state for c in self.connections]

    def count_of(self, state: State) -> int:
        """Connections in `state`, the listed and the earlier ones."""
        return self.states().count(state) + (self.earlier.states.get(state, 0) if self.earlier else 0)

    @property
    def served(self) -> int:
        """Connections accounted for, listed or not."""
        return len(self.connections) + (self.earlier.count if self.earlier else 0)

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return signal_exit(self.signal)
        err = self.run_error()
        if err is not None:
            return int(err.exit_code)
        if self.failed or self.count_of(State.FAILED):
            return int(EXIT_OF[Cause.CHECK_FAILED])
        return int(ExitCode.OK)

    def run_error(self) -> RdmacliError | None:
        """What failed the run: its own error, else the first failed connection's, else (a
        server that served nobody) that every client it saw was rejected."""
        err = self.first_error()
        if err is None and self.failed:
            return RdmacliError(self.failed_words, cause=Cause.CHECK_FAILED)
        if err is not None or not self.served or self.count_of(State.REJECTED) < self.served:
            return err
        return RdmacliError(
            "no connection was served: every client was rejected",
            hint="see each rejection's reason; raise --max-size or send smaller requests",
            cause=Cause.ALL_REJECTED,
        )

    @property
    def result(self) -> str:
        if self.signal is not None:
            return "interrupted"
        return "pass" if self.exit_code == 0 else "fail"

    def tally(self) -> Tally | None:
        """The connections' counts and traffic; None for a run that served none."""
        if not self.served:
            return None
        moved = [c.stats for c in self.connections if isinstance(c.stats, Traffic)]
        before = self.earlier.traffic if self.earlier else {}
        traffic = {}
        for key in TRAFFIC:
            counts = [n for n in (getattr(f, key) for f in moved) if n is not None]
            if counts or key in before:
                traffic[key] = sum(counts) + before.get(key, 0)
        return Tally(
            connections=self.served - self.count_of(State.REJECTED),
            passed=self.count_of(State.DONE),
            failed=self.count_of(State.FAILED),
            rejected=self.count_of(State.REJECTED),
            interrupted=self.count_of(State.INTERRUPTED),
            traffic=traffic,
            unlisted=self.earlier.count if self.earlier else 0,
        )

    def totals(self) -> dict:
        """The summary's totals: the tally's, then a command's own counts."""
        tally = self.tally()
        return {**(tally.to_dict() if tally is not None else {}), **self.counts}

    def first_error(self) -> RdmacliError | None:
        earlier = self.earlier.first_error if self.earlier else None
        return self.error or earlier or next((c.error for c in self.connections if c.error), None)

    def to_dict(self) -> dict:
        err = self.run_error()
        return {
            "schema": SCHEMA,
            "type": "summary",
            "command": self.command,
            "result": self.result,
            "exit_code": self.exit_code,
            "params": self.params,
            "totals": self.totals(),
            "connections": [c.to_dict() for c in self.connections],
            "steps_us": [asdict(s) for s in self.steps_us],
            "elapsed_ms": self.elapsed_ms,
            "error": err.to_dict() if err is not None else None,
            "warnings": list(self.warnings),
            "counters": [d.to_dict() for d in self.counters],
            "data": self.data_doc(),
        }

    def data_doc(self) -> dict:
        """`data`: the typed report's, then a command's own keys, then its typed figures."""
        d = {**self.report.to_json(), **self.data} if self.report is not None else dict(self.data)
        if self.sweep:
            d["sweep"] = [f.to_dict() for f in self.sweep]
        if self.bw is not None:
            d["bw"] = self.bw.to_dict()
        return d


def merged(outcomes: list[Outcome]) -> Outcome:
    """The outcomes of tests run one after another (a size sweep, -a: one test per size) as one
    run's: their connections in order, numbered again; what ended the last (a sweep stops at
    the first test that fails or is stopped); the step timings, warnings and port counters of
    all; the last one's data and report."""
    from dataclasses import replace

    from rdmacli.counters import summed

    first, last = outcomes[0], outcomes[-1]
    conns = [replace(c, index=i) for i, c in enumerate(c for o in outcomes for c in o.connections)]
    return Outcome(
        command=first.command,
        params=first.params,
        connections=conns,
        error=last.error,
        signal=last.signal,
        steps_us=summed_steps([o.steps_us for o in outcomes]),
        elapsed_ms=round(sum(o.elapsed_ms for o in outcomes), 1),
        warnings=[w for o in outcomes for w in o.warnings],
        counters=summed([d for o in outcomes for d in o.counters]),
        data=dict(last.data),
        report=last.report,
        bw=last.bw,
    )


def summed_steps(tables: list[list[StepRow]]) -> list[StepRow]:
    """Step timing tables (engine.timing's rows) of tests run one after another, as one: counts
    and totals added, the extremes kept, the average taken again; in first-seen order."""
    from dataclasses import replace

    rows: dict[str, StepRow] = {}
    for table in tables:
        for r in table:
            m = rows.get(r.step)
            if m is None:
                rows[r.step] = r
                continue
            n = m.count + r.count
            rows[r.step] = replace(
                m,
                count=n,
                avg_us=round((m.avg_us * m.count + r.avg_us * r.count) / n, 1),
                total_us=round(m.total_us + r.total_us, 1),
                min_us=min(m.min_us, r.min_us),
                max_us=max(m.max_us, r.max_us),
            )
    return list(rows.values())
