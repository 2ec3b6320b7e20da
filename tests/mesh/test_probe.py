"""The tests of all 16 lab nodes: a full mesh of 16 x 1 rail, and `rdmacli mesh --test probe` on
16 nodes x 2 rails: the connectionless probe (one UD QP a NIC, every partner at once) gives the
whole latency-and-loss matrix in one phase; with real faults (netem loss on a node's two NICs, an
nftables drop on one link, a NIC's netdev down) each is named for what it is, and nothing else.
make lab-mesh-test runs them after the eight-node files' lanes (scripts/lanes in the boot)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from meshlab import (
    LAUNCH_S,
    MAP,
    RAILS_MAP,
    TIMES,
    assert_no_agent_left,
    block_link,
    ends_on_time,
    failures,
    mesh,
    netem,
    no_netem,
    recreate_rxe,
    sh,
    unblock_links,
    validate,
)  # fmt: skip

from rdmacli.lab import node

SIXTEEN = "n[01-16]"
PAIRS = 16 * 15 // 2 * 2  # node pairs x rails, rail-aligned
COUNT = 10
# the phase's floor: 32 emulated NICs probing at once on the lab's CPUs (TCG) need the probes
# spread thin, or the round trips measure the interpreter's queue (count 20 in a 12 s phase: p50s
# of 0.3-1.2 s); at 30 s they are 2-90 ms, three healthy runs of three with nothing lost or slow
PHASE_S = 30.0
# the healthy matrix, judged slow or not at the defaults, spreads its probes thinner still: on a CI
# host half this machine's speed, count 10 in 30 s had 6 of 480 healthy pairs "slower than the
# fabric's best" (their agents' queue, not the wire); count 6 in 40 s is 0.45x that load
HEALTHY_COUNT, HEALTHY_PHASE_S = 6, 40.0


@pytest.fixture(scope="module", autouse=True)
def sixteen_by_two():
    if os.environ.get("RDMACLI_LAB_RAILS") != "2" or not RAILS_MAP:
        pytest.fail("no two-rail lab: run with `make lab-mesh-test` (rdmacli lab --nodes 16 --rails 2)")


def probe_mesh(*args: str, count: int = COUNT, round_s: float = PHASE_S):
    return mesh("--test", "probe", *args, nodes=SIXTEEN, map_file=RAILS_MAP, round_s=round_s, count=count,
                timeout=900)  # fmt: skip


def held_claims(addresses: list[str]) -> int:
    """How many of these nodes' mesh port claims (flock on /run/lock) another process holds."""
    import fcntl

    held = 0
    for ip in addresses:
        try:
            with open(f"/run/lock/rdmacli-mesh-{ip}-7490.lock") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    held += 1
        except OSError:
            pass
    return held


def test_sixteen_nodes_pass_and_a_second_run_on_their_port_says_the_first_holds_it():
    """16 nodes, full schedule, at the round time the README gives for 16 lab nodes (6 s). While
    it runs, a second run on two of its nodes and the same port finds the first's claim (even
    between pairs) and says so, naming the holder; the first passes untouched (a test of its own,
    with an 8-node first run of 140 s, until the CI budget needed those minutes)."""
    with open(MAP) as f:
        lab_nodes = sum(1 for _ in f)
    if lab_nodes < 16:
        pytest.fail("the mesh suite boots 16 lab nodes (make lab-mesh-test)")
    cmd = [sys.executable, "-m", "rdmacli", "mesh", "n[01-16]", "--launcher", "exec", "--map", MAP,
           "--round-time", "6", "--launch-timeout", str(LAUNCH_S), "--json"]  # fmt: skip
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        claims = [node(k)["ipv4"] for k in (1, 2)]
        end = time.monotonic() + LAUNCH_S
        while held_claims(claims) < len(claims):  # the first run's agents hold them: readiness
            assert time.monotonic() < end and first.poll() is None, (
                first.stderr.read() if first.poll() else ""
            )
            time.sleep(0.5)
        r2, second, _ = mesh(nodes="n[01-02]")
        assert first.poll() is None, "the 16-node run ended before the second run did: not a test"
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    doc = validate(json.loads(out))
    assert first.returncode == 0 and not failures(doc), (failures(doc), doc["warnings"])
    assert doc["totals"]["pairs_passed"] == 120
    TIMES["full mesh, 16 nodes x 1 rail"] = doc["elapsed_ms"] / 1e3  # test_probe.py compares
    ends_on_time(doc)
    assert r2.returncode == 1
    assert {p["cause"] for p in second["data"]["pairs"]} == {"BUSY"}, failures(second)
    msg = second["data"]["pairs"][0]["error"]["message"]
    assert "in use by pid" in msg and "rdmacli mesh-agent, run " + doc["data"]["run_id"] in msg, msg
    assert_no_agent_left()


