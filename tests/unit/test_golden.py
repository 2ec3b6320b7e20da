"""The verdict's documents stay the same bytes for the same run (issue 71's golden test).

Recorded runs, made by the simulators from injected faults (benchmarks/fabric_sim.py for
`rdmacli mesh`, ping and probe; benchmarks/watch_sim.py for `rdmacli watch status`) and fed
through the real intake, verdict and blame: each one's summary JSON, the text people read, the
Prometheus file and the matrix file are compared with the files under tests/unit/golden/, made
by this module before the mesh wing's records became types. A change of what any of them says
fails here; when it is meant, `python tests/unit/test_golden.py --write` records the new
bytes and the diff is read in review.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
sys.path.insert(0, str(HERE.parents[1] / "benchmarks"))

HEALTHY = 31  # a seed whose scenario has no fault (random_scenario leaves a tenth healthy)
# (test, nodes, rails, pairs, seed): seeds chosen so every fault kind of the simulator shows
MESH = [
    ("ping", 8, 2, "all", 0), ("ping", 8, 2, "all", 3), ("ping", 8, 2, "all", 5),
    ("ping", 8, 2, "all", 12), ("ping", 8, 2, "all", 27), ("ping", 12, 1, "all", 19),
    ("ping", 6, 1, "all", HEALTHY), ("probe", 8, 2, "all", 0), ("probe", 8, 2, "all", 13),
    ("probe", 8, 2, "all", 14), ("probe", 8, 2, "all", 33), ("probe", 16, 2, "sample", 2),
]  # fmt: skip
WATCH = [(32, 2, 8, 1), (32, 2, 8, 2), (32, 2, 8, 3), (16, 1, 16, 4)]  # nodes, rails, leaf, seed


class _App:
    """What the renderers write through, to a string."""

    def __init__(self) -> None:
        from rich.console import Console

        self.out = Console(file=io.StringIO(), width=160, highlight=False, color_system=None)


def mesh_files(test: str, n: int, rails: int, pairs: str, seed: int) -> dict[str, str]:
    import fabric_sim as F

    from rdmacli.mesh import verdict
    from rdmacli.mesh.intake import Intake
    from rdmacli.render import prometheus
    from rdmacli.render.matrix import matrix_file
    from rdmacli.render.mesh import print_mesh

    s = F.random_scenario(n, rails, pairs, seed, test=test)
    plan = F.make_plan(s)
    intake = Intake(plan)
    for node, line in F.agent_lines(s, plan, random.Random(s.seed * 7919)):
        intake.on_line(node, line, False)
    for rank in {f.node for f in s.faults if f.kind == "no_agent"}:
        intake.on_exit(plan.spec.names[rank], 255)
    with tempfile.TemporaryDirectory() as tmp:
        matrix_path = os.path.join(tmp, "matrix.jsonl")
        with matrix_file(matrix_path) as sink:
            outcome = verdict.judge(plan, intake.evidence(), {"test": test}, elapsed_ms=1.0, matrix=sink.add)
        doc = outcome.to_dict()
        app = _App()
        print_mesh(app, outcome, outcome.report)
        prom = os.path.join(tmp, "mesh.prom")
        prometheus.write(prom, outcome, outcome.report)
        files = {
            "json": json.dumps(doc, indent=1) + "\n",
            "txt": app.out.file.getvalue(),
            "prom": _timeless(Path(prom).read_text()),
            "matrix": gzip.decompress(Path(matrix_path).read_bytes()).decode(),
        }
    files["faults"] = "".join(f"{f}\n" for f in s.faults)
    return files


def _timeless(prom: str) -> str:
    """The Prometheus file without its one clock reading (when the run ended)."""
    return "".join(
        line for line in prom.splitlines(keepends=True) if not line.startswith("rdmacli_mesh_run_timestamp")
    )


def watch_files(n: int, rails: int, leaf: int, seed: int) -> dict[str, str]:
    import watch_sim as W

    from rdmacli.render.watch import status_view
    from rdmacli.watch import status as S
    from rdmacli.watch.gather import judged

    rng = random.Random(seed)
    faults = W.scenario(n, rails, leaf, rng, False)
    docs, _ = W.docs_of(n, rails, leaf, faults, rng)
    names = [W.name(i) for i in range(n)]
    groups = tuple(str(i // leaf) for i in range(n))
    g = S.Gathered(names, rails, partners=S.partner_counts(groups, names, "group", 0))
    for node, d in docs.items():
        g.take(node, json.loads(json.dumps(d)))
    outcome = judged(g, names, {"nodes": "golden"})
    doc = outcome.to_dict()
    doc["elapsed_ms"] = 1.0
    app = _App()
    status_view(app, outcome, outcome.report)
    return {"json": json.dumps(doc, indent=1) + "\n", "txt": app.out.file.getvalue(),
            "faults": "".join(f"{f}\n" for f in faults)}  # fmt: skip


def edge_files() -> dict[str, str]:
    """Pairs the simulators do not make, each as the verdict reports it: a failed transfer that
    both ends' loss counters explain (its code LOSS, the reported one kept), a pair neither end
    reported, a re-test that passed (transient) and one that failed again (confirmed)."""
    from types import SimpleNamespace

    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.mesh import verdict
    from rdmacli.mesh.checks import ports_copy
    from rdmacli.mesh.findings import ErrorDoc
    from rdmacli.mesh.records import PairRecord
    from rdmacli.mesh.report import Pair

    def rec(rank, peer, result="pass", error=None, counters=(), rnd=0, **kw):
        said = ErrorDoc.of(error) if error else None
        return PairRecord(run="ab" * 8, rank=rank, peer=peer, round=rnd, result=result, error=said,
                          counters=ports_copy(counters), **kw)  # fmt: skip

    moved = ({"device": "mlx5_0", "port": 1, "moved": {"local_ack_timeout_err": 3}},)
    transfer = RdmacliError("transfer failed", cause=Cause.TRANSFER).to_dict()
    late = RdmacliError("late", cause=Cause.AGENT).to_dict()
    names = ["n0", "n1", "n2", "n3"]
    plan = SimpleNamespace(spec=SimpleNamespace(names=names))
    lossy = Pair(
        0, 1, 0, {"listen": rec(0, 1, "fail", transfer, moved), "connect": rec(1, 0, "fail", transfer, moved)}
    )
    first = Pair(1, 2, 0, {"listen": rec(1, 2, "fail", late), "connect": rec(2, 1, rtt_p50_us=10.0)})
    again = Pair(
        1, 2, 5, {"listen": rec(1, 2, rnd=5, rtt_p50_us=9.0), "connect": rec(2, 1, rnd=5, rtt_p50_us=9.0)}
    )
    bad = Pair(
        2, 3, 0, {"listen": rec(2, 3, "fail", transfer), "connect": rec(3, 2, "fail", transfer, moved)}
    )
    still = Pair(2, 3, 6, {"listen": rec(2, 3, "fail", transfer, moved, rnd=6),
                           "connect": rec(3, 2, "fail", transfer, moved, rnd=6)})  # fmt: skip
    docs = [lossy.judged(names).to_json(), Pair(0, 2, 1).judged(names).to_json()]
    docs += [verdict._judged(plan, f, p, None).to_json() for f, p in ((first, again), (bad, still))]
    return {"json": json.dumps(docs, indent=1) + "\n"}


def cases() -> list[tuple[str, dict[str, str]]]:
    return [(f"mesh-{t}-{n}x{r}-{p}-{s}", mesh_files(t, n, r, p, s)) for t, n, r, p, s in MESH] + [
        (f"watch-{n}x{r}-leaf{leaf}-{s}", watch_files(n, r, leaf, s)) for n, r, leaf, s in WATCH
    ]


NAMES = (
    [f"mesh-{t}-{n}x{r}-{p}-{s}" for t, n, r, p, s in MESH]
    + [f"watch-{n}x{r}-leaf{leaf}-{s}" for n, r, leaf, s in WATCH]
    + ["pairs-edges"]
)


@pytest.mark.parametrize("name", NAMES)
def test_the_documents_are_the_recorded_bytes(name):
    made = dict(cases_by_name()[name]())
    for ext, text in made.items():
        path = GOLDEN / f"{name}.{ext}"
        assert path.exists(), f"{path} missing: python tests/unit/test_golden.py --write"
        assert text == path.read_text(), f"{name}.{ext} differs from the recorded one"


def test_the_recorded_runs_show_every_fault_kind_and_blame_level():
    """The goldens are worth something only if they hold trouble: every fault kind each
    simulator injects, and each blame level, appears in them."""
    import fabric_sim as F
    import watch_sim as W

    simulated = [n for n in NAMES if n != "pairs-edges"]
    text = "".join((GOLDEN / f"{n}.faults").read_text() for n in simulated)
    for kind in (*F.KINDS, *W.KINDS):
        assert f"'{kind}'" in text, kind
    docs = [json.loads((GOLDEN / f"{n}.json").read_text()) for n in simulated]
    for level in ("nodes", "nics", "links", "disputed"):
        assert any(d["data"]["blame"].get(level) for d in docs), level


def cases_by_name():
    out = {}
    for t, n, r, p, s in MESH:
        out[f"mesh-{t}-{n}x{r}-{p}-{s}"] = lambda t=t, n=n, r=r, p=p, s=s: mesh_files(t, n, r, p, s)
    for n, r, leaf, s in WATCH:
        out[f"watch-{n}x{r}-leaf{leaf}-{s}"] = lambda n=n, r=r, leaf=leaf, s=s: watch_files(n, r, leaf, s)
    out["pairs-edges"] = edge_files
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/unit/test_golden.py --write")
    GOLDEN.mkdir(exist_ok=True)
    for name, make in cases_by_name().items():
        for ext, text in make().items():
            (GOLDEN / f"{name}.{ext}").write_text(text)
        print(name)
