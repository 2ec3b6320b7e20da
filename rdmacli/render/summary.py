"""The end-of-run summary for people: formats the document rdmacli.outcome built (no decisions)."""

from __future__ import annotations


def connection_details(c: dict) -> list[str]:
    """ping(8)-style statistics for a ping client; datagram counts for UD and multicast."""
    if "pings_completed" in c:
        lines = [f"--- {c['remote']} rdma ping statistics ---"]
        text = f"{c['pings_sent']} pings sent, {c['pings_completed']} completed"
        if "pings_validated" in c:
            text += f", {c['pings_validated']} validated"
        text += f", {c['pings_failed']} failed"
        if "time_ms" in c:
            text += f", time {c['time_ms']:.0f} ms"
        lines.append(text)
        if "rtt_us" in c:
            r = c["rtt_us"]
            lines.append(
                f"rtt min/avg/max/mdev = {r['min']:.1f}/{r['avg']:.1f}/{r['max']:.1f}/"
                f"{r['mdev']:.1f} µs, p50 {r['p50']:.1f} µs, p99 {r['p99']:.1f} µs"
            )
        if "throughput_mbps" in c:
            lines.append(
                f"throughput {c['throughput_mbps']:.3f} Mbit/s "
                f"({c['size_bytes']} bytes read and written per ping)"
            )
        return lines
    if "datagrams_expected" in c:
        got = c.get("datagrams_received", c.get("datagrams_sent"))
        verb = "received" if "datagrams_received" in c else "sent"
        text = f"{c['remote']}: {got}/{c['datagrams_expected']} datagrams {verb}"
        if c.get("datagrams_lost"):
            text += f", {c['datagrams_lost']} lost"
        if c.get("mgid"):
            text += f" (mgid {c['mgid']}, mlid {c['mlid']:#x}, sl {c['sl']})"
        return [text]
    return []


def print_summary(app, doc: dict) -> None:
    from rich.table import Table

    t = doc["totals"]
    if "connections" not in t:  # nothing was set up (an error before any connection)
        app.out.print(f"{doc['command']}: {doc['result']}", markup=False, highlight=False)
        return
    line = f"{doc['command']}: {doc['result']} - {t['connections_passed']}/{t['connections']} connections"
    if "messages_received" in t:
        line += (
            f", {t['messages_received']} messages received, {t['messages_sent']} sent, "
            f"{t['bytes_received'] + t['bytes_sent']} bytes"
        )
    for state in ("rejected", "interrupted"):
        if t.get(f"connections_{state}"):
            line += f", {t[f'connections_{state}']} {state}"
    app.out.print(line, markup=False, highlight=False)
    for text in doc["warnings"]:
        app.err.print(f"warning: {text}", markup=False, highlight=False)
    for c in doc["connections"]:
        for text in connection_details(c):
            app.out.print(text, markup=False, highlight=False)
    if doc["steps_us"] and not app.quiet:
        table = Table(title="step timings (µs)", title_justify="left")
        for col in ("step", "count", "total", "avg", "min", "max"):
            table.add_column(col, justify="left" if col == "step" else "right")
        for s in doc["steps_us"]:
            table.add_row(
                s["step"],
                str(s["count"]),
                f"{s['total_us']:.0f}",
                f"{s['avg_us']:.0f}",
                f"{s['min_us']:.0f}",
                f"{s['max_us']:.0f}",
            )
        app.out.print(table)
