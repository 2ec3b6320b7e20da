"""`rdmacli connect HOST`: the ucmatose client (ucmatose -s HOST)."""

from __future__ import annotations

import click

from rdmacli.cli import complete, options


@click.command("connect")
@click.argument("host", shell_complete=complete.rdma_addresses)
@options.port_option("RDMA CM port of the server  [default: 7471; 7174 with --ud].")
@options.ud_flag
@options.bind_option("Source address (an IP on the RDMA netdev to use).")
@options.exchange
@options.port_space
@click.option(
    "-t",
    "--tos",
    type=click.IntRange(0, 255),
    default=None,
    help="Type of service (rdma_set_option RDMA_OPTION_ID_TOS).",
)
@options.ack_timeout
@click.option("--busy-poll", is_flag=True, help="Spin on the CQ instead of sleeping on events.")
@options.timeouts
@options.output
def command(
    host,
    port,
    ud,
    bind,
    connections,
    count,
    size,
    port_space,
    tos,
    ack_timeout,
    busy_poll,
    timeouts,
    app,
    show_events,
):
    """Connect to HOST and exchange messages, wire-compatible with ucmatose (udaddy with --ud).

    The server sends COUNT messages of SIZE bytes on each connection, the client echoes them,
    the server disconnects. Against an rdmacli server, COUNT and SIZE travel in the connection
    request, so the server need not be given the same options.

    With --ud the client sends COUNT datagrams carrying its QP number as immediate data and
    waits for COUNT replies; lost datagrams are reported at the --idle-timeout deadline.
    """
    port, port_space = options.resolve_mode(ud=ud, port=port, port_space=port_space, rc_port=7471)
    params = {
        "host": host,
        "port": port,
        "bind": bind,
        "connections": connections,
        "count": count,
        "size_bytes": size,
        "port_space": port_space,
        "tos": tos,
        "ack_timeout": ack_timeout,
    }
    with app.errors("connect"):
        from rdmacli.cli._run import run_flow
        from rdmacli.engine.flow import ClientFlow, Options
        from rdmacli.protocols.cmatose import CmatoseClient
        from rdmacli.protocols.udaddy import UdClient
        from rdmacli.rdma import addr
        from rdmacli.rdma.constants import PORT_SPACES

        def factory(observer):
            dst = addr.resolve(host, port, what="server address")
            src = addr.resolve(bind, 0, what="bind address") if bind else None
            return ClientFlow(
                dst=dst,
                src=src,
                connections=connections,
                make_protocol=lambda: UdClient(count, size) if ud else CmatoseClient(count, size),
                observer=observer,
                timeouts=timeouts,
                options=Options(
                    ps=PORT_SPACES[port_space], tos=tos, ack_timeout=ack_timeout, busy_poll=busy_poll
                ),
            )

        run_flow(app, "connect", factory, show_events=show_events, params=params)
