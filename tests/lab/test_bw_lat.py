"""`rdmacli bw` and `rdmacli lat` against `rdmacli listen --bw/--lat` on real Soft-RoCE: every
operation, both address families, several QPs; a throttled netdev shows as a lower rate; a
server killed mid-run ends the client with words; bad input gets its exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import summary, validate

from rdmacli import native


def addresses(lab, family: str) -> tuple[str, str]:
    # IPv6 between the lab's two veths does not reach rxe (one namespace): one address, as the
    # connect suite does
    return (lab.server, lab.client) if family == "ipv4" else (lab.server6, lab.server6)


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@pytest.mark.parametrize("op", ["write", "read", "send"])
def test_bw_each_op_with_two_qps(lab, flows, op, family):
    server, client = addresses(lab, family)
    srv = flows.serve("listen", "--bw", "-c", "2", bind=server)
    # depth 16: rxe under TCG drops READ responses of deeper queues and a retried READ can stall
    # its QP (seen in CI: completer_retry_err +19, one QP stuck after 128 of 200)
    doc = flows.run("bw", server, "-I", client, "--op", op, "--qps", "2", "-C", "200", "-S", "16384",
                    "--depth", "16")  # fmt: skip
    assert doc["result"] == "pass" and len(doc["connections"]) == 2
    for c in doc["connections"]:
        assert c["messages_sent"] == 200 and c["bytes_sent"] == 200 * 16384 and c["gbps"] > 0
    bw = doc["data"]["bw"]
    assert bw["gbps"] > 0 and 0 < bw["line_rate_fraction"] < 1, bw  # rxe has a sysfs rate too
    sdoc, _ = flows.done(srv)
    if op == "send":
        assert sdoc["totals"]["messages_received"] == 400
    assert sdoc["totals"]["connections_passed"] == 2


@pytest.mark.parametrize("op", ["write", "read", "send"])
def test_bw_bidir_reports_both_ways(lab, flows, op):
    """--bidir: the server streams back for as long as the client does and reports its figures,
    which the client checks and adds; the server's own summary says the same."""
    srv = flows.serve("listen", "--bw", "-c", "2", bind=lab.server)
    doc = flows.run("bw", lab.server, "-I", lab.client, "--op", op, "--qps", "2", "--bidir",
                    "--duration", "2", "-S", "16384", "--depth", "16")  # fmt: skip
    assert doc["result"] == "pass", doc.get("error")
    sent_back = 0
    for c in doc["connections"]:
        assert c["messages_sent"] > 0 and c["reverse"]["messages"] > 0, c
        assert c["reverse"]["bytes"] == c["reverse"]["messages"] * 16384
        sent_back += c["reverse"]["messages"]
    bw = doc["data"]["bw"]
    assert bw["reverse_gbps"] > 0
    assert bw["total_gbps"] == pytest.approx(bw["gbps"] + bw["reverse_gbps"], abs=1e-3)
    sdoc, _ = flows.done(srv)
    assert sdoc["totals"]["connections_passed"] == 2
    assert sum(c["messages_sent"] for c in sdoc["connections"]) == sent_back
    if op == "send":  # each side's sends arrived at the other, counted and timed there
        assert sdoc["totals"]["messages_received"] == sum(c["messages_sent"] for c in doc["connections"])
        assert sum(c["messages_received"] for c in doc["connections"]) == sent_back
        assert all(c["gbps_received"] > 0 for c in doc["connections"] + sdoc["connections"]), doc


SMALL = ["-S", "16384", "--depth", "16"]


