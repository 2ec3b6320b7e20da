"""The floor of connection set-up in Python: ucmatose's client over rdmacli's own bindings
(rdmacli.rdma), with no engine: no lifecycle table, deadlines, step timing, records or checks.

profile_connect.py runs it beside `rdmacli connect` and ucmatose. What it costs over ucmatose is
what Python and the bindings cost; what rdmacli costs over it is the engine's own. It is a
measuring stick, never a tool: it trusts its peer (a local ucmatose server) and bounds only its
waits.
"""

from __future__ import annotations

import selectors
import socket
import time

from rdmacli.rdma import addr, cm, verbs
from rdmacli.rdma import constants as C

ADDR, CONN, RECEIVED, MR = range(4)  # a connection's slots: cm id, ..., its memory region


def run(server: str, client: str, port: int, n: int, count: int = 10, size: int = 100,
        timeout_s: float = 120.0) -> float:  # fmt: skip
    """`ucmatose -s server -b client -c n -C count -S size`'s exchange; returns its wall time,
    from the event channel's opening to the last connection's teardown (as rdmacli's
    elapsed_ms)."""
    t0 = time.monotonic()
    end = t0 + timeout_s
    ch = cm.EventChannel()
    src = addr.SockAddr(socket.AF_INET, client, 0)
    dst = addr.SockAddr(socket.AF_INET, server, port)
    conns: dict[int, list] = {}
    for _ in range(n):
        cm_id = cm.CmId.create(ch, C.PS_TCP)
        cm_id.resolve_addr(src, dst, 2000)
        conns[cm_id.key] = [cm_id, None, 0, None]
    by_qpn: dict[int, list] = {}
    sel = selectors.DefaultSelector()
    sel.register(ch.fd, selectors.EVENT_READ, None)
    comp = cq = None
    param = cm.ConnParam(retry_count=5, rnr_retry_count=0)
    done = 0
    try:
        while done < n:
            if time.monotonic() > end:
                raise TimeoutError(f"{done} of {n} connections done in {timeout_s:g} s")
            for key, _ in sel.select(1.0):
                if key.data is None:
                    while (ev := ch.get()) is not None:
                        c = conns[ev.id]
                        cm_id = c[ADDR]
                        if ev.type == C.ADDR_RESOLVED:
                            cm_id.resolve_route(2000)
                        elif ev.type == C.ROUTE_RESOLVED:
                            if cq is None:
                                comp = verbs.CompChannel(cm_id.verbs)
                                cq = verbs.CQ(cm_id.verbs, 4096, comp)
                                cq.req_notify()
                                sel.register(comp.fd, selectors.EVENT_READ, cq)
                            cm_id.create_qp(qp_type=C.QPT_RC, send_cq=cq.ptr, recv_cq=cq.ptr,
                                            max_send_wr=count, max_recv_wr=count)  # fmt: skip
                            c[MR] = verbs.MR(cm_id.pd, size, C.ACCESS_LOCAL_WRITE)
                            verbs.post_recv(cm_id.qp, 0, c[MR], 0, size, n=count)
                            by_qpn[cm_id.qp_num] = c
                            cm_id.connect(param)
                        elif ev.type == C.DISCONNECTED:
                            cm_id.disconnect()
                            cm_id.destroy_qp()
                            c[MR].dereg()
                            cm_id.destroy()
                            done += 1
                        elif ev.type != C.ESTABLISHED:
                            raise RuntimeError(f"{ev.name} (status {ev.status})")
                else:
                    k = 0
                    while comp.get_event() is not None:
                        k += 1
                    cq.ack_events(k)
                    cq.req_notify()
                    while wcs := cq.poll():
                        for wc in wcs:
                            if not wc.ok:
                                raise RuntimeError(f"completion {wc.status_str}")
                            c = by_qpn[wc.qp_num]
                            if wc.wr_id == 0:  # a receive: echo all once all have come
                                c[RECEIVED] += 1
                                if c[RECEIVED] == count:
                                    verbs.post_send(c[ADDR].qp, 1, c[MR], 0, size, n=count)
    finally:
        sel.close()
        for c in conns.values():  # what a failed run left (a done connection's id is gone)
            c[ADDR].destroy()
            if c[MR] is not None:
                c[MR].dereg()
        if cq is not None:
            cq.destroy()
            comp.destroy()
        ch.close()
    return time.monotonic() - t0


if __name__ == "__main__":  # as bench.py runs it, a process of its own: server client port n
    import json
    import sys

    server_ip, client_ip, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps({"elapsed_ms": round(run(server_ip, client_ip, port, n) * 1e3, 1)}))
