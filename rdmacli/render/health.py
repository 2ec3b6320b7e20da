"""`rdmacli check`'s one-line formats, each a scheduler's contract (schedulers-and-packaging.md):

- nhc: nothing when healthy; else the reason, one line, for NHC's `die 1 "$reason"` (NHC drains
  with `Reason="NHC: <reason>"`);
- npd: node-problem-detector's custom plugin reads one line, cut at 80 characters;
- line: azurehpc-health-checks' `host | Healthy` or `host | ERROR: <reason>`.

A reason is the failed rows' checks and details, control characters shown and whitespace folded
(a device name or a state file's words never reach a terminal, a drain reason or a log raw).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rdmacli.render.text import printable

if TYPE_CHECKING:
    from rdmacli.diag.doctor import Check

PREFIX = "rdmacli: "
REASON_MAX = 160  # a Slurm drain reason stays readable in `sinfo -R`
NPD_MAX = 80  # node-problem-detector's max_output_length default


def one_line(text: str) -> str:
    return " ".join(printable(text).split())


def reason(failed: list[Check], most: int = REASON_MAX) -> str:
    """`rdmacli: <check> <detail>[; +N more]`, at most `most` characters."""
    first = failed[0]
    more = f"; +{len(failed) - 1} more" if len(failed) > 1 else ""
    text = one_line(f"{PREFIX}{first.check} {first.detail}")
    if len(text) + len(more) > most:
        text = text[: max(most - len(more) - 1, 0)] + "…"
    return text + more


def nhc(failed: list[Check]) -> str:
    return reason(failed) if failed else ""


def npd(failed: list[Check], judged: int) -> str:
    if not failed:
        return f"{PREFIX}healthy ({judged} checks)"[:NPD_MAX]
    return reason(failed, NPD_MAX)


def host_line(host: str, failed: list[Check]) -> str:
    name = one_line(host) or "localhost"
    return f"{name} | Healthy" if not failed else f"{name} | ERROR: {reason(failed)}"
