"""The mesh token: run id, round and ranks, after rdmacli's hello in the connection's private data.

A listener accepts only the partner the schedule names for this round of this run: a request
from an earlier run, an earlier round (a retry that came late) or another node is rejected with
words that travel back to it. Untrusted input: parsed from a fixed offset, checked, never trusted.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
from dataclasses import dataclass

from rdmacli.engine.protocol import Reject
from rdmacli.probe.siphash import FORGED, Forged
from rdmacli.protocols import hello as H

MAGIC = b"MESH"
FORMAT = ">4s8sHII"  # magic, run id, round, from rank, to rank
MAX_ROUND = 0xFFFF  # the round's field: a run numbers its rounds (re-tests too) within it
OFFSET = H.SIZE  # after the hello: 20 + 22 = 42 bytes, inside RC's 56 and SIDR's 180
SIZE = struct.calcsize(FORMAT)


@dataclass(frozen=True)
class Token:
    run: bytes  # 8 bytes
    round: int
    src: int
    dst: int

    def pack(self) -> bytes:
        return struct.pack(FORMAT, MAGIC, self.run, self.round, self.src, self.dst)


def parse(data: bytes) -> Token | None:
    raw = bytes(data[OFFSET : OFFSET + SIZE])
    if len(raw) < SIZE or not raw.startswith(MAGIC):
        return None
    _, run, rnd, src, dst = struct.unpack(FORMAT, raw)
    return Token(run, rnd, src, dst)


def seal(token: Token, key: bytes) -> bytes:
    """The token packed and tagged (SipHash-2-4 under the probe's key): SIDR's private data."""
    from rdmacli.probe.siphash import tag

    raw = token.pack()
    return raw + tag(key, raw)


def opened(data: bytes, key: bytes) -> Token | Forged | None:
    """A SIDR request's token if its tag is right under `key`; FORGED for a token of this format
    whose tag is wrong (or missing: forged, or another key's); None for no token at all. A
    request whose tag is wrong is never answered with this NIC's QP number."""
    from rdmacli.probe.siphash import TAG_BYTES, tag

    got = parse(data)
    if got is None:
        return None
    raw = bytes(data[OFFSET : OFFSET + SIZE + TAG_BYTES])
    if len(raw) < SIZE + TAG_BYTES or raw[SIZE:] != tag(key, raw[:SIZE]):
        return FORGED
    return got


# What a listener still in an earlier round (its agent late) says to the next round's requester,
# before any word of room or stopping: the requester asks again while its slot lasts (a late
# agent's listener once answered "server is full", final, and a healthy link was blamed)
LATER = "rdmacli mesh: a request of a later round than this listener's (ask again)"


def check(got: Token | None, want: Token) -> str | None:
    """Why a request is not the partner this listener waits for, or None. The run id is public
    (every agent and its launcher's logs see it): a reason says what was wrong with the request, and
    echoes nothing this listener expects, so a refusal teaches a forger nothing."""
    if got is None:
        return "rdmacli mesh: not a mesh request (no run id)"
    if got.run != want.run:
        return "rdmacli mesh: a request of another run"
    if got.round > want.round:  # this listener is a late one of an earlier round: its partner's
        return LATER  # own comes up on this port within the slot, and the requester asks again
    if got.round != want.round:
        return f"rdmacli mesh: a request of round {got.round}, not this listener's"
    if (got.src, got.dst) != (want.src, want.dst):
        return f"rdmacli mesh: a request from rank {got.src} for rank {got.dst}, not this listener's partner"
    return None


def same_host(remote: str, address: str) -> bool:
    """A connection's remote "host:port" (or "[v6]:port") is `address`."""
    host = remote.rsplit(":", 1)[0].strip("[]")
    try:
        return ipaddress.ip_address(host) == ipaddress.ip_address(address)
    except ValueError:
        return False


class Guarded:
    """A protocol with the token: appended to its private data (client), checked before its own
    on_request (server). Everything else is the protocol's own."""

    def __init__(self, inner, token: Token, partner: str | None = None):
        self._inner, self._token, self._partner = inner, token, partner  # listener: its address

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def conn_param(self):
        param = self._inner.conn_param()
        pd = (param.private_data or b"").ljust(OFFSET, b"\0")[:OFFSET]
        return dataclasses.replace(param, private_data=pd + self._token.pack())

    def refusal(self, conn, ev) -> str | None:
        """Why a request is not this listener's (only the scheduled partner, from its address,
        for this round and these ranks), or None."""
        if self._partner is not None and not same_host(conn.remote, self._partner):
            return "rdmacli mesh: a request from an address that is not this listener's partner"
        return check(parse(ev.private_data or b""), self._token)

    def on_request(self, conn, ev) -> None:
        reason = self.refusal(conn, ev)
        if reason:
            raise Reject(reason)
        self._inner.on_request(conn, ev)
