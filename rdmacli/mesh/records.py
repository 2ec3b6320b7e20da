"""What an agent may say, checked before the coordinator uses a word of it.

An agent is trusted for its own node only, and only for records of the right shape: types,
ranges and sizes are checked here, and what is used is copied out (a record's other keys never
reach the report). A record that fails is a protocol violation of the node that sent it.
"""

from __future__ import annotations

import math

MAX_LINE = 64 * 1024  # an agent's records are a few hundred bytes
MAX_TEXT = 4096  # an error message or hint
MAX_KEY = 64
MAX_ENTRIES = 64  # steps_us, stats
FIGURES = (
    "rtt_p50_us",
    "rtt_p99_us",
    "rtt_avg_us",
    "host_rtt_p50_us",
    "setup_us",
    "took_s",
    "gbps_ab",
    "gbps_ba",
)
MAX_PORTS = 8  # ports whose counters a pair reports (one, on every driver we know)
MAX_COUNTERS = 256  # counters of one port (mlx5: about a hundred)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _figure(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _scalar(v) -> bool:
    if isinstance(v, str):
        return len(v) <= MAX_TEXT
    return v is None or isinstance(v, bool) or _int(v) or (isinstance(v, float) and math.isfinite(v))


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


def _port_counters(p) -> bool:
    """One port's counter deltas: {"device": name, "port": n, "moved": {name: n}, "reset": [name]}."""
    return (
        isinstance(p, dict)
        and isinstance(p.get("device"), str)
        and 0 < len(p["device"]) <= MAX_KEY
        and _int(p.get("port"))
        and 0 <= p["port"] < 256
        and isinstance(p.get("moved"), dict)
        and len(p["moved"]) <= MAX_COUNTERS
        and all(
            isinstance(k, str) and len(k) <= MAX_KEY and _int(v) and v >= 0 for k, v in p["moved"].items()
        )
        and isinstance(p.get("reset", []), list)
        and len(p.get("reset", [])) <= MAX_COUNTERS
        and all(isinstance(k, str) and len(k) <= MAX_KEY for k in p.get("reset", []))
    )


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
    for key in FIGURES:
        if rec.get(key) is not None and not _figure(rec[key]):
            return f"{key} is not a finite figure"
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
