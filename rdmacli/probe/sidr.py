"""One NIC's partners' QP numbers by SIDR (udaddy's exchange, rdma_cm's UDP port space), and the
pace of their probes once known: NicProbe's half that talks to rdma_cm. Asks are bounded (at
most MAX_RESOLVING in flight, none after the resolve window), each waits attempt_s and is asked
again; a partner's SIDR answered is an AH and a step (timing.step_s)."""

from __future__ import annotations

import heapq
import time

from rdmacli.engine.status import event_error
from rdmacli.errors import Cause, RdmacliError
from rdmacli.probe import token as T
from rdmacli.probe.datagrams import verbs_address
from rdmacli.probe.siphash import FORGED
from rdmacli.probe.state import NicState, Peer
from rdmacli.probe.tally import Tally
from rdmacli.probe.timing import MAX_RESOLVING, attempt_s, step_s
from rdmacli.probe.wire import partner_source
from rdmacli.rdma import addr as A
from rdmacli.rdma import cm, verbs
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import RdmaCallError


class Resolving(NicState):
    """NicProbe's SIDR: the partners asked, the answers taken, the requests of others answered."""

    def _ask(self, now: float) -> None:
        """Start SIDR exchanges that are due (at most MAX_RESOLVING in flight, none after the
        resolve window); an exchange unanswered for ATTEMPT_S is dropped and asked again."""
        for i, give_up in list(self.inflight.values()):
            if now >= give_up:
                p = self.peers[i]
                self._failed(
                    p,
                    RdmacliError(
                        f"no answer to SIDR from {p.address}:{p.port} within {attempt_s(p.attempts):g} s "
                        f"({p.attempts} attempt(s))",
                        cause=Cause.UNREACHABLE,
                    ),
                    now,
                    again=0.0,
                )
        while self.asks and self.asks[0][0] <= now and len(self.inflight) < MAX_RESOLVING:
            _, i = heapq.heappop(self.asks)
            p = self.peers[i]
            if (p.resolved and not p.confirming) or p.resolving is not None or now >= self.resolve_end:
                continue
            if p.known is not None:  # answered in an earlier window on this open NIC: no SIDR
                k, p.known = p.known, None
                p.ah, p.qpn, p.qkey, p.source = k.ah, k.qpn, k.qkey, k.source
                p.resolved = p.cached = True
                self._schedule(p, now)
                continue
            p.attempts += 1
            wait = attempt_s(p.attempts)
            try:
                p.resolving = cm.CmId.create(self.channel, C.PS_UDP)
                p.resolving.resolve_addr(
                    A.resolve(self.address, 0, passive=True, what="this node's address"),
                    A.resolve(p.address, p.port, what="the partner's address"),
                    int(wait * 1000),
                )
            except Exception as exc:  # noqa: BLE001 - a peer that cannot be asked now: its error
                self._failed(
                    p,
                    exc
                    if isinstance(exc, RdmacliError)
                    else RdmacliError(f"SIDR to {p.address}: {exc}", cause=Cause.CALL_FAILED),
                    now,
                )
                continue
            self.inflight[p.resolving.key] = (i, now + wait + 0.5)

    def _failed(self, p, error: RdmacliError, now: float, again: float = 0.25) -> None:
        """An attempt that ended without the peer's QP number: its error is the pair's (the
        last one stands), and it is asked again `again` seconds later while the window lasts."""
        if p.resolving is not None:
            self.inflight.pop(p.resolving.key, None)
            self._destroyed(p.resolving.destroy)  # the attempt failed already; its id's end is counted
            p.resolving = None
        p.error = error
        if now + again < self.resolve_end:
            heapq.heappush(self.asks, (now + again, p.index))

    def _cm_events(self) -> None:
        while (ev := self.channel.get()) is not None:
            if ev.type == C.DEVICE_REMOVAL:  # on any of our ids: the whole NIC goes (its run ends,
                # the phase closes it, the next window opens it afresh once the device is back). A
                # driver without disassociate (rxe) finishes `rdma link delete` only once every
                # user closed the device: a NIC kept open across windows would hold it forever.
                raise event_error(ev, step="probe", local=self.address, remote="partners", device=self.device)
            if ev.type == C.CONNECT_REQUEST:  # a partner's SIDR: our QP number, if it is one
                child = cm.CmId(ev.raw_id, self.channel)
                got = T.opened(ev.private_data or b"", self.key)
                if got is FORGED:  # a token of this format with a wrong tag
                    self.forged += 1
                ok = (
                    isinstance(got, T.Token)
                    and got.run == self.run_id
                    and got.dst == self.nic
                    and got.src in self.by_nic
                )
                try:
                    if ok:
                        child.accept(cm.ConnParam(qp_num=self.listen_id.qp_num))
                    else:
                        child.reject(b"rdmacli mesh: not a probe of this run")
                except RdmaCallError:  # the requester timed out or went: it asks again if it lives
                    self.answers_lost += 1
                self._destroyed(child.destroy)
                continue
            if ev.id not in self.inflight:
                continue
            p = self.peers[self.inflight[ev.id][0]]
            now = time.time()
            try:
                if ev.type == C.ADDR_RESOLVED:
                    p.resolving.resolve_route(int(attempt_s(p.attempts) * 1000))
                elif ev.type == C.ROUTE_RESOLVED:
                    tok = T.seal(T.Token(self.run_id, 0, self.nic, p.nic), self.key)
                    p.resolving.connect(
                        cm.ConnParam(private_data=b"\0" * T.OFFSET + tok, qp_num=self.listen_id.qp_num)
                    )
                elif ev.type == C.ESTABLISHED and ev.ah_attr is not None:
                    self.inflight.pop(ev.id, None)
                    p.resolving.destroy()
                    p.resolving = None
                    if p.confirming and ev.ud_qp_num == p.qpn:  # the partner did not restart:
                        p.dismissed, p.confirming = p.confirming, 0  # another QP claimed it
                        self.foreign += 1
                        continue
                    if p.confirming:  # a new QP number: its agent restarted
                        self._restarted(p)
                    p.ah = self.listen_id.own(verbs.AH.from_attr(self.listen_id.pd, ev.ah_attr))
                    p.qpn, p.qkey, p.error, p.resolved = ev.ud_qp_num, ev.ud_qkey, None, True
                    p.source = partner_source(bool(ev.ah_attr.is_global), ev.dgid, ev.dlid)
                    self._schedule(p, now)
                else:  # ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, REJECTED: asked again after a pause
                    self._failed(
                        p,
                        event_error(
                            ev,
                            step="probe SIDR",
                            local=self.address,
                            remote=f"{p.address}:{p.port}",
                            device=self.device,
                        ),
                        now,
                    )
            except Exception as exc:  # noqa: BLE001 - this peer's attempt ends; it is asked again
                self._failed(
                    p,
                    exc
                    if isinstance(exc, RdmacliError)
                    else RdmacliError(f"SIDR to {p.address}: {exc}", cause=Cause.CALL_FAILED),
                    now,
                )

    def _restarted(self, p: Peer) -> None:
        """Partner p's agent restarted (a new QP): what we knew of it goes, its count afresh."""
        p.cached = p.resolved = False
        p.confirming = 0
        self.known.pop(p.nic, None)
        self.retired.append(p.ah)
        p.ah, p.tally, p.seq = None, Tally(), 0
        if self.native is not None:
            self.native.forget(p.index)

    def _schedule(self, p, now: float) -> None:
        """A resolved peer's probes, spread over SPREAD of what is left of the send window (a
        busy host that falls behind catches up in the rest: each probe is due a step after the
        one before was due, not after it went)."""
        left = self.count - p.tally.sent
        if left > 0:
            p.step = step_s(self.send_end - now, left, len(self.peers))
            if p.cached:  # no SIDR spread these: a part of a step of this NIC's own, for all of them
                now += self.offset * p.step
            if self.native is not None:
                self.native.resolved(
                    p.index,
                    verbs_address(p.ah.ptr),
                    p.qpn,
                    p.qkey,
                    p.source,
                    int(p.step * 1e9),
                    self._mono(now),
                )
            else:
                heapq.heappush(self.due, (now, p.index))
