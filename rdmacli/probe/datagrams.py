"""One NIC's datagrams: the native loop (probe.c) when built, else this Python loop, which does
the same slower (RDMACLI_DATA_PATH=python, or no extension): every completion of the CQ (a
partner's probe answered at once with both stamps, a reply counted against the probe it answers,
a send's slot freed, receives posted again) and every probe that is due."""

from __future__ import annotations

import heapq
import time

from rdmacli.probe.state import NicState
from rdmacli.probe.timing import replaced_bound, replies_bound
from rdmacli.probe.wire import (
    FORGED,
    GRH_BYTES,
    PAYLOAD,
    PROBE,
    QKEY,
    REPLY,
    SIZE,
    SLOT,
    Datagram,
    parse,
    same_source,
    source,
)
from rdmacli.rdma import constants as C
from rdmacli.rdma import verbs
from rdmacli.rdma.cm import RdmaCallError


def verbs_address(ptr) -> int:
    from rdmacli import native

    return native.as_address(ptr, verbs.ffi())


def native_loop(nic, recvs: int, sends: int, free: list[int] | None = None):
    """The native datagram loop for an open NIC, or None (not built, or RDMACLI_DATA_PATH=python:
    the Python loop below does the same, slower). `free`: the send slots not in flight (a NIC
    kept open from the window before: its sends still in flight complete into this loop)."""
    from rdmacli import native

    if native.load() is None:
        return None
    lid = nic.listen_id
    return native.ProbeLoop(
        verbs_address(lid.qp),
        verbs_address(nic.cq.ptr),
        verbs_address(lid.pd),
        run=nic.run_id,
        key=nic.key,
        nic=nic.nic,
        count=nic.count,
        recvs=recvs,
        sends=sends,
        buf=(nic.mr.addr, nic.mr.lkey),
        port_num=nic.ib_port,
        partners=[p.nic for p in nic.peers],
        replaced=replaced_bound(len(nic.peers)),
        max_replies=replies_bound(nic.count),
        free=free,
    )


