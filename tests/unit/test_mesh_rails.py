"""Rails: discovery on fake sysfs trees, schedules with rails, NIC blame and slow verdicts on
synthetic results, and the map file's several addresses per node."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from meshdata import make_plan, report

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import blame as _blame
from rdmacli.mesh import schedule
from rdmacli.mesh.blame import judge_slow
from rdmacli.mesh.findings import Slow, SlowReference
from rdmacli.mesh.intake import Intake
from rdmacli.mesh.rails import check_report, discover, parse_devices
from rdmacli.mesh.report import Pair


def blame(*args, **kw) -> dict:
    """The blame as its JSON says it (data.blame): what these cases assert on."""
    return _blame.blame(*args, **kw).to_json()


EMPTY = "0000:0000:0000:0000:0000:0000:0000:0000"
DOWN = RdmacliError("port 1 of the NIC is DOWN", cause=Cause.LOCAL_PORT_DOWN).to_dict()
TMO = RdmacliError("no request from the partner within the round", cause=Cause.DEADLINE).to_dict()


def v4_gid(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def make_device(root, name: str, ports: dict[int, tuple[str, list[str]]], link_layer: str = "Ethernet"):
    """ports: number -> (state, GIDs) as the kernel lays them out (a few entries, then empty)."""
    for port, (state, gids) in ports.items():
        pdir = root / name / "ports" / str(port)
        (pdir / "gids").mkdir(parents=True)
        (pdir / "gid_attrs" / "types").mkdir(parents=True)
        (pdir / "gid_attrs" / "ndevs").mkdir(parents=True)
        (pdir / "state").write_text(state + "\n")
        (pdir / "phys_state").write_text("5: LinkUp\n")
        (pdir / "link_layer").write_text(link_layer + "\n")
        entries = ["fe80:0000:0000:0000:0000:00ff:fe00:0001", *gids]
        for i in range(8):
            (pdir / "gids" / str(i)).write_text((entries[i] if i < len(entries) else EMPTY) + "\n")
            if i < len(entries):
                (pdir / "gid_attrs" / "types" / str(i)).write_text("RoCE v2\n")
                (pdir / "gid_attrs" / "ndevs" / str(i)).write_text(f"eth_{name}_{port}\n")


def test_auto_takes_active_ports_with_an_address_in_natural_device_order(tmp_path):
    make_device(tmp_path, "mlx5_10", {1: ("4: ACTIVE", [v4_gid("10.3.0.1")])})
    make_device(tmp_path, "mlx5_2", {1: ("4: ACTIVE", [v4_gid("10.2.0.1")])})
    make_device(
        tmp_path, "mlx5_0", {1: ("4: ACTIVE", [v4_gid("10.0.0.1")]), 2: ("4: ACTIVE", [v4_gid("10.1.0.1")])}
    )
    make_device(tmp_path, "mlx5_1", {1: ("1: DOWN", [v4_gid("10.9.0.1")])})  # down: not a rail
    make_device(tmp_path, "mlx5_3", {1: ("4: ACTIVE", [])})  # no address: not a rail
    rails = discover(4, sysfs=str(tmp_path))
    assert [(r.device, r.port, r.address) for r in rails] == [
        ("mlx5_0", 1, "10.0.0.1"), ("mlx5_0", 2, "10.1.0.1"), ("mlx5_2", 1, "10.2.0.1"),
        ("mlx5_10", 1, "10.3.0.1"),
    ]  # fmt: skip
    assert rails[0].netdev == "eth_mlx5_0_1"


def test_named_devices_keep_the_order_given_and_ipv6_only_ports_serve_family_6(tmp_path):
    make_device(tmp_path, "mlx5_0", {1: ("4: ACTIVE", [v4_gid("10.0.0.1")])})
    make_device(tmp_path, "mlx5_3", {1: ("4: ACTIVE", [v4_gid("10.3.0.1")])})
    make_device(tmp_path, "mlx5_4", {1: ("4: ACTIVE", ["fd00:0000:0000:0000:0000:0000:0000:0004"])})
    assert [r.device for r in discover(4, ["mlx5_3", "mlx5_0"], sysfs=str(tmp_path))] == ["mlx5_3", "mlx5_0"]
    assert [r.address for r in discover(6, sysfs=str(tmp_path))] == ["fd00::4"]
    assert discover(4, ["mlx5_4"], sysfs=str(tmp_path)) == []  # IPv6-only: no IPv4 rail
    assert discover(4, ["nosuch"], sysfs=str(tmp_path)) == []
    assert discover(4, sysfs=str(tmp_path / "empty")) == []


def test_device_lists_and_agent_reports_are_checked():
    assert parse_devices("rxe_{node},rxe_{node}r1", "n03") == ["rxe_n03", "rxe_n03r1"]
    assert parse_devices("mlx5_0, mlx5_3") == ["mlx5_0", "mlx5_3"]
    for bad in ("", "a;b", "{rank}", "-x" * 40, ",".join(f"d{i}" for i in range(17))):
        with pytest.raises(ValueError):
            parse_devices(bad)
    for node in ("n1", None):  # a repeat is refused on the coordinator, before any launch
        with pytest.raises(ValueError, match="twice"):
            parse_devices("mlx5_0,mlx5_0", node)
    assert parse_devices("rxe_{node},rxe_n") == ["rxe_n", "rxe_n"]  # distinct on every node but one
    with pytest.raises(ValueError, match="twice on n"):
        parse_devices("rxe_{node},rxe_n", "n")
    good = [{"device": "mlx5_0", "port": 1, "address": "10.0.0.1", "netdev": "eth0"}]
    assert [r.address for r in check_report(good, 4)] == ["10.0.0.1"]
    for bad in (
        None, "x", [1], [{**good[0], "device": "a b"}], [{**good[0], "port": 0}], [{**good[0], "port": True}],
        [{**good[0], "address": "fd00::1"}], [{**good[0], "address": "10.0.0.1; rm"}], good * 2, good * 17,
    ):  # fmt: skip
        assert isinstance(check_report(bad, 4), str), bad
    said = [  # what the coordinator says of each: the field by name, what it should be
        ("x", "rails that are not a list"),
        ([1], "a rail that is not an object"),
        ([{**good[0], "device": "a b"}], "a rail whose device is not a device name"),
        ([{**good[0], "port": True}], "a rail whose port is not a port number"),
        ([{**good[0], "address": 7}], "a rail whose address is not an IPv4 address"),
        ([{**good[0], "address": "fd00::1"}], "a rail whose address is not an IPv4 address"),
    ]
    for bad, words in said:
        assert check_report(bad, 4) == words
    assert check_report([{**good[0], "netdev": "a b"}], 4)[0].netdev is None  # for people: dropped
    six = [{"device": "mlx5_0", "port": 1, "address": "fe80::1%eth0"}]
    assert [r.address for r in check_report(six, 6)] == ["fe80::1%eth0"]
    for scope in ("a,b", "a+b", "a b", "%", "x" * 65):  # a node set's or a shell's syntax, once
        assert isinstance(check_report([{**six[0], "address": f"fe80::1%{scope}"}], 6), str), scope


def mapped(names: list[str], path) -> list[list[str]]:
    """Each node's addresses from a map file, as the CLI reads it (once) and resolves it."""
    from rdmacli.mesh.inputs import read_map
    from rdmacli.mesh.nodes import addresses

    return addresses(names, mapping=read_map(str(path)).addresses, map_file=str(path))


