"""RDMA devices, ports and GID tables, read from sysfs; pyverbs adds the active MTU when present,
and answers a port's GID table in one call (ibv_query_gid_table) where sysfs takes a read an entry.

sysfs is always there and needs no device open; pyverbs is an optional import (python3-pyverbs)
because it is a distro package, not a PyPI one.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import asdict, dataclass, field

from rdmacli import transports
from rdmacli.rdma.addr import format_gid
from rdmacli.rdma.constants import IB_MTU_BYTES

SYSFS = "/sys/class/infiniband"
DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # an RDMA device name (IB_DEVICE_NAME_MAX is 64)
NET = "/sys/class/net"


@dataclass
class Gid:
    index: int
    gid: str
    type: str | None
    netdev: str | None
    ip: str | None


@dataclass
class Port:
    port: int
    state: str
    phys_state: str
    link_layer: str
    active_mtu: int | None
    rate: str | None
    netdev: str | None
    gids: list[Gid] = field(default_factory=list)
    transport: str | None = None  # InfiniBand, RoCE, iWARP (rdmacli.transports)


@dataclass
class Device:
    name: str
    node_type: str | None
    node_guid: str | None
    driver: str | None
    netdevs: list[str]
    ports: list[Port]

    def to_dict(self) -> dict:
        return asdict(self)


def read_sysfs(path: str) -> str | None:
    """A sysfs file's text, stripped, or None. os.read, not open(): a GID table is read a file
    an entry (1024 per Soft-RoCE port), and a text file object costs three times the syscalls'
    own time under emulation."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)


def _state(text: str | None) -> str:
    # "4: ACTIVE" -> "ACTIVE"; "5: LinkUp" -> "LINK_UP" (the names `rdma link` prints)
    if not text:
        return "UNKNOWN"
    name = text.split(":", 1)[-1].strip()
    return {
        "LinkUp": "LINK_UP",
        "Disabled": "DISABLED",
        "Polling": "POLLING",
        "Sleep": "SLEEP",
        "LinkErrorRecovery": "LINK_ERROR_RECOVERY",
    }.get(name, name.upper())


def gid_to_ip(gid: str) -> str | None:
    """The IP address a RoCE GID stands for (None for the link-local default GID and zeros)."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    if addr.ipv4_mapped:
        return str(addr.ipv4_mapped)
    if addr.is_link_local or addr == ipaddress.IPv6Address(0):
        return None
    return str(addr)


def _valid_gids(port_dir: str):
    """(index, canonical text) of each non-empty entry of a port's GID table, in index order;
    a generator, so a caller looking for one entry stops reading at it."""
    gdir = os.path.join(port_dir, "gids")
    for name in sorted(listdir(gdir), key=int):
        raw = read_sysfs(os.path.join(gdir, name))
        if raw and raw.replace(":", "").strip("0"):
            yield name, format_gid(raw)


# ibv_gid_entry.gid_type as sysfs's gid_attrs/types names it
GID_TYPE_NAMES = {0: "IB/RoCE v1", 1: "IB/RoCE v1", 2: "RoCE v2"}


def port_gids(port_dir: str, ip_gids: bool = True) -> list[Gid]:
    """ip_gids: the transport's GIDs stand for IP addresses (RoCE); iWARP's is its MAC, and an
    InfiniBand GID is a subnet prefix and a GUID: neither is an address to show or match.

    The device's own answer first (ibv_query_gid_table: the valid entries in one call), sysfs
    when it cannot be asked: a host of 32 Soft-RoCE devices is 35,000 sysfs reads, 20 s of a
    health check under emulation."""
    entries = queried_gids(port_dir) or sysfs_gids(port_dir)  # none: iWARP's kernel keeps no GID cache
    return [
        Gid(index=index, gid=text, type=kind, netdev=netdev, ip=gid_to_ip(text) if ip_gids else None)
        for index, text, kind, netdev in entries
    ]


def sysfs_gids(port_dir: str) -> list[tuple[int, str, str | None, str | None]]:
    """(index, GID, type, netdev) of each valid entry of a port's GID table, read from sysfs."""
    return [
        (
            int(name),
            text,
            read_sysfs(os.path.join(port_dir, "gid_attrs", "types", name)),
            read_sysfs(os.path.join(port_dir, "gid_attrs", "ndevs", name)),
        )
        for name, text in _valid_gids(port_dir)
    ]


