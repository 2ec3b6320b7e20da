"""A forger, for the lab's tests only: from a UD QP of its own (any process that may open an RDMA
device, as any user may where uverbs is 0666), probes and answers that claim to come from a
watch agent's partner, sent to the agent's QP (its number read as root from `rdma resource`),
under the window's public run id and the public key: what a forger could compute had the
fabric no key. Given the fabric's KEY_FILE, it is a key holder forging (a stolen key): the
window's keyed run id and tags under the key, from a QP no SIDR named. Given AS_QPN too, that QP
has the number AS_QPN (the claimed partner's own, on another device): QP numbers are one
device's, and rxe hands them out in turn, so QPs are made and closed until the next is AS_QPN
(a device added afresh starts below any agent's). It says how many it sent, as one JSON line.

    python forger.py OWN_ADDRESS TARGET_ADDRESS TARGET_QPN SRC_NIC DST_NIC PORT WINDOW_S SECONDS \
        [KEY_FILE [AS_QPN]]
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import sys
import time
from pathlib import Path

from rdmacli.diag.devices import SYSFS, port_gids
from rdmacli.probe import wire
from rdmacli.probe.siphash import PUBLIC_KEY, tag
from rdmacli.rdma import addr as A
from rdmacli.rdma import cm, verbs
from rdmacli.rdma import constants as C

SLOTS = 32


def sgid_index(device: str, port: int, address: str) -> int:
    """The RoCE v2 GID of `address` on device:port (sysfs)."""
    for g in port_gids(f"{SYSFS}/{device}/ports/{port}"):
        if g.ip == address and g.type == "RoCE v2":
            return g.index
    raise SystemExit(f"no RoCE v2 GID of {address} on {device}")


def main() -> None:
    own, target, qpn, src, dst, port, window_s, seconds = sys.argv[1:9]
    qpn, src, dst, port = int(qpn), int(src), int(dst), int(port)
    window_s, seconds = float(window_s), float(seconds)
    key = bytes.fromhex(Path(sys.argv[9]).read_text().strip()) if len(sys.argv) > 9 else None
    as_qpn = int(sys.argv[10]) if len(sys.argv) > 10 else None
    channel = cm.EventChannel()
    anchor = cm.CmId.create(channel, C.PS_UDP)  # holds the device (and librdmacm's PD) while QPs come and go
    anchor.bind(A.resolve(own, 0, passive=True, what="the forger's address"))
    comp = verbs.CompChannel(anchor.verbs)
    cq = verbs.CQ(anchor.verbs, 2 * SLOTS, comp)
    for _ in range(100_000):
        cid = cm.CmId.create(channel, C.PS_UDP)
        cid.bind(A.resolve(own, 0, passive=True, what="the forger's address"))
        cid.create_qp(qp_type=C.QPT_UD, send_cq=cq.ptr, recv_cq=cq.ptr, max_send_wr=SLOTS, max_recv_wr=1,
                      sq_sig_all=1)  # fmt: skip
        if as_qpn is None or cid.qp_num == as_qpn:
            break
        if cid.qp_num > as_qpn:
            raise SystemExit(f"QP {cid.qp_num} already past {as_qpn} on this device: add it afresh")
        cid.destroy_qp()
        cid.destroy()
    print(json.dumps({"qpn": cid.qp_num}), flush=True)
    mr = verbs.MR(cid.pd, SLOTS * wire.SLOT, C.ACCESS_LOCAL_WRITE)
    f = verbs.ffi()
    attr = f.new("struct ibv_ah_attr *")
    attr.is_global, attr.port_num = 1, cid.port_num
    attr.grh.hop_limit, attr.grh.sgid_index = 64, sgid_index(cid.device, cid.port_num, own)
    attr.grh.dgid.raw = ipaddress.IPv6Address("::ffff:" + target).packed
    ah = verbs.AH.from_attr(cid.pd, attr)
    free, sent, end, seq = list(range(SLOTS)), 0, time.monotonic() + seconds, 0
    packed: dict[tuple[int, int], tuple[bytes, bytes]] = {}  # (window, seq) -> its two datagrams

    def datagrams(k: int, seq: int) -> tuple[bytes, bytes]:
        """A window's forgeries, made once: packed and tagged in Python for every send, three
        forgers were a load on the lab's two emulated CPUs, which the agents they forge to share
        (what this test asks is whether forgeries move a verdict, not a busy host)."""
        if (k, seq) not in packed:
            if key is None:
                run = bytes.fromhex(hashlib.sha256(f"rdmacli-watch {port} {k}".encode()).hexdigest()[:16])
            else:  # watch/plan.py's keyed run id
                run = tag(key, f"rdmacli-watch run {port} {k}".encode())
            now, under = time.perf_counter_ns(), key or PUBLIC_KEY
            if len(packed) > 64:
                packed.clear()
            packed[(k, seq)] = (
                wire.Datagram(wire.PROBE, run, seq, src, dst, now).pack(under),  # a probe "from" the partner
                wire.Datagram(wire.REPLY, run, seq, dst, src, now, now, now).pack(under),  # its answer
            )
        return packed[(k, seq)]

    try:
        while time.monotonic() < end:
            for wc in cq.poll():
                free.append(wc.wr_id)
            seq = seq % 20 + 1
            for d in datagrams(int(time.time() // window_s), seq):
                if not free:
                    break
                slot = free.pop()
                mr.write(d, slot * wire.SLOT)
                verbs.post_send(cid.qp, slot, mr, slot * wire.SLOT, wire.PAYLOAD, ah=ah.ptr, remote_qpn=qpn,
                                remote_qkey=wire.QKEY)  # fmt: skip
                sent += 1
            time.sleep(0.02)
    finally:
        time.sleep(0.2)
        cq.poll()
        ah.destroy()
        cid.destroy_qp()
        cq.destroy()
        comp.destroy()
        mr.dereg()
        cid.destroy()
        anchor.destroy()
        channel.close()
    print(json.dumps({"sent": sent}), flush=True)


if __name__ == "__main__":
    main()
