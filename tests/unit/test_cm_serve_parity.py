"""One table, two runners, the passive side: ServerFlow on fakerdma's FakeBackend and the native
server (native/cmserve.c, with cmrun.c's loop, in cm_run_twin.c) face the same clients and must
come to the same records: each connection's state, cause, words and step, the exit code, the
warnings, the steps timed, and what the clients were told (a reject's reason). Python decides
every request on both (ServerFlow.admitted); C runs the accepted by lifecycle.PASSIVE's rows."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import pytest
from fakerdma import FakeBackend, wc
from test_cm_parity import NONE, TWINNED, record
from test_engine import FAST, SERVER, run

from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import MAX_WINDOW
from rdmacli.engine.nativeserver import NativeServerFlow
from rdmacli.engine.server import ServerFlow
from rdmacli.protocols import hello as H
from rdmacli.protocols import table
from rdmacli.protocols.cmatose import CmatoseServer
from rdmacli.rdma import constants as C


@dataclass
class Clients:
    """What the clients do (cm_run_twin.h's crt_script for the passive side)."""

    requests: int = 1
    max_clients: int = 1
    hello: bytes = b""  # each request's private data (none: a C client)
    accept_event: int = C.ESTABLISHED  # the answer to our accept
    accept_status: int = 0
    late_event: int = NONE  # one more event once established
    echo: bool = True  # each of our messages is echoed (ucmatose's client)
    disconnect_after: int = 0  # the client disconnects once it has this many of our sends
    send_status: int = 0  # our sends complete with this status
    max_size: int = H.MAX_SIZE


def hello(count: int, size: int, group: int = 1) -> bytes:
    return H.Hello(table.CONNECT.hello_kind, count, size, group=group).pack()


CASES = {
    "a C client (no hello)": Clients(),
    "4 C clients": Clients(requests=4, max_clients=4),
    "an rdmacli client's hello (count, size)": Clients(hello=hello(5, 32)),
    "a test of 3 connections (its hello's group)": Clients(requests=3, hello=hello(2, 16, group=3)),
    "full: the extra client rejected": Clients(requests=2),
    "40 clients for one: the slots grow (16, 32, 64)": Clients(requests=40),
    "20 clients of -c 20, each served": Clients(requests=20, max_clients=20),
    "a hello beyond --max-size": Clients(hello=hello(3, 100), max_size=10),
    "the client disconnects early": Clients(disconnect_after=1, echo=False),
    "accept's deadline (no ESTABLISHED)": Clients(accept_event=NONE),
    "a connect error after our accept": Clients(accept_event=C.CONNECT_ERROR, accept_status=-errno.ETIMEDOUT),
    "the data phase's deadline (no echo)": Clients(echo=False),
    "the device removed": Clients(late_event=C.DEVICE_REMOVAL, echo=False),
    "an event out of sequence": Clients(late_event=C.ROUTE_RESOLVED, echo=False),
    "a send fails (no ACKs)": Clients(send_status=12, echo=False),  # IBV_WC_RETRY_EXC_ERR
}


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    import twins

    return twins.build("cm_run_twin", str(tmp_path_factory.mktemp("cm_serve_twin")), TWINNED)


def protocol(clients: Clients):
    return lambda: CmatoseServer(3, 64, max_size=clients.max_size)


def python_side(clients: Clients, flow_class=ServerFlow):
    """The clients, played for the Python engine."""
    backend = FakeBackend()
    flow = flow_class(bind=SERVER, make_protocol=protocol(clients), timeouts=FAST, backend=backend,
                      max_clients=clients.max_clients)  # fmt: skip

    def arrive():
        for _ in range(clients.requests):
            backend.request(clients.hello)

    backend.script["listen"] = lambda cm: flow.loop.call_later(0, arrive) and []

    def accept(cm, param):
        if clients.accept_event == NONE:
            return []
        events = [backend.event(cm, clients.accept_event, clients.accept_status)]
        if clients.accept_event == C.ESTABLISHED and clients.late_event != NONE:
            events.append(backend.event(cm, clients.late_event))
        return events

    backend.script["accept"] = accept
    sent = []

    def on_send(cm, wr):
        sent.append(wr)
        if clients.disconnect_after and len(sent) == clients.disconnect_after:
            backend.peer_disconnects(cm)
        if clients.send_status and len(sent) == 3:  # the chain's one completion, failed
            failed = wc(wr["wr_id"], C.WC_SEND, status=clients.send_status, qp_num=cm.qp_num)
            backend.cqs[cm.key].complete(failed)
        if clients.echo:
            backend.deliver(cm, b"e" * wr["length"])

    backend.on_send = on_send
    backend.auto_complete_sends = not clients.send_status
    return flow, backend


def native_side(clients: Clients, twin, rows=None):
    """The same clients, played by cm_run_twin.c for native/cmserve.c."""
    lib = twin.lib
    lib.crt_reset()
    s = lib.crt
    s.request_data, s.request_data_len = clients.hello, len(clients.hello)
    s.connect_event, s.connect_status = clients.accept_event, clients.accept_status
    s.late_event, s.echo = clients.late_event, int(clients.echo)
    s.disconnect_after, s.send_status = clients.disconnect_after, clients.send_status
    lib.crt_requests(clients.requests)

    class Flow(NativeServerFlow):
        pass

    if rows is not None:
        Flow.rows = rows
    return Flow(bind=SERVER, make_protocol=protocol(clients), timeouts=FAST, backend=FakeBackend(),
                max_clients=clients.max_clients, native_lib=(twin.ffi, lib))  # fmt: skip


def told(backend) -> list[bytes]:
    return [r.rstrip(b"\0") for r in backend.rejections]


@pytest.mark.parametrize("case", list(CASES))
def test_both_servers_come_to_the_same_records(case, twin):
    clients = CASES[case]
    py_flow, backend = python_side(clients)
    theirs = record(run(py_flow))
    flow = native_side(clients, twin)
    ours = record(run(flow))
    assert flow.data_path == "native"
    assert ours == theirs
    crs = twin.lib.crs
    assert crs.rejects == len(backend.rejections)
    if backend.rejections:
        assert twin.ffi.string(crs.reason) == told(backend)[-1]
    for name in ("ids", "qps", "mrs", "cqs", "comps"):  # nothing left behind, on every path
        assert getattr(crs, name) == 0, name


def test_a_row_changed_in_the_table_changes_the_c_server_too(twin):
    """The rows are lifecycle's: without ESTABLISHED in ACCEPT, C fails the connection there as the
    Python engine does (an event out of sequence), and the records stay the same."""
    rows = {k: v for k, v in L.PASSIVE.items() if k != (L.ACCEPT, C.ESTABLISHED)}

    class Changed(ServerFlow):
        pass

    Changed.rows = rows
    Changed.table = L.bind(rows, Changed)
    clients = Clients()
    theirs = record(run(python_side(clients, Changed)[0]))
    ours = record(run(native_side(clients, twin, rows=rows)))
    assert "ESTABLISHED is not expected in phase accept" in ours["conns"][0][2]
    assert ours == theirs


def test_a_window_beyond_the_count_is_accepted_with_parameters_as_python_does(twin):
    """Within the window rdma_accept gets NULL (as ucmatose); a hello asking more messages than the
    window gets CmatoseServer.accept_param's (RNR retries): the same on both."""
    for count, with_param in ((3, 0), (5000, 1)):
        flow = native_side(Clients(hello=hello(count, 8), echo=False), twin)
        run(flow)
        assert twin.lib.crs.accepted_with_param == with_param
        proto = CmatoseServer(count, 8)
        proto.window = min(count, MAX_WINDOW)
        assert (proto.accept_param() is not None) == bool(with_param)
