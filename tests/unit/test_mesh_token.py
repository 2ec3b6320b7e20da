"""The mesh token in the private data: a listener takes only this round's partner of this run."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rdmacli.engine.protocol import Reject
from rdmacli.probe.token import OFFSET, Guarded, Token, check, parse
from rdmacli.protocols import hello as H
from rdmacli.protocols import table
from rdmacli.protocols.cmatose import CmatoseClient, CmatoseServer

RUN = bytes.fromhex("0123456789abcdef")
WANT = Token(RUN, 3, 5, 2)  # round 3: rank 5 connects to rank 2


HELLO = H.Hello(table.CONNECT.hello_kind, 10, 100)


def request(token: Token | None, hello: H.Hello = HELLO) -> SimpleNamespace:
    pd = hello.pack().ljust(OFFSET, b"\0") + (token.pack() if token else b"")
    return SimpleNamespace(private_data=pd.ljust(56, b"\0"))  # RC's REQ arrives padded to 56


def test_the_client_appends_the_token_after_its_hello_within_rc_private_data():
    param = Guarded(CmatoseClient(10, 100), WANT).conn_param()
    assert len(param.private_data) <= 56
    assert H.parse(param.private_data) == H.Hello(table.CONNECT.hello_kind, 10, 100)
    assert parse(param.private_data) == WANT


@pytest.mark.parametrize(
    "token, words",
    [
        (None, "no run id"),
        (Token(bytes(8), 3, 5, 2), "another run"),
        (Token(RUN, 2, 5, 2), "a request of round 2, not this listener's"),
        (Token(RUN, 3, 6, 2), "from rank 6 for rank 2, not this listener's partner"),
    ],
)
def test_a_stale_or_foreign_request_is_rejected_with_words(token, words):
    server = Guarded(CmatoseServer(), WANT)
    with pytest.raises(Reject, match=words):
        server.on_request(None, request(token))
    reason = check(parse(request(token).private_data), WANT)
    assert words in reason
    # the run id is public; what this listener expects is not echoed to a forger
    assert RUN.hex() not in reason and "round 3" not in reason and "5" not in reason


def test_a_request_from_another_address_is_refused_even_with_the_right_token():
    from types import SimpleNamespace

    server = Guarded(CmatoseServer(), WANT, partner="10.0.0.5")
    with pytest.raises(Reject, match="an address that is not this listener's partner"):
        server.on_request(SimpleNamespace(remote="10.0.0.66:4242"), request(WANT))
    server.on_request(
        SimpleNamespace(remote="10.0.0.5:4242"), request(WANT, H.Hello(table.CONNECT.hello_kind, 7, 64))
    )
    assert (server.count, server.size) == (7, 64)
    v6 = Guarded(CmatoseServer(), WANT, partner="fd77::5")
    v6.on_request(SimpleNamespace(remote="[fd77:0::5]:4242"), request(WANT))


def test_the_partner_is_accepted_and_its_hello_still_read():
    server = Guarded(CmatoseServer(), WANT)
    server.on_request(None, request(WANT, H.Hello(table.CONNECT.hello_kind, 7, 64)))
    assert (server.count, server.size) == (7, 64)


def test_garbage_private_data_is_no_token():
    assert parse(b"") is None and parse(b"\xff" * 56) is None and parse(b"MESH") is None
