"""The `devices` tables: one row per port, then the GID tables (narrow enough for 80 columns)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table


def devices_table(devices) -> Group:
    ports = Table(title="RDMA ports", title_justify="left")
    for col in ("port", "state", "physical", "transport", "mtu", "rate", "netdev"):
        ports.add_column(col)
    gids = Table(title="GIDs", title_justify="left")
    for col in ("port", "index", "gid", "type", "address"):
        gids.add_column(col, no_wrap=col == "gid")
    for dev in devices:
        for p in dev.ports:
            name = f"{dev.name}/{p.port}"
            ports.add_row(
                name,
                p.state,
                p.phys_state,
                p.transport or p.link_layer,  # RoCE, iWARP, InfiniBand (the link layer if unknown)
                str(p.active_mtu) if p.active_mtu else "-",
                p.rate or "-",
                p.netdev or "-",
            )
            for g in p.gids:
                gids.add_row(name, str(g.index), g.gid, g.type or "-", g.ip or "-")
    return Group(ports, gids)
