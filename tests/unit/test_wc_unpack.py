"""A CQ's poll reads its batch of struct ibv_wc by one unpack (verbs.WC_BYTES), not a cffi field
access per field: every field it hands on is the one the struct holds, for a receive with
immediate data and a GRH, a send and a failed completion, at every place in the batch."""

from __future__ import annotations

import socket

from rdmacli.rdma import constants as C
from rdmacli.rdma import verbs
from rdmacli.rdma._ffi import ffi

WCS = [  # wr_id, status, opcode, byte_len, imm (network order), qp_num, src_qp, wc_flags, slid
    (1 << 40 | 7, C.WC_SUCCESS, 128, 4096, 0x01020304, 0x11, 0x22, C.WC_WITH_IMM | C.WC_GRH, 0x33),
    (2, C.WC_SUCCESS, 0, 0, 0, 0x12, 0, 0, 0),
    ((1 << 64) - 1, C.WC_WR_FLUSH_ERR, 2, 100, 0xFFFFFFFF, 0xFFFFFF, 0xFFFFFF, C.WC_GRH, 0xFFFF),
]


def test_a_polled_batch_is_what_the_structs_hold():
    f = ffi()
    cq = verbs.CQ.__new__(verbs.CQ)
    cq.ptr, cq.unacked = f.NULL, 0
    cq._wc = f.new("struct ibv_wc[]", cq.POLL_BATCH)

    def poll_cq(ptr, n, wcs):
        for i, (wr_id, status, opcode, length, imm, qpn, src, flags, slid) in enumerate(WCS):
            w = wcs[i]
            w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data = wr_id, status, opcode, length, imm
            w.qp_num, w.src_qp, w.wc_flags, w.slid, w.vendor_err, w.sl = qpn, src, flags, slid, 9, 5
        return len(WCS)

    cq._poll_cq = poll_cq
    got = cq.poll()
    assert [(w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num, w.src_qp, w.slid) for w in got] == [
        (wr_id, status, opcode, length, qpn, src, slid)
        for wr_id, status, opcode, length, _, qpn, src, _, slid in WCS
    ]
    assert [w.imm_data for w in got] == [socket.ntohl(0x01020304), None, None]
    assert [w.grh for w in got] == [True, False, True] and [w.ok for w in got] == [True, True, False]
    assert [int(f.cast("uintptr_t", w.raw)) for w in got] == [
        int(f.cast("uintptr_t", cq._wc + i)) for i in range(3)
    ]  # each its own struct, for ibv_create_ah_from_wc
    cq._poll_cq = lambda ptr, n, wcs: 0
    assert cq.poll() == []
