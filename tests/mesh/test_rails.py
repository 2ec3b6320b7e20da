"""`rdmacli mesh` over two rails: eight lab nodes with two NICs each (rail r on its own bridge and
subnet, 10.77.(1+r).K, as rails have their own leaf switch). Faults are real: a NIC's netdev set
down, netem delay on a node's netdevs, an nftables drop on one rail's link.

The eight are n09-n16, the boot's second eight: make lab-mesh-test runs this file beside
test_mesh.py's (n01-n08). Below, node k of the eight is `name(k)` and `lab(k, rail)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from meshlab import (
    KNOWN_CAUSES,
    LAUNCH_S,
    RAILS_MAP,
    assert_no_agent_left,
    block_link,
    eight,
    ends_on_time,
    failures,
    mesh,
    netem,
    no_netem,
    recreate_rxe,
    run_freeing,
    sh,
    sigterm_mid_run,
    unblock_links,
)  # fmt: skip

from rdmacli.lab import node

RAILS_ROUND_S = 8.0  # two tests per node at once under TCG: twice the work of one rail's round
FIRST = 9  # the lab node that is this file's node 1
NODES, _ = eight(FIRST)


def name(k: int) -> str:
    return f"n{FIRST - 1 + k:02d}"


def lab(k: int, rail: int = 0) -> dict:
    return node(FIRST - 1 + k, rail)


@pytest.fixture(scope="module", autouse=True)
def two_rails():
    if os.environ.get("RDMACLI_LAB_RAILS") != "2" or not RAILS_MAP:
        pytest.fail("no two-rail lab: run with `make lab-mesh-test` (rdmacli lab --nodes 16 --rails 2)")


def rails_mesh(*args: str, **kw):
    kw.setdefault("nodes", NODES)
    kw.setdefault("map_file", RAILS_MAP)
    kw.setdefault("round_s", RAILS_ROUND_S)
    return mesh(*args, **kw)


def prometheus_samples(path) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(path.read_text()) for s in f.samples}  # fmt: skip


def test_two_rails_found_by_device_name_every_rail_aligned_pair_passes():
    """The rails found by each node's agent (device names; {node} because the lab's devices are
    named per node): 28 node pairs x 2 rails, rail k with rail k, all pass. At the default
    --launch-timeout, which follows the launch: eight agents starting at once under TCG took
    longer than the old fixed 20 s (rail discovery failed, 3 runs of 3)."""
    r, doc, wall = rails_mesh("--rails", "rxe_{node},rxe_{node}r1", map_file=None, launch_s=None)
    assert r.returncode == 0, (doc["error"], failures(doc), doc["warnings"])
    assert doc["params"]["launch_timeout_s"] >= 20 and doc["data"]["discovery_s"] > 0, doc["params"]
    t = doc["totals"]
    assert (t["nodes"], t["rails"], t["rounds"], t["pairs"], t["pairs_passed"]) == (8, 2, 7, 56, 56)
    seen = set()
    for p in doc["data"]["pairs"]:
        assert p["rail_a"] == p["rail_b"] and p["result"] == "pass" and p["slow"] is None, p
        tail = "r1" if p["rail_a"] else ""
        assert (p["device_a"], p["device_b"]) == (f"rxe_{p['a']}{tail}", f"rxe_{p['b']}{tail}"), p
        assert 0 < p["rtt_p50_us"] <= p["rtt_p99_us"]
        seen.add((p["a"], p["b"], p["rail_a"]))
    assert len(seen) == 56
    assert doc["data"]["blame"] == {"nodes": [], "nics": [], "links": [], "unexplained": [], "disputed": []}
    nics = doc["data"]["nics"]
    assert len(nics) == 16 and all(n["passed"] == 7 and n["failed"] == 0 for n in nics)
    assert {n["address"] for n in nics} == {lab(k, r)["ipv4"] for k in range(1, 9) for r in (0, 1)}
    ends_on_time(doc)
    assert_no_agent_left()


def test_cross_rail_on_rails_that_are_separate_networks_is_refused_in_words():
    """The lab's rails are separate subnets with no routing between them (as rail-isolated
    fabrics are): the first round's cross-rail pairs cannot resolve their partner while the
    rail-aligned ones pass, so the run stops there with a usage error (2), not 112 bad links."""
    r, doc, wall = rails_mesh("--cross-rail", round_s=6.0)
    assert r.returncode == 2, (doc["error"], doc["warnings"])
    err = doc["error"]
    assert (
        err["cause"] == "usage" and "--cross-rail" in err["message"] and "separate networks" in err["message"]
    )
    assert "without --cross-rail" in err["hint"]
    # stopped after the first node round (two sub-rounds), far short of its 14 rounds
    assert wall < LAUNCH_S and doc["elapsed_ms"] / 1e3 < 14 * 6.0
    assert_no_agent_left()


def test_one_nic_down_and_a_slowed_node_each_blamed_for_what_they_are(tmp_path):
    """Rail 1 of n03 down, and n05 delaying everything it sends by 80 ms on both netdevs
    (netem), in one run (two until the CI budget needed the minutes).

    n03's rail-1 pairs fail (DOWN, said by n03 itself); the NIC is blamed by node, rail and
    device; n03 is not a bad node and its rail-0 pairs pass. n05's pairs are slow by the
    fabric's best (the lab's own jitter with two rails under TCG: p50s 1.7 to 21 ms, median p99
    28 ms, the slow limit), re-tested, confirmed, and n05 is named a bad node for it; nothing
    else is slow or blamed. The Prometheus file says the same per NIC."""
    nic = lab(3, 1)
    slow = [lab(5, 0)["netdev"], lab(5, 1)["netdev"]]
    prom = tmp_path / "mesh.prom"
    sh("ip", "link", "set", nic["netdev"], "down")
    for dev in slow:
        netem(dev, "delay 80ms")
    try:
        r, doc, wall = rails_mesh("--prometheus", str(prom))
    finally:
        no_netem(*slow)
        sh("ip", "link", "set", nic["netdev"], "up")
        recreate_rxe(FIRST - 1 + 3, rail=1)
    assert r.returncode == 1, doc["error"]
    pairs = doc["data"]["pairs"]
    failing = [p for p in pairs if p["result"] == "fail"]
    assert len(failing) == 7, failures(doc)
    assert all((name(3), 1) in ((p["a"], p["rail_a"]), (p["b"], p["rail_b"])) for p in failing), failures(doc)
    assert {p["cause"] for p in failing} == {"DOWN"}, failures(doc)
    assert all(p["result"] == "pass" for p in pairs if name(3) in (p["a"], p["b"]) and p["rail_a"] == 0)
    flagged = [p for p in pairs if p["slow"]]
    n05 = [p for p in pairs if name(5) in (p["a"], p["b"]) and p["result"] == "pass"]
    assert len(flagged) == len(n05) == 13 and all(name(5) in (p["a"], p["b"]) for p in flagged), [
        (p["a"], p["b"], p["rail_a"], p["rtt_p50_us"]) for p in flagged
    ]  # 14 pairs of n05, but for the one with n03's dead rail-1 NIC
    for p in flagged:
        s = p["slow"]
        assert s["figure"] == "rtt_p50_us" and s["value"] > s["limit"] >= 2 * s["best"], s
        assert p["rtt_p50_us"] > 80_000  # the delay, measured
    again = [p for p in flagged if p["retest"]]
    assert again and all(p["retest"]["verdict"] == "confirmed" for p in again), again
    blame = doc["data"]["blame"]
    assert [b["node"] for b in blame["nodes"]] == [name(5)], blame
    assert blame["nodes"][0]["causes"] == {"SLOW": 13}, blame
    assert blame["links"] == [] and blame["unexplained"] == [], blame
    nics = [(b["node"], b["rail"], b["device"]) for b in blame["nics"]]
    assert nics == [(name(3), 1, f"rxe_{name(3)}r1")], blame
    assert blame["nics"][0]["failed"] == 7 and blame["nics"][0]["causes"] == {"DOWN": 7}
    samples = prometheus_samples(prom)
    bad = {labels: v for (name, labels), v in samples.items() if name == "rdmacli_mesh_nic_bad"}
    # the NIC named, and both of the node named (a NIC is bad when its whole node is)
    assert len(bad) == 16 and {dict(labels)["device"] for labels, v in bad.items() if v} == {
        f"rxe_{name(3)}r1", f"rxe_{name(5)}", f"rxe_{name(5)}r1"
    }, bad  # fmt: skip
    nic3 = (("address", lab(3, 1)["ipv4"]), ("device", f"rxe_{name(3)}r1"), ("node", name(3)), ("rail", "1"))
    assert bad[nic3] == 1
    ups = [v for (name, _), v in samples.items() if name == "rdmacli_mesh_pair_up"]
    assert len(ups) == 56 and sum(ups) == 49  # slow pairs are up: slowness is its own verdict
    assert samples[("rdmacli_mesh_run_exit_code", ())] == 1
    assert_no_agent_left()


def test_a_rail_link_blocked_only_in_its_first_slot_is_transient_not_blamed(tmp_path):
    """Rail 1 between n03 and n06 (round 0) is blocked until that pair's failure is reported
    (the live JSON line, not a fixed time), then freed: its re-test passes, it is transient,
    nothing is blamed, the run passes, and rail 0 of the same two nodes never failed. In the
    same run rail 0 between n02 and n07 loses 15 % until its first record: when it passed with
    retransmits counted (or failed), it is re-tested clean and is transient too, never a lossy
    link (one retransmit on a busy host blamed a link in CI until lossy passing pairs were
    re-tested). In one run of two it was not re-tested (that run's assertion did
    not say why): a first attempt that passed with no counter moving is not, and says so.
    Its Prometheus file, parsed back by prometheus_client, says the same (one run for all)."""
    from prometheus_client.parser import text_string_to_metric_families

    a, b = lab(3, 1)["ipv4"], lab(6, 1)["ipv4"]
    block_link(a, b)
    lossy = lab(2), lab(7)
    for x, y in (lossy, lossy[::-1]):
        netem(x["netdev"], "loss 15%", dst=y["ipv4"])
    prom = tmp_path / "mesh.prom"
    cmd = [sys.executable, "-m", "rdmacli", "mesh", NODES, "--launcher", "exec", "--map", RAILS_MAP,
           "--launch-timeout", str(LAUNCH_S), "--round-time", str(RAILS_ROUND_S), "--count", "10",
           "--json-lines", "--prometheus", str(prom)]  # fmt: skip
    on = lambda x, y, rail: lambda rec: {rec["a"], rec["b"]} == {x, y} and rec["rail_a"] == rail  # noqa: E731
    doc, freed, proc = run_freeing(
        cmd,
        (on(name(3), name(6), 1), unblock_links, True),
        (on(name(2), name(7), 0), lambda: no_netem(lossy[0]["netdev"], lossy[1]["netdev"]), False),
    )
    mine = {p["rail_a"]: p for p in doc["data"]["pairs"] if {p["a"], p["b"]} == {name(3), name(6)}}
    assert mine[1]["result"] == "pass" and mine[1]["retest"]["verdict"] == "transient", mine[1]
    assert mine[1]["retest"]["first"]["result"] == "fail", mine[1]
    assert mine[1]["retest"]["first"]["cause"] in KNOWN_CAUSES, mine[1]
    assert mine[0]["result"] == "pass" and mine[0]["retest"] is None, mine[0]
    pairs = doc["data"]["pairs"]
    [was_lossy] = [p for p in pairs if {p["a"], p["b"]} == {name(2), name(7)} and p["rail_a"] == 0]
    if was_lossy["retest"] is None:  # no counter saw a loss in its first attempt
        assert was_lossy["result"] == "pass" and was_lossy["counters"] is None, was_lossy
    else:  # lost packets (or failed), then clean: transient, and never a lossy link
        first = was_lossy["retest"]["first"]
        assert was_lossy["result"] == "pass" and was_lossy["retest"]["verdict"] == "transient", was_lossy
        causes = ("LOSS",) if first["result"] == "pass" else KNOWN_CAUSES | {"LOSS"}  # failed of its loss
        assert first["cause"] in causes, first
    assert doc["data"]["blame"] == {"nodes": [], "nics": [], "links": [], "unexplained": [], "disputed": []}
    # under TCG's load a healthy pair may be transient too now and then (2 and 3 in two runs of
    # one day): passed on its re-test, never blamed
    others = [p for p in doc["data"]["pairs"] if p["retest"] and p not in (mine[1], was_lossy)]
    assert all(p["result"] == "pass" and p["retest"]["verdict"] == "transient" for p in others), others
    transient = 1 + (was_lossy["retest"] is not None) + len(others)  # the lossy link's, when re-tested
    assert doc["totals"]["pairs_transient"] == transient and doc["totals"]["pairs_failed"] == 0
    assert any("transient" in w for w in doc["warnings"])
    assert proc.returncode == 0, doc.get("error")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(prom.read_text()) for s in f.samples}  # fmt: skip
    labels = (("a", name(3)), ("b", name(6)), ("rail_a", "1"), ("rail_b", "1"))
    assert samples[("rdmacli_mesh_pair_transient", labels)] == 1
    ups = [v for (name, _), v in samples.items() if name == "rdmacli_mesh_pair_up"]
    assert len(ups) == 56 and all(v == 1 for v in ups)  # 28 pairs on each of two rails
    rtts = [v for (name, _), v in samples.items() if name == "rdmacli_mesh_pair_rtt_seconds"]
    assert len(rtts) == 112 and all(v > 0 for v in rtts)  # p50 and p99 of every rail pair
    assert samples[("rdmacli_mesh_run_exit_code", ())] == 0
    ends_on_time(doc)
    assert_no_agent_left()


def test_sigterm_mid_run_stops_both_rails_tests_of_a_slot_and_still_reports():
    """A stop reaches every rail's test of a slot: the pair records of one rail may be in while
    the other rail's test of the same slot is mid-flight. Nothing is left listening on either
    rail's port, and the summary counts every rail pair."""
    rc, doc = sigterm_mid_run(RAILS_MAP, RAILS_ROUND_S, first=FIRST)
    assert rc == 143 and doc["result"] == "interrupted" and doc["command"] == "mesh"
    assert doc["totals"]["pairs"] == 56 and doc["totals"]["pairs_passed"] >= 1
    assert doc["data"]["rails"] == 2


