"""CM event statuses in words, with advice (reference: users-and-diagnostics.md, B.1 and B.2)."""

from __future__ import annotations

import errno as _errno

from rdmacli.errors import MEMLOCK_HINT, Cause, RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import RdmaCallError, errno_text

# enum ib_cm_rej_reason (include/rdma/ib_cm.h)
IB_CM_REJ_REASONS = {
    1: "NO_QP",
    2: "NO_EEC",
    3: "NO_RESOURCES",
    4: "TIMEOUT",
    5: "UNSUPPORTED",
    6: "INVALID_COMM_ID",
    7: "INVALID_COMM_INSTANCE",
    8: "INVALID_SERVICE_ID",
    9: "INVALID_TRANSPORT_TYPE",
    10: "STALE_CONN",
    11: "RDC_NOT_EXIST",
    12: "INVALID_GID",
    13: "INVALID_LID",
    14: "INVALID_SL",
    15: "INVALID_TRAFFIC_CLASS",
    16: "INVALID_HOP_LIMIT",
    17: "INVALID_PACKET_RATE",
    18: "INVALID_ALT_GID",
    19: "INVALID_ALT_LID",
    20: "INVALID_ALT_SL",
    21: "INVALID_ALT_TRAFFIC_CLASS",
    22: "INVALID_ALT_HOP_LIMIT",
    23: "INVALID_ALT_PACKET_RATE",
    24: "PORT_CM_REDIRECT",
    25: "PORT_REDIRECT",
    26: "INVALID_MTU",
    27: "INSUFFICIENT_RESP_RESOURCES",
    28: "CONSUMER_DEFINED",
    29: "INVALID_RNR_RETRY",
    30: "DUPLICATE_LOCAL_COMM_ID",
    31: "INVALID_CLASS_VERSION",
    32: "INVALID_FLOW_LABEL",
    33: "INVALID_ALT_FLOW_LABEL",
    35: "VENDOR_OPTION_NOT_SUPPORTED",
}
REJ_INVALID_SERVICE_ID = 8
REJ_CONSUMER_DEFINED = 28
# enum ib_cm_sidr_status: a UD (SIDR) request's answer; rdma_cm reports it as UNREACHABLE's status
SIDR_STATUS = {1: "UNSUPPORTED", 2: "REJECT", 3: "NO_QP", 4: "REDIRECT", 5: "UNSUPPORTED_VERSION"}
SIDR_UNSUPPORTED = 1  # no such service id: nothing is listening on that UDP-space port


# the error events whose cause is the event itself (REJECTED and DEVICE_REMOVAL have their own)
EVENT_CAUSE = {
    C.ADDR_ERROR: Cause.ADDRESS,
    C.ROUTE_ERROR: Cause.ROUTE,
    C.UNREACHABLE: Cause.UNREACHABLE,
    C.CONNECT_ERROR: Cause.UNREACHABLE,
    C.MULTICAST_ERROR: Cause.UNREACHABLE,
}


def nobody_listens(event: int, status: int) -> bool:
    """The peer's CM answered that nothing listens there: RC REJECTED reason 8, UD SIDR status 1."""
    return (event == C.REJECTED and status == REJ_INVALID_SERVICE_ID) or (
        event == C.UNREACHABLE and status == SIDR_UNSUPPORTED
    )


ERRNO_ADVICE = {
    _errno.ETIMEDOUT: "no answer in time: check that the peer is up, the address is right and "
    "ARP/neighbour resolution works (`ip neigh`); on multi-NIC hosts set "
    "net.ipv4.conf.all.arp_ignore=2",
    _errno.ENODEV: "the address is not on an RDMA-capable netdev; use an IP of a netdev listed by "
    "`rdmacli devices`",
    _errno.ENETUNREACH: "no route to the peer; check `ip route get <peer>`",
    _errno.EHOSTUNREACH: "host unreachable; check `ip route get <peer>` and the peer's address",
    _errno.EADDRNOTAVAIL: "the source/bind address is not configured on this host",
    _errno.EADDRINUSE: "the port is in use (another listener, or an old id in TIMEWAIT): choose "
    "another port or wait",
    _errno.ECONNREFUSED: "the peer refused the connection: is a server listening on that port?",
    _errno.ECONNRESET: "the peer reset the connection",
}


