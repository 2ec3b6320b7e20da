"""`rdmacli mesh` for people: live progress, the pair matrix, failing pairs by cause, blame.

Formats the summary document the coordinator built; decides nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rdmacli.diag.counters import ADVICE
from rdmacli.mesh.findings import BadPair, Blame, NicRow, PairResult
from rdmacli.mesh.kinds import check
from rdmacli.mesh.meshreport import MeshReport, MeshTotals
from rdmacli.mesh.report import CAUSES
from rdmacli.outcome import Outcome
from rdmacli.render.text import plain, printable
from rdmacli.units import counter_words, duration, plural

MATRIX_MAX = 32
NO_TOTALS = MeshTotals(*[0] * 14)  # a report made before any count (never by verdict.judge)


class MeshProgress:
    """Rounds done, pairs passed/failed so far and the time left, on stderr (transient)."""

    def __init__(self, app, run):
        self.app, self.run = app, run
        self.progress = None

    def __enter__(self):
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("mesh {task.fields[nodes]} nodes"),
            BarColumn(),
            TextColumn("round {task.fields[round]}/{task.fields[rounds]}"),
            TextColumn("[green]{task.fields[passed]} passed[/] [red]{task.fields[failed]} failed[/]"),
            TextColumn("{task.fields[phase]}"),
            TimeRemainingColumn(),
            console=self.app.err,
            transient=True,
            refresh_per_second=4,
        )
        self.progress.__enter__()
        plan = self.run.plan
        self.task = self.progress.add_task(
            "mesh", total=None, nodes=plan.n, round=0, rounds=len(plan.rounds) or "?",
            passed=0, failed=0, phase="launching agents",
        )  # fmt: skip
        return self

    def update(self) -> None:
        if self.progress is None:
            return
        run, now = self.run, time.time()
        plan, start = run.plan, run.start_at
        rnd = 0 if now < start else min(len(plan.rounds), int((now - start) / plan.spec.round_s) + 1)
        pairs, passed, failed = run.intake.counts()
        phase = f"{len(run.intake.agents)}/{plan.n} agents up" if now < start else ""
        self.progress.update(
            self.task, total=pairs, completed=passed + failed, round=rnd,
            rounds=len(plan.rounds), passed=passed, failed=failed, phase=phase,
        )  # fmt: skip

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None


class LiveMesh:
    """What people (progress, warnings) and --json-lines readers (each pair once settled) see
    while a mesh runs: the run loop's observer (mesh.run.Observer)."""

    def __init__(self, app):
        self.app = app
        self.progress: MeshProgress | None = None
        self.seen: set[tuple] = set()  # (pair key, re-test) already emitted

    def started(self, run) -> None:
        if self.app.live:
            self.progress = MeshProgress(self.app, run).__enter__()

    def record(self, run, rec) -> None:
        from rdmacli.mesh.intake import pair_key
        from rdmacli.mesh.records import PairRecord

        if self.app.json_lines and isinstance(rec, PairRecord):
            intake = run.intake
            again = rec.round in intake.retests
            pair = (intake.retests[rec.round] if again else intake.pairs).get(
                pair_key(rec.rank, rec.rail, rec.peer, rec.peer_rail)
            )
            if pair and (pair.key, again) not in self.seen and intake.settled(pair):
                self.seen.add((pair.key, again))
                self.app.emit_json(
                    {
                        "type": "pair",
                        **pair.judged(run.plan.spec.names, intake.devices).to_json(),
                        "retest": again,
                    }
                )
        if self.progress is not None:
            self.progress.update()

    def warning(self, words: str) -> None:
        if not self.app.machine:  # said once, as soon as it shows (the summary's JSON has it too)
            self.app.err.print(f"warning: {words}", markup=False, highlight=False)
            self.app.warned.add(words)

    def ended(self, run) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None

    def rest(self, outcome) -> None:
        """--json-lines: the pairs not yet emitted (never settled while the run went on)."""
        if not self.app.json_lines or outcome.report is None:
            return
        for p in outcome.report.pairs:
            if ((p.a_rank, p.rail_a, p.b_rank, p.rail_b), False) not in self.seen:
                self.app.emit_json({"type": "pair", **p.to_json()})


def _figure(p: PairResult) -> str:
    """A passing pair's cell: the slower direction's Gb/s, the round trip's p50, or setup time."""
    if p.bw:
        return f"{min(v for v in (p.gbps_ab, p.gbps_ba) if v is not None):.2f}G"
    v = p.rtt_p50_us if p.rtt_p50_us is not None else p.figure("setup_us")
    return "ok" if v is None else duration(v)


def _ends(a: str, rail_a: int | None, b: str, rail_b: int | None, rails: int) -> str:
    """n01 <-> n04, or n01:0 <-> n04:1 (rail 1 of n04) with several rails."""
    if rails == 1:
        return f"{a} <-> {b}"
    return f"{a}:{rail_a or 0} <-> {b}:{rail_b or 0}"


def _pair_ends(p: PairResult, rails: int) -> str:
    return _ends(p.a, p.rail_a, p.b, p.rail_b, rails)


