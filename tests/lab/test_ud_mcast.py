"""UD (udaddy) and multicast (mckey), both directions against the C tools and against itself."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import expect, summary, wait_for_listener


def line_buffered(cmd: list[str]) -> list[str]:
    return ["stdbuf", "-oL", *cmd]  # the C tools' stdout is block-buffered in a pipe


def mckey_send(c_tool, lab, group: str) -> None:
    """mckey's sender: 10 datagrams to `group` from the client address, then exit 0."""
    s = subprocess.run(
        [c_tool("mckey"), "-m", group, "-b", lab.client, "-s"], capture_output=True, text=True, timeout=60
    )
    assert s.returncode == 0, s.stdout + s.stderr


def test_rdmacli_ud_client_against_udaddy_server(lab, flows):
    srv = flows.c_serve("udaddy", "-b", lab.server, port=7174)  # it prints before it listens
    doc = expect(flows.run("connect", lab.server, "--ud", "-b", lab.client), connections_passed=1)
    c = doc["connections"][0]
    assert c["datagrams_received"] == c["datagrams_sent"] == 10 and c["datagrams_lost"] == 0
    assert "return status 0" in flows.done(srv)[1]


def test_udaddy_client_against_rdmacli_ud_server(lab, flows):
    srv = flows.serve("listen", "--ud", "-c", 2)
    assert "return status 0" in flows.c_run("udaddy", "-s", lab.server, "-b", lab.client, "-c", 2)
    doc = expect(flows.done(srv)[0], connections_passed=2)
    assert all(c["datagrams_received"] == c["datagrams_sent"] == 10 for c in doc["connections"])


def test_ud_against_itself_with_four_paths(lab, flows):
    srv = flows.serve("listen", "--ud", "-c", 4)
    expect(
        flows.run("connect", lab.server, "--ud", "-b", lab.client, "-c", 4, "-C", 50, "-S", 1024),
        connections_passed=4,
    )
    doc = expect(flows.done(srv)[0], connections_passed=4)
    assert sum(c["datagrams_received"] for c in doc["connections"]) == 200


def test_ud_size_above_the_mtu_is_refused(lab):
    r = lab.run("connect", lab.server, "--ud", "-b", lab.client, "-S", "4096", "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "larger than the active MTU 1024" in err["message"] and "-S 1024" in err["hint"]


def test_ud_loss_is_reported_not_waited_for(lab, servers, c_tool):
    # udaddy replies with its own -C 4; we expect 10: 6 never come, the deadline ends the wait
    srv = servers(line_buffered([c_tool("udaddy"), "-b", lab.server, "-C", "4"]), ready=False)
    wait_for_listener(7174)  # udaddy prints "starting server" before it listens
    r = lab.run("connect", lab.server, "--ud", "-b", lab.client, "-C", "10", "--idle-timeout", "3", "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    c = json.loads(r.stdout)["connections"][0]
    assert c["datagrams_received"] == 4 and c["datagrams_lost"] == 6 and c["datagrams_sent"] == 10
    srv.finish()


def test_rdmacli_mcast_receives_from_mckey(lab, flows):
    rcv = flows.serve("mcast", "239.1.1.1", ready='"type":"joined"')
    flows.c_run("mckey", "-m", "239.1.1.1", "-b", lab.client, "-s")
    c = expect(flows.done(rcv)[0], connections_passed=1)["connections"][0]
    assert c["datagrams_received"] == 10 and c["mgid"] == "::ffff:239.1.1.1"


def test_mckey_receives_from_rdmacli_mcast(lab, flows):
    rcv = flows.c_serve("mckey", "-m", "239.1.1.2", "-b", lab.server, ready="receiving data transfers")
    doc = expect(flows.run("mcast", "239.1.1.2", "-b", lab.client, "--send"), connections_passed=1)
    assert doc["connections"][0]["datagrams_sent"] == 10
    assert "data transfers complete" in flows.done(rcv)[1]


@pytest.mark.parametrize("send_only", [False, True])
def test_two_rdmacli_receivers_in_one_group(lab, servers, send_only):
    group = "239.1.1.3" if send_only else "239.1.1.4"
    receivers = []
    for _ in range(2):
        rcv = servers(
            [*lab.rdmacli, "mcast", group, "-b", lab.server, "-C", "20", "--json-lines"], ready=False
        )
        rcv.wait_for('"type":"joined"')
        receivers.append(rcv)
    args = ["mcast", group, "-b", lab.client, "--send", "-C", "20", "--json"]
    r = lab.run(*args, *(["--send-only"] if send_only else []))
    assert r.returncode == 0, r.stdout + r.stderr
    for rcv in receivers:
        rc, out, err = rcv.finish()
        assert rc == 0, out + err
        assert summary(out)["connections"][0]["datagrams_received"] == 20


def test_no_loopback_is_refused_clearly_where_unsupported(lab):
    r = lab.run("mcast", "239.1.1.5", "-b", lab.client, "--send", "--no-loopback", "--json")
    assert r.returncode == 3, r.stdout + r.stderr  # rxe cannot block self multicast loopback
    assert "cannot block multicast loopback" in json.loads(r.stdout)["error"]["message"]
    res = subprocess.run(["rdma", "-j", "resource", "show", "cm_id"], capture_output=True, text=True)
    assert "rdmacli" not in res.stdout and "python" not in res.stdout  # nothing left joined


def test_ipv6_group_refused_clearly_where_the_kernel_cannot(lab, c_tool):
    # Soft-RoCE on this kernel rejects IPv6 multicast joins (mckey: "Unknown error 524")
    m = subprocess.run(
        [c_tool("mckey"), "-m", "ff0e::db8:1", "-b", lab.server6, "-C", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert m.returncode != 0 and "failure joining" in m.stdout + m.stderr
    r = lab.run("mcast", "ff0e::db8:1", "-b", lab.server6, "--json")
    assert r.returncode == 3, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert "ENOTSUPP" in err["message"] and "IPv4 group" in err["hint"]


def test_ud_with_nothing_listening_says_no_loss(lab):
    """Refused before any datagram moved: nothing was lost, and the JSON does not say so."""
    r = lab.run("connect", lab.server, "--ud", "-b", lab.client, "-p", "7199", "--json")
    assert r.returncode == 5, r.stdout + r.stderr
    c = json.loads(r.stdout)["connections"][0]
    assert c["datagrams_received"] == 0 and "datagrams_lost" not in c, c
