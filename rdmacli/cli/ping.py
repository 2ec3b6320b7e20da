"""`rdmacli ping HOST`: the rping client (rping -c -a HOST), with round-trip statistics."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import PING


def _size(ctx, param, value):
    problem = PING.check_size(value)
    if problem:
        raise click.BadParameter(problem)
    return value


@click.command("ping", context_settings=HELP)
@options.server_of(PING, "Source address (rping -I).")
@options.count_option("Number of pings (default: until Ctrl-C, like ping(8)).")
@options.size_option(
    "Buffer size (rping's bounds).", PING.min_size, PING.max_size, PING.default_size, callback=_size
)
@click.option("-V", "--validate", is_flag=True, help="Check that the data came back intact.")
@click.option("-v", "--verbose", is_flag=True, help="Print a line per ping with its data.")
@options.seconds_option(
    "-i",
    "--interval",
    low=0,
    high=3600,
    default=0.0,
    help="Pause between pings.",
)
@options.busy_poll
@options.client_run
def command(
    host,
    port,
    bind,
    count,
    size,
    validate,
    verbose,
    interval,
    busy_poll,
    timeouts,
    app,
    show_events,
):
    """Ping HOST with RDMA READ and WRITE, wire-compatible with rping.

    Each ping advertises a source buffer that the server reads and a sink buffer it writes back
    into; the round trip covers both. Works against `rping -s` and `rdmacli listen --ping`.
    """
    timeouts.idle_s += interval  # the pause is not idleness
    params = params_of("wait_s host port bind count size validate interval")
    with app.errors("ping", params):
        from rdmacli.cli._run import make_test, run_test
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import CLIENT
        from rdmacli.units import duration

        # a terminal gets a line per ping, or a progress bar for long counted runs
        bar = None
        if app.live and count and count >= 100 and not verbose:
            from rdmacli.render.progress import CountProgress

            bar = CountProgress(app, count, f"ping {host}")
        show_pings = verbose or (app.tty and not app.machine and not app.quiet and bar is None)

        from rdmacli.events import Ping

        def on_record(rec) -> None:
            if not isinstance(rec, Ping):
                return
            if not verbose:
                rec.data = None  # the ping data is rping -v's, shown (and written) only when asked
            if bar is not None:
                bar.advance()
            if show_pings and not app.machine:
                line = f"{size} bytes from {host}: ping={rec.ping} rtt={duration(rec.rtt_us)}"
                if rec.valid is not None:
                    line += " valid" if rec.valid else " MISMATCH"
                if verbose:
                    line += f"  ping data: {rec.data}"
                app.err.print(line, markup=False, highlight=False)

        wire = Params(count=count, size=size, validate=validate, interval=interval)
        test = make_test(
            "ping",
            PING,
            CLIENT,
            wire,
            summary=params,
            timeouts=timeouts,
            busy_poll=busy_poll,
        )
        run_test(app, test, show_events=show_events, progress=bar, on_record=on_record)
