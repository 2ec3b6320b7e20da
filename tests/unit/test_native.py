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
    assert lib.rdmacli_lat_client(ffi.NULL, fake, s, out, out, out, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.size, s.send_addr, s.recv_addr, s.op, s.max_sends = 8, 1, 1, 0, 1
    assert lib.rdmacli_lat_client(fake, fake, s, out, out, out, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS  # not calibrated
    lib.rdmacli_lat_calibrate(s, 1_000_000)
    assert 0 < s.ns_per_cycle < 100
    assert lib.rdmacli_lat_client(fake, fake, s, out, out, out, 0, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.max_sends = 0
    assert lib.rdmacli_lat_server(fake, fake, s, ffi.NULL, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS
    s.max_sends, s.op = 1, 7
    assert lib.rdmacli_lat_server(fake, fake, s, ffi.NULL, 1, 0, 0) == 0
    assert s.status == native.BAD_ARGS


def test_the_nics_clock_converts_as_the_device_says_and_survives_a_wrap():
    """Completion timestamps: a counter `mask` wide at hca_core_clock kHz (mlx5: 1 GHz and more,
    48 bits or 64); a period that crossed the counter's wrap is still the period."""
    khz = 1_000_000  # 1 GHz: a tick a ns
    assert native.ticks_ns(1000, 3500, (1 << 48) - 1, khz) == 2500
    assert native.ticks_ns((1 << 48) - 100, 400, (1 << 48) - 1, khz) == 500  # wrapped once
    assert native.ticks_ns(0, 156_250, (1 << 64) - 1, 156_250) == 1_000_000  # 156.25 MHz: 1 ms
    assert native.ticks_ns(0, 10, (1 << 48) - 1, 0) == 0  # no rate said: no figure


def test_no_nic_clock_is_asked_of_a_device_that_is_not_there(monkeypatch):
    ffi, lib = native.load()
    mask, khz = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    assert lib.rdmacli_nic_clock(ffi.NULL, mask, khz) != 0
    assert lib.rdmacli_create_cq_ex(ffi.NULL, 8, ffi.NULL, 1) == ffi.NULL
    monkeypatch.setenv(native.CLOCK_ENV, "off")
    assert native.make_cq(1, 8, 0, "mlx5_0") == (None, native.NicClock(why=f"{native.CLOCK_ENV}=off"))
    monkeypatch.setenv(native.ENV, "python")
    native.reset()
    address, clock = native.make_cq(1, 8, 0, "mlx5_0")
    assert address is None and clock.mode == native.CLOCK_HOST and clock.why == f"{native.ENV}=python"


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
    loop = native.ProbeLoop(1, 1, 1, run=b"r" * 8, key=bytes(16), nic=3, count=4, recvs=8, sends=4,
                            buf=(0x1000, 7), port_num=1, partners=[0, 5, 9], replaced=76,
                            max_replies=16)  # fmt: skip
    assert [loop.peer_of_nic[k] for k in range(10)] == [0, -1, -1, -1, -1, 1, -1, -1, -1, 2]
    assert loop.state.nfree == 4 and [loop.free[k] for k in range(4)] == [8, 9, 10, 11]
    assert loop.counts(1) == (0, 0, [], [])


def test_an_answer_nobody_asked_for_is_the_peers_violation_and_a_foreign_qp_is_ours():
    """A native slice that ends on a receive completion of this QP outside the exchange: the
    peer sent it (peer_protocol_violation, never `internal`); a completion of another QP on this
    connection's CQ stays a bug of ours."""
    from types import SimpleNamespace

    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.protocols.slices import go_on

    conn = SimpleNamespace(cm=SimpleNamespace(qp_num=0x42), flow=SimpleNamespace(where=lambda c: "a -> b"))

    def ended(**kw):
        sl = SimpleNamespace(status=native.FOREIGN, err=0x42, wc_opcode=128, wc_wr_id=7)
        for k, v in kw.items():
            setattr(sl, k, v)
        with pytest.raises(RdmacliError) as got:
            go_on(conn, sl)
        return got.value.cause

    assert ended() is Cause.PEER_PROTOCOL  # lat: a receive nobody asked for (err: this QP)
    assert ended(err=0) is Cause.PEER_PROTOCOL  # bw: a receive on a one-way stream (err: its status)
    assert ended(err=0x99, wc_opcode=0) is Cause.INTERNAL  # another QP's send completion
