"""One connection: its cm_id, CQ on a completion channel, MRs, state, phase and deadline, teardown.

Everything it creates or posts goes through the flow's backend (rdmacli.backend), so the
same code runs on real RDMA and on the scripted stand-in of the unit tests. Its CQ is shared
with the flow's other connections on the same device (engine.cqpool).
"""

from __future__ import annotations

import errno
import time
from typing import TYPE_CHECKING, Any, Callable

from rdmacli.engine.lifecycle import ACCEPT, DATA, DISCONNECT, START, WAIT_FOR_PEER, Phase
from rdmacli.errors import MEMLOCK_HINT, Cause, RdmacliError
from rdmacli.outcome import State
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import format_hostport
from rdmacli.rdma.cm import CmEvent, RdmaCallError

if TYPE_CHECKING:
    from rdmacli.engine.protocol import Protocol

MAX_WINDOW = 4096  # outstanding work requests per queue, at most (and never past the device's)


class Connection:
    def __init__(self, flow, index: int, cm, protocol: Protocol):
        self.flow = flow
        self.backend = flow.backend
        self.index = index
        self.cm = cm
        self.protocol = protocol
        self.cq: Any = None  # shared with the flow's other connections on this device (engine.cqpool)
        self.max_inline = 0  # bytes its sends may carry inline (create_qp's inline)
        self.state = State.PENDING
        self.phase = START
        self.deadline: float | None = None
        self.connected = False
        self.disconnect_sent = False
        self.comm_est_due = False  # rdma_notify(COMM_EST) due (peer_is_sending)
        self.datagram = False  # UD: no ESTABLISHED on the passive side, no disconnect
        self.last_event: CmEvent | None = None  # the CM event being handled (UD peers read ah_attr from it)
        self.event_read: float | None = None  # when the event its handler answers was read
        self.group = None  # the multicast SockAddr joined, left again in teardown
        self.torn_down = False
        self.id_left = False  # torn down but for its id (teardown(id_too=False))
        self.error: RdmacliError | None = None
        self.local = "?"
        self.remote = "?"
        self.device: str | None = None
        self.teardown_errors: list[str] = []
        self._limits = None
        self.retries = 0  # requests made again because nothing was listening yet (--wait)
        self.timers: list = []  # its call_laters: cancelled when it is torn down
        self.summarized = False  # a server's record of it emitted (ServerFlow.on_finished, once)
        self.ended = False  # its protocol told that it is over (Flow.on_finished, once)

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, state: State) -> None:
        # `finished` is asked dozens of times a connection (make profile): kept, not derived
        self._state, self.finished = state, state.final

    @property
    def closing(self) -> bool:
        """Its exchange is over and we disconnected; only the peer's answer is outstanding."""
        return not self.finished and self.phase == DISCONNECT and self.error is None

    # -- phases and deadlines ------------------------------------------------------------------
    def expect(self, phase: Phase, seconds: float | None, now: float | None = None) -> None:
        self.phase = phase
        self.deadline = (now or time.monotonic()) + seconds if seconds else None
        if self.deadline is not None:
            self.flow.deadlines.note(self.deadline, self)

    def progress(self) -> None:
        """Data moved: push the idle deadline out (and end a wait for the peer's first data),
        from the loop turn's clock read (a read per completion was most of a connection's)."""
        if self.phase == DATA and self.deadline is not None:  # only later: no bound to lower
            self.deadline = self.flow.loop.now + self.flow.timeouts.idle_s
        elif self.phase in (DATA, WAIT_FOR_PEER):
            self.expect(DATA, self.flow.timeouts.idle_s, self.flow.loop.now)

    def learn_addresses(self) -> None:
        loc, rem = self.cm.local_addr(), self.cm.peer_addr()
        self.local = format_hostport(*loc) if loc else "?"
        self.remote = format_hostport(*rem) if rem else self.remote
        self.device = self.cm.device
        self.flow.check_transport(self.device, self.cm.port_num)
        self.flow.counters.see(self.device, self.cm.port_num)

    def later(self, seconds: float, fn) -> None:
        """Call fn(conn) in `seconds`, guarded like a handler, unless this connection has
        finished or been torn down by then (a timer never touches a finished connection's QP)."""

        def fire() -> None:
            if not self.finished:
                self.flow.guarded(self, fn)

        self.timers = [t for t in self.timers if not t.cancelled and t.when > time.monotonic()]
        self.timers.append(self.flow.loop.call_later(seconds, fire))

    def peer_is_sending(self) -> None:
        """A completion before our ESTABLISHED: the client has our REP and is sending. Usually
        its RTU is only behind the data (the CM's MADs are handled later than a CQ is polled)
        and ESTABLISHED follows. If it has not come halfway through the accept deadline, the RTU
        was lost (the CM resends the REP only seconds later, and a lost RTU again and again
        never forms the connection): the QP has seen the communication established
        (IBV_EVENT_COMM_EST) and rdma_notify(3) says so to the CM, whose ESTABLISHED then comes,
        instead of the accept deadline failing a connection that moves data. Not at once: a
        notify ahead of an RTU in flight makes the CM count that RTU a duplicate, which the
        port's counters show as loss (seen: three healthy mesh runs blamed for it)."""
        if self.comm_est_due or self.deadline is None:
            return
        self.comm_est_due = True
        halfway = self.deadline - self.flow.timeouts.limit_s("connect") / 2 - time.monotonic()
        self.later(max(halfway, 0.0), Connection._notify_established)

    def _notify_established(self) -> None:
        if self.phase != ACCEPT:
            return  # ESTABLISHED came on its own (or the connection moved on)
        try:
            self.cm.notify(C.EVENT_COMM_EST)
        except RdmaCallError:
            pass  # a CM already past that state: nothing to say

    # -- resources -----------------------------------------------------------------------------
    def limits(self):
        """The device's queue limits (ibv_query_device), or None where they cannot be read."""
        if self._limits is None:
            self._limits = self.backend.device_limits(self.cm) or False
        return self._limits or None

    def window(self, wanted: int, cap: int | None = MAX_WINDOW) -> int:
        """How many work requests a queue keeps outstanding for `wanted` in all: recycled, so
        bounded by `cap` (MAX_WINDOW) and the device (max_qp_wr, and max_cqe for a CQ shared by
        both queues), never proportional to a count beyond the device's own limits."""
        depth = max(1, min(wanted, cap) if cap is not None else wanted)
        lim = self.limits()
        if lim is not None:
            depth = min(depth, lim.max_qp_wr, max(lim.max_cqe // 2, 1))
        return depth

    def create_qp(
        self,
        *,
        qp_type: int = C.QPT_RC,
        send_wr: int,
        recv_wr: int,
        sq_sig_all: int = 0,
        create_flags: int = 0,
        inline: int = 0,
        own_cq: bool = False,
        nic_clock: bool = False,
    ) -> None:
        """inline: bytes a send should carry in its work request (a latency test's small
        messages); a device that cannot gets a QP without, and `max_inline` says what it has.
        own_cq: a CQ of this QP's alone, whatever else the flow runs (a native loop polls it).
        nic_clock: that, with the NIC's completion timestamps where it has them (`cq.clock`)."""
        pool = self.flow.cq_pool
        try:
            self.cq = pool.acquire(self, send_wr + recv_wr, own=own_cq, clock=nic_clock)
            kw = dict(qp_type=qp_type, send_cq=self.cq.ptr, recv_cq=self.cq.ptr, max_send_wr=send_wr,
                      max_recv_wr=recv_wr, sq_sig_all=sq_sig_all, create_flags=create_flags)  # fmt: skip
            try:
                got = self.cm.create_qp(**kw, max_inline_data=inline) if inline else None
            except RdmaCallError:
                got = None  # inline is an optimization: the QP without it
            if got is None:
                got = self.cm.create_qp(**kw)
            self.max_inline = got or 0
        except RdmaCallError as exc:
            pool.release(self)
            over = self._over_limit(exc, send_wr, recv_wr)
            if over is None:
                raise
            raise over from exc
        pool.bind(self, self.cm.qp_num)

    def _over_limit(self, exc: RdmaCallError, send_wr: int, recv_wr: int) -> RdmacliError | None:
        """EINVAL/ENOMEM from queue creation, said as the device limit that was exceeded."""
        lim = self.limits()
        if lim is None or exc.errno not in (errno.EINVAL, errno.ENOMEM):
            return None
        asked = []
        if send_wr + recv_wr > lim.max_cqe:
            asked.append(f"a CQ of {send_wr + recv_wr} entries (max_cqe {lim.max_cqe})")
        if max(send_wr, recv_wr) > lim.max_qp_wr:
            asked.append(f"{max(send_wr, recv_wr)} work requests per queue (max_qp_wr {lim.max_qp_wr})")
        if not asked:
            return None
        return RdmacliError(
            f"{self.phase}: {exc}: asked {self.cm.device} for " + " and ".join(asked),
            hint="use a smaller count or size; `rdmacli devices` shows the device's limits",
            cause=Cause.DEVICE_LIMIT,
            details={"step": self.phase, "call": exc.call},
        )

    def reg(self, size: int, access: int = C.ACCESS_LOCAL_WRITE):
        try:
            mr = self.backend.mr(self.cm, size, access)
        except RdmaCallError as exc:
            if exc.errno not in (errno.ENOMEM, errno.EPERM, errno.EAGAIN):
                raise
            raise memlock_error(self.phase, exc, size) from exc
        return mr

    @property
    def mrs(self) -> list:
        """Its memory regions registered now: those hanging on its cm_id."""
        return [x for x in self.cm.children if x.kind == "memory region"]

    @property
    def pinned(self) -> int:
        """The bytes its memory regions hold registered now."""
        return sum(mr.length for mr in self.mrs)

    def replace_mr(self, old, size: int, access: int = C.ACCESS_LOCAL_WRITE):
        """A larger buffer instead of `old`, which is deregistered at once: what a connection
        pins stays what its protocol needs, whatever its peer asks for."""
        mr = self.reg(size, access)
        try:
            old.dereg()
        except RdmaCallError as exc:
            self.teardown_errors.append(str(exc))
        return mr

    def ah_from_attr(self, ah_attr):
        return self.backend.ah_from_attr(self.cm, ah_attr)  # hangs on the cm_id: closed with it

    def ah_from_wc(self, wc, grh_addr: int):
        return self.backend.ah_from_wc(self.cm, wc, grh_addr)

    # -- the data path: local SGEs are bounds-checked against our own MRs -----------------------
    def native_handles(self) -> tuple[int, int] | None:
        """(QP, CQ) addresses for the native data path (rdmacli.native), when this connection's
        CQ holds no other connection's completions and the backend is the real stack."""
        if not self.flow.cq_pool.alone(self):
            return None
        return self.backend.native_handles(self.cm, self.cq)

    def post_send(self, wr_id: int, mr, offset: int, length: int, **kw) -> None:
        self.backend.post_send(self.cm.qp, wr_id, mr, offset, length, **kw)

    def post_recv(self, wr_id: int, mr, offset: int = 0, length: int | None = None, *, n: int = 1) -> None:
        self.backend.post_recv(self.cm.qp, wr_id, mr, offset, length, n=n)

    # -- ending --------------------------------------------------------------------------------
    def disconnect(self) -> None:
        if self.connected and not self.disconnect_sent and not self.datagram:
            self.disconnect_sent = True
            if self.torn_down:  # teardown's own disconnect is no phase: only its time counts
                self.flow.timer.start(DISCONNECT, self.index)
            else:  # an exchange that ended: the peer's answer is awaited, with its deadline
                self.flow.enter(self, DISCONNECT)
            try:
                self.cm.disconnect()
            except RdmaCallError as exc:
                self.teardown_errors.append(str(exc))

    def established(self) -> None:
        """Connected (RC), accepted (UD server) or joined (multicast)."""
        self.connected = True
        if not self.finished:
            self.state = State.ESTABLISHED

    def finish(self) -> None:
        if not self.finished:
            self.state = State.DONE

    def fail(self, err: RdmacliError) -> None:
        if self.error is None:
            self.error = err
        if self.state != State.REJECTED:
            self.state = State.FAILED

    def reject(self) -> None:
        self.state = State.REJECTED

    def teardown(self, *, id_too: bool = True) -> None:
        """Disconnect (and leave its group), destroy the QP, close what hangs on the cm_id (its
        AHs and MRs: rdma.handle's ownership), give the shared CQ back, destroy the id (unless
        not `id_too`: a second call does; Flow.close in cmtime's order).

        The QP and the CQ are the only steps said here: the QP must go before the CQ it posts
        to, and the CQ (the flow's, shared) before the last cm_id, which may take the device's
        context with it. Nothing here raises: a step that fails is recorded (teardown_errors)
        and the next one runs, so a teardown can never turn the run's result into an internal
        error."""
        destroy_id = ("destroy id", lambda: self.teardown_errors.extend(self.cm.close()))
        if self.torn_down:  # an earlier pass left its id (lockstep: every QP, then every id)
            if id_too and self.id_left:
                self.id_left = False
                self._teardown_steps([destroy_id])
            return
        self.torn_down = True
        for t in self.timers:  # from here on nothing of this connection runs again
            t.cancel()
        self.flow.loop.forget_cm(self.cm.key)
        steps: list[tuple[str | None, Callable[[], Any]]] = [(None, self.disconnect)]
        if self.group is not None:
            steps.append(("leave", lambda: self.cm.leave_multicast(self.group)))
        if self.cm.has_qp:
            steps.append(("destroy qp", self.cm.destroy_qp))
        steps.append((None, lambda: self.teardown_errors.extend(self.cm.close_children())))
        steps.append((None, lambda: self.teardown_errors.extend(self.flow.cq_pool.release(self))))
        if id_too:
            steps.append(destroy_id)
        self.id_left = not id_too
        self._teardown_steps(steps)

    def _teardown_steps(self, steps: list[tuple[str | None, Callable[[], Any]]]) -> None:
        timer, i = self.flow.timer, self.index
        for name, fn in steps:
            if name:
                timer.start(name, i)
            try:
                fn()
            except RdmaCallError as exc:
                self.teardown_errors.append(str(exc))
            except Exception as exc:  # a bug, named: the run's own result stands
                what = f"{name or 'teardown'}: internal error: {type(exc).__name__}: {exc}"
                self.teardown_errors.append(what)
            if name:
                timer.end(name, i)


def memlock_error(step: str, exc: RdmaCallError, size: int) -> RdmacliError:
    """A registration refused for memory: say the size asked for and the locked-memory limit."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    return RdmacliError(
        f"{step}: {exc}: registering {size} bytes ({size / 2**20:.1f} MiB) with the locked-memory "
        f"limit (RLIMIT_MEMLOCK) at {limit}",
        hint=MEMLOCK_HINT + " or use a smaller -S",
        cause=Cause.MEMLOCK,
        details={"step": step, "call": exc.call, "size_bytes": size, "memlock": limit},
    )
