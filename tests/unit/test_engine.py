"""The engine's state machines driven by synthetic CM events and completions (tests/unit/fakerdma).

Every documented rdma_cm(7) sequence, every error event, rejection, deadline, teardown order and
a stop signal, for the client, server and multicast flows. Runs anywhere in seconds; proves
nothing about RDMA itself (the lab suite does).
"""

from __future__ import annotations

import errno
import signal
import time
from types import SimpleNamespace

import pytest
from fakerdma import FakeBackend, wc

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.loop import DeadlineExpired
from rdmacli.engine.mcast import McastFlow
from rdmacli.engine.results import from_flow
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.settings import Options, Timeouts
from rdmacli.engine.stops import Stops
from rdmacli.errors import ExitCode, Stopped
from rdmacli.outcome import State
from rdmacli.protocols import hello as H
from rdmacli.protocols import table
from rdmacli.protocols.bare import BareClient
from rdmacli.protocols.cmatose import CmatoseClient, CmatoseServer
from rdmacli.protocols.mckey import McastReceiver, McastSender
from rdmacli.protocols.udaddy import UdClient
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import RdmaCallError

SERVER = SockAddr(2, "10.0.0.1", 7471)
CLIENT = SockAddr(2, "10.0.0.2", 0)
GROUP = SockAddr(2, "239.1.1.1", 0)
FAST = Timeouts(resolve_ms=100, connect_s=0.3, idle_s=0.3)


def client(backend, make_protocol=lambda: CmatoseClient(3, 64), timeouts=FAST, **kw):
    return ClientFlow(
        dst=SERVER, src=CLIENT, make_protocol=make_protocol, timeouts=timeouts, backend=backend, **kw
    )


def run(flow, **outcome_kw):
    """Run a flow to its end, tear it down, and return its outcome (as the CLI does)."""
    error = signum = None
    try:
        flow.run()
    except DeadlineExpired as exc:
        error = exc
    except Stopped as exc:
        signum = exc.signum
    except KeyboardInterrupt:
        signum = signal.SIGINT
    finally:
        flow.close()
    return from_flow("test", flow, {}, error=error, signal=signum, **outcome_kw)


def cmatose_peer(backend, flow, count=3, size=64):
    """A ucmatose server: sends `count` messages once connected, disconnects after the echo."""
    echoed: dict[int, list] = {}  # per connection

    def on_connect(cm, param):
        flow.loop.call_later(0, lambda: [backend.deliver(cm, b"m" * size) for _ in range(count)])
        return [backend.event(cm, C.ESTABLISHED)]

    def on_send(cm, wr):
        echoed.setdefault(cm.key, []).append(wr)
        if len(echoed[cm.key]) == count:
            backend.peer_disconnects(cm)

    backend.script["connect"] = on_connect
    backend.on_send = on_send


# -- the active side ----------------------------------------------------------------------------


def test_client_sequence_exchange_and_teardown_order():
    backend = FakeBackend()
    flow = client(backend)
    cmatose_peer(backend, flow)
    out = run(flow)
    assert out.exit_code == 0 and out.result == "pass"
    assert out.connections[0].state == State.DONE
    assert out.connections[0].stats.messages_received == out.connections[0].stats.messages_sent == 3
    key = backend.ids[0].key
    assert backend.calls(key) == [
        "create id",
        "resolve addr",
        "resolve route",
        "create qp",
        "connect",
        "disconnect",  # answering the server's DREQ
        "destroy qp",
        "destroy id",
    ]
    # resources go in the documented order: QP, MRs, CQ, channel, id, event channel
    order = [c for c in backend.calls() if c in ("destroy qp", "dereg mr", "destroy cq", "destroy id")]
    assert order == ["destroy qp", "dereg mr", "destroy cq", "destroy id"]  # one MR: ucmatose's one buffer
    assert backend.calls()[-1] == "destroy event channel"
    steps = [s.step for s in out.steps_us]
    assert steps[:5] == ["create id", "resolve addr", "resolve route", "create qp", "cm connect"]


def overtaking_peer(backend, flow, *, ack_after: float | None):
    """A ucmatose server whose DREQ overtakes the ACK of the client's last sends: the echo's
    completions come `ack_after` s after the DISCONNECTED (None: never, the peer's QP is gone)."""
    backend.auto_complete_sends = False
    cmatose_peer(backend, flow)
    sends = []

    def on_send(cm, wr):
        sends.append(wr)
        if len(sends) == 3:
            backend.peer_disconnects(cm)  # it received all three: it disconnects at once
            if ack_after is not None:
                ack = wc(wr["wr_id"], C.WC_SEND, qp_num=cm.qp_num)
                flow.loop.call_later(ack_after, lambda: backend.cqs[cm.key].complete(ack))

    backend.on_send = on_send


