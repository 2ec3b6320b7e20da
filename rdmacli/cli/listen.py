"""`rdmacli listen`: the ucmatose server (ucmatose with no -s)."""

from __future__ import annotations

import click

from rdmacli.cli import options


@click.command("listen")
@options.bind_option("Address to listen on (default: all, 0.0.0.0; use :: for IPv6).")
@options.port_option("RDMA CM port to listen on  [default: 7471; 7174 with --ping or --ud].")
@options.ud_flag
@click.option(
    "--ping",
    "ping_mode",
    is_flag=True,
    help="Serve `rdmacli ping` and rping clients (like rping -s) instead of connect.",
)
@options.exchange
@options.port_space
@options.ack_timeout
@click.option(
    "--max-size",
    "max_size",
    type=click.IntRange(1, 64 * 1024 * 1024),
    default=None,
    metavar="BYTES",
    help="Largest size a client may ask for; larger requests are rejected "
    "[default: 64 MiB; 65535 with --ping].",
)
@click.option(
    "--fault-corrupt",
    "fault_corrupt",
    is_flag=True,
    hidden=True,
    help="Test hook: corrupt the data a --ping server writes back.",
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
    ud,
    ping_mode,
    connections,
    count,
    size,
    port_space,
    ack_timeout,
    max_size,
    fault_corrupt,
    persistent,
    busy_poll,
    timeouts,
    app,
    show_events,
):
    """Serve clients, wire-compatible with ucmatose's server (rping's with --ping, udaddy's
    with --ud).

    Each connection gets COUNT messages of SIZE bytes, then the server waits for the echo and
    disconnects. An rdmacli client's own COUNT and SIZE (sent in its connection request) take
    precedence. Exits after -c connections, unless --persistent.
    """
    if ud and ping_mode:
        raise click.UsageError("--ud and --ping are different protocols: choose one")
    port, port_space = options.resolve_mode(
        ud=ud, port=port, port_space=port_space, rc_port=7174 if ping_mode else 7471
    )
    if ping_mode and size == 100:  # -S's default is ucmatose's; rping's is 64
        size = 64
    params = {
        "bind": bind,
        "port": port,
        "connections": connections,
        "count": count,
        "size_bytes": size,
        "port_space": port_space,
        "persistent": persistent,
        "max_size_bytes": max_size,
        "mode": "ping" if ping_mode else "ud" if ud else "connect",
    }
    with app.errors("listen"):
        from rdmacli.cli._run import run_flow
        from rdmacli.engine.flow import Options, ServerFlow
        from rdmacli.protocols import cmatose, rping, udaddy
        from rdmacli.rdma import addr
        from rdmacli.rdma.constants import PORT_SPACES

        if ping_mode:
            problem = rping.check_size(size)
            if problem:
                raise click.BadParameter(problem, param_hint="-S")

            def make_protocol():
                return rping.RpingServer(size, max_size=max_size or rping.MAX_SIZE, corrupt=fault_corrupt)
        elif ud:

            def make_protocol():
                return udaddy.UdServer(count, size, max_size=max_size or 4096)
        else:

            def make_protocol():
                return cmatose.CmatoseServer(count, size, max_size=max_size or 64 * 1024 * 1024)

        def factory(observer):
            where = addr.resolve(bind, port, passive=True, what="bind address")
            return ServerFlow(
                bind=where,
                max_clients=None if persistent else connections,
                make_protocol=make_protocol,
                observer=observer,
                timeouts=timeouts,
                options=Options(ps=PORT_SPACES[port_space], ack_timeout=ack_timeout, busy_poll=busy_poll),
            )

        run_flow(app, "listen", factory, show_events=show_events, params=params)
