"""The probe's datagram, laid out once: in the C header (native/datapath.h, `RDMACLI_DG_*`), which
probe.c compiles against and this module reads (native.header), so the Python loop and the C loop
cannot disagree on a byte. Big-endian fields at fixed offsets, zero-padded to the payload.

Each datagram carries a tag: SipHash-2-4 of the bytes before it under a key (the fabric's, from
`watch run --key-file`; the run's, for `mesh --test probe`, handed to the agents in the spec). A
datagram of this format whose tag is wrong is forged (or of another key): dropped and counted,
never answered, never counted as an answer, never let re-target a partner's replies."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rdmacli.native.header import const
from rdmacli.probe.siphash import FORGED, Forged, tag

PROBE, REPLY = const("RDMACLI_PROBE"), const("RDMACLI_REPLY")
MAGIC = const("RDMACLI_DG_MAGIC").to_bytes(4, "big")
SIZE = const("RDMACLI_DG_SIZE")  # the fields' end
PAYLOAD = const("RDMACLI_PROBE_PAYLOAD")  # bytes sent (SIZE, padded)
SLOT = const("RDMACLI_PROBE_SLOT")  # a receive slot: the GRH and the payload
GRH_BYTES = const("RDMACLI_GRH_BYTES")
QKEY = const("RDMACLI_UDP_QKEY")  # rdma_cm's UD QPs' (RDMA_UDP_QKEY)
TAG = const("RDMACLI_DG_TAG")  # the tag's offset: it covers every byte before it
KEY_BYTES = const("RDMACLI_KEY_BYTES")
GRH_SGID, GRH_IP4 = const("RDMACLI_GRH_SGID"), const("RDMACLI_GRH_IP4")
SOURCE_BYTES = const("RDMACLI_SOURCE_BYTES")

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
    ("tag", TAG, "Q"),
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

    def pack(self, key: bytes) -> bytes:
        values = (MAGIC, self.kind, self.run, self.seq, self.src, self.dst, self.t1, self.t2, self.t3, 0)
        raw = FORMAT.pack(*values)[:TAG]
        return (raw + tag(key, raw)).ljust(PAYLOAD, b"\0")


def parse(data: bytes, key: bytes) -> Datagram | Forged | None:
    """A datagram from the wire (anyone's): None unless it is a probe or reply of this format,
    FORGED when its tag is wrong under `key`."""
    if len(data) < SIZE or not data.startswith(MAGIC):
        return None
    _, kind, run, seq, src, dst, t1, t2, t3, _ = FORMAT.unpack(data[:SIZE])
    if kind not in (PROBE, REPLY):
        return None
    if bytes(data[TAG:SIZE]) != tag(key, bytes(data[:TAG])):
        return FORGED
    return Datagram(kind, run, seq, src, dst, t1, t2, t3)


# Where a datagram came from (datagram.c's rdmacli_source, the same bytes): a UD QP number is one
# device's, and another node's QP may have the same, so a partner is its QP number and this.


def _grh_is_ipv4(grh: bytes) -> bool:
    """rdma-core's get_grh_header_version, in short (datagram.c's grh_is_ipv4)."""
    ip = grh[GRH_IP4 : GRH_IP4 + 20]
    if grh[0] >> 4 != 6:
        return ip[0] >> 4 == 4
    if ip[0] != 0x45:
        return False
    total = sum(int.from_bytes(ip[i : i + 2], "big") for i in range(0, 20, 2) if i != 10)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF) == int.from_bytes(ip[10:12], "big")


def source(grh: bytes, has_grh: bool, slid: int) -> bytes:
    """A received datagram's source from its GRH area (`has_grh`: IBV_WC_GRH) and its
    completion's slid: the sender's GID (RoCE v2 over IPv4: ::ffff:a.b.c.d), zeros without a
    GRH, then its LID."""
    if has_grh and _grh_is_ipv4(grh):
        gid = bytes(10) + b"\xff\xff" + bytes(grh[GRH_IP4 + 12 : GRH_IP4 + 16])
    elif has_grh:
        gid = bytes(grh[GRH_SGID : GRH_SGID + 16])
    else:
        gid = bytes(16)
    return gid + (slid & 0xFFFF).to_bytes(2, "big")


def partner_source(is_global: bool, dgid: bytes, dlid: int) -> bytes:
    """Where a partner's QP is, as SIDR's AH reaches it, in source()'s form."""
    return (bytes(dgid[:16]) if is_global else bytes(16)) + (dlid & 0xFFFF).to_bytes(2, "big")


def same_source(partner: bytes, got: bytes) -> bool:
    """A datagram's source is the partner's: by GID where both have one (RoCE; InfiniBand with
    a GRH), else by LID (InfiniBand in one subnet), else not (nothing known of the partner)."""
    if any(partner[:16]) and any(got[:16]):
        return partner[:16] == got[:16]
    if any(partner[16:18]):
        return partner[16:18] == got[16:18]
    return False
