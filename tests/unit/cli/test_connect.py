"""`rdmacli connect` (ucmatose -s) through the CLI on the scripted backend."""

from __future__ import annotations

from rdmacli.rdma import constants as C

from .peers import ucmatose_server


def test_connect_exchanges_with_a_ucmatose_server(rdmacli, backend):
    ucmatose_server(backend, count=10, size=100)
    r = rdmacli(backend, "connect", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.doc
    assert doc["result"] == "pass" and doc["totals"]["connections_passed"] == 1
    assert doc["totals"]["messages_received"] == doc["totals"]["messages_sent"] == 10
    assert doc["params"]["host"] == "10.0.0.1" and doc["params"]["port"] == 7471


def test_several_connections_share_the_run(rdmacli, backend):
    ucmatose_server(backend, count=3, size=64)
    r = rdmacli(backend, "connect", "10.0.0.1", "-c", "4", "-C", "3", "-S", "64", "--json")
    assert r.exit_code == 0 and r.doc["totals"]["connections_passed"] == 4


def test_nobody_listening_is_its_cause_and_exit_5(rdmacli, backend):
    backend.script["connect"] = lambda cm, p: [backend.event(cm, C.REJECTED, 8)]
    r = rdmacli(backend, "connect", "10.0.0.1", "--json")
    assert r.exit_code == 5
    assert r.doc["error"]["cause"] == "nobody_listening" and r.doc["result"] == "fail"
    assert "--wait SECONDS" in r.doc["error"]["hint"]


def test_a_bad_address_is_a_resolution_error_with_a_summary(rdmacli, backend):
    r = rdmacli(backend, "connect", "no-such-host.invalid", "--json")
    assert r.exit_code == 4 and r.doc["error"]["cause"] == "address_error"


def test_people_get_a_summary_line_not_json(rdmacli, backend):
    ucmatose_server(backend)
    r = rdmacli(backend, "connect", "10.0.0.1")
    assert r.exit_code == 0
    assert r.stdout == "connect: pass - 1/1 connections, 10 messages received, 10 sent, 2000 bytes\n"
