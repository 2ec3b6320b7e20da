"""The probe's datagram said once: native/datapath.h lays it out, probe.c compiles against it and
rdmacli/probe/wire.py reads it. Held together here: every constant Python reads from the header
is the built extension's, any datagram packed by one side is parsed alike by the other, and
both sides' SipHash-2-4 is the reference's and OpenSSL's: a tag made under one key is refused
under any other, by both."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rdmacli import native
from rdmacli.native.header import DEFINES
from rdmacli.probe import wire


@pytest.fixture(scope="module")
def built():
    native.reset()
    got = native.load()
    if got is None:
        pytest.fail(f"the native data path is not built here: {native.why()}")
    return got


def test_every_constant_python_reads_is_the_extensions(built):
    _, lib = built
    assert len(DEFINES) > 20
    for name, value in DEFINES.items():
        if name == "RDMACLI_DATAPATH_H" or not hasattr(lib, name):
            continue
        assert getattr(lib, name) == value, name
    assert {n for n in DEFINES if n.startswith("RDMACLI_DG_")} <= set(dir(lib))


def test_the_fields_end_where_the_header_says_and_fill_the_payload():
    assert wire.FORMAT.size == wire.SIZE <= wire.PAYLOAD <= wire.SLOT - wire.GRH_BYTES
    assert wire.MAGIC == b"RPRB" and wire.QKEY == 0x01234567


u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
kinds = st.sampled_from((wire.PROBE, wire.REPLY))
datagrams = st.builds(wire.Datagram, kinds, st.binary(min_size=8, max_size=8), u32, u32, u32, u64, u64, u64)
keys = st.binary(min_size=16, max_size=16)


@settings(max_examples=200, deadline=None)
@given(datagrams, keys, keys)
def test_python_packs_what_c_parses_and_c_packs_what_python_parses(built, d, key, other):
    ffi, lib = built
    c = ffi.new("struct rdmacli_datagram *")
    raw = d.pack(key)
    assert lib.rdmacli_datagram_parse(ffi.from_buffer(raw), key, c) == 1
    assert (c.kind, bytes(c.run), c.seq, c.src, c.dst, c.t1, c.t2, c.t3) == (
        d.kind, d.run, d.seq, d.src, d.dst, d.t1, d.t2, d.t3)  # fmt: skip
    out = ffi.new("unsigned char[]", wire.PAYLOAD)
    lib.rdmacli_datagram_pack(out, key, c)
    assert bytes(ffi.buffer(out)) == raw and wire.parse(bytes(ffi.buffer(out)), key) == d
    if other != key:  # under another key: forged, to both
        assert lib.rdmacli_datagram_parse(ffi.from_buffer(raw), other, c) == -1
        assert wire.parse(raw, other) is wire.FORGED


@settings(max_examples=200, deadline=None)
@given(datagrams, keys, st.integers(0, wire.TAG + 7), st.integers(1, 255))
def test_a_datagram_changed_in_any_byte_is_forged_to_both(built, d, key, at, flip):
    """A forger who changes what a datagram claims (its source, its sequence, the stamps)
    without the key: never taken, by either loop."""
    ffi, lib = built
    raw = bytearray(d.pack(key))
    raw[at] ^= flip
    got = wire.parse(bytes(raw), key)
    c = ffi.new("struct rdmacli_datagram *")
    assert lib.rdmacli_datagram_parse(ffi.from_buffer(raw), key, c) == (0 if got is None else -1)
    assert got is None or got is wire.FORGED


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=wire.SIZE, max_size=wire.PAYLOAD), keys)
def test_both_refuse_the_same_foreign_bytes(built, raw, key):
    ffi, lib = built
    c = ffi.new("struct rdmacli_datagram *")
    raw = (wire.MAGIC + raw[4:]) if raw[0] % 2 else raw  # half of them past the magic
    got = wire.parse(raw, key)
    assert lib.rdmacli_datagram_parse(ffi.from_buffer(raw), key, c) == (
        0 if got is None else -1 if got is wire.FORGED else 1)  # fmt: skip


def test_siphash_is_the_references_and_openssls(built, tmp_path):
    """The reference's vectors (key 00..0f, messages 00..n-1) and OpenSSL's SIPHASH MAC, for
    Python's implementation and C's, on lengths across the 8-byte blocks."""
    import subprocess

    from rdmacli.probe.siphash import siphash24

    ffi, lib = built
    key = bytes(range(16))
    assert siphash24(key, b"").to_bytes(8, "little").hex() == "310e0edd47db6f72"
    assert siphash24(key, b"\0").to_bytes(8, "little").hex() == "fd67dc93c539f874"
    for n in (0, 1, 7, 8, 9, 15, 16, 17, 52, 63, 64):
        msg = bytes(range(n))
        (tmp_path / "m").write_bytes(msg)
        cmd = ["openssl", "mac", "-macopt", "hexkey:" + key.hex(), "-macopt", "size:8", "-in",
               str(tmp_path / "m"), "SIPHASH"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        want = bytes.fromhex(out.stdout.strip())
        assert siphash24(key, msg).to_bytes(8, "little") == want, n
        assert lib.rdmacli_siphash24(key, msg, n) == siphash24(key, msg), n


def ipv4_grh(src: str, *, first: bytes = bytes(20), checksum: bool = False) -> bytes:
    """A GRH area as rxe and mlx5 fill it for RoCE v2 over IPv4: `first` (zeros), then an IPv4
    header from `src` (its checksum right when asked)."""
    import ipaddress

    ip = bytearray(20)
    ip[0], ip[8], ip[9], ip[12:16] = 0x45, 64, 17, ipaddress.IPv4Address(src).packed
    if checksum:
        total = sum(int.from_bytes(ip[i : i + 2], "big") for i in range(0, 20, 2))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        ip[10:12] = (~total & 0xFFFF).to_bytes(2, "big")
    return first + bytes(ip)


def test_a_datagrams_source_is_its_senders_gid_or_lid_as_each_fabric_carries_it():
    """Where a datagram came from: a UD QP number is one device's (in the lab a forger's QP on
    another node had a partner's number, and was taken for it). RoCE v2 over IPv4: the IPv4
    header's source, as ::ffff:a.b.c.d; a GRH (InfiniBand, RoCE over IPv6): its source GID;
    InfiniBand without a GRH: the LID. rdma-core's rule where the first word says version 6: an
    IPv4 header with a right checksum still counts."""
    import ipaddress

    v4 = ipaddress.IPv6Address("::ffff:10.77.1.16").packed
    assert wire.source(ipv4_grh("10.77.1.16"), True, 0) == v4 + bytes(2)
    gid = bytes.fromhex("fe80000000000000021122fffe334455")
    grh = bytes([0x60]) + bytes(7) + gid + bytes(16)
    assert wire.source(grh, True, 0x1234) == gid + b"\x12\x34"
    assert wire.source(bytes(40), False, 0x22) == bytes(16) + b"\x00\x22"
    six = bytes([0x60]) + bytes(19)
    assert wire.source(ipv4_grh("10.0.0.7", first=six, checksum=True), True, 0)[12:16] == bytes([10, 0, 0, 7])
    assert wire.source(ipv4_grh("10.0.0.7", first=six), True, 0)[:1] == b"\0"  # no checksum: the GRH's
    roce = wire.partner_source(True, v4, 0)
    ib = wire.partner_source(False, bytes(16), 0x22)
    assert wire.same_source(roce, wire.source(ipv4_grh("10.77.1.16"), True, 0))
    assert not wire.same_source(roce, wire.source(ipv4_grh("10.77.1.14"), True, 0))
    assert wire.same_source(ib, wire.source(grh, True, 0x22))  # a GRH it did not say: by LID
    assert not wire.same_source(ib, wire.source(bytes(40), False, 0x23))
    assert not wire.same_source(b"", wire.source(bytes(40), False, 0))  # nothing known: never


sources = st.tuples(st.binary(min_size=40, max_size=40), st.booleans(), st.integers(0, 0xFFFF))


@settings(max_examples=300, deadline=None)
@given(sources, st.binary(min_size=18, max_size=18), st.sampled_from(["10.1.2.3", "192.0.2.9"]))
def test_c_and_python_find_the_same_source_and_the_same_partner(built, got, partner, addr):
    ffi, lib = built
    grh, has_grh, slid = got
    for area in (grh, ipv4_grh(addr), ipv4_grh(addr, first=bytes([0x60]) + grh[1:20], checksum=True)):
        out = ffi.new("unsigned char[]", wire.SOURCE_BYTES)
        lib.rdmacli_source(area, int(has_grh), slid, out)
        src = wire.source(area, has_grh, slid)
        assert bytes(ffi.buffer(out)) == src
        assert bool(lib.rdmacli_same_source(partner, src)) == wire.same_source(partner, src)
        assert bool(lib.rdmacli_same_source(src, src)) == (any(src[:16]) or any(src[16:]))