def test_a_map_gives_several_rails_and_every_node_must_have_as_many(tmp_path):
    good = tmp_path / "good"
    good.write_text("n1 10.0.0.1 10.1.0.1\nn2 10.0.0.2 10.1.0.2  # rails 0 and 1\n")
    assert mapped(["n1", "n2"], good) == [["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]]
    odd = tmp_path / "odd"
    odd.write_text("n1 10.0.0.1 10.1.0.1\nn2 10.0.0.2 10.1.0.2\nn3 10.0.0.3\n")
    with pytest.raises(RdmacliError) as exc:
        mapped(["n1", "n2", "n3"], odd)
    assert exc.value.cause == Cause.USAGE and "n3 (1)" in exc.value.message
    tie = tmp_path / "tie"  # one of each: neither is named the odd one out
    tie.write_text("n1 10.0.0.1 10.1.0.1\nn2 10.0.0.2\n")
    with pytest.raises(RdmacliError) as exc:
        mapped(["n1", "n2"], tie)
    assert "shared by most" in exc.value.message and "n1 (2), n2 (1)" in exc.value.message
    twice = tmp_path / "twice"
    twice.write_text("n1 10.0.0.1 10.0.0.1\n")
    with pytest.raises(RdmacliError):
        mapped(["n1"], twice)


SIZES = [*range(2, 41), 63, 64, 127, 128, 199, 200]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("rails,cross", [(2, False), (4, False), (2, True), (3, True), (4, True)])
def test_every_required_rail_pair_meets_once_and_no_nic_is_in_two_tests_at_once(n, rails, cross):
    seen = set()
    sched = schedule.Schedule(n, rails, cross)
    for rnd in sched.rounds():
        busy = set()
        tests = sched.nic_pairs(rnd)
        for a, ra, b, rb in tests:
            assert a < b and (a, ra) not in busy and (b, rb) not in busy
            busy.update(((a, ra), (b, rb)))
            assert (a, ra, b, rb) not in seen
            seen.add((a, ra, b, rb))
            # both ends see the same test from their side
            assert (ra, b, rb) in sched.tests_of(a, rnd)
            assert (rb, a, ra) in sched.tests_of(b, rnd)
        # a node has one partner per round, so its listeners never meet two nodes at once
        assert len({(a, b) for a, _, b, _ in tests}) * rails == len(tests)
    want = {(a, ra, b, rb) for a, b in itertools.combinations(range(n), 2)
            for ra in range(rails) for rb in range(rails) if cross or ra == rb}  # fmt: skip
    assert seen == want
    assert sched.retest_base() > max(sched.rounds())


def two_rail_mesh(n: int, fail=lambda a, ra, b, rb: None, rtt=lambda a, ra, b, rb: 10.0, tail: float = 1.5):
    """Every rail-aligned pair of n nodes with two rails; fail(...) -> (listener, connector)
    errors or None; rtt(...) -> the pair's p50 (its p99: tail x p50)."""
    pairs = []
    sched = schedule.Schedule(n, 2)
    for rnd in sched.rounds():
        for a, ra, b, rb in sched.nic_pairs(rnd):
            p = Pair(a, b, rnd, ra=ra, rb=rb)
            errs = fail(a, ra, b, rb)
            figures = {} if errs else {"rtt_p50_us": (v := rtt(a, ra, b, rb)), "rtt_p99_us": tail * v}
            p.reports["listen"] = report(a, b, "fail" if errs else "pass", errs and errs[0] or None, rnd)
            p.reports["connect"] = report(
                b, a, "fail" if errs else "pass", errs and errs[1] or None, rnd, **figures
            )
            pairs.append(p)
    return pairs


NAMES = [f"n{i}" for i in range(8)]


def test_a_nic_down_is_blamed_by_node_rail_and_device_not_its_node_or_its_other_rail():
    def fail(a, ra, b, rb):
        if (3, 1) in ((a, ra), (b, rb)):
            return (DOWN, TMO) if a == 3 else (TMO, DOWN)
        return None

    devices = [[f"mlx5_{k}" for k in range(2)] for _ in range(8)]
    v = blame(8, two_rail_mesh(8, fail), NAMES, 2, devices)
    assert v["nodes"] == [] and v["links"] == [] and v["unexplained"] == []
    assert [(b["node"], b["rail"], b["device"], b["failed"], b["tested"]) for b in v["nics"]] == [
        ("n3", 1, "mlx5_1", 7, 7)
    ]


def test_a_node_whose_every_rail_is_bad_is_a_bad_node_and_a_link_is_one_nic_pair():
    def fail(a, ra, b, rb):
        if 5 in (a, b):
            return (TMO, DOWN) if b == 5 else (DOWN, TMO)
        if (a, ra, b, rb) == (1, 0, 2, 0):
            return (TMO, TMO)
        return None

    v = blame(8, two_rail_mesh(8, fail), NAMES, 2)
    assert [b["node"] for b in v["nodes"]] == ["n5"] and v["nics"] == []
    assert v["links"] == [{"a": "n1", "b": "n2", "cause": "TMO", "rail_a": 0, "rail_b": 0,
                           "device_a": None, "device_b": None}]  # fmt: skip


def test_slow_is_judged_against_the_best_and_beyond_the_fabrics_own_tail():
    # healthy pairs 10 us (p99 15), n4's pairs 40 us: beyond 2 x 10 and beyond the median p99
    pairs = two_rail_mesh(8, rtt=lambda a, ra, b, rb: 40.0 if 4 in (a, b) else 10.0)
    ref = judge_slow(pairs, 2.0, 0.9)
    assert ref.aligned is not None and ref.aligned.rtt_p50_us == 10.0 and ref.aligned.limit_us == 20.0
    slow = [p for p in pairs if p.slow]
    assert len(slow) == 14 and all(4 in (p.a, p.b) for p in slow)
    assert slow[0].slow == Slow("rtt_p50_us", 40.0, 10.0, 20.0)
    v = blame(8, pairs, NAMES, 2)
    assert [b["node"] for b in v["nodes"]] == ["n4"] and v["nodes"][0]["causes"] == {"SLOW": 14}
    assert v["links"] == [] and v["nics"] == []


def test_a_noisy_fabric_does_not_make_slow_pairs_of_its_jitter():
    # the lab under TCG, measured: p50s spread 1 to 7.5 ms, p99s 3 to 4 x the p50 (median 12 ms)
    spread = itertools.cycle([1000.0, 3000.0, 5000.0, 7000.0])
    pairs = two_rail_mesh(8, rtt=lambda *_: next(spread), tail=3.0)
    judge_slow(pairs, 2.0, 0.9)
    assert [p for p in pairs if p.slow] == []


def test_fewer_than_three_pairs_have_no_best_to_judge_by_and_bandwidth_uses_the_fraction():
    two = two_rail_mesh(2, rtt=lambda a, ra, b, rb: 10.0 if ra == 0 else 90.0)  # one pair per rail
    assert judge_slow(two, 2.0, 0.9) == SlowReference() and not any(p.slow for p in two)
    pairs = two_rail_mesh(4)
    for p in pairs:
        # each direction from the end it came to: a to b from b (connect), b to a from a (listen)
        p.reports["connect"] = replace(p.reports["connect"], gbps_ab=100.0)
        p.reports["listen"] = replace(p.reports["listen"], gbps_ba=80.0 if (p.a, p.ra) == (0, 0) else 99.0)
    judge_slow(pairs, 2.0, 0.9)
    slow = [p for p in pairs if p.slow]
    assert len(slow) == 3 and all((p.a, p.ra) == (0, 0) for p in slow)
    assert slow[0].slow.figure == "gbps_ba" and slow[0].slow.limit == 90.0


def test_a_retested_pair_counts_its_first_failure_against_a_nic_but_not_as_a_link():
    """A lossy NIC fails now and then: its pairs that passed their re-test still count against
    it (fail then pass), so it is named; a lone pair that failed once and passed is no link."""
    flaky = {(0, 1, 5, 1), (1, 1, 5, 1), (2, 1, 5, 1), (3, 1, 5, 1), (4, 1, 5, 1)}  # n5 rail 1's
    pairs = two_rail_mesh(8)
    for p in pairs:
        if p.key in flaky | {(1, 0, 2, 0)}:
            first = Pair(p.a, p.b, p.round, ra=p.ra, rb=p.rb)
            first.reports = {
                "listen": report(p.a, p.b, "fail", TMO),
                "connect": report(p.b, p.a, "fail", TMO),
            }
            p.first = first  # and its re-test passed
    v = blame(8, pairs, NAMES, 2)
    assert [(b["node"], b["rail"]) for b in v["nics"]] == [("n5", 1)] and v["nics"][0]["causes"] == {"TMO": 5}
    assert v["links"] == [] and v["nodes"] == []
    # slowness that went away at the re-test is jitter: it counts against nobody
    for p in pairs:
        if p.first is not None:
            p.first.reports = {s: report(r.rank, r.peer) for s, r in p.reports.items()}
            p.first.slow = Slow("rtt_p50_us", 99.0, 10.0, 20.0)
    assert blame(8, pairs, NAMES, 2)["nics"] == []


def rails_plan(n: int = 4, rails: int = 2, cross: bool = False):
    return make_plan(NAMES[:n], [[f"10.{k}.0.{i}" for k in range(rails)] for i in range(n)], cross=cross)


def record(plan, rank: int, rnd: int, rail: int, peer: int, peer_rail: int, error: dict | None = None) -> str:
    import json

    return json.dumps({"type": "pair", "run": plan.spec.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "rail": rail, "peer_rail": peer_rail, "result": "fail" if error else "pass",
                       "error": error})  # fmt: skip


def test_the_collector_takes_each_nics_record_once_and_refuses_rails_the_schedule_has_not():
    pl = rails_plan()
    c = Intake(pl)
    assert len(c.pairs) == 6 * 2 and pl.rounds == (0, 1, 2)
    rnd = pl.rounds[0]
    (rail, peer, peer_rail), _ = schedule.Schedule(4, 2).tests_of(0, rnd)
    c.on_line("n0", record(pl, 0, rnd, rail, peer, peer_rail), False)
    assert c.pairs[(0, rail, peer, peer_rail)].reports["listen"].rail == rail
    for bad in (
        record(pl, 0, rnd, rail, peer, peer_rail),  # a second report of the same NIC pair
        record(pl, 0, rnd, 0, peer, 1),  # rail 0 with rail 1: not rail-aligned
        record(pl, 0, rnd, 2, peer, 2),  # no rail 2
    ):
        c.on_line("n0", bad, False)
    assert len(c.violations[0]) == 3, c.violations
    c.on_line("n0", record(pl, 0, rnd, rail, peer, peer_rail).replace('"rail": 0', '"rail": [0]'), False)
    assert len(c.violations[0]) == 4 and "rail" in c.violations[0][-1]


ADDR = RdmacliError("resolve addr: ADDR_ERROR ETIMEDOUT", cause=Cause.ADDRESS).to_dict()


@pytest.mark.parametrize("routed", [False, True], ids=["separate-rails", "routed"])
def test_cross_rail_on_separate_rail_networks_is_refused_after_the_first_node_round(routed):
    from rdmacli.mesh.run import MeshRun

    pl = rails_plan(cross=True)
    c = MeshRun(pl)
    first = pl.rounds[:2]  # node round 0: sub-round 0 rail-aligned, sub-round 1 cross-rail
    for rnd in first:
        for a, ra, b, rb in schedule.Schedule(4, 2, True).nic_pairs(rnd):
            err = ADDR if ra != rb and not routed else None
            assert c.refused is None  # not before the first node round is in
            c.on_line(NAMES[a], record(pl, a, rnd, ra, b, rb, err), False)
            c.on_line(NAMES[b], record(pl, b, rnd, rb, a, ra, err), False)
    if routed:
        assert c.refused is None
        return
    assert c.refused is not None and c.refused.cause == Cause.USAGE
    assert "--cross-rail" in c.refused.message and "separate networks" in c.refused.message
    assert c.refused.exit_code == 2 and c.end_at() < __import__("time").monotonic()  # stop the agents now


def test_an_infiniband_port_takes_its_ipoib_netdevs_address(tmp_path, monkeypatch):
    from rdmacli.mesh import rails

    make_device(tmp_path, "mlx5_0", {1: ("4: ACTIVE", [])}, link_layer="InfiniBand")
    (tmp_path / "mlx5_0" / "device" / "net" / "ib0").mkdir(parents=True)
    monkeypatch.setattr(rails, "port_netdev", lambda ddir, port: "ib0")
    monkeypatch.setattr(rails, "netdev_address", lambda netdev, family: {4: "10.9.0.1", 6: None}[family])
    assert [(r.device, r.address, r.netdev) for r in discover(4, sysfs=str(tmp_path))] == [
        ("mlx5_0", "10.9.0.1", "ib0")
    ]
    assert discover(6, sysfs=str(tmp_path)) == []


def test_an_ipv6_netdev_address_is_its_first_global_one(tmp_path):
    from rdmacli.mesh.rails import netdev_address

    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "if_inet6").write_text(
        "fe800000000000000000000000000001 05 40 20 80     ib0\n"  # link-local: scope 20
        "fd000000000000000000000000000009 05 40 00 80     ib0\n"
        "fd000000000000000000000000000008 06 40 00 80     ib1\n"
    )
    assert netdev_address("ib0", 6, proc=str(tmp_path)) == "fd00::9"
    assert netdev_address("ib2", 6, proc=str(tmp_path)) is None


def test_a_rail_given_by_address_is_named_by_the_device_on_its_netdev(tmp_path, monkeypatch):
    from rdmacli.diag import local
    from rdmacli.mesh.rails import port_of

    make_device(tmp_path, "mlx5_0", {1: ("4: ACTIVE", [v4_gid("10.0.0.1")])})
    make_device(tmp_path, "mlx5_3", {1: ("4: ACTIVE", [v4_gid("10.3.0.1")])})
    netdevs = {"10.3.0.1": "eth_mlx5_3_1", "10.0.0.1": "eth_mlx5_0_1"}
    monkeypatch.setattr(local, "netdev_of", lambda ip: netdevs.get(ip))
    assert port_of("10.3.0.1", sysfs=str(tmp_path)) == ("mlx5_3", 1)
    assert port_of("10.0.0.1", sysfs=str(tmp_path)) == ("mlx5_0", 1)
    assert port_of("10.9.9.9", sysfs=str(tmp_path)) is None  # no netdev holds it


def test_a_stop_reaches_every_rails_test_of_a_slot_and_the_agent_ends_after_all():
    """The tests of one slot run in threads: a signal (Stops.handler) stops every running flow,
    and at_once raises the workers' Stopped only once every thread has ended."""
    import threading
    import time

    from rdmacli.engine.stops import Stops
    from rdmacli.errors import Stopped
    from rdmacli.mesh.config import at_once

    stops = Stops()
    started = threading.Barrier(3)

    class Flow:
        def __init__(self):
            self.stopped = threading.Event()

        def stop(self):
            self.stopped.set()

    def test(rail):
        flow = Flow()
        with stops.running(flow):
            started.wait(5)
            if not flow.stopped.wait(10):
                return "ran to its deadline"
        raise Stopped(15)  # as run_pair does when its outcome carries the signal

    t0 = time.monotonic()
    timer = threading.Thread(target=lambda: (started.wait(5), stops.handler(15, None)))
    timer.start()
    with pytest.raises(Stopped):
        at_once(test, [0, 1], stops)
    timer.join()
    assert time.monotonic() - t0 < 5 and stops.flows == [] and stops.signum == 15
    assert at_once(lambda rail: rail * 10, [1], None) == [10]  # one test: inline
    assert at_once(lambda rail: rail * 10, [1, 2, 3], None) == [10, 20, 30]


class ReportingLaunch:
    """A launch whose agents print the given discovery records (the launcher is not under test)."""

    def __init__(self, reports: dict[str, object]):
        self.reports = reports

    def start(self, nodes_spec, spec, on_line, on_exit, timeout, end_at=None, tick=None):
        assert spec.discover is not None and not spec.addresses  # discovery's own spec

        def runner():
            for rank, name in enumerate(spec.names):
                rec = {"type": "rails", "run": spec.run_id, "rank": rank, "rails": self.reports[name]}
                on_line(name, json.dumps(rec), False)

        return None, runner


def rail(address, device="mlx5_0"):
    return {"device": device, "port": 1, "address": address, "netdev": "eth0"}


def test_discovery_refuses_an_address_on_two_nodes_and_unequal_rail_counts():
    from rdmacli.mesh.contract import Discover, RunSpec
    from rdmacli.mesh.run import Request
    from rdmacli.mesh.run import discover as find

    names = ["n1", "n2", "n3"]
    spec = RunSpec(run_id="ab" * 8, names=names, discover=Discover(None, 4))

    def discover(nodes, names, launch, run_id, timeout):
        addresses, devices, _ = find(Request(spec=spec, nodes_spec=nodes, launch_s=timeout), launch)
        return addresses, devices

    two = {n: [rail(f"10.0.0.{i}"), rail(f"10.1.0.{i}", "mlx5_1")] for i, n in enumerate(names, 1)}
    ok = ReportingLaunch(two)
    addrs, devices = discover("n[1-3]", names, ok, run_id="r1", timeout=5)
    assert addrs[2] == ["10.0.0.3", "10.1.0.3"] and devices[0] == ["mlx5_0", "mlx5_1"]
    shared = ReportingLaunch({"n1": [rail("10.0.0.1")], "n2": [rail("10.0.0.2")], "n3": [rail("10.0.0.1")]})
    with pytest.raises(RdmacliError) as exc:  # the lab's nodes share their devices: --rails auto sees all
        discover("n[1-3]", names, shared, run_id="r1", timeout=5)
    assert exc.value.cause == Cause.USAGE and "n1 and n3 both have 10.0.0.1" in exc.value.message
    short = ReportingLaunch({"n1": [rail("10.0.0.1"), rail("10.1.0.1", "mlx5_1")], "n2": [rail("10.0.0.2")],
                             "n3": [rail("10.0.0.3"), rail("10.1.0.3", "mlx5_1")]})  # fmt: skip
    with pytest.raises(RdmacliError) as exc:
        discover("n[1-3]", names, short, run_id="r1", timeout=5)
    assert exc.value.cause == Cause.USAGE and "most have 2, n2 (1) do not" in exc.value.message


def test_a_map_or_resolution_giving_one_address_to_two_nodes_is_refused(tmp_path):
    from rdmacli.mesh.nodes import addresses

    shared = tmp_path / "shared"
    shared.write_text("n1 10.0.0.1 10.1.0.1\nn2 10.1.0.1 10.0.0.2\n")
    with pytest.raises(RdmacliError) as exc:
        mapped(["n1", "n2"], shared)
    assert exc.value.cause == Cause.USAGE and "n1 and n2 both have 10.1.0.1" in exc.value.message
    again = tmp_path / "again"
    again.write_text("n1 10.0.0.1\nn2 10.0.0.2\nn1 10.0.0.3\n")
    with pytest.raises(RdmacliError) as exc:
        mapped(["n1", "n2"], again)
    assert "n1 is already given at line 1" in exc.value.message
    with pytest.raises(RdmacliError) as exc:  # two names, one host
        addresses(["n1", "n2"], template="127.0.0.1")
    assert "both have 127.0.0.1" in exc.value.message


def test_nodes_without_a_usable_rdma_port_are_the_hosts_fault_not_a_usage_error():
    from rdmacli.errors import RdmacliError
    from rdmacli.mesh.nodes import check_rail_counts

    with pytest.raises(RdmacliError) as info:
        check_rail_counts(["n1", "n2", "n3"], [0, 2, 0])
    err = info.value
    assert err.cause.value == "environment" and err.exit_code == 3
    assert "2 node(s) have no usable RDMA port" in err.message and "n1, n3" in err.message