def _bad_ends(x: BadPair, rails: int) -> str:
    return _ends(x.a.node, x.a.rail, x.b.node, x.b.rail, rails)


def worst_rail(nics: Sequence[NicRow], rails: int) -> int:
    """The rail with the most failed, then slow, pairs (rail 0 when all are clean)."""
    score = [[0, 0] for _ in range(rails)]
    for n in nics:
        if 0 <= n.rail < rails:
            score[n.rail][0] += n.tally.failed
            score[n.rail][1] += n.tally.slow
    return max(range(rails), key=lambda k: (score[k], -k))


def print_mesh(app, outcome: Outcome, report: MeshReport, rail: int | None = None) -> None:
    """The run's report for people; the outcome gives the result line's result and time."""
    from rich.table import Table

    nodes, all_pairs, verdict = report.nodes, report.pairs, report.blame
    rails = report.rails
    con = app.out
    pairs = all_pairs
    if rails > 1:
        shown = rail if rail is not None else worst_rail(report.nics, rails)
        pairs = [p for p in all_pairs if p.rail_a == p.rail_b == shown]
        _rail_summary(app, report.nics, rails)
    if nodes and len(nodes) <= MATRIX_MAX:
        ran = check(report.test)
        metric = ran.metric if ran is not None else "setup time"
        where = f" on rail {shown}" if rails > 1 else ""
        table = Table(
            title=f"rdmacli mesh: {metric} per pair{where} (failures as cause codes)",
            box=None,
            pad_edge=False,
        )
        table.add_column("")
        for i, _ in enumerate(nodes):
            table.add_column(str(i), justify="right")
        cell = {}
        for p in pairs:
            text = _figure(p) if p.result == "pass" and not p.slow else (p.cause or "?")
            style = "" if p.result == "pass" else ("yellow" if p.result == "missing" else "bold red")
            if p.result == "pass" and p.slow:
                text, style = f"{_figure(p)}!", "yellow"
            if p.result == "pass" and p.cause == "LOSS" and p.probes and p.probes[0]:
                sent, answered = p.probes
                text, style = f"{100 * (sent - answered) / sent:.0f}%L", "yellow"
            cell[(p.a_rank, p.b_rank)] = cell[(p.b_rank, p.a_rank)] = (text, style)
        for row in nodes:
            r = row.rank
            cells = []
            for c in range(len(nodes)):
                text, style = cell.get((r, c), ("·" if r == c else "", ""))
                cells.append(f"[{style}]{text}[/]" if style else text)
            group = f" [dim]{row.group}[/]" if row.group else ""
            table.add_row(f"{r} {row.node}{group}", *cells)
        con.print(table)
        if any(p.slow for p in pairs):
            con.print("[yellow]![/] slow: passed, but beyond --slow-factor/--slow-fraction of the best pair")
        if any(p.cause == "LOSS" and p.result == "pass" for p in pairs):
            con.print(
                "[yellow]%L[/] probes lost: passed, but that share of its probes (both ends') never answered"
            )
        used = sorted({p.cause for p in pairs if p.cause and p.result != "pass"})
        if used:
            con.print("legend: " + "; ".join(f"[bold red]{c}[/] {CAUSES.get(c, '')}" for c in used))
    pairs = all_pairs
    failing = [p for p in pairs if p.result != "pass"]
    if failing:
        con.print("\n[bold]failing pairs by cause[/]")
        by_cause: dict[str, list[PairResult]] = {}
        for p in failing:
            by_cause.setdefault(p.cause or "?", []).append(p)
        for cause, items in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
            con.print(f"  [bold red]{cause}[/] ({len(items)}): {CAUSES.get(cause, '')}")
            for p in items[:12]:
                msg = (p.error.message if p.error else None) or ""
                con.print(f"    {_pair_ends(p, rails)}: {printable(msg)}", markup=False, highlight=False)
            if len(items) > 12:
                con.print(f"    ... and {len(items) - 12} more (see --json)")
    slow = [(p, p.slow) for p in pairs if p.slow]
    if slow:
        con.print(
            f"\n[bold]slow pairs[/] ({len(slow)}): passed, but beyond the fabric's best comparable pair"
        )
        for p, s in sorted(slow, key=lambda ps: -ps[1].value / max(ps[1].best, 1e-9))[:12]:
            if s.figure == "rtt_p50_us":
                figure = f"p50 {duration(s.value)} > {duration(s.limit)} (best {duration(s.best)})"
            else:
                figure = f"{s.figure} {s.value:.2f} < {s.limit:.2f} Gb/s (best {s.best:.2f})"
            con.print(f"    {_pair_ends(p, rails)}: {figure}")
        if len(slow) > 12:
            con.print(f"    ... and {len(slow) - 12} more (see --json)")
    again = [p.retest for p in pairs if p.retest]
    if again:
        transient = [(p, p.retest) for p in pairs if p.retest and p.retest.verdict == "transient"]
        con.print(
            f"\n[bold]re-tested[/] {len(again)} failed, slow or lossy pair(s) at the end: "
            f"{len(again) - len(transient)} confirmed, {len(transient)} transient "
            "(passed the second time: counted as passed)"
        )
        for p, first in transient[:12]:
            msg = (first.first_error.message if first.first_error else None) or (
                "slow" if first.first_slow else "passed while a loss counter moved"
            )
            con.print(f"    transient {_pair_ends(p, rails)} ({first.first_cause}): {printable(msg)}",
                      markup=False, highlight=False)  # fmt: skip
    ranked = sorted(nodes, key=lambda n: (-n.tally.failed, n.node))
    if any(n.tally.failed for n in nodes):
        con.print(
            "\n[bold]nodes by failures[/]  "
            + ", ".join(f"{n.node} {n.tally.failed}" for n in ranked if n.tally.failed)
        )
    by_p99 = sorted(((n.node, n.p99_us) for n in nodes if n.p99_us), key=lambda n: -n[1])
    if by_p99:
        con.print(
            "[bold]nodes by p99 latency[/]  "
            + ", ".join(f"{node} {duration(p99)}" for node, p99 in by_p99[:8])
        )
    _blame(con, verdict, rails, failing=bool(failing))
    for change in report.baseline or []:
        con.print(f"  [yellow]vs baseline[/] {change.a} <-> {change.b}: {change.change}")
    t = report.totals or NO_TOTALS
    con.print(
        f"\nmesh: {outcome.result} - {t.pairs_passed}/{t.pairs} pairs passed, "
        f"{t.pairs_failed} failed, {t.pairs_slow} slow, {t.pairs_missing} missing; "
        f"{plural(t.nodes, 'node')}" + (f" x {rails} rails" if rails > 1 else "") + ", "
        f"{plural(t.rounds, 'round')} in {duration(outcome.elapsed_ms * 1e3)}"
    )


