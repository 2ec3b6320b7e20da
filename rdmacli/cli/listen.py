"""`rdmacli listen`: the ucmatose server (ucmatose with no -s)."""

from __future__ import annotations

import click

from rdmacli.cli import options
from rdmacli.cli.app import App


@click.command("listen")
@click.option(
    "-b",
    "--bind",
    "bind",
    metavar="ADDR",
    default=None,
    help="Address to listen on (default: all, 0.0.0.0; use :: for IPv6).",
)
@click.option(
    "-p",
    "--port",
    type=click.IntRange(1, 65535),
    default=7471,
    show_default=True,
    help="RDMA CM port to listen on.",
)
@options.exchange
@options.port_space_choice()
@click.option(
    "-a",
    "--ack-timeout",
    "ack_timeout",
    type=click.IntRange(0, 31),
    default=None,
    help="Local ACK timeout exponent: 4.096 µs × 2^N.",
)
@click.option(
    "--max-size",
    "max_size",
    type=click.IntRange(1, 64 * 1024 * 1024),
    default=64 * 1024 * 1024,
    show_default=True,
    metavar="BYTES",
    help="Largest message size a client may ask for; larger requests are rejected.",
)
@click.option(
    "--persistent",
    is_flag=True,
    help="Keep serving clients until interrupted (default: serve -c connections, exit).",
)
@click.option("--busy-poll", is_flag=True, help="Spin on the CQ instead of sleeping on events.")
@options.timeouts
@options.output
def command(
    bind,
    port,
    connections,
    count,
    size,
    port_space,
    ack_timeout,
    max_size,
    persistent,
    busy_poll,
    resolve_timeout,
    connect_timeout,
    idle_timeout,
    timeout,
    show_events,
    json_mode,
    json_lines,
    quiet,
):
    """Serve clients, wire-compatible with ucmatose's server.

    Each connection gets COUNT messages of SIZE bytes, then the server waits for the echo and
    disconnects. An rdmacli client's own COUNT and SIZE (sent in its connection request) take
    precedence. Exits after -c connections, unless --persistent.
    """
    app = App(json_mode=json_mode, json_lines=json_lines, quiet=quiet)
    params = {
        "bind": bind,
        "port": port,
        "connections": connections,
        "count": count,
        "size_bytes": size,
        "port_space": port_space,
        "persistent": persistent,
        "max_size_bytes": max_size,
    }
    with app.errors("listen"):
        from rdmacli.cli._run import run_flow
        from rdmacli.engine.flow import Options, ServerFlow, Timeouts
        from rdmacli.protocols.cmatose import CmatoseServer
        from rdmacli.rdma import addr
        from rdmacli.rdma.constants import PORT_SPACES

        def factory(observer):
            where = addr.resolve(bind, port, passive=True, what="bind address")
            return ServerFlow(
                bind=where,
                max_clients=None if persistent else connections,
                make_protocol=lambda: CmatoseServer(count, size, max_size=max_size),
                observer=observer,
                timeouts=Timeouts(resolve_timeout, connect_timeout, idle_timeout, timeout),
                options=Options(ps=PORT_SPACES[port_space], ack_timeout=ack_timeout, busy_poll=busy_poll),
            )

        run_flow(app, "listen", factory, show_events=show_events, params=params)
