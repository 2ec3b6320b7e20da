"""The fleet's drain (sched/drain.py): which nodes a verdict drains by the stated policy (a node
or any of its NICs; never a link, a disputed pair or an agent's lateness), which it clears, the
cap, and each front-end resuming only its own drains, against a stand-in Slurm on PATH (many
nodes, scontrol and sinfo -R). The lab proves it with Debian's slurmctld (tests/mesh)."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from rdmacli.cli import cli
from rdmacli.mesh.findings import BadPair, Blame, Culprit, End
from rdmacli.mesh.watchfindings import NamedNic, NamedNode, StatusBlame
from rdmacli.sched import drain, slurm

MESH_BLAME = Blame(  # mesh's blame
    nodes=(Culprit("n03", 2, 7, 7, {"DOWN": 7}),),
    nics=(Culprit("n05", 4, 6, 7, {"TMO": 5, "LOSS": 1}, rail=1, device="mlx5_1"),
          Culprit("n06", 5, 3, 7, {"AGENT": 3}, rail=0)),
    links=(BadPair(End("n01"), End("n02"), "TMO"),),
    disputed=(BadPair(End("n07"), End("n08"), "LOSS", failed_by="n07"),),
)  # fmt: skip


def watch_blame(nodes=(), nics=()) -> StatusBlame:
    return StatusBlame(False, tuple(nodes), tuple(nics), (), (), (), {})


def test_the_policy_drains_nodes_and_nics_never_links_disputes_or_lateness():
    p = drain.plan(MESH_BLAME, [f"n{k:02d}" for k in range(1, 11)], slurm.MESH_PREFIX)
    assert p.drain == {"n03": "rdmacli mesh: node DOWN", "n05": "rdmacli mesh: rail 1 (mlx5_1) TMO, LOSS"}
    assert p.clear == ("n04", "n07", "n08", "n09", "n10")  # what a blame entry names is not cleared
    assert p.held == ("n01", "n02", "n06")  # named, not for a drain: left as they are
    # n07-n08 is disputed (n07's word alone): it holds nobody, so a liar keeps no innocent drained
    watch = watch_blame(nics=[NamedNic("n2", 0, "DEAD")])
    assert drain.plan(watch, ["n1", "n2"], slurm.WATCH_PREFIX).drain == {"n2": "rdmacli watch: rail 0 DEAD"}
    evil = Blame(nics=(Culprit("n2", 1, 3, 3, {"TMO": 3}, rail=0, device="x\x1b[2J\ny"),))
    assert drain.plan(evil, [], "p:").drain == {"n2": "p: rail 0 (x [2J y) TMO"}  # one printable line


def test_the_cap_is_a_count_or_a_share():
    assert [drain.cap_of(s, 1000) for s in ("0", "3", "10%", "0%", "100%")] == [0, 3, 100, 0, 1000]
    assert drain.cap_of("10%", 8) == 1  # a share of a small run: at least one node
    for bad in ("", "-1", "101%", "ten", "5%%", "1e3"):
        with pytest.raises(ValueError):
            drain.cap_of(bad, 8)


@pytest.fixture
def slurm_nodes(tmp_path, monkeypatch):
    """A stand-in Slurm: nodes n01..n10, their states and reasons in a JSON file."""
    path = tmp_path / "slurm.json"
    nodes = {f"n{k:02d}": {"state": "IDLE", "reason": ""} for k in range(1, 11)}
    path.write_text(json.dumps(nodes))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    body = f"""import json, sys
path = {str(path)!r}
s = json.load(open(path))
tool, args = sys.argv[0].rsplit("/", 1)[1], sys.argv[1:]
if tool == "sinfo":
    for n, v in s.items():
        if v["reason"]:
            print(f"{{n}}|{{v['reason']}}")
elif args[:2] == ["show", "node"]:
    v = s.get(args[2])
    if v is None:
        print(f"Node {{args[2]}} not found", file=sys.stderr); sys.exit(1)
    print(f"NodeName={{args[2]}}\\n   State={{v['state']}} ThreadsPerCore=1")
    if v["reason"]:
        print(f"   Reason={{v['reason']}} [root@2026-12-02T08:01:00]")
