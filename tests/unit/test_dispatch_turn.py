"""One dispatch turn that tears down what a later handler of the same turn would touch (issue 24).

select() hands the loop a batch of ready fds; a CM handler early in the batch can release the
last connection on a shared CQ (destroying the CQ and its channel), or finish a connection whose
timer is due at the end of the turn. Each case runs in both orders of the batch (the CM channel
first, the completion channel first), on the passive and the active side. On the scripted backend,
whose wrappers raise UseAfterDestroy like the real ones.
"""

from __future__ import annotations

import signal

import pytest
from fakerdma import FakeBackend, wc

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.results import from_flow
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.settings import Timeouts
from rdmacli.engine.stops import Stops
from rdmacli.outcome import State
from rdmacli.protocols import rping
from rdmacli.protocols.cmatose import CmatoseServer
from rdmacli.protocols.window import chain
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.handle import Handle, UseAfterDestroy

SERVER = SockAddr(2, "10.0.0.1", 7471)
TIMEOUTS = Timeouts(resolve_ms=100, connect_s=2, idle_s=2)
ORDERS = ["cm first", "cq first"]


def batch_order(flow, order: str) -> list:
    """Make every select() of the flow's loop return the CM channel first, or last. The peer's
    actions queued in the returned list happen while the loop sleeps, as on a network: what
    they deliver arrives together in the next turn's batch, not inside the handler that
    provoked it."""
    sel, cm_fd = flow.loop.sel, flow.channel.fd
    real = sel.select
    peer: list = []

    def select(timeout=None):
        while peer:
            peer.pop(0)()
        ready = real(timeout)
        return sorted(ready, key=lambda kv: (kv[0].fd == cm_fd) == (order == "cq first"))

    sel.select = select
    return peer


def outcome(flow, signum=None):
    try:
        flow.run()
    finally:
        flow.close()
    return from_flow("test", flow, {}, signal=signum)


def a_server(backend, make_protocol=lambda: CmatoseServer(3, 64), **kw):
    flow = ServerFlow(bind=SERVER, make_protocol=make_protocol, timeouts=TIMEOUTS, backend=backend, **kw)
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    return flow


def echo_then_hang_up(backend, peer: list, count=3):
    """A C client: echoes each message; with its last echo it disconnects, both in one turn."""
    seen = {}

    def on_send(cm, wr):
        seen[cm.key] = seen.get(cm.key, 0) + 1
        last = seen[cm.key] == count
        peer.append(lambda: backend.deliver(cm, b"e" * wr["length"]))
        if last:
            peer.append(lambda: backend.peer_disconnects(cm))

    backend.on_send = on_send


@pytest.mark.parametrize("order", ORDERS)
def test_passive_the_last_connection_on_a_shared_cq_goes_while_its_channel_is_in_the_batch(order):
    backend = FakeBackend()
    flow = a_server(backend)
    echo_then_hang_up(backend, batch_order(flow, order))
    out = outcome(flow)
    assert [c.state for c in out.connections] == [State.DONE], out.to_dict()
    assert out.exit_code == 0 and out.connections[0].stats.messages_received == 3
    assert not backend.all_cqs[0].alive and backend.calls().count("destroy cq") == 1
    assert not out.connections[0].teardown_errors


class DelayedReply(CmatoseServer):
    """A server protocol that answers its last message a moment later (a timer of its own)."""

    def on_wc(self, conn, wc_):
        super().on_wc(conn, wc_)
        if self.received == self.count:
            conn.later(0, lambda c: c.post_send(chain(1), self.mr, 0, self.size))


@pytest.mark.parametrize("order", ORDERS)
def test_passive_a_timer_due_in_the_turn_that_tore_its_connection_down_never_runs(order):
    backend = FakeBackend()
    flow = a_server(backend, make_protocol=lambda: DelayedReply(3, 64))
    echo_then_hang_up(backend, batch_order(flow, order))
    out = outcome(flow)
    assert [c.state for c in out.connections] == [State.DONE], out.to_dict()
    assert len(backend.sends) == 3  # the delayed reply of a torn-down connection was never posted
    assert not out.connections[0].teardown_errors


