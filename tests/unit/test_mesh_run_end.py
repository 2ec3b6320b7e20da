"""The coordinator's own deadline: the run ends at the schedule's end plus the grace it states,
whatever an agent does. The launcher itself is under test here (processes that ignore SIGTERM,
hold their pipes, outlive SIGKILL), so these are the mesh's only unit tests with real processes:
ClusterShell's exec workers and stand-in agents (tests/unit/mesh_agents), no RDMA. The rest of
the mesh runs in-process through click (tests/unit/cli/test_mesh.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(__file__)


def hung_run(tmp_path, env: dict) -> tuple[subprocess.CompletedProcess, float, dict]:
    mapfile = tmp_path / "map"
    mapfile.write_text("".join(f"n{k} 192.0.2.{k}\n" for k in range(1, 5)))
    # tagged with this test's directory: pgrep and pkill find this test's agents, never those of
    # a test running beside it (-n 4: one left the other's agents for pgrep, a red unit run)
    agent = f"{sys.executable} {os.path.join(HERE, 'mesh_agents', 'hanging_agent.py')} 1:{tmp_path.name}"
    cmd = [sys.executable, "-m", "rdmacli", "mesh", "n[1-4]", "--launcher", "exec", "--map", str(mapfile),
           "--round-time", "1", "--launch-timeout", "120", "--agent-command", agent, "--json",
           "--retest-rounds", "0"]  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env={**os.environ, **env})
    wall = time.monotonic() - t0
    return r, wall, json.loads(r.stdout)


def test_a_hung_agent_is_stopped_at_the_schedules_end_and_named_late(tmp_path):
    r, wall, doc = hung_run(tmp_path, {})
    up = doc["data"]["agents_up_s"]
    assert up is not None
    # go (2 s) + 3 rounds of 1 s + the stated grace (10 s) + SIGTERM's grace (5 s), and slack
    assert wall < up + 2 + 3 + 10 + 5 + 10, (wall, up)
    assert wall > up + 2 + 3 + 10 - 1  # it did wait for the grace it states
    rows = {n["node"]: n for n in doc["data"]["nodes"]}
    assert rows["n2"]["agent"] == "late" and all(rows[x]["agent"] == "ran" for x in ("n1", "n3", "n4"))
    assert any("cut 10 s after the schedule's end" in w and "n2" in w for w in doc["warnings"])
    late_pairs = [p for p in doc["data"]["pairs"] if p["result"] == "fail"]
    assert late_pairs and all("n2" in (p["a"], p["b"]) and p["cause"] == "AGENT" for p in late_pairs)
    assert r.returncode == 1
    mine = f"hanging_agent.py 1:{tmp_path.name}"
    left = subprocess.run(["pgrep", "-f", mine], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout


def test_an_agents_port_in_use_record_is_taken_with_its_holders():
    """A BUSY pair record as the agent makes it (its error carries `holders`, a list) passes the
    coordinator's checks: found in the lab, where every such record was once a violation."""
    from rdmacli.engine.status import port_in_use
    from rdmacli.mesh import records

    err = port_in_use("preflight", "10.0.0.1", 7490, ["pid 42 (rdmacli mesh-agent, run ab)"], "flock")
    rec = {
        "type": "pair",
        "run": "r",
        "rank": 0,
        "round": 0,
        "peer": 1,
        "result": "fail",
        "error": err.to_dict(),
    }
    assert records.PairRecord.parse(rec).error.to_dict() == err.to_dict()
    rec["error"]["holders"] = [["nested"]] * 3
    with pytest.raises(records.Violation, match="error"):
        records.PairRecord.parse(rec)


def test_a_stop_during_rail_discovery_stops_the_agents_and_says_where_it_was(tmp_path):
    """SIGTERM while the agents discover their rails (no --map: rails are found first): every
    agent is stopped, and the summary says the stop came in discovery, before any pair."""
    import signal

    agent = f"sh -c 'touch {tmp_path}/$$.up; exec sleep 67' sh"  # each agent marks that it runs
    cmd = [sys.executable, "-m", "rdmacli", "mesh", "n[1-3]", "--launcher", "exec", "--launch-timeout", "120",
           "--agent-command", agent, "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not list(tmp_path.glob("*.up")) and time.monotonic() < end:  # an agent is running
            time.sleep(0.1)
        assert list(tmp_path.glob("*.up")), "no agent started"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc = json.loads(out)
    assert proc.returncode == 143 and doc["result"] == "interrupted", err[-1500:]
    assert any(w.startswith("stopped during rail discovery") for w in doc["warnings"]), doc["warnings"]
    assert doc["elapsed_ms"] > 0
    left = subprocess.run(["pgrep", "-f", "sleep 67"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout


def test_an_agent_whose_pipes_stay_open_after_it_exits_does_not_hold_the_run(tmp_path):
    r, wall, doc = hung_run(tmp_path, {"HANG_MODE": "pipes"})
    up = doc["data"]["agents_up_s"]
    # go (2 s) + 3 rounds of 1 s + the stated grace (10 s), one look (0.5 s), and slack
    assert wall < up + 2 + 3 + 10 + 10, (wall, up)
    rows = {n["node"]: n for n in doc["data"]["nodes"]}
    assert rows["n2"]["agent"] != "ran" and all(rows[x]["agent"] == "ran" for x in ("n1", "n3", "n4"))
    assert r.returncode == 1
    subprocess.run(["pkill", "-f", "signal.signal(15, signal.SIG_IGN); time.sleep(90)"])


def test_an_agent_the_kernel_holds_past_sigkill_does_not_hold_the_run(tmp_path):
    """ClusterShell's abort waits for every process it killed; one held in the kernel (here: a
    reap that never returns, injected into the real exec worker) is left behind, said so."""
    # before the path rdmacli itself may come by (the package's build: no install, a PYTHONPATH)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [os.path.join(HERE, "mesh_agents", "unreapable"),
                                                       os.environ.get("PYTHONPATH")]))}  # fmt: skip
    r, wall, doc = hung_run(tmp_path, env)
    up = doc["data"]["agents_up_s"]
    # go + rounds + the stated grace (10 s) + SIGTERM's and SIGKILL's graces (3 x 5 s), and slack
    assert wall < up + 2 + 3 + 10 + 15 + 10, (wall, up)
    assert any("did not exit even when killed" in w for w in doc["warnings"]), doc["warnings"]
    rows = {n["node"]: n for n in doc["data"]["nodes"]}
    assert rows["n2"]["agent"] == "late" and all(rows[x]["agent"] == "ran" for x in ("n1", "n3", "n4"))
    assert r.returncode == 1
    subprocess.run(["pkill", "-9", "-f", f"hanging_agent.py 1:{tmp_path.name}"])