def describe_status(event: int, status: int) -> dict:
    """{"status", "errno" or "reject_reason", "text"} for an event status."""
    d: dict = {"status": status}
    if status < 0:
        name, text = errno_text(-status)
        d["errno"] = name
        d["text"] = f"{name} ({text})"
    elif status > 0 and event == C.REJECTED:
        name = IB_CM_REJ_REASONS.get(status, "UNKNOWN")
        d["reject_reason"] = {"code": status, "name": name}
        d["text"] = f"IB CM reject reason {status} {name}"
    elif status > 0 and event == C.UNREACHABLE:
        name = SIDR_STATUS.get(status, "UNKNOWN")
        d["sidr_status"] = {"code": status, "name": name}
        d["text"] = f"SIDR status {status} {name}"
    elif status > 0:
        d["text"] = f"status {status}"
    else:
        d["text"] = "ok"
    return d


def short_status(event: int, status: int) -> str:
    if status == 0:
        return "0"
    d = describe_status(event, status)
    if "errno" in d:
        return f"{status} {d['errno']}"
    for key in ("reject_reason", "sidr_status"):
        if key in d:
            return f"{status} {d[key]['name']}"
    return str(status)


def event_error(ev, *, step: str, local: str, remote: str, device: str | None) -> RdmacliError:
    """An error CM event as an RdmacliError with words, advice and the documented exit code."""
    where = f"{local} -> {remote}" + (f" on {device}" if device else "")
    d = describe_status(ev.type, ev.status)
    details = {
        "step": step,
        "event": ev.name,
        "status": ev.status,
        "local": local,
        "remote": remote,
        "device": device,
    }
    details.update({k: v for k, v in d.items() if k in ("errno", "reject_reason", "sidr_status")})
    if nobody_listens(ev.type, ev.status):
        how = f"{ev.name}, {d['text'].replace('IB CM reject reason', 'IB CM reason')}"
        return nothing_listening(step, remote, how, where, details)
    if ev.type == C.REJECTED:
        if ev.status == REJ_CONSUMER_DEFINED:
            reason = printable(ev.private_data)
            details["peer_reason"] = reason
            return RdmacliError(
                f"{step}: the peer application rejected the connection"
                + (f": {reason!r}" if reason else "")
                + f" [{where}]",
                hint="the server refused these parameters; see its reason above",
                cause=Cause.REJECTED,
                details=details,
            )
        if ev.status == -_errno.ECONNREFUSED:
            return RdmacliError(
                f"{step}: connection refused by {remote} [{where}]",
                hint=ERRNO_ADVICE[_errno.ECONNREFUSED],
                cause=Cause.REJECTED,
                details=details,
            )
        return RdmacliError(
            f"{step}: rejected by {remote}: {d['text']} [{where}]",
            hint="see the IB CM reject reason",
            cause=Cause.REJECTED,
            details=details,
        )
    if ev.type == C.DEVICE_REMOVAL:
        return RdmacliError(
            f"{step}: the RDMA device {device or 'under this connection'} was removed [{where}]",
            hint="recreate it (Soft-RoCE: `rdma link add NAME type rxe netdev IFACE`) or check the "
            "driver (`dmesg`, `rdma link`)",
            cause=Cause.DEVICE_REMOVED,
            details=details,
        )
    cause = EVENT_CAUSE.get(ev.type, Cause.UNREACHABLE)
    advice = ERRNO_ADVICE.get(-ev.status) if ev.status < 0 else None
    if ev.type == C.ROUTE_ERROR and not advice:
        advice = "on InfiniBand a subnet manager must be running; on RoCE check the GID table"
    if ev.type == C.UNREACHABLE:
        advice = (
            "the peer did not answer the connection request: is the host up, is RoCE v2 "
            "(UDP 4791) allowed, do both sides use the same RoCE mode?"
        )
    return RdmacliError(f"{step}: {ev.name} {d['text']} [{where}]", hint=advice, cause=cause, details=details)


