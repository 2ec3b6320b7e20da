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