def test_a_disconnect_that_overtakes_the_last_acks_is_judged_once_their_completions_are_in():
    backend = FakeBackend()
    flow = client(backend, timeouts=Timeouts(resolve_ms=100, connect_s=2, idle_s=2))
    overtaking_peer(backend, flow, ack_after=0.05)
    out = run(flow)
    assert out.exit_code == 0 and out.result == "pass", out.error
    stats = out.connections[0].stats
    assert stats.messages_sent == 3 and stats.sends_confirmed_by_disconnect == 0
    assert not out.warnings
    # our answer to the DREQ (it flushes the QP) came only after the completions
    assert backend.calls(backend.ids[0].key).count("disconnect") == 1


def test_sends_whose_acks_never_come_are_confirmed_by_ucmatoses_disconnect_and_said_so():
    backend = FakeBackend()
    flow = client(backend, timeouts=Timeouts(resolve_ms=100, connect_s=0.3, idle_s=2))
    overtaking_peer(backend, flow, ack_after=None)
    out = run(flow)
    assert out.exit_code == 0 and out.result == "pass", out.error
    stats = out.connections[0].stats
    assert stats.messages_sent == 3 and stats.sends_confirmed_by_disconnect == 3
    assert "confirmed by the server's disconnect" in out.warnings[0]


def test_an_early_disconnect_names_the_same_counts_as_the_totals():
    """A peer that disconnects before all of its messages arrived: a failure whose words count
    what the totals count."""
    backend = FakeBackend()
    flow = client(backend, make_protocol=lambda: CmatoseClient(5, 64))

    def on_connect(cm, param):
        flow.loop.call_later(0, lambda: (backend.deliver(cm, b"m" * 64), backend.peer_disconnects(cm)))
        return [backend.event(cm, C.ESTABLISHED)]

    backend.script["connect"] = on_connect
    out = run(flow)
    [conn] = out.connections
    assert out.exit_code == 1 and conn.error.cause.value == "peer_ended_early"
    stats = conn.stats
    assert f"received {stats.messages_received}/5, sent {stats.messages_sent}/5" in conn.error.message


def records_of(detailed: bool) -> tuple[list, object]:
    backend = FakeBackend()
    records = []

    def observer(rec) -> None:
        records.append(rec)

    observer.detailed = detailed
    flow = ClientFlow(dst=SERVER, src=CLIENT, make_protocol=lambda: CmatoseClient(3, 64), timeouts=FAST,
                      backend=backend, observer=observer)  # fmt: skip
    cmatose_peer(backend, flow)
    return records, run(flow)


def test_records_per_event_and_step_are_made_only_for_an_observer_that_shows_them():
    shown, out = records_of(True)
    assert {"cm_event", "step"} <= {r.TYPE for r in shown}
    quiet, out2 = records_of(False)
    assert not {"cm_event", "step"} & {r.TYPE for r in quiet}
    # the outcome's step table is the same either way: only the records were skipped
    assert [s.step for s in out2.steps_us] == [s.step for s in out.steps_us]


def test_client_conn_param_is_ucmatose_and_carries_the_hello():
    backend = FakeBackend()
    flow = client(backend)
    cmatose_peer(backend, flow)
    run(flow)
    p = backend.conn_params[0]
    assert (p.responder_resources, p.initiator_depth, p.retry_count, p.rnr_retry_count) == (1, 1, 5, 0)
    assert H.parse(p.private_data) == H.Hello(table.CONNECT.hello_kind, 3, 64)


ERROR_CASES = [
    ("resolve addr", C.ADDR_ERROR, -110, {}, ExitCode.RESOLVE, "resolve addr: ADDR_ERROR ETIMEDOUT"),
    ("resolve route", C.ROUTE_ERROR, -110, {}, ExitCode.RESOLVE, "ROUTE_ERROR"),
    ("connect", C.REJECTED, 8, {}, ExitCode.REJECTED, "nothing is listening at 10.0.0.1:7471"),
    (
        "connect",
        C.REJECTED,
        28,
        {"private_data": b"rdmacli: size 4096 exceeds the server limit 1024\0" + bytes(8)},
        ExitCode.REJECTED,
        "rejected the connection: 'rdmacli: size 4096 exceeds the server limit 1024'",
    ),
    ("connect", C.UNREACHABLE, -110, {}, ExitCode.REJECTED, "UNREACHABLE"),
    (
        "connect",
        C.UNREACHABLE,
        1,
        {},
        ExitCode.REJECTED,
        "listening at 10.0.0.1:7471 in this port space (UNREACHABLE, SIDR",
    ),
    ("connect", C.CONNECT_ERROR, -104, {}, ExitCode.REJECTED, "CONNECT_ERROR"),
    ("connect", C.DEVICE_REMOVAL, 0, {}, ExitCode.ENVIRONMENT, "the RDMA device fake0 was removed"),
]


