"""`rdmacli check --slurm`: the drain table (only our own drains are resumed or reworded), the
parse of `scontrol show node`, and the CLI end to end against a stand-in scontrol on PATH that
keeps one node's state in a file. The lab proves it against Debian's slurmctld
(tests/mesh/test_mesh.py, the Slurm case)."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from test_check import doc_of, host, make_port, run  # noqa: F401 - host: the made sysfs (a fixture)

from rdmacli.sched import slurm

SHOW = """NodeName=n01 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.00
   OS=Linux 6.1.0-57-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.158-1 (2025-01-01)
   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=lab
   CurrentWatts=0 AveWatts=0
{reason}"""


def show(state: str, reason: str = "") -> str:
    return SHOW.format(state=state, reason=f"   Reason={reason} [root@2026-12-02T08:01:00]" if reason else "")


def test_the_table_resumes_and_rewords_only_its_own_drains():
    ours, nhc = "rdmacli: port rxe0/1 DOWN", "NHC: check_fs_mount: /scratch not mounted"
    cases = [  # (state, reason there, verdict's reason or None) -> verb
        ("IDLE", "", None, "keep"),
        ("IDLE", "", ours, "drain"),
        ("IDLE+DRAIN", ours, None, "resume"),
        ("IDLE+DRAIN", ours, ours, "keep"),
        ("MIXED+DRAIN", ours, "rdmacli: counters rxe0/1 link_downed +1", "drain"),
        ("IDLE+DRAIN", nhc, None, "keep"),
        ("IDLE+DRAIN", nhc, ours, "keep"),
        ("IDLE+DRAIN", "maintenance (jsmith)", ours, "keep"),
        ("DOWN*", "Not responding", ours, "drain"),
        ("DOWN+DRAIN", "", None, "keep"),
    ]
    for state, there, verdict, verb in cases:
        action = slurm.decide(slurm.parse_node("n01", show(state, there)), verdict)
        assert action.verb == verb, (state, there, verdict, action)
        if verb == "drain":
            assert action.argv == ("scontrol", "update", "NodeName=n01", "State=DRAIN", f"Reason={verdict}")
        if verb == "keep" and there and not there.startswith(slurm.PREFIX) and "DRAIN" in state:
            assert there in action.words  # the other tool's words are said, and kept
    node = slurm.parse_node("n01", show("IDLE+DRAIN+NOT_RESPONDING*", "x [y] z"))
    assert node.states == {"IDLE", "DRAIN", "NOT_RESPONDING"} and node.reason == "x [y] z"
    with pytest.raises(slurm.RdmacliError, match="no State="):
        slurm.parse_node("n01", "garbage")


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A stand-in scontrol keeping node n01's state and reason in a JSON file, and every call."""
    state = tmp_path / "slurm.json"
    state.write_text(json.dumps({"state": "IDLE", "reason": "", "calls": []}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f"""#!{sys.executable}
import json, sys
path = {str(state)!r}
s = json.load(open(path))
args = sys.argv[1:]
s["calls"].append(args)
SHOW = {SHOW!r}
if args[:2] == ["show", "node"]:
    if args[2] != "n01":
        print(f"Node {{args[2]}} not found", file=sys.stderr); json.dump(s, open(path, "w")); sys.exit(1)
    r = f"   Reason={{s['reason']}} [root@2026-12-02T08:01:00]" if s["reason"] else ""
    print(SHOW.format(state=s["state"], reason=r))
elif args[:1] == ["update"]:
    kv = dict(a.split("=", 1) for a in args[1:])
    if s.get("refuse"):
        print("slurm_update error: Access/permission denied", file=sys.stderr); sys.exit(1)
    if kv["State"] == "DRAIN":
        s["state"], s["reason"] = "IDLE+DRAIN", kv["Reason"]
    elif kv["State"] == "RESUME":
        s["state"], s["reason"] = "IDLE", ""
json.dump(s, open(path, "w"))
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURMD_NODENAME", "n01")

    def get() -> dict:
        return json.loads(state.read_text())

    def put(**kw) -> None:
        state.write_text(json.dumps({**get(), **kw}))

    return get, put


def test_check_slurm_drains_with_its_reason_resumes_and_leaves_others_drains(tmp_path, host, scontrol):  # noqa: F811
    get, put = scontrol
    assert doc_of(tmp_path, "--slurm")["data"]["slurm"]["action"] == "keep"  # healthy: nothing run
    assert [c[0] for c in get()["calls"]] == ["show"]
    make_port(host, "rxe0", state="1: DOWN", phys="3: Disabled")
    doc = doc_of(tmp_path, "--slurm", "--dry-run")
    assert doc["exit_code"] == 1 and doc["data"]["slurm"]["done"] is False and get()["state"] == "IDLE"
    r = run(tmp_path, "--slurm", "--dry-run")
    assert "would run: scontrol update NodeName=n01 State=DRAIN 'Reason=rdmacli: port rxe0/1 DOWN" in r.stdout
    doc = doc_of(tmp_path, "--slurm")
    assert doc["exit_code"] == 1 and doc["data"]["slurm"] == {
        "node": "n01", "action": "drain", "words": "unhealthy: drained", "done": True,
        "command": ["scontrol", "update", "NodeName=n01", "State=DRAIN",
                    "Reason=rdmacli: port rxe0/1 DOWN, DISABLED, 100 Gb/s"]}  # fmt: skip
    assert get()["reason"] == "rdmacli: port rxe0/1 DOWN, DISABLED, 100 Gb/s"
    calls = len(get()["calls"])
    assert doc_of(tmp_path, "--slurm")["data"]["slurm"]["action"] == "keep"  # drained for this already
    assert len(get()["calls"]) == calls + 1
    make_port(host, "rxe0")
    doc = doc_of(tmp_path, "--slurm")
    assert doc["exit_code"] == 0 and doc["data"]["slurm"]["action"] == "resume" and get()["state"] == "IDLE"
    put(state="IDLE+DRAIN", reason="maintenance: new optics (jsmith)")  # an operator's drain
    doc = doc_of(tmp_path, "--slurm")
    assert doc["data"]["slurm"]["action"] == "keep" and get()["reason"] == "maintenance: new optics (jsmith)"
    make_port(host, "rxe0", state="1: DOWN", phys="3: Disabled")
    assert doc_of(tmp_path, "--slurm")["data"]["slurm"]["action"] == "keep"
    assert get()["reason"] == "maintenance: new optics (jsmith)"  # never overwritten


def test_scontrol_missing_failing_or_an_unknown_node_is_said_with_exit_3(tmp_path, host, scontrol,  # noqa: F811
                                                                       monkeypatch):  # fmt: skip
    get, put = scontrol
    make_port(host, "rxe0", state="1: DOWN", phys="3: Disabled")
    doc = doc_of(tmp_path, "--slurm", "--slurm-node", "n99")
    assert doc["exit_code"] == 3 and "Slurm does not know a node n99" in doc["error"]["hint"]
    put(refuse=True)
    doc = doc_of(tmp_path, "--slurm")
    assert doc["exit_code"] == 3 and "Access/permission denied" in doc["error"]["message"]
    for bad in ("../etc", "-x", "a b", "n" * 70):
        r = run(tmp_path, "--slurm", "--slurm-node", bad, "--json")
        assert r.exit_code == 2 and "not a Slurm node name" in r.stdout, (bad, r.output)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    doc = doc_of(tmp_path, "--slurm")
    assert doc["exit_code"] == 3 and doc["error"]["message"] == "scontrol not found on PATH"
    r = run(tmp_path, "--dry-run")
    assert r.exit_code == 2 and "go with --slurm" in r.output