def test_the_whole_matrix_of_sixteen_nodes_by_two_rails_in_one_phase():
    r, doc, wall = probe_mesh(count=HEALTHY_COUNT, round_s=HEALTHY_PHASE_S)
    assert r.returncode == 0, (doc["error"], failures(doc), doc["warnings"])
    t = doc["totals"]
    assert (t["nodes"], t["rails"], t["rounds"], t["pairs"], t["pairs_passed"]) == (16, 2, 1, PAIRS, PAIRS)
    for p in doc["data"]["pairs"]:
        assert p["result"] == "pass" and p["cause"] is None, p
        assert p["probes_sent"] == p["probes_answered"] == 2 * HEALTHY_COUNT, p  # both ends', none lost
        assert 0 < p["rtt_p50_us"] <= p["rtt_p99_us"] and p["rtt_p50_us"] <= p["host_rtt_p50_us"], p
    assert doc["data"]["blame"] == {"nodes": [], "nics": [], "links": [], "unexplained": [], "disputed": []}
    assert doc["data"]["pairs_compact"] == PAIRS  # both ends of every pair said it in compact records
    elapsed = doc["elapsed_ms"] / 1e3
    TIMES["probe, 16 nodes x 2 rails"] = elapsed
    print(f"\nmesh times in this boot (s): {TIMES}; probe phase {doc['params']['round_time_s']} s")
    full = TIMES.get("full mesh, 16 nodes x 1 rail")
    if full is not None:  # the full mesh of one rail took longer than the probe of both
        assert elapsed < full, TIMES
    ends_on_time(doc)
    assert_no_agent_left()


def test_a_lossy_node_a_dead_link_and_a_dead_nic_each_named_for_what_it_is():
    """At once: n05 drops 5 % both ways on both its NICs (netem), rail 0's link n02-n07 drops
    RoCE (nftables), and rail 1 of n10 is down. The verdict names n05 for loss, the link, and
    the NIC; no other pair fails or loses a probe."""
    lossy = [node(5, 0), node(5, 1)]
    for nd in lossy:
        netem(nd["netdev"], "loss 5%")
        netem(nd["port"], "loss 5%")
    block_link(node(2)["ipv4"], node(7)["ipv4"])
    dead = node(10, 1)
    sh("ip", "link", "set", dead["netdev"], "down")
    try:
        r, doc, wall = probe_mesh()
    finally:
        unblock_links()
        for nd in lossy:
            no_netem(nd["netdev"], nd["port"])
        sh("ip", "link", "set", dead["netdev"], "up")
        recreate_rxe(10, rail=1)
    assert r.returncode == 1, doc["error"]
    blame = doc["data"]["blame"]
    assert [b["node"] for b in blame["nodes"]] == ["n05"], (blame, failures(doc))
    assert "LOSS" in blame["nodes"][0]["causes"], blame
    assert [(b["node"], b["rail"]) for b in blame["nics"]] == [("n10", 1)], blame
    assert [({x["a"], x["b"]}) for x in blame["links"]] == [{"n02", "n07"}], blame
    for p in doc["data"]["pairs"]:
        ends = {(p["a"], p["rail_a"]), (p["b"], p["rail_b"])}
        if "n05" in (p["a"], p["b"]) or ("n10", 1) in ends or ({p["a"], p["b"]} == {"n02", "n07"}
                                                               and p["rail_a"] == 0):  # fmt: skip
            continue
        assert p["result"] == "pass" and p["probes_sent"] == p["probes_answered"], p
    pairs = doc["data"]["pairs"]
    clean = [p for p in pairs if p["result"] == "pass" and p["probes_sent"] == p["probes_answered"]]
    assert doc["data"]["pairs_compact"] == len(clean), doc["data"]["pairs_compact"]  # the rest said in full
    link = [p for p in doc["data"]["pairs"] if {p["a"], p["b"]} == {"n02", "n07"} and p["rail_a"] == 0]
    assert link[0]["result"] == "fail" and link[0]["cause"] == "UNR", link
    ends_on_time(doc)
    assert_no_agent_left()
