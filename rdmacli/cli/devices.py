"""`rdmacli devices`: what RDMA hardware this host has."""

from __future__ import annotations

import click

from rdmacli.cli import HELP
from rdmacli.cli.app import json_reported
from rdmacli.errors import no_device


@click.command("devices", context_settings=HELP)
@json_reported
def command(app) -> None:
    """List RDMA devices: ports (state, link layer, MTU, rate), GID tables and netdevs."""
    with app.errors("devices"):
        from rdmacli.diag.devices import list_devices

        devices = list_devices()
        if not devices:
            raise no_device()
        if app.json_mode:
            from rdmacli.cli.ending import finish
            from rdmacli.outcome import Outcome

            finish(
                app,
                Outcome(
                    "devices",
                    counts={"devices": len(devices), "ports": sum(len(d.ports) for d in devices)},
                    data={"devices": [d.to_dict() for d in devices]},
                ),
            )
        else:
            from rdmacli.render.devices import devices_table

            app.out.print(devices_table(devices))
