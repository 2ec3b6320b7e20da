"""librdmacm objects as small Python classes: event channel, cm ids, copied events.

Events are copied into plain dataclasses and acknowledged at once: the copy outlives the C
event, and no unacked event can make rdma_destroy_id block (rdma_get_cm_event(3)).
"""

from __future__ import annotations

import errno as _errno
import fcntl
import os
import time
from dataclasses import dataclass, field

from rdmacli.errors import EnvironmentProblem, no_device
from rdmacli.rdma import addr as _addr
from rdmacli.rdma import constants as C
from rdmacli.rdma._ffi import ffi, ibverbs, rdmacm
from rdmacli.rdma.handle import KERNEL_ERRNOS as KERNEL_ERRNOS  # the engine's names for them, as before
from rdmacli.rdma.handle import Handle
from rdmacli.rdma.handle import RdmaCallError as RdmaCallError
from rdmacli.rdma.handle import errno_text as errno_text


def check(rc: int, call: str) -> None:
    if rc != 0:
        raise RdmaCallError(call, ffi().errno or _errno.EIO)


def ptr_key(ptr) -> int:
    return int(ffi().cast("uintptr_t", ptr))


@dataclass
class ConnParam:
    """struct rdma_conn_param, in Python. Defaults are rdma_connect(id, NULL)'s."""

    private_data: bytes = b""
    responder_resources: int = 1
    initiator_depth: int = 1
    flow_control: int = 0
    retry_count: int = 7
    rnr_retry_count: int = 7
    srq: int = 0
    qp_num: int = 0

    def to_c(self):
        f = ffi()
        p = f.new("struct rdma_conn_param *")
        if self.private_data:
            keep = f.new("char[]", self.private_data)
            p.private_data = keep
            p.private_data_len = len(self.private_data)
            self._keep = keep  # alive until the call returns
        for name in ("responder_resources", "initiator_depth", "flow_control", "retry_count",
                     "rnr_retry_count", "srq", "qp_num"):  # fmt: skip
            setattr(p, name, getattr(self, name))
        return p


@dataclass
class CmEvent:
    """A copy of struct rdma_cm_event, with the fields rdma_get_cm_event(3) documents."""

    type: int
    status: int
    id: int  # the rdma_cm_id pointer as an int: the key that ties an event to its connection
    listen_id: int
    t: float  # time.monotonic() when it was read
    private_data: bytes = b""
    responder_resources: int = 0
    initiator_depth: int = 0
    flow_control: int = 0
    retry_count: int = 0
    rnr_retry_count: int = 0
    srq: int = 0
    qp_num: int = 0
    ud_qp_num: int | None = None
    ud_qkey: int | None = None
    ah_attr: object = field(default=None, repr=False)  # cdata struct ibv_ah_attr copy (UD)
    dgid: bytes = b""  # UD: the path's destination GID (a multicast join: the MGID)
    dlid: int = 0
    sl: int = 0
    raw_id: object = field(default=None, repr=False)  # cdata rdma_cm_id * (for CONNECT_REQUEST)

    @property
    def name(self) -> str:
        return C.event_name(self.type)

    def params(self) -> dict:
        """The event's data for display and JSON (only for events that carry any)."""
        if self.type not in C.EVENTS_WITH_DATA:
            return {}
        d = {"private_data_len": len(self.private_data)}
        if self.type == C.REJECTED:
            return d
        if self.ud_qp_num is not None:
            d.update(qp_num=self.ud_qp_num, qkey=self.ud_qkey)
        else:
            d.update(
                responder_resources=self.responder_resources,
                initiator_depth=self.initiator_depth,
                flow_control=self.flow_control,
                retry_count=self.retry_count,
                rnr_retry_count=self.rnr_retry_count,
                srq=self.srq,
                qp_num=self.qp_num,
            )
        return d


def let_go_of_removed_devices() -> None:
    """librdmacm keeps a device's verbs context open while it lists the device, and lists it
    until something asks again (rdma_get_devices syncs its list with the kernel's): a device
    removed under a long-running process stays open in it after its cm_ids are gone, and a
    driver without disassociate (rxe) finishes the removal only when every process closed the
    device. Asking once, after the removed device's ids are destroyed, closes it."""
    lib, f = rdmacm(), ffi()
    devices = lib.rdma_get_devices(f.NULL)
    if devices != f.NULL:
        lib.rdma_free_devices(devices)


