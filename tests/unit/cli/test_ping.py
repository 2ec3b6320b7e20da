"""`rdmacli ping` (rping -c) through the CLI on the scripted backend."""

from __future__ import annotations

from .peers import rping_server


def test_ping_counts_its_pings_and_reports_rtt(rdmacli, backend):
    rping_server(backend)
    r = rdmacli(backend, "ping", "10.0.0.1", "-C", "5", "--json-lines")
    assert r.exit_code == 0, r.stderr
    assert [p["ping"] for p in r.records("ping")] == [0, 1, 2, 3, 4]
    assert all("data" not in p for p in r.records("ping"))  # rping -v's data only with -v
    [conn] = r.doc["connections"]
    assert conn["pings_completed"] == 5 and conn["rtt_us"]["p50"] > 0


def test_an_open_ended_ping_says_that_the_server_went_away(rdmacli, backend):
    rping_server(backend, hang_up_after=3)
    r = rdmacli(backend, "ping", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.doc["connections"][0]["pings_completed"] == 3
    assert any("the server ended the run after 3 pings" in w for w in r.doc["warnings"]), r.doc["warnings"]


def test_a_counted_ping_whose_server_goes_away_fails_with_its_cause(rdmacli, backend):
    rping_server(backend, hang_up_after=2)
    r = rdmacli(backend, "ping", "10.0.0.1", "-C", "5", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "peer_ended_early"
    assert r.doc["connections"][0]["pings_completed"] == 2


def test_a_person_sees_a_line_per_ping_and_the_statistics(rdmacli, backend):
    rping_server(backend)
    r = rdmacli(backend, "ping", "10.0.0.1", "-C", "2", "-v")
    assert r.exit_code == 0
    assert "bytes from 10.0.0.1: ping=0" in r.stderr and "bytes from 10.0.0.1: ping=1" in r.stderr
    assert "2 pings" in r.stdout or "packets" in r.stdout or "ping" in r.stdout


# -- ping(8)'s meaning of success: a deadline or a stop ends an open-ended run normally ---------


def test_an_open_ended_ping_ended_by_its_deadline_passes_with_its_statistics(rdmacli, backend):
    rping_server(backend)
    r = rdmacli(backend, "ping", "10.0.0.1", "-i", "0.1", "--timeout", "0.5", "--json")
    assert r.exit_code == 0 and r.doc["result"] == "pass", r.doc["error"]
    [conn] = r.doc["connections"]
    assert conn["state"] == "done" and conn["stopped_by"] == "deadline" and conn["pings_completed"] >= 2
    r = rdmacli(backend, "ping", "10.0.0.1", "-i", "0.1", "--timeout", "0.5")
    assert r.exit_code == 0 and "stopped after" in r.stdout and "by the deadline" in r.stdout, r.stdout


def test_a_counted_ping_whose_deadline_comes_first_fails_as_unanswered_not_as_a_dead_peer(rdmacli, backend):
    rping_server(backend)
    r = rdmacli(backend, "ping", "10.0.0.1", "-C", "1000", "-i", "0.1", "--timeout", "0.5", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "unanswered", r.doc["error"]
    assert "answered before the deadline" in r.doc["error"]["message"]


def test_a_ping_that_nobody_answers_fails_with_exit_1_when_stopped(rdmacli, backend):
    rping_server(backend, mute_after=0)
    r = rdmacli(backend, "ping", "10.0.0.1", "--timeout", "0.5", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "unanswered", r.doc["error"]
    assert r.doc["connections"][0]["pings_sent"] == 1 and r.doc["connections"][0]["pings_completed"] == 0


def test_ctrl_c_after_answered_pings_is_a_normal_end(rdmacli, backend):
    import os
    import signal

    rping_server(backend, then=lambda n: n == 4 and os.kill(os.getpid(), signal.SIGINT))
    r = rdmacli(backend, "ping", "10.0.0.1", "--json")
    assert r.exit_code == 0 and r.doc["result"] == "pass", r.doc
    [conn] = r.doc["connections"]
    assert conn["stopped_by"] == "SIGINT" and conn["pings_completed"] >= 4


def test_nobody_listening_hints_only_what_ping_has(rdmacli, backend):
    """Issue 75: the engine's hint for nothing listening names the port space (-P), which
    connect has and ping has not; ping's words keep the rest of the advice, JSON and text alike."""
    from rdmacli.rdma import constants as C

    backend.script["connect"] = lambda cm, p: [backend.event(cm, C.REJECTED, 8)]
    r = rdmacli(backend, "ping", "10.0.0.1", "--json")
    hint = r.doc["error"]["hint"]
    assert r.exit_code == 5 and "--wait SECONDS" in hint and "check the port" in hint and "-P" not in hint
    r = rdmacli(backend, "ping", "10.0.0.1")
    assert "--wait SECONDS" in r.stderr and "(-P)" not in r.stderr
    r = rdmacli(backend, "connect", "10.0.0.1", "--json")
    assert "(-P)" in r.doc["error"]["hint"]  # connect has it
