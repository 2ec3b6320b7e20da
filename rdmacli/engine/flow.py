"""What every rdma_cm(7) flow shares: the loop, connections, deadlines, events, teardown.

The sequences themselves live beside this module: client.py (active side), server.py (passive
side), mcast.py (multicast members). A wire protocol (protocols/) plugs in per connection
through engine.protocol.Protocol. The RDMA stack is a collaborator (`backend`), so these state
machines run on real RDMA and on the scripted stand-in of the unit tests alike.
"""

from __future__ import annotations

import time
from functools import partial
from operator import attrgetter
from typing import Callable

from rdmacli import events as E
from rdmacli.counters import Watch
from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import Connection
from rdmacli.engine.cqpool import CqPool
from rdmacli.engine.deadlines import Deadlines, overrun
from rdmacli.engine.loop import DeadlineExpired, Loop
from rdmacli.engine.protocol import Protocol
from rdmacli.engine.results import conn_outcome
from rdmacli.engine.settings import Options, Timeouts
from rdmacli.engine.status import call_error, event_error, here_first, short_status
from rdmacli.engine.timing import DISPATCH, StepTimer
from rdmacli.errors import Cause, RdmacliError
from rdmacli.outcome import Earlier
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import CmEvent, RdmaCallError
from rdmacli.rdma.verbs import WorkCompletion
from rdmacli.transports import refusal

_STATUS = attrgetter("status")  # a completion's status, read in C (Flow.on_wcs)

Observer = Callable[[E.Event], None]


def default_backend():
    from rdmacli.backend import RdmaBackend

    return RdmaBackend()


