"""connect/listen against ucmatose in both directions, and against itself (real Soft-RoCE)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import expect, resources_of, summary, wait_for_listener

UCMATOSE = "ucmatose"


@pytest.mark.parametrize("conns,size,ps", [(1, 1, "tcp"), (8, 4096, "ib")])
def test_rdmacli_listen_serves_ucmatose_client(lab, flows, conns, size, ps, cm_path):
    """On both runners of a server's connections: the Python engine and native/cmserve.c."""
    srv = flows.serve("listen", "-c", conns, "-C", 10, "-S", size, "-P", ps)
    out = flows.c_run(
        UCMATOSE, "-s", lab.server, "-b", lab.client, "-c", conns, "-C", 10, "-S", size, "-P", ps
    )
    assert "data transfers complete" in out and "return status 0" in out
    doc, text = flows.done(srv)
    expect(doc, connections_passed=conns, messages_received=10 * conns, bytes_received=10 * conns * size)
    assert doc["data"]["data_path"] == cm_path
    events = [r["event"] for r in srv.records(text) if r["type"] == "cm_event"]
    assert events.count("ESTABLISHED") == events.count("DISCONNECTED") == conns


@pytest.fixture(params=["python", "native"])
def cm_path(request, monkeypatch, lab):
    """Each case on both runners of the connections: the Python engine and native/cmrun.c or
    cmserve.c (the default; RDMACLI_CM_PATH=python for the engine); the summary says which ran."""
    monkeypatch.setenv("RDMACLI_CM_PATH", request.param)
    return request.param


@pytest.mark.parametrize("conns,size,ps", [(1, 4096, "tcp"), (8, 1, "ib")])
def test_rdmacli_connect_to_ucmatose_server(lab, flows, conns, size, ps, cm_path):
    srv = flows.c_serve(UCMATOSE, "-b", lab.server, "-c", conns, "-C", 10, "-S", size, "-P", ps, port=7471)
    doc = flows.run("connect", lab.server, "-b", lab.client, "-c", conns, "-C", 10, "-S", size, "-P", ps)
    expect(doc, connections_passed=conns, messages_received=10 * conns, messages_sent=10 * conns)
    assert doc["data"]["data_path"] == cm_path
    steps = {"create id", "resolve addr", "resolve route", "create qp", "cm connect", "destroy id"}
    assert {s["step"] for s in doc["steps_us"]} >= steps
    assert "return status 0" in flows.done(srv)[1]


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_rdmacli_against_itself(lab, flows, family):
    # IPv6 between the lab's two local ports gets no answer, for ucmatose too (both addresses
    # are local routes); IPv6 runs through one port's loopback, as rdma-core's own tests do.
    server, client = (lab.server, lab.client) if family == "ipv4" else (lab.server6, lab.server6)
    srv = flows.serve("listen", "-c", 8, bind=server)
    # The client's count and size travel in the hello: the server was not told them.
    expect(flows.run("connect", server, "-b", client, "-c", 8, "-C", 25, "-S", 4096), messages_received=200)
    expect(flows.done(srv)[0], connections_passed=8, bytes_received=200 * 4096)


def test_native_client_against_rdmacli_listen_windowed(lab, flows, monkeypatch):
    """More messages than a queue's window (4096): C reposts receives and sends as they complete,
    and the server's RNR retries cover what is not posted yet."""
    monkeypatch.setenv("RDMACLI_CM_PATH", "native")
    srv = flows.serve("listen", "-c", 2)
    doc = flows.run("connect", lab.server, "-b", lab.client, "-c", 2, "-C", 5000, "-S", 8)
    expect(doc, connections_passed=2, messages_received=10000, messages_sent=10000)
    assert doc["data"]["data_path"] == "native"
    expect(flows.done(srv)[0], connections_passed=2, messages_received=10000)


@pytest.mark.parametrize("runner", ["python", "native"])
def test_events_against_cmtime_server(lab, flows, monkeypatch, runner):
    """cmtime's server, rdmacli events as its client: every step of cmtime's names timed."""
    monkeypatch.setenv("RDMACLI_CM_PATH", runner)
    flows.c_serve("cmtime", "-b", lab.server, port=7471)
    doc = flows.run("events", lab.server, "-b", lab.client, "-c", 8)
    expect(doc, connections_passed=8)
    assert doc["data"]["data_path"] == runner
    steps = {s["step"]: s["count"] for s in doc["steps_us"]}
    for step in ("create id", "resolve addr", "resolve route", "create qp", "cm connect", "disconnect",
                 "destroy qp", "destroy id"):  # fmt: skip
        assert steps.get(step) == 8, (step, steps)


