"""Node sets (ClusterShell syntax) and each node's RDMA address.

`node[001-128]`, `10.77.1.[1-8]`, `@group` (ClusterShell's groups.conf). A node is tested
through its name resolved, through a template (`{node}-ib`: node n01 through n01-ib), or through
a map file of `NODE ADDRESS` lines (# comments). The coordinator resolves; agents get addresses.
"""

from __future__ import annotations

import ipaddress
import re
import socket

from rdmacli.errors import Cause, EnvironmentProblem, RdmacliError
from rdmacli.mesh.inputs import check_names, check_template

GROUP = r"@[^,\s\[\]!&^]+"  # an @group in a node set


def expand(spec: str) -> list[str]:
    try:
        from ClusterShell.NodeSet import NodeSet, NodeSetException
        from ClusterShell.NodeUtils import GroupResolverError, GroupSourceError
    except ImportError as exc:
        raise EnvironmentProblem(
            f"cannot import ClusterShell: {exc}", hint="pip install ClusterShell"
        ) from exc
    if (most := most_nodes(spec)) > MAX_NODES:  # before ClusterShell expands it: n[1-100000000] is GBs
        raise RdmacliError(
            f"{spec!r} is up to {most} nodes; a mesh run takes at most {MAX_NODES}",
            hint="split the fleet (by switch, by rack) into runs of at most that many",
            cause=Cause.USAGE,
        )
    groups = re.findall(GROUP, spec)
    try:
        nodes = NodeSet(spec)
        if len(nodes) > MAX_NODES:
            raise RdmacliError(
                f"{spec!r} is {len(nodes)} nodes; a mesh run takes at most {MAX_NODES}",
                hint="split the fleet (by switch, by rack) into runs of at most that many, or use --quick",
                cause=Cause.USAGE,
            )
        names = list(nodes)
        unknown = [g for g in groups if not len(NodeSet(g))]
    except (GroupResolverError, GroupSourceError) as exc:
        # ClusterShell 1.9 (Debian 12's) with no groups.conf source: an error of its resolver, not
        # of the node set (1.10 says it as a NodeSetException); either way a group it cannot name
        raise RdmacliError(
            f"no such node group {', '.join(groups)}: ClusterShell has no group source "
            f"for it ({type(exc).__name__}: {exc})",
            hint="ClusterShell's groups: `nodeset -L` lists them (groups.conf, groups.d)",
            cause=Cause.USAGE,
        ) from exc
    except (NodeSetException, ValueError) as exc:
        raise RdmacliError(
            f"bad node set {spec!r}: {exc}",
            hint="ClusterShell syntax: node[01-16], 10.0.0.[1-8], @group, comma-separated",
            cause=Cause.USAGE,
        ) from exc
    if unknown:
        raise RdmacliError(
            f"no such node group {', '.join(unknown)} (or it has no nodes)",
            hint="ClusterShell's groups: `nodeset -L` lists them (groups.conf, groups.d)",
            cause=Cause.USAGE,
        )
    check_names(names)
    if len(names) < 2:
        raise RdmacliError(f"a mesh needs at least two nodes; {spec!r} is {len(names)}", cause=Cause.USAGE)
    return names


def addresses(
    names: list[str], *, template: str | None = None, mapping: dict[str, list[str]] | None = None,
    map_file: str | None = None,
) -> list[list[str]]:  # fmt: skip
    """Each node's RDMA addresses (its rails, in order) as IP literals, in rank order; every
    node with as many rails as the first, or a usage error naming those that differ. `mapping`:
    a map's addresses (read from map_file, named in the errors)."""
    mapping = mapping or {}
    if template:
        check_template(template)
    missing = [n for n in names if mapping and n not in mapping]
    if missing:
        raise RdmacliError(
            f"the map file {map_file} has no address for {', '.join(missing[:8])}"
            + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""),
            cause=Cause.USAGE,
        )
    wanted = []
    for rank, name in enumerate(names):
        hosts = mapping.get(name) or [template.format(node=name, rank=rank) if template else name]
        check_names(hosts, f"address of {name} (from the template)" if template else "address")
        wanted.append(hosts)
    found_of = resolve_all({h for hosts in wanted for h in hosts})
    out, unresolved = [], []
    for name, hosts in zip(names, wanted):
        rails: list[str] = []
        for host in hosts:
            found = found_of.get(host)
            if found is None:
                unresolved.append(f"{name} ({host})" if host != name else name)
            else:
                rails.append(found)
        out.append(rails)
    if unresolved:
        # the hint is about where the names came from (issue 75: a map's bad line hinted
        # "or --map FILE" to someone who gave one)
        hint = (
            f"fix those nodes' addresses in {map_file} (IP literals, or names this host resolves)"
            if map_file and mapping
            else "fix --address-template (it made those names), or give --map FILE with their addresses"
            if template
            else "give each node's RDMA address with --address-template '{node}-ib' or --map FILE"
        )
        raise RdmacliError(
            f"cannot resolve {', '.join(unresolved[:8])}"
            + (f" and {len(unresolved) - 8} more" if len(unresolved) > 8 else ""),
            hint=hint,
            cause=Cause.ADDRESS,
        )
    check_rail_counts(names, [len(r) for r in out])
    check_unique(names, out, "--map" if map_file else "--address-template" if template else "name resolution")
    return out


