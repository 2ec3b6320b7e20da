"""`rdmacli watch status` for people: what the agents name, as a table, then what could not be
judged (disputed pairs, nodes that did not answer). The JSON has the same, as data.blame."""

from __future__ import annotations

from rich.table import Table

from rdmacli.mesh.watchfindings import StatusBlame, StatusReport, StatusTotals
from rdmacli.outcome import Outcome
from rdmacli.render.text import printable

NOBODY = StatusBlame(False, (), (), (), (), (), {})
NO_TOTALS = StatusTotals(0, 0, 0, 0, 0, 0, 0, 0)


def _what(flapping: bool, what: str) -> str:
    return f"flapping {what}" if flapping else f"bad {what}"


def status_view(app, outcome: Outcome, report: StatusReport | None = None) -> None:
    """The agents' names for what is bad, and the counts (report.totals)."""
    b = report.blame if report is not None else NOBODY
    t = report.totals if report is not None and report.totals is not None else NO_TOTALS
    con = app.out
    con.print(f"[bold]watch status[/]: {t.answered} of {t.nodes} node(s) answered, "
              f"{t.rails} rail(s), at least {t.windows_min} window(s) each")  # fmt: skip
    rows = [("bad node", x.node, ", ".join(x.causes)) for x in b.nodes]
    rows += [(_what(x.flapping, "NIC"), f"{x.node}:{x.rail}", x.cause) for x in b.nics]
    rows += [
        (_what(x.flapping, "link"), f"{x.a}:{x.rail_a} - {x.b}:{x.rail_b}", x.cause or "") for x in b.links
    ]
    if rows:
        table = Table(show_header=True, header_style="bold")
        for col in ("what", "who", "cause"):
            table.add_column(col)
        for row in rows:
            table.add_row(*(printable(c) for c in row))
        con.print(table)
    elif t.answered:
        con.print("nothing named: every agent that answered sees its partners healthy")
    else:
        con.print("nothing to judge: no agent answered")
    for x in b.disputed[:12]:
        con.print(f"  disputed (named by one end only): {printable(x.a)}:{x.rail_a} - "
                  f"{printable(x.b)}:{x.rail_b}", markup=False, highlight=False)  # fmt: skip
    if b.missing:
        con.print(f"  no answer from: {printable(', '.join(b.missing[:16]))}", markup=False, highlight=False)
    for node, why in list(b.refused.items())[:8]:
        con.print(f"  refused from {printable(node)}: {printable(why)}", markup=False, highlight=False)
