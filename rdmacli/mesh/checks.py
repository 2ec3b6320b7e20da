"""The checks an agent's records pass on the way in (records.py's constructors call them): types,
ranges and sizes, each figure bounded by what hardware can measure, and what is used copied out
(a record's other keys never reach the report). A record that fails is a protocol violation of
the node that sent it."""

from __future__ import annotations

import math
import re

from rdmacli.figures import RTT_FLOOR_US

RTT_MIN = "rtt_min_us"
MAX_LINE = 64 * 1024  # an agent's records are a few hundred bytes
# what a launcher passes on for a line past MAX_LINE (its head, then this): the rest was dropped
# as it was read, never held whole (launch.LineSplitter); the intake takes it as a violation
OVERLONG = "\0(a line past the limit, dropped as it was read)"
MAX_TEXT = 4096  # an error message or hint
MAX_KEY = 64
MAX_ENTRIES = 64  # steps_us, stats
# every figure an agent may give, with the most it can be: above it, no hardware measured it
# (and arithmetic on it could overflow: a verdict must never end in an exception)
FIGURES = {
    "rtt_p50_us": 1e9,  # a round trip of 1000 s is no round trip
    "rtt_p99_us": 1e9,
    "rtt_avg_us": 1e9,
    "rtt_min_us": 1e9,
    "host_rtt_p50_us": 1e9,
    "setup_us": 1e10,
    "took_s": 86400.0,  # of a slot of at most an hour
    "gbps_ab": 1e4,  # 10 Tb/s: beyond any port made (the port's own rate is checked by the verdict)
    "gbps_ba": 1e4,
    "gbps_sent": 1e4,
}
RATES = ("gbps_ab", "gbps_ba", "gbps_sent")  # what a port's line rate bounds
# `--test bw`'s counts: each end's messages sent (its completions: the partner's NIC acknowledged
# them) and received (its receive completions), checked against the partner's on the way to the
# verdict (report.disagreement): each direction counted at both of its ends
COUNTS = ("messages_sent", "messages_received")
# `--test probe`'s counts (rdmacli/probe): this end's probes to its partner, and those answered
# by the phase's end (the rest were lost); an end cannot have more answers than probes
PROBES = ("probes_sent", "probes_answered")
# figures.RTT_FLOOR_US: a round trip below it was not measured, and would make every honest
# pair look slow beside it
RATE_SLACK = 1.1  # a rate above the slower port's line rate by more than this is no measure
MAX_STEP_US = 1e10
MAX_INT = 2**63 - 1  # counters and counts: 64-bit, as the hardware's
MAX_PORTS = 8  # ports whose counters a pair reports (one, on every driver we know)
MAX_COUNTERS = 256  # counters of one port (mlx5: about a hundred)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _figure(v, high: float = MAX_STEP_US) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= high


def _scalar(v) -> bool:
    if isinstance(v, str):
        return len(v) <= MAX_TEXT
    if isinstance(v, float):
        return math.isfinite(v) and abs(v) <= 1e300
    return v is None or isinstance(v, bool) or (_int(v) and abs(v) <= MAX_INT)


def _table(d, value_ok) -> bool:
    return (
        isinstance(d, dict)
        and len(d) <= MAX_ENTRIES
        and all(isinstance(k, str) and len(k) <= MAX_KEY and value_ok(v) for k, v in d.items())
    )


def _list(v, value_ok) -> bool:
    return isinstance(v, list) and len(v) <= MAX_ENTRIES and all(map(value_ok, v))


def _error(e) -> str | None:
    if e is None:
        return None
    if not isinstance(e, dict) or len(e) > MAX_ENTRIES:
        return "its error is not an object"
    if not isinstance(e.get("message"), str) or len(e["message"]) > MAX_TEXT:
        return "its error has no message of text"
    for k, v in e.items():
        if not (isinstance(k, str) and len(k) <= MAX_KEY):
            return "its error has a key that is not a short text"
        if not (_scalar(v) or _table(v, _scalar) or (k == "holders" and _list(v, _scalar))):
            return f"its error's {k[:20]!r} is not a short value"
    return None


# a device's or a counter's name as sysfs has them (mlx5_0, rxe0; port_rcv_errors,
# device.link_downed): nothing a terminal or rich would take for a sequence or a style
NAME = re.compile(r"[A-Za-z0-9_.:+-]{1,64}")