def rping_server_peer(backend, peer: list, hang_up_after: int):
    """rping's server: a go-ahead for each advert; with the go-ahead that ends ping
    `hang_up_after` it disconnects, in the same turn."""
    adverts = {}

    def on_send(cm, wr):
        adverts[cm.key] = adverts.get(cm.key, 0) + 1
        peer.append(lambda: backend.deliver(cm, bytes(16)))
        if adverts[cm.key] == 2 * hang_up_after:
            peer.append(lambda: backend.peer_disconnects(cm))
            backend.sends_at_hang_up = len(backend.sends)

    backend.on_send = on_send


@pytest.mark.parametrize("order", ORDERS)
def test_active_a_disconnect_a_completion_and_a_due_timer_in_one_turn(order):
    backend = FakeBackend()
    flow = ClientFlow(
        dst=SERVER,
        make_protocol=lambda: rping.RpingClient(64, None, interval=1e-9),
        timeouts=TIMEOUTS,
        backend=backend,
    )
    rping_server_peer(backend, batch_order(flow, order), hang_up_after=2)
    out = outcome(flow)
    assert [c.state for c in out.connections] == [State.DONE], out.to_dict()
    assert out.connections[0].stats.pings_completed == 2
    assert len(backend.sends) == backend.sends_at_hang_up  # the interval's timer posted nothing


@pytest.mark.parametrize("order", ORDERS)
def test_active_a_retry_releases_the_last_connection_on_a_cq_whose_channel_is_in_the_batch(order):
    backend = FakeBackend()
    flow = ClientFlow(
        dst=SERVER,
        make_protocol=lambda: CmatoseServer(0, 0),  # nothing to exchange: only the set-up counts
        timeouts=Timeouts(resolve_ms=100, connect_s=2, idle_s=2, wait_s=5),
        backend=backend,
    )
    tries = []

    peer = batch_order(flow, order)

    def connect(cm, param):  # nobody listens the first time; a flushed receive comes with it
        tries.append(cm)
        if len(tries) == 1:
            flushed = wc(1, status=C.WC_WR_FLUSH_ERR, qp_num=cm.qp_num)
            peer.append(lambda: backend.cqs[cm.key].complete(flushed))
            peer.append(lambda: backend.push(cm, C.REJECTED, 8))
            return []
        return [backend.event(cm, C.ESTABLISHED)]

    backend.script["connect"] = connect
    flow.make_protocol = lambda: _EndAtOnce()
    out = outcome(flow)
    assert len(tries) == 2 and tries[0].destroyed
    assert [c.state for c in out.connections] == [State.DONE], out.to_dict()
    assert not backend.all_cqs[0].alive  # the first try's CQ went with it


class _EndAtOnce(CmatoseServer):
    def __init__(self):
        super().__init__(0, 0)

    def on_established(self, conn):
        conn.finish()


# -- a stop while disconnects are queued ------------------------------------------------------


def test_a_stop_signal_inside_a_handler_lets_the_queued_disconnects_count():
    """issue 22: a persistent server stopped right after its clients hung up counts them done."""
    backend = FakeBackend()
    flow = a_server(backend, max_clients=None)
    stops = Stops()
    seen = []

    peer = batch_order(flow, "cq first")

    def on_send(cm, wr):  # with its last echo the client hangs up, and the signal comes at once
        seen.append(wr)
        peer.append(lambda: backend.deliver(cm, b"e" * wr["length"]))
        if len(seen) == 3:
            peer.append(lambda: backend.peer_disconnects(cm))
            stops.handler(signal.SIGTERM, None)  # must not raise inside the engine's handler

    backend.on_send = on_send
    with stops.running(flow):
        out = outcome(flow, signal.SIGTERM)
    assert stops.signum == signal.SIGTERM
    assert [c.state for c in out.connections] == [State.DONE], out.to_dict()
    assert out.exit_code == 143 and out.to_dict()["totals"]["connections_interrupted"] == 0


def test_outside_a_flow_a_stop_signal_raises_stopped_once():
    from rdmacli.errors import Stopped

    stops = Stops()
    with pytest.raises(Stopped):
        stops.handler(signal.SIGINT, None)
    stops.handler(signal.SIGTERM, None)  # a second one is ignored
    assert stops.signum == signal.SIGINT