@pytest.mark.parametrize("call,event,status,fields,code,text", ERROR_CASES, ids=lambda v: str(v)[:20])
def test_each_error_event_fails_its_connection_in_words(call, event, status, fields, code, text):
    backend = FakeBackend()
    backend.script[call] = lambda cm, *a: [backend.event(cm, event, status, **fields)]
    out = run(client(backend))
    assert out.connections[0].state == State.FAILED
    assert out.exit_code == code
    assert text in out.first_error().message
    assert backend.ids[0].destroyed  # torn down on the error path too


def test_a_deadline_fails_only_its_own_connection():
    backend = FakeBackend()
    answered = []

    def connect(cm, param):  # the first connection's peer never answers; the second's does
        answered.append(cm)
        if len(answered) == 1:
            return []
        flow.loop.call_later(0, lambda: [backend.deliver(cm, b"m" * 64) for _ in range(3)])
        return [backend.event(cm, C.ESTABLISHED)]

    flow = client(backend, connections=2)
    backend.script["connect"] = connect
    backend.on_send = lambda cm, wr: (
        len([s for s in backend.sends if s["cm"] is cm]) == 3 and (backend.peer_disconnects(cm))
    )
    out = run(flow)
    states = sorted(c.state for c in out.connections)
    assert states == sorted([State.FAILED, State.DONE])
    failed = next(c for c in out.connections if c.state == State.FAILED)
    assert "cm connect: no progress within its deadline" in failed.error.message
    assert out.exit_code == ExitCode.TIMEOUT


def test_the_overall_timeout_ends_the_run():
    backend = FakeBackend()
    backend.script["resolve route"] = lambda cm: []
    flow = client(backend, timeouts=Timeouts(resolve_ms=5000, connect_s=5, idle_s=5, overall_s=0.2))
    out = run(flow)
    assert (
        out.exit_code == ExitCode.TIMEOUT and "the run's deadline" in out.error.message
    )  # the caller's words: none given
    assert out.connections[0].state == State.FAILED  # open when the run ended without a signal


def test_a_peer_that_never_answers_our_disconnect_is_a_warning_not_a_failure():
    backend = FakeBackend()
    backend.script["disconnect"] = lambda cm: []  # a C server busy elsewhere
    out = run(client(backend, make_protocol=BareClient))
    assert out.connections[0].state == State.DONE and out.exit_code == 0
    assert "did not answer the disconnect" in out.warnings[0]
    assert backend.ids[0].destroyed


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_interrupts_open_connections_and_tears_down(signum):
    backend = FakeBackend()

    def connect(cm, param):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)

    backend.script["connect"] = connect
    out = run(client(backend))
    assert out.connections[0].state == State.INTERRUPTED
    assert out.result == "interrupted" and out.exit_code == 128 + signum
    assert out.to_dict()["totals"]["connections_interrupted"] == 1
    assert backend.ids[0].destroyed and backend.calls()[-1] == "destroy event channel"


# -- the passive side ---------------------------------------------------------------------------


def server(backend, make_protocol=lambda: CmatoseServer(3, 64), timeouts=FAST, **kw):
    return ServerFlow(bind=SERVER, make_protocol=make_protocol, timeouts=timeouts, backend=backend, **kw)


def test_server_sequence_with_a_c_client():
    backend = FakeBackend()
    flow = server(backend)
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    # the C client echoes each message it gets (it sends no hello: our -C/-S apply)
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    records = []
    flow.observer, flow.detailed = records.append, True
    out = run(flow)
    assert out.exit_code == 0 and out.connections[0].state == State.DONE
    conn_cm = backend.ids[1]
    assert backend.calls(conn_cm.key) == ["create qp", "accept", "disconnect", "destroy qp", "destroy id"]
    assert [r.TYPE for r in records if r.TYPE in ("ready", "request", "connection")] == [
        "ready",
        "request",
        "connection",
    ]
    assert records[-1].state == "done"
    assert backend.listener.destroyed


def test_a_rejected_only_server_run_is_not_a_pass():
    backend = FakeBackend()
    flow = server(backend, make_protocol=lambda: CmatoseServer(10, 100, max_size=10))
    hello = H.Hello(table.CONNECT.hello_kind, 10, 100).pack()
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, lambda: backend.request(hello)) and []
    out = run(flow)
    doc = out.to_dict()
    assert doc["totals"]["connections_passed"] == 0 and doc["totals"]["connections_rejected"] == 1
    assert doc["result"] == "fail" and doc["exit_code"] == 1
    assert backend.rejections[0].startswith(b"rdmacli: size 100 exceeds the server limit 10")


def test_a_full_server_rejects_the_extra_client():
    backend = FakeBackend()
    flow = server(backend, max_clients=1)

    def two_clients():
        backend.request()
        backend.request()

    backend.script["listen"] = lambda cm: flow.loop.call_later(0, two_clients) and []
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    out = run(flow)
    assert sorted(c.state for c in out.connections) == sorted([State.DONE, State.REJECTED])
    assert backend.rejections == [b"rdmacli: server is full\0"]
    assert out.exit_code == 0  # one was served; a policy rejection is no failure


