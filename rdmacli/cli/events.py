"""`rdmacli events`: the bare rdma_cm flow, every CM event and every step's time (cmtime-like)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import CONNECT


@click.command("events", context_settings=HELP)
@options.host_argument(required=False)
@click.option("--listen", "listen", is_flag=True, help="Be the passive side (no HOST).")
@options.port_option("RDMA CM port.", default=CONNECT.default_port)
@options.bind_option("Source (client) or listen address.")
@options.connections_option("Connections to set up and tear down.")
@options.port_space_option(list(CONNECT.port_spaces), "RDMA CM port space (RC)  [default: tcp].")
@options.wait_option(
    "Client: wait up to SECONDS for a server not listening yet (asking every 0.5 s). "
    "--listen: give up if no client came within SECONDS (default: wait)."
)
@options.timeouts
@options.output
def command(
    host,
    listen,
    port,
    bind,
    connections,
    port_space,
    timeouts,
    app,
    show_events,
):
    """Connect (or listen) with no data transfer and show every CM event and step time.

    The client creates ids, resolves address and route, creates QPs, connects and disconnects;
    the server binds, listens and accepts. Step names follow cmtime.
    """
    if host and listen:
        raise click.UsageError("HOST and --listen are the two sides: give one (--listen binds to -b)")
    if not host and not listen:
        raise click.UsageError("give HOST to connect, or --listen to wait for connections")
    port, port_space = options.resolve_mode(CONNECT, port=port, port_space=port_space)
    params = params_of(
        "wait_s host listen port bind connections port_space", port=port, port_space=port_space
    )
    with app.errors("events", params):
        from rdmacli.cli._run import make_test, run_test
        from rdmacli.engine.session import CLIENT, SERVER
        from rdmacli.protocols.table import EVENTS

        test = make_test(
            "events",
            EVENTS,
            SERVER if listen else CLIENT,
            summary=params,
            timeouts=timeouts,
        )
        app.steps = True  # the step timings are what this command is for (cmtime)
        run_test(app, test, show_events=True)
