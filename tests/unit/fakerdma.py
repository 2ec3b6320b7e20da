"""A scripted stand-in for the RDMA stack, to drive the engine's state machines without RDMA.

It implements the engine's backend collaborator (rdmacli.backend.RdmaBackend): cm ids whose
calls are logged and answered by a script of CM events, an event channel and completion channels
on real pipes (so the real selector loop runs), CQs fed by the test, MRs on bytearrays. It proves
nothing about RDMA (the lab suite does that); it pins down what the engine does with each event.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
from collections import deque
from types import SimpleNamespace

from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import CmEvent, RdmaCallError
from rdmacli.rdma.handle import Handle
from rdmacli.rdma.verbs import MR, DeviceLimits, WorkCompletion

_keys = itertools.count(0x1000, 0x100)
RXE_LIMITS = DeviceLimits(max_qp_wr=16384, max_cqe=32767, max_mr_size=1 << 40)  # roughly Soft-RoCE's
WC_OPCODE = {C.WR_SEND: C.WC_SEND, C.WR_SEND_WITH_IMM: C.WC_SEND, C.WR_RDMA_READ: C.WC_RDMA_READ}
WC_OPCODE[C.WR_RDMA_WRITE] = WC_OPCODE[C.WR_RDMA_WRITE_WITH_IMM] = C.WC_RDMA_WRITE


class _Pipe:
    """A readable fd with a queue behind it: one byte per queued item."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.items: deque = deque()
        self.lock = threading.Lock()  # a peer in another thread pushes (tests/unit/meshfabric)

    def push(self, item) -> None:
        with self.lock:
            self.items.append(item)
            os.write(self.w, b"x")

    def pop(self):
        with self.lock:
            if not self.items:
                return None
            os.read(self.r, 1)
            return self.items.popleft()

    def close(self) -> None:
        for fd in (self.r, self.w):
            os.close(fd)


class FakeChannel(Handle, _Pipe):
    """As the real EventChannel: its cm_ids hang on it, and closing it closes them first."""

    kind = "CM event channel"

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self.then: list = []  # the peer's next moves, once the engine has handled an event
        self.ptr = object()

    @property
    def fd(self) -> int:
        return self.r

    def get(self):
        moves, self.then = self.then, []
        for move in moves:  # the engine handled the last event it got: the peer moves on
            move()
        return self.pop()

    def _free(self) -> None:
        self.backend.log.append(("destroy event channel",))
        _Pipe.close(self)


class FakeCmId(Handle):
    kind = "cm_id"

    def __init__(self, backend, channel, ps: int):
        self.backend, self.channel, self.ps = backend, channel, ps
        if isinstance(channel, Handle):
            channel.own(self)
        self.key = next(_keys)
        self.ptr = object()
        self.has_qp = False
        self._qp = SimpleNamespace(qp_num=self.key & 0xFFFF, cm=self)
        self.recvs: list[tuple] = []  # (wr_id, mr, offset, length) posted and not yet completed
        self.device, self.port_num = "fake0", 1
        self.verbs = self.pd = object()
        self.destroyed = False
        self.peer_gone = False  # the peer disconnected first: our rdma_disconnect only answers

    @property
    def qp(self):  # as the real CmId: a destroyed id or QP is never posted to
        _ = self.ptr
        if not self.has_qp:
            raise self.gone("QP of this cm_id")
        return self._qp

    @property
    def qp_num(self):
        return self._qp.qp_num if self.has_qp else None

    def local_addr(self):
        return ("10.0.0.2", 4242)

    def peer_addr(self):
        return ("10.0.0.1", 7471)

    def active_mtu(self):
        return 1024

    def _call(self, name: str, *args) -> None:
        _ = self.ptr  # a destroyed id takes no calls, as the real one
        self.backend.log.append((name, self.key))
        self.backend.react(self, name, *args)

    def bind(self, sa):
        self._call("bind", sa)

    def listen(self, backlog=0):
        self._call("listen")

    def resolve_addr(self, src, dst, timeout_ms):
        self._call("resolve addr", dst)

    def resolve_route(self, timeout_ms):
        self._call("resolve route")

    def connect(self, param):
        self.backend.conn_params.append(param)
        self._call("connect", param)

    def accept(self, param=None):
        self._call("accept", param)

    def reject(self, data=b""):
        self.backend.rejections.append(data)
        self._call("reject", data)

    def disconnect(self):
        self._call("disconnect")

    def notify(self, event):
        self._call("notify", event)

    def join_multicast(self, sa, send_only=False):
        self._call("join", sa)

    def leave_multicast(self, sa):
        self._call("leave")

    def set_tos(self, tos):
        self._call("set tos", tos)

    def set_ack_timeout(self, t):
        self._call("set ack timeout", t)

    def create_qp(self, **attr):
        self.backend.qp_attrs.append(attr)
        self._call("create qp", attr)
        self.has_qp = True
        # the CQ it was given (shared by the flow's connections): completions land there
        cq = next((c for c in self.backend.all_cqs if c.alive and c.ptr is attr.get("send_cq")), None)
        if cq is not None:
            self.backend.cqs[self.key] = cq

    def destroy_qp(self):
        if self.has_qp:
            self.has_qp = False
            self._call("destroy qp")

    def _free(self):  # as the real CmId's: its QP first
        self.destroy_qp()
        self._call("destroy id")
        self.destroyed = True


