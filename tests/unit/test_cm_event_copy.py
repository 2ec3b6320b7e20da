"""A CM event copied once, said twice: the native copy (cm.c's rdmacli_cm_get, built as it ships
with librdmacm's get and ack replaced by a script: cm_twin.c) and the field-by-field copy of the
Python path (rdma.cm._copy_event) are given the same struct rdma_cm_event and must come to the
same CmEvent: a connection's parameters and private data, a datagram id's QP number, Q_Key and
address vector, the new cm_id of a request, and every event acknowledged once."""

from __future__ import annotations

import errno
import time

import pytest
import twins

from rdmacli.rdma import cm
from rdmacli.rdma import constants as C
from rdmacli.rdma._ffi import ffi

FIELDS = ("type", "status", "id", "listen_id", "private_data", "responder_resources", "initiator_depth",
          "flow_control", "retry_count", "rnr_retry_count", "srq", "qp_num", "ud_qp_num", "ud_qkey",
          "dgid", "dlid", "sl")  # fmt: skip


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    """cm.c on a scripted librdmacm, compiled as _build compiles it."""
    return twins.build("cm_twin", str(tmp_path_factory.mktemp("cm")), ("cm.c",))


def an_event(kind: int, ps: int, private: bytes = b""):
    """A struct rdma_cm_event as librdmacm hands it out (and what keeps its memory alive)."""
    f = ffi()
    ev, cm_id, listen = (
        f.new("struct rdma_cm_event *"),
        f.new("struct rdma_cm_id *"),
        f.new("struct rdma_cm_id *"),
    )
    cm_id.ps = ps
    ev.id, ev.listen_id, ev.event, ev.status = cm_id, listen, kind, -kind
    data = f.new("char[]", private or b"\0")
    if ps in C.UD_PORT_SPACES:
        ud = ev.param.ud
        ud.private_data, ud.private_data_len = (data, len(private)) if private else (f.NULL, 0)
        ud.qp_num, ud.qkey = 0xABCDE, C.RDMA_UDP_QKEY
        ud.ah_attr.is_global, ud.ah_attr.dlid, ud.ah_attr.sl, ud.ah_attr.port_num = 1, 0x1234, 3, 1
        ud.ah_attr.grh.dgid.raw = bytes(range(0xE0, 0xF0))
        ud.ah_attr.grh.hop_limit, ud.ah_attr.grh.sgid_index = 64, 2
    else:
        conn = ev.param.conn
        conn.private_data, conn.private_data_len = (data, len(private)) if private else (f.NULL, 0)
        conn.responder_resources, conn.initiator_depth, conn.flow_control = 4, 5, 1
        conn.retry_count, conn.rnr_retry_count, conn.srq, conn.qp_num = 6, 7, 1, 0x12345
    return ev, (cm_id, listen, data)


def native_copy(twin, ev):
    twin.lib.twin_cm_next(twin.ffi.cast("void *", cm.ptr_key(ev)), 0)
    return cm._NativeGet(twin.ffi, twin.lib, ffi().NULL).get()


def ah_bytes(got) -> bytes:
    f = ffi()
    return bytes(f.buffer(got.ah_attr, f.sizeof("struct ibv_ah_attr")))


@pytest.mark.parametrize(
    "kind, ps, private",
    [
        (C.CONNECT_REQUEST, C.PS_TCP, b"hello, cmatose" * 4),
        (C.ESTABLISHED, C.PS_TCP, b""),
        (C.REJECTED, C.PS_IB, bytes(range(148))),
        (C.CONNECT_REQUEST, C.PS_UDP, b"sidr"),
        (C.ESTABLISHED, C.PS_UDP, b""),
        (C.MULTICAST_JOIN, C.PS_UDP, b""),
    ],
)
def test_the_native_copy_is_the_python_copy(twin, kind, ps, private):
    ev, _keep = an_event(kind, ps, private)
    acked = twin.lib.twin_cm_acked()
    before = time.monotonic()
    mine = native_copy(twin, ev)
    theirs = cm._copy_event(ev)
    assert twin.lib.twin_cm_acked() == acked + 1  # acknowledged, once
    assert {f: getattr(mine, f) for f in FIELDS} == {f: getattr(theirs, f) for f in FIELDS}
    assert mine.private_data == private and before <= mine.t <= time.monotonic()  # the same clock
    if ps in C.UD_PORT_SPACES:
        assert ah_bytes(mine) == ah_bytes(theirs) and mine.dgid == bytes(range(0xE0, 0xF0))
    else:
        assert mine.ah_attr is None and mine.qp_num == 0x12345
    if kind == C.CONNECT_REQUEST:  # the new cm_id a request carries, for rdma_accept
        assert cm.ptr_key(mine.raw_id) == cm.ptr_key(theirs.raw_id) == mine.id


def test_nothing_pending_is_none_and_a_failed_read_is_said(twin):
    get = cm._NativeGet(twin.ffi, twin.lib, ffi().NULL)
    twin.lib.twin_cm_next(twin.ffi.NULL, 0)
    assert get.get() is None  # EAGAIN: the channel is non-blocking
    twin.lib.twin_cm_next(twin.ffi.NULL, errno.EINTR)
    assert get.get() is None
    twin.lib.twin_cm_next(twin.ffi.NULL, errno.ENODEV)
    with pytest.raises(cm.RdmaCallError) as exc:
        get.get()
    assert exc.value.call == "rdma_get_cm_event" and exc.value.errno == errno.ENODEV