def queried_gids(port_dir: str) -> list[tuple[int, str, str | None, str | None]] | None:
    """(index, GID, type, netdev) of each valid entry of one port of a device of this host, in
    index order, as the device answers ibv_query_gid_table; None where it cannot be asked (no
    pyverbs, a tree that is not this host's sysfs, a device that will not open or an older
    kernel): the caller reads sysfs then."""
    parts = os.path.normpath(port_dir).split(os.sep)
    if os.sep.join(parts[:-3]) != SYSFS or parts[-2] != "ports" or not parts[-1].isdigit():
        return None
    device, port = parts[-3], int(parts[-1])
    try:
        from pyverbs.device import Context
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError:
        return None
    size = sum(
        len(listdir(os.path.join(SYSFS, device, "ports", p, "gids")))
        for p in listdir(os.path.join(SYSFS, device, "ports"))
    )
    try:
        with Context(name=device) as ctx:
            table = ctx.query_gid_table(max(size, 1))
    except (PyverbsError, OSError, AttributeError):
        return None
    out = []
    for e in sorted((e for e in table if e.port_num == port), key=lambda e: e.gid_index):
        try:
            netdev = socket.if_indextoname(e.ndev_ifindex) if e.ndev_ifindex else None
        except OSError:  # another network namespace's: the kernel's name for it
            netdev = read_sysfs(os.path.join(port_dir, "gid_attrs", "ndevs", str(e.gid_index)))
        out.append((e.gid_index, format_gid(e.gid_str()), GID_TYPE_NAMES.get(e.gid_type), netdev))
    return out


def _active_mtus(name: str) -> dict[int, int]:
    try:  # optional: python3-pyverbs
        from pyverbs.device import Context
        from pyverbs.pyverbs_error import PyverbsError
    except ImportError:
        return {}
    mtus = {}
    try:
        with Context(name=name) as ctx:
            for p in range(1, ctx.query_device().phys_port_cnt + 1):
                mtus[p] = IB_MTU_BYTES.get(int(ctx.query_port(p).active_mtu))
    except (PyverbsError, OSError):  # a device that will not open: no MTU column, devices says the rest
        return {}
    return mtus


def port_netdev(device_dir: str, port: int) -> str | None:
    """The netdev behind one port, read from as few files as will tell: Soft-RoCE's `parent`,
    then the port's first valid GID, then the device's net/ (a failure path under TCG must not
    read a 1024-entry GID table per device)."""
    parent = read_sysfs(os.path.join(device_dir, "parent"))
    if parent:
        return parent
    ndevs = os.path.join(device_dir, "ports", str(port), "gid_attrs", "ndevs")
    for name in sorted(listdir(ndevs), key=int):
        netdev = read_sysfs(os.path.join(ndevs, name))
        if netdev:
            return netdev
    nets = listdir(os.path.join(device_dir, "device", "net"))
    return nets[0] if len(nets) == 1 else mac_netdev(os.path.join(device_dir, "ports", str(port)))


def mac_netdev(port_dir: str) -> str | None:
    """An iWARP port's netdev: its GID is the netdev's MAC (siw has no parent, no GID netdevs, no
    bus device), so the netdev whose address is the GID's first six bytes."""
    raw = read_sysfs(os.path.join(port_dir, "gids", "0"))
    if not raw or (node_type := read_sysfs(os.path.join(port_dir, "..", "..", "node_type"))) is None:
        return None
    if transports.of(node_type, None) is not transports.IWARP:
        return None
    mac = raw.replace(":", "")[:12]
    found = [
        name
        for name in sorted(listdir(NET))
        if (read_sysfs(os.path.join(NET, name, "address")) or "").replace(":", "") == mac
    ]
    return found[0] if len(found) == 1 else None


def transport_of(device: str | None, port: int = 1, sysfs: str | None = None) -> transports.Transport | None:
    """The transport a device's port runs (None: unknown, no such device)."""
    if not device or "/" in device:
        return None
    ddir = os.path.join(sysfs or SYSFS, device)
    return transports.of(
        read_sysfs(os.path.join(ddir, "node_type")),
        read_sysfs(os.path.join(ddir, "ports", str(port), "link_layer")),
    )


