"""A late agent's listener is no verdict on the next round's pair, on the scripted stack: a
listener still serving its round (its agent late: the lab saw n02's round 0 end 6.4 s after its
slot, under load) answers the next round's requester that it is behind (LATER) before any word
of room, and the requester asks again while its slot lasts; a final refusal stays final. It had
answered "server is full", the requester's pair failed REJ, and when its re-test met the same a
healthy link was blamed."""

from __future__ import annotations

from fakerdma import FakeBackend

from rdmacli.engine import session
from rdmacli.engine.protocol import Params
from rdmacli.engine.session import CLIENT, SERVER, run
from rdmacli.engine.settings import DeadlineWords, Timeouts
from rdmacli.mesh.pair import MeshConnectFlow, mesh_flow
from rdmacli.outcome import State
from rdmacli.probe.token import LATER, OFFSET, Token, check
from rdmacli.protocols import hello as H
from rdmacli.protocols import table
from rdmacli.protocols.table import PROTOCOLS
from rdmacli.rdma import constants as C

SLOT = DeadlineWords(overall="the end of this pair's slot", overrun="raise --round-time")
RUN = bytes.fromhex("0123456789abcdef")
THIS, NEXT = Token(RUN, 0, 6, 1), Token(RUN, 1, 7, 1)  # round 0: rank 6 to rank 1; round 1: rank 7


def private(token: Token) -> bytes:
    return (H.Hello(table.CONNECT.hello_kind, 1, 100).pack().ljust(OFFSET, b"\0") + token.pack()).ljust(
        56, b"\0"
    )


def test_a_request_of_a_later_round_is_told_the_listener_is_behind():
    assert check(Token(RUN, 1, 6, 1), THIS) == LATER
    assert check(Token(RUN, 0, 6, 1), Token(RUN, 1, 6, 1)) != LATER  # an earlier round's: stale


def test_a_listener_still_serving_its_round_says_later_not_full_to_the_next_rounds_requester():
    backend = FakeBackend()
    backend.script["listen"] = lambda cm: backend.request(private(THIS)) and []

    def accept(cm, param):
        backend.request(private(NEXT))  # the next round's requester, while this one is served
        return [backend.event(cm, C.ESTABLISHED)]

    backend.script["accept"] = accept
    backend.on_send = lambda cm, wr: backend.deliver(cm, b"e" * wr["length"])
    test = session.Test("mesh-agent", PROTOCOLS["connect"], SERVER, bind="10.0.0.1", port=7490,
                        connections=1, timeouts=Timeouts(overall_s=5, wait_s=5, words=SLOT))  # fmt: skip
    outcome = run(test, backend=backend, factory=lambda t, common: mesh_flow(THIS, None, t, common))
    assert [c.state for c in outcome.connections] == [State.DONE, State.REJECTED], outcome.to_dict()
    assert backend.rejections == [LATER.encode() + b"\0"], backend.rejections


def connector(backend: FakeBackend, answers: list[bytes]) -> session.Test:
    """A mesh requester whose REQs meet these CONSUMER_DEFINED rejections, then its partner."""

    echoed: list = []

    def connect(cm, param):
        if answers:
            return [backend.event(cm, C.REJECTED, 28, private_data=answers.pop(0))]
        backend.then(lambda: [backend.deliver(cm, b"m" * 64) for _ in range(2)])  # ucmatose's server
        return [backend.event(cm, C.ESTABLISHED)]

    def on_send(cm, wr):
        echoed.append(wr)
        if len(echoed) == 2:
            backend.peer_disconnects(cm)

    backend.script["connect"] = connect
    backend.on_send = on_send
    return session.Test("mesh-agent", PROTOCOLS["connect"], CLIENT, Params(count=2, size=64), host="10.0.0.1",
                        port=7490, timeouts=Timeouts(overall_s=5, wait_s=5, words=SLOT))  # fmt: skip


def flow(t, common):
    return session.default_flow(t, common, client=MeshConnectFlow)


def test_the_requester_asks_again_when_its_partners_listener_is_behind():
    backend = FakeBackend()
    test = connector(backend, [LATER.encode() + b"\0", LATER.encode() + b"\0"])
    outcome = run(test, backend=backend, factory=flow)
    assert outcome.error is None and outcome.connections[-1].state == State.DONE, outcome.to_dict()
    assert len(backend.conn_params) == 3


def test_a_final_refusal_is_not_asked_again():
    backend = FakeBackend()
    outcome = run(connector(backend, [b"rdmacli: server is full\0"]), backend=backend, factory=flow)
    err = outcome.run_error()
    assert err is not None and err.details.get("peer_reason") == "rdmacli: server is full", outcome.to_dict()
    assert len(backend.conn_params) == 1
