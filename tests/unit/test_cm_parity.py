"""One table, two runners: the Python engine (ClientFlow on fakerdma's FakeBackend) and the native
client (native/cmrun.c, built as it ships with its verbs, CM, wait and clock replaced by
cm_run_twin.c) face the same scripted peer, and must come to the same records: each connection's
state, cause, words and step, the exit code, the warnings and the steps timed. The C runner
takes its transitions from lifecycle.ACTIVE (nativeflow hands them over): a row changed there
changes both, which the last test shows by changing one."""

from __future__ import annotations

import errno
import signal
import threading
import time
from dataclasses import dataclass, fields

import pytest
import twins
from fakerdma import FakeBackend, wc
from test_engine import CLIENT, FAST, SERVER, run

from rdmacli.engine import lifecycle as L
from rdmacli.engine.client import ClientFlow
from rdmacli.engine.nativeflow import NativeClientFlow
from rdmacli.errors import Stopped
from rdmacli.protocols.bare import BareClient
from rdmacli.protocols.cmatose import CmatoseClient
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import RdmaCallError

NONE = -1  # no answer at all


@dataclass
class Peer:
    """What the peer and the fabric answer (cm_run_twin.h's crt_script, field by field)."""

    addr_event: int = C.ADDR_RESOLVED
    addr_status: int = 0
    route_event: int = C.ROUTE_RESOLVED
    route_status: int = 0
    connect_event: int = C.ESTABLISHED
    connect_status: int = 0
    connect_data: bytes = b""
    peer_sends: int = 3
    size: int = 64  # their messages' bytes
    recv_status: int = 0  # their messages' receives complete with this status
    ours: int = 0  # our protocol's message size (0: theirs)
    late_event: int = NONE
    disconnect_after: int = 3
    answer_disconnect: int = 1
    connect_fails_errno: int = 0
    send_status: int = 0
    bare: bool = False
    connections: int = 1


CASES = {
    "accept": Peer(),
    "accept, 4 connections": Peer(connections=4, disconnect_after=12),
    "events' bare flow": Peer(bare=True, peer_sends=0, disconnect_after=0),
    "our disconnect unanswered": Peer(bare=True, peer_sends=0, disconnect_after=0, answer_disconnect=0),
    "nothing listening (IB CM reason 8)": Peer(connect_event=C.REJECTED, connect_status=8),
    "rejected by the application": Peer(connect_event=C.REJECTED, connect_status=28, connect_data=b"too big"),
    "refused (ECONNREFUSED)": Peer(connect_event=C.REJECTED, connect_status=-errno.ECONNREFUSED),
    "rejected, another reason": Peer(connect_event=C.REJECTED, connect_status=5),
    "unreachable": Peer(connect_event=C.UNREACHABLE, connect_status=-errno.ETIMEDOUT),
    "connect error": Peer(connect_event=C.CONNECT_ERROR, connect_status=-errno.ECONNRESET),
    "address error": Peer(addr_event=C.ADDR_ERROR, addr_status=-errno.ETIMEDOUT),
    "route error": Peer(route_event=C.ROUTE_ERROR, route_status=-errno.ENETUNREACH),
    "resolve addr's deadline": Peer(addr_event=NONE),
    "connect's deadline": Peer(connect_event=NONE),
    "the data phase's deadline": Peer(peer_sends=1, disconnect_after=0),
    "the peer disconnects early": Peer(peer_sends=1, late_event=C.DISCONNECTED, disconnect_after=0),
    "the device removed": Peer(late_event=C.DEVICE_REMOVAL, disconnect_after=0),
    "an event out of sequence": Peer(late_event=C.ROUTE_RESOLVED, disconnect_after=0),
    "a send fails (no ACKs)": Peer(send_status=12, disconnect_after=0),  # IBV_WC_RETRY_EXC_ERR
    "the peer's messages are smaller than ours": Peer(size=32, ours=64),
    "the peer's messages are bigger than ours": Peer(
        size=128, ours=64, recv_status=1, disconnect_after=0
    ),  # LOC_LEN
    "refused by rdma_connect itself (iWARP)": Peer(connect_fails_errno=errno.ECONNREFUSED),
    "rdma_connect fails otherwise": Peer(connect_fails_errno=errno.EINVAL),
}