class EventChannel(Handle):
    kind = "CM event channel"

    def __init__(self):
        lib, f = rdmacm(), ffi()
        ch = lib.rdma_create_event_channel()
        if ch == f.NULL:
            err = f.errno
            if err == _errno.ENODEV:
                raise no_device("rdma_create_event_channel: ENODEV")
            if err in (_errno.EACCES, _errno.EPERM):
                raise EnvironmentProblem(
                    "permission denied opening /dev/infiniband/rdma_cm",
                    hint='run with access to /dev/infiniband/* (udev rule MODE="0666" or root)',
                )
            raise EnvironmentProblem(
                f"rdma_create_event_channel failed: {os.strerror(err)}",
                hint="is rdma_ucm loaded? `modprobe rdma_ucm`",
            )
        self.ptr = ch
        self._native: _NativeGet | bool | None = None  # decided at the first get()
        flags = fcntl.fcntl(ch.fd, fcntl.F_GETFL)
        fcntl.fcntl(ch.fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)

    @property
    def fd(self) -> int:
        return self.ptr.fd

    def get(self) -> CmEvent | None:
        """The next event, copied and acknowledged, or None if none is pending: in one native
        call where the extension is built (rdmacli.native's cm.c), else field by field."""
        if self._native is None:
            self._native = _NativeGet.of(self.ptr) or False
        if self._native:
            return self._native.get()
        lib, f = rdmacm(), ffi()
        pev = f.new("struct rdma_cm_event **")
        if lib.rdma_get_cm_event(self.ptr, pev) != 0:
            err = f.errno
            if err in (_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EINTR):
                return None
            raise RdmaCallError("rdma_get_cm_event", err)
        ev = pev[0]
        try:
            out = _copy_event(ev)
        finally:
            lib.rdma_ack_cm_event(ev)
        return out

    def _free(self) -> None:  # its cm_ids hang on it (CmId.__init__): gone before it
        rdmacm().rdma_destroy_event_channel(self.ptr)


class _NativeGet:
    """rdmacli_cm_get on one channel, with the struct it fills kept for every call."""

    def __init__(self, nffi, nlib, channel_ptr):
        self.ffi, self.lib = nffi, nlib
        self.channel = nffi.cast("void *", ptr_key(channel_ptr))
        self.out = nffi.new("struct rdmacli_cm_event *")

    @classmethod
    def of(cls, channel_ptr) -> _NativeGet | None:
        from rdmacli import native

        loaded = native.load()
        return cls(*loaded, channel_ptr) if loaded else None

    def get(self) -> CmEvent | None:
        err = self.lib.rdmacli_cm_get(self.channel, self.out)
        if err:
            if err in (_errno.EAGAIN, _errno.EWOULDBLOCK, _errno.EINTR):
                return None
            raise RdmaCallError("rdma_get_cm_event", err)
        e, nffi = self.out, self.ffi
        data = bytes(nffi.buffer(e.private_data, e.private_data_len)) if e.private_data_len else b""
        out = CmEvent(type=e.event, status=e.status, id=e.id, t=e.t_ns / 1e9, listen_id=e.listen_id,
                      private_data=data)  # fmt: skip
        if e.event == C.CONNECT_REQUEST:
            out.raw_id = ffi().cast("struct rdma_cm_id *", e.id)
        if e.ud:
            _datagram_fields(out, e.qp_num, e.qkey, nffi.buffer(e.ah_attr))
        elif e.event in C.EVENTS_WITH_DATA:  # the others carry none (CmEvent.params)
            _connection_fields(out, e)
        return out


def _datagram_fields(out: CmEvent, qp_num: int, qkey: int, ah_attr) -> None:
    """A datagram id's event: the peer's QP number and Q_Key, and a copy of its address vector
    (`ah_attr`: a struct ibv_ah_attr's address or bytes), with its GID, LID and SL read out."""
    f = ffi()
    out.ud_qp_num, out.ud_qkey = qp_num, qkey
    out.ah_attr = f.new("struct ibv_ah_attr *")
    f.memmove(out.ah_attr, ah_attr, f.sizeof("struct ibv_ah_attr"))
    out.dgid = bytes(f.buffer(out.ah_attr.grh.dgid.raw, 16))
    out.dlid, out.sl = out.ah_attr.dlid, out.ah_attr.sl


