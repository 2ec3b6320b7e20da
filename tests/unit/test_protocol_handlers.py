"""Each protocol's completion handler fed synthetic completions on an established connection:
rping's stage tables (legal and illegal transitions), untrusted adverts, queue windows, UD
replies, and resource errors that name the device limit."""

from __future__ import annotations

import pytest
from fakerdma import FakeBackend, wc

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.settings import Options, Timeouts
from rdmacli.errors import ExitCode
from rdmacli.outcome import State
from rdmacli.protocols import rping, table
from rdmacli.protocols.cmatose import CmatoseClient
from rdmacli.protocols.udaddy import UdServer
from rdmacli.protocols.window import chain
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.verbs import DeviceLimits

SLOW = Timeouts(resolve_ms=100, connect_s=5, idle_s=5)
SERVER = SockAddr(2, "10.0.0.1", 7174)


def established(flow, backend):
    """Run the flow until its first connection is established, then hand it to the test."""

    def observe(rec):
        if rec.TYPE == "cm_event" and rec.event == "ESTABLISHED":
            flow.stop()
        if rec.TYPE == "step" and rec.step == "accept" and flow.all_conns[0].datagram:
            flow.stop()

    flow.observer, flow.detailed = observe, True
    flow.run()
    flow.stopping = False
    return flow.all_conns[0]


def pump(flow):
    """Serve whatever completions the fake queued (as the loop would on its next turn)."""
    for fd in list(flow.loop.cqs):
        flow.loop._read_cq(fd)


def rping_server(size=64, max_size=65535, **kw):
    backend = FakeBackend(**kw)
    backend.auto_complete_sends = False
    flow = ServerFlow(
        bind=SERVER,
        max_clients=None,
        make_protocol=lambda: rping.RpingServer(size, max_size=max_size),
        timeouts=SLOW,
        backend=backend,
    )
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    return flow, backend, established(flow, backend)


def last_send(backend):
    return backend.sends[-1]


def test_rping_server_reads_then_writes_back_as_rping_does():
    flow, backend, conn = rping_server()
    cm = conn.cm
    backend.deliver(cm, rping.pack_info(0xAB0000, 0x1234, 64))
    pump(flow)
    rd = last_send(backend)
    assert (rd["opcode"], rd["remote_addr"], rd["rkey"], rd["length"]) == (
        C.WR_RDMA_READ,
        0xAB0000,
        0x1234,
        64,
    )
    conn.protocol.rdma_mr.write(rping.pattern(0, 64))  # what the READ brought
    flow.on_wc(conn, wc(rping.READ, C.WC_RDMA_READ))
    assert last_send(backend)["length"] == 16 and conn.protocol.send_mr.read() == bytes(16)  # go-ahead
    backend.deliver(cm, rping.pack_info(0xCD0000, 0x5678, 64))
    pump(flow)
    wr = last_send(backend)
    assert (wr["opcode"], wr["remote_addr"], wr["length"]) == (C.WR_RDMA_WRITE, 0xCD0000, 64)
    flow.on_wc(conn, wc(rping.WRITE, C.WC_RDMA_WRITE))
    assert conn.protocol.pings == 1 and conn.protocol.stages.stage == "read_adv"
    flow.close()


def test_rping_server_names_role_and_stage_on_an_out_of_turn_advert():
    flow, backend, conn = rping_server()
    backend.deliver(conn.cm, rping.pack_info(0xAB0000, 0x1234, 64))
    pump(flow)
    backend.deliver(conn.cm, rping.pack_info(0xAB0000, 0x1234, 64))  # before the READ completed
    pump(flow)
    assert conn.state == State.FAILED
    assert "rping server: advert is not allowed in stage reading" in conn.error.message
    flow.close()


def test_rping_server_grows_its_buffer_to_a_c_clients_advert():
    flow, backend, conn = rping_server(size=64)
    backend.deliver(conn.cm, rping.pack_info(0xAB0000, 0x1234, 65535))
    pump(flow)
    assert ("reg mr", 65535) in backend.log
    assert last_send(backend)["length"] == 65535 and conn.protocol.summary().size_bytes == 65535
    flow.close()


def test_a_peer_that_asks_for_more_each_ping_pins_no_more():
    """An rping client whose every advert is a byte larger: one growth, to --max-size, and the
    old buffer released; what the connection pins stays bounded (issue 19)."""
    flow, backend, conn = rping_server(size=64, max_size=4096)
    p = conn.protocol
    for size in range(100, 2100):
        p._advert(conn, rping.pack_info(0xAB0000, 0x1234, size))
    regs = [entry for entry in backend.log if entry[0] == "reg mr"]
    assert regs == [("reg mr", 16), ("reg mr", 16), ("reg mr", 64), ("reg mr", 4096)]
    assert len(conn.mrs) == 3 and p.rdma_mr.length == 4096 and backend.log.count(("dereg mr",)) == 1
    flow.close()