@pytest.mark.parametrize("err", [errno.ENOMEM, errno.ENOSPC, errno.EAGAIN])
def test_a_device_out_of_qps_turns_the_request_away_with_the_reason_and_serves_on(err):
    """Issue 70: a server bounds resources, not clients. A request that finds the device out of
    QPs (or of the memory a QP needs) is refused with that reason, as a full server's is, and the
    clients before and after it are served: not a failed connection left for its client's
    timeout, and no failure of the server's run."""
    backend = FakeBackend()
    flow = server(backend, max_clients=2)  # the first and the third: the run's end
    made = []

    def create_qp(cm, attr):
        made.append(cm.key)
        if len(made) == 2:
            raise RdmaCallError("ibv_create_qp", err)

    def three_clients():
        for _ in range(3):
            backend.request()

    backend.script["create qp"] = create_qp
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, three_clients) and []
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    out = run(flow)
    assert sorted(c.state for c in out.connections) == sorted([State.DONE, State.DONE, State.REJECTED])
    [why] = backend.rejections
    assert why.startswith(b"rdmacli: server's device has no room for another QP"), why
    assert errno.errorcode[err].encode() in why and why.endswith(b"\0") and len(why) <= 141
    assert out.exit_code == 0, out.to_dict()  # a resource bound said to the client, as full is


@pytest.mark.parametrize("coming", [3, 2], ids=["all came", "one never came"])
def test_a_clients_connections_one_after_another_are_awaited_as_its_hello_says(coming):
    """A size sweep (-a) opens one connection per size, in turn, each hello announcing them all:
    a default server (-c 1) serves every one, waiting for the next once the last is over, but
    only --connect-timeout long (a client that died between two is not waited for for ever)."""
    backend = FakeBackend()
    flow = server(backend, max_clients=1)
    hello = H.Hello(table.CONNECT.hello_kind, 3, 64, group=3).pack()
    came = []

    def next_one():
        came.append(1)
        backend.request(hello)

    def observe(rec):
        if rec.TYPE == "connection" and len(came) < coming:
            flow.loop.call_later(0.05, next_one)  # the next size's connection, a moment later

    backend.script["listen"] = lambda cm: flow.loop.call_later(0, next_one) and []
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    flow.observer = observe
    t0 = time.monotonic()
    out = run(flow)
    assert [c.state for c in out.connections] == [State.DONE] * coming and out.exit_code == 0
    if coming == 3:
        assert not out.warnings
    else:  # ended --connect-timeout (0.3 s) after the last, and said so
        assert time.monotonic() - t0 >= FAST.connect_s
        assert out.warnings and "announced 1 more connection(s)" in out.warnings[0]


def test_a_stopped_persistent_server_reports_open_connections_as_interrupted():
    backend = FakeBackend()
    flow = server(backend, max_clients=None, timeouts=Timeouts(100, 5, 5))
    backend.auto_complete_sends = False  # the client is mid-exchange when the signal comes

    def stop_soon():
        backend.request()
        flow.loop.call_later(0.05, lambda: (_ for _ in ()).throw(Stopped(signal.SIGTERM)))

    backend.script["listen"] = lambda cm: flow.loop.call_later(0, stop_soon) and []
    out = run(flow)
    assert [c.state for c in out.connections] == [State.INTERRUPTED]
    assert out.exit_code == 143 and out.result == "interrupted"


def test_a_stop_that_comes_after_a_request_was_announced_interrupts_it_never_rejects_it():
    """The lab's signal test stops the server as soon as it sees the request record: under TCG
    the signal could land before the server had decided, and the client was rejected as
    'server is stopping' after being announced. The decision comes first now."""
    backend = FakeBackend()
    flow = server(backend, max_clients=None, timeouts=Timeouts(100, 5, 5))
    backend.auto_complete_sends = False

    stops = Stops()

    def observe(rec):
        if rec.TYPE == "request":
            stops.handler(signal.SIGTERM, None)  # the signal, as the record reaches its reader

    flow.observer = observe
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    with stops.running(flow):
        flow.run()
    flow.close()
    out = from_flow("listen", flow, {}, signal=stops.signum)
    assert [c.state for c in out.connections] == [State.INTERRUPTED]
    assert backend.rejections == []
    # a request that arrives once the stop is known is still turned away, with the reason
    backend = FakeBackend()
    flow = server(backend, max_clients=None, timeouts=Timeouts(100, 5, 5))
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    flow.observer = lambda rec: rec.TYPE == "ready" and flow.stop()
    out = run(flow)
    assert [c.state for c in out.connections] == [State.REJECTED]
    assert backend.rejections == [b"rdmacli: server is stopping\0"]


