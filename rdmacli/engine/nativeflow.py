"""The client side with its connections run in C (native/cmrun.c): connect's and events' exchanges.

ClientFlow's sequence for many connections costs most of its time in Python's dispatch (issue
74: 2x ucmatose a connection under TCG). Here Python prepares a plan (the addresses, the
exchange, each phase's bound and this side's lifecycle rows: C declares no transition of its
own), hands it to C slice by slice, renders what the log holds between slices (and serves
signals there), and at the end makes each connection's record a Connection whose state, figures
and error the Python engine's own functions say: the same words, causes and exit codes on both
paths. Where the extension is not built, or a run needs what only Python does (--wait, --tos,
a protocol of its own), ClientFlow runs as before; the summary's data says which ran (data_path).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

from rdmacli import events as E
from rdmacli import native
from rdmacli.engine import lifecycle as L
from rdmacli.engine.client import ClientFlow
from rdmacli.engine.conn import MAX_WINDOW, Connection, memlock_error
from rdmacli.engine.flow import Flow
from rdmacli.engine.loop import DEADLINE_HINT, DeadlineExpired
from rdmacli.engine.status import call_error, refused_at_once, short_status
from rdmacli.outcome import State
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import format_hostport, parse_bytes
from rdmacli.rdma.cm import CmEvent, RdmaCallError, ptr_key
from rdmacli.rdma.verbs import WorkCompletion

PHASES = list(L.Phase)  # a phase's number in C is its place here (RDMACLI_PH_*: a unit test)
ACTIONS = ("addr_resolved", "route_resolved", "established", "disconnected")  # RDMACLI_ACT_* - 1
STEPS = ("create id", "resolve addr", "resolve route", "create qp", "cm connect", "disconnect",
         "destroy qp", "destroy id", "dispatch (rdmacli)", "bind addr",
         "accept")  # RDMACLI_ST_*, in order  # fmt: skip
CALLS = ("", "rdma_create_id", "rdma_resolve_addr", "rdma_resolve_route", "ibv_create_cq",
         "rdma_create_qp", "ibv_reg_mr", "ibv_post_recv", "ibv_post_send", "rdma_connect",
         "ibv_poll_cq", "rdma_set_option", "rdma_get_cm_event", "ibv_query_device",
         "rdma_bind_addr", "rdma_accept")  # fmt: skip
STATES = (State.PENDING, State.ESTABLISHED, State.DONE, State.FAILED, State.REJECTED)  # RDMACLI_CS_*
SLICE_S = 0.2  # between two looks of Python's: records rendered, a stop request served


class EndedId:
    """A connection's cm_id, once C has torn it down: what the engine's words still ask of it."""

    has_qp = False

    def __init__(self, key: int, port_num: int):
        self.key, self.port_num = key, port_num


def exchange_of(protocol) -> int | None:
    """The C exchange that is this protocol's (its class's own `native_exchange`: a subclass that
    changes what goes on the wire is not the exchange C knows), None for one only Python runs."""
    return vars(type(protocol)).get("native_exchange")


class NativeRun(Flow):
    """What the native client and server share: the plan's common part (the channel, each
    phase's bound, the side's rows), its two logs, their rendering, the step figures, and a
    slot's record said in the engine's words. Mixed into a Flow (ClientFlow, ServerFlow)."""

    data_path: str | None = None
    given: tuple | None = None  # (ffi, lib) of another build (the parity test's twin)
    ffi: Any
    lib: Any
    _plan: Any
    _conns: Any

    def _new_plan(self, slots: int):
        """A plan with `slots` connection records and two logs sized for them."""
        ffi = self.ffi
        p = ffi.new("struct rdmacli_cm_plan *")
        self._conns = ffi.new("struct rdmacli_cm_conn[]", slots)
        self._seen: set[tuple[str, int]] = set()  # the (device, port)s whose counters are read
        self._new_logs(p, slots)
        p.conns, p.connections = self._conns, slots
        p.channel = ffi.NULL if self.given else ffi.cast("void *", ptr_key(self.channel.ptr))
        for i, phase in enumerate(PHASES):
            limit = self.timeouts.limit_s(L.PHASES[phase].limit)
            p.limit_ns[i] = int(limit * 1e9) if limit else 0
        p.overall_end_ns = int(self.deadline_all * 1e9) if self.deadline_all else 0
        for i, ((phase, event), row) in enumerate(self.rows.items()):
            p.rows[i] = (PHASES.index(phase), event, PHASES.index(row.next) if row.next else -1,
                         ACTIONS.index(row.action) + 1)  # fmt: skip
        p.nrows = len(self.rows)
        p.error_events, p.nerror = list(L.ERROR_EVENTS), len(L.ERROR_EVENTS)
        p.informational, p.ninfo = list(L.INFORMATIONAL), len(L.INFORMATIONAL)
        p.max_window = MAX_WINDOW
        p.log_events = 1 if self.detailed else 0
        p.stop = 1 if self.stopping else 0  # a stop that came before the run
        return p

    def _new_logs(self, p, slots: int) -> None:
        """Two logs sized for `slots` connections, the plan's C fills first: C fills one while
        Python renders what the other holds (_beside)."""
        ffi = self.ffi
        self._log_cap = self.lib.RDMACLI_CM_LOG_PER_CONN * slots + 1024
        self._logs = [ffi.new("struct rdmacli_cm_log[]", self._log_cap) for _ in range(2)]
        self._taken: tuple[Any, int] = (self._logs[1], 0)  # what Python has still to render
        self._filling = 0  # the log C fills
        p.log, p.log_cap, p.log_len = self._logs[0], self._log_cap, 0

    def _connection(self, c, cm, local: str, remote: str) -> Connection:
        """Slot c's Connection (C owns its resources), its addresses and device as C learnt them
        (`local`, `remote`: the words where C knows none), kept by the flow."""
        loc, rem = parse_bytes(bytes(c.local)), parse_bytes(bytes(c.remote))
        conn = Connection(self, c.index, cm, self.make_protocol())
        conn.torn_down = True  # C owns its resources (rdmacli_cm_retire, rdmacli_cm_close)
        conn.local = format_hostport(*loc) if loc else local
        conn.remote = format_hostport(*rem) if rem else remote
        conn.device = self.ffi.string(c.device).decode() or None
        self.conns[conn.cm.key] = conn
        self.all_conns.append(conn)
        return conn

    def _see_device(self, device: str | None, port: int) -> None:
        """A device first used has its counters read from now on (their baseline)."""
        if device and (device, port) not in self._seen:
            self._seen.add((device, port))
            self.counters.see(device, port)

    def _beside(self, run_c: Callable[[], int], work: Callable[[], None]) -> int:
        """C's slice in a thread of its own (the call lets the GIL go) while Python does `work`
        on what C is done with: rendering 560 CM events for --json-lines took 0.4 s of TCG's
        CPU, and with C waiting on it the peer's messages waited too. C is never left running
        on the plan: a stop (or a signal's exception) ends its slice at its next turn, and the
        exception is raised once C has returned."""
        p, rc = self._plan, []
        worker = threading.Thread(target=lambda: rc.append(run_c()), name="rdmacli-cm", daemon=True)
        worker.start()
        failed: BaseException | None = None
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 -- raised again once C has returned
            failed = exc
        while worker.is_alive():
            try:
                if failed is not None:
                    p.stop = 1
                worker.join()
            except BaseException as exc:  # noqa: BLE001 -- the first is raised
                failed = failed or exc
        if failed is not None:
            raise failed
        return rc[0] if rc else self.lib.RDMACLI_RUN_FAILED

    def why_python(self) -> str | None:
        """Why this run's connections are Python's (None: C runs them)."""
        from rdmacli.backend import RdmaBackend

        if self.given is None:
            if os.environ.get(native.CM_ENV, "").lower() == native.PYTHON:
                return f"{native.CM_ENV}=python"
            if native.load() is None:
                return native.why()
            if type(self.backend) is not RdmaBackend:
                return "a backend of its own"
            if why := self.why_this_run():
                return why
            if self.options.tos is not None or self.options.ack_timeout is not None:
                return "--tos or --ack-timeout"
        if exchange_of(self.make_protocol()) is None:
            return "a protocol only Python runs"
        if any(row.action not in ACTIONS for row in self.rows.values()):
            return "a lifecycle row C has no handler for"
        return None

    def why_this_run(self) -> str | None:
        """What of this side's options only Python runs (None: nothing)."""
        return None

    def in_python(self) -> bool:
        """The runner chosen (data_path says which): True for the Python engine's; else C's,
        its library loaded."""
        why = self.why_python()
        self.data_path = native.PYTHON if why else native.NATIVE
        if why is None:
            self.ffi, self.lib = self.given or native.load()
        return why is not None

    def _fill(self, conn: Connection, c) -> None:
        """A slot's record into its Connection: the counts, state and error C kept, said in the
        engine's own words (its protocol's verdict, the flow's causes); finished, it is over."""
        conn.connected, conn.disconnect_sent = bool(c.connected), bool(c.disconnect_sent)
        limits = SimpleNamespace(max_qp_wr=c.max_qp_wr, max_cqe=c.max_cqe) if c.max_cqe else None
        conn._limits = limits  # type: ignore[assignment]  # the device's, as C queried them
        proto: Any = conn.protocol
        if hasattr(proto, "received"):  # cmatose's counts, as C kept them (the unconfirmed: below)
            proto.window = c.window or 1
            proto.received, proto.sent = c.received, c.sent - c.unconfirmed
            proto.sends_posted, proto.recvs_posted = c.sends_posted, c.recvs_posted
            proto.bytes_received = c.bytes_received
            proto.bytes_sent = c.bytes_sent - c.unconfirmed * proto.size
        conn.phase = PHASES[c.fail_phase if c.fail_kind else c.phase]
        state = STATES[c.state]
        if state is State.DONE and not c.unanswered:
            proto.on_disconnected(conn)  # its own verdict (and words) on the counts C kept
        elif state is State.FAILED:
            self._failed(conn, c)
        elif c.unanswered:
            self.warn(self.unanswered(conn))
        if conn.error is None:
            conn.state = state
        conn.phase = PHASES[c.phase]
        if conn.finished:
            self.on_finished(conn)

    def stop(self) -> None:
        super().stop()
        p = getattr(self, "_plan", None)
        if p is not None:  # C, in its thread, ends its slice at its next turn
            p.stop = 1

    def _take_log(self) -> None:
        """The slice's log taken (C has returned): C's next slice fills the other one. A device
        first used has its counters read now, before C goes on (their baseline)."""
        p = self._plan
        self._taken = (self._logs[self._filling], p.log_len)
        self._filling ^= 1
        p.log, p.log_len = self._logs[self._filling], 0
        self._see_devices()

    def _see_devices(self) -> None:
        """Each device first used has its counters read from now on (the client: as C names
        the devices its connections resolved to; the server: at each request)."""

    def _render(self) -> None:
        """The taken log's records, for an observer that shows them: the CM events and steps as
        the Python engine emits them (C logs them only then: log_events). The step timer's
        figures are C's own, merged once (_merge_steps)."""
        log, n = self._taken
        k = 0
        try:
            while k < n:
                e = log[k]
                k += 1
                if e.kind == self.lib.RDMACLI_LOG_EVENT:
                    self._emit_event(e)
                else:  # a step said (C logs none unless an observer shows them: log_events)
                    us = round((e.t1_ns - e.t0_ns) / 1e3, 1)
                    self.emit(E.Step(conn=e.conn, step=STEPS[e.what], us=us))
        finally:  # a stop's exception mid-way: the rest is rendered later (close)
            self._taken = (log + k, n - k)

    def _merge_steps(self) -> None:
        """Every step's figures as C kept them (first start, last end, count, the spans' sum,
        least, most) into the step timer: a few numbers a step, not one call a span."""
        for i, step in enumerate(STEPS):
            s = self._plan.steps[i]
            if s.count:
                self.timer.merge(step, s.first_ns / 1e9, s.last_ns / 1e9, s.count, s.total_ns / 1e9,
                                 s.least_ns / 1e9, s.most_ns / 1e9)  # fmt: skip

    def _emit_event(self, e) -> None:
        ev = CmEvent(type=e.what, status=e.status, id=0, listen_id=0, t=e.t0_ns / 1e9,
                     private_data=b"\0" * e.private_data_len, responder_resources=e.responder_resources,
                     initiator_depth=e.initiator_depth, flow_control=e.flow_control,
                     retry_count=e.retry_count, rnr_retry_count=e.rnr_retry_count, srq=e.srq,
                     qp_num=e.qp_num)  # fmt: skip
        conn = e.conn if e.conn >= 0 else None
        self.emit(E.CmEventRecord(t_us=round((ev.t - self.t0) * 1e6, 1), conn=conn, event=ev.name,
                                  status=ev.status, status_text=short_status(ev.type, ev.status),
                                  data=ev.params()))  # fmt: skip

    def _failed(self, conn: Connection, c) -> None:
        lib, kind = self.lib, c.fail_kind
        where = self.where(conn)
        if kind == lib.RDMACLI_CF_EVENT:
            data = bytes(self.ffi.buffer(c.fail_data, c.fail_data_len))
            self.fail_on(conn, CmEvent(type=c.fail_event, status=c.fail_status, id=0, listen_id=0, t=0.0,
                                       private_data=data))  # fmt: skip
        elif kind == lib.RDMACLI_CF_CALL:
            exc = RdmaCallError(CALLS[c.fail_call], c.fail_err)
            if exc.call == "ibv_reg_mr" and exc.errno in (errno.ENOMEM, errno.EPERM, errno.EAGAIN):
                conn.fail(memlock_error(conn.phase, exc, max(getattr(conn.protocol, "size", 1), 1)))
            elif exc.call in ("rdma_create_qp", "ibv_create_cq") and (
                over := conn._over_limit(exc, c.window, c.window)
            ):
                conn.fail(over)
            else:
                self.fail_here_first(conn, call_error(conn.phase, exc, where))
        elif kind == lib.RDMACLI_CF_REFUSED:
            exc = RdmaCallError("rdma_connect", errno.ECONNREFUSED)
            local, remote, device = conn.local, conn.remote, conn.device
            conn.fail(refused_at_once(conn.phase, exc, local=local, remote=remote, device=device))
        elif kind == lib.RDMACLI_CF_WC:
            status = WorkCompletion(0, c.wc_status, 0, 0, None, 0, 0).status_str
            self.fail_here_first(conn, self.wc_failed(conn, status, c.wc_status, c.wc_opcode))
        elif kind == lib.RDMACLI_CF_DEADLINE:
            self.fail_here_first(conn, self.deadline_passed(conn, DEADLINE_HINT))
        elif kind == lib.RDMACLI_CF_UNEXPECTED:
            conn.fail(self.unexpected(conn, C.event_name(c.fail_event)))
        else:  # RDMACLI_CF_PEER_ENDED: the protocol's own words on its counts
            conn.protocol.on_disconnected(conn)

    def close(self) -> None:
        p = getattr(self, "_plan", None)
        if p is not None and not self.closed:
            self._render()  # what a stop's exception left
            self.lib.rdmacli_cm_close(p)
            self._take_log()
            self._render()
            self._merge_steps()
            self._plan = None
        super().close()


class NativeClientFlow(NativeRun, ClientFlow):
    """ClientFlow, its connections run by native/cmrun.c where the run allows it."""

    def __init__(self, *, native_lib: tuple | None = None, **kw):
        """native_lib: (ffi, lib) of another build of cmrun.c (the parity test's twin, facing a
        scripted peer): it runs whatever the environment and the backend."""
        super().__init__(**kw)
        self.given = native_lib

    def why_this_run(self) -> str | None:
        if self.wait_until or self.route_only or self.needs or self.options.busy_poll:
            return "--wait, a route-only probe, a transport's needs or --busy-poll"
        return None

    def run(self) -> None:
        if self.in_python():
            super().run()
            return
        self._plan = self._make_plan()
        self._unnamed: set[int] = set()  # connections begun whose device C has not yet named
        self._begun = 0  # connections C had begun at the last look
        try:
            self._run_native()
        finally:
            self._materialize()

    def _see_devices(self) -> None:
        """The devices C has named since the last look: each first used has its counters read."""
        p = self._plan
        if self._begun < p.started:  # the connections C has begun since
            self._unnamed.update(range(self._begun, p.started))
            self._begun = p.started
        for i in [i for i in self._unnamed if self._conns[i].device[0]]:  # a device is known
            self._unnamed.discard(i)
            self._see_device(self.ffi.string(self._conns[i].device).decode(), self._conns[i].port_num)

    # -- the plan ----------------------------------------------------------------------------
    def _make_plan(self):
        from rdmacli.rdma.cm import ffi as abi

        p = self._new_plan(self.n)
        p.dst = bytes(abi().buffer(self.dst.buf))
        if self.src is not None:
            p.src, p.has_src = bytes(abi().buffer(self.src.buf)), 1
        p.ps, p.resolve_ms, p.tos, p.ack_timeout = self.options.ps, self.timeouts.resolve_ms, -1, -1
        proto = self.make_protocol()
        p.exchange = exchange_of(proto)
        self.lockstep = self.in_cmtime_order(proto)
        p.lockstep = 1 if self.lockstep else 0
        p.count, p.size = getattr(proto, "count", 0), getattr(proto, "size", 0)
        proto.window = max(p.count, 1)  # the parameters of a count within the window ...
        plain = proto.conn_param()
        proto.window = 0  # ... and beyond it (the peer retries on RNR)
        p.rnr_retry_windowed = proto.conn_param().rnr_retry_count
        p.private_data = plain.private_data
        p.private_data_len = len(plain.private_data)
        p.responder_resources, p.initiator_depth = plain.responder_resources, plain.initiator_depth
        p.retry_count, p.rnr_retry_plain = plain.retry_count, plain.rnr_retry_count
        return p

    # -- running -------------------------------------------------------------------------------
    def _run_native(self) -> None:
        lib, p = self.lib, self._plan
        while True:
            rc = self._run_slice()
            self._take_log()
            if rc == lib.RDMACLI_OK:
                self._render()
                return
            if rc in (lib.RDMACLI_SLICE, lib.RDMACLI_SIGNAL):
                if self.stopping:  # disconnects and completions already queued are judged too
                    self._render()
                    lib.rdmacli_cm_run(p, 0, 1)
                    self._take_log()
                    self._render()
                    return
                continue
            self._render()
            if rc == lib.RDMACLI_DEADLINE:
                self._materialize()
                words = self.timeouts.words
                raise self.on_run_deadline(DeadlineExpired(
                    f"deadline expired while waiting for {words.overall}",
                    hint=DEADLINE_HINT,
                ))  # fmt: skip
            call = CALLS[p.run_call]
            step = {"rdma_create_id": "create id", "rdma_resolve_addr": "resolve addr",
                    "rdma_bind_addr": "resolve addr"}.get(call, "data")  # fmt: skip
            raise call_error(step, RdmaCallError(call, p.run_err), f"{self.src or '*'} -> {self.dst}")

    def _run_slice(self) -> int:
        """One slice of C's run; what the last slice logged is rendered meanwhile (_beside)."""
        lib, p = self.lib, self._plan
        end = time.monotonic_ns() + int(SLICE_S * 1e9)
        run_c = lambda: lib.rdmacli_cm_run(p, end, 0)  # noqa: E731
        return self._beside(run_c, self._render) if self._taken[1] else run_c()

    # -- the records, in the engine's words ----------------------------------------------------
    def _materialize(self) -> None:
        p = getattr(self, "_plan", None)
        if p is None or self.all_conns:
            return
        for i in range(p.started):
            self._record(self._conns[i])

    def _record(self, c) -> None:
        cm = EndedId(-1 - c.index, c.port_num)
        conn = self._connection(c, cm, self.src.host if self.src else "*", self.remote_name())
        self._fill(conn, c)
