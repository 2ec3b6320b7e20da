"""A mesh run's figures for Prometheus: per pair, per node, and the run, in the text exposition
that node_exporter's textfile collector reads, so a cron job's mesh shows in the dashboards
admins already have. Written with prometheus_client (its registry, its escaping of label
values, its atomic write: a temporary file renamed over the old one, so the collector never
reads half a file). Reads the summary document only."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

PREFIX = "rdmacli_mesh_"


def write(path: str, doc: dict) -> None:
    reg = CollectorRegistry()
    data = doc.get("data") or {}

    def gauge(name: str, text: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(PREFIX + name, text, labels, registry=reg)

    up = gauge(
        "pair_up", "1 if the pair passed (after its re-test, if it had one), else 0", ("a", "b", "test")
    )
    cause = gauge("pair_failed", "1 for a failed pair, labelled with its cause code", ("a", "b", "cause"))
    transient = gauge("pair_transient", "1 if the pair failed once and passed its re-test", ("a", "b"))
    rtt = gauge("pair_rtt_seconds", "round trip of the pair's test (network, for the ping probe)",
                ("a", "b", "quantile"))  # fmt: skip
    setup = gauge(
        "pair_setup_seconds", "connection setup (resolve, route, QP, connect) of the pair", ("a", "b")
    )
    gbps = gauge("pair_bandwidth_gbps", "Gb/s of the pair's bw test, by direction", ("a", "b", "direction"))
    test = str((doc.get("params") or {}).get("test", ""))
    for p in data.get("pairs") or []:
        a, b = str(p["a"]), str(p["b"])
        up.labels(a, b, test).set(1 if p["result"] == "pass" else 0)
        if p["result"] != "pass":
            cause.labels(a, b, str(p.get("cause") or "FAIL")).set(1)
        if p.get("retest"):
            transient.labels(a, b).set(1 if p["retest"]["verdict"] == "transient" else 0)
        for q, key in (("0.5", "rtt_p50_us"), ("0.99", "rtt_p99_us")):
            if isinstance(p.get(key), (int, float)):
                rtt.labels(a, b, q).set(p[key] / 1e6)
        if isinstance(p.get("setup_us"), (int, float)):
            setup.labels(a, b).set(p["setup_us"] / 1e6)
        for key, direction in (("gbps_ab", "a_to_b"), ("gbps_ba", "b_to_a")):
            if isinstance(p.get(key), (int, float)):
                gbps.labels(a, b, direction).set(p[key])
    passed = gauge("node_pairs_passed", "pairs of the node that passed", ("node", "address"))
    failed = gauge("node_pairs_failed", "pairs of the node that failed", ("node", "address"))
    bad = gauge("node_bad", "1 if the blame names the node (or its NIC) bad", ("node", "address"))
    blamed = {b["node"] for b in (data.get("blame") or {}).get("nodes", [])}
    for n in data.get("nodes") or []:
        node, address = str(n["node"]), str(n.get("address", ""))
        passed.labels(node, address).set(n["passed"])
        failed.labels(node, address).set(n["failed"])
        bad.labels(node, address).set(1 if node in blamed else 0)
    link = gauge("link_bad", "1 for a pair of nodes the blame names a bad link", ("a", "b", "cause"))
    for x in (data.get("blame") or {}).get("links", []):
        link.labels(str(x["a"]), str(x["b"]), str(x.get("cause", ""))).set(1)
    totals = doc.get("totals") or {}
    run = gauge("run_pairs", "pairs of the run, by result", ("result",))
    for result in ("passed", "failed", "missing", "transient"):
        run.labels(result).set(totals.get(f"pairs_{result}", 0))
    gauge("run_exit_code", "the run's exit status (0: every pair passed)").set(doc.get("exit_code", 0))
    gauge("run_elapsed_seconds", "wall time of the run").set((doc.get("elapsed_ms") or 0) / 1e3)
    gauge("run_timestamp_seconds", "when the run ended (UNIX time)").set_to_current_time()
    write_to_textfile(path, reg)
