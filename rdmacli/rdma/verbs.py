"""Completion channels, CQs, memory regions and the data path.

ibv_post_send/ibv_post_recv/ibv_poll_cq/ibv_req_notify_cq are static inline in verbs.h and go
through ctx->ops; they are called here through those function pointers. Every local SGE is
checked against its own MR, so no peer input can make rdmacli touch memory outside its buffers.
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
import socket
import struct
import threading
from dataclasses import dataclass

from rdmacli.rdma import constants as C
from rdmacli.rdma._ffi import ffi, ibverbs
from rdmacli.rdma.cm import RdmaCallError, check
from rdmacli.rdma.handle import Handle


@dataclass
class WorkCompletion:
    wr_id: int
    status: int
    opcode: int
    byte_len: int
    imm_data: int | None  # host order, when the completion carries immediate data
    qp_num: int
    src_qp: int
    raw: object = None  # cdata struct ibv_wc * (for ibv_create_ah_from_wc)
    grh: bool = False  # a UD receive: its buffer starts with the sender's GRH (IBV_WC_GRH)
    slid: int = 0  # a UD receive: the sender's LID (InfiniBand)

    @property
    def ok(self) -> bool:
        return self.status == C.WC_SUCCESS

    @property
    def status_str(self) -> str:
        return ffi().string(ibverbs().ibv_wc_status_str(self.status)).decode()


@dataclass(frozen=True)
class DeviceLimits:
    """What ibv_query_device says a device can hold: queue and CQ depths are bounded by these."""

    max_qp_wr: int
    max_cqe: int
    max_mr_size: int


def query_limits(context) -> DeviceLimits | None:
    f = ffi()
    if context == f.NULL:
        return None
    buf = f.new("char[]", 512)  # covers the whole struct ibv_device_attr of any rdma-core
    if ibverbs().ibv_query_device(context, buf) != 0:
        return None
    attr = f.cast("struct ibv_device_attr *", buf)
    return DeviceLimits(max_qp_wr=attr.max_qp_wr, max_cqe=attr.max_cqe, max_mr_size=attr.max_mr_size)


class CompChannel(Handle):
    kind = "completion channel"

    def __init__(self, verbs):
        f = ffi()
        ch = ibverbs().ibv_create_comp_channel(verbs)
        if ch == f.NULL:
            raise RdmaCallError("ibv_create_comp_channel", f.errno)
        self.ptr = ch
        fl = fcntl.fcntl(ch.fd, fcntl.F_GETFL)
        fcntl.fcntl(ch.fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)

    @property
    def fd(self) -> int:
        return self.ptr.fd

    def get_event(self):
        """The CQ that has a completion event, or None (non-blocking)."""
        f = ffi()
        pcq, pctx = f.new("struct ibv_cq **"), f.new("void **")
        if ibverbs().ibv_get_cq_event(self.ptr, pcq, pctx) != 0:
            if f.errno in (_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EINTR):
                return None
            raise RdmaCallError("ibv_get_cq_event", f.errno)
        return pcq[0]

    def _free(self) -> None:  # the CQs made on it hang on it (CQ.__init__): gone before it
        check(ibverbs().ibv_destroy_comp_channel(self.ptr), "ibv_destroy_comp_channel")


# struct ibv_wc as bytes (_cdef.py's layout, 48 bytes; CQ._take checks the size): a batch of
# completions read by one unpack, not a cffi field access per field per completion
WC_BYTES = struct.Struct("=QiiIIIIIIHHBBxx")


class CQ(Handle):
    kind = "CQ"
    clock = None  # how a native loop times this CQ's completions (rdmacli.native.NicClock)

    def __init__(self, verbs, cqe: int, channel: CompChannel | None):
        f = ffi()
        cq = ibverbs().ibv_create_cq(verbs, cqe, f.NULL, channel.ptr if channel else f.NULL, 0)
        if cq == f.NULL:
            raise RdmaCallError("ibv_create_cq", f.errno)
        self._take(cq, channel)

    @classmethod
    def adopt(cls, address: int, channel: CompChannel) -> CQ:
        """A CQ made elsewhere on `channel` (rdmacli.native's ibv_cq_ex, as the struct ibv_cq *
        that polls, arms and destroys it as any CQ), owned from here on."""
        cq = cls.__new__(cls)
        cq._take(ffi().cast("struct ibv_cq *", address), channel)
        return cq

    def _take(self, cq, channel: CompChannel | None) -> None:
        """Its pointer, and its place on the completion channel it was made on: closed with it."""
        if channel is not None:
            channel.own(self)
        self.ptr = cq
        self.unacked = 0
        self._wc = ffi().new("struct ibv_wc[]", self.POLL_BATCH)
        if ffi().sizeof("struct ibv_wc") != WC_BYTES.size:  # _cdef.py and WC_BYTES disagree
            raise AssertionError("struct ibv_wc is not the layout verbs.WC_BYTES reads")
        self._poll_cq = cq.context.ops.poll_cq

    POLL_BATCH = 32

    ACK_BATCH = 32  # ibv_ack_cq_events takes a mutex: acknowledge completion events in batches

    def ack_events(self, n: int) -> None:
        """Count n completion events read from the channel; acknowledge them in batches."""
        self.unacked += n
        if self.unacked >= self.ACK_BATCH:
            ibverbs().ibv_ack_cq_events(self.ptr, self.unacked)
            self.unacked = 0

    def req_notify(self) -> None:
        check(self.ptr.context.ops.req_notify_cq(self.ptr, 0), "ibv_req_notify_cq")

    def poll(self) -> list[WorkCompletion]:
        """Up to POLL_BATCH completions. A completion's `raw` points into this CQ's own array:
        valid until the next poll (long enough for ibv_create_ah_from_wc in its handler)."""
        wcs = self._wc
        n = self._poll_cq(self.ptr, self.POLL_BATCH, wcs)
        if n < 0:
            raise RdmaCallError("ibv_poll_cq", _errno.EIO)
        if n == 0:
            return []
        out = []
        rows = WC_BYTES.iter_unpack(ffi().buffer(wcs, n * WC_BYTES.size))
        for i, row in enumerate(rows):
            wr_id, status, opcode, _, byte_len, imm, qp_num, src_qp, flags, _, slid, _, _ = row
            out.append(
                WorkCompletion(
                    wr_id, status, opcode, byte_len, socket.ntohl(imm) if flags & C.WC_WITH_IMM else None,
                    qp_num, src_qp, wcs + i, bool(flags & C.WC_GRH), slid,
                )
            )  # fmt: skip
        return out

    def _free(self) -> None:
        if self.unacked:
            ibverbs().ibv_ack_cq_events(self.ptr, self.unacked)
            self.unacked = 0
        check(ibverbs().ibv_destroy_cq(self.ptr), "ibv_destroy_cq")


class MR(Handle):
    """A buffer rdmacli owns, registered on a PD."""

    kind = "memory region"

    def __init__(self, pd, size: int, access: int):
        f = ffi()
        self.length = size
        self.buf = f.new("char[]", max(size, 1))
        mr = ibverbs().ibv_reg_mr(pd, self.buf, max(size, 1), access)
        if mr == f.NULL:
            raise RdmaCallError("ibv_reg_mr", f.errno)
        self.ptr = mr
        self.addr = int(f.cast("uintptr_t", self.buf))
        self.lkey = mr.lkey

    @property
    def rkey(self) -> int:
        return self.ptr.rkey

    def _bounds(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"[{offset}, {offset + length}) is outside the {self.length}-byte buffer")

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        length = self.length - offset if length is None else length
        self._bounds(offset, length)
        return bytes(ffi().buffer(self.buf + offset, length))

    def write(self, data: bytes, offset: int = 0) -> None:
        self._bounds(offset, len(data))
        ffi().memmove(self.buf + offset, data, len(data))

    def _free(self) -> None:
        check(ibverbs().ibv_dereg_mr(self.ptr), "ibv_dereg_mr")

    dereg = Handle.destroy  # verbs' word for it


class AH(Handle):
    """An address handle: from a CM event's ah_attr (ibv_create_ah) or from a received WC + GRH."""

    kind = "address handle"

    def __init__(self, ptr):
        self.ptr = ptr

    @classmethod
    def from_attr(cls, pd, ah_attr) -> AH:
        f = ffi()
        ah = ibverbs().ibv_create_ah(pd, ah_attr)
        if ah == f.NULL:
            raise RdmaCallError("ibv_create_ah", f.errno)
        return cls(ah)

    @classmethod
    def from_wc(cls, pd, wc: WorkCompletion, grh_addr: int, port_num: int) -> AH:
        f = ffi()
        ah = ibverbs().ibv_create_ah_from_wc(pd, wc.raw, f.cast("struct ibv_grh *", grh_addr), port_num)
        if ah == f.NULL:
            raise RdmaCallError("ibv_create_ah_from_wc", f.errno)
        return cls(ah)

    def _free(self) -> None:
        check(ibverbs().ibv_destroy_ah(self.ptr), "ibv_destroy_ah")


