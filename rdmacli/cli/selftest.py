"""`rdmacli selftest`: smoke-test every protocol on this host's RDMA devices (for CI)."""

from __future__ import annotations

import sys

import click

from rdmacli.cli import HELP, complete, options
from rdmacli.cli.app import json_reported, params_of
from rdmacli.protocols.table import PING, PROTOCOLS


def address_option(name: str, text: str):
    """One side's address: an RDMA address of this host, completed from its devices."""
    return click.option(
        name, type=options.ADDRESS, metavar="ADDR", shell_complete=complete.rdma_addresses, help=text
    )


@click.command("selftest", context_settings=HELP)
@options.count_option("Messages, pings or datagrams per protocol.", high=100_000, default=10)
@options.size_option(
    "Message size for every protocol (UD and multicast must fit the MTU).", 1, PING.max_size, 64
)
@click.option(
    "--protocol",
    "protocols",
    multiple=True,
    type=click.Choice(list(PROTOCOLS)),
    help="Run only these protocols (repeatable; default: all).",
)
@address_option("--server-address", "Address the server side listens on (default: the first RDMA IPv4).")
@address_option(
    "--client-address",
    "Address the client side uses (default: one on another device that reaches the server, else the "
    "server's own).",
)
@options.seconds_option(
    "--timeout",
    low=1,
    high=3600,
    default=30.0,
    help="Deadline for each protocol.",
)
@json_reported
def command(count, size, protocols, server_address, client_address, timeout, app):
    """Run every protocol rdmacli speaks (RC connect/listen, ping with validation, UD,
    multicast) as server and client on this host, each under a deadline, and print one row
    per protocol. Exits 0 only if every row passes.

    The path goes across two RDMA devices when this host has two that reach each other, else
    from one device to itself (two local ports need accept_local=1 and rp_filter=0 to reach
    each other; `rdmacli doctor` says whether they do). The path used is printed.
    """
    params = params_of("count size protocols timeout", protocols=list(protocols))
    with app.errors("selftest", params):
        from rdmacli.cli.ending import finish
        from rdmacli.diag import selftest
        from rdmacli.outcome import Outcome

        server, client, path = selftest.pick_path(server_address, client_address)
        app.info(f"selftest: {client} -> {server}, {path}")
        rows = []
        for name in protocols or selftest.PROTOCOLS:
            app.info(f"selftest: {name} ...")
            rows.append(
                selftest.run_protocol(name, server, client, count=count, size=size, timeout=timeout).to_dict()
            )
        passed = sum(r["verdict"] == "pass" for r in rows)
        tried = sum(r["verdict"] != "n/a" for r in rows)  # n/a: the transport has it not (iWARP: UD)
        outcome = Outcome(
            "selftest",
            params,
            failed=passed < tried,
            failed_words=f"{tried - passed} of {tried} protocols failed: "
            + ", ".join(r["protocol"] for r in rows if r["verdict"] not in ("pass", "n/a")),
            counts={"protocols": tried, "protocols_passed": passed},
            data={"server_address": server, "client_address": client, "path": path, "rows": rows},
        )
        if not app.json_mode:
            from rdmacli.render.checks import checks_table

            app.out.print(
                checks_table(rows, "rdmacli selftest", ["protocol", "verdict", "time_ms", "detail"])
            )
            skipped = f", {len(rows) - tried} not applicable" if tried < len(rows) else ""
            app.out.print(f"{passed}/{tried} protocols passed{skipped} ({path})")
            sys.exit(outcome.exit_code)
        finish(app, outcome)