STOPS = [("python", signal.SIGTERM), ("native", signal.SIGTERM), ("native", signal.SIGINT)]


@pytest.mark.parametrize("cm_path,signum", STOPS, ids=["python-sigterm", "native-sigterm", "native-sigint"])
def test_a_client_stopped_mid_exchange_ends_interrupted_holding_nothing(
    lab, servers, c_tool, monkeypatch, cm_path, signum
):
    """SIGTERM or Ctrl-C while 4 connections exchange 10000 messages each with ucmatose: the
    summary says interrupted (128 + the signal), every connection its own state, nothing held."""
    monkeypatch.setenv("RDMACLI_CM_PATH", cm_path)
    srv = servers([c_tool(UCMATOSE), "-b", lab.server, "-c", "4", "-C", "10000", "-S", "64"], ready=False)
    wait_for_listener(7471)
    client = lab.spawn("connect", lab.server, "-b", lab.client, "-c", "4", "-C", "10000", "-S", "64",
                       "--json-lines")  # fmt: skip
    seen = []
    for line in client.stdout:
        seen.append(line)
        if '"ESTABLISHED"' in line:
            break
    client.send_signal(signum)
    out, err = client.communicate(timeout=60)
    doc = summary("".join(seen) + out)
    assert client.returncode == 128 + signum, err
    assert doc["result"] == "interrupted" and doc["data"]["data_path"] == cm_path, doc
    assert doc["totals"]["connections"] == 4 and "Traceback" not in err, doc
    assert not any(resources_of(client.pid).values())
    srv.proc.kill()


def test_connect_with_nobody_listening_says_so(lab, cm_path):
    r = lab.run("connect", lab.server, "-b", lab.client, "-p", "9", "--json")
    assert r.returncode == 5, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["data"]["data_path"] == cm_path
    assert doc["error"]["reject_reason"] == {"code": 8, "name": "INVALID_SERVICE_ID"}
    assert "nothing is listening" in doc["error"]["message"]
    assert "Traceback" not in r.stderr


def test_resolve_of_an_address_nobody_has(lab, cm_path):
    r = lab.run("connect", "10.77.0.99", "-b", lab.client, "--resolve-timeout", "1000")
    assert r.returncode == 4, r.stdout + r.stderr
    assert "ADDR_ERROR" in r.stderr and "ETIMEDOUT" in r.stderr and "hint:" in r.stderr
    assert "Traceback" not in r.stderr


def test_server_rejects_parameters_it_cannot_serve(lab, servers):
    srv = servers(
        [*lab.rdmacli, "listen", "-b", lab.server, "--max-size", "1024", "--json-lines"], ready=True
    )
    r = lab.run("connect", lab.server, "-b", lab.client, "-S", "4096", "--json")
    assert r.returncode == 5, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["reject_reason"]["name"] == "CONSUMER_DEFINED"
    assert err["peer_reason"] == "rdmacli: size 4096 exceeds the server limit 1024"
    rc, out, _ = srv.finish()
    doc = summary(out)  # a server whose only client was rejected served nobody: not a pass
    assert rc == 1 and doc["result"] == "fail", doc
    assert doc["totals"]["connections_rejected"] == 1 and doc["totals"]["connections_passed"] == 0


def test_server_killed_mid_run_ends_client_with_an_error(lab, servers):
    srv = servers([*lab.rdmacli, "listen", "-b", lab.server, "--json-lines"], ready=True)
    client = subprocess.Popen(
        [
            *lab.rdmacli,
            "connect",
            lab.server,
            "-b",
            lab.client,
            "-C",
            "200000",  # seconds of exchange, C on both sides: the kill comes mid-run
            "-S",
            "64",
            "--json-lines",
            "--idle-timeout",
            "5",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in client.stdout:
        if '"event":"ESTABLISHED"' in line:
            srv.proc.kill()
            break
    t0 = time.monotonic()
    out, err = client.communicate(timeout=60)
    doc = summary(out)
    # the killed server's kernel sends a DREQ (or its QP is gone before our next send is ACKed):
    # either way the peer went away mid-exchange, said as such, exit 1, not a deadline
    assert client.returncode == 1, out + err
    assert doc["result"] == "fail" and doc["error"]["cause"] in ("peer_ended_early", "transfer_failed")
    assert "Traceback" not in err
    assert time.monotonic() - t0 < 30