def test_check_asks_each_rails_partners_and_fails_only_the_rail_none_of_them_answers(tmp_path):
    """`rdmacli check --map --partners 3` on n11 (its ring: n12, n13, n14), both rails, real CMs.

    Healthy, each rail's three partners answer (their CM rejects a port nobody listens on: the
    request and the answer crossed both NICs). Then RoCE between n11's rail-1 address and its
    three partners' is dropped (nftables; every port stays ACTIVE, so only the partners can tell),
    and so is n11-n12 on rail 0: rail 1 fails, naming its silent partners, and rail 0 is a
    warning (n12 alone silent: its fault as likely as ours), so the reason is rail 1's alone."""
    me = 3  # n11
    cmd = [sys.executable, "-m", "rdmacli", "check", "-d", lab(me, 0)["rxe"], "-d", lab(me, 1)["rxe"],
           "--state-dir", str(tmp_path), "--watch-state", str(tmp_path / "none.json"), "--deadline", "50",
           "--map", RAILS_MAP, "--node", name(me), "--partners", "3"]  # fmt: skip

    def checked(*args: str) -> tuple[int, dict]:
        r = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
        assert "Traceback" not in r.stderr, r.stderr
        return r.returncode, json.loads(r.stdout)

    def reach_rows(doc: dict) -> dict[str, dict]:
        assert "checks" in doc["data"], doc["error"]  # judged (not, e.g., past its deadline)
        rows = {c["check"]: c for c in doc["data"]["checks"] if c["check"].startswith("reach")}
        # every partner asked: finding the devices read 34 Soft-RoCE GID tables from sysfs (18-30 s
        # of the deadline, more under load) until -d limited it and the device was asked instead
        late = [c["detail"] for c in rows.values() if "not asked in time" in c["detail"]]
        assert not late, (late, doc["data"]["checks"])
        return rows

    rc, doc = checked("--json")
    rows = reach_rows(doc)
    assert rc == 0 and [c["verdict"] for c in rows.values()] == ["pass", "pass"], doc["data"]["checks"]
    for rail in (0, 1):
        assert (
            f"{lab(me, rail)['ipv4']}: 3 partner(s) answered ({name(4)} "
            in rows[f"reach rail {rail}"]["detail"]
        )
    try:
        for k in (4, 5, 6):
            block_link(lab(me, 1)["ipv4"], lab(k, 1)["ipv4"])
        block_link(lab(me, 0)["ipv4"], lab(4, 0)["ipv4"])
        rc, doc = checked("--json")
        rows = reach_rows(doc)
        assert rc == 1 and rows["reach rail 1"]["verdict"] == "fail", rows
        assert "none of 3 partners answered" in rows["reach rail 1"]["detail"], rows
        assert all(name(k) in rows["reach rail 1"]["detail"] for k in (4, 5, 6)), rows
        assert (
            rows["reach rail 0"]["verdict"] == "warn" and f"not {name(4)} " in rows["reach rail 0"]["detail"]
        )
        assert [c["check"] for c in doc["data"]["checks"] if c["verdict"] == "fail"] == ["reach rail 1"]
    finally:
        unblock_links()
