"""Node sets (ClusterShell syntax) and each node's RDMA address.

`node[001-128]`, `10.77.1.[1-8]`, `@group` (ClusterShell's groups.conf). A node is tested
through its name resolved, through a template (`{node}-ib`: node n01 through n01-ib), or through
a map file of `NODE ADDRESS` lines (# comments). The coordinator resolves; agents get addresses.
"""

from __future__ import annotations

import ipaddress
import socket

from rdmacli.errors import Cause, EnvironmentProblem, RdmacliError
from rdmacli.mesh.inputs import check_names, check_template, read_map


def expand(spec: str) -> list[str]:
    try:
        from ClusterShell.NodeSet import NodeSet, NodeSetException
    except ImportError as exc:
        raise EnvironmentProblem(
            f"cannot import ClusterShell: {exc}", hint="pip install ClusterShell"
        ) from exc
    try:
        names = list(NodeSet(spec))
    except (NodeSetException, ValueError) as exc:
        raise RdmacliError(
            f"bad node set {spec!r}: {exc}",
            hint="ClusterShell syntax: node[01-16], 10.0.0.[1-8], @group, comma-separated",
            cause=Cause.USAGE,
        ) from exc
    check_names(names)
    if len(names) < 2:
        raise RdmacliError(f"a mesh needs at least two nodes; {spec!r} is {len(names)}", cause=Cause.USAGE)
    return names


def addresses(names: list[str], *, template: str | None = None, map_file: str | None = None) -> list[str]:
    """Each node's RDMA address as an IP literal, in rank order."""
    mapping = read_map(map_file) if map_file else {}
    if template:
        check_template(template)
    missing = [n for n in names if mapping and n not in mapping]
    if missing:
        raise RdmacliError(
            f"the map file {map_file} has no address for {', '.join(missing[:8])}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""),
            cause=Cause.USAGE,
        )
    out, unresolved = [], []
    for rank, name in enumerate(names):
        host = mapping.get(name) or (template.format(node=name, rank=rank) if template else name)
        check_names([host], f"address of {name} (from the template)" if template else "address")
        try:
            out.append(str(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except socket.gaierror:
            unresolved.append(f"{name} ({host})" if host != name else name)
            continue
        infos.sort(key=lambda i: i[0] != socket.AF_INET)  # IPv4 first, as RoCE setups mostly are
        out.append(infos[0][4][0])
    if unresolved:
        raise RdmacliError(
            f"cannot resolve {', '.join(unresolved[:8])}"
            + (f" and {len(unresolved) - 8} more" if len(unresolved) > 8 else ""),
            hint="give each node's RDMA address with --address-template '{node}-ib' or --map FILE",
            cause=Cause.ADDRESS,
        )
    return out
