"""The probe's datagram, laid out once: in the C header (native/datapath.h, `RDMACLI_DG_*`), which
probe.c compiles against and this module reads (native.header), so the Python loop and the C loop
cannot disagree on a byte. Big-endian fields at fixed offsets, zero-padded to the payload."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rdmacli.native.header import const

PROBE, REPLY = const("RDMACLI_PROBE"), const("RDMACLI_REPLY")
MAGIC = const("RDMACLI_DG_MAGIC").to_bytes(4, "big")
SIZE = const("RDMACLI_DG_SIZE")  # the fields' end
PAYLOAD = const("RDMACLI_PROBE_PAYLOAD")  # bytes sent (SIZE, padded)
SLOT = const("RDMACLI_PROBE_SLOT")  # a receive slot: the GRH and the payload
GRH_BYTES = const("RDMACLI_GRH_BYTES")
QKEY = const("RDMACLI_UDP_QKEY")  # rdma_cm's UD QPs' (RDMA_UDP_QKEY)

# (field, its offset in the header, its struct code): scapy's fields_desc, the header's numbers
FIELDS = (
    ("magic", 0, "4s"),
    ("kind", const("RDMACLI_DG_KIND"), "B"),
    ("run", const("RDMACLI_DG_RUN"), "8s"),
    ("seq", const("RDMACLI_DG_SEQ"), "I"),
    ("src", const("RDMACLI_DG_SRC"), "I"),
    ("dst", const("RDMACLI_DG_DST"), "I"),
    ("t1", const("RDMACLI_DG_T1"), "Q"),
    ("t2", const("RDMACLI_DG_T2"), "Q"),
    ("t3", const("RDMACLI_DG_T3"), "Q"),
)


def _format() -> struct.Struct:
    """The fields as one big-endian struct, the gaps between them as pad bytes."""
    out, at = ">", 0
    for _, offset, code in FIELDS:
        if offset < at:
            raise ValueError("the header's datagram fields overlap")
        out += f"{offset - at}x" * (offset > at) + code
        at = offset + struct.calcsize(">" + code)
    if at != SIZE:
        raise ValueError(f"the header's datagram fields end at {at}, not RDMACLI_DG_SIZE {SIZE}")
    return struct.Struct(out)


FORMAT = _format()


@dataclass(frozen=True)
class Datagram:
    kind: int
    run: bytes
    seq: int
    src: int  # the prober's NIC (rank * rails + rail)
    dst: int  # the responder's NIC
    t1: int = 0  # the prober's clock at post (ns)
    t2: int = 0  # the responder's at receive
    t3: int = 0  # the responder's at its reply's post

    def pack(self) -> bytes:
        values = (MAGIC, self.kind, self.run, self.seq, self.src, self.dst, self.t1, self.t2, self.t3)
        return FORMAT.pack(*values).ljust(PAYLOAD, b"\0")


def parse(data: bytes) -> Datagram | None:
    """A datagram from the wire (anyone's): None unless it is a probe or reply of this format."""
    if len(data) < SIZE or not data.startswith(MAGIC):
        return None
    _, kind, run, seq, src, dst, t1, t2, t3 = FORMAT.unpack(data[:SIZE])
    if kind not in (PROBE, REPLY):
        return None
    return Datagram(kind, run, seq, src, dst, t1, t2, t3)
