"""`rdmacli listen`: the ucmatose server (ucmatose with no -s)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import BW, CONNECT, PING, UD, mode_of
from rdmacli.protocols.table import modes as table_modes
from rdmacli.units import bytes_words

# a server's bounds on its clients at once (issue 34: 64 clients once pinned 4 GiB, none refused);
# the memory they pin is the bound (--max-pinned), the count a high one (issue 70: 16 at once
# turned 34 of 50 concurrent rping clients away while 1 GiB had room for thousands of them)
PERSISTENT_MAX_OPEN = 512  # connections served at once by a --persistent server
MAX_PINNED = 1 << 30  # memory registered for all clients at once (16 of the largest bw request)


@click.command("listen", context_settings=HELP)
@options.bind_option("Address to listen on (default: all, 0.0.0.0; use :: for IPv6).")
@options.port_option(
    f"RDMA CM port to listen on  [default: {CONNECT.default_port}; {PING.default_port} with --ping, "
    f"{UD.default_port} with --ud, {BW.default_port} with --bw or --lat]."
)
@options.mode_flags
@click.option(
    "--perftest",
    type=click.Choice(["write_bw", "read_bw", "send_bw", "send_lat", "write_lat"]),
    default=None,
    help="Serve one perftest client of that test (ib_write_bw -R and so on) with perftest's own "
    "exchange: give -S and -C as perftest's client gives -s and -n (perftest exchanges neither) "
    "[default -S: 65536 for *_bw, 2 for *_lat; -C: perftest's, 5000 for write_bw, else 1000]; "
    "a perftest client's -D is not served.",
)
@click.option(
    "--all-sizes",
    "all_sizes",
    is_flag=True,
    help="With --perftest: serve a client run with -a (every power of two from 2 bytes to 8 MiB, "
    "-C messages each, on one QP; the buffer is the largest size's). rdmacli's own bw and lat "
    "clients' -a needs nothing here: their hello says it.",
)
@options.exchange
@options.port_space
@options.ack_timeout
@click.option(
    "--max-size",
    "max_size",
    type=options.Size(1, 1 << 30),
    default=None,
    help="Largest size a client may ask for; larger requests are rejected "
    f"[default: {bytes_words(CONNECT.max_size)} ({bytes_words(BW.max_size)} with --bw); "
    f"{bytes_words(PING.max_size)} with --ping, {bytes_words(UD.max_size)} with --ud].",
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
@click.option(
    "--max-clients",
    "max_open",
    type=click.IntRange(1, 4096),
    default=None,
    metavar="N",
    help=f"Most connections served at once; more are rejected with the reason [default: "
    f"{PERSISTENT_MAX_OPEN} with --persistent, else -c].",
)
@click.option(
    "--max-pinned",
    "max_pinned",
    type=options.Size(1 << 20, 1 << 40),
    default=bytes_words(MAX_PINNED),
    show_default=True,
    help="Most memory registered (pinned) for all clients at once; a request beyond it is "
    "rejected with the reason.",
)
@options.busy_poll
@options.server_run
def command(
    bind,
    port,
    perftest,
    all_sizes,
    connections,
    count,
    size,
    port_space,
    ack_timeout,
    max_size,
    fault_corrupt,
    persistent,
    max_open,
    max_pinned,
    busy_poll,
    timeouts,
    app,
    show_events,
    **modes,
):
    """Serve clients, wire-compatible with ucmatose's server (rping's with --ping, udaddy's
    with --ud).

    Each connection gets COUNT messages of SIZE bytes, then the server waits for the echo and
    disconnects. An rdmacli client's own COUNT and SIZE (sent in its connection request) take
    precedence. Exits after -c connections, unless --persistent.

    The server waits for its first client without a deadline (people start clients minutes
    later); --wait or --timeout bound that wait. Per connection, --connect-timeout and
    --idle-timeout apply once the client has arrived. SIGTERM, SIGHUP and Ctrl-C end the run
    with its summary (exit 128 + signal).
    """
    chosen = [name.removesuffix("_mode") for name, on in modes.items() if on]
    if len(chosen) > 1:
        flags = ", ".join(f"--{s.name}" for s in table_modes())
        raise click.UsageError(f"{flags} are different protocols: choose one")
    ctx = click.get_current_context()
    if all_sizes and not perftest:
        raise click.UsageError(
            "--all-sizes serves perftest's -a (with --perftest); rdmacli clients say it themselves"
        )
    if perftest:
        if set(chosen) - {"bw", "lat"} or persistent:
            raise click.UsageError("--perftest serves one perftest client: no --ud, --ping or --persistent")
        op, kind = perftest.split("_")  # write_bw: op write, test bw
        chosen = [kind]
        if not options.given(ctx, "size"):
            size = 65536 if kind == "bw" else 2
        if not options.given(ctx, "count"):
            from rdmacli.protocols.perftest import default_iters

            count = default_iters(kind, op)
    spec = mode_of(chosen[0] if chosen else None)
    port, port_space = options.resolve_mode(spec, port=port, port_space=port_space)
    if not perftest:
        size = options.mode_size(ctx, spec, size)
    elif not 1 <= size <= 1 << 30:
        from rdmacli.cli.values import out_of_range

        raise click.BadParameter(out_of_range(size, size, 1, 1 << 30, bytes_words) + ", for --perftest",
                                 param_hint="-S")  # fmt: skip
    max_size = max_size if options.given(ctx, "max_size") else spec.max_size
    max_clients = max_open if max_open is not None else (PERSISTENT_MAX_OPEN if persistent else None)
    params = params_of(
        "bind port connections count size port_space persistent max_clients max_pinned max_size mode wait_s "
        "perftest all_sizes",
        port=port, size=size, count=count, port_space=port_space, max_clients=max_clients, max_size=max_size,
        mode=spec.name,
    )  # fmt: skip
    with app.errors("listen", params):
        from rdmacli.cli._run import make_test, run_test
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import SERVER

        wire = Params(count=count, size=size, max_size=max_size, corrupt=fault_corrupt)
        test = make_test(
            "listen",
            spec,
            SERVER,
            wire,
            summary=params,
            connections=None if persistent else connections,
            timeouts=timeouts,
            ack_timeout=ack_timeout,
            busy_poll=busy_poll,
            max_open=max_clients,
            max_pinned=max_pinned,
        )
        factory = None
        if perftest:
            from rdmacli.protocols.perftest_session import Setting, flow_factory

            test.connections = 1
            from rdmacli.protocols.perftest import SWEEP_SIZES

            sweep = SWEEP_SIZES if all_sizes else ()
            factory = flow_factory(Setting(kind, op, size, count, sweep=sweep), SERVER)
        run_test(app, test, show_events=show_events, factory=factory)
