"""IP addresses to sockaddr structs and back (rdma_cm takes struct sockaddr *)."""

from __future__ import annotations

import ipaddress
import socket
import struct

from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma._ffi import ffi


class SockAddr:
    """A resolved address kept alive as a struct sockaddr_storage."""

    def __init__(self, family: int, host: str, port: int, scope_id: int = 0):
        self.family, self.host, self.port = family, host, port
        self.buf = ffi().new("struct sockaddr_storage *")
        if family == socket.AF_INET:
            raw = struct.pack("=H", family) + struct.pack("!H", port) + socket.inet_pton(family, host)
        else:
            raw = (
                struct.pack("=H", family)
                + struct.pack("!HI", port, 0)
                + socket.inet_pton(family, host.split("%")[0])
                + struct.pack("=I", scope_id)
            )
        ffi().memmove(self.buf, raw, len(raw))

    @property
    def ptr(self):
        return ffi().cast("struct sockaddr *", self.buf)

    def __str__(self) -> str:
        return format_hostport(self.host, self.port)


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolve(host: str | None, port: int, *, passive: bool = False, what: str = "address") -> SockAddr:
    """First getaddrinfo() result, as rdma_getaddrinfo uses; None with passive = IPv4 wildcard."""
    flags = socket.AI_PASSIVE if passive else 0
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, flags)
    except socket.gaierror as exc:
        raise RdmacliError(
            f"cannot resolve {what} {host!r}: {exc.strerror}",
            hint="give an IP address configured on an RDMA netdev (see `rdmacli devices`)",
            cause=Cause.ADDRESS,
        ) from exc
    infos = [i for i in infos if i[0] in (socket.AF_INET, socket.AF_INET6)]
    if not infos:
        raise RdmacliError(f"no IPv4/IPv6 address for {what} {host!r}", cause=Cause.ADDRESS)
    family, _, _, _, sa = infos[0]
    scope = sa[3] if family == socket.AF_INET6 else 0
    return SockAddr(family, sa[0], port, scope)


def parse(ptr) -> tuple[str, int] | None:
    """A struct sockaddr * (IPv4 or IPv6) as (host, port); None for other families."""
    f = ffi()
    return parse_bytes(bytes(f.buffer(ffi().cast("char *", ptr), 28)))


def parse_bytes(raw: bytes) -> tuple[str, int] | None:
    """A struct sockaddr's bytes (IPv4 or IPv6) as (host, port); None for other families."""
    family = struct.unpack("=H", raw[:2])[0]
    port = struct.unpack("!H", raw[2:4])[0]
    if family == socket.AF_INET:
        return socket.inet_ntop(family, raw[4:8]), port
    if family == socket.AF_INET6:
        return socket.inet_ntop(family, raw[8:24]), port
    return None


def format_gid(raw: str) -> str:
    """Canonical IPv6 text, IPv4-mapped GIDs in dotted form as ibv_devinfo prints them."""
    addr = ipaddress.IPv6Address(raw)
    return f"::ffff:{addr.ipv4_mapped}" if addr.ipv4_mapped else str(addr)