# -- teardown never turns a result into an internal error ---------------------------------------


def test_a_bug_in_teardown_is_recorded_and_the_result_stands():
    backend = FakeBackend()
    flow = a_server(backend)
    echo_then_hang_up(backend, batch_order(flow, "cm first"))
    real_mr = backend.mr

    def mr(cm, size, access):
        m = real_mr(cm, size, access)
        m._free = lambda: (_ for _ in ()).throw(KeyError("boom"))  # its deregistration
        return m

    real_create_id = backend.create_id

    def create_id(channel, ps):  # a server's only one: its listener
        cm = real_create_id(channel, ps)
        cm._free = lambda: (_ for _ in ()).throw(RuntimeError("listener teardown bug"))
        return cm

    backend.mr, backend.create_id = mr, create_id
    out = outcome(flow)
    assert out.exit_code == 0 and out.result == "pass"
    assert any("internal error: KeyError" in e for e in out.connections[0].teardown_errors)
    assert any("RuntimeError: listener teardown bug" in w for w in out.warnings)


# -- a destroyed wrapper names itself -----------------------------------------------------------


def test_a_destroyed_handle_names_the_object_and_the_call():
    class Thing(Handle):
        kind = "completion channel"

        @property
        def fd(self):
            return self.ptr.fd

    t = Thing()
    t.ptr = None
    with pytest.raises(UseAfterDestroy, match=r"Thing\.fd: the completion channel was already destroyed"):
        _ = t.fd
    assert not t.alive


def test_a_cm_id_without_its_qp_refuses_to_post():
    backend = FakeBackend()
    cm = backend.create_id(None, C.PS_TCP)
    with pytest.raises(UseAfterDestroy, match="QP of this cm_id"):
        _ = cm.qp
    cm.destroy()
    with pytest.raises(UseAfterDestroy, match="cm_id was already destroyed"):
        cm.resolve_route(100)


# -- fairness: a CQ that never empties -----------------------------------------------------------


@pytest.mark.parametrize("order", ORDERS)
def test_a_cq_that_never_empties_does_not_starve_the_cm_channel(order):

    from fakerdma import FakeComp, FakeCQ

    from rdmacli.engine.loop import Loop

    backend = FakeBackend()
    channel = backend.event_channel()
    loop = Loop(channel)
    comp = FakeComp(backend)
    cq = FakeCQ(backend, comp, 64)
    handled = []

    def on_wc(wcs):  # every completion brings another (a peer that answers at once, forever)
        for wc_ in wcs:
            handled.append(wc_)
            cq.complete(wc(1))

    loop.watch_cq(comp, cq, on_wc)
    cm = backend.create_id(channel, C.PS_TCP)
    got = []
    loop.on_cm(cm.key, got.append)
    cq.complete(wc(1))
    backend.push(cm, C.DISCONNECTED)
    real = loop.sel.select
    loop.sel.select = lambda timeout=None: sorted(
        real(timeout), key=lambda kv: (kv[0].fd == channel.fd) == (order == "cq first")
    )
    loop.run_until(lambda: bool(got), lambda now: (now + 5, "the CM event"))
    assert [e.type for e in got] == [C.DISCONNECTED]
    assert len(handled) <= 2 * Loop.FAIR_BATCHES * 16  # a turn's share, then the CM channel's
    loop.close()
    comp.destroy()
    channel.close()


@pytest.mark.parametrize("order", ORDERS)
def test_a_flushed_completion_before_the_disconnect_does_not_hide_that_the_peer_left(order):
    backend = FakeBackend()
    flow = a_server(backend)
    peer = batch_order(flow, order)

    def on_send(cm, wr):  # the client echoes one message, then goes; our receives are flushed
        if len(backend.sends) == 1:
            flushed = wc(1, status=C.WC_WR_FLUSH_ERR, qp_num=cm.qp_num)
            peer.append(lambda: backend.deliver(cm, b"e" * wr["length"]))
            peer.append(lambda: backend.cqs[cm.key].complete(flushed))
            peer.append(lambda: backend.peer_disconnects(cm))

    backend.on_send = on_send
    out = outcome(flow)
    [conn] = out.connections
    assert conn.state == State.FAILED and conn.error.cause.value == "peer_ended_early", conn.error
