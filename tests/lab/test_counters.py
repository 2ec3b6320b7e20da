"""The ports' counters around a test, on real Soft-RoCE: a link that drops packets (netem on both
veths) shows as retransmits in the summary, and a failure over it is said as packet loss."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import summary, validate


@pytest.fixture
def lossy_link():
    """5 % loss both ways between the lab's two addresses (netem on veth0 and veth1)."""
    for dev in ("veth0", "veth1"):
        subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", "5%"], check=True)
    yield
    for dev in ("veth0", "veth1"):
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)


def loss_moved(doc: dict) -> dict:
    """The loss counters that moved on any of the run's ports."""
    return {n: v for p in doc["counters"] for n, v in (p.get("kinds") or {}).get("loss", {}).items()}


def test_ping_over_a_lossy_link_reports_the_retransmits(lab, flows, lossy_link):
    srv = flows.serve("listen", "--ping", "--timeout", "240")
    r = lab.run("ping", lab.server, "-I", lab.client, "-C", "20", "--json", timeout=300)
    doc = validate(json.loads(r.stdout))
    moved = loss_moved(doc)
    assert moved, doc["counters"]  # rxe: completer_retry_err, duplicate_request, ...
    assert all(v > 0 for v in moved.values())
    if doc["result"] == "pass":
        assert r.returncode == 0
    elif doc["error"]["cause"] not in ("transfer_failed", "peer_ended_early"):  # said as such
        # a deadline while the NIC retransmitted is said as packet loss, with the first words kept
        assert doc["error"]["cause"] == "packet_loss", doc["error"]
        assert doc["error"]["reported_cause"] == "deadline"
    rc, out, err = srv.finish(timeout=240)
    server_doc = summary(out)  # the server read its own port's counters
    assert loss_moved(server_doc) or doc["result"] == "fail", server_doc["counters"]


def test_a_healthy_ping_moves_no_trouble_counter(lab, flows):
    srv = flows.serve("listen", "--ping")
    doc = flows.run("ping", lab.server, "-I", lab.client, "-C", "20")
    assert doc["result"] == "pass"
    ports = {p["device"] for p in doc["counters"]}
    assert ports, "the client's port counters were read"  # rxe counts its packets (sent_pkts)
    assert all("loss" not in (p.get("kinds") or {}) for p in doc["counters"]), doc["counters"]
    flows.done(srv)
