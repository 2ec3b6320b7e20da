"""`rdmacli mcast GROUP`: join a multicast group and receive, or --send to it (like mckey)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.hello import MAX_COUNT
from rdmacli.protocols.table import MCAST


@click.command("mcast", context_settings=HELP)
@click.argument("group", type=options.GROUP)
@click.option("-s", "--send", "send", is_flag=True, help="Send to the group (mckey -s).")
@options.bind_option("Local address to join from.")
@options.connections_option("Number of QPs (cm ids) joining (mckey -c).", high=256, name="qps")
@options.count_option(
    "Datagrams to send, or to receive per QP.", low=0, high=MAX_COUNT, default=MCAST.default_count
)
@options.size_option(
    "Datagram size in bytes (at most the active MTU).", MCAST.min_size, MCAST.max_size, MCAST.default_size
)
@click.option(
    "-P",
    "--port-space",
    "port_space",
    type=click.Choice(list(MCAST.port_spaces)),
    default=MCAST.default_port_space,
    show_default=True,
    help="RDMA CM port space.",
)
@click.option(
    "-o",
    "--send-only",
    "send_only",
    is_flag=True,
    help="Join as a send-only full member (no receive attach); needs --send.",
)
@click.option(
    "-l",
    "--no-loopback",
    "no_loopback",
    is_flag=True,
    help="Block multicast loopback to this host's own QPs (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB).",
)
@options.seconds_option(
    "--send-delay",
    low=0,
    high=60,
    default=0.0,
    help="Wait after joining before sending (mckey waits 3 s for the IB subnet manager).",
)
@options.server_run
def command(
    group,
    send,
    bind,
    qps,
    count,
    size,
    port_space,
    send_only,
    no_loopback,
    send_delay,
    timeouts,
    app,
    show_events,
):
    """Join GROUP (an IPv4 or IPv6 multicast address) and receive COUNT datagrams per QP, or
    with --send send COUNT datagrams to it. Wire-compatible with mckey.

    A receiver waits for its sender without a deadline (people start senders minutes later);
    --wait or --timeout bound that wait. Once datagrams flow, receivers report received/expected
    when COUNT arrived or at the --idle-timeout deadline. Every group joined is left on exit,
    also on Ctrl-C, SIGTERM and SIGHUP.
    """
    if send_only and not send:
        raise click.UsageError("--send-only joins without receiving: it needs --send")
    timeouts.idle_s += send_delay  # the pause is not idleness
    params = params_of("wait_s group send bind qps count size port_space send_only no_loopback")
    with app.errors("mcast", params):
        from rdmacli.cli._run import make_test, run_test
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import CLIENT, SERVER

        wire = Params(count=count, size=size, no_loopback=no_loopback, send_delay=send_delay)
        test = make_test(
            "mcast",
            MCAST,
            CLIENT if send else SERVER,
            wire,
            summary=params,
            host=group,
            connections=qps,
            send_only=send_only,
            timeouts=timeouts,
        )
        run_test(app, test, show_events=show_events)
