"""Completion queues shared by a flow's connections.

ucmatose polls a CQ per connection; rdmacli sleeps on completion channels, and one channel and CQ
per connection cost seven system calls and two epoll changes each (a third of a connection's
setup under TCG, in the profile of `connect -c 128`). Here connections on one device share a CQ
of up to CAPACITY entries with its own channel; completions find their connection by QP number.
A CQ is never oversubscribed: each connection reserves its send plus receive depth, and a
connection that needs more than a shared CQ holds gets one of its own.
"""

from __future__ import annotations

CAPACITY = 4096


class _Shared:
    def __init__(self, key, comp, cq, size: int, own: bool = False):
        self.key, self.comp, self.cq, self.size, self.free = key, comp, cq, size, size
        self.own = own  # one connection's alone (a native loop polls it), never shared


class CqPool:
    def __init__(self, flow):
        self.flow = flow
        self.backend = flow.backend
        self.shared: dict[object, list[_Shared]] = {}  # device key -> its CQs
        self.owner: dict[int, tuple[_Shared, int]] = {}  # id(conn) -> (its CQ, entries reserved)
        self.by_qpn: dict[int, object] = {}  # QP number -> connection
        self.qpns: dict[int, list[int]] = {}  # id(conn) -> its QP numbers (release: no scan)
        self.retired: set[int] = set()  # QP numbers whose completions may still be queued

    def acquire(self, conn, entries: int, own: bool = False, clock: bool = False):
        """A CQ with `entries` free for conn: a shared one of its device, or a new one (`own`:
        always a new one, which no other connection will share; `clock`: an own one whose
        completions carry the NIC's timestamps where the device has them)."""
        own = own or clock
        key = self.backend.device_key(conn.cm)
        for s in [] if own else self.shared.get(key, []):
            if s.free >= entries and not s.own:
                break
        else:
            lim = conn.limits()
            size = max(entries, CAPACITY)
            if lim is not None:
                size = max(entries, min(size, lim.max_cqe))
            comp = self.backend.comp_channel(conn.cm)
            try:
                cq = self.backend.cq(conn.cm, size, comp, clock=clock)
            except Exception:
                comp.close()
                raise
            s = _Shared(key, comp, cq, size, own)
            self.shared.setdefault(key, []).append(s)
            self.flow.loop.watch_cq(comp, cq, self.dispatch)
        s.free -= entries
        self.owner[id(conn)] = (s, entries)
        return s.cq

    def bind(self, conn, qp_num: int) -> None:
        """conn's QP exists: its completions are its own. A QP number seen before (a torn down
        QP's) is drained first, so none of the old QP's completions reaches the new one."""
        if qp_num in self.retired:
            s, _ = self.owner[id(conn)]
            self.flow.loop.drain(s.cq, self.dispatch)
            self.retired.discard(qp_num)
        self.by_qpn[qp_num] = conn
        self.qpns.setdefault(id(conn), []).append(qp_num)

    def release(self, conn) -> list[str]:
        """conn's QP is destroyed: give its entries back; its queued completions are dropped.
        The last connection on a CQ destroys it, before that connection's cm_id: a device's
        context may go with its last cm_id (librdmacm, after a device removal)."""
        for qpn in self.qpns.pop(id(conn), ()):
            if self.by_qpn.get(qpn) is conn:
                del self.by_qpn[qpn]
                self.retired.add(qpn)
        entry = self.owner.pop(id(conn), None)
        if entry is None:
            return []
        s, entries = entry
        s.free += entries
        if s.free < s.size:
            return []
        self.shared[s.key].remove(s)
        return self._destroy(s)

    def _destroy(self, s: _Shared) -> list[str]:
        self.flow.loop.unwatch_cq(s.comp)
        return s.comp.close()  # the CQ hangs on its channel: it goes first

    def alone(self, conn) -> bool:
        """conn's CQ carries only its completions (a native loop may poll it)."""
        entry = self.owner.get(id(conn))
        if entry is None:
            return False
        return sum(1 for s, _ in self.owner.values() if s is entry[0]) == 1

    def dispatch(self, wcs) -> None:
        """A batch polled from a CQ, to its connections in order: each run of one QP's
        completions in one call (Flow.on_wcs). The QP's connection is looked up as its run is
        handed on, after the runs before it: a handler that tore a connection down drops its
        later completions (issue 24)."""
        by_qpn, on_wcs = self.by_qpn, self.flow.on_wcs
        start, n = 0, len(wcs)
        while start < n:
            qpn = wcs[start].qp_num
            end = start + 1
            while end < n and wcs[end].qp_num == qpn:
                end += 1
            conn = by_qpn.get(qpn)
            if conn is not None:
                on_wcs(conn, wcs if start == 0 and end == n else wcs[start:end])
            start = end

    def drain(self, conn) -> None:
        """Completions waiting in conn's CQ (its own and its neighbours'), handled now."""
        entry = self.owner.get(id(conn))
        if entry is not None:
            self.flow.loop.drain(entry[0].cq, self.dispatch)

    def close(self) -> list[str]:
        """What no connection released (a flow that failed half-way)."""
        errors = []
        for shared in self.shared.values():
            for s in shared:
                errors += self._destroy(s)
        self.shared.clear()
        return errors
