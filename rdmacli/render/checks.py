"""Tables of checks (doctor) and protocol rows (selftest)."""

from __future__ import annotations

from rich.table import Table

from rdmacli.units import duration

STYLE = {"pass": "[green]✔ pass[/]", "warn": "[yellow]⚠ warn[/]", "fail": "[red]✘ fail[/]", "info": "info",
         "skipped": "[dim]- skipped[/]", "n/a": "[dim]- n/a[/]"}  # fmt: skip


def checks_table(rows: list[dict], title: str, columns: list[str]) -> Table:
    from rich.markup import escape

    table = Table(title=title, title_justify="left", show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        cells = []
        for col in columns:
            value = row.get(col)
            if col == "verdict":
                cells.append(STYLE.get(str(value), str(value)))
            elif col.endswith("_ms") and isinstance(value, (int, float)):
                cells.append(duration(value * 1e3))
            else:
                cells.append(escape("" if value is None else str(value)))
        table.add_row(*cells)
    return table
