"""docs/benchmarks.md, generated from benchmarks/results/*.json by scripts/gendocs.py (`make docs`).

Apart from gendocs because it reads measurements, not the click tree: each figure's unit comes
from its results file (noise.Figure.unit), the lab's caveat and the method stand before any
figure, so a reader meets what the numbers can say before the numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

from mdgen import GENERATED, md_cell

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
# files written before a figure carried its unit (2026-11-28 to 11-30): what bench.py measured them in
UNITS_BEFORE = {"bw": "Gb/s", "lat": "µs", "connect": "ms"}

CAVEAT = """!!! warning "Measured in the lab, under emulation"
    Every `make bench` figure comes from the Soft-RoCE lab: a VM under TCG (no KVM) on a
    2-CPU machine. Absolute figures (Gb/s, µs, ms) say nothing of real hardware; what carries
    over is the **ratio** of rdmacli to the C tool measured side by side in one boot, and only
    when its interval is narrow. `make scale-bench` runs on the host, without RDMA.
"""

BENCH_METHOD = """**Figures are ratios with their noise.** rdmacli / C tool: both tools' runs alternate (drift
hits both) until the ratio's 90 % bootstrap interval is narrower than the goal's margin (0.05 for
bandwidth's >= 0.95x, 0.1 for latency's, connection set-up's and steps' <= 1.1x), or 12 runs
each. The verdict is met or missed only when the whole interval is on one side of the goal, else
"not separable in this lab" (`benchmarks/noise.py`).

**Every run crossed the wire.** Each run is checked to have crossed the lab's wire (rxe1, veth1,
veth0, rxe0): the client's netdev sent at least the payload the run claims (a bandwidth run's
Gb/s for its duration, a latency run's messages, a connection run's echoes). perftest to perftest
runs on perftest's own exchange, each end on its device and GID index (`-d`, `-x`): Debian's
perftest does not bind an `-R` client to its `--source_ip`. Beside bandwidth at 64 KiB, perftest
against itself by the same rule: the lab's own noise.

**Connection set-up is the marginal connection**: (work(128) - work(1)) / 127 from two runs back
to back, in ms per connection, rdmacli timed by its own `elapsed_ms` (`--json`, as users run it),
so a Python start, whose jitter under TCG is larger than many connections' work, is outside the
clock; the C tool from its first line to its exit. The client runs natively (`RDMACLI_CM_PATH=native`,
its connections in C) and on the Python engine (the reference and the fallback) in the same rounds.
The server side (`serve`): a `ucmatose -c N` client served by `rdmacli listen` and by ucmatose's
own server in turn, the client's work the clock for both. Goal 1.1x: margin 0.1.

