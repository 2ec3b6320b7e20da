"""Layers that point down: read from the code's own imports (every import, a function's lazy one
too), each package may import only those below it, with the two exceptions docs/architecture.md
names; no import circle between modules; the watch agent loads no click."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import rdmacli

ROOT = pathlib.Path(rdmacli.__file__).parent

# top to bottom; a module may import its own layer and those below it
LAYERS = [
    {"__main__", "cli"},
    {"watch"},
    {"render"},
    {"mesh", "lab"},
    {"probe"},
    {"diag", "protocols", "sched"},
    {"engine"},
    {"backend"},
    {"rdma", "outcome", "schema", "native"},
    {"errors", "figures", "events", "counters", "units", "transports"},
]
LEVEL = {name: depth for depth, names in enumerate(LAYERS) for name in names}
# the upward imports docs/architecture.md names, each with its reason
ALLOWED_UP = {("backend", "diag"), ("diag", "protocols")}


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> dict[str, set[str]]:
    """module -> the rdmacli modules it imports (anywhere in the file)."""
    out: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rdmacli"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("rdmacli"))
        out[name] = found
    modules = set(out)
    return {m: {i for i in deps if i in modules and i != m} for m, deps in out.items()}


def test_every_package_has_its_layer():
    parts = {part_of(m) for m in imports()} - {"__init__"}
    assert parts <= set(LEVEL), parts - set(LEVEL)


def test_imports_point_down_but_for_the_named_exceptions():
    up = set()
    for module, deps in imports().items():
        a = part_of(module)
        for dep in deps:
            b = part_of(dep)
            if a in LEVEL and b in LEVEL and LEVEL[b] < LEVEL[a] and a != b:
                up.add((a, b, f"{module} -> {dep}"))
    assert {(a, b) for a, b, _ in up} <= ALLOWED_UP, sorted(w for a, b, w in up if (a, b) not in ALLOWED_UP)


def test_no_import_circle_between_modules():
    graph = imports()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if d.startswith(m + "."):  # a package importing its own submodule is no circle
                continue
            if state.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_the_watch_agent_loads_no_click():
    code = "import sys, rdmacli.watch.service, rdmacli.watch.agent; print('click' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stdout + r.stderr
