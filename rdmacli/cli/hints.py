"""A hint names only options of the command that was typed (issue 75).

Hints are born below the CLI (the engine, the protocols, the mesh), where one line of advice
serves every command that meets the condition: `nothing is listening` hints `--wait` and the
port space `-P`, which `connect` has and `ping` has not. The edge fits each hint to the command
typed: a part naming an option the command lacks is left out, and the rest of the advice stays.

Parts: a hint is clauses at its top level (split at `; `, `, or ` and ` or `, never inside
parentheses or a `code span`); a parenthesized group naming only options the command lacks goes,
then a clause still naming one goes. What another tool takes is not rdmacli's: an option in a
code span (`ulimit -l unlimited`) or after a possessive (ping(8)'s -w) is left as it is.
"""

from __future__ import annotations

import re
from typing import Any

import click

# an option as a hint names it: --long or -X, not inside a word (rdma_cm, ib_write_bw -R is code)
OPTION = re.compile(r"(?<![\w'`-])(--[a-z][a-z0-9-]*|-[A-Za-z])(?![\w-])")
SEPARATORS = ("; ", ", or ", " or ")


def named(text: str) -> set[str]:
    """The rdmacli options a piece of a hint names: outside code spans and not another tool's."""
    plain = re.sub(r"`[^`]*`", "", text)
    plain = re.sub(r"'s (--?[\w-]+)", "", plain)  # ping(8)'s -w, perftest's -n: theirs
    return set(OPTION.findall(plain))


def _split(text: str) -> list[str]:
    """Top-level clauses, each but the first starting with the separator that led to it."""
    parts, depth, code, start, i = [], 0, False, 0, 0
    while i < len(text):
        ch = text[i]
        code = not code if ch == "`" else code
        depth += (ch == "(") - (ch == ")") if not code else 0
        top = depth == 0 and not code
        sep = next((s for s in SEPARATORS if text.startswith(s, i)), None) if top else None
        if sep and i > start:
            parts.append(text[start:i])
            start = i
            i += len(sep)
            continue
        i += 1
    return [*parts, text[start:]]


def _groups_out(clause: str, options: frozenset[str]) -> str:
    """The clause without a top-level parenthesized group that names only options it lacks."""

    def keep(m: re.Match) -> str:
        said = named(m.group(0))
        return "" if said and not said & options else m.group(0)

    return re.sub(r" ?\((?:[^()]|\([^()]*\))*\)", keep, clause)


def fit(hint: str | None, options: frozenset[str]) -> str | None:
    """The hint as the command with these options may say it (None when nothing of it is left)."""
    if not hint or not named(hint) - options:
        return hint
    kept = []
    for clause in _split(hint):
        clause = _groups_out(clause, options)
        if not named(clause) - options:
            kept.append(clause)
    text = "".join(kept)
    text = next((text[len(s) :] for s in SEPARATORS if text.startswith(s)), text)
    return text or None


def fit_doc(doc: dict[str, Any], options: frozenset[str]) -> None:
    """The summary's hints fitted in place: the run's error and each connection's."""
    for holder in [doc, *doc.get("connections", [])]:
        err = holder.get("error") if isinstance(holder, dict) else None
        if isinstance(err, dict) and err.get("hint"):
            err["hint"] = fit(err["hint"], options)


def typed_options() -> frozenset[str] | None:
    """The options of the command being run (with the root group's), or None outside click."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    out: set[str] = set()
    while ctx is not None:
        out |= {o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)}
        ctx = ctx.parent
    return frozenset(out)