def _blame(con, verdict: Blame, rails: int, failing: bool) -> None:
    """Who is bad, in words: nodes, NICs and links, then what stays unexplained or disputed."""
    con.print("\n[bold]blame[/]")
    if not (verdict.named or verdict.unexplained or verdict.disputed):
        con.print("  nothing to blame: every pair passed" if not failing else "  nothing decided")
    for b in verdict.nodes:
        causes = ", ".join(f"{c} {n}" for c, n in b.causes.items())
        con.print(f"  [bold red]bad node[/] {b.node}: failed or was slow with {b.failed} of {b.tested} "
                  f"partners ({causes})")  # fmt: skip
        if b.counters:
            words = plain(counter_words(dict(b.counters)))
            con.print(f"    its pairs' counters, both ends (the ports', shared): {words}")
    for b in verdict.nics:
        causes = ", ".join(f"{c} {n}" for c, n in b.causes.items())
        dev = f" ({plain(b.device)})" if b.device else ""
        con.print(f"  [bold red]bad NIC[/] {b.node} rail {b.rail}{dev}: failed or slow with "
                  f"{b.failed} of {b.tested} partners ({causes}); its other rails pass")  # fmt: skip
    for link in verdict.links:
        con.print(
            f"  [bold red]bad link[/] {_bad_ends(link, rails)} ({link.cause}): both pass with everyone else"
        )
        if link.counters:
            con.print(
                f"    counters of both ends during the pair: {plain(counter_words(dict(link.counters)))}"
            )
    if any(c in ("LOSS", "LINK", "RNR") for c in [*(c for b in verdict.nodes for c in b.causes),
                                                  *(x.cause for x in verdict.links)]):  # fmt: skip
        con.print(f"  what to check: {ADVICE['loss']}")
    for u in verdict.unexplained:
        con.print(
            f"  [yellow]unexplained[/] {_bad_ends(u, rails)} ({u.cause}): "
            "too few passing pairs to tell node from link"
        )
    for d in verdict.disputed:
        con.print(
            f"  [yellow]disputed[/] {_bad_ends(d, rails)} ({d.cause}): failed "
            f"by {d.failed_by} alone, passed cleanly by the other end: blamed on nobody"
        )


def _rail_summary(app, nics: Sequence[NicRow], rails: int) -> None:
    """Per node, per rail: pairs passed of tested, failed and slow marked (the device named)."""
    from rich.table import Table

    table = Table(title="rdmacli mesh: per node and rail (passed/tested)", box=None, pad_edge=False)
    table.add_column("node")
    for k in range(rails):
        table.add_column(f"rail {k}", justify="right")
    rows: dict[int, list[str]] = {}
    for n in nics:
        t = n.tally
        text = f"{t.passed}/{t.tested()}"
        if n.device:
            text += f" {n.device}"
        style = "bold red" if t.failed else "yellow" if t.slow or t.missing else ""
        if t.slow:
            text += f" ({t.slow} slow)"
        cells = rows.setdefault(n.rank, [n.node] + [""] * rails)
        if 0 <= n.rail < rails:
            cells[1 + n.rail] = f"[{style}]{text}[/]" if style else text
    for rank in sorted(rows):
        table.add_row(*rows[rank])
    app.out.print(table)
