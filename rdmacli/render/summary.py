"""The end-of-run summary for people: formats the document rdmacli.outcome built (no decisions)."""

from __future__ import annotations

from rdmacli.render.units import counter_words, duration, durations, plural


def connection_details(c: dict) -> list[str]:
    """ping(8)-style statistics for a ping client; datagram counts for UD and multicast."""
    detail = DETAILS.get((c.get("protocol"), c.get("role")))
    return detail(c) if detail else []


def ping_statistics(c: dict) -> list[str]:
    """ping(8)-style statistics of a ping client."""
    lines = [f"--- {c['remote']} rdma ping statistics ---"]
    text = f"{c['pings_sent']} pings sent, {c['pings_completed']} completed"
    if "pings_validated" in c:
        text += f", {c['pings_validated']} validated"
    text += f", {c['pings_failed']} failed"
    if "time_ms" in c:
        text += f", time {duration(c['time_ms'] * 1e3)}"
    lines.append(text)
    if c.get("stopped_by"):
        lines.append(stopped_words(c["pings_completed"], "ping", c["stopped_by"]))
    if "rtt_us" in c:
        r = c["rtt_us"]
        keys = ("min", "avg", "max", "mdev", "p50", "p99")
        v, unit = durations([r[k] for k in keys], by=r["avg"])  # one unit, as ping(8)
        lines.append(f"rtt min/avg/max/mdev = {'/'.join(v[:4])} {unit}, p50 {v[4]} {unit}, p99 {v[5]} {unit}")
    if "throughput_mbps" in c:
        lines.append(
            f"throughput {c['throughput_mbps']:.3f} Mbit/s "
            f"({c['size_bytes']} bytes read and written per ping)"
        )
    return lines


def stopped_words(n: int, what: str, why: str) -> str:
    """ping(8)'s normal end of an open-ended run, said."""
    by = "the deadline (--timeout)" if why == "deadline" else why
    return f"stopped after {plural(n, what)} by {by}"


def datagram_counts(c: dict) -> list[str]:
    """received (or sent)/expected datagrams, and the loss, of UD and multicast."""
    got = c.get("datagrams_received", c.get("datagrams_sent"))
    verb = "received" if "datagrams_received" in c else "sent"
    text = f"{c['remote']}: {got}/{c['datagrams_expected']} datagrams {verb}"
    if c.get("datagrams_lost"):
        text += f", {c['datagrams_lost']} lost"
    if c.get("mgid"):
        text += f" (mgid {c['mgid']}, mlid {c['mlid']:#x}, sl {c['sl']})"
    return [text]


def bandwidth(c: dict) -> list[str]:
    """One QP of `rdmacli bw`: its rate and message rate."""
    lines = [
        f"{c['remote']}: {c['op']} {c['size_bytes']} B x {c['messages_sent']}: {c['gbps']:.3f} Gb/s, "
        f"{c['msg_per_s']:,.0f} msg/s in {duration(c['elapsed_us'])} (depth {c['depth']})"
    ]
    r = c.get("reverse")
    if r:
        lines.append(
            f"{c['remote']}: back from the server, {r['messages']} x {c['size_bytes']} B: "
            f"{r['gbps']:.3f} Gb/s, {r['msg_per_s']:,.0f} msg/s in {duration(r['seconds'] * 1e6)}"
        )
    return lines


def latency(c: dict) -> list[str]:
    """`rdmacli lat`: perftest's columns (one way), then the round trips."""
    if "latency_us" not in c:
        return [f"{c['remote']}: {c['iterations']} iterations"]
    lat, host, net = c["latency_us"], c["rtt_us"], c["network_rtt_us"]
    keys = ("t_min", "t_typical", "t_avg", "p99", "p99_9", "t_max")
    v, unit = durations([lat[k] for k in keys], by=lat["t_typical"])
    stopped = [stopped_words(c["iterations"], "iteration", c["stopped_by"])] if c.get("stopped_by") else []
    return stopped + [
        f"--- {c['remote']} rdma {c['op']} latency, {c['size_bytes']} bytes, "
        f"{c['iterations']} iterations ---",
        "one way: t_min {} t_typical {} t_avg {} p99 {} p99.9 {} t_max {} {}".format(*v, unit),
        f"round trip p50: host {duration(host['t_typical'])}, network {duration(net['t_typical'])} "
        f"(the server's own hold time taken out); p99: host {duration(host['p99'])}, "
        f"network {duration(net['p99'])}",
    ]


