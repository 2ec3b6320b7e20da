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
    assert (r.doc["connections"][0]["role"], r.doc["connections"][0]["member"]) == ("client", "sender")
    assert len(backend.sends) >= 1 and backend.sends[0]["remote_qpn"] == 0xFFFFFF


def test_a_group_that_is_not_multicast_is_a_usage_error(rdmacli, backend):
    r = rdmacli(backend, "mcast", "10.0.0.1", "--json")
    assert r.exit_code == 2


def test_a_person_sees_the_counts_and_the_group_joined(rdmacli, backend):
    """The words a terminal shows; the JSON keeps the connection's role (client, server) apart
    from the member's (sender, receiver)."""
    mckey_sender(backend, count=10)
    r = rdmacli(backend, "mcast", "239.1.1.1", "-b", "10.0.0.2")
    assert r.exit_code == 0, r.stderr
    assert "10/10 datagrams received (mgid ::ffff:239.1.1.1" in r.stdout, r.stdout


def test_a_sender_says_what_it_sent_and_its_role_stays_the_connections(rdmacli, backend):
    r = rdmacli(backend, "mcast", "239.1.1.1", "--send", "-C", "4")
    assert r.exit_code == 0 and "4/4 datagrams sent" in r.stdout, r.stdout
