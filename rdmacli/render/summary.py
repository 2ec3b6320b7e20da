"""The end-of-run summary for people: formats the document rdmacli.outcome built (no decisions)."""

from __future__ import annotations

from typing import Any, Callable

from rdmacli.counters import Deltas
from rdmacli.figures import BwFigures, BwTotals, DatagramFigures, LatFigures, PingFigures, StepRow
from rdmacli.outcome import TRAFFIC, ConnOutcome, Outcome, Tally
from rdmacli.units import counter_words, duration, durations, plural


def connection_details(c: ConnOutcome) -> list[str]:
    """ping(8)-style statistics of a ping client, rates of bw and lat, datagram counts of UD and
    multicast: chosen by the type of the connection's figures."""
    detail = DETAILS.get(type(c.stats))
    return detail(c.remote, c.stats) if detail else []


def ping_statistics(remote: str, f: PingFigures) -> list[str]:
    """ping(8)-style statistics of a ping client."""
    lines = [f"--- {remote} rdma ping statistics ---"]
    text = f"{f.pings_sent} pings sent, {f.pings_completed} completed"
    if f.pings_validated is not None:
        text += f", {f.pings_validated} validated"
    text += f", {f.pings_failed} failed"
    if f.time_ms is not None:
        text += f", time {duration(f.time_ms * 1e3)}"
    lines.append(text)
    if f.stopped_by:
        lines.append(stopped_words(f.pings_completed, "ping", f.stopped_by))
    r = f.rtt_us
    if r is not None:
        v, unit = durations([r.min, r.avg, r.max, r.mdev, r.p50, r.p99], by=r.avg)  # one unit, as ping(8)
        lines.append(f"rtt min/avg/max/mdev = {'/'.join(v[:4])} {unit}, p50 {v[4]} {unit}, p99 {v[5]} {unit}")
    if f.throughput_mbps is not None:
        lines.append(
            f"throughput {f.throughput_mbps:.3f} Mbit/s ({f.size_bytes} bytes read and written per ping)"
        )
    return lines


def stopped_words(n: int, what: str, why: str) -> str:
    """ping(8)'s normal end of an open-ended run, said."""
    by = "the deadline (--timeout)" if why == "deadline" else why
    return f"stopped after {plural(n, what)} by {by}"


def datagram_counts(remote: str, f: DatagramFigures) -> list[str]:
    """received (or sent)/expected datagrams, and the loss, of UD and multicast."""
    got, verb = (f.datagrams_received, "received") if f.received else (f.datagrams_sent, "sent")
    text = f"{remote}: {got}/{f.datagrams_expected} datagrams {verb}"
    if f.datagrams_lost:
        text += f", {f.datagrams_lost} lost"
    if f.mgid:
        text += f" (mgid {f.mgid}, mlid {f.mlid:#x}, sl {f.sl})"
    return [text]


def bandwidth(remote: str, f: BwFigures) -> list[str]:
    """One QP of `rdmacli bw`: its rate and message rate."""
    lines = [
        f"{remote}: {f.op} {f.size_bytes} B x {f.messages_sent}: {f.gbps:.3f} Gb/s, "
        f"{f.msg_per_s:,.0f} msg/s in {duration(f.elapsed_us)} (depth {f.depth})"
    ]
    r = f.reverse
    if r is not None:
        lines.append(
            f"{remote}: back from the server, {r.messages} x {f.size_bytes} B: "
            f"{r.gbps:.3f} Gb/s, {r.msg_per_s:,.0f} msg/s in {duration(r.seconds * 1e6)}"
        )
    return lines


def latency(remote: str, f: LatFigures) -> list[str]:
    """`rdmacli lat`: perftest's columns (one way), then the round trips."""
    lat, host, net = f.latency_us, f.rtt_us, f.network_rtt_us
    if lat is None or host is None or net is None:
        return [f"{remote}: {f.iterations} iterations"]
    v, unit = durations(
        [lat.t_min, lat.t_typical, lat.t_avg, lat.p99, lat.p99_9, lat.t_max], by=lat.t_typical
    )
    stopped = [stopped_words(f.iterations, "iteration", f.stopped_by)] if f.stopped_by else []
    return [
        *stopped,
        f"--- {remote} rdma {f.op} latency, {f.size_bytes} bytes, {f.iterations} iterations "
        f"({f.data_path} data path) ---",
        "one way: t_min {} t_typical {} t_avg {} p99 {} p99.9 {} t_max {} {}".format(*v, unit),
        f"round trip p50: host {duration(host.t_typical)}, network {duration(net.t_typical)} "
        f"(the server's own hold time taken out); p99: host {duration(host.p99)}, "
        f"network {duration(net.p99)}",
        *nic_clock(f),
    ]


def nic_clock(f: LatFigures) -> list[str]:
    """The NIC's own figure, where its completion timestamps measured (the JSON says why not)."""
    nic = f.nic_latency_us
    if nic is None:
        return []
    return [
        f"one way by the NIC's completion timestamps: t_min {duration(nic.t_min)} t_typical "
        f"{duration(nic.t_typical)} p99 {duration(nic.p99)} (half the period between answers)"
    ]


# what a connection's summary shows beyond the totals, by the type of its figures (a server's
# figures, PingServed or LatServed, show in the totals and the JSON only)
DETAILS: dict[type, Callable[[str, Any], list[str]]] = {
    PingFigures: ping_statistics,
    BwFigures: bandwidth,
    LatFigures: latency,
    DatagramFigures: datagram_counts,
}