# what a connection's summary shows beyond the totals, by (protocol, role)
DETAILS = {
    ("ping", "client"): ping_statistics,
    ("bw", "client"): bandwidth,
    ("lat", "client"): latency,
    ("ud", "client"): datagram_counts,
    ("ud", "server"): datagram_counts,
    ("mcast", "client"): datagram_counts,
    ("mcast", "server"): datagram_counts,
}


def print_summary(app, doc: dict) -> None:
    """As short as the C tool's or ping(8)'s; the step table only when asked (--steps, --events)."""
    t = doc["totals"]
    if "connections" not in t:  # nothing was set up (an error before any connection)
        app.out.print(f"{doc['command']}: {doc['result']}", markup=False, highlight=False)
        print_warnings(app, doc)
        return
    if app.steps and doc["steps_us"]:
        app.out.print(steps_table(doc["steps_us"]))
    details = [text for c in doc["connections"] for text in connection_details(c)]
    # ping(8): the statistics are the summary; other commands lead with a line of totals
    lines = [] if doc["command"] == "ping" and details else [totals_line(doc)]
    bw = doc["data"].get("bw")
    if bw:
        text = f"bw: {bw['gbps']:.3f} Gb/s, {bw['msg_per_s']:,.0f} msg/s over {len(doc['connections'])} QP(s)"
        if "total_gbps" in bw:
            text += f"; back {bw['reverse_gbps']:.3f} Gb/s, both ways {bw['total_gbps']:.3f} Gb/s"
        if "line_rate_fraction" in bw:
            text += f", {bw['line_rate_fraction']:.1%} of the port's {bw['line_rate_gbps']:g} Gb/s"
        details.append(text)
    for text in lines + details + counter_lines(doc.get("counters") or []):
        app.out.print(text, markup=False, highlight=False)
    print_warnings(app, doc)


def print_warnings(app, doc: dict) -> None:
    from rdmacli.render.text import printable  # warnings quote what agents and peers said

    for text in doc["warnings"]:
        app.err.print(f"warning: {printable(text)}", markup=False, highlight=False)


def counter_lines(ports: list[dict]) -> list[str]:
    """A line per port whose error or retransmit counters moved during the test (congestion
    notifications and plain traffic are in the JSON only)."""
    out = []
    for p in ports:
        kinds = {k: v for k, v in (p.get("kinds") or {}).items() if k != "congestion"}
        if kinds:
            moved = ", ".join(counter_words(c) for c in kinds.values())
            out.append(f"counters: {p['device']} port {p['port']} (the port's, shared): {moved}")
    return out


def totals_line(doc: dict) -> str:
    t = doc["totals"]
    line = f"{doc['command']}: {doc['result']} - {t['connections_passed']}/{t['connections']} connections"
    if "messages_received" in t or "messages_sent" in t:  # a one-way test has only one side's
        total_bytes = t.get("bytes_received", 0) + t.get("bytes_sent", 0)
        line += (
            f", {t.get('messages_received', 0)} messages received, {t.get('messages_sent', 0)} sent, "
            f"{total_bytes} bytes"
        )
    for state in ("rejected", "interrupted"):
        if t.get(f"connections_{state}"):
            line += f", {t[f'connections_{state}']} {state}"
    return line


def steps_table(steps: list[dict]):
    """cmtime's table: per step, the wall time across connections and the per-connection spread."""
    from rich.table import Table

    table = Table(title="step timings", title_justify="left")
    for col in ("step", "count", "total", "avg", "min", "max"):
        table.add_column(col, justify="left" if col == "step" else "right")
    for s in steps:
        table.add_row(
            s["step"],
            str(s["count"]),
            *(duration(s[f"{k}_us"]) for k in ("total", "avg", "min", "max")),
        )
    return table
