"""The `devices` table."""

from __future__ import annotations

from rich.table import Table


def devices_table(devices) -> Table:
    table = Table(title="RDMA devices", show_lines=False)
    for col in (
        "device",
        "port",
        "state",
        "phys",
        "link",
        "mtu",
        "rate",
        "netdev",
        "gid",
        "gid type",
        "address",
    ):
        table.add_column(col, no_wrap=col in ("device", "gid"))
    for dev in devices:
        for port in dev.ports:
            first = True
            rows = port.gids or [None]
            for gid in rows:
                table.add_row(
                    dev.name if first else "",
                    str(port.port) if first else "",
                    port.state if first else "",
                    port.phys_state if first else "",
                    port.link_layer if first else "",
                    (str(port.active_mtu) if port.active_mtu else "-") if first else "",
                    (port.rate or "-") if first else "",
                    (gid.netdev if gid else port.netdev) or "-",
                    f"{gid.index}: {gid.gid}" if gid else "-",
                    (gid.type or "-") if gid else "-",
                    (gid.ip or "-") if gid else "-",
                )
                first = False
    return table
