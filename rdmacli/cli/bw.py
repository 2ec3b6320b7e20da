"""`rdmacli bw HOST`: bandwidth against `rdmacli listen --bw` (perftest's ib_write_bw job)."""

from __future__ import annotations

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import params_of
from rdmacli.protocols.table import BW


@click.command("bw", context_settings=HELP)
@options.server_of(BW)
@click.option(
    "--op",
    type=click.Choice(["write", "read", "send"]),
    default="write",
    show_default=True,
    help="RDMA WRITE (ib_write_bw), RDMA READ (ib_read_bw) or SEND (ib_send_bw).",
)
@options.size_option(
    "Message size in bytes (one buffer per QP: memlock bounds it).", BW.min_size, 1 << 30, BW.default_size
)
@click.option(
    "--qps",
    type=click.IntRange(1, 1024),
    default=1,
    show_default=True,
    help="Connections (QPs), each with its own buffer, run at once.",
)
@click.option(
    "--depth",
    type=click.IntRange(1, 1 << 24),
    default=None,
    metavar="N",
    help="Work requests in flight per QP, at most the device's max_qp_wr [default: 128, fewer "
    "for messages above 128 KiB: at most 16 MiB in flight; with --perftest, 128].",
)
@options.count_option("Messages per QP (default: run for --duration).", high=1 << 40)
@options.seconds_option(
    "-D",
    "--duration",
    low=0,
    high=86400,
    min_open=True,
    default=None,
    help="Seconds to run  [default: 5, unless -C; not with -C].",
)
@click.option(
    "--bidir",
    is_flag=True,
    help="Both ways at once (perftest's -b): the server sends too, for as long as this side does.",
)
@options.all_sizes_option("-a", "--all-sizes", duration=True)
@options.perftest_client("ib_write_bw, ib_read_bw, ib_send_bw", duration=True)
@options.spin_by_default
@options.client_run
def command(
    host,
    port,
    bind,
    op,
    size,
    qps,
    depth,
    count,
    duration,
    bidir,
    all_sizes,
    perftest,
    busy_poll,
    timeouts,
    app,
    show_events,
):
    """Measure bandwidth to HOST, which runs `rdmacli listen --bw`.

    Keeps --depth work requests of SIZE bytes in flight on each of --qps connections, for -C
    messages or --duration seconds, and reports Gb/s and messages/s overall and per QP, and the
    fraction of the port's line rate (its `rate` in sysfs). A progress line each second on a
    terminal. With --bidir the server sends as well and reports its figures back: both
    directions and their sum.

    A one-way WRITE or READ stream of one QP is posted and reaped by rdmacli's native data path
    (C) where it is built; the summary says which loop posted it (data_path).
    """
    if count is not None and duration is not None:
        raise click.UsageError("-C and -D are two ways to end the run (perftest's -n and -D): give one")
    if all_sizes and (duration is not None or qps > 1 or bidir):
        raise click.UsageError("-a runs -C messages of each size on one QP one way: no -D, --qps or --bidir")
    if count is None and duration is None:
        if perftest or all_sizes:  # perftest's server counts as its -n says: its default, unless told
            from rdmacli.protocols.perftest import default_iters

            count = default_iters("bw", op)
        else:
            duration = 5.0
    if perftest and (qps > 1 or bidir):
        raise click.UsageError("--perftest runs one QP one way (perftest's -q 1, no -b)")
    params = params_of(
        "host port bind op size qps depth bidir count duration busy_poll wait_s perftest all_sizes",
        count=count,
        duration=duration,
    )
    with app.errors("bw", params):
        from rdmacli.cli._run import make_test, run_sweep, run_test, sweep_of
        from rdmacli.engine.protocol import Params
        from rdmacli.engine.session import CLIENT
        from rdmacli.events import Progress

        def on_record(rec) -> None:
            if isinstance(rec, Progress) and app.live:
                r = rec.rate
                app.err.print(
                    f"conn {rec.conn}: {r.seconds:.1f} s  {r.gbps:.3f} Gb/s  {r.msg_per_s:,.0f} msg/s",
                    markup=False,
                    highlight=False,
                )

        from rdmacli.protocols.perftest import SWEEP_SIZES

        sizes = [s for s in SWEEP_SIZES if BW.min_size <= s <= BW.max_size] if all_sizes else [size]

        from rdmacli.transports import IMMEDIATE

        def sized(size: int, group: int = 1):
            wire = Params(
                count=count, size=size, op=op, duration=duration, depth=depth, bidir=bidir, group=group
            )
            return make_test(
                "bw",
                BW,
                CLIENT,
                wire,
                summary=params,
                connections=qps,
                timeouts=timeouts,
                busy_poll=busy_poll,
                # both directions: each control message says its kind in immediate data
                needs=(IMMEDIATE,) if bidir and not perftest else (),
            )

        if all_sizes and not perftest:
            each = lambda s: sized(s, len(sizes))  # noqa: E731 (each announces them all)
            run_sweep(app, each, sizes, show_events=show_events, on_record=on_record)
            return
        test, factory, then = sized(size), None, aggregate
        if perftest:
            from dataclasses import replace

            from rdmacli.protocols.bw import DEPTH
            from rdmacli.protocols.perftest_session import Setting, flow_factory

            test.timeouts = replace(timeouts, wait_s=timeouts.wait_s or options.PERFTEST_WAIT_S)
            sweep = SWEEP_SIZES if all_sizes else ()
            factory = flow_factory(
                Setting("bw", op, size, count, duration, DEPTH if depth is None else depth, sweep), CLIENT
            )
            if all_sizes:
                then = sweep_of(factory.session)
        run_test(app, test, show_events=show_events, on_record=on_record, then=then, factory=factory)


def aggregate(outcome) -> None:
    """Overall figures of all QPs (they ran at once) and the port's line rate."""
    from rdmacli.diag.devices import port_rate_gbps
    from rdmacli.figures import BwFigures, BwTotals

    conns = [c for c in outcome.connections if isinstance(c.stats, BwFigures)]
    if not conns:
        return
    qps: list[BwFigures] = [c.stats for c in conns]
    nbytes = sum(f.bytes_sent or 0 for f in qps)
    secs = max(f.elapsed_us for f in qps) / 1e6 or 1e-9
    msgs = sum(f.messages_sent or 0 for f in qps)
    gbps = round(nbytes * 8 / secs / 1e9, 4)
    reverse = total = None
    back = [f.reverse for f in qps if f.reverse is not None]
    if back:  # --bidir: the server's direction, as each server reported it, and the sum
        rsecs = max(r.seconds for r in back) or 1e-9
        reverse = round(sum(r.bytes for r in back) * 8 / rsecs / 1e9, 4)
        total = round(gbps + reverse, 4)
    rate = port_rate_gbps(conns[0].device, 1) or None
    outcome.bw = BwTotals(
        gbps=gbps,
        msg_per_s=round(msgs / secs, 1),
        seconds=secs,
        reverse_gbps=reverse,
        total_gbps=total,
        line_rate_gbps=rate,
        line_rate_fraction=round(gbps / rate, 4) if rate else None,
    )