def test_the_first_client_is_awaited_without_deadline_unless_wait_is_given():
    backend = FakeBackend()
    flow = server(backend, timeouts=Timeouts(100, 0.1, 0.1, None, wait_s=0.3))
    out = run(flow)
    assert out.exit_code == ExitCode.TIMEOUT
    assert "no client connected within a wait of 0.3 s" in out.error.message
    # without --wait the nearest deadline is none at all (only a person ends the wait)
    flow2 = server(FakeBackend(), timeouts=Timeouts(100, 0.1, 0.1))
    flow2.ready_at = 0.0
    assert flow2.nearest_deadline() is None
    flow2.close()


# -- multicast ----------------------------------------------------------------------------------


def mcast(backend, make_protocol, timeouts=FAST, **kw):
    return McastFlow(
        group=GROUP,
        src=CLIENT,
        options=Options(ps=C.PS_UDP),
        make_protocol=make_protocol,
        timeouts=timeouts,
        backend=backend,
        **kw,
    )


def test_a_receiver_waits_for_its_sender_longer_than_the_idle_deadline():
    backend = FakeBackend()
    flow = mcast(backend, lambda: McastReceiver(5, 100))  # idle deadline 0.3 s

    def join(cm, sa):
        # the sender starts 1 s after the join: a person walking to another host
        flow.loop.call_later(1.0, lambda: [backend.deliver(cm, b"d" * 140, imm=9) for _ in range(5)])
        return backend.default_reaction(cm, "join")

    backend.script["join"] = join
    out = run(flow)
    assert out.exit_code == 0 and out.connections[0].stats.datagrams_received == 5
    assert backend.calls(backend.ids[0].key) == [
        "create id",
        "bind",
        "resolve addr",
        "create qp",
        "join",
        "leave",
        "destroy qp",
        "destroy id",
    ]


def test_a_receiver_with_wait_gives_up_in_words():
    out = run(mcast(FakeBackend(), lambda: McastReceiver(5, 100), timeouts=Timeouts(100, 1, 0.1, None, 0.2)))
    assert out.exit_code == ExitCode.TIMEOUT
    assert "no datagram arrived within a wait of 0.2 s" in out.first_error().message


def test_the_idle_deadline_starts_with_the_first_datagram_and_reports_loss():
    backend = FakeBackend()
    flow = mcast(backend, lambda: McastReceiver(5, 100))

    def join(cm, sa):
        flow.loop.call_later(0.05, lambda: [backend.deliver(cm, b"d" * 140) for _ in range(2)])
        return backend.default_reaction(cm, "join")

    backend.script["join"] = join
    out = run(flow)
    assert out.exit_code == ExitCode.FAILED
    assert "received 2 of 5 datagrams before the deadline (3 lost)" in out.first_error().message
    some = out.connections[0].stats
    assert (some.datagrams_received, some.datagrams_lost) == (2, 3)


def test_a_sender_sends_its_count_to_the_group_qpn():
    backend = FakeBackend()
    out = run(mcast(backend, lambda: McastSender(4, 100), send_only=True))
    assert out.exit_code == 0 and out.connections[0].stats.datagrams_sent == 4
    assert {(s["remote_qpn"], s["opcode"]) for s in backend.sends} == {(0xFFFFFF, C.WR_SEND_WITH_IMM)}
    assert out.connections[0].stats.mgid == "::ffff:239.1.1.1"


def test_a_multicast_error_fails_the_member():
    backend = FakeBackend()
    backend.script["join"] = lambda cm, sa: [backend.event(cm, C.MULTICAST_ERROR, -110)]
    out = run(mcast(backend, lambda: McastReceiver(5, 100)))
    assert out.connections[0].state == State.FAILED and out.exit_code == ExitCode.REJECTED
    assert "MULTICAST_ERROR" in out.first_error().message


def test_a_client_with_wait_asks_again_until_the_server_listens():
    backend = FakeBackend()
    tries = []
    flow = client(backend, timeouts=Timeouts(resolve_ms=100, connect_s=0.3, idle_s=0.3, wait_s=5))
    cmatose_peer(backend, flow)
    serve = backend.script["connect"]

    def connect(cm, param):
        tries.append(cm)
        if len(tries) < 3:  # the server is not up for the first two requests
            return [backend.event(cm, C.REJECTED, 8)]
        return serve(cm, param)

    backend.script["connect"] = connect
    records = []
    flow.observer, flow.detailed = records.append, True
    out = run(flow)
    assert out.exit_code == 0 and len(out.connections) == 1 and out.connections[0].state == State.DONE
    assert len(tries) == 3 and all(cm.destroyed for cm in tries)  # each refused id torn down
    assert [r.TYPE for r in records].count("waiting") == 1