def _connection_fields(out: CmEvent, p) -> None:
    """A connection event's parameters, from a struct rdma_conn_param or the native copy (whose
    fields have its names)."""
    out.responder_resources, out.initiator_depth = p.responder_resources, p.initiator_depth
    out.flow_control, out.retry_count, out.srq = p.flow_control, p.retry_count, p.srq
    out.rnr_retry_count, out.qp_num = p.rnr_retry_count, p.qp_num


def _copy_event(ev) -> CmEvent:
    f = ffi()
    conn = ev.param.conn
    data = b""
    if conn.private_data != f.NULL and conn.private_data_len:
        data = bytes(f.buffer(f.cast("char *", conn.private_data), conn.private_data_len))
    out = CmEvent(
        type=ev.event,
        status=ev.status,
        id=ptr_key(ev.id),
        t=time.monotonic(),
        listen_id=ptr_key(ev.listen_id) if ev.listen_id != f.NULL else 0,
        private_data=data,
        raw_id=ev.id,
    )
    if ev.id != f.NULL and ev.id.ps in C.UD_PORT_SPACES:
        ud = ev.param.ud
        _datagram_fields(out, ud.qp_num, ud.qkey, f.addressof(ud, "ah_attr"))
    else:
        _connection_fields(out, conn)
    return out


class QueuePair(Handle):
    """The QP librdmacm made on a cm_id (rdma_create_qp): it hangs on the id, and goes first."""

    kind = "QP"

    def __init__(self, cm_id: CmId):
        self.id_ptr = cm_id.ptr
        self.ptr = cm_id.ptr.qp

    def _free(self) -> None:
        rdmacm().rdma_destroy_qp(self.id_ptr)


