"""`rdmacli mesh` for people: live progress, the pair matrix, failing pairs by cause, blame.

Formats the summary document the coordinator built; decides nothing.
"""

from __future__ import annotations

import time

from rdmacli.diag.counters import ADVICE
from rdmacli.mesh.report import CAUSES
from rdmacli.render.text import printable
from rdmacli.render.units import counter_words, duration

MATRIX_MAX = 32


class MeshProgress:
    """Rounds done, pairs passed/failed so far and the time left, on stderr (transient)."""

    def __init__(self, app, plan):
        self.app, self.plan = app, plan
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
        self.task = self.progress.add_task(
            "mesh", total=None, nodes=self.plan.n, round=0, rounds=len(self.plan.rounds) or "?",
            passed=0, failed=0, phase="launching agents",
        )  # fmt: skip
        return self

    def update(self, collector) -> None:
        if self.progress is None:
            return
        plan, now = self.plan, time.time()
        rnd = (
            0 if now < plan.start_at else min(len(plan.rounds), int((now - plan.start_at) / plan.round_s) + 1)
        )
        counts = collector.counts()
        agents = len(collector.agents)
        phase = f"{agents}/{plan.n} agents up" if now < plan.start_at else ""
        self.progress.update(
            self.task, total=counts["pairs"], completed=counts["passed"] + counts["failed"], round=rnd,
            rounds=len(plan.rounds), passed=counts["passed"], failed=counts["failed"], phase=phase,
        )  # fmt: skip

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None


def _figure(p: dict) -> str:
    """A passing pair's cell: the slower direction's Gb/s, the round trip's p50, or setup time."""
    if p.get("gbps_ab") is not None or p.get("gbps_ba") is not None:
        return f"{min(v for v in (p.get('gbps_ab'), p.get('gbps_ba')) if v is not None):.2f}G"
    v = p.get("rtt_p50_us") if p.get("rtt_p50_us") is not None else p.get("setup_us")
    return "ok" if v is None else duration(v)