TWINNED = ("cmrun.c", "cmflow.c", "cmconn.c", "cmserve.c")  # the sources cm_run_twin.c includes


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    return twins.build("cm_run_twin", str(tmp_path_factory.mktemp("cm_run_twin")), TWINNED)


def protocol(peer: Peer):
    return BareClient if peer.bare else (lambda: CmatoseClient(3, peer.ours or peer.size))


def python_side(peer: Peer):
    """The peer, played for the Python engine."""
    backend = FakeBackend()
    flow = ClientFlow(dst=SERVER, src=CLIENT, make_protocol=protocol(peer), timeouts=FAST, backend=backend,
                      connections=peer.connections)  # fmt: skip

    def answer(event: int, status: int):
        return lambda cm, *a: [] if event == NONE else [backend.event(cm, event, status)]

    backend.script["resolve addr"] = answer(peer.addr_event, peer.addr_status)
    backend.script["resolve route"] = answer(peer.route_event, peer.route_status)

    def connect(cm, param):
        if peer.connect_fails_errno:
            raise RdmaCallError("rdma_connect", peer.connect_fails_errno)
        if peer.connect_event == NONE:
            return []
        ev = backend.event(cm, peer.connect_event, peer.connect_status, private_data=peer.connect_data)
        if peer.connect_event == C.ESTABLISHED:
            for _ in range(peer.peer_sends):
                if peer.recv_status:  # a message bigger than the receive posted for it
                    wr_id = cm.recvs.pop(0)[0]
                    backend.cqs[cm.key].complete(
                        wc(wr_id, C.WC_RECV, status=peer.recv_status, qp_num=cm.qp_num)
                    )
                else:
                    backend.deliver(cm, b"m" * peer.size)
            if peer.late_event != NONE:
                return [ev, backend.event(cm, peer.late_event)]
        return [ev]

    backend.script["connect"] = connect
    sent = []

    def on_send(cm, wr):
        sent.append(wr)
        if peer.disconnect_after and len(sent) == peer.disconnect_after:
            backend.peer_disconnects(cm)
        if peer.send_status and len(sent) == 3:  # the chain's one completion, failed
            backend.cqs[cm.key].complete(
                wc(wr["wr_id"], C.WC_SEND, status=peer.send_status, qp_num=cm.qp_num)
            )

    backend.on_send = on_send
    backend.auto_complete_sends = not peer.send_status
    if not peer.answer_disconnect:
        backend.script["disconnect"] = lambda cm: []
    return flow, backend


def native_side(peer: Peer, twin, rows=None):
    """The same peer, played by cm_run_twin.c for native/cmrun.c."""
    lib, ffi = twin.lib, twin.ffi
    lib.crt_reset()
    s = lib.crt
    for f in fields(Peer):
        if f.name not in ("connect_data", "bare", "connections", "ours"):
            setattr(s, f.name, getattr(peer, f.name))
    s.connect_data, s.connect_data_len = peer.connect_data, len(peer.connect_data)

    class Flow(NativeClientFlow):
        pass

    if rows is not None:
        Flow.rows = rows
    flow = Flow(dst=SERVER, src=CLIENT, make_protocol=protocol(peer), timeouts=FAST, backend=FakeBackend(),
                connections=peer.connections, native_lib=(ffi, lib))  # fmt: skip
    return flow