else:
    kv = dict(a.split("=", 1) for a in args[1:])
    v = s[kv["NodeName"]]
    if kv["State"] == "DRAIN":
        v["state"], v["reason"] = "IDLE+DRAIN", kv["Reason"]
    else:
        v["state"], v["reason"] = "IDLE", ""
    json.dump(s, open(path, "w"))
"""
    for tool in ("scontrol", "sinfo"):
        script = bin_dir / tool
        script.write_text(f"#!{sys.executable}\n{body}")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def get() -> dict:
        return json.loads(path.read_text())

    def put(node: str, state: str, reason: str) -> None:
        s = get()
        s[node] = {"state": state, "reason": reason}
        path.write_text(json.dumps(s))

    return get, put


def test_apply_drains_resumes_its_own_only_and_holds_the_cap(slurm_nodes):
    get, put = slurm_nodes
    names = [f"n{k:02d}" for k in range(1, 11)]
    put("n09", "IDLE+DRAIN", "maintenance (jsmith)")  # an operator's
    put("n10", "IDLE+DRAIN", "rdmacli: port mlx5_0/1 DOWN")  # check --slurm's: not the mesh's to resume
    p = drain.plan(MESH_BLAME, names, slurm.MESH_PREFIX)
    done = drain.apply(p, cap=2, dry_run=True)
    assert [a["action"] for a in done.actions] == ["drain", "drain"] and get()["n03"]["reason"] == ""
    done = drain.apply(p, cap=2)
    assert get()["n03"] == {"state": "IDLE+DRAIN", "reason": "rdmacli mesh: node DOWN"}
    assert get()["n05"]["reason"] == "rdmacli mesh: rail 1 (mlx5_1) TMO, LOSS" and not done.errors
    assert get()["n09"]["reason"] == "maintenance (jsmith)" and get()["n10"]["reason"].startswith("rdmacli:")
    healed = drain.plan(Blame(), names, slurm.MESH_PREFIX)
    done = drain.apply(healed, cap=2)  # a later clean verdict: its own two resumed, nothing else
    assert sorted(a["node"] for a in done.actions if a["action"] == "resume") == ["n03", "n05"]
    assert get()["n09"]["reason"] == "maintenance (jsmith)" and get()["n10"]["reason"].startswith("rdmacli:")
    put("n01", "IDLE+DRAIN", "rdmacli mesh: rail 0 LOSS")  # ours, now an end of a bad link
    put("n07", "IDLE+DRAIN", "rdmacli mesh: rail 0 LOSS")  # ours, now in a pair one end names alone
    done = drain.apply(p, cap=2, dry_run=True)  # n01 not resumed, and said why; n07 resumed
    kept = [a for a in done.actions if a["node"] == "n01"]
    assert kept == [{"node": "n01", "action": "keep", "words": drain.HELD, "command": None, "done": False}]
    assert f"slurm: n01: {drain.HELD}" in done.words and get()["n01"]["state"] == "IDLE+DRAIN"
    assert [a["action"] for a in done.actions if a["node"] == "n07"] == ["resume"]
    put("n01", "IDLE", "")
    put("n07", "IDLE", "")
    done = drain.apply(p, cap=1)  # two to drain, a cap of one: none drained, and said
    assert done.over_cap and "above --max-drain (1): none drained" in done.words[0]
    assert get()["n03"]["reason"] == "" and get()["n05"]["reason"] == ""
    unknown = drain.plan(watch_blame(nodes=[NamedNode("gpu99", ("DOWN",))]), [], slurm.MESH_PREFIX)
    done = drain.apply(unknown, cap=5)  # a name Slurm does not know: said node by node
    assert done.errors[0]["node"] == "gpu99" and "Node gpu99 not found" in done.words[0]


def test_mesh_and_watch_status_take_the_drain_options_in_words():
    for args in (["mesh", "n[1-4]", "--dry-run"], ["watch", "status", "n[1-4]", "--dry-run"]):
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and "--dry-run goes with --slurm-drain" in r.output, (args, r.output)
    for args in (["mesh", "n[1-4]", "--slurm-drain", "--max-drain", "lots"],
                 ["watch", "status", "n[1-4]", "--slurm-drain", "--max-drain", "200%"]):  # fmt: skip
        r = CliRunner().invoke(cli, args)
        assert r.exit_code == 2 and "is not a count of nodes" in r.output, (args, r.output)
