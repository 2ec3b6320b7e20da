"""The rdma_cm lifecycle tables (engine.lifecycle): every row's phase is described, an event a
table does not have fails its connection naming side, phase and event, and events that say
nothing about the exchange are ignored in any phase."""

from __future__ import annotations

from fakerdma import FakeBackend

from rdmacli.engine import lifecycle as L
from rdmacli.engine.client import ClientFlow
from rdmacli.engine.mcast import McastFlow
from rdmacli.engine.results import from_flow
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.settings import Timeouts
from rdmacli.outcome import State
from rdmacli.protocols.bare import BareClient
from rdmacli.protocols.cmatose import CmatoseServer
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr

SERVER = SockAddr(2, "10.0.0.1", 7471)
FAST = Timeouts(resolve_ms=100, connect_s=0.5, idle_s=0.5)


def outcome(flow):
    try:
        flow.run()
    finally:
        flow.close()
    return from_flow("test", flow, {})


TABLES = ((L.ACTIVE, ClientFlow), (L.PASSIVE, ServerFlow), (L.MULTICAST, McastFlow))


def test_every_phase_of_every_table_is_described_and_every_row_carries_its_handler():
    for table, flow_class in TABLES:
        assert flow_class.rows is table and flow_class.table.keys() == table.keys()
        for (phase, event), row in table.items():
            assert phase in L.PHASES and event in range(16)
            assert row.next is None or row.next in L.PHASES
            bound = flow_class.table[(phase, event)]
            assert bound.next == row.next and bound.handler is getattr(flow_class, "on_" + row.action)


def test_a_flow_without_a_rows_handler_fails_as_it_is_made_not_at_the_event():
    import pytest

    from rdmacli.engine.flow import Flow

    with pytest.raises(TypeError, match="Broken has no on_addr_resolved"):

        class Broken(Flow):  # noqa: F841 - made only to fail
            rows = L.MULTICAST


def walk(table, phase, events):
    """The phases a sequence of CM events leads through, by the table alone."""
    seen = [phase]
    for event in events:
        phase = table[(phase, event)].next
        seen.append(phase)
    return seen


def test_the_tables_alone_follow_rdma_cm7s_sequences():
    """rdma_cm(7)'s client and server sequences, and a multicast join, read off the tables with
    no flow: each event's row names the next phase; the peer's DISCONNECTED settles (or ends),
    the answer to our own ends the connection."""
    client = (C.ADDR_RESOLVED, C.ROUTE_RESOLVED, C.ESTABLISHED, C.DISCONNECTED)
    assert walk(L.ACTIVE, L.RESOLVE_ADDR, client) == [
        L.RESOLVE_ADDR,
        L.RESOLVE_ROUTE,
        L.CONNECT,
        L.DATA,
        L.SETTLE,
    ]
    assert walk(L.ACTIVE, L.DISCONNECT, [C.DISCONNECTED]) == [L.DISCONNECT, None]
    assert walk(L.PASSIVE, L.ACCEPT, (C.ESTABLISHED, C.DISCONNECTED)) == [L.ACCEPT, L.DATA, L.SETTLE]
    assert walk(L.PASSIVE, L.DISCONNECT, [C.DISCONNECTED]) == [L.DISCONNECT, None]
    assert walk(L.MULTICAST, L.RESOLVE_ADDR, (C.ADDR_RESOLVED, C.MULTICAST_JOIN)) == [
        L.RESOLVE_ADDR,
        L.JOIN,
        L.DATA,
    ]
    # every phase is reached: by a row, or by the flow itself (its first, a step, our disconnect)
    reached = {row.next for t, _ in TABLES for row in t.values()} | set(L.ENTERED_BY_THE_FLOW) | {L.START}
    assert reached - {None} == set(L.Phase)


def test_a_phase_is_its_step_name_wherever_it_goes():
    """People and JSON see a phase as its words: printed, formatted, compared, hashed, dumped."""
    import json

    assert f"{L.CONNECT}: x" == "cm connect: x" and str(L.RESOLVE_ADDR) == "resolve addr"
    assert L.DATA == "data" and {"data": 1}[L.DATA] == 1 and {L.SETTLE: 2}["settle"] == 2
    assert json.dumps({"step": L.WAIT_FOR_PEER}) == '{"step": "wait for sender"}'


def test_a_flow_enters_the_phase_its_row_names():
    """Driven on the scripted backend: after each CM event the connection is in its row's
    next phase (entered before the call that phase waits for, so its step is timed whole)."""
    backend = FakeBackend()
    flow = ClientFlow(dst=SERVER, make_protocol=BareClient, timeouts=FAST, backend=backend)
    entered = []
    real = flow.enter
    flow.enter = lambda conn, phase: (entered.append(phase), real(conn, phase))[1]
    out = outcome(flow)
    assert out.exit_code == 0
    assert entered[:4] == [L.RESOLVE_ADDR, L.RESOLVE_ROUTE, L.CONNECT, L.DATA], entered
    assert all(isinstance(p, L.Phase) for p in entered)


def test_an_event_out_of_sequence_fails_its_connection_in_words():
    backend = FakeBackend()
    # the CM answers our resolve with ESTABLISHED: not a step of rdma_cm(7)'s client sequence
    backend.script["resolve addr"] = lambda cm, dst: [backend.event(cm, C.ESTABLISHED)]
    out = outcome(ClientFlow(dst=SERVER, make_protocol=BareClient, timeouts=FAST, backend=backend))
    [conn] = out.connections
    assert conn.state == State.FAILED
    err = conn.error
    assert err.cause.value == "unexpected_cm_event" and err.exit_code == 1
    assert err.details == {"side": "client", "step": "resolve addr", "event": "ESTABLISHED"}
    assert "ESTABLISHED is not expected in phase resolve addr" in err.message


def test_informational_events_change_nothing():
    backend = FakeBackend()

    def resolved(cm, dst):
        return [
            backend.event(cm, C.ADDR_CHANGE),
            backend.event(cm, C.TIMEWAIT_EXIT),
            backend.event(cm, C.ADDR_RESOLVED),
        ]

    backend.script["resolve addr"] = resolved
    out = outcome(ClientFlow(dst=SERVER, make_protocol=BareClient, timeouts=FAST, backend=backend))
    assert [c.state for c in out.connections] == [State.DONE] and out.exit_code == 0


def test_steps_are_timed_by_the_phases_they_belong_to():
    backend = FakeBackend()
    out = outcome(ClientFlow(dst=SERVER, make_protocol=BareClient, timeouts=FAST, backend=backend))
    steps = [s.step for s in out.steps_us]
    for phase in (L.RESOLVE_ADDR, L.RESOLVE_ROUTE, L.CONNECT, L.DISCONNECT):
        assert L.PHASES[phase].step in steps
    assert "create qp" in steps and "create id" in steps


def test_a_server_connection_that_goes_before_its_rtu_is_a_peer_that_ended_early():
    backend = FakeBackend()
    flow = ServerFlow(bind=SERVER, make_protocol=lambda: CmatoseServer(3, 64), timeouts=FAST, backend=backend)
    backend.script["listen"] = lambda cm: [backend.request()][:0]
    backend.script["accept"] = lambda cm, p: [backend.event(cm, C.DISCONNECTED)]
    out = outcome(flow)
    [conn] = out.connections
    assert conn.state == State.FAILED and conn.error.cause.value == "peer_ended_early"