def port_has_ip(port_dir: str, ip: str) -> bool:
    """Is `ip` in the port's GID table? Stops at the first match."""
    return any(gid_to_ip(text) == ip for _, text in _valid_gids(port_dir))


def serves_ip(device: str, ip: str, port: int = 1, sysfs: str | None = None) -> bool:
    """Is `device` port `port` ACTIVE with a GID for `ip`? (A lab waiting for its devices.)"""
    pdir = os.path.join(sysfs or SYSFS, device, "ports", str(port))
    return port_state(pdir)[0] == "ACTIVE" and port_has_ip(pdir, ip)


def port_state(port_dir: str) -> tuple[str, str]:
    """(state, phys_state) as `rdma link` names them."""
    return (
        _state(read_sysfs(os.path.join(port_dir, "state"))),
        _state(read_sysfs(os.path.join(port_dir, "phys_state"))),
    )


def list_devices(
    sysfs: str | None = None, use_pyverbs: bool = True, names: set[str] | None = None
) -> list[Device]:
    """Every device (`names`: only these, the others not read at all)."""
    sysfs = sysfs or SYSFS
    try:
        present = sorted(os.listdir(sysfs))
    except OSError:
        return []
    devices = []
    for name in present:
        if names is not None and name not in names:
            continue
        ddir = os.path.join(sysfs, name)
        mtus = _active_mtus(name) if use_pyverbs else {}
        node_type = read_sysfs(os.path.join(ddir, "node_type"))  # "4: RNIC": iWARP (transports.of)
        ports = []
        try:
            port_names = sorted(os.listdir(os.path.join(ddir, "ports")), key=int)
        except OSError:
            port_names = []
        for pn in port_names:
            pdir = os.path.join(ddir, "ports", pn)
            link_layer = read_sysfs(os.path.join(pdir, "link_layer")) or "UNKNOWN"
            transport = transports.of(node_type, link_layer)
            gids = port_gids(pdir, ip_gids=transport is None or transport.ip_gids)
            netdev = next((g.netdev for g in gids if g.netdev), None) or port_netdev(ddir, int(pn))
            state, phys_state = port_state(pdir)
            ports.append(
                Port(
                    port=int(pn),
                    state=state,
                    phys_state=phys_state,
                    link_layer=link_layer,
                    active_mtu=mtus.get(int(pn)),
                    rate=read_sysfs(os.path.join(pdir, "rate")),
                    netdev=netdev,
                    gids=gids,
                    transport=transport.name if transport else None,
                )
            )
        netdevs = sorted(
            {p.netdev for p in ports if p.netdev} | set(listdir(os.path.join(ddir, "device", "net")))
        )
        driver_link = os.path.join(ddir, "device", "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        devices.append(
            Device(
                name=name,
                node_type=node_type.split(":", 1)[-1].strip() if node_type else None,
                node_guid=read_sysfs(os.path.join(ddir, "node_guid")),
                driver=driver or (name.rstrip("0123456789") if name.startswith(("rxe", "siw")) else None),
                netdevs=netdevs,
                ports=ports,
            )
        )
    return devices


def natural(name: str) -> list:
    """mlx5_2 before mlx5_10: digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def rate_bound_gbps(device: str | None, port: int) -> float | None:
    """The most any rate measured through this port can be: its line rate, for hardware. None
    for software RDMA (rxe, siw: no bus device under it), whose `rate` is made up from its
    netdev's advertised speed (or a default when it has none), while its throughput is bounded
    by the CPU: a bound there would call an honest figure a lie."""
    if not device or "/" in device or not os.path.exists(os.path.join(SYSFS, device, "device")):
        return None
    return port_rate_gbps(device, port)


def port_rate_gbps(device: str | None, port: int) -> float | None:
    """The port's line rate from sysfs (`rate`: "100 Gb/sec (4X EDR)"), or None."""
    if not device or "/" in device:
        return None
    return rate_gbps(read_sysfs(os.path.join(SYSFS, device, "ports", str(port), "rate")))


def rate_gbps(rate: str | None) -> float | None:
    """sysfs `rate` ("100 Gb/sec (4X EDR)") as Gb/s, or None."""
    try:
        return float((rate or "").split()[0])
    except (ValueError, IndexError):
        return None
