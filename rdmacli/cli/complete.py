"""Dynamic shell completion values, read from sysfs (import-light: no pyverbs, no rich)."""

from __future__ import annotations

from click.shell_completion import CompletionItem


def rdma_addresses(ctx, param, incomplete: str) -> list[CompletionItem]:
    """IP addresses of this host's RDMA ports, with their device: from the GIDs on RoCE, from the
    netdev on iWARP and InfiniBand (whose GIDs are no addresses)."""
    from rdmacli.diag.devices import list_devices
    from rdmacli.diag.local import netdev_address

    seen = {}
    for dev in list_devices(use_pyverbs=False):
        for port in dev.ports:
            found: list[tuple[str | None, str | None]] = [(g.ip, g.netdev) for g in port.gids if g.ip]
            if not found and port.transport in ("iWARP", "InfiniBand") and port.netdev:
                found = [(netdev_address(port.netdev, 4), port.netdev)]
            for ip, netdev in found:
                if ip and ip.startswith(incomplete) and ip not in seen:
                    seen[ip] = f"{dev.name} port {port.port} ({netdev})"
    return [CompletionItem(ip, help=h) for ip, h in seen.items()]


def known_hostnames(paths=("/etc/hosts", "~/.ssh/known_hosts")) -> list[str]:
    """Host names and addresses from /etc/hosts and ssh's known_hosts, as ssh's completion
    offers them (hashed known_hosts entries cannot be read, and are skipped)."""
    import os
    import re

    names: list[str] = []
    for path in paths:
        try:
            with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if not words or words[0].startswith("|"):
                continue
            found = (
                words[1:]
                if path.endswith("hosts") and not path.endswith("known_hosts")
                else words[0].split(",")
            )
            for w in found:
                w = re.sub(r"^\[(.*)\]:\d+$", r"\1", w)  # [host]:port
                if re.fullmatch(r"[\w.:-]{1,253}", w) and w not in names:
                    names.append(w)
    return names


def hosts(ctx, param, incomplete: str) -> list[CompletionItem]:
    """RDMA addresses of this host, then names from /etc/hosts and ssh's known_hosts."""
    items = rdma_addresses(ctx, param, incomplete)
    seen = {i.value for i in items}
    items += [CompletionItem(n) for n in known_hostnames() if n.startswith(incomplete) and n not in seen]
    return items


def ports(ctx, param, incomplete: str) -> list[CompletionItem]:
    """The command's own default port where it has one protocol (bw and lat 18515, ping 7174),
    else every protocol's default port."""
    from rdmacli.protocols.table import BW, LAT, PING, known_ports

    own = {"bw": BW, "lat": LAT, "ping": PING}.get(ctx.command.name if ctx and ctx.command else "")
    known = {own.default_port: f"{own.c_tool} / {own.name}"} if own is not None else known_ports()
    return [CompletionItem(str(p), help=h) for p, h in known.items() if str(p).startswith(incomplete)]