# Work request chains already built, by their shape: a post of the same shape as an earlier one
# (a ping-pong's every message, a bandwidth test's every chain, each connection's receives of a
# `connect -c N`) reposts the same memory. Every WR of a chain points at one scatter-gather entry,
# written just before each post (where the buffer is: it differs by connection). ibv_post_send and
# ibv_post_recv copy WRs and their SGEs into the queue before they return and never change them,
# so a built chain can be posted any number of times, but only by one thread at a time: the probe
# runs a thread per rail, and cffi lets go of the GIL inside the post, so one thread's SGE written
# while another's post reads it would send the other's buffer (a protection error on the wire).
# Hence one cache per thread.
class _Chains(threading.local):
    """This thread's chains, by shape (a new thread starts with none)."""

    def __init__(self) -> None:
        self.built: dict[tuple, tuple] = {}


_PER_THREAD = _Chains()
MAX_BUILT = 256  # shapes of post kept at once (a run uses a handful); the cache starts over past it


def _built(key: tuple, build) -> tuple:
    cache = _PER_THREAD.built
    got = cache.get(key)
    if got is None:
        if len(cache) >= MAX_BUILT:
            cache.clear()
        got = cache[key] = build()
    return got


def post_recv(qp, wr_id: int, mr: MR, offset: int = 0, length: int | None = None, *, n: int = 1) -> None:
    """Post n receives of the same buffer, chained into one ibv_post_recv call."""
    length = mr.length - offset if length is None else length
    mr._bounds(offset, length)

    def build() -> tuple:
        f = ffi()
        sge, wrs = f.new("struct ibv_sge *"), f.new("struct ibv_recv_wr[]", n)
        for i in range(n):
            wr = wrs[i]
            wr.wr_id, wr.sg_list, wr.num_sge = wr_id, sge, 1
            if i + 1 < n:
                wr.next = wrs + i + 1
        return wrs, sge, f.new("struct ibv_recv_wr **")

    wrs, sge, bad = _built(("recv", wr_id, n), build)
    sge.addr, sge.length, sge.lkey = mr.addr + offset, length, mr.lkey
    rc = qp.context.ops.post_recv(qp, wrs, bad)
    if rc:
        raise RdmaCallError("ibv_post_recv", rc)


