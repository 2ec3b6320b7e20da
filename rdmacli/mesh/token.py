"""The mesh token: run id, round and ranks, after rdmacli's hello in the connection's private data.

A listener accepts only the partner the schedule names for this round of this run: a request
from an earlier run, an earlier round (a retry that came late) or another node is rejected with
words that travel back to it. Untrusted input: parsed from a fixed offset, checked, never trusted.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

from rdmacli.engine.protocol import Reject
from rdmacli.protocols import hello as H

MAGIC = b"MESH"
FORMAT = ">4s8sHII"  # magic, run id, round, from rank, to rank
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


def check(got: Token | None, want: Token) -> str | None:
    """Why a request is not the partner this listener waits for, or None."""
    if got is None:
        return f"rdmacli mesh: not a peer of mesh run {want.run.hex()} (no run id in the request)"
    if got.run != want.run:
        return f"rdmacli mesh: request of another run {got.run.hex()} (this is run {want.run.hex()})"
    if got.round != want.round:
        return f"rdmacli mesh: stale request of round {got.round} (this is round {want.round})"
    if (got.src, got.dst) != (want.src, want.dst):
        return (
            f"rdmacli mesh: rank {got.src} asked for rank {got.dst}; "
            f"round {want.round} pairs {want.src} with {want.dst}"
        )
    return None


class Guarded:
    """A protocol with the token: appended to its private data (client), checked before its own
    on_request (server). Everything else is the protocol's own."""

    def __init__(self, inner, token: Token):
        self._inner, self._token = inner, token

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def conn_param(self):
        param = self._inner.conn_param()
        pd = (param.private_data or b"").ljust(OFFSET, b"\0")[:OFFSET]
        return dataclasses.replace(param, private_data=pd + self._token.pack())

    def on_request(self, conn, ev) -> None:
        reason = check(parse(ev.private_data or b""), self._token)
        if reason:
            raise Reject(reason)
        self._inner.on_request(conn, ev)
