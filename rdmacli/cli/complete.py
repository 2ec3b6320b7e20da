"""Dynamic shell completion values, read from sysfs (import-light: no pyverbs, no rich)."""

from __future__ import annotations

from click.shell_completion import CompletionItem


def rdma_addresses(ctx, param, incomplete: str) -> list[CompletionItem]:
    """IP addresses that have an RDMA GID on this host, with their device."""
    from rdmacli.diag.devices import list_devices

    seen = {}
    for dev in list_devices(use_pyverbs=False):
        for port in dev.ports:
            for gid in port.gids:
                if gid.ip and gid.ip.startswith(incomplete) and gid.ip not in seen:
                    seen[gid.ip] = f"{dev.name} port {port.port} ({gid.netdev})"
    return [CompletionItem(ip, help=h) for ip, h in seen.items()]


def ports(ctx, param, incomplete: str) -> list[CompletionItem]:
    """The protocols' default ports (rdmacli.protocols.table)."""
    from rdmacli.protocols.table import known_ports

    return [CompletionItem(str(p), help=h) for p, h in known_ports().items() if str(p).startswith(incomplete)]


def multicast_groups(ctx, param, incomplete: str) -> list[CompletionItem]:
    examples = {"239.1.1.1": "IPv4 organisation-local", "ff0e::1": "IPv6 global scope"}
    return [CompletionItem(g, help=h) for g, h in examples.items() if g.startswith(incomplete)]
