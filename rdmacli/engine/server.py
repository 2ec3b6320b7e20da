"""The passive side of rdma_cm(7): one listener, one state machine per incoming connection.

bind -> listen -> CONNECT_REQUEST -> create qp -> accept -> ESTABLISHED -> data ->
DISCONNECTED. The wait for the first client has no idle deadline: a person starts the client,
maybe minutes later (bounded only by --wait or --timeout). UD (SIDR) has no ESTABLISHED on this
side: the accept itself establishes.
"""

from __future__ import annotations

import errno
import time

from rdmacli import events as E
from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import Flow
from rdmacli.engine.loop import DeadlineExpired
from rdmacli.engine.protocol import Reject
from rdmacli.engine.status import call_error, port_in_use
from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import as_dict
from rdmacli.rdma import constants as C
from rdmacli.rdma.addr import SockAddr
from rdmacli.rdma.cm import CmEvent, CmId, RdmaCallError

# a persistent server's summary lists its last LISTED connections; the others are counted (their
# states, traffic and first error: outcome.Earlier), so it holds the same after a million clients
LISTED = 100
# what a device says when it has no QP, CQ or memory left for one more connection: a resource
# bound of the server's host, turned away with its reason (issue 70), never a failed connection
OUT_OF_ROOM = frozenset({errno.ENOMEM, errno.ENOSPC, errno.EAGAIN})


