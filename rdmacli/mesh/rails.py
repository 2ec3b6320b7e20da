"""A node's rails: its RDMA NICs, each with the address a mesh tests it through.

`--rails auto` takes every ACTIVE port that carries an address of the family in use (a RoCE
port's GID table; an InfiniBand port's IPoIB netdev), in a stable order: device names in
natural order (mlx5_2 before mlx5_10), then port number. `--rails mlx5_0,mlx5_3` takes the
named devices' ports, in the order named. Rail k of every node is then "the k-th NIC": the
coordinator checks that every node found as many.

Everything here is read on the node by its agent (a discovery spec); what it reports is
checked again by the coordinator (check_report) before a word of it is used.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import asdict, dataclass, replace

from rdmacli.diag.devices import (
    DEVICE_NAME,
    SYSFS,
    listdir,
    natural,
    port_gids,
    port_netdev,
    port_state,
    read_sysfs,
    transport_of,
)
from rdmacli.diag.local import netdev_address
from rdmacli.mesh.shape import take, wire
from rdmacli.transports import ROCE

DEVICE = DEVICE_NAME  # an RDMA device name (diag.devices says it once)
MAX_RAILS = 16


def _device(v) -> bool:
    return isinstance(v, str) and DEVICE.fullmatch(v) is not None


@dataclass(frozen=True)
class Rail:
    """One rail of a node as its agent reports it (the fields `take` reads; the address's family
    is checked against the run's by `check_report`)."""

    device: str = wire(_device, "a device name")
    port: int = wire(lambda v: type(v) is int and 0 < v < 256, "a port number")
    address: str = wire(lambda v: isinstance(v, str) and len(v) <= 64, "an address")
    netdev: str | None = wire(_device, lenient=True, default=None)  # said for people: a bad one is dropped

    def to_dict(self) -> dict:
        return asdict(self)


def discover(family: int = 4, devices: list[str] | None = None, *, sysfs: str | None = None) -> list[Rail]:
    """This node's rails: ACTIVE ports with an address of `family`, of `devices` if named (in
    their order), else of every device (natural order, then port). Only the devices taken are
    read (a GID table is up to 1024 files a port)."""
    root = sysfs or SYSFS
    names = devices if devices else sorted(listdir(root), key=natural)
    rails = []
    for name in names:
        ddir = os.path.join(root, name)
        for port in sorted(int(p) for p in listdir(os.path.join(ddir, "ports")) if p.isdigit()):
            pdir = os.path.join(ddir, "ports", str(port))
            if port_state(pdir)[0] != "ACTIVE":
                continue
            transport = transport_of(name, port, root)
            if transport is None:  # no node_type: Ethernet (or no link layer) is taken as RoCE, as before
                roce = (read_sysfs(os.path.join(pdir, "link_layer")) or "Ethernet") == "Ethernet"
            else:
                roce = transport is ROCE
            if roce:
                address, netdev = _roce_address(pdir, family)
            else:  # InfiniBand, iWARP: the address of its netdev (IPoIB's; iWARP's GID is its MAC)
                netdev = port_netdev(ddir, port)
                address = netdev_address(netdev, family) if netdev else None
            if address is not None:
                rails.append(Rail(name, port, address, netdev))
    return rails


def _roce_address(port_dir: str, family: int) -> tuple[str | None, str | None]:
    """The port's first GID address of the family, RoCE v2 entries first (routable), and the
    netdev behind it."""
    found = []
    for g in port_gids(port_dir):
        if g.ip and ipaddress.ip_address(g.ip).version == family:
            found.append(((g.type or "") != "RoCE v2", g.index, g.ip, g.netdev))
    if not found:
        return None, None
    _, _, ip, netdev = min(found)
    return ip, netdev


def port_of(address: str, *, sysfs: str | None = None) -> tuple[str, int] | None:
    """The RDMA device and port on the netdev that holds `address` (diag.local.port_of_address)."""
    from rdmacli.diag.local import port_of_address

    return port_of_address(address, sysfs=sysfs)


def parse_devices(text: str, node: str | None = None) -> list[str]:
    """`--rails mlx5_0,mlx5_3`: device names, `{node}` standing for the node's name (for hosts
    whose device names carry it, as the lab's do). ValueError says what is wrong."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError("no device names")
    if len(names) > MAX_RAILS:
        raise ValueError(f"more than {MAX_RAILS} rails")
    if len(set(names)) != len(names):
        raise ValueError("a device is named twice")
    out = []
    for t in names:
        if "{" in t or "}" in t:
            if node is None:
                bad = t.replace("{node}", "")
                if "{" in bad or "}" in bad:
                    raise ValueError(f"{t!r}: only {{node}} may stand in a device name")
                t = t.replace("{node}", "n")  # checked with a stand-in; filled on the node
            else:
                t = t.replace("{node}", node)
        if not DEVICE.fullmatch(t):
            raise ValueError(f"{t!r} is not an RDMA device name")
        out.append(t)
    if len(set(out)) != len(out) and node is not None:  # `rxe_{node},rxe_n01` on n01
        raise ValueError(f"a device is named twice on {node}")
    return out


class _NotARail(ValueError):
    """A rail `take` refuses: (the field, what a good value is)."""


def check_report(value, family: int) -> list[Rail] | str:
    """An agent's discovered rails, or why they cannot be used: a list of at most MAX_RAILS
    {device, port, address[, netdev]} with a device name, a port number and an IP literal of the
    family in use; no address twice."""
    if not isinstance(value, list):
        return "rails that are not a list"
    if len(value) > MAX_RAILS:
        return f"{len(value)} rails, more than {MAX_RAILS} (name the devices with --rails)"
    out = []
    for r in value:
        try:
            rail = Rail(**take(Rail, r, _NotARail))
        except _NotARail as exc:
            name, words = exc.args
            if not name:
                return "a rail that is not an object"
            return f"a rail whose {name} is not {f'an IPv{family} address' if name == 'address' else words}"
        try:
            ip = ipaddress.ip_address(rail.address)
        except ValueError:
            ip = None
        if ip is None or ip.version != family:
            return f"a rail whose address is not an IPv{family} address"
        scope = getattr(ip, "scope_id", None)
        if scope is not None and not DEVICE.fullmatch(scope):  # a netdev's name, or its index
            return "a rail whose address has a scope that is not an interface name"
        out.append(replace(rail, address=str(ip)))
    if len({r.address for r in out}) != len(out):
        return "the same address on two rails"
    return out
