"""The probe's datagram said once: native/datapath.h lays it out, probe.c compiles against it and
rdmacli/probe/wire.py reads it. Held together here: every constant Python reads from the header
is the built extension's, and any datagram packed by one side is parsed alike by the other."""

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


@settings(max_examples=200, deadline=None)
@given(datagrams)
def test_python_packs_what_c_parses_and_c_packs_what_python_parses(built, d):
    ffi, lib = built
    c = ffi.new("struct rdmacli_datagram *")
    raw = d.pack()
    assert lib.rdmacli_datagram_parse(ffi.from_buffer(raw), c) == 1
    assert (c.kind, bytes(c.run), c.seq, c.src, c.dst, c.t1, c.t2, c.t3) == (
        d.kind, d.run, d.seq, d.src, d.dst, d.t1, d.t2, d.t3)  # fmt: skip
    out = ffi.new("unsigned char[]", wire.PAYLOAD)
    lib.rdmacli_datagram_pack(out, c)
    assert bytes(ffi.buffer(out)) == raw and wire.parse(bytes(ffi.buffer(out))) == d


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=wire.SIZE, max_size=wire.PAYLOAD))
def test_both_refuse_the_same_foreign_bytes(built, raw):
    ffi, lib = built
    c = ffi.new("struct rdmacli_datagram *")
    raw = (wire.MAGIC + raw[4:]) if raw[0] % 2 else raw  # half of them past the magic
    assert bool(lib.rdmacli_datagram_parse(ffi.from_buffer(raw), c)) == (wire.parse(raw) is not None)
