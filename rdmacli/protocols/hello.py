"""rdmacli's hello: the client's parameters in the CM private data (so options need not match).

The C tools send no private data and ignore what they receive, so the hello is harmless to them;
an rdmacli server that finds it adopts the client's count and size, or rejects with a reason.
On IB/RoCE the REQ's private data arrives zero-padded to 56 bytes (UD SIDR REQ: 180), so only the
leading 20 bytes matter. Everything here is untrusted input and is validated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rdmacli.protocols.table import rows

MAGIC = b"RDMACLI"
VERSION = 1
FORMAT = ">7sBBBHII"  # magic, version, kind, flags, group, count, size
SIZE = struct.calcsize(FORMAT)  # 20
# a hello's kind: the number its protocol's row says (protocols/table.py: Spec.hello_kind)
KIND_NAMES = {s.hello_kind: s.name for s in rows() if s.hello_kind is not None}

MAX_COUNT = 1_000_000
MAX_SIZE = 64 * 1024 * 1024
# the connections one client opens as one test (bw --qps, connect -c), said in its hello so that a
# server counts them as one client; a server takes at most this many from one client unasked
MAX_GROUP = 64


@dataclass(frozen=True)
class Hello:
    kind: int
    count: int
    size: int
    flags: int = 0
    group: int = 1  # connections of this client's test, this one included (0 on the wire: 1)

    def pack(self) -> bytes:
        group = min(max(self.group, 1), 0xFFFF)
        return struct.pack(FORMAT, MAGIC, VERSION, self.kind, self.flags, group, self.count, self.size)


def parse(data: bytes) -> Hello | None:
    """The hello in a private data area, or None when the peer sent none (a C tool)."""
    if len(data) < SIZE or not data.startswith(MAGIC):
        return None
    magic, version, kind, flags, group, count, size = struct.unpack(FORMAT, data[:SIZE])
    if version != VERSION:
        return None
    return Hello(kind=kind, count=count, size=size, flags=flags, group=max(group, 1))


def companions(data: bytes, kind: int) -> int:
    """How many connections (this one included) the client opens as one test, as its hello
    says, within MAX_GROUP; 1 for a C client or another kind's hello."""
    hello = parse(data)
    if hello is None or hello.kind != kind:
        return 1
    return min(hello.group, MAX_GROUP)


OP_MASK = 0x0F  # bw and lat: the operation in the flags' low bits, options above them
BIDIR = 0x10  # bw: the server sends too


def operation(
    data: bytes, kind: int, max_size: int, ops: dict[int, str], min_size: int, options: int = 0
) -> tuple[str, int, int]:
    """bw and lat: the (operation, size, option bits) a client's hello asks for; anything else
    (an unknown operation or option) is refused with words (the caller's Reject). Those servers
    serve rdmacli clients only."""
    from rdmacli.engine.protocol import Reject

    hello = parse(data)
    name = KIND_NAMES[kind]
    if hello is None:
        raise Reject(f"rdmacli: a {name} server needs an rdmacli {name} client (its hello)")
    reason = check(hello, kind, max_size)
    if reason:
        raise Reject(reason)
    op, extra = hello.flags & OP_MASK, hello.flags & ~OP_MASK
    if op not in ops or extra & ~options or hello.size < min_size:
        raise Reject(f"rdmacli: bad {name} request (flags {hello.flags:#x}, size {hello.size})")
    return ops[op], hello.size, extra


def check(hello: Hello, expected_kind: int, max_size: int = MAX_SIZE) -> str | None:
    """A reason to reject this hello, or None if it is acceptable."""
    if hello.kind != expected_kind:
        want = KIND_NAMES.get(expected_kind, "?")
        got = KIND_NAMES.get(hello.kind, f"kind {hello.kind}")
        return f"rdmacli: this server speaks {want}, the client asked for {got}"
    if hello.count > MAX_COUNT:
        return f"rdmacli: count {hello.count} exceeds the server limit {MAX_COUNT}"
    if hello.size > max_size:
        return f"rdmacli: size {hello.size} exceeds the server limit {max_size}"
    return None