def test_without_wait_a_client_fails_at_once_like_the_c_tools():
    backend = FakeBackend()
    backend.script["connect"] = lambda cm, p: [backend.event(cm, C.REJECTED, 8)]
    out = run(client(backend))
    assert out.exit_code == ExitCode.REJECTED and len(backend.ids) == 1
    assert "--wait SECONDS" in out.first_error().hint


def test_a_failure_names_what_changed_on_this_host_before_blaming_the_peer():
    from rdmacli.diag.local import LocalCause

    backend = FakeBackend()
    backend.cause = LocalCause("fake0 port 1 went DOWN: netdev veth1 is down", "ip link set veth1 up")
    backend.script["connect"] = lambda cm, p: []  # no answer: a deadline, which alone blames the peer
    out = run(client(backend))
    err = out.first_error()
    assert err.message.startswith("cm connect: fake0 port 1 went DOWN: netdev veth1 is down")
    assert err.hint == "ip link set veth1 up" and err.exit_code == ExitCode.ENVIRONMENT
    assert "no progress within its deadline" in err.details["reported"]


def test_a_registration_refused_for_memory_names_the_size_and_the_limit():
    from rdmacli.rdma.cm import RdmaCallError

    backend = FakeBackend()

    def no_memory(cm, size, access):
        raise RdmaCallError("ibv_reg_mr", 12)

    backend.mr = no_memory
    out = run(client(backend, make_protocol=lambda: CmatoseClient(1, 64 * 2**20)))
    err = out.first_error()
    assert "registering 67108864 bytes (64.0 MiB)" in err.message and "RLIMIT_MEMLOCK" in err.message
    assert "ulimit -l unlimited" in err.hint and err.exit_code == ExitCode.ENVIRONMENT


def test_a_stop_while_only_the_disconnect_is_outstanding_counts_the_exchange_as_done():
    backend = FakeBackend()
    flow = server(backend, max_clients=None, timeouts=Timeouts(100, 5, 5))
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])

    def disconnect(cm):  # the client never answers our DREQ; a signal comes meanwhile
        flow.loop.call_later(0.05, lambda: (_ for _ in ()).throw(Stopped(signal.SIGINT)))
        return []

    backend.script["disconnect"] = disconnect
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    out = run(flow)
    assert [c.state for c in out.connections] == [State.DONE]
    assert out.exit_code == 130 and out.to_dict()["totals"]["connections_passed"] == 1


# -- shared completion queues ---------------------------------------------------------------------


def test_connections_on_one_device_share_one_cq_and_completions_find_their_connection():
    backend = FakeBackend()
    flow = client(backend, connections=5)
    cmatose_peer(backend, flow)
    out = run(flow)
    assert out.exit_code == 0 and [c.state for c in out.connections] == [State.DONE] * 5
    assert all(c.stats.messages_received == c.stats.messages_sent == 3 for c in out.connections)
    assert len(backend.all_cqs) == 1 and not backend.all_cqs[0].alive  # one CQ, destroyed
    assert backend.calls().count("destroy cq") == 1


def test_a_reused_qp_number_never_gets_the_old_qps_completions():
    from rdmacli.engine.cqpool import CqPool

    backend = FakeBackend()
    flow = client(backend)
    got = []
    flow.on_wcs = lambda conn, wcs: got.extend((conn, w.wr_id) for w in wcs)
    pool = CqPool(flow)
    old = SimpleNamespace(cm=backend.create_id(None, C.PS_TCP), limits=lambda: None)
    cq = pool.acquire(old, 8)
    pool.bind(old, 42)
    keeper = SimpleNamespace(cm=backend.create_id(None, C.PS_TCP), limits=lambda: None)
    pool.acquire(keeper, 8)  # keeps the CQ alive
    cq.complete(wc(7, qp_num=42))  # the old QP's completion, still queued when it goes
    pool.release(old)
    new = SimpleNamespace(cm=backend.create_id(None, C.PS_TCP), limits=lambda: None)
    assert pool.acquire(new, 8) is cq
    pool.bind(new, 42)  # the same QP number again
    cq.complete(wc(8, qp_num=42))
    flow.loop.drain(cq, pool.dispatch)
    assert got == [(new, 8)]
    flow.close()