**Steps** (`steps`): `rdmacli events -c 64` natively against `cmtime -c 64`, rounds alternating
against one cmtime server; each step's figure is its span over all connections per connection
(cmtime's column), both tools running each step for every connection before the next. The
Python engine's table, one run, beside it.

**Beside them**: `ud`'s marginal datagram (10 to 1 010 each way, µs) is a figure likewise; ping and
mcast are medians of `BENCH_RUNS` (default 3) runs of each, their marginal cost likewise from a
small and a big run. Where a connection's time goes: `make profile`.
"""


def result_files(kind: str) -> list[dict]:
    docs = []
    for path in sorted(RESULTS.glob(f"{kind}-*.json")):
        doc = json.loads(path.read_text())
        doc["file"] = f"benchmarks/results/{path.name}"
        docs.append(doc)
    return docs


def run_header(doc: dict) -> str:
    m, v = doc.get("machine", {}), doc.get("versions", {})
    where = f"{m.get('cpus')} x {m.get('cpu')}" + (
        f", {m['virtualization']}" if m.get("virtualization") else ""
    )
    libs = ", ".join(f"{k} {v[k]}" for k in ("librdmacm", "libibverbs", "perftest") if v.get(k))
    return (f"`{doc['file']}`: {doc['when']}, rdmacli {v.get('rdmacli')} at {v.get('commit')} "
            f"({v.get('data_path')} data path), {libs}; {where}, kernel {m.get('kernel')}; "
            f"args `{' '.join(doc.get('args') or []) or '(defaults)'}`."
            + (f" Note: {doc['note']}." if doc.get("note") else ""))  # fmt: skip


def benchmarks_page() -> str:
    """docs/benchmarks.md: the caveat, the method, then each kind's latest runs."""
    out = [
        "# Benchmarks\n",
        GENERATED,
        CAVEAT,
        "Figures are data: `make bench` (rdmacli and the C tools side by side in one lab boot) and "
        "`make scale-bench` (the fabric simulator: the real coordinator and blame at fleet size) "
        "each write one JSON file a run under `benchmarks/results/`, with the machine and the "
        "versions it ran on, and this page is generated from them. Older runs stay in git log.\n",
        "## How make bench measures\n",
        BENCH_METHOD,
        "## make bench: the C tools side by side\n",
    ]
    bench = result_files("bench")
    if not bench:
        out.append("No run recorded yet: `make bench` writes one.\n")
    out += figures_table(bench)
    seen: set[str] = set()  # each section from the latest run that has it, under that run's header
    for doc in reversed(bench):
        sections = {k: v for k, v in doc["figures"]["sections"].items() if k not in seen}
        if sections:
            seen |= set(sections)
            out.append(run_header(doc) + "\n")
            out += ["```\n" + "\n".join(lines) + "\n```\n" for lines in sections.values()]
    out += scale_section()
    out += liars_section()
    return "\n".join(out) + "\n"


def figures_table(runs: list[dict]) -> list[str]:
    """The figures with their noise (benchmarks/noise.py), each from the last two runs that have
    it, side by side: each tool's min/median/max in the figure's unit, the ratio's interval and
    the verdict."""
    had: dict[str, list[dict]] = {}  # each section's runs, oldest first
    for doc in runs:
        for section in doc["figures"].get("figures") or {}:
            had.setdefault(section, []).append(doc)
    rows: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for section, docs in had.items():  # a figure its section's last two runs no longer have is gone
        for doc in docs[-2:]:
            for fig in doc["figures"]["figures"][section]:
                rows.setdefault((section, fig["name"]), []).append((doc["when"][:16], fig))
    if not rows:
        return []
    out = ["Each figure: rdmacli's runs and the C tool's (min / median / max in the figure's unit, "
           "and how many runs), the ratio of the medians with its 90 % bootstrap interval, and the "
           "verdict against the goal (met or missed only when the whole interval is on one side; "
           "else not separable in this lab). Each figure from the last two runs that "
           "measured its section, each run its own lab boot. Bandwidth in Gb/s (more is better), "
           "latency and steps in µs, connection set-up in ms per connection (less is better).\n",
           "| figure | run | rdmacli | C tool | ratio [interval] | goal | verdict |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip

    def side(s: dict, unit: str) -> str:
        return f"{s['low']:.3g} / {s['median']:.3g} / {s['high']:.3g} {unit} ({len(s['runs'])} runs)"

    for (section, name), seen in rows.items():
        for when, fig in seen[-2:]:
            lo, hi = fig["interval"]
            unit = fig.get("unit") or UNITS_BEFORE[section]
            goal = f"{'>=' if fig['at_least'] else '<='} {fig['goal']:g}x"
            out.append(f"| {md_cell(section)} {md_cell(name)} | {when} | {side(fig['ours'], unit)} | "
                       f"{side(fig['theirs'], unit)} | {fig['ratio']:.2f}x [{lo:.2f}, {hi:.2f}] | {goal} | "
                       f"{fig['verdict']} |")  # fmt: skip
    return [*out, ""]


def scale_section() -> list[str]:
    """The simulator's cost and blame table (benchmarks/fabric_sim.py): the latest run."""
    out = ["## make scale-bench: the coordinator and blame at fleet size\n"]
    scale = result_files("scale")
    if not scale:
        out.append("No run recorded yet: `make scale-bench` writes one.\n")
    for doc in scale[-1:]:
        out.append(run_header(doc) + "\n")
        out.append("| fabric | scenarios | pairs tested | coordinator CPU (median) | peak memory | "
                   "precision / recall / localization | goals missed |")  # fmt: skip
        out.append("|---|---|---|---|---|---|---|")
        for row in doc["figures"]["sizes"]:
            score = "no blame" if row.get("healthy_only") else " / ".join(
                f"{row[k]:.3f}" if isinstance(row.get(k), (int, float)) else "-"
                for k in ("precision", "recall", "localization"))  # fmt: skip
            out.append(f"| {md_cell(str(row.get('size')))} | {row.get('scenarios', '-')} | "
                       f"{row.get('pairs', '-')} | {row.get('cpu_s_median', '-')} s | "
                       f"{row.get('peak_mb', '-')} MB | {score} | "
                       f"{md_cell('; '.join(row.get('missed_goals') or [])) or 'none'} |")  # fmt: skip
        missed = doc["figures"].get("goals_missed") or []
        out.append("\nGoals: " + ("; ".join(missed) if missed else "every goal met") + ".\n")
    return out


def liars_section() -> list[str]:
    """The simulator's liar table (benchmarks/liar_sim.py, in `make scale-bench`)."""
    out = ["## Agents lying together: the liar scenarios\n"]
    runs = result_files("liars")
    if not runs:
        return [*out, "No run recorded yet: `make scale-bench` writes one.\n"]
    doc = runs[-1]
    f = doc["figures"]["f"]
    out.append(run_header(doc) + "\n")
    out.append("Each row: a cabal of agents accusing one innocent node (all its NICs, one NIC, one "
               "NIC under `--cross-rail`) by each lie (a deadline; their own loss counters or probes "
               "lost; refusing it), with connections and the probe, beside one real fault, through "
               "the real coordinator. A NIC is blamed from bad pairs with more than f = "
               f"{f} partner nodes and more than an eighth of its tested pairs, so the cabal tolerated "
               "grows with the partners each NIC is tested with (127 at 128 x 8, all pairs: 15 liars). "
               "Goal within the tolerance: no innocent blamed, precision and recall >= 0.99, "
               "localization >= 0.95 (the real fault named as itself); past it nothing is promised "
               "([what the mesh trusts](explanation/mesh-trust.md)).\n")  # fmt: skip
    out.append("| fabric | liars | tolerated | scenarios | innocent blamed in | precision / recall / "
               "localization |")  # fmt: skip
    out.append("|---|---|---|---|---|---|")
    for row in doc["figures"]["sizes"]:
        within = "" if row["within_f"] else " (past it)"
        tol = row.get("tolerated", f)
        keys = ("precision", "recall", "localization")
        score = " / ".join(f"{row[k]:.3f}" if k in row else "-" for k in keys)
        out.append(f"| {md_cell(str(row['size']))} | {row['liars']}{within} | {tol} | {row['scenarios']} | "
                   f"{row['innocents_blamed']} | {score} |")  # fmt: skip
    missed = doc["figures"].get("goals_missed") or []
    out.append("\nGoals: " + ("; ".join(missed) if missed else "every goal met") + ".\n")
    return out
