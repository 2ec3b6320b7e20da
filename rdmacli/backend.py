"""The RDMA stack, and this host's diagnosis of it, as one collaborator of the engine: everything
a flow creates or posts, and every local cause it looks up, goes here (not in rdma/, which binds
C and nothing else).

The engine is handed a backend instead of calling librdmacm and libibverbs itself, so its state
machines can be driven by a scripted stand-in in unit tests (tests/unit/fakerdma.py). This one
is the real stack; it is the only one that proves anything.
"""

from __future__ import annotations

from rdmacli.rdma import cm, verbs


class RdmaBackend:
    # -- the connection manager ---------------------------------------------------------------
    def event_channel(self) -> cm.EventChannel:
        return cm.EventChannel()

    def create_id(self, channel: cm.EventChannel, ps: int) -> cm.CmId:
        return cm.CmId.create(channel, ps)

    def request_id(self, ev: cm.CmEvent, channel: cm.EventChannel) -> cm.CmId:
        """The new cm_id a CONNECT_REQUEST carries."""
        return cm.CmId(ev.raw_id, channel)

    # -- verbs on a cm_id's device ---------------------------------------------------------
    def device_key(self, cm_id: cm.CmId) -> int:
        """Which device context a cm_id is on (connections on one share CQs)."""
        return int(verbs.ffi().cast("uintptr_t", cm_id.verbs))

    def comp_channel(self, cm_id: cm.CmId) -> verbs.CompChannel:
        return verbs.CompChannel(cm_id.verbs)

    def cq(self, cm_id: cm.CmId, cqe: int, comp: verbs.CompChannel, clock: bool = False) -> verbs.CQ:
        """clock: a CQ whose completions carry the NIC's timestamps, where the device has them
        and the native data path is built (a native loop reads them); else a plain one, and its
        `clock` says why not."""
        if not clock:
            return verbs.CQ(cm_id.verbs, cqe, comp)
        from rdmacli import native

        f = verbs.ffi()
        address, how = native.make_cq(native.as_address(cm_id.verbs, f), cqe, native.as_address(comp.ptr, f),
                                      cm_id.device or "the device")  # fmt: skip
        cq = verbs.CQ.adopt(address, comp) if address else verbs.CQ(cm_id.verbs, cqe, comp)
        cq.clock = how
        return cq

    def mr(self, cm_id: cm.CmId, size: int, access: int) -> verbs.MR:
        return cm_id.own(verbs.MR(cm_id.pd, size, access))  # closed with the id, before it

    def ah_from_attr(self, cm_id: cm.CmId, ah_attr) -> verbs.AH:
        return cm_id.own(verbs.AH.from_attr(cm_id.pd, ah_attr))

    def ah_from_wc(self, cm_id: cm.CmId, wc: verbs.WorkCompletion, grh_addr: int) -> verbs.AH:
        return cm_id.own(verbs.AH.from_wc(cm_id.pd, wc, grh_addr, cm_id.port_num))

    def native_handles(self, cm_id: cm.CmId, cq: verbs.CQ) -> tuple[int, int] | None:
        """The QP's and CQ's addresses, for the native data path (None: it is not loaded)."""
        from rdmacli import native

        if native.load() is None or not cm_id.has_qp:
            return None
        f = verbs.ffi()
        return native.as_address(cm_id.ptr.qp, f), native.as_address(cq.ptr, f)

    def device_limits(self, cm_id: cm.CmId) -> verbs.DeviceLimits | None:
        """Asked once per device context, not once per connection."""
        cache = self.__dict__.setdefault("_limits", {})
        key = self.device_key(cm_id)
        if key not in cache:
            cache[key] = verbs.query_limits(cm_id.verbs)
        return cache[key]

    def local_cause(self, device: str | None, port: int, ip: str | None):
        """What is wrong on this host's side right now (sysfs), or None: see diag.local."""
        from rdmacli.diag.local import local_cause

        return local_cause(device, port, ip)

    def transport(self, device: str, port: int):
        """The transport a device's port runs (rdmacli.transports), from sysfs, or None."""
        from rdmacli.diag.devices import transport_of

        return transport_of(device, port)

    def port_holders(self, port: int) -> list[str]:
        """Who holds an RDMA CM port here (diag.local.port_holders)."""
        from rdmacli.diag.local import port_holders

        return port_holders(port)

    def read_counters(self, device: str, port: int) -> dict[str, int]:
        """The port's counters by name, from sysfs (rdmacli/counters.py)."""
        from rdmacli.counters import read

        return read(device, port)

    def explain(self, err, deltas):
        """A failure said again as what the ports' counters show (packet loss, RNR, link
        errors), or None: the policy of diag.counters, handed to the engine here."""
        from rdmacli.diag.counters import explain

        return explain(err, deltas)

    def rate_bound_gbps(self, device: str | None, port: int) -> float | None:
        """The port's line rate (sysfs `rate`), the bound of any rate measured through it; None
        for software RDMA (diag.devices.rate_bound_gbps)."""
        from rdmacli.diag.devices import rate_bound_gbps

        return rate_bound_gbps(device, port)

    def address_cause(self, ip: str):
        """What is wrong on this host with the RDMA port behind local address `ip`, or None."""
        from rdmacli.diag.local import cause_for_address

        return cause_for_address(ip)

    # -- the data path -------------------------------------------------------------------------
    post_send = staticmethod(verbs.post_send)
    post_recv = staticmethod(verbs.post_recv)