class CmId(Handle):
    """One rdma_cm_id, hanging on its event channel; its QP, and the MRs and AHs made on its PD,
    hang on it (`own`). Methods raise RdmaCallError; destroy() and close() are idempotent."""

    kind = "cm_id"

    def __init__(self, ptr, channel: EventChannel):
        self.ptr = ptr
        self.channel = channel.own(self)
        self.key = ptr_key(ptr)
        self._qp: QueuePair | None = None

    @property
    def has_qp(self) -> bool:
        return self._qp is not None and self._qp.alive

    @classmethod
    def create(cls, channel: EventChannel, ps: int) -> CmId:
        f = ffi()
        pid = f.new("struct rdma_cm_id **")
        check(rdmacm().rdma_create_id(channel.ptr, pid, f.NULL, ps), "rdma_create_id")
        return cls(pid[0], channel)

    # -- the rdma_cm(7) verbs -------------------------------------------------------------
    def bind(self, sa: _addr.SockAddr) -> None:
        check(rdmacm().rdma_bind_addr(self.ptr, sa.ptr), "rdma_bind_addr")

    def resolve_addr(self, src: _addr.SockAddr | None, dst: _addr.SockAddr, timeout_ms: int) -> None:
        src_ptr = src.ptr if src is not None else ffi().NULL
        check(rdmacm().rdma_resolve_addr(self.ptr, src_ptr, dst.ptr, timeout_ms), "rdma_resolve_addr")

    def resolve_route(self, timeout_ms: int) -> None:
        check(rdmacm().rdma_resolve_route(self.ptr, timeout_ms), "rdma_resolve_route")

    def listen(self, backlog: int = 0) -> None:
        check(rdmacm().rdma_listen(self.ptr, backlog), "rdma_listen")

    def connect(self, param: ConnParam) -> None:
        check(rdmacm().rdma_connect(self.ptr, param.to_c()), "rdma_connect")

    def accept(self, param: ConnParam | None = None) -> None:
        c = param.to_c() if param is not None else ffi().NULL
        check(rdmacm().rdma_accept(self.ptr, c), "rdma_accept")

    def reject(self, private_data: bytes = b"") -> None:
        f = ffi()
        data = f.new("char[]", private_data) if private_data else f.NULL
        check(rdmacm().rdma_reject(self.ptr, data, len(private_data)), "rdma_reject")

    def disconnect(self) -> None:
        check(rdmacm().rdma_disconnect(self.ptr), "rdma_disconnect")

    def establish(self) -> None:
        check(rdmacm().rdma_establish(self.ptr), "rdma_establish")

    def notify(self, event: int) -> None:
        check(rdmacm().rdma_notify(self.ptr, event), "rdma_notify")

    def set_u8_option(self, optname: int, value: int, what: str) -> None:
        v = ffi().new("uint8_t *", value)
        check(rdmacm().rdma_set_option(self.ptr, C.RDMA_OPTION_ID, optname, v, 1), f"rdma_set_option({what})")

    def set_tos(self, tos: int) -> None:
        self.set_u8_option(C.RDMA_OPTION_ID_TOS, tos, "TOS")

    def set_ack_timeout(self, timeout: int) -> None:
        self.set_u8_option(C.RDMA_OPTION_ID_ACK_TIMEOUT, timeout, "ACK_TIMEOUT")

    def join_multicast(self, sa: _addr.SockAddr, send_only: bool = False) -> None:
        f = ffi()
        attr = f.new("struct rdma_cm_join_mc_attr_ex *")
        attr.comp_mask = 0x3  # RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS
        attr.join_flags = C.MC_JOIN_SENDONLY_FULLMEMBER if send_only else C.MC_JOIN_FULLMEMBER
        attr.addr = sa.ptr
        check(rdmacm().rdma_join_multicast_ex(self.ptr, attr, f.NULL), "rdma_join_multicast_ex")

    def leave_multicast(self, sa: _addr.SockAddr) -> None:
        check(rdmacm().rdma_leave_multicast(self.ptr, sa.ptr), "rdma_leave_multicast")

    def create_qp(
        self,
        *,
        qp_type: int,
        send_cq,
        recv_cq,
        max_send_wr: int,
        max_recv_wr: int,
        sq_sig_all: int = 0,
        create_flags: int = 0,
        max_inline_data: int = 0,
    ) -> int:
        """Returns the bytes a send may carry inline (what the device gave, at least asked)."""
        f = ffi()
        attr = f.new("struct ibv_qp_init_attr_ex *")
        attr.send_cq, attr.recv_cq = send_cq, recv_cq
        attr.cap.max_send_wr, attr.cap.max_recv_wr = max_send_wr, max_recv_wr
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1
        attr.cap.max_inline_data = max_inline_data
        attr.qp_type, attr.sq_sig_all = qp_type, sq_sig_all
        attr.comp_mask = C.QP_INIT_ATTR_PD
        attr.pd = self.ptr.pd
        if create_flags:
            attr.comp_mask |= C.QP_INIT_ATTR_CREATE_FLAGS
            attr.create_flags = create_flags
        check(rdmacm().rdma_create_qp_ex(self.ptr, attr), "rdma_create_qp")
        self._qp = self.own(QueuePair(self))
        return attr.cap.max_inline_data

    def active_mtu(self) -> int | None:
        """The port's active MTU in bytes (ibv_query_port), or None if it cannot be read."""
        f = ffi()
        if self.ptr.verbs == f.NULL:
            return None
        attr = f.new("char[]", 256)  # covers old and new struct ibv_port_attr layouts
        if ibverbs().ibv_query_port(self.ptr.verbs, self.ptr.port_num, attr) != 0:
            return None
        return C.IB_MTU_BYTES.get(f.cast("struct ibv_port_attr *", attr).active_mtu)

    def destroy_qp(self) -> None:
        if self._qp is not None:
            self._qp.destroy()
            self._qp = None

    def _free(self) -> None:  # alone, as destroy() is asked: its QP first, as rdma_destroy_id needs
        self.destroy_qp()
        check(rdmacm().rdma_destroy_id(self.ptr), "rdma_destroy_id")

    # -- what the id knows ---------------------------------------------------------------
    @property
    def verbs(self):
        return self.ptr.verbs

    @property
    def pd(self):
        return self.ptr.pd

    @property
    def qp(self):
        if not self.has_qp:  # librdmacm leaves id->qp NULL: never post through it
            raise self.gone("QP of this cm_id")
        return self.ptr.qp

    @property
    def qp_num(self) -> int | None:
        return self.ptr.qp.qp_num if self.has_qp else None

    @property
    def port_num(self) -> int:
        return self.ptr.port_num

    @property
    def device(self) -> str | None:
        f = ffi()
        if not self.alive or self.ptr.verbs == f.NULL:
            return None
        return f.string(self.ptr.verbs.device.name).decode()

    def local_addr(self) -> tuple[str, int] | None:
        return _addr.parse(ffi().addressof(self.ptr.route.addr, "src_addr"))

    def peer_addr(self) -> tuple[str, int] | None:
        return _addr.parse(ffi().addressof(self.ptr.route.addr, "dst_addr"))