class Flow:
    side = "?"

    def __init__(
        self,
        *,
        make_protocol: Callable[[], Protocol],
        observer: Observer | None = None,
        timeouts: Timeouts | None = None,
        options: Options | None = None,
        backend=None,
        needs: tuple[str, ...] = (),
    ):
        self.make_protocol = make_protocol
        self.needs = needs  # what the transport must have (rdmacli.transports): checked per device
        self.observer = observer or (lambda rec: None)
        # a record per CM event and per step costs a dict, a clock read and a call each: made
        # only for an observer that shows them (an observer says so with `detailed = False`)
        self.detailed = getattr(observer, "detailed", observer is not None)
        self.timeouts = timeouts or Timeouts()
        self.options = options or Options()
        self.backend = backend or default_backend()
        self.timer = StepTimer()
        self.t0 = time.monotonic()
        self.channel = self.backend.event_channel()
        self.loop = Loop(self.channel, busy_poll=self.options.busy_poll)
        self.loop.observers.append(self._observe)
        self.cq_pool = CqPool(self)
        self.counters = Watch(self.backend.read_counters)  # the ports' counters around the run
        self.conns: dict[int, Connection] = {}  # cm id key -> connection
        self.all_conns: list[Connection] = []
        # a long-running server lists its last `listed` finished connections; the rest are
        # folded into `earlier` as they finish (None: every connection listed)
        self.listed: int | None = None
        self.earlier = Earlier()
        self.warnings: list[str] = []
        self.deadline_all = (self.t0 + self.timeouts.overall_s) if self.timeouts.overall_s else None
        self.closed = False
        self.stopping = False  # set by stop(), possibly from another thread
        self._first_open = 0  # all_conns before this index are finished (all_finished)
        self.deadlines = Deadlines(self.deadline_all, self.timeouts.words.overall)

    # -- observation ---------------------------------------------------------------------------
    def emit(self, rec: E.Event) -> None:
        """Give the observer a record, stamped with this side and (unless it carries the time
        of the event it tells of) the time since the flow began."""
        if rec.t_us is None:
            rec.t_us = round((time.monotonic() - self.t0) * 1e6, 1)
        rec.side = self.side
        self.observer(rec)

    def _observe(self, ev: CmEvent) -> None:
        if not self.detailed:
            return
        conn = self.conns.get(ev.id)
        rec = E.CmEventRecord(
            t_us=round((ev.t - self.t0) * 1e6, 1),
            conn=conn.index if conn else None,
            event=ev.name,
            status=ev.status,
            status_text=short_status(ev.type, ev.status),
            data=ev.params(),
        )
        self.emit(rec)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
        self.emit(E.Warning(message=text))

    def step_done(self, conn: Connection, step: str, at: float | None = None) -> None:
        us = self.timer.end(step, conn.index, at)
        if us is not None and self.detailed:
            self.emit(E.Step(conn=conn.index, step=step, us=round(us, 1)))

    # -- connections ---------------------------------------------------------------------------
    def new_conn(self, index: int, cm, *, remote: str = "?", local: str = "?") -> Connection:
        conn = Connection(self, index, cm, self.make_protocol())
        conn.remote, conn.local = remote, local
        self.conns[cm.key] = conn
        self.all_conns.append(conn)
        self.loop.on_cm(cm.key, partial(self.guarded, conn, self._dispatch))
        return conn

    def retire(self, conn: Connection) -> None:
        """conn is over: torn down (its timers, handlers and resources with it) and no longer
        live in the flow; its outcome stays."""
        conn.teardown()
        self.conns.pop(conn.cm.key, None)
        self.timer.forget(conn.index)
        if self.listed is not None:
            self._fold()

    def _fold(self) -> None:
        """Beyond `listed` finished connections, the oldest are counted, not kept: a persistent
        server's memory and summary do not grow with the clients it served."""
        finished = [c for c in self.all_conns if c.finished]
        for c in finished[: max(len(finished) - (self.listed or 0), 0)]:
            self.all_conns.remove(c)
            self.earlier.add(conn_outcome(c))
            self._first_open = 0

    def drop(self, conn: Connection) -> None:
        """conn is to be made again (a retry): retired and forgotten, outcome and all."""
        self.retire(conn)
        self.all_conns.remove(conn)
        self._first_open = 0

    def create_id(self, index: int, where: str):
        self.timer.start("create id", index)
        try:
            cm = self.backend.create_id(self.channel, self.options.ps)
        except RdmaCallError as exc:
            raise call_error("create id", exc, where) from exc
        self.timer.end("create id", index)
        return cm

    def setup_qp(self, conn: Connection) -> None:
        """The protocol creates its QP, CQ and MRs and pre-posts receives: the "create qp"
        step inside the phase that needs it (a failure is said as that step)."""
        phase = conn.phase
        self.begin(conn, L.CREATE_QP)
        conn.phase = L.CREATE_QP
        conn.protocol.setup(conn)
        self.step_done(conn, L.CREATE_QP)
        conn.phase = phase

    # -- the lifecycle (engine.lifecycle) --------------------------------------------------------
    rows: dict = {}  # the side's lifecycle table: (phase, CM event) -> lifecycle.Row
    table: dict = {}  # the same rows with their handlers (lifecycle.Bound), bound as a class is made
    lockstep = False  # cmtime's order: a row's handler waits for its phase's gate (client.py)
    gate_opened: float | None = None  # while a gate's held handlers run: when it opened

    def hold(self, conn: Connection, ev: CmEvent, row: L.Bound) -> None:
        raise NotImplementedError  # lockstep's: client.py

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        cls.table = L.bind(cls.rows, cls)

    def enter(self, conn: Connection, phase: L.Phase) -> None:
        """conn is now in `phase`: its step is timed and its timeout bounds it (one clock read
        for both)."""
        p = L.PHASES[phase]
        now = self.begin(conn, p.step) if p.step else None
        conn.expect(phase, self.timeouts.limit_s(p.limit), now)

    def begin(self, conn: Connection, step: str) -> float:
        """A step of conn starts now; if an event's handler is calling it, the handler's time
        since that event was read is rdmacli's dispatch (timing.DISPATCH)."""
        now = self.timer.start(step, conn.index)
        if conn.event_read is not None:
            self.timer.add(DISPATCH, conn.event_read, now)
            conn.event_read = None
        return now

    def leave(self, conn: Connection, ev: CmEvent | None = None) -> None:
        """conn's phase is over: its step's time is recorded, ending when `ev` (the event that
        ended it) was read, as cmtime times it."""
        step = L.PHASES[conn.phase].step
        if step:
            self.step_done(conn, step, ev.t if ev is not None else None)
        if ev is not None:  # a held event's handler (lockstep) is dispatched from its gate's opening
            conn.event_read = self.gate_opened or ev.t

    def _dispatch(self, conn: Connection, ev: CmEvent) -> None:
        conn.last_event = ev
        if ev.type in L.ERROR_EVENTS:
            self.fail_on(conn, ev)
            return
        if conn.finished or ev.type in L.INFORMATIONAL:
            return  # a late event of a finished connection, or one that changes nothing
        row = self.table.get((conn.phase, ev.type))
        if row is None:
            raise self.unexpected(conn, ev.name)
        if self.lockstep:
            self.hold(conn, ev, row)
            return
        try:
            row.handler(self, conn, ev, row.next)
        finally:
            conn.event_read = None  # a dispatch is timed to a call its own handler makes

    def unexpected(self, conn: Connection, event: str) -> RdmacliError:
        """A CM event the side's rows do not have in conn's phase, in words."""
        return RdmacliError(
            f"{self.side}: CM event {event} is not expected in phase {conn.phase} [{self.where(conn)}]",
            hint="the connection manager or the peer did something out of sequence; "
            "rerun with --events to see every event",
            cause=Cause.UNEXPECTED_EVENT,
            details={"side": self.side, "step": conn.phase, "event": event},
        )

    def guarded(self, conn: Connection, fn, *args) -> None:
        """A failing call fails its connection, not the whole loop."""
        try:
            fn(conn, *args)
        except RdmaCallError as exc:
            self.fail_here_first(conn, call_error(conn.phase, exc, self.where(conn)))
        except RdmacliError as exc:
            conn.fail(exc)
        if conn.finished:
            self.on_finished(conn)

    def check_transport(self, device: str | None, port: int | None) -> None:
        """Refuse a device whose transport lacks what this test needs (iWARP: no UD), in words,
        before a QP is made on it."""
        if not (self.needs and device):
            return
        transport = self.backend.transport(device, port or 1)
        if transport and (err := refusal(transport, device, self.needs)):
            raise err

    def where(self, conn: Connection) -> str:
        return f"{conn.local} -> {conn.remote}" + (f" on {conn.device}" if conn.device else "")

    def on_wcs(self, conn: Connection, wcs: list[WorkCompletion]) -> None:
        """A run of one connection's completions from one poll, in order. All succeeded, outside
        a settle: judged as one (one by one cost eight calls a completion, most of a marginal
        connection's dispatch in `make profile`); else one by one (on_wc)."""
        if conn.finished:
            return
        if conn.phase == L.SETTLE or any(map(_STATUS, wcs)):
            for wc in wcs:
                self.on_wc(conn, wc)
            return
        if conn.phase == L.ACCEPT:
            conn.peer_is_sending()
        conn.progress()
        self.guarded(conn, conn.protocol.on_wcs, wcs)

    def on_wc(self, conn: Connection, wc: WorkCompletion) -> None:
        if conn.finished:
            return
        if conn.phase == L.SETTLE:
            self.settled(conn, wc)
            return
        if wc.ok:
            self.on_wcs(conn, [wc])
        elif wc.status != C.WC_WR_FLUSH_ERR:
            # (a flush never decides the cause: the QP went to error for a reason said on its
            # own: our or the peer's disconnect, whose DISCONNECTED may be later in this very
            # turn, an earlier failed completion, a device event)
            self.fail_here_first(conn, self.wc_failed(conn, wc.status_str, wc.status, wc.opcode))
            self.on_finished(conn)

    def wc_failed(self, conn: Connection, status_str: str, status: int, opcode: int) -> RdmacliError:
        return RdmacliError(
            f"{conn.phase}: work completion failed: {status_str} (status {status}, "
            f"opcode {opcode}) [{self.where(conn)}]",
            hint="the peer went away or misbehaved; RETRY_EXC means no ACKs (peer dead, "
            "wrong GID/MTU), REM_ACCESS means a bad rkey/address from the peer",
            cause=Cause.TRANSFER,
            details={"step": conn.phase, "wc_status": status, "wc_opcode": opcode},
        )

    def start_data(self, conn: Connection, phase: L.Phase = L.DATA) -> None:
        """Connected (or joined): data may move, bounded by the phase's own timeout. A protocol
        that waits for a person to start its peer (a multicast receiver) begins its data phase
        waiting for it (WAIT_FOR_PEER: no idle deadline until the first datagram)."""
        conn.established()
        self.enter(conn, L.WAIT_FOR_PEER if phase is L.DATA and conn.protocol.waits_for_peer else phase)
        conn.protocol.on_established(conn)

    def on_disconnected(self, conn: Connection, ev: CmEvent, settle: L.Phase | None) -> None:
        # Completions may wait in the CQ while the CM fd was served first: count them before
        # judging the exchange, and before our own disconnect flushes what is left.
        self.cq_pool.drain(conn)
        if settle is not None and not conn.disconnect_sent and conn.protocol.outstanding() > 0:
            # the peer's DREQ overtook the ACKs of our last sends: their completions are the
            # evidence, and our answer would flush them. Wait for them (bounded: settle_s).
            self.enter(conn, settle)
            return
        self.judge_disconnect(conn)

    def settled(self, conn: Connection, wc: WorkCompletion) -> None:
        """A completion while we wait for the evidence of a disconnected connection: counted if
        it succeeded; a failed one (the peer's QP is gone: no ACK will come) ends the wait."""
        if wc.ok:
            self.guarded(conn, conn.protocol.on_wc, wc)
        if not conn.finished and (not wc.ok or conn.protocol.outstanding() == 0):
            self.guarded(conn, self.judge_disconnect)

    def judge_disconnect(self, conn: Connection) -> None:
        """The connection is disconnected and its own evidence is in (or will not come): answer
        the peer's DREQ (that flushes our QP) and let the protocol judge the exchange."""
        ev = conn.last_event  # the peer's DISCONNECTED, read before a settle's completions
        if conn.disconnect_sent:
            self.step_done(conn, "disconnect", ev.t if ev is not None and ev.type == C.DISCONNECTED else None)
        else:
            conn.disconnect()  # answer the peer's DREQ: flushes our QP
            self.timer.end("disconnect", conn.index)
        conn.connected = False
        conn.protocol.on_disconnected(conn)

    def fail_on(self, conn: Connection, ev: CmEvent) -> None:
        """An error event ends its connection, decoded into words and an exit code."""
        conn.connected = False
        self.fail_here_first(
            conn, event_error(ev, step=conn.phase, local=conn.local, remote=conn.remote, device=conn.device)
        )

    def fail_here_first(self, conn: Connection, err: RdmacliError) -> None:
        """Fail a connection, but look at this host first (status.here_first)."""
        conn.fail(here_first(self.backend, conn, err, self.where(conn)))

    def on_finished(self, conn: Connection) -> None:
        """A connection finished (well or not): its protocol hears it once. Flows that do more
        call this last."""
        if not conn.ended:
            conn.ended = True
            conn.protocol.on_ended(conn)

    def all_finished(self) -> bool:
        """Every connection finished: a cursor over all_conns keeps each loop turn O(1)."""
        conns, i = self.all_conns, min(self._first_open, len(self.all_conns))
        while i < len(conns) and conns[i].finished:
            i += 1
        self._first_open = i
        return i == len(conns)

    # -- deadlines -----------------------------------------------------------------------------
    def nearest_deadline(self, now: float | None = None) -> tuple[float, str] | None:
        return self.deadlines.nearest(self.conns.values(), now)

    def on_conn_deadline(self, conn: Connection, hint: str | None) -> None:
        """A connection's own deadline passed: it fails, unless all that was left was the
        peer's answer to our disconnect (a C server busy elsewhere may never give it)."""
        if conn.phase == L.SETTLE:  # the evidence did not come in time: judge without it
            self.guarded(conn, self.judge_disconnect)
            return
        if conn.phase == L.DISCONNECT and conn.error is None:
            self.warn(self.unanswered(conn))
            self.timer.end("disconnect", conn.index)
            conn.connected = False
            conn.finish()
        else:
            self.fail_here_first(conn, self.deadline_passed(conn, hint))
        self.on_finished(conn)

    def unanswered(self, conn: Connection) -> str:
        return (
            f"connection {conn.index}: {conn.remote} did not answer the disconnect within "
            f"{self.timeouts.connect_s:g} s; torn down without it"
        )

    def deadline_passed(self, conn: Connection, hint: str | None) -> RdmacliError:
        """conn's own deadline passed in its phase: the protocol's words, else the generic ones."""
        return conn.protocol.on_deadline(conn) or DeadlineExpired(
            f"{conn.phase}: no progress within its deadline [{self.where(conn)}]",
            hint=hint,
            details={"step": conn.phase},
        )

    def first_error(self) -> RdmacliError | None:
        return next((c.error for c in self.all_conns if c.error), None)

    def stop(self) -> None:
        """Ask a running flow to end after its current loop turn (safe from a signal handler
        and from another thread): what has already arrived is still handled (run_loop)."""
        self.stopping = True
        self.loop.wake()

    def run(self) -> None:
        """The flow's whole run: the client's, the server's or the multicast one's."""
        raise NotImplementedError

    def run_loop(self, done: Callable[[], bool]) -> None:
        """Run until done(); a connection whose own deadline passes ends, the others go on."""
        while True:
            try:
                self.loop.run_until(lambda: self.stopping or done(), self.nearest_deadline)
                if self.stopping:  # disconnects and completions already queued are judged too
                    self.loop.settle()
                return
            except DeadlineExpired as exc:
                # What has already arrived is handled before anybody is failed for a deadline:
                # an ESTABLISHED queued behind a busy server's requests, completions a fair
                # turn left in the CQ are the wire's answer, late only on this host.
                self.loop.settle()
                now = time.monotonic()
                passed = self.nearest_deadline(now)
                if passed is None or passed[0] > now:
                    continue  # what was handled moved it
                expired = self.deadlines.expired(self.conns.values(), now)
                if not expired:
                    raise self.on_run_deadline(exc) from None
                for conn in expired:
                    self.on_conn_deadline(conn, exc.hint)

    def on_run_deadline(self, exc: DeadlineExpired) -> RdmacliError:
        """The overall deadline (or a flow-wide wait) passed: the error that explains it."""
        live = [c for c in self.conns.values() if not c.finished]
        return overrun(exc, live, self.timeouts.words, self.where)

    # -- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        """Tear everything down. Never raises: what fails is a warning, and the run's result
        stands (a bug here must not turn a pass into an internal error)."""
        if self.closed:
            return
        self.closed = True
        for conn in self.all_conns if self.lockstep else ():  # cmtime's: every QP, then every id
            conn.teardown(id_too=False)
        for conn in self.all_conns:
            conn.teardown()
        # the CQs no connection gave back, the loop's watches, then the event channel with every
        # cm_id still hanging on it (a server's listener, a connection a failure left half-made)
        stages = (self.cq_pool.close, self.loop.close, self.channel.close)
        for stage in stages:
            try:
                for err in stage() or ():
                    self.warn(f"teardown: {err}")
            except Exception as exc:
                self.warn(f"teardown: internal error: {type(exc).__name__}: {exc}")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
