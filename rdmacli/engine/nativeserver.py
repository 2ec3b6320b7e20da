"""The server side with its connections run in C (native/cmserve.c): `listen` serving cmatose's
exchange (ucmatose clients, rdmacli connect).

ServerFlow spends most of a connection in Python's dispatch, as the client did (issue 74: 1.5x
ucmatose's server under TCG). Here the listener stays Python's and so does every decision: a
CONNECT_REQUEST takes the next slot of the plan and ends C's slice; Python makes the request a
Connection, says it (Request) and decides it with ServerFlow's own policy (admitted: room,
companions, --max-clients, the client's hello), and C carries the decision out at its next call,
then serves the connection by the PASSIVE rows. A slot that ends is listed for Python, which
says its record in the engine's words (NativeRun._fill, ServerFlow.on_finished) and retires it.
A persistent server (--persistent), --tos, --ack-timeout or another protocol run as before, in
Python; the summary's data says which ran (data_path).
"""

from __future__ import annotations

import time

from rdmacli import native
from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import Connection
from rdmacli.engine.loop import DEADLINE_HINT, DeadlineExpired
from rdmacli.engine.nativeflow import CALLS, SLICE_S, EndedId, NativeRun
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.status import call_error
from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import CmEvent, RdmaCallError, ptr_key

FIRST_SLOTS = 16  # at least; doubled whenever the requests fill them


class _Request(EndedId):
    """A request's cm_id, C's: what ServerFlow asks of it (a reject's reason goes to the slot)."""

    def __init__(self, flow: NativeServerFlow, slot: int, port_num: int):
        super().__init__(-1 - slot, port_num)
        self.flow, self.slot = flow, slot

    def reject(self, data: bytes) -> None:
        self.flow._decide(self.slot, self.flow.lib.RDMACLI_DECIDE_REJECT, data)