def print_mesh(app, doc: dict) -> None:
    from rich.table import Table

    data = doc.get("data") or {}
    nodes, pairs, verdict = data.get("nodes", []), data.get("pairs", []), data.get("blame", {})
    con = app.out
    if nodes and len(nodes) <= MATRIX_MAX:
        metric = (
            "Gb/s, the slower way"
            if any(p.get("gbps_ba") is not None for p in pairs)
            else "p50 network round trip"
            if any(p.get("host_rtt_p50_us") is not None for p in pairs)
            else "p50 ping latency"
            if any(p.get("rtt_p50_us") is not None for p in pairs)
            else "setup time"
        )
        table = Table(
            title=f"rdmacli mesh: {metric} per pair (failures as cause codes)", box=None, pad_edge=False
        )
        table.add_column("")
        for i, _ in enumerate(nodes):
            table.add_column(str(i), justify="right")
        cell = {}
        for p in pairs:
            text = _figure(p) if p["result"] == "pass" else (p.get("cause") or "?")
            style = "" if p["result"] == "pass" else ("yellow" if p["result"] == "missing" else "bold red")
            cell[(p["a_rank"], p["b_rank"])] = cell[(p["b_rank"], p["a_rank"])] = (text, style)
        for row in nodes:
            r = row["rank"]
            cells = []
            for c in range(len(nodes)):
                text, style = cell.get((r, c), ("·" if r == c else "", ""))
                cells.append(f"[{style}]{text}[/]" if style else text)
            table.add_row(f"{r} {row['node']}", *cells)
        con.print(table)
        used = sorted({p.get("cause") for p in pairs if p.get("cause")})
        if used:
            con.print("legend: " + "; ".join(f"[bold red]{c}[/] {CAUSES.get(c, '')}" for c in used))
    failing = [p for p in pairs if p["result"] != "pass"]
    if failing:
        con.print("\n[bold]failing pairs by cause[/]")
        by_cause: dict[str, list[dict]] = {}
        for p in failing:
            by_cause.setdefault(p.get("cause") or "?", []).append(p)
        for cause, items in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
            con.print(f"  [bold red]{cause}[/] ({len(items)}): {CAUSES.get(cause, '')}")
            for p in items[:12]:
                msg = (p.get("error") or {}).get("message", "")
                con.print(f"    {p['a']} <-> {p['b']}: {printable(msg)}", markup=False, highlight=False)
            if len(items) > 12:
                con.print(f"    ... and {len(items) - 12} more (see --json)")
    again = [p for p in pairs if p.get("retest")]
    if again:
        transient = [p for p in again if p["retest"]["verdict"] == "transient"]
        con.print(
            f"\n[bold]re-tested[/] {len(again)} failed pair(s) at the end: {len(again) - len(transient)} "
            f"confirmed, {len(transient)} transient (passed the second time: counted as passed)"
        )
        for p in transient[:12]:
            first = p["retest"]["first"]
            msg = (first.get("error") or {}).get("message", "")
            con.print(f"    transient {p['a']} <-> {p['b']} ({first.get('cause')}): {printable(msg)}",
                      markup=False, highlight=False)  # fmt: skip
    ranked = sorted(nodes, key=lambda n: (-n["failed"], n["node"]))
    if any(n["failed"] for n in nodes):
        con.print(
            "\n[bold]nodes by failures[/]  "
            + ", ".join(f"{n['node']} {n['failed']}" for n in ranked if n["failed"])
        )
    slow = sorted((n for n in nodes if n.get("p99_us")), key=lambda n: -n["p99_us"])
    if slow:
        con.print(
            "[bold]nodes by p99 latency[/]  "
            + ", ".join(f"{n['node']} {duration(n['p99_us'])}" for n in slow[:8])
        )
    con.print("\n[bold]blame[/]")
    if not (verdict.get("nodes") or verdict.get("links") or verdict.get("unexplained")):
        con.print("  nothing to blame: every pair passed" if not failing else "  nothing decided")
    for b in verdict.get("nodes", []):
        causes = ", ".join(f"{c} {n}" for c, n in b["causes"].items())
        share = f"{b['failed']} of {b['tested']}"
        con.print(f"  [bold red]bad node[/] {b['node']}: failed with {share} partners ({causes})")
        if b.get("counters"):
            con.print(f"    its NIC's counters (the port's, shared): {counter_words(b['counters'])}")
    for link in verdict.get("links", []):
        ends = f"{link['a']} <-> {link['b']}"
        con.print(f"  [bold red]bad link[/] {ends} ({link['cause']}): both pass with everyone else")
        if link.get("counters"):
            con.print(f"    counters of both ends during the pair: {counter_words(link['counters'])}")
    if any(c in ("LOSS", "LINK", "RNR") for e in verdict.get("nodes", []) + verdict.get("links", [])
           for c in (e.get("causes") or {e.get("cause"): 1})):  # fmt: skip
        con.print(f"  what to check: {ADVICE['loss']}")
    for u in verdict.get("unexplained", []):
        con.print(
            f"  [yellow]unexplained[/] {u['a']} <-> {u['b']} ({u['cause']}): "
            "too few passing pairs to tell node from link"
        )
    for change in data.get("baseline") or []:
        con.print(f"  [yellow]vs baseline[/] {change['a']} <-> {change['b']}: {change['change']}")
    t = doc.get("totals", {})
    con.print(
        f"\nmesh: {doc['result']} - {t.get('pairs_passed', 0)}/{t.get('pairs', 0)} pairs passed, "
        f"{t.get('pairs_failed', 0)} failed, {t.get('pairs_missing', 0)} missing; {t.get('nodes', 0)} nodes, "
        f"{t.get('rounds', 0)} rounds in {duration(doc.get('elapsed_ms', 0) * 1e3)}"
    )