def print_summary(app, outcome: Outcome) -> None:
    """As short as the C tool's or ping(8)'s; the step table only when asked (--steps, --events)."""
    tally = outcome.tally()
    if tally is None:  # nothing was set up (an error before any connection)
        app.out.print(f"{outcome.command}: {outcome.result}", markup=False, highlight=False)
        print_warnings(app, outcome.warnings)
        return
    if app.steps and outcome.steps_us:
        app.out.print(steps_table(outcome.steps_us))
    if outcome.sweep:  # -a: one table by size instead of a block per connection
        details = sweep_table(outcome.sweep)
    else:
        details = [text for c in outcome.connections for text in connection_details(c)]
    # ping(8): the statistics are the summary; other commands lead with a line of totals
    lines = [] if outcome.command == "ping" and details else [totals_line(outcome, tally)]
    if outcome.bw is not None:
        details.append(bw_line(outcome.bw, len(outcome.connections)))
    for text in lines + details + counter_lines(outcome.counters):
        app.out.print(text, markup=False, highlight=False)
    print_warnings(app, outcome.warnings)


def bw_line(bw: BwTotals, qps: int) -> str:
    text = f"bw: {bw.gbps:.3f} Gb/s, {bw.msg_per_s:,.0f} msg/s over {qps} QP(s)"
    if bw.total_gbps is not None:
        text += f"; back {bw.reverse_gbps:.3f} Gb/s, both ways {bw.total_gbps:.3f} Gb/s"
    if bw.line_rate_gbps is not None:
        text += f", {bw.line_rate_fraction:.1%} of the port's {bw.line_rate_gbps:g} Gb/s"
    return text


LAT_COLUMNS = ("t_min", "t_typical", "t_avg", "p99", "p99_9", "t_max")


def sweep_table(rows: list[BwFigures | LatFigures]) -> list[str]:
    """perftest's -a table: a line per size (bw: messages and rates; lat: perftest's columns,
    one way, in µs); the data path said once, or per line where the sizes differ in it."""
    paths = {r.data_path for r in rows}
    said = f" ({paths.pop()} data path)" if len(paths) == 1 else ""
    if isinstance(rows[0], LatFigures):
        head = " ".join(f"{c.replace('_9', '.9'):>10}" for c in LAT_COLUMNS)
        lines = [f"{rows[0].op} latency by size, one way, µs{said}",
                 f"{'#bytes':>9} {'#iterations':>11} {head}"]  # fmt: skip
        for r in rows:
            lat = r.latency_us if isinstance(r, LatFigures) else None
            figures = " ".join(f"{getattr(lat, c):>10.2f}" if lat else f"{'-':>10}" for c in LAT_COLUMNS)
            n = r.iterations if isinstance(r, LatFigures) else 0
            lines.append(f"{r.size_bytes:>9} {n:>11} {figures}" + path_of(r, said))
        return lines
    lines = [f"{rows[0].op} bandwidth by size{said}",
             f"{'#bytes':>9} {'#messages':>11} {'Gb/s':>10} {'msg/s':>14}"]  # fmt: skip
    for r in rows:
        sent = (r.messages_sent or 0) if isinstance(r, BwFigures) else 0
        gbps, rate = (r.gbps, r.msg_per_s) if isinstance(r, BwFigures) else (0, 0)
        lines.append(f"{r.size_bytes:>9} {sent:>11} {gbps:>10.3f} {rate:>14,.0f}" + path_of(r, said))
    return lines


def path_of(row: BwFigures | LatFigures, said: str) -> str:
    return "" if said else f"  ({row.data_path})"


def print_warnings(app, warnings: list[str]) -> None:
    from rdmacli.render.text import printable  # warnings quote what agents and peers said

    for text in warnings:
        if text not in getattr(app, "warned", ()):  # not twice: said as it showed (a mesh's margin)
            app.err.print(f"warning: {printable(text)}", markup=False, highlight=False)


def counter_lines(ports: list[Deltas]) -> list[str]:
    """A line per port whose error or retransmit counters moved during the test (congestion
    notifications and plain traffic are in the JSON only)."""
    out = []
    for p in ports:
        kinds = {k: v for k, v in p.kinds().items() if k != "congestion"}
        if kinds:
            moved = ", ".join(counter_words(c) for c in kinds.values())
            out.append(f"counters: {p.device} port {p.port} (the port's, shared): {moved}")
    return out


def totals_line(outcome: Outcome, t: Tally) -> str:
    line = f"{outcome.command}: {outcome.result} - {t.passed}/{t.connections} connections"
    received, sent, n_in, n_out = (t.traffic.get(k) for k in TRAFFIC)
    if received is not None or sent is not None:  # a one-way test has only one side's
        line += f", {received or 0} messages received, {sent or 0} sent, {(n_in or 0) + (n_out or 0)} bytes"
    for n, state in ((t.rejected, "rejected"), (t.interrupted, "interrupted")):
        if n:
            line += f", {n} {state}"
    if t.unlisted:  # a persistent server's: counted, not each shown
        line += f" (the last {len(outcome.connections)} shown)"
    return line


def steps_table(steps: list[StepRow]):
    """cmtime's table: per step, the wall time across connections and the per-connection spread."""
    from rich.table import Table

    table = Table(title="step timings", title_justify="left")
    for col in ("step", "count", "total", "avg", "min", "max"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for s in steps:
        table.add_row(
            s.step, str(s.count), *(duration(us) for us in (s.total_us, s.avg_us, s.min_us, s.max_us))
        )
    return table
