"""This host's side of a failed connection: is the device still there, its port ACTIVE, its netdev
up, the local address's GID still in the table? Read from sysfs at the moment of failure, so an
error names what changed here before it blames the peer."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rdmacli.diag.devices import (
    SYSFS,
    listdir,
    natural,
    port_has_ip,
    port_netdev,
    port_state,
    read_sysfs,
    transport_of,
)
from rdmacli.errors import Cause


@dataclass(frozen=True)
class LocalCause:
    text: str  # "rxe1 port 1 went DOWN: netdev veth1 is down"
    hint: str
    cause: Cause = Cause.LOCAL_PORT_DOWN


def local_cause(device: str | None, port: int = 1, ip: str | None = None, *, sysfs: str | None = None):
    """What is wrong on this host for `device` port `port` (and address `ip`), or None. Reads
    only that port's files: it runs on every failure, in agents that share a slow CPU."""
    if not device:
        return None
    ddir = os.path.join(sysfs or SYSFS, device)
    if not os.path.isdir(ddir):
        return LocalCause(
            f"the RDMA device {device} was removed",
            "recreate it (Soft-RoCE: `rdma link add NAME type rxe netdev IFACE`) or check the driver "
            "(`dmesg`, `rdma link`)",
            Cause.DEVICE_REMOVED,
        )
    pdir = os.path.join(ddir, "ports", str(port))
    if not os.path.isdir(pdir):
        return None
    state, phys_state = port_state(pdir)
    netdev = port_netdev(ddir, port)
    oper = read_sysfs(f"/sys/class/net/{netdev}/operstate") if netdev else None
    if state != "ACTIVE":
        if netdev and oper not in (None, "up", "unknown"):
            return LocalCause(
                f"{device} port {port} went {state}: netdev {netdev} is {oper}",
                f"bring it up: `ip link set {netdev} up`",
            )
        return LocalCause(
            f"{device} port {port} is {state} ({phys_state})",
            "check the cable or the link partner (`rdma link`, `ibv_devinfo`)",
        )
    transport = transport_of(device, port, sysfs)
    if ip and transport is not None and not transport.ip_gids:
        # iWARP's GID is its MAC, InfiniBand's a GUID: the address is the netdev's alone
        if netdev and netdev_of(ip) is None:
            return LocalCause(
                f"no interface of this host holds {ip} any more (it was {device}'s, on {netdev})",
                f"add the address back (`ip addr add {ip}/PREFIX dev {netdev}`) or use another",
                Cause.LOCAL_ADDRESS_GONE,
            )
        return None
    if ip and not port_has_ip(pdir, ip):
        return LocalCause(
            f"{device} port {port} has no GID for {ip} any more"
            + (f" (the address left netdev {netdev})" if netdev else ""),
            f"add the address back (`ip addr add {ip}/PREFIX dev {netdev or 'IFACE'}`) or use another",
            Cause.LOCAL_ADDRESS_GONE,
        )
    return None


def port_holders(port: int) -> list[str]:
    """Who holds RDMA CM port `port` on this host, as "comm (pid N)", from `rdma resource show
    cm_id` (empty where that cannot be read: no iproute2, no permission)."""
    import json
    import subprocess

    try:
        r = subprocess.run(
            ["rdma", "-j", "resource", "show", "cm_id"], capture_output=True, text=True, timeout=5
        )
        entries = json.loads(r.stdout or "[]")
    except (OSError, ValueError, subprocess.SubprocessError):
        return []
    held = []
    for e in entries if isinstance(entries, list) else []:
        if isinstance(e, dict) and str(e.get("src-addr", "")).endswith(f":{port}"):
            who = f"{e.get('comm', '?')} (pid {e.get('pid', '?')})"
            if who not in held:
                held.append(who)
    return held


def netdev_of(ip: str) -> str | None:
    """The network interface that holds `ip` on this host, or None."""
    import ipaddress
    import socket

    addr = ipaddress.ip_address(ip)
    if addr.version == 6:
        try:
            with open("/proc/net/if_inet6") as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 6 and ipaddress.ip_address(int(fields[0], 16)) == addr:
                        return fields[5]
        except OSError:
            return None
        return None
    import fcntl
    import struct

    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == ip:
                return name
    return None


def netdev_address(netdev: str, family: int, *, proc: str = "/proc") -> str | None:
    """A netdev's address of the family: IPv4 by SIOCGIFADDR, IPv6 the first global one of
    /proc/net/if_inet6."""
    import ipaddress

    if family == 6:
        try:
            with open(os.path.join(proc, "net", "if_inet6")) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) >= 6 and fields[5] == netdev and fields[3] == "00":  # global scope
                        return str(ipaddress.IPv6Address(int(fields[0], 16)))
        except (OSError, ValueError):
            return None
        return None
    import fcntl
    import socket
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", netdev.encode()[:15]))  # SIOCGIFADDR
    except OSError:
        return None
    return socket.inet_ntoa(raw[20:24])


def port_of_address(ip: str, *, sysfs: str | None = None) -> tuple[str, int] | None:
    """The RDMA device and port on the netdev that holds local address `ip`: the netdev first,
    then each device's port netdev (a file or two each, never a GID table), or None."""
    netdev = netdev_of(ip)
    if netdev is None:
        return None
    root = sysfs or SYSFS
    for device in sorted(listdir(root), key=natural):
        for port in sorted((p for p in listdir(os.path.join(root, device, "ports")) if p.isdigit()), key=int):
            if port_netdev(os.path.join(root, device), int(port)) == netdev:
                return device, int(port)
    return None


def cause_for_address(ip: str, *, sysfs: str | None = None) -> LocalCause | None:
    """What is wrong on this host with the RDMA port behind the local address `ip`, or None:
    for failures that never reached a cm_id's device (a resolve refused at once, a listener
    nobody reached)."""
    netdev = netdev_of(ip)
    if netdev is None:
        return LocalCause(
            f"no interface of this host holds {ip} any more",
            f"add the address back (`ip addr add {ip}/PREFIX dev IFACE`) or use another",
            Cause.LOCAL_ADDRESS_GONE,
        )
    root = sysfs or SYSFS
    for device in sorted(listdir(root)):
        for port in sorted(listdir(os.path.join(root, device, "ports")), key=int):
            if port_netdev(os.path.join(root, device), int(port)) == netdev:
                return local_cause(device, int(port), ip, sysfs=sysfs)
    oper = read_sysfs(f"/sys/class/net/{netdev}/operstate")
    if oper not in (None, "up", "unknown"):
        return LocalCause(f"netdev {netdev} ({ip}) is {oper}", f"bring it up: `ip link set {netdev} up`")
    return LocalCause(
        f"no RDMA device sits on netdev {netdev} ({ip})",
        f"Soft-RoCE: `rdma link add rxe_{netdev} type rxe netdev {netdev}`; else check the driver",
        Cause.DEVICE_REMOVED,
    )
