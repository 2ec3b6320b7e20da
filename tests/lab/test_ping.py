"""ping / listen --ping against rping in both directions, against itself, and misbehaving peers."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import c_exit, expect, summary, wait_released


@pytest.mark.parametrize("size,count", [(23, 1), (64, 500), (4096, 50), (65535, 5)])
def test_rdmacli_ping_against_rping_server(lab, flows, size, count):
    srv = flows.c_serve("rping", "-s", "-a", lab.server, "-S", size, "-V", port=7174)
    doc = expect(
        flows.run("ping", lab.server, "-I", lab.client, "-C", count, "-S", size, "-V"), connections_passed=1
    )
    stats = doc["connections"][0]
    assert stats["pings_completed"] == stats["pings_validated"] == count
    assert 0 < stats["rtt_us"]["min"] <= stats["rtt_us"]["p50"] <= stats["rtt_us"]["max"]
    assert "data mismatch" not in flows.done(srv)[1]  # rping -s exits 0 once the client disconnects


@pytest.mark.parametrize("size,count", [(23, 1), (64, 500), (4096, 20), (65535, 5)])
def test_rping_client_against_rdmacli_listen(lab, flows, size, count):
    srv = flows.serve("listen", "--ping", "-S", size)
    out = flows.c_run("rping", "-c", "-a", lab.server, "-I", lab.client, "-C", count, "-S", size, "-V", "-v")
    assert len([ln for ln in out.splitlines() if ln.startswith("ping data: ")]) == count
    doc = expect(flows.done(srv)[0], connections_passed=1)
    assert doc["connections"][0]["pings_served"] == count


def test_rping_data_pattern_on_the_wire(lab, servers, c_tool):
    """What rping -v prints is what protocols.rping.pattern() builds."""
    from rdmacli.protocols.rping import pattern

    srv = servers([*lab.rdmacli, "listen", "--ping", "-b", lab.server, "--json-lines"], ready=True)
    r = subprocess.run(
        [c_tool("rping"), "-c", "-a", lab.server, "-I", lab.client, "-C", "60", "-v"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert c_exit("rping", r) == 0, r.stderr
    got = [ln[len("ping data: ") :] for ln in r.stdout.splitlines() if ln.startswith("ping data")]
    assert got == [pattern(i, 64)[:-1].decode() for i in range(60)]
    srv.finish()


def test_rdmacli_against_itself_with_stats(lab, servers):
    srv = servers([*lab.rdmacli, "listen", "--ping", "-b", lab.server, "--json-lines"], ready=True)
    r = lab.run("ping", lab.server, "-I", lab.client, "-C", "200", "-S", "4096", "-V", "--json-lines")
    assert r.returncode == 0, r.stderr
    recs = [json.loads(ln) for ln in r.stdout.splitlines()]
    pings = [x for x in recs if x["type"] == "ping"]
    assert [p["ping"] for p in pings] == list(range(200)) and all(p["valid"] for p in pings)
    stats = recs[-1]["connections"][0]
    assert stats["pings_validated"] == 200 and stats["throughput_mbps"] > 0
    # the server sized its buffer from the client's hello (4096 > its default 64)
    rc, out, _ = srv.finish()
    assert rc == 0 and summary(out)["connections"][0]["size_bytes"] == 4096


def test_validation_failure_is_detected(lab, servers):
    srv = servers(
        [*lab.rdmacli, "listen", "--ping", "-b", lab.server, "--fault-corrupt", "--json-lines"], ready=True
    )
    r = lab.run("ping", lab.server, "-I", lab.client, "-C", "5", "-V", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert "data mismatch" in doc["error"]["message"]
    assert doc["connections"][0]["pings_failed"] == 1
    srv.finish()


def test_persistent_server_with_eight_concurrent_clients(lab, servers):
    srv = servers(
        [*lab.rdmacli, "listen", "--ping", "--persistent", "-b", lab.server, "--json-lines"], ready=True
    )
    clients = [
        subprocess.Popen(
            [*lab.rdmacli, "ping", lab.server, "-I", lab.client, "-C", "50", "-V", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    for c in clients:
        out, err = c.communicate(timeout=180)
        assert c.returncode == 0, out + err
        assert json.loads(out)["connections"][0]["pings_validated"] == 50
    # a client killed mid-run: the server reports it and goes on serving
    victim = subprocess.Popen(
        [*lab.rdmacli, "ping", lab.server, "-I", lab.client, "-V", "--json-lines"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in victim.stdout:
        if '"type":"ping"' in line and '"ping":20' in line:
            victim.kill()
            break
    victim.communicate()
    after = lab.run("ping", lab.server, "-I", lab.client, "-C", "10", "-V", "--json")
    assert after.returncode == 0, after.stderr
    # nothing leaked: after ten clients the server holds its listening id and nothing else
    wait_released(srv.proc.pid)
    srv.proc.send_signal(2)  # Ctrl-C: totals, exit 130
    rc, out, err = srv.finish()
    assert rc == 130, err
    recs = srv.records(out)
    conns = [x for x in recs if x["type"] == "connection"]
    assert len(conns) == 10
    assert sum(c["pings_served"] for c in conns if c["state"] == "done") >= 8 * 50 + 10
    doc = recs[-1]
    assert doc["type"] == "summary" and doc["result"] == "interrupted"


def test_ctrl_c_ends_an_open_ended_ping_with_its_summary(lab, servers):
    srv = servers([*lab.rdmacli, "listen", "--ping", "-b", lab.server, "--json-lines"], ready=True)
    client = subprocess.Popen(
        [*lab.rdmacli, "ping", lab.server, "-I", lab.client, "-V", "--json-lines"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in client.stdout:
        lines.append(line)
        if '"ping":30,' in line:
            client.send_signal(2)
            break
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err  # ping(8): Ctrl-C after answered pings is a normal end
    doc = summary("".join(lines) + out)
    assert doc["result"] == "pass" and doc["exit_code"] == 0
    assert doc["connections"][0]["stopped_by"] == "SIGINT"
    assert doc["connections"][0]["pings_completed"] >= 31
    assert "Traceback" not in err
    rc, sout, serr = srv.finish()
    served = summary(sout)["connections"][0]
    if served["state"] == "done":  # the client's disconnect came between two pings
        assert rc == 0, serr
    else:  # or in the middle of one: the client went away mid-ping, said as such
        assert (rc, served["error"]["cause"]) == (1, "peer_ended_early"), serr


EVIL = {  # mode -> what the server must say about that connection
    "short": "Received bogus data, size 12",
    "long": "work completion failed",
    "huge": "advertised 1048576 bytes, the server accepts 1 to 65535",
    "zeroaddr": "advertised address 0",
    "badrkey": "work completion failed",
    "silent": "no progress within its deadline",
}


def test_untrusted_clients_end_their_connection_and_the_server_stays_up(lab, servers):
    import pathlib

    srv = servers(
        [
            *lab.rdmacli,
            "listen",
            "--ping",
            "--persistent",
            "-b",
            lab.server,
            "--idle-timeout",
            "3",
            "--json-lines",
        ],
        ready=True,
    )
    helper = pathlib.Path(__file__).with_name("evil_rping.py")
    for mode in EVIL:
        r = subprocess.run(
            [sys.executable, str(helper), mode, lab.server, lab.client],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, f"{mode}: {r.stdout} {r.stderr}"
    good = lab.run("ping", lab.server, "-I", lab.client, "-C", "5", "-V", "--json")
    assert good.returncode == 0, good.stderr  # still serving
    wait_released(srv.proc.pid)  # every failed connection was torn down
    srv.proc.send_signal(2)
    rc, out, err = srv.finish()
    assert rc == 130 and "Traceback" not in err, err
    conns = [x for x in srv.records(out) if x["type"] == "connection"]
    assert [c["state"] for c in conns] == ["failed"] * len(EVIL) + ["done"]
    for c, (mode, text) in zip(conns, EVIL.items()):
        assert text in c["error"]["message"], (mode, c["error"])


# Every CM RTU dropped as it comes in on either veth (RoCEv2 over IPv4 without options): UDP
# destination port 4791, BTH destination QP 1 (the CM's MADs), MAD attribute 0x0014 (RTU). On
# ingress, as the wire loses it: a drop on egress is said to rxe, which sends it again at once,
# for ever (a spinning VM).
RTU_DROP = "protocol ip u32 match u16 4791 0xffff at 22 match u32 1 0x00ffffff at 32 \
match u16 0x0014 0xffff at 64 action drop"


def tc(*args: str) -> str:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def rtu_lost():
    """The server's CM never hears from the wire that its REP arrived: the client is connected
    and sending while the server's ESTABLISHED has not come (REP resent, RTU lost again).
    Yields how many RTUs were dropped so far."""
    devs = ("veth0", "veth1")
    for dev in devs:
        tc("qdisc", "add", "dev", dev, "clsact")
        tc("filter", "add", "dev", dev, "ingress", *RTU_DROP.split())
    shown = lambda dev: tc("-s", "filter", "show", "dev", dev, "ingress")  # noqa: E731
    yield lambda: sum(int(n) for dev in devs for n in re.findall(r"Sent \d+ bytes (\d+) pkt", shown(dev)))
    for dev in devs:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "clsact"], capture_output=True)


@pytest.mark.parametrize("client", ["rping", "rdmacli"])
def test_a_client_whose_rtu_is_lost_is_served(lab, flows, rtu_lost, client):
    """Halfway through the accept deadline (3 s here) the client's data is taken as the
    communication established (rdma_notify, IBV_EVENT_COMM_EST) and the CM's ESTABLISHED comes:
    without it the server waited for an ESTABLISHED that never came and failed the connection at
    its accept deadline while the client was pinging (1000 pings: longer than that deadline)."""
    srv = flows.serve("listen", "--ping", "--connect-timeout", 3)
    if client == "rping":
        flows.c_run("rping", "-c", "-a", lab.server, "-I", lab.client, "-C", 1000, "-V")
    else:
        expect(flows.run("ping", lab.server, "-I", lab.client, "-C", 1000, "-V"), connections_passed=1)
    doc, out = flows.done(srv)
    expect(doc, connections_passed=1)
    assert doc["connections"][0]["pings_served"] == 1000
    assert '"event":"ESTABLISHED"' in out  # not a DISCONNECTED in the accept phase: notified
    assert rtu_lost() > 0  # the RTU really was lost on the wire