def record(outcome) -> dict:
    conns = [
        (
            c.state.value,
            c.error.cause.value if c.error else None,
            c.error.message if c.error else None,
            c.error.details.get("step") if c.error else None,
            c.stats,
        )  # fmt: skip
        for c in outcome.connections
    ]
    steps = {s.step: s.count for s in outcome.steps_us if s.step != "dispatch (rdmacli)"}
    return {"conns": conns, "exit": outcome.exit_code, "warnings": outcome.warnings, "steps": steps,
            "error": outcome.error.message if outcome.error else None}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_both_runners_come_to_the_same_records(case, twin):
    peer = CASES[case]
    py_flow, _ = python_side(peer)
    theirs = record(run(py_flow))
    flow = native_side(peer, twin)
    ours = record(run(flow))
    assert flow.data_path == "native"
    assert ours == theirs
    for name in ("ids", "qps", "mrs", "cqs", "comps"):  # nothing left behind, on every path
        assert getattr(twin.lib.crs, name) == 0, name


def test_a_row_changed_in_the_table_changes_the_c_runner_too(twin):
    """The rows are lifecycle's: without ESTABLISHED in CONNECT, C fails the connection there as the
    Python engine does (an event out of sequence), and the records stay the same."""
    rows = {k: v for k, v in L.ACTIVE.items() if k != (L.CONNECT, C.ESTABLISHED)}

    class Changed(ClientFlow):
        pass

    Changed.rows = rows
    Changed.table = L.bind(rows, Changed)
    peer = Peer()
    py_flow, backend = python_side(peer)
    changed = Changed(dst=SERVER, src=CLIENT, make_protocol=protocol(peer), timeouts=FAST, backend=backend)
    theirs = record(run(changed))
    ours = record(run(native_side(peer, twin, rows=rows)))
    assert "ESTABLISHED is not expected in phase cm connect" in ours["conns"][0][2]
    assert ours == theirs


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_mid_run_interrupts_and_tears_down_on_both(signum, twin):
    """A signal while the connections wait for the peer's answer to their request: Python's
    engine hears it in the call it is in, C's between two slices; both end interrupted, torn down."""
    peer = Peer(connect_event=NONE, connections=2)
    py_flow, backend = python_side(peer)
    asked = []

    def connect(cm, param):
        asked.append(cm)
        if len(asked) == 2:
            raise Stopped(signum)
        return []

    backend.script["connect"] = connect
    theirs = record(run(py_flow))
    flow = native_side(peer, twin)
    take = flow._take_log

    def take_then_stop():
        take()
        if not flow.stopping and all(flow._conns[i].phase == twin.lib.RDMACLI_PH_CONNECT for i in range(2)):
            flow.stopping = True  # what the signal's handler would have done (Stops)
            raise Stopped(signum)

    flow._take_log = take_then_stop
    ours = record(run(flow))
    assert ours["exit"] == theirs["exit"] == 128 + signum
    assert [c[0] for c in ours["conns"]] == [c[0] for c in theirs["conns"]] == ["interrupted"] * 2
    for name in ("ids", "qps", "mrs", "cqs", "comps"):
        assert getattr(twin.lib.crs, name) == 0, name