@pytest.mark.parametrize(
    "info,text",
    [
        (rping.pack_info(0xAB0000, 1, 1 << 20), "advertised 1048576 bytes, the server accepts 1 to 65535"),
        (rping.pack_info(0, 1, 64), "advertised address 0"),
        (rping.pack_info(0xAB0000, 1, 64)[:12], "Received bogus data, size 12"),
    ],
)
def test_untrusted_adverts_end_the_connection_before_any_rdma(info, text):
    flow, backend, conn = rping_server()
    backend.deliver(conn.cm, info)
    pump(flow)
    assert conn.state == State.FAILED and text in conn.error.message
    assert not backend.sends  # nothing was read from or written to the peer
    flow.close()


def rping_client(count=2, **kw):
    backend = FakeBackend()
    backend.auto_complete_sends = False
    flow = ClientFlow(
        dst=SERVER,
        make_protocol=lambda: rping.RpingClient(64, count, validate=True, **kw),
        timeouts=SLOW,
        backend=backend,
    )
    return flow, backend, established(flow, backend)


def serve_one_ping(flow, backend, conn, corrupt=False):
    """Play rping's server for one ping: go-ahead after the READ, write back, go-ahead."""
    p = conn.protocol
    backend.deliver(conn.cm, bytes(16))
    pump(flow)
    data = bytearray(p.start_mr.read())
    if corrupt:
        data[0] ^= 0x20
    p.rdma_mr.write(bytes(data))
    backend.deliver(conn.cm, bytes(16))
    pump(flow)


def test_rping_client_cycle_adverts_validation_and_disconnect():
    flow, backend, conn = rping_client(count=2)
    p = conn.protocol
    assert backend.sends[0]["mr"] is p.send_mr
    assert rping.unpack_info(p.send_mr.read()) == (p.start_mr.addr, p.start_mr.rkey, 64)
    backend.deliver(conn.cm, bytes(16))
    pump(flow)
    assert rping.unpack_info(p.send_mr.read()) == (p.rdma_mr.addr, p.rdma_mr.rkey, 64)  # sink advert
    p.rdma_mr.write(p.start_mr.read())
    backend.deliver(conn.cm, bytes(16))
    pump(flow)
    serve_one_ping(flow, backend, conn)
    assert p.stages.stage == "done" and p.validated == 2
    assert "disconnect" in backend.calls(conn.cm.key)  # rping: the client ends the test
    backend.deliver(conn.cm, bytes(16))  # a go-ahead after the end is out of turn
    pump(flow)
    assert "rping client: go_ahead is not allowed in stage done" in conn.error.message
    flow.close()


def test_rping_client_detects_a_mismatch():
    flow, backend, conn = rping_client(count=3)
    serve_one_ping(flow, backend, conn, corrupt=True)
    assert conn.state == State.FAILED and "data mismatch! (ping 0)" in conn.error.message
    flow.close()


def test_queues_are_a_recycled_window_bounded_by_the_device():
    backend = FakeBackend(limits=DeviceLimits(max_qp_wr=8, max_cqe=100, max_mr_size=1 << 30))
    flow = ClientFlow(dst=SERVER, make_protocol=lambda: CmatoseClient(20, 10), timeouts=SLOW, backend=backend)
    conn = established(flow, backend)
    attr = backend.qp_attrs[0]
    assert attr["max_recv_wr"] == attr["max_send_wr"] == 8
    assert len(conn.cm.recvs) == 8  # not 20
    assert backend.conn_params[0].rnr_retry_count == 7  # the sender waits for our reposting
    for _ in range(20):
        backend.deliver(conn.cm, b"x" * 10)
        pump(flow)
    p = conn.protocol
    assert p.received == 20 and p.recvs_posted == 20
    assert p.sent == p.sends_posted == 20  # echoed through a window of 8
    flow.close()


def test_an_over_limit_queue_names_the_device_limit():
    backend = FakeBackend(limits=DeviceLimits(max_qp_wr=16, max_cqe=8, max_mr_size=1 << 30))
    flow = ClientFlow(
        dst=SERVER, make_protocol=lambda: rping.RpingClient(64, 1), timeouts=SLOW, backend=backend
    )
    flow.run()
    flow.close()
    err = flow.all_conns[0].error
    assert "ibv_create_cq failed: EINVAL" in err.message and "a CQ of 18 entries (max_cqe 8)" in err.message
    assert err.exit_code == ExitCode.ENVIRONMENT


