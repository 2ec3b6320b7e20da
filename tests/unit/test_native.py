"""The native data path's build and loading (no RDMA here: the loops themselves run in the lab,
tests/lab/test_bw_lat.py, also under the sanitizers)."""

from __future__ import annotations

import pytest

from rdmacli import native


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    native.reset()
    yield
    native.reset()


def test_make_venv_built_it_and_it_loads():
    assert native.load() is not None, native.why()
    ffi, lib = native.load()
    assert lib.rdmacli_now_ns() > 0


def test_the_python_path_when_asked(monkeypatch):
    monkeypatch.setenv(native.ENV, "python")
    assert native.load() is None
    assert native.why() == f"{native.ENV}=python"


def test_a_missing_extension_is_said_not_raised(monkeypatch, tmp_path):
    monkeypatch.setenv(native.MODULE_ENV, str(tmp_path / "nothing.so"))
    assert native.load() is None
    assert "not built" in native.why()


def test_the_loops_refuse_what_they_cannot_bound():
    """No QP, no CQ, a zero cap or size, an unknown op: refused before any verb is called."""
    ffi, lib = native.load()
    s = ffi.new("struct rdmacli_lat *")
    out = ffi.new("uint64_t[]", 1)
    fake = ffi.cast("void *", 1)
    assert lib.rdmacli_lat_client(ffi.NULL, fake, s, out, out, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.size, s.send_addr, s.recv_addr, s.op, s.max_sends = 8, 1, 1, 0, 1
    assert lib.rdmacli_lat_client(fake, fake, s, out, out, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS  # not calibrated
    lib.rdmacli_lat_calibrate(s, 1_000_000)
    assert 0 < s.ns_per_cycle < 100
    assert lib.rdmacli_lat_client(fake, fake, s, out, out, 0, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.max_sends = 0
    assert lib.rdmacli_lat_server(fake, fake, s, ffi.NULL, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.max_sends, s.op = 1, 7
    assert lib.rdmacli_lat_server(fake, fake, s, ffi.NULL, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS


def test_it_builds_with_warnings_as_errors_and_under_the_sanitizers(tmp_path):
    from rdmacli.native._build import CFLAGS, build

    assert "-Werror" in CFLAGS and "-Wextra" in CFLAGS
    path = build(str(tmp_path), sanitize=True)
    assert path.startswith(str(tmp_path)) and path.endswith(".so")


def test_a_slice_never_runs_on_a_connection_that_ended():
    """A slice scheduled before a disconnect was handled must not touch the destroyed QP/CQ
    (the lab saw a responder segfault at teardown)."""
    from types import SimpleNamespace

    from rdmacli.protocols.slices import later

    calls, pending = [], []
    flow = SimpleNamespace(
        loop=SimpleNamespace(call_later=lambda s, fn: pending.append(fn)),
        guarded=lambda conn, fn: calls.append(fn),
    )
    for ended in ({"finished": True}, {"torn_down": True}, {"has_qp": False}, {}):
        conn = SimpleNamespace(flow=flow, finished=False, torn_down=False, cm=SimpleNamespace(has_qp=True))
        later(conn, "slice")
        for k, v in ended.items():
            setattr(conn.cm if k == "has_qp" else conn, k, v)
        pending.pop()()
    assert calls == ["slice"]  # only the connection that lives


def test_the_probe_loop_refuses_what_it_cannot_bound():
    """No QP, no CQ, no buffer, no partners' tables: refused before any verb is called."""
    ffi, lib = native.load()
    s = ffi.new("struct rdmacli_probe *")
    fake = ffi.cast("void *", 1)
    assert lib.rdmacli_probe_turn(ffi.NULL, fake, s) == 0 and s.status == native.BAD_ARGS
    assert lib.rdmacli_probe_turn(fake, fake, s) == 0 and s.status == native.BAD_ARGS
    lib.rdmacli_probe_release(s)  # nothing made: nothing to destroy
    loop = native.ProbeLoop(1, 1, 1, run=b"r" * 8, nic=3, count=4, recvs=8, sends=4, buf=(0x1000, 7),
                            port_num=1, partners=[0, 5, 9])  # fmt: skip
    assert [loop.peer_of_nic[k] for k in range(10)] == [0, -1, -1, -1, -1, 1, -1, -1, -1, 2]
    assert loop.state.nfree == 4 and [loop.free[k] for k in range(4)] == [8, 9, 10, 11]
    assert loop.counts(1) == (0, 0, [], [])
