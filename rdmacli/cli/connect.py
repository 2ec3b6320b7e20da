"""`rdmacli connect HOST`: the ucmatose client (ucmatose -s HOST)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import CONNECT, UD, mode_of


@click.command("connect", context_settings=HELP)
@options.host_argument()
@options.port_option(
    f"RDMA CM port of the server  [default: {CONNECT.default_port}; {UD.default_port} with --ud]."
)
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
@options.busy_poll
@options.client_run
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
    spec = mode_of("ud" if ud else None)
    port, port_space = options.resolve_mode(spec, port=port, port_space=port_space)
    size = options.mode_size(click.get_current_context(), spec, size)
    params = params_of(
        "wait_s host port bind connections count size port_space tos ack_timeout",
        port=port,
        size=size,
        port_space=port_space,
    )
    with app.errors("connect", params):
        from rdmacli.cli._run import make_test, run_test
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import CLIENT

        test = make_test(
            "connect",
            spec,
            CLIENT,
            Params(count=count, size=size),
            summary=params,
            timeouts=timeouts,
            tos=tos,
            ack_timeout=ack_timeout,
            busy_poll=busy_poll,
        )
        run_test(app, test, show_events=show_events)
