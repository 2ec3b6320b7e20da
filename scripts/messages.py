"""The troubleshooting page's lists, read from the code (gendocs.py): every error message rdmacli
can raise with its cause, and every C call whose failure it reports.

An error is born as `RdmacliError(message, ..., cause=Cause.X)` (or EnvironmentProblem,
UsageProblem): each such call's message is taken as written, an f-string's fields shown as `…`;
a message built elsewhere (a variable) is left out, and so is one without a cause written at the
call. The C calls are the string constants of the binding and the engine that name a librdmacm or
verbs function: a failed one is said as `STEP: CALL: ERRNO [where]`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ERRORS = {"RdmacliError": None, "EnvironmentProblem": "ENVIRONMENT", "UsageProblem": "USAGE"}
C_CALL = re.compile(r"(rdma|ibv)_[a-z0-9_]+")
CALL_DIRS = ("rdma", "engine", "protocols", "native", "diag")


def _text(node: ast.expr) -> str | None:
    """A message as written: a string, or an f-string with its fields as `…`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _cause(call: ast.Call, default: str | None) -> str | None:
    for kw in call.keywords:
        v = kw.value
        if kw.arg == "cause" and isinstance(v, ast.Attribute) and _name(v.value) == "Cause":
            return v.attr
    return default


def messages_by_cause(root: Path) -> dict[str, list[str]]:
    """Cause member name (ENVIRONMENT) -> the messages raised with it, sorted, each once."""
    out: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and _name(node.func) in ERRORS and node.args):
                continue
            cause, text = _cause(node, ERRORS[_name(node.func)]), _text(node.args[0])
            if cause and text and sum(ch.isalpha() for ch in text) >= 10:  # not a bare "…: …"
                out.setdefault(cause, set()).add(" ".join(text.split()))
    return {c: sorted(m) for c, m in out.items()}


def c_calls(root: Path) -> list[str]:
    """The librdmacm and verbs functions whose failures rdmacli names, sorted."""
    found: set[str] = set()
    for d in CALL_DIRS:
        for path in sorted((root / d).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.update(m.group(0) for m in C_CALL.finditer(node.value) if m.group(0) == node.value
                                 or node.value.startswith(m.group(0) + " "))  # fmt: skip
    return sorted(found)