class FakeComp(Handle, _Pipe):
    kind = "completion channel"

    def __init__(self, backend):
        super().__init__()
        self.backend = backend
        self.ptr = object()

    @property
    def fd(self) -> int:
        _ = self.ptr  # as the real one: a destroyed channel has no fd
        return self.r

    def get_event(self):
        return self.pop()

    def _free(self):
        self.backend.log.append(("destroy comp channel",))
        _Pipe.close(self)


class FakeCQ(Handle):
    kind = "CQ"
    clock = None

    def __init__(self, backend, comp, cqe: int):
        self.backend, self.comp, self.cqe = backend, comp, cqe
        self.ptr = object()
        self.wcs: deque = deque()
        self.acked = 0

    def complete(self, wc: WorkCompletion) -> None:
        self.wcs.append(wc)
        self.comp.push(self)

    def poll(self):
        _ = self.ptr
        out = []
        while self.wcs and len(out) < 16:
            out.append(self.wcs.popleft())
        return out

    def ack_events(self, n: int) -> None:
        self.acked += n

    def req_notify(self) -> None:
        pass

    def _free(self):
        self.backend.log.append(("destroy cq",))


class FakeMR(Handle):
    kind = "memory region"
    _addrs = itertools.count(0x10000, 0x100000)

    def __init__(self, backend, size: int, access: int):
        self.backend, self.length, self.access = backend, size, access
        self.buf = bytearray(max(size, 1))
        self.addr = next(self._addrs)
        self.lkey = self.rkey = self.addr >> 8
        self.ptr = object()

    _bounds = MR._bounds  # the same check as the real MR's

    def read(self, offset: int = 0, length: int | None = None) -> bytes:
        length = self.length - offset if length is None else length
        self._bounds(offset, length)
        return bytes(self.buf[offset : offset + length])

    def write(self, data: bytes, offset: int = 0) -> None:
        self._bounds(offset, len(data))
        self.buf[offset : offset + len(data)] = data

    def _free(self):
        self.backend.log.append(("dereg mr",))

    dereg = Handle.destroy


class FakeAH(Handle):
    kind = "address handle"

    def __init__(self, backend):
        self.backend, self.ptr = backend, object()

    def _free(self):
        self.backend.log.append(("destroy ah",))


def wc(wr_id: int, opcode: int = C.WC_RECV, *, status: int = 0, byte_len: int = 0, imm=None, qp_num=1):
    return WorkCompletion(wr_id, status, opcode, byte_len, imm, qp_num, 0)