def test_the_cq_pool_forgets_each_released_connection_and_no_other():
    """release() finds a connection's QP numbers without scanning every QP (a scan made set-up
    quadratic in connections), forgets them all, and leaves a number that a newer connection
    holds again to that connection."""
    from rdmacli.engine.cqpool import CqPool

    backend = FakeBackend()
    flow = client(backend)
    got = []
    flow.on_wcs = lambda conn, wcs: got.extend((conn, w.wr_id) for w in wcs)
    pool = CqPool(flow)

    def conn():
        return SimpleNamespace(cm=backend.create_id(None, C.PS_TCP), limits=lambda: None)

    keeper = conn()
    cq = pool.acquire(keeper, 4)  # keeps the shared CQ alive to the end
    conns = [conn() for _ in range(50)]
    for i, c in enumerate(conns):
        assert pool.acquire(c, 4) is cq
        pool.bind(c, 1000 + i)
    pool.bind(conns[0], 999)  # a connection with two QPs (its first one replaced)
    for c in conns[1:25]:
        pool.release(c)
    assert set(pool.by_qpn) == {999, 1000} | set(range(1025, 1050))
    again = conn()
    pool.acquire(again, 4)
    pool.bind(again, 999)  # conns[0]'s number, now another's
    pool.release(conns[0])
    assert pool.by_qpn[999] is again and 1000 not in pool.by_qpn
    for c in [*conns[25:], again]:
        pool.release(c)
    assert pool.by_qpn == {} and pool.qpns == {} and list(pool.owner) == [id(keeper)]
    cq.complete(wc(7, qp_num=1030))  # a released QP's completion reaches nobody
    flow.loop.drain(cq, pool.dispatch)
    assert got == []
    pool.release(keeper)
    flow.close()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_the_library_refuses_a_deadline_that_never_fires(bad):
    from rdmacli.errors import RdmacliError

    for field in ("connect_s", "idle_s", "overall_s", "wait_s"):
        with pytest.raises(RdmacliError) as info:
            Timeouts(**{field: bad})
        assert info.value.cause.value == "usage"


@pytest.mark.parametrize("rtu", ["lost", "behind the data"])
def test_a_client_sending_before_our_established(rtu):
    """Its RTU lost: halfway through the accept deadline the data is taken as the communication
    established, said to the CM with rdma_notify, whose ESTABLISHED then comes; the deadline
    does not fail a connection that moves data. Its RTU only behind the data: no notify (one
    ahead of the RTU makes the CM count it a duplicate, which the counters call loss)."""
    backend = FakeBackend()
    flow = server(backend)
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []

    def accepted(cm, param):
        backend.deliver(cm, b"c" * 64)
        if rtu == "behind the data":
            flow.loop.call_later(0.05, lambda: backend.push(cm, C.ESTABLISHED))
        return []

    backend.script["accept"] = accepted
    established = lambda cm, event: [backend.event(cm, C.ESTABLISHED)] if event == C.EVENT_COMM_EST else []  # noqa: E731
    backend.script["notify"] = established
    # the C client's other messages answer ours: three in all, the first of them early
    backend.on_send = lambda cm, wr: cm.recvs and backend.deliver(cm, b"e" * wr["length"])
    out = run(flow)
    assert out.exit_code == 0 and out.connections[0].state == State.DONE, out.to_dict()
    assert backend.calls(backend.ids[1].key).count("notify") == (rtu == "lost")


def test_a_bound_kept_for_the_nearest_deadline_is_judged_at_the_loops_instant(monkeypatch):
    """The loop reads the clock once per turn: a deadline still ahead at that instant is waited
    for, never raised because the clock moved on between two reads (a stale bound ended a
    healthy run mid-stream)."""
    from rdmacli.engine.loop import Loop

    backend = FakeBackend()
    loop = Loop(backend.event_channel())
    clock = iter(range(1000, 100000))  # every read one second later than the one before
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    turns = []
    loop.dispatch = lambda timeout: turns.append(timeout) or 0
    loop.run_until(lambda: bool(turns), lambda now: (now + 0.5, "ahead"))
    assert turns == [0.5]
    monkeypatch.undo()
    loop.close()
    # and the flow's kept bound is returned only while it has not passed at the instant given
    flow = server(FakeBackend())
    flow.deadlines.soonest = (100.0, "accept on connection 0")  # kept from a phase since left
    assert flow.nearest_deadline(now=99.0) == (100.0, "accept on connection 0")
    assert flow.nearest_deadline(now=100.0) is None  # scanned again: nobody's deadline
    flow.close()


def test_what_arrived_before_a_deadline_was_judged_is_handled_first():
    """A busy host judges a deadline late: the ESTABLISHED that came meanwhile (queued behind
    other clients' requests) is handled before the connection could be failed for it."""
    backend = FakeBackend()
    flow = server(backend)  # accept deadline: FAST.connect_s, 0.3 s
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []

    def accepted(cm, param):
        # the client's RTU comes in time, but this host gets to it only after the deadline
        def late():
            backend.push(cm, C.ESTABLISHED)
            time.sleep(0.35)  # busy: the deadline passes with the event unread

        flow.loop.call_later(0.1, late)
        return []

    backend.script["accept"] = accepted
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    out = run(flow)
    assert out.exit_code == 0 and out.connections[0].state == State.DONE, out.to_dict()


