"""The end-of-run summary: one dict (the JSON document), and its rendering for people."""

from __future__ import annotations

import time

from rdmacli.errors import ExitCode

SCHEMA = "rdmacli/1"


def build_summary(command: str, flow, params: dict, *, error=None, interrupted: bool = False) -> dict:
    conns = []
    if flow is not None:
        for c in flow.all_conns:
            d = {
                "conn": c.index,
                "local": c.local,
                "remote": c.remote,
                "device": c.device,
                "result": "fail" if c.error else ("pass" if c.finished else "incomplete"),
            }
            d.update(c.protocol.summary() if c.protocol else {})
            if c.error:
                d["error"] = c.error.to_dict()
            if c.teardown_errors:
                d["teardown_errors"] = c.teardown_errors
            conns.append(d)
    failed = [c for c in conns if c["result"] in ("fail", "incomplete")]
    passed = [c for c in conns if c["result"] == "pass"]
    if error is None and flow is not None:
        error = next((c.error for c in flow.all_conns if c.error), None)
    if interrupted:
        code = ExitCode.INTERRUPTED
    elif error is not None:
        code = error.exit_code
    elif failed:
        code = ExitCode.FAILED
    else:
        code = ExitCode.OK
    totals = {
        "connections": len(conns) - sum(c["result"] == "rejected" for c in conns),
        "connections_passed": len(passed),
        "connections_failed": len(failed),
    }
    for key in ("messages_received", "messages_sent", "bytes_received", "bytes_sent"):
        if any(key in c for c in conns):
            totals[key] = sum(c.get(key, 0) for c in conns)
    if flow is not None and hasattr(flow, "rejected"):
        totals["connections_rejected"] = flow.rejected
    return {
        "schema": SCHEMA,
        "type": "summary",
        "command": command,
        "result": "interrupted" if interrupted else ("pass" if code == 0 else "fail"),
        "exit_code": int(code),
        "params": params,
        "totals": totals,
        "connections": conns,
        "steps_us": flow.timer.summary() if flow is not None else [],
        "elapsed_ms": round((time.monotonic() - flow.t0) * 1e3, 1) if flow is not None else 0,
        "error": error.to_dict() if error is not None else None,
        "warnings": [],
    }


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
    line = f"{doc['command']}: {doc['result']} - {t['connections_passed']}/{t['connections']} connections"
    if "messages_received" in t:
        line += (
            f", {t['messages_received']} messages received, {t['messages_sent']} sent, "
            f"{t['bytes_received'] + t['bytes_sent']} bytes"
        )
    if t.get("connections_rejected"):
        line += f", {t['connections_rejected']} rejected"
    app.out.print(line, markup=False, highlight=False)
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