class NativeServerFlow(NativeRun, ServerFlow):
    """ServerFlow, its connections run by native/cmserve.c where the run allows it."""

    def __init__(self, *, native_lib: tuple | None = None, **kw):
        super().__init__(**kw)
        self.given = native_lib

    def why_this_run(self) -> str | None:
        if self.max_clients is None:
            return "a persistent server (--persistent)"
        if self.needs or self.options.busy_poll:
            return "a transport's needs or --busy-poll"
        return None

    def others_open(self, conn: Connection) -> int:
        """Counted, not walked (ServerFlow's walk of every open connection, at each request,
        was a server's cost growing with its clients): the open slots but this request's own
        (each request is decided before the next is made a Connection)."""
        if self.data_path != native.NATIVE:
            return super().others_open(conn)
        return len(self._slots) - len(self._ending) - 1

    def pinned_held(self, conn: Connection) -> int:
        """Counted as C registers it: one buffer of what each accepted request asked."""
        if self.data_path != native.NATIVE:
            return super().pinned_held(conn)
        return self._held

    def run(self) -> None:
        if self.in_python():
            super().run()
            return
        self.start_listening()
        assert self.listen_id is not None and self.max_clients is not None
        self._plan = p = self._new_plan(max(self.max_clients, FIRST_SLOTS))
        self._ended = self.ffi.new("uint32_t[]", p.connections)
        p.ended, p.exchange = self._ended, self.lib.RDMACLI_EX_CMATOSE
        # the listener as C knows it (the parity test's twin: its own, id 1)
        p.listen_id = self.ffi.cast("void *", 1 if self.given else ptr_key(self.listen_id.ptr))
        self._slots: dict[int, Connection] = {}  # the open slots' Connections
        self._pinned: dict[int, int] = {}  # the accepted slots' registered bytes (cmatose's one buffer)
        self._held = 0  # their sum
        self._ending: list[int] = []  # slots that ended, to be said (_say) and retired
        self._said: list[int] = []  # said, to be retired
        self._seen_requests = 0
        self._serve()

    # -- running -------------------------------------------------------------------------------
    def _serve(self) -> None:
        p = self._plan
        try:
            self._serve_until_done()
        finally:
            if p.acted < p.started:  # decisions made since C's last call (the last reject) are carried out
                self._settle()
            self._say_ended()

    def _settle(self) -> None:
        """C carries out the decisions made and judges what is already queued, no more."""
        self.lib.rdmacli_cm_serve(self._plan, 0, 1)
        self._take_log()
        self._render()

    def _serve_until_done(self) -> None:
        lib, p = self.lib, self._plan
        while True:
            if self._ending and len(self._ending) == len(self._slots):
                self._say_ended()  # nothing else open: C has nothing to do meanwhile
            if not self._ending and self.done():
                return
            p.overall_end_ns = self._deadline_ns()
            rc = self._slice()
            self._take_log()
            self._render()
            self._look()
            if self.stopping:
                self._stop()
                return
            if rc in (lib.RDMACLI_SLICE, lib.RDMACLI_SIGNAL):
                continue
            if rc == lib.RDMACLI_DEADLINE:
                self.loop.fire_timers()  # a companion's wait (await_companions), said as its own
                bound = self._deadline_ns(timers=False)
                if not bound or time.monotonic_ns() < bound:
                    continue
                self._sync()
                raise self.on_run_deadline(self._expired())
            raise call_error("listen", RdmaCallError(CALLS[p.run_call], p.run_err), str(self.bind_addr))

    def _slice(self) -> int:
        """One slice of C's serving; the connections that ended in the last are said meanwhile
        (_beside: their records, Finished, made while C serves the others), then retired."""
        lib, p = self.lib, self._plan
        end = time.monotonic_ns() + int(SLICE_S * 1e9)
        run_c = lambda: lib.rdmacli_cm_serve(p, end, 0)  # noqa: E731
        if not self._ending:
            return run_c()
        try:
            return self._beside(run_c, self._say)
        finally:
            self._retire()

    def _say_ended(self) -> None:
        """The connections that ended, said and retired now (C is not running)."""
        try:
            self._say()
        finally:
            self._retire()

    def _say(self) -> None:
        """Each ended slot's record into its Connection (NativeRun._fill, ServerFlow.on_finished);
        what a signal's exception leaves is said at the next call. C touches no ended slot."""
        while self._ending:
            slot = self._ending[0]
            self._fill(self._slots[slot], self._conns[slot])
            del self._slots[slot]
            self._said.append(self._ending.pop(0))

    def _retire(self) -> None:
        """C lets the said slots' resources go (C is not running)."""
        said, self._said = self._said, []
        for slot in said:
            self.lib.rdmacli_cm_retire(self._plan, slot)

    def _deadline_ns(self, timers: bool = True) -> int:
        """The nearest of the run's own bounds C is to keep: --timeout, the first client's wait
        (while none has come), Python's timers (a companion's wait); 0: none."""
        near = self.nearest_deadline()
        at = [near[0]] if near else []
        if timers and self.loop.timers:
            at.append(self.loop.timers[0][0])
        return int(min(at) * 1e9) if at else 0

    def _expired(self) -> DeadlineExpired:
        near = self.nearest_deadline()
        what = near[1] if near else self.timeouts.words.overall
        return DeadlineExpired(f"deadline expired while waiting for {what}", hint=DEADLINE_HINT)

    def _look(self) -> None:
        """What C left for Python: the listener's device gone, the slots that ended, the new
        requests to decide, a request the device had no room for, and room for more requests."""
        p = self._plan
        if p.listener_event:
            raise RdmacliError("the RDMA device under the listener was removed", cause=Cause.DEVICE_REMOVED)
        ended, p.nended = [self._ended[i] for i in range(p.nended)], 0
        for slot in ended:  # said beside C's next slice (_slice); no longer open for the policy
            self._held -= self._pinned.pop(slot, 0)
        self._ending.extend(ended)
        while self._seen_requests < p.started:
            self._request(self._seen_requests)
            self._seen_requests += 1
        if p.acted < p.started and self._conns[p.acted].no_room:
            c = self._conns[p.acted]
            c.no_room = 0
            self.no_room(self._slots[p.acted], RdmaCallError(CALLS[c.no_room_call], c.no_room_err))
        if p.started == p.connections:
            self._grow()

    def _request(self, slot: int) -> None:
        """ServerFlow.on_listen_event for a request C read: its Connection, then the decision."""
        c, lib = self._conns[slot], self.lib
        conn = self._slots[slot] = self._connection(c, _Request(self, slot, c.port_num), "?", "?")
        self._see_device(conn.device, c.port_num)
        data = bytes(self.ffi.buffer(c.request_data, c.request_data_len))
        ev = CmEvent(type=C.CONNECT_REQUEST, status=0, id=0, listen_id=0, t=c.request_ns / 1e9,
                     private_data=data)  # fmt: skip
        if not self.admitted(conn, ev, self.stopping):
            return  # rejected (reject: its reason is in the slot)
        proto = conn.protocol
        c.count, c.size = proto.count, proto.size  # type: ignore[attr-defined]  # cmatose's, as asked
        self._pinned[slot] = proto.pinned_bytes()
        self._held += self._pinned[slot]
        conn.phase = L.ACCEPT
        self._decide(slot, lib.RDMACLI_DECIDE_ACCEPT)

    def _decide(self, slot: int, decision: int, reason: bytes = b"") -> None:
        c = self._conns[slot]
        reason = reason[: len(c.reason)]
        c.reason[0 : len(reason)] = reason
        c.reason_len = len(reason)
        c.decision = decision  # last: C acts on it at its next call
        if decision == self.lib.RDMACLI_DECIDE_REJECT:
            self._slots.pop(slot, None)
            self._held -= self._pinned.pop(slot, 0)  # a request accepted, then the device had no room

    def _grow(self) -> None:
        """Twice the slots (and the ended list, and the logs), C's records copied over."""
        ffi, p = self.ffi, self._plan
        old, n = self._conns, p.connections
        self._conns = ffi.new("struct rdmacli_cm_conn[]", 2 * n)
        ffi.memmove(self._conns, old, ffi.sizeof("struct rdmacli_cm_conn") * n)
        self._ended = ffi.new("uint32_t[]", 2 * n)
        self._render()  # what the old logs hold, before they go
        self._new_logs(p, 2 * n)
        p.conns, p.connections, p.ended, p.nended = self._conns, 2 * n, self._ended, 0

    def _stop(self) -> None:
        """A stop: the requests read so far are turned away (ServerFlow's words), what is
        queued is judged, and each open connection's state is C's."""
        for _ in range(2):
            self._settle()
            self._look()
        self._sync()

    def _sync(self) -> None:
        """The open slots' states into their Connections (a stop's, a deadline's words)."""
        self._say_ended()
        for slot, conn in list(self._slots.items()):
            if self._conns[slot].decision:
                self._fill(conn, self._conns[slot])
