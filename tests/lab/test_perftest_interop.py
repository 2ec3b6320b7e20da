"""perftest's own exchange (`-R`, rdma_cm) both ways on real Soft-RoCE, every op of the issue:
rdmacli's `bw`/`lat --perftest` against ib_write_bw, ib_read_bw, ib_send_bw, ib_send_lat and
ib_write_lat servers, and those clients against `rdmacli listen --perftest`. perftest checks
nothing of the data: a run passes on both sides when every control message and every message
of the test came as perftest expects, and the figures agree (the server's report of a bw test
is the client's, in MB/s; latencies within what TCG's jitter allows of perftest's own)."""

from __future__ import annotations

import re
import subprocess

import pytest

PORT = 18599  # apart from perftest's default, so a running perftest is not hit
PERF = ["-R", "-F", "-p", str(PORT)]  # rdma_cm, no CPU-frequency warning

# (binary, rdmacli command, op, perftest's size and count, ours)
CASES = [
    ("ib_write_bw", "bw", "write", ["-s", "16384", "-n", "2000"], ["-S", "16384", "-C", "2000"]),
    ("ib_read_bw", "bw", "read", ["-s", "16384", "-n", "2000"], ["-S", "16384", "-C", "2000"]),
    ("ib_send_bw", "bw", "send", ["-s", "16384", "-n", "2000"], ["-S", "16384", "-C", "2000"]),
    ("ib_send_lat", "lat", "send", ["-s", "8", "-n", "2000"], ["-S", "8", "-C", "2000"]),
    ("ib_write_lat", "lat", "write", ["-s", "8", "-n", "2000"], ["-S", "8", "-C", "2000"]),
]
IDS = [c[0] for c in CASES]


def perftest_bw(out: str) -> float:
    """BW average[MB/sec] of perftest's result line (#bytes #iterations peak average msg-rate)."""
    m = re.search(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M)
    assert m, out
    return float(m.group(4))


def perftest_lat(out: str) -> tuple[int, float]:
    """#iterations and t_typical[usec] of perftest's latency line."""
    m = re.search(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+", out, re.M)
    assert m, out
    return int(m.group(2)), float(m.group(5))


@pytest.mark.parametrize("tool,cmd,op,theirs,ours", CASES, ids=IDS)
def test_rdmacli_faces_a_perftest_server(lab, flows, tool, cmd, op, theirs, ours):
    srv = flows.c_serve(tool, *PERF, "-d", "rxe0", "--source_ip", lab.server, *theirs, port=PORT)
    doc = flows.run(cmd, lab.server, "-I", lab.client, "-p", PORT, "--op", op, "--perftest", *ours)
    [c] = [c for c in doc["connections"] if c.get("op") == op]
    _, out = flows.done(srv)
    if cmd == "bw":
        assert c["messages_sent"] == 2000 and c["bytes_sent"] == 2000 * 16384 and c["gbps"] > 0, c
        if op != "send":  # the server printed the report this side sent it: MB/s of 2^20 bytes
            mbs = c["bytes_sent"] / (c["elapsed_us"] / 1e6) / 2**20
            assert perftest_bw(out) == pytest.approx(mbs, rel=0.01), (out, c)
    else:
        assert c["iterations"] == 2000 and c["data_path"] == "native", c
        assert 0 < c["latency_us"]["t_min"] <= c["latency_us"]["t_typical"], c


@pytest.mark.parametrize("tool,cmd,op,theirs,ours", CASES, ids=IDS)
def test_a_perftest_client_faces_rdmacli_listen(lab, flows, tool, cmd, op, theirs, ours):
    # -s and -n, as perftest's server is given them
    srv = flows.serve("listen", "-p", PORT, "--perftest", f"{op}_{cmd}", *ours)
    try:
        out = flows.c_run(tool, *PERF, "-d", "rxe1", "--source_ip", lab.client, *theirs, lab.server)
    except subprocess.TimeoutExpired:
        srv.proc.terminate()
        srv.proc.wait(timeout=60)
        pytest.fail(f"{tool} did not end; rdmacli listen said: {''.join(srv.lines)}")
    sdoc, _ = flows.done(srv)
    assert sdoc["result"] == "pass" and sdoc["totals"]["connections_passed"] == 2, sdoc
    [c] = [c for c in sdoc["connections"] if c.get("op") == op]
    if cmd == "bw":
        bw = perftest_bw(out)
        assert bw > 0
        if op == "send":  # what arrived here, counted here
            assert c["messages_received"] == 2000, c
        else:  # the client's own report, as perftest's server prints it
            assert c["messages_received"] == 2000 and c["gbps_received"] == pytest.approx(
                bw * 2**20 * 8 / 1e9, rel=0.01
            ), (out, c)
    else:
        iters, typical = perftest_lat(out)
        assert iters == 2000 and typical > 0, out
        assert c["iterations_answered"] >= 2000 and c["data_path"] == "native", c