class PythonLoop(NicState):
    """NicProbe's datagrams in Python: the probes due out, the CQ's completions in."""

    def _send_due(self, now: float) -> None:
        """Every probe due (a loop that woke late catches up), as probe.c's send_due: a probe the
        send queue refused stays due for the next turn, and the other partners' still go."""
        refused = []
        while self.due and self.due[0][0] <= now and self.free_sends:
            when, i = heapq.heappop(self.due)
            p = self.peers[i]
            if p.ah is None or now >= self.send_end or p.tally.sent >= self.count:
                continue
            slot = self.free_sends.pop()
            p.seq += 1
            t1 = time.perf_counter_ns()
            probe = Datagram(PROBE, self.run_id, p.seq, self.nic, p.nic, t1)
            self.mr.write(probe.pack(self.key), slot * SLOT)
            t1 = time.perf_counter_ns()  # timed from here: the tag costs Python tens of µs, the host's
            try:
                verbs.post_send(
                    self.listen_id.qp,
                    slot,
                    self.mr,
                    slot * SLOT,
                    PAYLOAD,
                    ah=p.ah.ptr,
                    remote_qpn=p.qpn,
                    remote_qkey=p.qkey,
                )
            except RdmaCallError:  # a full queue: this probe is not sent, nor counted
                self.free_sends.append(slot)
                p.seq -= 1
                refused.append((when, i))
                continue
            p.tally.posted(p.seq, t1)
            if p.tally.sent < self.count:
                heapq.heappush(self.due, (when + p.step, i))
        for item in refused:
            heapq.heappush(self.due, item)

    def _completions(self) -> None:
        while True:
            wcs = self.cq.poll()
            # one time for the whole batch, taken as it came out of the CQ: a completion's
            # stamp must not include the handling of the ones before it (replies posted, AHs)
            t_in = time.perf_counter_ns()
            if not wcs:
                return
            again = []  # the batch's receive slots, posted again in one call
            for wc in wcs:
                if wc.wr_id >= self.recvs:  # a send's completion: its slot is free again
                    if wc.wr_id < self.recvs + self.sends and len(self.free_sends) < self.sends:
                        self.free_sends.append(wc.wr_id)
                    continue
                slot = wc.wr_id
                if wc.ok and wc.opcode == C.WC_RECV and wc.byte_len >= GRH_BYTES + SIZE:
                    data = self.mr.read(slot * SLOT + GRH_BYTES, SIZE)
                    d = parse(data, self.key)
                    if d is FORGED:  # never answered, counted or let re-target a partner's replies
                        self.forged += 1
                    elif isinstance(d, Datagram) and d.run == self.run_id:
                        src = source(self.mr.read(slot * SLOT, GRH_BYTES), wc.grh, wc.slid)
                        if d.kind == PROBE:
                            self._answer(d, wc, slot, src, t_in)
                        else:
                            self._counted(d, wc, src, t_in)
                if wc.status != C.WC_WR_FLUSH_ERR:
                    again.append(slot)
            try:
                verbs.post_recv_slots(self.listen_id.qp, self.mr, again, SLOT)
            except RdmaCallError:  # receives fewer until the next window reposts: the queue is deep
                self.reposts_failed += 1

    def _answer(self, d: Datagram, wc, slot: int, src: bytes, t2: int) -> None:
        """A partner's probe: its reply, the probe's fields back with our two stamps. Two AHs a
        partner NIC, as probe.c's answer: one to the QP SIDR named, never displaced, one to the
        last other QP that claimed it; one replaced is retired (a reply may still name it)."""
        p = self.by_nic.get(d.src)
        if d.dst != self.nic or p is None or not self.free_sends:
            return
        key = (d.src, 0 if _from_partner(p, wc, src) else 1)
        if p.replies[key[1]] >= replies_bound(self.count):
            if key[1]:  # more probes than a partner sends, from a QP SIDR did not name
                self.foreign += 1
            return
        got = self.ahs.get(key)
        if got is None or got[:2] != (wc.src_qp, src):
            if got is not None and self.replaced >= replaced_bound(len(self.peers)):
                self.foreign += 1  # a window's churn of QPs claiming partners is bounded
                return
            try:
                ah = verbs.AH.from_wc(self.listen_id.pd, wc, self.mr.addr + slot * SLOT, self.ib_port)
            except RdmaCallError:  # no path back from its GRH: not answered (its prober counts it lost)
                return
            self.listen_id.own(ah)  # closed with the listener, if not retired before
            if got is not None:
                self.retired.append(got[2])
                self.replaced += 1
            got = self.ahs[key] = (wc.src_qp, src, ah)
        ah = got[2]
        out = self.free_sends.pop()
        t3 = time.perf_counter_ns()
        reply = Datagram(REPLY, self.run_id, d.seq, d.src, d.dst, d.t1, t2, t3)
        self.mr.write(reply.pack(self.key), out * SLOT)
        try:
            verbs.post_send(
                self.listen_id.qp,
                out,
                self.mr,
                out * SLOT,
                PAYLOAD,
                ah=ah.ptr,
                remote_qpn=wc.src_qp,
                remote_qkey=QKEY,
            )
        except RdmaCallError:  # a full send queue: not answered (its prober counts it lost)
            self.free_sends.append(out)
            return
        p.replies[key[1]] += 1

    def _counted(self, d: Datagram, wc, src: bytes, t4: int) -> None:
        """A reply to one of our probes: from the QP the peer's SIDR named, where SIDR found it,
        for a probe we sent."""
        if d.src != self.nic:
            return
        p = self.by_nic.get(d.dst)
        if p is None:
            return
        if not _from_partner(p, wc, src):
            self.foreign += 1  # a reply from a QP we never probed
            return
        hold = d.t3 - d.t2 if d.t3 >= d.t2 else -1
        p.tally.replied(d.seq, t4, hold)


def _from_partner(p, wc, src: bytes) -> bool:
    """A completion from partner p's QP: its number, and where it is (probe.c's from_partner: a
    QP number is one device's, and another node's QP may have the same)."""
    return bool(p.qpn) and wc.src_qp == p.qpn and same_source(p.source, src)