class FakeBackend:
    """Answers the engine's calls the way a healthy peer and fabric would, unless told otherwise:
    set `script[call] = fn(cm, *args) -> list of CmEvent` to answer differently (an empty list
    answers nothing), `on_send = fn(cm, wr)` to play the peer on the data path."""

    def __init__(self, limits: DeviceLimits | None = RXE_LIMITS):
        self.log: list[tuple] = []
        self.script: dict = {}
        self.limits = limits
        self.ids: list[FakeCmId] = []
        self.cqs: dict[int, FakeCQ] = {}  # cm key -> its CQ
        self.all_cqs: list[FakeCQ] = []
        self.sends: list[dict] = []  # every post_send, in order
        self.conn_params: list = []
        self.qp_attrs: list[dict] = []
        self.rejections: list[bytes] = []
        self.auto_complete_sends = True
        self.on_send = None
        self.channel: FakeChannel | None = None
        self.listener: FakeCmId | None = None
        self.cause = None
        self.counter_values: dict[str, dict[str, int]] = {}  # set by a test: device -> counters now
        self.holders: list[str] = []

    # -- events ----------------------------------------------------------------------------------
    def event(self, cm, type_: int, status: int = 0, **fields) -> CmEvent:
        ev = CmEvent(type=type_, status=status, id=cm.key, listen_id=0, t=time.monotonic(), **fields)
        ev.raw_id = cm
        return ev

    def push(self, cm, type_: int, status: int = 0, **fields) -> None:
        cm.channel.push(self.event(cm, type_, status, **fields))

    def react(self, cm, name: str, *args) -> None:
        if name == "listen":
            self.listener = cm
        if name in self.script:
            events = self.script[name](cm, *args) or []
        else:
            events = self.default_reaction(cm, name)
        for ev in events:
            cm.channel.push(ev)

    def default_reaction(self, cm, name: str) -> list[CmEvent]:
        ud = cm.ps in C.UD_PORT_SPACES
        if name == "resolve addr":
            return [self.event(cm, C.ADDR_RESOLVED)]
        if name == "resolve route":
            return [self.event(cm, C.ROUTE_RESOLVED)]
        if name == "connect":
            if ud:
                return [
                    self.event(cm, C.ESTABLISHED, ud_qp_num=77, ud_qkey=C.RDMA_UDP_QKEY, ah_attr=object())
                ]
            return [self.event(cm, C.ESTABLISHED)]
        if name == "accept" and not ud:
            return [self.event(cm, C.ESTABLISHED)]
        if name == "disconnect" and not cm.peer_gone:  # our DREQ, answered by the peer
            return [self.event(cm, C.DISCONNECTED)]
        if name == "join":
            return [
                self.event(
                    cm,
                    C.MULTICAST_JOIN,
                    ud_qp_num=0xFFFFFF,
                    ud_qkey=C.RDMA_UDP_QKEY,
                    ah_attr=object(),
                    dgid=bytes(10) + b"\xff\xff" + bytes([239, 1, 1, 1]),
                )
            ]
        return []

    def request(self, private_data: bytes = b"", ps: int = C.PS_TCP) -> FakeCmId:
        """A client's CONNECT_REQUEST arrives at the listener: returns the new cm id."""
        new = FakeCmId(self, self.channel, ps)
        self.ids.append(new)
        ev = self.event(new, C.CONNECT_REQUEST, private_data=private_data)
        ev.listen_id = self.listener.key
        self.channel.push(ev)
        return new

    # -- the backend interface -------------------------------------------------------------------
    def event_channel(self):
        self.channel = FakeChannel(self)
        return self.channel

    def create_id(self, channel, ps: int):
        cm = FakeCmId(self, channel, ps)
        self.ids.append(cm)
        self.log.append(("create id", cm.key))
        return cm

    def request_id(self, ev, channel):
        return ev.raw_id

    def comp_channel(self, cm):
        return FakeComp(self)

    def cq(self, cm, cqe: int, comp, clock: bool = False):
        if self.limits is not None and cqe > self.limits.max_cqe:
            raise RdmaCallError("ibv_create_cq", errno.EINVAL)  # what a real device says
        cq = comp.own(FakeCQ(self, comp, cqe))
        self.all_cqs.append(cq)
        self.cqs[cm.key] = cq
        return cq

    def native_handles(self, cm, cq):
        return None  # the native data path needs the real stack (tests/lab)

    def device_key(self, cm):
        return "fake0"

    def mr(self, cm, size: int, access: int):
        self.log.append(("reg mr", size))
        return cm.own(FakeMR(self, size, access))

    def ah_from_attr(self, cm, ah_attr):
        return cm.own(FakeAH(self))

    def ah_from_wc(self, cm, wc, grh_addr: int):
        return cm.own(FakeAH(self))

    def device_limits(self, cm):
        return self.limits

    def transport(self, device, port):
        return self.__dict__.get("transport_row")  # set by a test: the port's rdmacli.transports row

    def local_cause(self, device, port, ip):
        return self.cause  # set by a test: what sysfs would say about this host

    def address_cause(self, ip):
        return self.cause

    def rate_bound_gbps(self, device, port):
        return self.__dict__.get("rate_gbps")  # set by a test: sysfs's rate of the port

    def read_counters(self, device, port):
        return dict(self.counter_values.get(device, {}))

    def explain(self, err, deltas):  # the real policy: the counters' words are not the CM's to fake
        from rdmacli.diag.counters import explain

        return explain(err, deltas)

    def port_holders(self, port):
        return self.holders  # set by a test: who `rdma resource show` says holds the port

    def post_recv(self, qp, wr_id, mr, offset=0, length=None, *, n=1):
        length = mr.length - offset if length is None else length
        mr._bounds(offset, length)
        qp.cm.recvs.extend([(wr_id, mr, offset, length)] * n)

    def post_send(self, qp, wr_id, mr, offset, length, *, opcode=C.WR_SEND, n=1, **kw):
        """n chained sends: each is recorded (and seen by on_send); one completion, the last's."""
        if length:
            mr._bounds(offset, length)
        for _ in range(n):
            wr = {"cm": qp.cm, "wr_id": wr_id, "mr": mr, "offset": offset, "length": length, "opcode": opcode}
            wr.update(kw)
            self.sends.append(wr)
            if self.on_send is not None:
                self.on_send(qp.cm, wr)
        if self.auto_complete_sends:
            self.cqs[qp.cm.key].complete(wc(wr_id, WC_OPCODE[opcode], byte_len=length, qp_num=qp.qp_num))

    # -- playing the peer on the data path ---------------------------------------------------------
    def deliver(self, cm, data: bytes = b"", imm=None) -> None:
        """The peer's message lands in the oldest receive posted on `cm`."""
        wr_id, mr, offset, length = cm.recvs.pop(0)
        mr.write(data[:length], offset)
        self.cqs[cm.key].complete(wc(wr_id, C.WC_RECV, byte_len=len(data), imm=imm, qp_num=cm.qp_num))

    def then(self, move) -> None:
        """The peer's move once the engine has handled the event it is reading (a server's
        first messages after our ESTABLISHED was handled, as on a network)."""
        self.channel.then.append(move)

    def peer_disconnects(self, cm) -> None:
        cm.peer_gone = True
        self.push(cm, C.DISCONNECTED)

    def calls(self, key=None) -> list[str]:
        return [entry[0] for entry in self.log if key is None or (len(entry) > 1 and entry[1] == key)]
