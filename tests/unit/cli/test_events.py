"""`rdmacli events` (cmtime's steps) through the CLI on the scripted backend."""

from __future__ import annotations

from rdmacli.rdma import constants as C

from .peers import c_clients


def test_events_walks_the_client_flow_and_times_each_step(rdmacli, backend):
    r = rdmacli(backend, "events", "10.0.0.1", "--json-lines")
    assert r.exit_code == 0, r.stderr
    events = [rec["event"] for rec in r.records("cm_event")]
    assert events == ["ADDR_RESOLVED", "ROUTE_RESOLVED", "ESTABLISHED", "DISCONNECTED"]
    steps = {s["step"] for s in r.doc["steps_us"]}
    assert {"create id", "resolve addr", "resolve route", "create qp", "cm connect"} <= steps


def test_events_listen_accepts_and_reports(rdmacli, backend):
    c_clients(backend)
    # the client hangs up at once, as `rdmacli events HOST` does
    backend.script["accept"] = lambda cm, p: [
        backend.event(cm, C.ESTABLISHED),
        backend.event(cm, C.DISCONNECTED),
    ]
    r = rdmacli(backend, "events", "--listen", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.doc["totals"]["connections_passed"] == 1 and r.doc["command"] == "events"
