"""What the mesh lab tests share: running `rdmacli mesh` on the lab's nodes, reading its
summary, and putting faults on the lab's netdevs (down, nftables drops, netem)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rdmacli.diag.devices import serves_ip
from rdmacli.lab import node

ALL_NODES = os.environ.get("RDMACLI_LAB_NODES", "")  # n[01-16]: the suite's boot
NODES = "n[01-08]"  # the eight-node tests (test_rails.py's: n09-n16, beside them)
# The suite's boot runs test_mesh.py and test_rails.py at once, each on eight nodes of its own
# (make lab-mesh-test, scripts/lanes inside the boot): what one checks of processes, cm_ids and
# nftables is its lane's (this variable, which its agents inherit), never the other's.
LANE = os.environ.get("RDMACLI_MESH_LANE")
MAP = os.environ.get("RDMACLI_LAB_NODES_MAP", "")  # rail 0 of every node
RAILS_MAP = os.environ.get("RDMACLI_LAB_RAILS_MAP", "")  # every rail (the suite boots two)
ROUND_S = 6.0  # per pair under TCG: setup plus 10 pings, with room
LAUNCH_S = 180.0  # an upper bound only: round 1 starts when every agent has reported
TIMES: dict[str, float] = {}  # runs' elapsed seconds, by name, for comparisons within one boot
KNOWN_CAUSES = {"DOWN", "ENV", "AGENT", "ADDR", "ROUTE", "UNR", "REJ", "NOLSN", "OVER", "TMO", "FAIL"}


def validate(doc: dict) -> dict:
    """A run's summary, checked against the schema (and kept in $RDMACLI_MESH_DUMP, a directory,
    when set: the whole document of a run whose assertion message pytest cuts short)."""
    import jsonschema

    from rdmacli.schema import SUMMARY_SCHEMA

    jsonschema.validate(doc, SUMMARY_SCHEMA)
    where = os.environ.get("RDMACLI_MESH_DUMP")
    if where:
        name = os.environ.get("PYTEST_CURRENT_TEST", "run").split(" ")[0].replace("/", "_").replace(":", "_")
        with open(os.path.join(where, f"{name}-{time.time():.0f}.json"), "w") as f:
            json.dump(doc, f)
    return doc


def mesh(*args: str, nodes: str = NODES, launcher: str = "exec", timeout: float = 600,
         round_s: float | None = ROUND_S, count: int | None = 10, map_file: str | None = MAP,
         launch_s: float | None = LAUNCH_S):  # fmt: skip
    """A mesh run; round_s, count, map_file or launch_s None: the command's own default."""
    cmd = [
        sys.executable, "-m", "rdmacli", "mesh", nodes, "--launcher", launcher,
        *(["--map", map_file] if map_file else []),
        *(["--launch-timeout", str(launch_s)] if launch_s is not None else []), "--json", *args,
        *(["--round-time", str(round_s)] if round_s is not None else []),
        *(["--count", str(count)] if count is not None else []),
    ]  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    try:
        doc = validate(json.loads(r.stdout))
    except ValueError:
        pytest.fail(f"no JSON summary (exit {r.returncode}): {r.stderr[-3000:]}")
    return r, doc, wall


def by_pair(doc: dict) -> dict[frozenset, dict]:
    return {frozenset((p["a"], p["b"])): p for p in doc["data"]["pairs"]}


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def recreate_rxe(k: int, timeout: float = 60, rail: int = 0) -> None:
    """Give node k (its rail) a fresh rxe device (a Linux 6.1 rxe that saw its netdev go down may
    make no new connection) and wait for its GID."""
    nd = node(k, rail)
    subprocess.run(["rdma", "link", "delete", nd["rxe"]], capture_output=True)
    sh("rdma", "link", "add", nd["rxe"], "type", "rxe", "netdev", nd["netdev"])
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if serves_ip(nd["rxe"], nd["ipv4"]):
            return
        time.sleep(0.5)
    pytest.fail(f"{nd['rxe']} has no GID for {nd['ipv4']} after {timeout} s")


