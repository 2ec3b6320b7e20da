"""One connection: its cm_id, CQ on a completion channel, MRs, phase and deadline, and teardown."""

from __future__ import annotations

import time

from rdmacli.errors import RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma import verbs
from rdmacli.rdma.addr import format_hostport
from rdmacli.rdma.cm import CmId, RdmaCallError


class Connection:
    def __init__(self, flow, index: int, cm: CmId):
        self.flow = flow
        self.index = index
        self.cm = cm
        self.protocol = None
        self.comp: verbs.CompChannel | None = None
        self.cq: verbs.CQ | None = None
        self.mrs: list[verbs.MR] = []
        self.phase = "start"
        self.deadline: float | None = None
        self.connected = False
        self.disconnect_sent = False
        self.finished = False
        self.rejected = False
        self.datagram = False  # UD: no ESTABLISHED on the passive side, no disconnect
        self.last_event = None  # the CM event being handled (UD peers read ah_attr from it)
        self.ahs: list[verbs.AH] = []
        self.group = None  # the multicast SockAddr joined, left again in teardown
        self.torn_down = False
        self.error: RdmacliError | None = None
        self.local = "?"
        self.remote = "?"
        self.device: str | None = None
        self.teardown_errors: list[str] = []

    # -- phases and deadlines ------------------------------------------------------------------
    def expect(self, phase: str, seconds: float | None) -> None:
        self.phase = phase
        self.deadline = time.monotonic() + seconds if seconds else None

    def progress(self) -> None:
        """Data moved: push the idle deadline out."""
        if self.phase == "data":
            self.expect("data", self.flow.timeouts.idle_s)

    def learn_addresses(self) -> None:
        loc, rem = self.cm.local_addr(), self.cm.peer_addr()
        self.local = format_hostport(*loc) if loc else "?"
        self.remote = format_hostport(*rem) if rem else self.remote
        self.device = self.cm.device

    # -- resources -----------------------------------------------------------------------------
    def create_qp(
        self,
        *,
        qp_type: int = C.QPT_RC,
        send_wr: int,
        recv_wr: int,
        sq_sig_all: int = 0,
        create_flags: int = 0,
    ) -> None:
        verbs_ctx = self.cm.verbs
        self.comp = verbs.CompChannel(verbs_ctx)
        self.cq = verbs.CQ(verbs_ctx, send_wr + recv_wr, self.comp)
        self.cm.create_qp(
            qp_type=qp_type,
            send_cq=self.cq.ptr,
            recv_cq=self.cq.ptr,
            max_send_wr=send_wr,
            max_recv_wr=recv_wr,
            sq_sig_all=sq_sig_all,
            create_flags=create_flags,
        )
        self.flow.loop.watch_cq(self.comp, self.cq, lambda wc: self.flow.on_wc(self, wc))

    def reg(self, size: int, access: int = C.ACCESS_LOCAL_WRITE) -> verbs.MR:
        mr = verbs.MR(self.cm.pd, size, access)
        self.mrs.append(mr)
        return mr

    def ah_from_attr(self, ah_attr) -> verbs.AH:
        ah = verbs.AH.from_attr(self.cm.pd, ah_attr)
        self.ahs.append(ah)
        return ah

    def ah_from_wc(self, wc, grh_addr: int) -> verbs.AH:
        ah = verbs.AH.from_wc(self.cm.pd, wc, grh_addr, self.cm.port_num)
        self.ahs.append(ah)
        return ah

    @property
    def qp(self):
        return self.cm.qp

    # -- ending --------------------------------------------------------------------------------
    def disconnect(self) -> None:
        if self.connected and not self.disconnect_sent and not self.datagram:
            self.disconnect_sent = True
            self.flow.timer.start("disconnect", self.index)
            try:
                self.cm.disconnect()
            except RdmaCallError as exc:
                self.teardown_errors.append(str(exc))
            self.expect("disconnect", self.flow.timeouts.connect_s)

    def finish(self) -> None:
        self.finished = True

    def fail(self, err: RdmacliError) -> None:
        if self.error is None:
            self.error = err
        self.finished = True

    def teardown(self) -> None:
        """Disconnect, destroy QP, deregister MRs, destroy CQ and channel, destroy the id."""
        if self.torn_down:
            return
        self.torn_down = True
        timer, i = self.flow.timer, self.index
        self.disconnect()
        steps = []
        if self.group is not None:
            steps.append(("leave", lambda: self.cm.leave_multicast(self.group)))
        if self.cm.has_qp:
            steps.append(("destroy qp", self.cm.destroy_qp))
        steps += [(None, ah.destroy) for ah in self.ahs]
        steps += [(None, mr.dereg) for mr in self.mrs]
        if self.comp is not None:
            steps.append((None, lambda: self.flow.loop.unwatch_cq(self.comp)))
        if self.cq is not None:
            steps.append((None, self.cq.destroy))
        if self.comp is not None:
            steps.append((None, self.comp.destroy))
        steps.append(("destroy id", self.cm.destroy))
        for name, fn in steps:
            if name:
                timer.start(name, i)
            try:
                fn()
            except RdmaCallError as exc:
                self.teardown_errors.append(str(exc))
            if name:
                timer.end(name, i)
        self.flow.loop.forget_cm(self.cm.key)
