"""SipHash-2-4 in Python: the probe datagram's tag where the native loop is not built, and the
SIDR token's. The same function as probe.c's (`rdmacli_siphash24`, the reference's), held to it
and to OpenSSL's SIPHASH by a unit test. A keyed MAC for short inputs: with a 128-bit key no
one who lacks it forges a tag but by guessing 64 bits."""

from __future__ import annotations

MASK = (1 << 64) - 1
KEY_BYTES = 16
TAG_BYTES = 8
# the probe's key where none is given (a watch agent without --key-file, an older mesh spec):
# public, so its tags authenticate nothing; the agents say so at start
PUBLIC_KEY = b"rdmacli-probe-v1"


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash24(key: bytes, data: bytes) -> int:
    if len(key) != KEY_BYTES:
        raise ValueError(f"SipHash takes a {KEY_BYTES}-byte key")
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v = [0x736F6D6570736575 ^ k0, 0x646F72616E646F6D ^ k1, 0x6C7967656E657261 ^ k0, 0x7465646279746573 ^ k1]

    def rounds(n: int) -> None:
        v0, v1, v2, v3 = v
        for _ in range(n):
            v0 = (v0 + v1) & MASK
            v1 = _rotl(v1, 13) ^ v0
            v0 = _rotl(v0, 32)
            v2 = (v2 + v3) & MASK
            v3 = _rotl(v3, 16) ^ v2
            v0 = (v0 + v3) & MASK
            v3 = _rotl(v3, 21) ^ v0
            v2 = (v2 + v1) & MASK
            v1 = _rotl(v1, 17) ^ v2
            v2 = _rotl(v2, 32)
        v[:] = [v0, v1, v2, v3]

    end = len(data) - len(data) % 8
    for i in range(0, end, 8):
        m = int.from_bytes(data[i : i + 8], "little")
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    b = (len(data) & 0xFF) << 56 | int.from_bytes(data[end:], "little")
    v[3] ^= b
    rounds(2)
    v[0] ^= b
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


class Forged:
    """What a parser gives for a datagram or token of its format whose tag is wrong under the key."""

    def __repr__(self) -> str:
        return "FORGED"


FORGED = Forged()


def tag(key: bytes, data: bytes) -> bytes:
    """The 8-byte tag of `data` (big-endian, as the datagram's and the SIDR token's carry it)."""
    return siphash24(key, data).to_bytes(TAG_BYTES, "big")