def check_unique(names: list[str], addrs: list[list[str]], source: str, hint: str | None = None) -> None:
    """No address on two NICs: two nodes on one address would test a host against itself and
    blame one for the other."""
    owner: dict[str, int] = {}
    for r, rails in enumerate(addrs):
        for address in rails:
            other = owner.setdefault(address, r)
            if other != r:
                raise RdmacliError(
                    f"{source}: {names[other]} and {names[r]} both have {address}",
                    hint=hint or "give each node its own RDMA addresses",
                    cause=Cause.USAGE,
                )


MAX_NODES = 10_000  # a run's nodes at most (the spec and the coordinator are sized for it)
_RANGE = re.compile(r"\[([^\]]*)\]")


def most_nodes(spec: str) -> int:
    """An upper bound of the nodes a node set names, from its text alone (its bracketed ranges
    multiplied, per comma-separated part); groups (@name) count as one until expanded."""
    total = 0
    for part in re.split(r",(?![^\[]*\])", spec):
        size = 1
        for body in _RANGE.findall(part):
            count = 0
            for piece in body.split(","):
                lo, _, hi = piece.partition("-")
                lo, hi = lo.split("/")[0], (hi or lo).split("/")[0]
                if lo.isdigit() and hi.isdigit():
                    count += max(int(hi) - int(lo) + 1, 1)
                else:
                    count += 1
            size *= max(count, 1)
        total += size
    return total


RESOLVE_S = 30.0  # every name of a run resolved within this, in parallel
RESOLVERS = 64


def resolve_all(hosts: set[str], deadline_s: float = RESOLVE_S) -> dict[str, str | None]:
    """Each host's address: IP literals at once, names through the resolver in parallel, all
    within one deadline (a name still unanswered then is unresolved: the run never waits on
    DNS for 10 000 names one by one)."""
    from concurrent.futures import ThreadPoolExecutor, wait

    out: dict[str, str | None] = {}
    names = []
    for host in hosts:
        try:
            out[host] = canonical(host)
        except ValueError:
            names.append(host)
    if not names:
        return out
    pool = ThreadPoolExecutor(max_workers=min(RESOLVERS, len(names)), thread_name_prefix="resolve")
    futures = {pool.submit(resolve, h): h for h in names}
    done, _ = wait(futures, timeout=deadline_s)
    pool.shutdown(wait=False, cancel_futures=True)  # a resolver stuck past the deadline is left
    for future, host in futures.items():
        out[host] = future.result() if future in done else None
    return out


def canonical(address: str) -> str:
    """An IP literal in its one form: ::ffff:10.0.0.1 (an IPv4-mapped IPv6 address, the same
    host) is 10.0.0.1, fd77:0::1 is fd77::1; two spellings of one address are one node's."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def resolve(host: str) -> str | None:
    """An IP literal as itself, a name through the resolver (IPv4 first), or None."""
    try:
        return canonical(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # IPv4 first, as RoCE setups mostly are
    found = str(infos[0][4][0])
    try:
        return canonical(found)
    except ValueError:
        return found


def check_rail_counts(names: list[str], counts: list[int], hint: str | None = None) -> None:
    """Every node has as many rails as most do, or a usage error that names those that do not."""
    if not counts:
        return
    bare = [n for n, c in zip(names, counts) if c == 0]
    if bare:  # a host, not the user: no usable RDMA port there
        raise RdmacliError(
            f"{len(bare)} node(s) have no usable RDMA port (ACTIVE, with an IP address): "
            + ", ".join(bare[:8])
            + (f" and {len(bare) - 8} more" if len(bare) > 8 else ""),
            hint="on those nodes check `rdmacli devices` and `rdmacli doctor` (a device, its port "
            "ACTIVE, an address on its netdev); or give the rails' addresses with --map",
            cause=Cause.ENVIRONMENT,
        )
    common = max(set(counts), key=counts.count)
    tied = sum(counts.count(c) == counts.count(common) for c in set(counts)) > 1
    odd = [f"{n} ({c})" for n, c in zip(names, counts) if c != common or tied]
    if odd:
        head = "no number of rails is shared by most nodes: " if tied else f"most have {common}, "
        raise RdmacliError(
            "nodes have different numbers of rails: "
            + head
            + ", ".join(odd[:8])
            + (f" and {len(odd) - 8} more" if len(odd) > 8 else "")
            + ("" if tied else " do not"),
            hint=hint
            or "rail k of every node is tested against rail k of the others: give every "
            "node the same number of addresses (or fix the NICs that are missing)",
            cause=Cause.USAGE,
        )


def rank_of_host(names, node: str) -> int | None:
    """The rank of the one run name that is this node: its name exactly, else the one whose
    short form (cut at the first dot) is this node's short form; None when none or several."""
    if node in names:
        return list(names).index(node)
    short = node.split(".", 1)[0]
    found = [k for k, name in enumerate(names) if name.split(".", 1)[0] == short]
    return found[0] if len(found) == 1 else None
