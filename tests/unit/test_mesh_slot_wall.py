"""A slot is a wall, on the scripted stack: a request withdrawn before the mesh listener got to
it (rdma_create_qp EINVAL, as librdmacm returns for a request whose requester destroyed its
cm_id: found in the lab) does not end the listener, which serves its partner's next request;
and a pair still running when its slot ends is an overrun, named with its step."""

from __future__ import annotations

import errno

from fakerdma import FakeBackend

from rdmacli.engine import session
from rdmacli.engine.session import CLIENT, SERVER, run
from rdmacli.engine.settings import DeadlineWords, Timeouts
from rdmacli.errors import Cause
from rdmacli.mesh.pair import MeshListenFlow, judge
from rdmacli.mesh.records import PairRecord
from rdmacli.outcome import State
from rdmacli.protocols.table import PROTOCOLS
from rdmacli.rdma.cm import RdmaCallError

SLOT = DeadlineWords(overall="the end of this pair's slot", overrun="raise --round-time")


def connector(timeouts: Timeouts) -> session.Test:
    """A mesh pair's connecting side, as the agent builds it (its flow factory aside)."""
    return session.Test(
        "mesh-agent", PROTOCOLS["connect"], CLIENT, host="10.0.0.1", port=7490, timeouts=timeouts
    )


def test_a_withdrawn_request_leaves_the_listener_waiting_for_its_partner():
    backend = FakeBackend()
    first = []

    def create_qp(cm, attr):
        if not first:
            first.append(cm)
            raise RdmaCallError("rdma_create_qp", errno.EINVAL)

    def listen(cm):
        backend.request()  # the stale one: its requester has already gone
        backend.then(lambda: backend.request())  # the partner asks again
        return []

    backend.script["listen"] = listen
    backend.script["create qp"] = create_qp
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    test = session.Test("mesh-agent", PROTOCOLS["connect"], SERVER, bind="10.0.0.1", port=7490,
                timeouts=Timeouts(overall_s=5, wait_s=5, words=SLOT))  # fmt: skip
    outcome = run(
        test,
        backend=backend,
        factory=lambda t, common: session.default_flow(t, common, server=MeshListenFlow),
    )
    states = [c.state for c in outcome.connections]
    assert states == [State.REJECTED, State.DONE], outcome.to_dict()
    assert outcome.connections[0].error.details["call"] == "rdma_create_qp"
    rec = judge(PairRecord(run="00" * 8, rank=0, peer=1, round=0, result="fail"), outcome, True)
    assert rec.result == "pass", rec
    assert any("ended before it was accepted" in w for w in outcome.warnings)


def test_a_pair_still_running_at_its_slots_end_is_an_overrun_with_its_step():
    backend = FakeBackend()
    backend.script["connect"] = lambda cm, param: []  # the partner never answers the REQ
    test = connector(Timeouts(overall_s=0.3, connect_s=10, words=SLOT))
    outcome = run(test, backend=backend)
    err = outcome.run_error()
    assert err.cause is Cause.OVERRUN and err.details["step"] == "cm connect", err.to_dict()
    assert "still running at the end of this pair's slot" in err.message
    assert all(cm.destroyed for cm in backend.ids), "torn down without waiting on the peer"


def test_an_overrun_while_retransmits_moved_is_packet_loss():
    backend = FakeBackend()
    backend.script["connect"] = lambda cm, param: []
    backend.counter_values["fake0"] = {"completer_retry_err": 0}

    def moved(cm, param):
        backend.counter_values["fake0"] = {"completer_retry_err": 6}
        return []

    backend.script["connect"] = moved
    test = connector(Timeouts(overall_s=0.3, words=SLOT))
    outcome = run(test, backend=backend)
    err = outcome.run_error()
    assert err.cause is Cause.PACKET_LOSS and err.details["reported_cause"] == "slot_overrun"
    assert [d.to_dict() for d in outcome.counters] == [
        {"device": "fake0", "port": 1, "moved": {"completer_retry_err": 6},
         "kinds": {"loss": {"completer_retry_err": 6}}}
    ]  # fmt: skip