def lane_of(pid: int) -> str | None:
    """The RDMACLI_MESH_LANE a process was started with (its agents inherit the test's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return LANE  # gone as it was looked at: counted, as pgrep saw it
    for var in env:
        if var.startswith(b"RDMACLI_MESH_LANE="):
            return var.split(b"=", 1)[1].decode()
    return None


def assert_no_agent_left() -> None:
    """No mesh agent of this lane's runs is still running (the other lane's are its own)."""
    r = subprocess.run(["pgrep", "-af", "rdmacli mesh-agent"], capture_output=True, text=True)
    mine = [line for line in r.stdout.splitlines() if lane_of(int(line.split()[0])) == LANE]
    assert mine == [], f"agents still running: {mine}"


def cm_ids_on(addresses: set[str], ports: tuple[int, ...]) -> list[str]:
    """`rdma resource show cm_id` lines of these addresses and ports (or any address's)."""
    r = subprocess.run(["rdma", "resource", "show", "cm_id"], capture_output=True, text=True)
    ends = {f"{ip}:{port}" for ip in addresses | {"0.0.0.0", "[::]", "::"} for port in ports}
    return [line for line in r.stdout.splitlines() if any(f" {end} " in f" {line} " for end in ends)]


def ends_on_time(doc: dict) -> None:
    """The run ended at its schedule's end plus the grace it states (10 s), whatever happened."""
    rounds, up = doc["totals"]["rounds"], doc["data"]["agents_up_s"] + (doc["data"]["discovery_s"] or 0)
    retests = doc["totals"]["retest_rounds"]  # decided 3 s after the schedule at the latest, 2 s lead
    schedule_end = up + 2 + (rounds + retests) * doc["params"]["round_time_s"] + (5 if retests else 0)
    assert doc["elapsed_ms"] / 1e3 < schedule_end + 10 + 10, (doc["elapsed_ms"], up, rounds)


def failures(doc: dict) -> list:
    return [(p["a"], p["b"], p["round"], p["cause"], (p["error"] or {}).get("message"))
            for p in doc["data"]["pairs"] if p["result"] != "pass"]  # fmt: skip


TABLE = f"rdmacli_mesh_test_{LANE or 'all'}"  # this lane's drops: the other lane's stay


def block_link(a: str, b: str) -> None:
    rules = "\n".join(
        [
            f"table inet {TABLE} {{",
            "  chain input {",
            "    type filter hook input priority 0; policy accept;",
            f"    ip saddr {a} ip daddr {b} udp dport 4791 drop",
            f"    ip saddr {b} ip daddr {a} udp dport 4791 drop",
            "  }",
            "}",
        ]
    )
    subprocess.run(["nft", "-f", "-"], input=rules, check=True, text=True, capture_output=True)


def unblock_links() -> None:
    subprocess.run(["nft", "delete", "table", "inet", TABLE], capture_output=True)


def netem(dev: str, spec: str, dst: str | None = None) -> None:
    """Loss on dev's egress: all of it, or only towards dst (a prio band with a u32 filter)."""
    if dst is None:
        sh("tc", "qdisc", "add", "dev", dev, "root", "netem", *spec.split())
        return
    sh("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "prio")
    sh("tc", "qdisc", "add", "dev", dev, "parent", "1:3", "handle", "30:", "netem", *spec.split())
    sh("tc", "filter", "add", "dev", dev, "protocol", "ip", "parent", "1:0", "prio", "3", "u32",
       "match", "ip", "dst", f"{dst}/32", "flowid", "1:3")  # fmt: skip


def no_netem(*devs: str) -> None:
    for dev in devs:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)


def run_freeing(cmd: list[str], *faults) -> tuple[dict | None, bool, subprocess.Popen]:
    """Run a --json-lines mesh with faults in place, each freed when its pair's first result
    comes in: `faults` are (is_its_pair(rec), free(), must_fail). Freed on the live record,
    never after a fixed time. (summary, every fault freed, the ended process)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    doc, freed = None, set()
    try:
        for line in proc.stdout:
            rec = json.loads(line)
            if rec.get("type") == "pair" and not rec["retest"]:
                for k, (mine, free, must_fail) in enumerate(faults):
                    if k not in freed and mine(rec):
                        assert rec["result"] == "fail" or not must_fail, rec
                        free()
                        freed.add(k)
            elif rec.get("type") == "summary":
                doc = validate(rec)
        proc.wait(timeout=600)
    finally:
        for _, free, _ in faults:
            free()
        if proc.poll() is None:
            proc.kill()
    assert len(freed) == len(faults) and doc is not None, proc.stderr.read()[-2000:]
    return doc, True, proc


def eight(first: int) -> tuple[str, set[str]]:
    """Eight lab nodes from `first`: their spec and every rail's address of theirs."""
    rails = int(os.environ.get("RDMACLI_LAB_RAILS", "1"))
    spec = f"n[{first:02d}-{first + 7:02d}]"
    return spec, {node(k, r)["ipv4"] for k in range(first, first + 8) for r in range(rails)}


def sigterm_mid_run(map_file: str, round_s: float, first: int = 1) -> tuple[int, dict]:
    """SIGTERM to a mesh coordinator once a pair has completed (agents mid-run), as a service
    manager stops it: (exit code, the summary it still printed). Every agent must be gone and
    no cm_id of theirs left (any rail's port)."""
    import queue
    import signal
    import threading

    nodes, addresses = eight(first)
    cmd = [
        sys.executable, "-m", "rdmacli", "mesh", nodes, "--launcher", "exec", "--map", map_file,
        "--round-time", str(round_s), "--launch-timeout", str(LAUNCH_S), "--count", "10", "--json-lines",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    try:
        end = time.monotonic() + LAUNCH_S + 60
        while True:
            line = lines.get(timeout=max(end - time.monotonic(), 0.1))
            if '"type":"pair"' in line:
                break
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = []
    while not lines.empty():
        out.append(lines.get())
    doc = validate(json.loads(out[-1]))
    assert_no_agent_left()
    left = cm_ids_on(addresses, (7490, 7491, 7492, 7493))
    assert left == [], left
    return rc, doc
