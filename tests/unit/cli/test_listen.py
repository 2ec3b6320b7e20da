"""`rdmacli listen` (ucmatose, rping -s, udaddy servers) through the CLI on the scripted backend."""

from __future__ import annotations

import os
import signal

from rdmacli.protocols import rping, table
from rdmacli.rdma import constants as C

from .peers import c_clients


def test_listen_serves_a_ucmatose_client_and_exits(rdmacli, backend):
    c_clients(backend)
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "--json-lines")
    assert r.exit_code == 0, r.stderr
    assert [rec["port"] for rec in r.records("ready")] == [7471]
    doc = r.doc
    assert doc["totals"]["connections_passed"] == 1 and doc["totals"]["messages_received"] == 10


def test_listen_serves_several_clients(rdmacli, backend):
    c_clients(backend, n=3)
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "-c", "3", "--json")
    assert r.exit_code == 0 and r.doc["totals"]["connections_passed"] == 3


def test_a_full_server_rejects_with_its_reason(rdmacli, backend):
    c_clients(backend, n=2)
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "-c", "1", "--json")
    assert r.exit_code == 0 and r.doc["totals"]["connections_rejected"] == 1
    assert backend.rejections[0].startswith(b"rdmacli: server is full")


def test_a_persistent_server_stopped_by_sigterm_counts_its_finished_client(rdmacli, backend):
    c_clients(backend)
    echoes = []

    def on_send(cm, wr):  # the client echoes; after its last echo, a service manager stops us
        backend.deliver(cm, b"e" * wr["length"])
        echoes.append(wr)
        if len(echoes) == 10:
            backend.peer_disconnects(cm)
            os.kill(os.getpid(), signal.SIGTERM)

    backend.on_send = on_send
    r = rdmacli(backend, "listen", "--persistent", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 143
    doc = r.doc
    assert doc["result"] == "interrupted" and doc["error"] is None
    assert doc["totals"]["connections_passed"] == 1 and doc["totals"]["connections_interrupted"] == 0


def rping_client(backend, pings: int) -> None:
    """rping -c -C pings: an advert of its source buffer, then of its sink after each go-ahead;
    it disconnects after its last ping."""
    backend.script["listen"] = lambda cm: [backend.request()][:0]
    go_aheads: dict = {}

    def accept(cm, param):
        backend.then(lambda: backend.deliver(cm, rping.pack_info(0xAB0000, 0x1234, 64)))
        return [backend.event(cm, C.ESTABLISHED)]

    def on_send(cm, wr):
        if wr["opcode"] != C.WR_SEND:
            return  # the server's RDMA READ and WRITE
        go_aheads[cm.key] = n = go_aheads.get(cm.key, 0) + 1
        if n == 2 * pings:
            backend.peer_disconnects(cm)
        else:  # after the read: the sink advert; after the write: the next ping's source
            backend.deliver(cm, rping.pack_info(0xAB0000 + (n % 2) * 0x1000, 0x1234, 64))

    backend.script["accept"] = accept
    backend.on_send = on_send


def test_listen_ping_serves_an_rping_client(rdmacli, backend):
    rping_client(backend, pings=3)
    r = rdmacli(backend, "listen", "--ping", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.stderr
    [conn] = r.doc["connections"]
    assert conn["state"] == "done" and conn["pings_served"] == 3 and r.doc["params"]["port"] == 7174


def test_an_unresolvable_bind_address_is_a_resolution_error(rdmacli, backend):
    r = rdmacli(backend, "listen", "-b", "no-such-host.invalid", "--json")
    assert r.exit_code == 4 and r.doc["error"]["cause"] == "address_error"


def test_listen_ud_serves_a_udaddy_client(rdmacli, backend):
    backend.script["listen"] = lambda cm: [backend.request(ps=C.PS_UDP)][:0]

    def accept(cm, param):  # the SIDR reply is sent: udaddy's 10 datagrams carry its QP number
        backend.then(lambda: [backend.deliver(cm, b"d" * 140, imm=77) for _ in range(10)])
        return []

    backend.script["accept"] = accept
    r = rdmacli(backend, "listen", "--ud", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.stdout
    [conn] = r.doc["connections"]
    assert (conn["datagrams_received"], conn["datagrams_sent"]) == (10, 10)
    assert {s["remote_qpn"] for s in backend.sends} == {77}  # replies go to the QPN it carried


def test_a_port_already_held_is_said_with_who_holds_it(rdmacli, backend):
    import errno

    from rdmacli.rdma.cm import RdmaCallError

    def bind(cm, sa):
        raise RdmaCallError("rdma_bind_addr", errno.EADDRINUSE)

    backend.script["bind"] = bind
    backend.holders = ["rping (pid 4242)"]
    r = rdmacli(backend, "listen", "--ping", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 3
    err = r.doc["error"]
    assert err["cause"] == "port_in_use" and err["holders"] == ["rping (pid 4242)"]
    assert "port 7174 on 10.0.0.1 is in use by rping (pid 4242)" in err["message"]


def test_a_client_test_of_several_connections_counts_as_one_client(rdmacli, backend):
    """connect -c 3 (bw --qps 3) says so in its hello: a default server (-c 1) takes all three,
    and nobody else."""
    from rdmacli.protocols import hello as H

    group = H.Hello(table.CONNECT.hello_kind, 10, 100, group=3).pack()
    backend.script["listen"] = lambda cm: (
        [backend.request(group) for _ in range(3)]
        + [backend.request(H.Hello(table.CONNECT.hello_kind, 10, 100).pack())]
    )[:0]
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "--json")
    assert r.exit_code == 0, r.doc["error"]
    assert r.doc["totals"]["connections_passed"] == 3 and r.doc["totals"]["connections_rejected"] == 1
    assert backend.rejections == [b"rdmacli: server is full\0"]


def test_a_group_beyond_the_servers_limit_is_refused_past_it(rdmacli, backend):
    from rdmacli.protocols import hello as H

    n = H.MAX_GROUP + 2
    group = H.Hello(table.CONNECT.hello_kind, 1, 8, group=n).pack()
    backend.script["listen"] = lambda cm: [backend.request(group) for _ in range(n)][:0]
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "--json")
    t = r.doc["totals"]
    assert (t["connections_passed"], t["connections_rejected"]) == (H.MAX_GROUP, 2), t


def test_a_server_serves_at_most_max_clients_at_once_and_says_why_it_refuses(rdmacli, backend):
    from rdmacli.protocols import hello as H

    hello = H.Hello(table.CONNECT.hello_kind, 1, 100).pack()
    backend.script["listen"] = lambda cm: [backend.request(hello) for _ in range(3)][:0]
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "-c", "3", "--max-clients", "2", "--json")
    t = r.doc["totals"]
    assert (t["connections_passed"], t["connections_rejected"]) == (2, 1), t
    assert backend.rejections == [b"rdmacli: server is busy: 2 connections at once (--max-clients)\0"]
    assert r.doc["params"]["max_clients"] == 2


def test_a_server_pins_at_most_max_pinned_for_all_its_clients(rdmacli, backend):
    """Two clients asking 48 MiB each of a server allowed 64 MiB: the second is refused with
    what it asked and what is held (issue 34: 64 clients once pinned 4 GiB, none refused)."""
    from rdmacli.protocols import hello as H

    hello = H.Hello(table.CONNECT.hello_kind, 1, 48 << 20).pack()
    backend.script["listen"] = lambda cm: [backend.request(hello) for _ in range(2)][:0]
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * 8)
    r = rdmacli(backend, "listen", "-b", "10.0.0.1", "-c", "2", "--max-pinned", "64M", "--json")
    assert r.doc["totals"]["connections_rejected"] == 1, r.doc["totals"]
    reason = backend.rejections[0].decode()
    assert reason.startswith("rdmacli: server's memory is taken: 50331648 bytes asked, 50331648 of 67108864")
    assert r.doc["params"]["max_pinned_bytes"] == 64 << 20


def test_a_persistent_server_has_bounds_by_default(rdmacli, backend):
    c_clients(backend)
    backend.on_send = lambda cm, wr: (
        backend.deliver(cm, b"e" * wr["length"]),
        os.kill(os.getpid(), signal.SIGTERM),
    )
    r = rdmacli(backend, "listen", "--persistent", "-b", "10.0.0.1", "--json")
    assert (r.doc["params"]["max_clients"], r.doc["params"]["max_pinned_bytes"]) == (512, 1 << 30)