def test_a_stop_while_the_last_slice_is_rendered_waits_for_c_and_tears_down(twin):
    """C runs a slice in a thread of its own while Python renders the last one's log
    (nativeflow._run_slice): a signal's exception raised in the rendering ends C's slice (the
    plan's stop) and is raised again only once C has returned; the run ends interrupted with
    nothing left behind and no thread. C's slice waits here as in a ppoll until it is stopped."""
    flow = native_side(Peer(connect_event=NONE, connections=2), twin)
    flow.detailed = True  # an observer that shows each event and step: C logs them for it
    lib, render, seen = twin.lib, flow._render, []

    class Waiting:  # the twin's lib, its slices held (the twin's clock would run at once)
        def __getattr__(self, name):
            return getattr(lib, name)

        def rdmacli_cm_run(self, p, end, settle):
            if not settle and flow._taken[1]:  # a slice beside a rendering
                t0 = time.monotonic()
                while not p.stop and time.monotonic() - t0 < 10:
                    time.sleep(0.01)
            return lib.rdmacli_cm_run(p, end, settle)

    flow.lib = Waiting()
    flow.given = (twin.ffi, flow.lib)

    def render_then_stop():
        if not flow.stopping and any(t.name == "rdmacli-cm" for t in threading.enumerate()):
            seen.append(flow._taken[1])
            flow.stopping = True  # what the signal's handler would have done (Stops)
            raise Stopped(signal.SIGTERM)
        render()

    flow._render = render_then_stop
    ours = record(run(flow))
    assert seen and seen[0] > 0  # it came while C ran, with records to render
    assert ours["exit"] == 128 + signal.SIGTERM
    assert [c[0] for c in ours["conns"]] == ["interrupted"] * 2
    assert ours["steps"]["create id"] == 2  # C's figures, merged at close
    assert not [t for t in threading.enumerate() if t.name == "rdmacli-cm"]
    for name in ("ids", "qps", "mrs", "cqs", "comps"):
        assert getattr(twin.lib.crs, name) == 0, name


CALLS = {"create id": "I", "resolve addr": "A", "resolve route": "R", "create qp": "Q", "connect": "C",
         "disconnect": "D", "destroy qp": "q", "destroy id": "i", "bind": "B"}  # fmt: skip


def python_trace(backend) -> str:
    """FakeBackend's log of CM calls as cm_run_twin.c traces them: a letter and the connection."""
    index = {cm.key: k for k, cm in enumerate(backend.ids)}
    return "".join(f"{CALLS[name]}{index[key]} " for name, *rest in backend.log if name in CALLS
                   for key in rest[:1])  # fmt: skip


@pytest.mark.parametrize(
    "case",
    ["events, 3 connections: cmtime's order", "ucmatose's, 3 connections: each on its own",
     "events, one rejected: the others go on", "events, one never answered: its deadline opens the gate"],
)  # fmt: skip
def test_both_runners_make_the_same_calls_in_the_same_order(case, twin):
    """The order of the CM calls, not only the records: `events` (bare.py's lockstep) runs each of
    cmtime's steps for every connection before the next, a gate opening once every live
    connection's event has come (a rejected one or one past its deadline no longer holds it);
    ucmatose's exchange runs each connection on its own, as ucmatose does."""
    bare = case.startswith("events")
    peer = Peer(bare=bare, peer_sends=0 if bare else 3, disconnect_after=0 if bare else 3, connections=3)
    py_flow, backend = python_side(peer)
    if "rejected" in case or "never answered" in case:
        event = C.REJECTED if "rejected" in case else NONE
        normal = backend.script["connect"]
        backend.script["connect"] = lambda cm, param: (
            [] if event == NONE else [backend.event(cm, event, 5)]
        ) if cm is backend.ids[1] else normal(cm, param)  # fmt: skip
    theirs = record(run(py_flow))
    flow = native_side(peer, twin)
    if "rejected" in case or "never answered" in case:
        s = twin.lib.crt
        s.odd_conn, s.odd_event, s.odd_status = 1, C.REJECTED if "rejected" in case else NONE, 5
    ours = record(run(flow))
    trace = twin.ffi.string(twin.lib.crs.trace).decode()
    assert ours == theirs
    assert trace == python_trace(backend)
    if case.startswith("events, 3"):
        want = "I0 I1 I2 B0 B1 B2 A0 A1 A2 R0 R1 R2 Q0 Q1 Q2 C0 C1 C2 D0 D1 D2 q0 q1 q2 i0 i1 i2 "
        assert trace == want, trace
    elif not bare:
        assert trace.startswith("I0 A0 I1 A1 I2 A2 ") and "Q0 C0 Q1 C1 Q2 C2 " in trace, trace
    else:  # connection 1 fails in cm connect; 0 and 2 disconnect once it has
        assert "C0 C1 C2 D0 D2 " in trace and "D1" not in trace, trace