def test_a_persistent_server_holds_the_same_after_a_thousand_clients():
    """`listen --persistent` served each client's connection, outcome and step timings for its
    whole life: memory and the summary grew with every client. It lists its last LISTED now,
    counts the others (states, traffic, first error), and keeps each step's figures running."""
    import gc

    from rdmacli.engine.conn import Connection
    from rdmacli.engine.server import LISTED
    from rdmacli.errors import Stopped

    backend = FakeBackend()
    flow = server(backend, max_clients=None, timeouts=Timeouts(100, 5, 5))
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    served, most = [0], [0]

    def alive() -> int:  # connections held now (earlier tests' garbage collected first)
        gc.collect()
        return sum(isinstance(o, Connection) for o in gc.get_objects())

    before = alive()

    def stop():
        raise Stopped(signal.SIGTERM)

    def observe(rec):
        if rec.TYPE == "connection":
            served[0] += 1
            if served[0] % 100 == 0:
                most[0] = max(most[0], alive() - before)
            flow.loop.call_later(0, backend.request if served[0] < 1000 else stop)

    flow.observer = observe
    backend.script["listen"] = lambda cm: flow.loop.call_later(0, backend.request) and []
    out = run(flow)
    totals = out.totals()
    assert totals["connections_passed"] == 1000 and totals["connections_unlisted"] == 1000 - LISTED
    assert totals["messages_received"] == 3000  # the unlisted ones' traffic still counted
    assert len(out.connections) == LISTED and most[0] <= LISTED + 10, most
    assert next(s for s in out.steps_us if s.step == "accept").count == 1000
    assert not flow.timer._open and out.exit_code == 143


def test_a_perftest_client_stalled_mid_stream_ends_the_servers_test_at_the_idle_deadline():
    """`listen --perftest write_bw`: the server sees nothing of a WRITE stream, so its test QP
    waits for the client without a deadline of its own, bounded by the control connection's
    idle deadline. A client that stalls mid-stream (its report never comes) made the control
    connection fail at that deadline while the test QP's waited on for ever (the lab's 64 KiB
    case, past 180 s): one test's two connections end together."""
    from rdmacli.protocols import perftest as P
    from rdmacli.protocols.perftest_session import Session, Setting

    backend = FakeBackend()
    session = Session.of(Setting("bw", "write", 65536, count=5000), "server")
    bounded = Timeouts(resolve_ms=100, connect_s=0.3, idle_s=0.3, overall_s=5)  # fails, not hangs
    flow = server(backend, make_protocol=session.make_protocol, timeouts=bounded)
    steps = list(P.BINARY_STEPS["write_bw"].walk())
    to_send = steps[: steps.index(P.TEST)]  # the client's part up to its stall mid-stream
    control = {}

    def say(value_step):
        dest = P.Dest(out_reads=16, qpn=0x20, rkey=0x1234, vaddr=0x10000)
        value = {"version": P.VERSION, "cycle_buffer": P.CYCLE_BUFFER, "cache_line": P.CACHE_LINE,
                 "mtu": 5, "dest": dest}[value_step]  # fmt: skip
        backend.deliver(control["cm"], P.message(value_step, value))

    def next_move():
        while to_send and to_send[0] == P.CONNECT:
            to_send.pop(0)
            backend.request()  # the test's QP
        if to_send:
            say(to_send.pop(0))

    def on_send(cm, wr):
        if cm is control["cm"]:
            flow.loop.call_later(0, next_move)  # the server answered: the client's next step

    def when_accepted():
        if not control["cm"].recvs:  # not yet set up: the server's turn first
            flow.loop.call_later(0.01, when_accepted)
        else:
            next_move()

    def first():
        control["cm"] = backend.request()
        flow.loop.call_later(0, when_accepted)

    backend.script["listen"] = lambda cm: flow.loop.call_later(0, first) and []
    backend.on_send = on_send
    t0 = time.monotonic()
    out = run(flow)
    took = time.monotonic() - t0
    assert not to_send, "the exchange did not reach the test"
    states = [c.state for c in out.connections]
    assert states == [State.FAILED, State.FAILED], out.connections
    assert out.to_dict()["error"]["cause"] == "deadline" and out.exit_code != 0
    assert took < 10 * FAST.idle_s, took


def test_loss_is_counted_once_the_exchange_began_never_when_no_datagram_came():
    """A receiver whose sender never started says no loss (it cannot tell loss from silence,
    and nothing was lost), nor does a UD client nobody answered (one that got some: above)."""
    wait = Timeouts(100, 1, 0.1, None, 0.2)
    silent = run(mcast(FakeBackend(), lambda: McastReceiver(5, 100), timeouts=wait)).connections[0].stats
    assert (silent.datagrams_received, silent.datagrams_lost) == (0, None)
    backend = FakeBackend()
    backend.script["connect"] = lambda cm, *a: [backend.event(cm, C.UNREACHABLE, -110)]
    unanswered = run(client(backend, make_protocol=lambda: UdClient(5, 100), options=Options(ps=C.PS_UDP)))
    assert unanswered.exit_code == ExitCode.REJECTED
    assert unanswered.connections[0].stats.datagrams_lost is None
