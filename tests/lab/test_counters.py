"""The ports' counters around a test, on real Soft-RoCE: a link that drops packets (netem on both
veths) shows as retransmits in the summary, and a failure over it is said as packet loss."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import summary, validate

LOSSY = ("veth1", "veth0")  # the client's and the server's netdev: netem drops their egress


def netem_drops(dev: str) -> int:
    """Packets netem dropped on `dev` so far: the ground truth the NIC's counters are held to."""
    out = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return sum(q.get("drops", 0) for q in json.loads(out) if q.get("kind") == "netem")


@pytest.fixture
def lossy_link():
    """5 % loss both ways between the lab's two addresses (netem on veth0 and veth1); yields
    a function that reads how many packets netem dropped on each."""
    for dev in LOSSY:
        subprocess.run(["tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", "5%"], check=True)
    yield lambda: {dev: netem_drops(dev) for dev in LOSSY}
    for dev in LOSSY:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)


def loss_moved(doc: dict) -> dict:
    """The loss counters that moved on any of the run's ports."""
    return {n: v for p in doc["counters"] for n, v in (p.get("kinds") or {}).get("loss", {}).items()}


def test_ping_over_a_lossy_link_reports_the_retransmits(lab, flows, lossy_link):
    """Each side's port shows the loss of the packets it sent: a lost request is retransmitted
    by its sender (completer_retry_err), a lost ACK or READ response makes the peer retransmit
    and the sender see a duplicate (duplicate_request). Held to what netem says it dropped,
    not to chance: 35 pings are ~215 packets each way, so a run in which netem drops none of
    one side's (0.95^215, 2e-5) does not happen; 20 pings (0.2 %) once did (a fresh-clone CI run)."""
    srv = flows.serve("listen", "--ping", "--timeout", "300")
    r = lab.run("ping", lab.server, "-I", lab.client, "-C", "35", "--json", timeout=360)
    doc = validate(json.loads(r.stdout))
    drops = lossy_link()
    assert all(drops.values()), f"netem dropped no packet of one side: {drops}"
    moved = loss_moved(doc)
    assert moved, (drops, doc["counters"])  # rxe: completer_retry_err, duplicate_request, ...
    assert all(v > 0 for v in moved.values())
    if doc["result"] == "pass":
        assert r.returncode == 0
    elif doc["error"]["cause"] not in ("transfer_failed", "peer_ended_early"):  # said as such
        # a deadline while the NIC retransmitted is said as packet loss, with the first words kept
        assert doc["error"]["cause"] == "packet_loss", doc["error"]
        assert doc["error"]["reported_cause"] == "deadline"
    rc, out, err = srv.finish(timeout=300)
    server_doc = summary(out)  # the server read its own port's counters
    assert loss_moved(server_doc) or doc["result"] == "fail", (drops, server_doc["counters"])


def test_a_healthy_ping_moves_no_trouble_counter(lab, flows):
    srv = flows.serve("listen", "--ping")
    doc = flows.run("ping", lab.server, "-I", lab.client, "-C", "20")
    assert doc["result"] == "pass"
    ports = {p["device"] for p in doc["counters"]}
    assert ports, "the client's port counters were read"  # rxe counts its packets (sent_pkts)
    assert all("loss" not in (p.get("kinds") or {}) for p in doc["counters"]), doc["counters"]
    flows.done(srv)