def nothing_listening(step: str, remote: str, how: str, where: str, details: dict) -> RdmacliError:
    return RdmacliError(
        f"{step}: nothing is listening at {remote} in this port space ({how}) [{where}]",
        hint="start the server first (`rdmacli listen`) or let the client wait for it "
        "(--wait SECONDS); check the port and the port space (-P)",
        cause=Cause.NOBODY_LISTENING,
        details=details,
    )


def refused_at_once(step: str, exc, *, local: str, remote: str, device: str | None) -> RdmacliError:
    """rdma_connect refused by the call itself: on iWARP it opens the TCP connection, and a port
    nobody listens on answers with a reset at once (RoCE and InfiniBand say the same later, as
    REJECTED reason 8)."""
    where = f"{local} -> {remote}" + (f" on {device}" if device else "")
    details = {
        "step": step,
        "call": exc.call,
        "errno": _errno.errorcode.get(exc.errno, str(exc.errno)),  # by name, as the schema has it
        "local": local,
        "remote": remote,
        "device": device,
    }
    return nothing_listening(step, remote, f"{exc.call}: ECONNREFUSED", where, details)


def port_in_use(step: str, host: str, port: int, holders: list[str], call: str) -> RdmacliError:
    """A port this host holds already, said as such, with who holds it where that shows."""
    return RdmacliError(
        f"{step}: port {port} on {host} is in use" + (f" by {', '.join(holders)}" if holders else ""),
        hint="another server (or another mesh run) listens there: stop it, or choose another port",
        cause=Cause.PORT_IN_USE,
        details={"step": step, "call": call, "holders": holders},
    )


def printable(data: bytes) -> str:
    """Private data as text: up to the first NUL, non-printables dropped (it is untrusted)."""
    text = data.split(b"\0", 1)[0].decode("utf-8", "replace")
    return "".join(ch for ch in text if ch.isprintable())[:200]


# calls whose failure is an address or route problem, not a failed call of ours
CALL_CAUSE = {
    "rdma_resolve_addr": Cause.ADDRESS,
    "rdma_bind_addr": Cause.ADDRESS,
    "rdma_resolve_route": Cause.ROUTE,
}


def call_error(step: str, exc: RdmaCallError, where: str) -> RdmacliError:
    if exc.call in ("ibv_create_cq", "rdma_create_qp") and exc.errno == 12:  # MRs: Connection.reg
        return RdmacliError(
            f"{step}: {exc} [{where}]",
            cause=Cause.MEMLOCK,
            hint=f"locked memory is limited (RLIMIT_MEMLOCK): {MEMLOCK_HINT}",
            details={"step": step, "call": exc.call},
        )
    return RdmacliError(
        f"{step}: {exc} [{where}]",
        hint=ERRNO_ADVICE.get(exc.errno),
        cause=CALL_CAUSE.get(exc.call, Cause.CALL_FAILED),
        details={"step": step, "call": exc.call},
    )


def here_first(backend, conn, err: RdmacliError, where: str) -> RdmacliError:
    """This host looked at before the peer is blamed: a removed device, a port gone DOWN, a
    netdev down or a vanished GID is said as the cause of `err`, which stays as reported."""
    host = conn.local.rsplit(":", 1)[0].strip("[]") if conn.local not in ("?", "*") else None
    try:
        cause = backend.local_cause(conn.device, conn.cm.port_num or 1, host)
    except Exception:  # a diagnosis must never hide the error it explains
        cause = None
    if cause is None:
        return err
    reported_cause = err.cause.value if err.cause is not None else None
    return said_here(cause, f"{conn.phase}: {cause.text} [{where}]", err.message, reported_cause,
                     {**err.details, "step": conn.phase})  # fmt: skip


def said_here(
    cause, text: str, reported: str | None, reported_cause: str | None, details: dict
) -> RdmacliError:
    """A cause found on this host (diag.local's) said as the error, what was reported kept."""
    said = {"local_cause": cause.text, "reported": reported, "reported_cause": reported_cause}
    return RdmacliError(text, hint=cause.hint, cause=cause.cause, details={**details, **said})
