"""Stopping is a normal end: a server or receiver stopped by SIGTERM, SIGINT or SIGHUP at any
moment (idle, while a client is being accepted or pinging, under a load of 100 clients) ends
with its true summary and 128 + the signal, and holds nothing afterwards. Clients of each kind:
rping, ucmatose and rdmacli."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from conftest import resources_of, summary

SIGNALS = {"sigterm": signal.SIGTERM, "sigint": signal.SIGINT, "sighup": signal.SIGHUP}
# (server, the client that faces it): long exchanges, so the signal lands mid-exchange
UCMATOSE = ["-C", "10000", "-S", "64"]  # the server must match: a C client sends no hello
CLIENTS = {
    "rping": (
        ["listen", "--ping", "--persistent"],
        lambda lab, c: [c("rping"), "-c", "-a", lab.server, "-I", lab.client, "-C", "100000"],
    ),
    "ucmatose": (
        ["listen", "--persistent", *UCMATOSE],
        lambda lab, c: [c("ucmatose"), "-s", lab.server, "-b", lab.client, *UCMATOSE],
    ),
    "rdmacli": (
        ["listen", "--ping", "--persistent"],
        lambda lab, c: [*lab.rdmacli, "ping", lab.server, "-I", lab.client, "-C", "100000"],
    ),
}


def stopped(srv, signum: int) -> dict:
    """The server's end after a signal: 128 + signum, a summary that adds up, nothing held."""
    pid = srv.proc.pid
    srv.proc.send_signal(signum)
    rc, out, err = srv.finish(timeout=60)
    assert rc == 128 + signum, err
    doc = summary(out)
    assert doc["result"] == "interrupted" and doc["exit_code"] == 128 + signum, doc
    keys = ("connections", "connections_passed", "connections_failed", "connections_interrupted")
    t = {k: doc["totals"].get(k, 0) for k in keys}
    ended = t["connections_passed"] + t["connections_failed"] + t["connections_interrupted"]
    assert ended == t["connections"], t  # every connection has its final state
    assert "Traceback" not in err and "internal error" not in out + err
    held = resources_of(pid)
    assert not any(held.values()), held  # the process is gone and left nothing behind
    return doc


@pytest.mark.parametrize("sig", SIGNALS)
def test_an_idle_server_stops_with_its_summary(lab, flows, sig):
    srv = flows.serve("listen", "--persistent")
    doc = stopped(srv, SIGNALS[sig])
    assert doc["totals"].get("connections", 0) == 0 and doc["connections"] == []


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("client", CLIENTS)
def test_a_server_stopped_mid_exchange(lab, flows, c_tool, client, sig):
    args, cmd = CLIENTS[client]
    srv = flows.serve(*args)
    peer = subprocess.Popen(cmd(lab, c_tool), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        srv.wait_for('"type":"request"')  # the client is being accepted, or already exchanging
        doc = stopped(srv, SIGNALS[sig])
    finally:
        peer.kill()
        peer.wait()
    t = doc["totals"]
    assert t["connections"] == 1 and t["connections_interrupted"] + t["connections_passed"] == 1, doc


def test_a_server_at_its_defaults_serves_100_rping_clients_at_once_then_stops_mid_run(lab, flows, c_tool):
    """Issue 70: 50 concurrent `rping -c` against `listen --ping --persistent` had 16 served and
    34 rejected: a cap of 16 connections at once that was no resource bound. At the defaults
    (--max-clients 512, --max-pinned 1 GiB) 100 at once are all served; then, under a second
    wave, SIGTERM stops the server mid-run with every connection's true state."""
    srv = flows.serve("listen", "--ping", "--persistent")

    def wave(count: str) -> list[subprocess.Popen]:
        return [
            subprocess.Popen(
                [c_tool("rping"), "-c", "-a", lab.server, "-I", lab.client, "-C", count, "-V"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for _ in range(100)
        ]

    peers = wave("10")
    try:
        failed = []
        for p in peers:
            _, err = p.communicate(timeout=300)
            if p.returncode != 0:
                failed.append(err[-300:])
        assert not failed, (len(failed), failed[:3])  # every one of the hundred served

        def said(kind: str) -> int:
            return sum(f'"type":"{kind}"' in line for line in list(srv.lines))

        turned = [x for x in srv.lines if '"type":"rejected"' in x]
        assert said("rejected") == 0, turned[:3]  # none of the hundred turned away
        first = said("request")
        peers = wave("50")
        end = time.monotonic() + 120
        while said("request") < first + 20:  # a fifth of the second wave has come in: a record, not a time
            assert time.monotonic() < end, said("request") - first
            time.sleep(0.2)
        doc = stopped(srv, signal.SIGTERM)
    finally:
        for p in peers:
            p.kill()
            p.wait()
    t = doc["totals"]
    failed = [c for c in doc["connections"] if c["state"] == "failed"]
    assert t["connections"] >= 120 and t["connections_passed"] >= 100 and not failed, (t, failed)
    # what came after the stop was turned away as such, and only that
    reasons = [json.loads(x)["reason"] for x in srv.lines if '"type":"rejected"' in x]
    assert all("server is stopping" in r for r in reasons), set(reasons)
