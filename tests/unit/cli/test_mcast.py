"""`rdmacli mcast` (mckey) through the CLI on the scripted backend."""

from __future__ import annotations

from .peers import mckey_sender


def test_a_receiver_gets_its_datagrams_from_mckey(rdmacli, backend):
    mckey_sender(backend, count=10)
    r = rdmacli(backend, "mcast", "239.1.1.1", "-b", "10.0.0.2", "--json-lines")
    assert r.exit_code == 0, r.stderr
    assert [j["group"] for j in r.records("joined")] == ["239.1.1.1"]
    assert r.doc["connections"][0]["datagrams_received"] == 10


def test_a_sender_sends_its_count(rdmacli, backend):
    r = rdmacli(backend, "mcast", "239.1.1.1", "--send", "-C", "4", "--json")
    assert r.exit_code == 0 and r.doc["connections"][0]["datagrams_sent"] == 4
    assert len(backend.sends) >= 1 and backend.sends[0]["remote_qpn"] == 0xFFFFFF


def test_a_group_that_is_not_multicast_is_a_usage_error(rdmacli, backend):
    r = rdmacli(backend, "mcast", "10.0.0.1", "--json")
    assert r.exit_code == 2
