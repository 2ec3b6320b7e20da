"""`rdmacli lat HOST`: latency against `rdmacli listen --lat` (perftest's ib_send_lat job)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import LAT


@click.command("lat", context_settings=HELP)
@options.server_of(LAT)
@click.option(
    "--op",
    type=click.Choice(["send", "write"]),
    default="send",
    show_default=True,
    help="SEND/RECV ping-pong (ib_send_lat), or RDMA WRITE with immediate (ib_write_lat).",
)
@options.size_option(
    "Message size in bytes (16 or more with --op write).", LAT.min_size, LAT.max_size, LAT.default_size
)
@options.count_option("Iterations.", default=LAT.default_count)
@options.all_sizes_option("-a", "--all-sizes")
@options.perftest_client("ib_send_lat, ib_write_lat", duration=False)
@options.spin_by_default
@options.client_run
def command(host, port, bind, op, size, count, all_sizes, perftest, busy_poll, timeouts, app, show_events):
    """Measure latency to HOST, which runs `rdmacli listen --lat`.

    A ping-pong of SIZE-byte messages, -C iterations, busy-polled. Reported as perftest does
    (t_min, t_typical, t_avg, p99, p99.9, t_max: one way, half the round trip), plus the round
    trip and the network round trip: the host round trip minus the server's own hold time
    (its receive polled to its reply posted, measured on its clock and carried in the reply).

    After the first exchange the ping-pong runs in rdmacli's native data path (C, cycle-counter
    timestamps) where it is built; the summary says which loop measured (data_path), and
    RDMACLI_DATA_PATH=python asks for the Python one.
    """
    if op == "write" and size < 16 and not perftest:
        raise click.BadParameter(
            "--op write carries the buffer address in the first message: 16 or more", param_hint="-S"
        )
    params = params_of("host port bind op size count busy_poll wait_s perftest all_sizes")
    with app.errors("lat", params):
        from rdmacli.cli._run import make_test, run_sweep, run_test, sweep_of
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import CLIENT
        from rdmacli.protocols.perftest import SWEEP_SIZES
        from rdmacli.transports import IMMEDIATE

        def sized(size: int, group: int = 1):
            wire = Params(count=count, size=size, op=op, group=group)
            return make_test(
                "lat",
                LAT,
                CLIENT,
                wire,
                summary=params,
                timeouts=timeouts,
                busy_poll=busy_poll,
                # rdmacli's own write exchange signals each message with immediate data
                needs=(IMMEDIATE,) if op == "write" and not perftest else (),
            )

        if all_sizes and not perftest:  # the sizes rdmacli's lat server takes (write: its address first)
            low = 16 if op == "write" else LAT.min_size
            sizes = [s for s in SWEEP_SIZES if low <= s <= LAT.max_size]
            run_sweep(app, lambda s: sized(s, len(sizes)), sizes, show_events=show_events)
            return
        test, factory, then = sized(size), None, None
        if perftest:
            from dataclasses import replace

            from rdmacli.protocols.perftest_session import Setting, flow_factory

            test.timeouts = replace(timeouts, wait_s=timeouts.wait_s or options.PERFTEST_WAIT_S)
            sweep = SWEEP_SIZES if all_sizes else ()
            factory = flow_factory(Setting("lat", op, size, count, sweep=sweep), CLIENT)
            if all_sizes:
                then = sweep_of(factory.session)
        run_test(app, test, show_events=show_events, factory=factory, then=then)