@pytest.mark.parametrize(
    "op,args",
    [("write", [*SMALL, "-C", "3000"]), ("read", [*SMALL, "--duration", "2"]),
     ("write", ["-S", "1048576", "--duration", "2"])],
    ids=["write-count", "read-time", "write-1MiB-time"],
)  # fmt: skip
def test_a_one_way_stream_ends_at_its_count_or_time_on_either_data_path(lab, flows, op, args):
    """One QP of WRITE or READ: the stream is posted and reaped in C (the figures say so), to
    exactly its count, or for its duration; the server's heartbeat wait still holds. At 1 MiB
    with the default window (16 MiB in flight): 128 x 1 MiB took 7 s more than asked to drain
    under TCG and held the heartbeat that long, and `make bench` saw the server give up."""
    srv = flows.serve("listen", "--bw")
    doc = flows.run("bw", lab.server, "-I", lab.client, "--op", op, *args)
    [c] = doc["connections"]
    expected = "python" if os.environ.get(native.ENV) == "python" else "native"
    assert doc["result"] == "pass" and c["data_path"] == expected, c
    if "-C" in args:
        assert c["messages_sent"] == 3000 and c["bytes_sent"] == 3000 * 16384, c
    else:
        assert c["messages_sent"] > 0 and 1.9e6 <= c["elapsed_us"] <= 8e6, c
    assert c["gbps"] > 0
    sdoc, _ = flows.done(srv)
    assert sdoc["totals"]["connections_passed"] == 1, sdoc


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
@pytest.mark.parametrize("op", ["send", "write"])
def test_lat_each_op(lab, flows, op, family):
    """On the native data path (the build's; RDMACLI_DATA_PATH=python: the Python loops, as
    `make lab-test` runs this file a second time), both ends saying which measured."""
    server, client = addresses(lab, family)
    srv = flows.serve("listen", "--lat", bind=server)
    doc = flows.run("lat", server, "-I", client, "--op", op, "-C", "300")
    [c] = doc["connections"]
    assert c["iterations"] == 300
    lat, host, net = c["latency_us"], c["rtt_us"], c["network_rtt_us"]
    assert 0 < lat["t_min"] <= lat["t_typical"] <= lat["p99"] <= lat["p99_9"] <= lat["t_max"]
    assert 0 < net["t_typical"] <= host["t_typical"]
    sdoc, _ = flows.done(srv)
    expected = "python" if os.environ.get(native.ENV) == "python" else "native"
    assert c["data_path"] == expected, c
    # rxe has no completion timestamps: the host's clock measured, and the device said why
    assert c["timestamps"] == "host" and "nic_latency_us" not in c, c
    if expected == "native":
        assert "has no completion timestamps (completion_timestamp_mask 0x0" in c["timestamps_why"], c
    else:
        assert c["timestamps_why"] == f"{native.ENV}=python", c
    [s] = sdoc["connections"]
    assert s["data_path"] == expected and s["iterations_answered"] >= 300, s


@pytest.mark.parametrize("server_path,client_path", [("native", "python"), ("python", "native")])
def test_lat_native_and_python_ends_face_each_other(lab, flows, monkeypatch, server_path, client_path):
    """The two data paths speak one exchange: each end on its own, WRITE with the hold carried."""
    monkeypatch.setenv(native.ENV, server_path)
    srv = flows.serve("listen", "--lat")
    monkeypatch.setenv(native.ENV, client_path)
    doc = flows.run("lat", lab.server, "-I", lab.client, "--op", "write", "-S", "64", "-C", "500")
    [c] = doc["connections"]
    assert c["iterations"] == 500 and c["data_path"] == client_path, c
    assert 0 < c["network_rtt_us"]["t_typical"] <= c["rtt_us"]["t_typical"]
    sdoc, _ = flows.done(srv)
    assert sdoc["connections"][0]["data_path"] == server_path, sdoc


