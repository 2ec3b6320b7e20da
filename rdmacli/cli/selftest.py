"""`rdmacli selftest`: smoke-test every protocol on this host's RDMA devices (for CI)."""

from __future__ import annotations

import sys

import click

from rdmacli.cli import complete
from rdmacli.cli.app import App, json_option


@click.command("selftest")
@click.option(
    "-C",
    "--count",
    type=click.IntRange(1, 100_000),
    default=10,
    show_default=True,
    help="Messages, pings or datagrams per protocol.",
)
@click.option(
    "-S",
    "--size",
    type=click.IntRange(1, 65535),
    default=64,
    show_default=True,
    help="Message size for every protocol (UD and multicast must fit the MTU).",
)
@click.option(
    "--protocol",
    "protocols",
    multiple=True,
    type=click.Choice(["connect", "ping", "ud", "mcast"]),
    help="Run only these protocols (repeatable; default: all).",
)
@click.option(
    "--server-address",
    metavar="ADDR",
    shell_complete=complete.rdma_addresses,
    help="Address the server side listens on (default: the first RDMA IPv4).",
)
@click.option(
    "--client-address",
    metavar="ADDR",
    shell_complete=complete.rdma_addresses,
    help="Address the client side uses (default: one on another device, if any).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Deadline for each protocol.",
)
@json_option
def command(count, size, protocols, server_address, client_address, timeout, json_mode):
    """Run every protocol rdmacli speaks (RC connect/listen, ping with validation, UD,
    multicast) as server and client on this host, each under a deadline, and print one row
    per protocol. Exits 0 only if every row passes.
    """
    app = App(json_mode=json_mode)
    with app.errors("selftest"):
        from rdmacli.diag import selftest

        server, client = selftest.pick_addresses()
        server, client = server_address or server, client_address or client
        rows = []
        for name in protocols or selftest.PROTOCOLS:
            if not json_mode:
                app.err.print(f"selftest: {name} ...", highlight=False)
            rows.append(
                selftest.run_protocol(name, server, client, count=count, size=size, timeout=timeout).to_dict()
            )
        failed = [r for r in rows if r["verdict"] != "pass"]
        code = 1 if failed else 0
        if json_mode:
            app.emit_json(
                {
                    "schema": "rdmacli/1",
                    "command": "selftest",
                    "result": "fail" if failed else "pass",
                    "exit_code": code,
                    "server_address": server,
                    "client_address": client,
                    "rows": rows,
                }
            )
        else:
            from rdmacli.render.checks import checks_table

            app.out.print(
                checks_table(rows, "rdmacli selftest", ["protocol", "verdict", "time_ms", "detail"])
            )
            app.out.print(f"{len(rows) - len(failed)}/{len(rows)} protocols passed")
        sys.exit(code)