def ud_server(count=3):
    backend = FakeBackend()
    flow = ServerFlow(
        bind=SERVER,
        make_protocol=lambda: UdServer(count, 100),
        timeouts=SLOW,
        backend=backend,
        options=Options(ps=C.PS_UDP),
    )
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, lambda: backend.request(ps=C.PS_UDP)) and []
    return flow, backend, established(flow, backend)


def test_ud_server_replies_to_the_qpn_in_the_immediate_data():
    flow, backend, conn = ud_server()
    for _ in range(3):
        backend.deliver(conn.cm, b"u" * 140, imm=0x00ABCDEF)
        pump(flow)
    assert [s["remote_qpn"] for s in backend.sends] == [0xABCDEF] * 3
    assert {s["wr_id"] for s in backend.sends} == {chain(3)} and conn.state == State.DONE  # one chain of 3
    flow.close()


def test_ud_server_refuses_a_datagram_without_its_senders_qpn():
    flow, backend, conn = ud_server()
    backend.deliver(conn.cm, b"u" * 140, imm=None)
    pump(flow)
    assert conn.state == State.FAILED and "carries no immediate data" in conn.error.message
    flow.close()


def test_a_ud_request_above_the_path_mtu_is_refused_with_its_reason():
    from types import SimpleNamespace

    from rdmacli.engine.protocol import Reject
    from rdmacli.protocols import hello as H

    server = UdServer()
    conn = SimpleNamespace(cm=SimpleNamespace(active_mtu=lambda: 1024))
    ev = SimpleNamespace(private_data=H.Hello(table.UD.hello_kind, 10, 4000).pack())
    with pytest.raises(Reject, match="size 4000 is larger than this path's MTU 1024"):
        server.on_request(conn, ev)
    server.on_request(conn, SimpleNamespace(private_data=H.Hello(table.UD.hello_kind, 10, 1000).pack()))
    assert (server.count, server.size) == (10, 1000)


def cmatose_client(count=5):
    backend = FakeBackend()
    backend.auto_complete_sends = False
    flow = ClientFlow(
        dst=SERVER, make_protocol=lambda: CmatoseClient(count, 10), timeouts=SLOW, backend=backend
    )
    return flow, backend, established(flow, backend)


def test_a_run_of_successful_completions_is_counted_as_one_by_one_and_pushes_the_idle_deadline():
    """Flow.on_wcs: one connection's run from a poll, judged once (make profile: per completion
    the judging cost eight calls), to the same counts and deadline as one completion at a time."""
    flow, backend, conn = cmatose_client()
    assert conn.phase == "data" and conn.deadline is not None
    flow.loop.now = 1000.0  # the turn's clock
    flow.on_wcs(conn, [wc(0, byte_len=10, qp_num=conn.cm.qp_num) for _ in range(5)])
    p = conn.protocol
    assert (p.received, p.bytes_received) == (5, 50)
    assert p.sends_posted == 5 and len(backend.sends) == 5  # all came: echoed, as by on_wc
    assert conn.deadline == 1000.0 + SLOW.idle_s
    flow.close()


def test_a_failed_completion_in_a_run_is_judged_after_the_ones_before_it_and_none_after():
    flow, backend, conn = cmatose_client()
    q = conn.cm.qp_num
    run = [wc(0, qp_num=q), wc(0, qp_num=q), wc(0, status=10, qp_num=q), wc(0, qp_num=q)]
    flow.on_wcs(conn, run)
    assert conn.protocol.received == 2  # the two before the failure, not the one after
    assert conn.state == State.FAILED and "work completion failed" in conn.error.message
    flow.on_wcs(conn, [wc(0, qp_num=q)])  # a finished connection counts nothing more
    assert conn.protocol.received == 2
    flow.close()


def test_a_batch_goes_to_its_connections_in_runs_in_order_and_a_torn_down_ones_run_is_dropped():
    from types import SimpleNamespace

    from rdmacli.engine.cqpool import CqPool

    backend = FakeBackend()
    flow = ClientFlow(dst=SERVER, make_protocol=lambda: CmatoseClient(1, 10), timeouts=SLOW, backend=backend)
    pool = CqPool(flow)
    a, b = (SimpleNamespace(cm=backend.create_id(None, C.PS_TCP), limits=lambda: None) for _ in range(2))
    for conn, qpn in ((a, 1), (b, 2)):
        pool.acquire(conn, 8)
        pool.bind(conn, qpn)
    runs = []

    def on_wcs(conn, wcs):
        runs.append((conn, [w.wr_id for w in wcs]))
        if len(runs) == 2:
            pool.release(a)  # a handler tore `a` down: its later run never arrives

    flow.on_wcs = on_wcs
    pool.dispatch([wc(1, qp_num=1), wc(2, qp_num=1), wc(3, qp_num=2), wc(4, qp_num=1), wc(5, qp_num=2)])
    assert runs == [(a, [1, 2]), (b, [3]), (b, [5])]
    flow.close()