def post_recv_slots(qp, mr: MR, slots, size: int) -> None:
    """One receive for each slot (wr_id = slot, `size` bytes at slot * size of mr), chained into
    one ibv_post_recv call: a thousand receives posted one call each cost seconds of an emulated
    CPU (the probe's NICs, sixteen agents at once in the lab)."""
    slots = list(slots)
    if not slots:
        return
    for slot in (min(slots), max(slots)):
        mr._bounds(slot * size, size)
    f = ffi()
    n = len(slots)
    sges, wrs = f.new("struct ibv_sge[]", n), f.new("struct ibv_recv_wr[]", n)
    base, lkey = mr.addr, mr.lkey
    for i, slot in enumerate(slots):
        sge, wr = sges[i], wrs[i]
        sge.addr, sge.length, sge.lkey = base + slot * size, size, lkey
        wr.wr_id, wr.sg_list, wr.num_sge = slot, sges + i, 1
        if i + 1 < n:
            wr.next = wrs + i + 1
    rc = qp.context.ops.post_recv(qp, wrs, f.new("struct ibv_recv_wr **"))
    if rc:
        raise RdmaCallError("ibv_post_recv", rc)


def post_send(
    qp,
    wr_id: int,
    mr: MR,
    offset: int,
    length: int,
    *,
    n: int = 1,
    opcode: int = C.WR_SEND,
    signaled: bool = True,
    imm: int | None = None,
    remote_addr: int | None = None,
    rkey: int | None = None,
    ah=None,
    remote_qpn: int = 0,
    remote_qkey: int = 0,
) -> None:
    """Post n identical sends chained into one ibv_post_send call (one doorbell); `signaled`
    asks for a completion of the last (a QP made with sq_sig_all signals every one)."""
    if length:
        mr._bounds(offset, length)

    def build() -> tuple:
        f = ffi()
        wrs, sge = f.new("struct ibv_send_wr[]", n), f.new("struct ibv_sge *")
        imm_be = socket.htonl(imm) if imm is not None else None
        for i in range(n):
            wr = wrs[i]
            wr.wr_id, wr.opcode = wr_id, opcode
            if length:
                wr.sg_list, wr.num_sge = sge, 1
            if signaled and i == n - 1:
                wr.send_flags = C.SEND_SIGNALED
            if imm_be is not None:
                wr.imm_data = imm_be
            if remote_addr is not None:
                wr.wr.rdma.remote_addr, wr.wr.rdma.rkey = remote_addr, rkey
            if ah is not None:
                wr.wr.ud.ah, wr.wr.ud.remote_qpn, wr.wr.ud.remote_qkey = ah, remote_qpn, remote_qkey
            if i + 1 < n:
                wr.next = wrs + i + 1
        return wrs, sge, f.new("struct ibv_send_wr **")

    if ah is None:  # an address handle's life is the caller's: such posts are built each time
        shape = ("send", wr_id, n, opcode, signaled, imm, remote_addr, rkey, bool(length))
        wrs, sge, bad = _built(shape, build)
    else:
        wrs, sge, bad = build()
    if length:
        sge.addr, sge.length, sge.lkey = mr.addr + offset, length, mr.lkey
    rc = qp.context.ops.post_send(qp, wrs, bad)
    if rc:
        raise RdmaCallError("ibv_post_send", rc)