def test_the_native_loops_under_address_and_undefined_behaviour_sanitizers(lab, flows, tmp_path, monkeypatch):
    """The native loops built with ASan and UBSan (every error fatal) and run by both ends: each op,
    the smallest size (the hold's 8 bytes), one inline and one past any inline size."""
    import glob
    import os

    from rdmacli.native._build import build

    # `make lab-test` builds it on the host first (gcc under TCG took a minute of the suite)
    prebuilt = os.environ.get("RDMACLI_SANITIZED_BUILD")
    found = glob.glob(os.path.join(prebuilt, "rdmacli", "native", "_datapath*.so")) if prebuilt else []
    so = found[0] if found else build(str(tmp_path), sanitize=True)
    libs = [subprocess.run(["gcc", f"-print-file-name={n}"], capture_output=True, text=True).stdout.strip()
            for n in ("libasan.so", "libubsan.so")]  # fmt: skip
    monkeypatch.setenv("LD_PRELOAD", " ".join(libs))
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
    monkeypatch.setenv("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    monkeypatch.setenv(native.MODULE_ENV, so)
    monkeypatch.delenv(native.ENV, raising=False)
    # the client's CQ as an ibv_cq_ex polled as one (the path of a NIC with completion
    # timestamps; rxe has none, RDMACLI_NIC_CLOCK=ex makes it without) in two of the cases
    for op, size, clock in (("send", 8, ""), ("write", 64, "ex"), ("send", 4096, "ex")):
        srv = flows.serve("listen", "--lat")
        monkeypatch.setenv(native.CLOCK_ENV, clock)
        doc = flows.run("lat", lab.server, "-I", lab.client, "--op", op, "-S", size, "-C", "200")
        monkeypatch.delenv(native.CLOCK_ENV)
        [c] = doc["connections"]
        assert c["iterations"] == 200 and c["data_path"] == "native", c
        assert c["timestamps"] == "host", c
        if clock:
            assert c["timestamps_why"] == f"{native.CLOCK_ENV}=ex", c
        sdoc, out = flows.done(srv)
        assert sdoc["connections"][0]["data_path"] == "native", out
    # the native connection path (cmrun.c, cmconn.c, cmserve.c) in the same build: many
    # connections with a windowed exchange on both sides, a request the server rejects, events'
    # bare flow, and a request nobody listens to
    monkeypatch.setenv(native.CM_ENV, "native")
    srv = flows.serve("listen", "-c", 4)
    doc = flows.run("connect", lab.server, "-b", lab.client, "-c", 4, "-C", 100, "-S", 64)
    assert doc["data"]["data_path"] == "native" and doc["totals"]["connections_passed"] == 4, doc
    sdoc, out = flows.done(srv)
    assert sdoc["data"]["data_path"] == "native" and sdoc["totals"]["connections_passed"] == 4, out
    srv = flows.serve("listen", "--max-size", 1024)
    doc = flows.run("connect", lab.server, "-b", lab.client, "-S", 4096, code=5)
    assert doc["error"]["peer_reason"] == "rdmacli: size 4096 exceeds the server limit 1024", doc
    sdoc, out = flows.done(srv, code=1)
    assert sdoc["data"]["data_path"] == "native" and sdoc["totals"]["connections_rejected"] == 1, out
    srv = flows.serve("events", "--listen", "-c", 2)
    doc = flows.run("events", lab.server, "-b", lab.client, "-c", 2)
    assert doc["data"]["data_path"] == "native" and doc["totals"]["connections_passed"] == 2, doc
    flows.done(srv)
    doc = flows.run("connect", lab.server, "-b", lab.client, "-p", 9, code=5)
    assert doc["data"]["data_path"] == "native" and doc["error"]["cause"] == "nobody_listening", doc


def test_a_one_sided_run_longer_than_the_idle_timeout_passes_on_both_sides(lab, flows):
    """The server sees no completion of a WRITE: the client's heartbeat keeps its wait honest.
    A small window: the heartbeat waits behind it, and with the default (128 x 64 KiB) one CI run
    saw rxe's go-back-N retransmissions hold it for over 2 s under TCG (the server's deadline)."""
    srv = flows.serve("listen", "--bw", "--idle-timeout", "2")
    doc = flows.run("bw", lab.server, "-I", lab.client, "--duration", "6", "--idle-timeout", "2",
                    "-S", "16384", "--depth", "16")  # fmt: skip
    assert doc["result"] == "pass" and doc["connections"][0]["messages_sent"] > 0
    sdoc, _ = flows.done(srv)
    assert sdoc["totals"]["connections_passed"] == 1, sdoc


def run_bw(lab, flows, seconds: float = 3.0) -> float:
    srv = flows.serve("listen", "--bw")
    doc = flows.run("bw", lab.server, "-I", lab.client, "--duration", seconds)
    flows.done(srv)
    return doc["data"]["bw"]["line_rate_fraction"]


def test_a_throttled_netdev_shows_as_a_lower_fraction_of_line_rate(lab, flows):
    free = run_bw(lab, flows)
    subprocess.run(["tc", "qdisc", "add", "dev", "veth1", "root", "tbf", "rate", "20mbit",
                    "burst", "32kbit", "latency", "400ms"], check=True)  # fmt: skip
    try:
        throttled = run_bw(lab, flows)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", "veth1", "root"], capture_output=True)
    assert throttled < free * 0.5, (free, throttled)


def test_a_server_killed_mid_run_ends_the_client_with_words(lab, flows):
    srv = flows.serve("listen", "--bw")
    cmd = [*lab.rdmacli, "bw", lab.server, "-I", lab.client, "--duration", "120", "--json-lines"]
    client = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in client.stdout:
        lines.append(line)
        if '"type":"bw"' in line:  # data is moving
            srv.proc.kill()
            break
    t0 = time.monotonic()
    out, err = client.communicate(timeout=120)
    doc = summary("".join(lines) + out)
    assert client.returncode == 1, err
    assert doc["error"]["cause"] in ("peer_ended_early", "transfer_failed"), doc["error"]
    assert time.monotonic() - t0 < 60  # within its deadlines, not the 120 s it was asked for


def test_bad_input_gets_its_exit_code(lab, flows):
    srv = flows.serve("listen", "--bw", "--persistent", "--max-clients", "1", "--max-pinned", "4M")
    # root ignores RLIMIT_MEMLOCK through CAP_IPC_LOCK: drop it, as an ordinary user has none
    drop = 'ulimit -l 64 && exec setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock "$@"'
    r = subprocess.run(["sh", "-c", drop, "sh", sys.executable, "-m", "rdmacli", "bw", lab.server, "-I",
                        lab.client, "-S", "1048576", "-C", "10", "--json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    doc = validate(json.loads(r.stdout))
    assert (r.returncode, doc["error"]["cause"]) == (3, "memlock"), doc["error"]
    r = lab.run("bw", lab.server, "-I", lab.client, "--depth", "16000000", "-C", "10", "--json")
    assert (r.returncode, json.loads(r.stdout)["error"]["cause"]) == (3, "device_limit"), r.stdout
    r = lab.run("bw", lab.server, "--duration", "0")
    assert r.returncode == 2 and "'0' is not more than 0 (more than 0 to 86400)" in r.stderr
    # the server's bounds, said to the client: memory (8 MiB asked of 4), then connections at once
    r = lab.run("bw", lab.server, "-I", lab.client, "-S", "8M", "-C", "10", "--json")
    assert r.returncode == 5 and "server's memory is taken: 8388672 bytes asked" in r.stdout, r.stdout
    # the first client streams until it is stopped below (SIGINT): a loaded host's second Python took
    # over 30 s to connect, and found the server free again
    cmd = [*lab.rdmacli, "bw", lab.server, "-I", lab.client, "--duration", "600", "--json-lines"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in first.stdout:
        if '"type":"bw"' in line:  # it is being served
            break
    r = lab.run("bw", lab.server, "-I", lab.client, "-C", "10", "--json")
    assert r.returncode == 5 and "server is busy: 1 connections at once" in r.stdout, r.stdout
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=60)
    srv.proc.terminate()
    srv.finish()


@pytest.mark.parametrize("cmd", ["bw", "lat"])
def test_all_sizes_one_connection_each_against_a_default_server(lab, flows, cmd):
    """-a on rdmacli's own exchange: a connection per size, one after another, against a
    server left at its default (-c 1): the hellos announce the sweep and it serves every size."""
    srv = flows.serve("listen", f"--{cmd}")
    doc = flows.run(cmd, lab.server, "-I", lab.client, "-a", "-C", "5")
    sdoc, _ = flows.done(srv)
    sizes = [1 << i for i in range(1, 24)] if cmd == "bw" else [1 << i for i in range(3, 21)]
    assert [r["size_bytes"] for r in doc["data"]["sweep"]] == sizes
    assert doc["totals"]["connections_passed"] == len(sizes), doc["error"]
    assert sdoc["result"] == "pass" and sdoc["totals"]["connections_passed"] == len(sizes), sdoc
    assert not sdoc["warnings"], sdoc["warnings"]
