"""A mesh run's figures for Prometheus: per pair listed in the summary (every pair of a small
run, those with trouble of a large one: never a series per healthy pair of a fleet), per NIC,
per node, and the run, in the text exposition that node_exporter's textfile collector reads, so
a cron job's mesh shows in the dashboards admins already have. Made with prometheus_client (its
registry, its escaping of label values); written atomically by files.replace (as root, nothing
but a regular file). Reads the run's typed report and outcome."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from rdmacli.mesh.meshreport import MeshReport
from rdmacli.outcome import Outcome
from rdmacli.render.files import check, replace  # noqa: F401  (check: the CLI's, before a run)

PREFIX = "rdmacli_mesh_"


def write(path: str, outcome: Outcome, report: MeshReport) -> None:
    """The run's series: its pairs, NICs, nodes, blame and totals from `report`, its exit and
    time from `outcome`."""
    reg = CollectorRegistry()

    def gauge(name: str, text: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(PREFIX + name, text, labels, registry=reg)

    pair = ("a", "b", "rail_a", "rail_b")  # a pair of NICs: rail k of node a, rail j of node b
    up = gauge("pair_up", "1 if the pair passed (after its re-test, if it had one), else 0", (*pair, "test"))
    cause = gauge("pair_failed", "1 for a failed pair, labelled with its cause code", (*pair, "cause"))
    slow = gauge("pair_slow", "1 for a passing pair slower than the fabric's best (--slow-factor)", pair)
    transient = gauge(
        "pair_transient", "1 if the pair failed (or was slow) once and passed its re-test", pair
    )
    rtt = gauge("pair_rtt_seconds", "round trip of the pair's test (network, for the ping probe)",
                (*pair, "quantile"))  # fmt: skip
    setup = gauge("pair_setup_seconds", "connection setup (resolve, route, QP, connect) of the pair", pair)
    gbps = gauge("pair_bandwidth_gbps", "Gb/s of the pair's bw test, by direction", (*pair, "direction"))
    test = report.test
    for p in report.pairs:
        ends = (p.a, p.b, str(p.rail_a), str(p.rail_b))
        up.labels(*ends, test).set(1 if p.result == "pass" else 0)
        if p.result != "pass":
            cause.labels(*ends, p.cause or "FAIL").set(1)
        slow.labels(*ends).set(1 if p.slow else 0)
        if p.retest:
            transient.labels(*ends).set(1 if p.retest.verdict == "transient" else 0)
        for q, key in (("0.5", "rtt_p50_us"), ("0.99", "rtt_p99_us")):
            v = p.figure(key)
            if v is not None:
                rtt.labels(*ends, q).set(v / 1e6)
        v = p.figure("setup_us")
        if v is not None:
            setup.labels(*ends).set(v / 1e6)
        for v, direction in ((p.gbps_ab, "a_to_b"), (p.gbps_ba, "b_to_a")):
            if v is not None:
                gbps.labels(*ends, direction).set(v)
    verdict = report.blame
    passed = gauge("node_pairs_passed", "pairs of the node that passed", ("node", "address"))
    failed = gauge("node_pairs_failed", "pairs of the node that failed", ("node", "address"))
    bad = gauge("node_bad", "1 if the blame names the node bad (every rail of it)", ("node", "address"))
    blamed = {b.node for b in verdict.nodes}
    for n in report.nodes:
        passed.labels(n.node, n.addresses[0]).set(n.tally.passed)
        failed.labels(n.node, n.addresses[0]).set(n.tally.failed)
        bad.labels(n.node, n.addresses[0]).set(1 if n.node in blamed else 0)
    nic = ("node", "rail", "device", "address")
    nic_passed = gauge("nic_pairs_passed", "pairs of the NIC (node, rail) that passed", nic)
    nic_failed = gauge("nic_pairs_failed", "pairs of the NIC that failed", nic)
    nic_slow = gauge("nic_pairs_slow", "pairs of the NIC that passed slow", nic)
    nic_p50 = gauge("nic_rtt_p50_seconds", "median p50 round trip of the NIC's passing pairs", nic)
    nic_bad = gauge("nic_bad", "1 if the blame names the NIC bad (or its whole node)", nic)
    bad_nics = {(b.node, b.rail) for b in verdict.nics}
    for r in report.nics:
        labels = (r.node, str(r.rail), r.device or "", r.address)
        nic_passed.labels(*labels).set(r.tally.passed)
        nic_failed.labels(*labels).set(r.tally.failed)
        nic_slow.labels(*labels).set(r.tally.slow)
        if r.p50_us is not None:
            nic_p50.labels(*labels).set(r.p50_us / 1e6)
        nic_bad.labels(*labels).set(1 if (r.node, r.rail) in bad_nics or r.node in blamed else 0)
    link = gauge("link_bad", "1 for a pair of NICs the blame names a bad link", (*pair, "cause"))
    for x in verdict.links:
        ends = (x.a.node, x.b.node, str(x.a.rail or 0), str(x.b.rail or 0))
        link.labels(*ends, x.cause).set(1)
    t = report.totals
    run = gauge("run_pairs", "pairs of the run, by result", ("result",))
    if t is not None:
        by_result = (("passed", t.pairs_passed), ("failed", t.pairs_failed), ("missing", t.pairs_missing),
                     ("transient", t.pairs_transient), ("slow", t.pairs_slow))  # fmt: skip
        for result, count in by_result:
            run.labels(result).set(count)
    gauge("run_exit_code", "the run's exit status (0: every pair passed)").set(outcome.exit_code)
    gauge("run_elapsed_seconds", "wall time of the run").set(outcome.elapsed_ms / 1e3)
    gauge("run_timestamp_seconds", "when the run ended (UNIX time)").set_to_current_time()
    replace(path, generate_latest(reg))
