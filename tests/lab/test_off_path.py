"""Off the tested path: a person's pace, stop signals, big counts, a C server that never answers
the disconnect, rping clients larger than the server's default, explicit sizes that stay."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from conftest import expect, summary, wait_for_listener
from test_ud_mcast import line_buffered, mckey_send


def rping_client(c_tool, lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [c_tool("rping"), "-c", "-a", lab.server, "-I", lab.client, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_listen_ping_keeps_an_explicit_size(lab, flows):
    srv = flows.serve("listen", "--ping", "-S", 100)
    flows.c_run("rping", "-c", "-a", lab.server, "-I", lab.client, "-C", 3, "-S", 100, "-V")
    doc = expect(flows.done(srv)[0], connections_passed=1)
    assert doc["params"]["size_bytes"] == 100 and doc["connections"][0]["size_bytes"] == 100


def test_rping_client_larger_than_the_servers_default_is_served(lab, flows):
    srv = flows.serve("listen", "--ping")
    flows.c_run("rping", "-c", "-a", lab.server, "-I", lab.client, "-C", 3, "-S", 65535, "-V")
    conn = expect(flows.done(srv)[0], connections_passed=1)["connections"][0]
    assert (conn["pings_served"], conn["size_bytes"]) == (3, 65535)


def test_rping_client_above_max_size_is_refused_in_words(lab, flows, c_tool):
    srv = flows.serve("listen", "--ping", "--max-size", 1024)
    r = rping_client(c_tool, lab, "-C", "3", "-S", "4096")
    assert "DISCONNECT" in r.stderr, r.stdout + r.stderr  # rping exits 0 whatever happened
    doc = expect(flows.done(srv, code=1)[0], result="fail", cause="peer_protocol_violation")
    assert "the server accepts 1 to 1024" in doc["connections"][0]["error"]["message"]


def test_a_multicast_receiver_waits_for_a_sender_started_later(lab, servers, c_tool):
    # the idle deadline is 1 s; the sender (the C tool) comes 4 s after the join
    rcv = servers(
        [*lab.rdmacli, "mcast", "239.1.1.6", "-b", lab.server, "--idle-timeout", "1", "--json-lines"],
        ready=False,
    )
    rcv.wait_for('"type":"joined"')
    time.sleep(4)  # the scenario itself: a person walking to the other host
    assert rcv.proc.poll() is None, "the receiver gave up before its sender started"
    mckey_send(c_tool, lab, "239.1.1.6")
    rc, out, err = rcv.finish()
    assert rc == 0, out + err
    assert summary(out)["connections"][0]["datagrams_received"] == 10


def test_a_receiver_with_wait_gives_up_in_words(lab):
    r = lab.run("mcast", "239.1.1.7", "-b", lab.server, "--wait", "2", "--json")
    assert r.returncode == 6, r.stdout + r.stderr
    assert "no datagram arrived within --wait 2 s" in json.loads(r.stdout)["error"]["message"]


def test_a_server_waits_for_a_client_started_later(lab, servers):
    srv = servers(
        [
            *lab.rdmacli,
            "listen",
            "-b",
            lab.server,
            "--idle-timeout",
            "2",
            "--connect-timeout",
            "2",
            "--json-lines",
        ],
        ready=True,
    )
    time.sleep(4)  # the scenario itself: the client starts after every per-connection deadline
    assert srv.proc.poll() is None, "the server gave up before its client came"
    r = lab.run("connect", lab.server, "-b", lab.client, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rc, out, err = srv.finish()
    assert rc == 0 and summary(out)["totals"]["connections_passed"] == 1, err


def test_sigterm_and_sighup_stop_a_persistent_server_with_its_summary(lab, servers):
    for signum in (signal.SIGTERM, signal.SIGHUP):
        srv = servers([*lab.rdmacli, "listen", "--persistent", "-b", lab.server, "--json-lines"], ready=True)
        r = lab.run("connect", lab.server, "-b", lab.client, "--json")
        assert r.returncode == 0, r.stderr
        srv.proc.send_signal(signum)
        rc, out, err = srv.finish()
        assert rc == 128 + signum, err
        doc = summary(out)
        assert doc["result"] == "interrupted" and doc["exit_code"] == 128 + signum
        assert doc["totals"]["connections_passed"] == 1 and doc["totals"]["connections_failed"] == 0
        assert "Traceback" not in err


def test_sigterm_ends_a_ping_against_rping_with_its_summary(lab, servers, c_tool):
    srv = servers([c_tool("rping"), "-s", "-a", lab.server, "-V"], ready=False)
    wait_for_listener(7174)
    client = lab.spawn("ping", lab.server, "-I", lab.client, "-V", "--json-lines")
    lines = []
    for line in client.stdout:
        lines.append(line)
        if '"ping":20,' in line:
            client.send_signal(signal.SIGTERM)
            break
    out, err = client.communicate(timeout=60)
    assert client.returncode == 0, err  # ping(8): a stop after answered pings is a normal end
    doc = summary("".join(lines) + out)
    assert doc["result"] == "pass" and doc["connections"][0]["state"] == "done"
    assert doc["connections"][0]["stopped_by"] == "SIGTERM"
    assert doc["connections"][0]["pings_completed"] >= 21
    rc, _, serr = srv.finish(hung_after="wait for RDMA_READ_ADV state 10")
    # rping -s saw our disconnect (a DREQ: we tore down, we did not vanish). Once (in a fresh-clone
    # run) it said so, left its loop ("state 10": DISCONNECTED) and then hung in its
    # own teardown past 90 s, joining its CQ thread: rping's race, after our part was done (rc
    # None: killed there, the words asserted below). Its exit code says
    # where in its ping cycle the stop found it: between two pings (waiting for the next
    # READ_ADV) it ends 0; in one ("wait for RDMA_WRITE_ADV state ...") rping.c calls it a
    # failure (exit 255), as it does when its own client is killed. The ping in flight at a stop
    # is lost, as ping(8) counts it: sent, not completed. (This asserted exit 0, and failed a
    # fresh-clone run whenever the signal came mid-ping.)
    assert "DISCONNECT EVENT" in serr, serr
    c = doc["connections"][0]
    if rc is not None and rc != 0:
        assert rc == 255 and "rping server failed" in serr, serr
        assert c["pings_sent"] == c["pings_completed"] + 1, c


def test_events_against_a_ucmatose_server_that_never_answers_the_disconnect(lab, servers, c_tool):
    servers([c_tool("ucmatose"), "-b", lab.server], ready=False)
    wait_for_listener(7471)
    r = lab.run("events", lab.server, "-b", lab.client, "--connect-timeout", "3", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["connections"][0]["state"] == "done"
    assert any("did not answer the disconnect" in w for w in doc["warnings"]), doc["warnings"]


def test_a_hundred_thousand_messages_each_way(lab, servers):
    srv = servers([*lab.rdmacli, "listen", "-b", lab.server, "--json-lines"], ready=True)
    r = lab.run("connect", lab.server, "-b", lab.client, "-C", "100000", "-S", "64", "--json", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["totals"]["messages_received"] == 100000
    rc, out, _ = srv.finish(timeout=300)
    assert rc == 0 and summary(out)["totals"]["messages_received"] == 100000


def test_counts_beyond_the_device_queue_against_ucmatose_both_ways(lab, servers, c_tool):
    # 10000 outstanding receives fit ucmatose's queues on rxe but exceed rdmacli's window:
    # rdmacli recycles a window and asks the C peer to retry on RNR instead of failing
    srv = servers(
        [*lab.rdmacli, "listen", "-b", lab.server, "-C", "10000", "-S", "64", "--json-lines"], ready=True
    )
    c = subprocess.run(
        [c_tool("ucmatose"), "-s", lab.server, "-b", lab.client, "-C", "10000", "-S", "64"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert c.returncode == 0 and "return status 0" in c.stdout, c.stdout + c.stderr
    rc, out, err = srv.finish(timeout=120)
    assert rc == 0 and summary(out)["totals"]["messages_received"] == 10000, err
    srv = servers(
        line_buffered([c_tool("ucmatose"), "-b", lab.server, "-C", "10000", "-S", "64"]), ready=False
    )
    wait_for_listener(7471)
    r = lab.run("connect", lab.server, "-b", lab.client, "-C", "10000", "-S", "64", "--json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rc, out, _ = srv.finish(timeout=120)
    assert rc == 0 and "return status 0" in out


def test_datagram_counts_beyond_the_device_queue_are_created_and_counted(lab, servers):
    # UD has no flow control: what matters is that any count runs (no EINVAL at creation),
    # ends within its deadlines and counts every datagram as received or lost (idle deadlines of
    # 10 s: with 3 s a lab VM beside the mesh suite's, paused while its agents started, sent none)
    srv = servers(
        [*lab.rdmacli, "listen", "--ud", "-b", lab.server, "--idle-timeout", "10", "--json-lines"], ready=True
    )
    r = lab.run(
        "connect",
        lab.server,
        "--ud",
        "-b",
        lab.client,
        "-C",
        "100000",
        "--idle-timeout",
        "10",
        "--json",
        timeout=600,
    )
    doc = json.loads(r.stdout)
    c = doc["connections"][0]
    assert c["datagrams_sent"] == 100000, doc["error"]  # created and sent, whatever the queue
    if c["datagrams_lost"]:  # UD has no flow control: loss is said as loss, exit 1
        assert (r.returncode, doc["error"]["cause"]) == (1, "datagram_loss"), doc["error"]
    else:
        assert r.returncode == 0, doc["error"]
    rc, out, _ = srv.finish(timeout=300)
    s = summary(out)["connections"][0]
    assert s["datagrams_received"] + s["datagrams_lost"] == 100000 and s["datagrams_received"] > 0


def test_multicast_counts_beyond_the_device_queue_are_created_and_counted(lab, servers):
    rcv = servers(
        [
            *lab.rdmacli,
            "mcast",
            "239.1.1.8",
            "-b",
            lab.server,
            "-C",
            "100000",
            "--idle-timeout",
            "3",
            "--json-lines",
        ],
        ready=False,
    )
    rcv.wait_for('"type":"joined"')
    r = lab.run("mcast", "239.1.1.8", "-b", lab.client, "--send", "-C", "100000", "--json", timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["connections"][0]["datagrams_sent"] == 100000
    rc, out, err = rcv.finish(timeout=300)
    doc = summary(out)
    c = doc["connections"][0]
    assert c["datagrams_received"] + c["datagrams_lost"] == 100000 and c["datagrams_received"] > 0
    if c["datagrams_lost"]:  # a receiver that could not keep up says how many it lost
        assert (rc, doc["error"]["cause"]) == (1, "datagram_loss"), err
    else:
        assert rc == 0, err


def test_a_client_started_before_its_c_server_waits_for_it(lab, servers, c_tool):
    client = servers(
        [
            *lab.rdmacli,
            "ping",
            lab.server,
            "-I",
            lab.client,
            "-C",
            "5",
            "-V",
            "--wait",
            "120",
            "--json-lines",
        ],
        ready=False,
    )
    client.wait_for('"type":"waiting"')  # it found nothing listening, and asks again
    srv = servers([c_tool("rping"), "-s", "-a", lab.server, "-V"], ready=False)
    rc, out, err = client.finish(timeout=120)
    assert rc == 0, out + err
    assert summary(out)["connections"][0]["pings_validated"] == 5
    rc, _, serr = srv.finish()
    assert rc == 0, serr


def test_a_ud_client_started_before_its_server_waits_for_it(lab, servers):
    client = servers(
        [*lab.rdmacli, "connect", lab.server, "--ud", "-b", lab.client, "--wait", "120", "--json-lines"],
        ready=False,
    )
    client.wait_for('"type":"waiting"')
    servers([*lab.rdmacli, "listen", "--ud", "-b", lab.server, "--json-lines"], ready=True)
    rc, out, err = client.finish(timeout=120)
    assert rc == 0, out + err
    assert summary(out)["connections"][0]["datagrams_received"] == 10