def _name(v) -> bool:
    return isinstance(v, str) and NAME.fullmatch(v) is not None


def _port_counters(p) -> bool:
    """One port's counter deltas: {"device": name, "port": n, "moved": {name: n}, "reset": [name]}."""
    return (
        isinstance(p, dict)
        and _name(p.get("device"))
        and _int(p.get("port"))
        and 0 <= p["port"] < 256
        and isinstance(p.get("moved"), dict)
        and len(p["moved"]) <= MAX_COUNTERS
        and all(_name(k) and _int(v) and 0 <= v <= MAX_INT for k, v in p["moved"].items())
        and isinstance(p.get("reset", []), list)
        and len(p.get("reset", [])) <= MAX_COUNTERS
        and all(_name(k) for k in p.get("reset", []))
    )


def _rtts(rec: dict) -> str | None:
    """Round trips a wire can have, consistent among themselves: none under RTT_FLOOR_US, a
    median under its p99, and the network's round trip (the responder's hold taken out) under
    the host's (the hold it took out cannot be more than the whole)."""
    rtts = {k: rec.get(k) for k in ("rtt_p50_us", "rtt_p99_us", "rtt_avg_us", "host_rtt_p50_us", RTT_MIN)}
    for key, v in rtts.items():
        if v is not None and v < RTT_FLOOR_US:
            return f"{key} is {v:g} µs, under any wire's round trip ({RTT_FLOOR_US:g} µs)"
    p50, p99, host, low = rtts["rtt_p50_us"], rtts["rtt_p99_us"], rtts["host_rtt_p50_us"], rtts[RTT_MIN]
    if p50 is not None and p99 is not None and p50 > p99:
        return f"rtt_p50_us ({p50:g}) is above its rtt_p99_us ({p99:g})"
    if p50 is not None and low is not None and low > p50:
        return f"rtt_min_us ({low:g}) is above its rtt_p50_us ({p50:g})"
    if p50 is not None and host is not None and p50 > host:
        return f"the network's round trip ({p50:g} µs) is longer than the host's ({host:g} µs)"
    return None


def check_pair(rec: dict) -> str | None:
    """Why a pair record cannot be used, or None. Run, rank and schedule are the collector's."""
    if not _int(rec.get("round")) or not _int(rec.get("peer")):
        return "round or peer is not a number"
    if not all(_int(rec.get(k, 0)) for k in ("rail", "peer_rail")):
        return "rail or peer_rail is not a number"
    if rec.get("result") not in ("pass", "fail"):
        return "its result is neither pass nor fail"
    why = _error(rec.get("error"))
    if why:
        return why
    for key, high in FIGURES.items():
        if rec.get(key) is not None and not _figure(rec[key], high):
            return f"{key} is not a figure from 0 to {high:g}"
    for key in (*COUNTS, *PROBES):
        v = rec.get(key)
        if v is not None and not (_int(v) and 0 <= v <= MAX_INT):
            return f"{key} is not a count from 0 to 2^63-1"
    if (rec.get("probes_answered") or 0) > (rec.get("probes_sent") or 0):
        return "probes_answered is above its probes_sent"
    why = _rtts(rec)
    if why:
        return why
    if rec.get("steps_us") is not None and not _table(rec["steps_us"], _figure):
        return "steps_us is not a table of figures"
    if rec.get("stats") is not None and not _table(rec["stats"], _scalar):
        return "stats is not a table of short values"
    counters = rec.get("counters")
    if counters is not None and not (
        isinstance(counters, list) and len(counters) <= MAX_PORTS and all(map(_port_counters, counters))
    ):
        return "counters is not a list of ports' counter deltas"
    return None


def pair_copy(rec: dict) -> dict:
    """The keys of a checked pair record that the report uses, and nothing else."""
    keep = (
        "type",
        "run",
        "rank",
        "peer",
        "rail",
        "peer_rail",
        "round",
        "slot",
        "result",
        "error",
        "steps_us",
        "stats",
        *FIGURES,
        *COUNTS,
        *PROBES,
    )
    out = {k: rec[k] for k in keep if k in rec}
    if rec.get("counters"):  # what the report derives (kinds) is derived again, not taken
        out["counters"] = [
            {
                "device": p["device"],
                "port": p["port"],
                "moved": dict(p["moved"]),
                "reset": list(p.get("reset", [])),
            }
            for p in rec["counters"]
        ]
    return out