class ServerFlow(Flow):
    side = "server"
    rows = L.PASSIVE

    def __init__(self, *, bind: SockAddr, max_clients: int | None = 1, backlog: int = 0, **kw):
        super().__init__(**kw)
        self.bind_addr, self.max_clients, self.backlog = bind, max_clients, backlog
        self.listen_id: CmId | None = None
        self.accepted = 0
        self.rejected = 0
        self.finished = 0  # connections served to their end (on_finished)
        if max_clients is None:  # a persistent server: it lists its last LISTED in its summary
            self.listed = LISTED
        self.ready_at: float | None = None
        self.companions_due: dict[str, int] = {}  # client host -> connections of its test to come

    def run(self) -> None:
        self.start_listening()
        self.run_loop(self.done)

    def start_listening(self) -> None:
        """The listener up and said (Ready): what every server does before its first client."""
        lid = self.open_listener()
        self.check_transport(lid.device, lid.port_num)  # a bound address has one
        self.loop.on_cm(lid.key, self.on_listen_event)
        self.counters.see(lid.device, lid.port_num)  # a bound address has one
        self.ready_at = time.monotonic()
        self.emit(
            E.Ready(
                address=self.bind_addr.host,
                port=self.bind_addr.port,
                port_space=next(
                    (n for n, v in C.PORT_SPACES.items() if v == self.options.ps), self.options.ps
                ),
            )
        )

    def open_listener(self) -> CmId:
        """Create, bind and listen; a port another listener holds is said with its holders.
        (A mesh agent's preflight calls this alone, before round 1: what would stop every pair
        is found once.)"""
        self.timer.start("create id", -1)
        try:
            self.listen_id = lid = self.backend.create_id(self.channel, self.options.ps)
            self.timer.end("create id", -1)
            self.timer.start("bind addr", -1)
            lid.bind(self.bind_addr)
            self.timer.end("bind addr", -1)
            lid.listen(self.backlog)
            return lid
        except RdmaCallError as exc:
            if exc.errno == errno.EADDRINUSE:
                port, host = self.bind_addr.port, self.bind_addr.host
                holders = self.backend.port_holders(port)
                raise port_in_use("listen", host, port, holders, exc.call) from exc
            raise call_error("listen", exc, str(self.bind_addr)) from exc

    def done(self) -> bool:
        return (
            self.max_clients is not None
            and self.finished + self.rejected >= self.max_clients
            and self.all_finished()
            and not any(self.companions_due.values())
        )

    def nearest_deadline(self, now: float | None = None) -> tuple[float, str] | None:
        best = super().nearest_deadline(now)
        if self.timeouts.wait_s and not self.all_conns and self.ready_at is not None:
            first = (self.ready_at + self.timeouts.wait_s, f"the first client ({self.timeouts.waited()})")
            if best is None or first[0] < best[0]:
                best = first
        return best

    def on_run_deadline(self, exc: DeadlineExpired) -> RdmacliError:
        if self.timeouts.wait_s and not self.all_conns:
            return DeadlineExpired(
                f"no client connected within {self.timeouts.waited()} (listening on {self.bind_addr})",
                hint="start the client, check that it uses this address, port and port space, "
                f"or wait longer ({self.timeouts.words.wait_longer})",
                details={"step": "listen"},
            )
        return super().on_run_deadline(exc)

    def on_listen_event(self, ev: CmEvent) -> None:
        if ev.type != C.CONNECT_REQUEST:
            if ev.type == C.DEVICE_REMOVAL:
                raise RdmacliError(
                    "the RDMA device under the listener was removed", cause=Cause.DEVICE_REMOVED
                )
            return
        # Decided before the request is announced: a stop that comes after its record finds
        # this client accepted (and interrupts it), never rejected after the fact.
        stopping = self.stopping
        index = self.accepted + self.rejected
        conn = self.new_conn(index, self.backend.request_id(ev, self.channel))
        conn.learn_addresses()
        if self.admitted(conn, ev, stopping):
            self.enter(conn, L.ACCEPT)
            self.guarded(conn, self._accept)

    def admitted(self, conn: Connection, ev: CmEvent, stopping: bool) -> bool:
        """The request said (Request), then this server's policy and the protocol's word on it:
        True, counted as accepted; False, rejected with its reason (said to the client)."""
        # the CONNECT_REQUEST row itself was shown without a connection number: name it here
        self.emit(
            E.Request(
                t_us=round((ev.t - self.t0) * 1e6, 1),
                conn=conn.index,
                local=conn.local,
                remote=conn.remote,
                device=conn.device,
            )
        )
        try:
            foreign = self.refusal(conn, ev)
            if foreign:  # not this server's request at all: said before any word of room
                raise Reject(foreign)
            capacity = self.admit(conn, ev)
            if stopping:
                raise Reject("rdmacli: server is stopping")
            if not capacity:
                raise Reject("rdmacli: server is full")
            self.check_open(conn)
            conn.protocol.on_request(conn, ev)
            self.check_pinned(conn)
        except Reject as r:
            self.reject(conn, str(r))
            return False
        self.accepted += 1
        return True

    def refusal(self, conn: Connection, ev: CmEvent) -> str | None:
        """Why a request is for another server than this one, or None (every request is, here;
        a mesh listener serves one partner of one round)."""
        return None

    def admit(self, conn: Connection, ev: CmEvent) -> bool:
        """Room for this request? A client's test of several connections (its hello says how
        many, up to hello.MAX_GROUP) counts as one client of -c: its companions get room."""
        if self.max_clients is None:
            return True
        host = conn.remote.rsplit(":", 1)[0]
        due = self.companions_due.get(host, 0)
        if due > 0:  # a companion of a test already admitted: room is made if there is none
            self.companions_due[host] = due - 1
            if self.accepted >= self.max_clients:
                self.max_clients += 1
            return True
        if self.accepted >= self.max_clients:
            return False
        group = conn.protocol.companions(ev)
        if group > 1:
            self.companions_due[host] = group - 1
        return True

    def serving(self, conn: Connection) -> list[Connection]:
        """The other connections accepted and not yet finished."""
        return [c for c in self.conns.values() if c is not conn and not c.finished]

    def check_open(self, conn: Connection) -> None:
        """--max-clients: the most connections served at once (a persistent server's bound)."""
        limit = self.options.max_open
        if limit is not None and self.others_open(conn) >= limit:
            raise Reject(f"rdmacli: server is busy: {limit} connections at once (--max-clients)")

    def check_pinned(self, conn: Connection) -> None:
        """--max-pinned: the memory registered for all clients at once, this one's included as
        its request asked (what the others hold is counted as registered, not as asked)."""
        limit = self.options.max_pinned
        if limit is None:
            return
        held = self.pinned_held(conn)
        asked = conn.protocol.pinned_bytes()
        if held + asked > limit:
            raise Reject(
                f"rdmacli: server's memory is taken: {asked} bytes asked, {held} of {limit} "
                "registered for other clients (--max-pinned)"
            )

    def others_open(self, conn: Connection) -> int:
        """How many other connections are being served."""
        return len(self.serving(conn))

    def pinned_held(self, conn: Connection) -> int:
        """The bytes the other connections being served hold registered."""
        return sum(c.pinned for c in self.serving(conn))

    def _accept(self, conn: Connection) -> None:
        if self.options.ack_timeout is not None:
            conn.cm.set_ack_timeout(self.options.ack_timeout)
        try:
            self.setup_qp(conn)
        except RdmaCallError as exc:
            if exc.errno not in OUT_OF_ROOM:
                raise
            self.no_room(conn, exc)
            return
        conn.cm.accept(conn.protocol.accept_param())
        if conn.datagram:  # UD: the SIDR REP is sent, no ESTABLISHED follows (no table row)
            self.leave(conn)
            self.start_data(conn, L.DATA)

    def no_room(self, conn: Connection, exc: RdmaCallError) -> None:
        """The device's bound, not this client's doing: said to the client as a full server's
        is, and the server serves on (its room is counted as not taken)."""
        self.accepted -= 1
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        why = f"rdmacli: server's device has no room for another QP ({exc.call}: {name}); try later"
        self.reject(conn, why)

    def reject(self, conn: Connection, reason: str) -> None:
        self.rejected += 1
        self.emit(E.Rejected(conn=conn.index, remote=conn.remote, reason=reason))
        try:
            conn.cm.reject(reason.encode()[:140] + b"\0")
        except RdmaCallError:  # its request is gone already (the peer's own timeout): retired as well
            pass
        conn.reject()
        self.retire(conn)

    def on_established(self, conn: Connection, ev: CmEvent, to: L.Phase) -> None:
        self.leave(conn, ev)
        self.start_data(conn, to)

    def on_finished(self, conn: Connection) -> None:
        if conn.summarized:
            return
        conn.summarized = True
        self.finished += 1
        rec = E.Finished(
            conn=conn.index,
            remote=conn.remote,
            state=conn.state.value,
            protocol=conn.protocol.name,
            role=conn.protocol.role,
            served=as_dict(conn.protocol.summary()),
            error=conn.error,
        )
        self.retire(conn)
        self.emit(rec)
        self.await_companions(conn)
        super().on_finished(conn)

    def await_companions(self, conn: Connection) -> None:
        """A client's test may open its connections one after another (a size sweep, -a: one
        per size): while its hello's companions are due, the server waits for the next one, but
        only --connect-timeout from the moment none of that client's is open (a client that
        died between two is not waited for for ever; what came is served and said)."""
        host = conn.remote.rsplit(":", 1)[0]
        due = self.companions_due.get(host, 0)
        if not due or any(c.remote.rsplit(":", 1)[0] == host for c in self.serving(conn)):
            return
        seen = self.accepted

        def late() -> None:
            if self.accepted == seen and self.companions_due.get(host):
                missing = self.companions_due.pop(host)
                self.warn(
                    f"{host} announced {missing} more connection(s) of its test; none came within "
                    f"{self.timeouts.connect_s:g} s (--connect-timeout) of its last: served what came"
                )

        self.loop.call_later(self.timeouts.connect_s, late)