def discovery(monkeypatch, delays: str, launch_s: float | None):
    """Rail discovery through ClusterShell's exec worker, stand-in agents starting as slowly
    as `delays` says, with LAUNCH_S at 2 s (the default's floor) so that the test is short."""
    from rdmacli.mesh import contract
    from rdmacli.mesh import plan as P
    from rdmacli.mesh import run as R

    monkeypatch.setattr(P, "LAUNCH_S", 2.0)
    monkeypatch.setenv("SLOW_DELAYS", delays)
    names = [f"n{k}" for k in range(len(delays.split(",")))]
    spec = contract.RunSpec(run_id=contract.new_run_id(), names=names, discover=contract.Discover(None, 4))
    request = R.Request(spec=spec, nodes_spec=",".join(names), launch_s=launch_s)
    agent = [sys.executable, os.path.join(HERE, "mesh_agents", "slow_discoverer.py")]
    t0 = time.monotonic()
    try:
        return R.discover(request, R.Launch("exec", agent_cmd=agent)), time.monotonic() - t0
    except Exception as exc:
        return exc, time.monotonic() - t0


def test_discovery_waits_as_long_as_agents_keep_starting_and_a_fixed_deadline_does_not(monkeypatch):
    """Agents that report 0.5, 2 and 3.5 s after they start (eight at once on an emulated host
    take longer than one on hardware), LAUNCH_S at 2 s: the default wait follows them (after
    each report, as long again as the slowest so far), all three are found, and the run's launch
    deadline is twice the slowest; a fixed 2 s (as the old default was a fixed 20 s) loses the
    two slow ones."""
    from rdmacli.errors import RdmacliError
    from rdmacli.mesh import plan as P

    (addresses, devices, slowest), _ = discovery(monkeypatch, "0.5,2,3.5", None)
    assert addresses == [["192.0.2.1"], ["192.0.2.2"], ["192.0.2.3"]] and slowest >= 3.5
    assert P.launch_deadline(3, slowest) == round(2 * slowest, 1)
    err, _ = discovery(monkeypatch, "0.5,2,3.5", 2.0)
    assert isinstance(err, RdmacliError) and "2 node(s) did not report their rails after 2.0 s" in err.message


def test_a_node_that_reported_an_unusable_rail_is_said_so_not_silent(monkeypatch):
    """A node whose agent reported at once a rail that cannot be used is not among those that
    "did not report their rails after" the wait: it reported, and what it reported is said."""
    from rdmacli.errors import RdmacliError

    err, _ = discovery(monkeypatch, "0.2,bad,dead", 2.0)
    assert isinstance(err, RdmacliError), err
    assert "1 node(s) reported rails that cannot be used (n1: its agent reported" in err.message
    assert "1 node(s) did not report their rails after 2.0 s (n2: no report)" in err.message


def test_a_node_that_never_starts_costs_discovery_twice_the_slowest_start_up_not_the_maximum(monkeypatch):
    from rdmacli.errors import RdmacliError

    err, wall = discovery(monkeypatch, "0.5,1,dead", None)
    assert isinstance(err, RdmacliError) and "n2: no report" in err.message, err
    assert wall < 20, wall  # the last report (about 1.5 s) and 2 s again, ClusterShell's graces: not 600 s


def test_clustershells_broken_pipe_warning_never_reaches_stderr(capsys):
    """An agent that exited before the go line: ClusterShell's write to its stdin fails (EPIPE)
    and it logs its object's repr; that agent's end is the run's to say, in words."""
    import logging

    from rdmacli.mesh.launch import _clustershell

    _clustershell()
    logging.getLogger("ClusterShell.Worker.EngineClient").warning(
        "%r: %s", "<rdmacli.mesh.lines.Bounded instance at 0x7f>", "[Errno 32] Broken pipe"
    )
    assert "Broken pipe" not in capsys.readouterr().err
