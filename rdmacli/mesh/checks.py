"""The checks an agent's records pass on the way in (records.py's constructors call them): types,
ranges and sizes, each figure bounded by what hardware can measure, and what is used copied out
(a record's other keys never reach the report). A record that fails is a protocol violation of
the node that sent it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from rdmacli.counters import Deltas
from rdmacli.mesh.shape import take, wire

MAX_LINE = 64 * 1024  # an agent's records are a few hundred bytes
# what a launcher passes on for a line past MAX_LINE (its head, then this): the rest was dropped
# as it was read, never held whole (launch.LineSplitter); the intake takes it as a violation
OVERLONG = "\0(a line past the limit, dropped as it was read)"
MAX_TEXT = 4096  # an error message or hint
MAX_KEY = 64
MAX_ENTRIES = 64  # steps_us, stats
# every figure an agent may give, with the most it can be: above it, no hardware measured it
# (and arithmetic on it could overflow: a verdict must never end in an exception)
RTT_MOST = 1e9  # a round trip of 1000 s is no round trip
SETUP_MOST = 1e10
TOOK_MOST = 86400.0  # of a slot of at most an hour
RATE_MOST = 1e4  # Gb/s, 10 Tb/s: beyond any port made (the port's own rate is checked by the verdict)
RATES = ("gbps_ab", "gbps_ba", "gbps_sent")  # what a port's line rate bounds
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
    if not (isinstance(message := e.get("message"), str) and len(message) <= MAX_TEXT):
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


@dataclass(frozen=True)
class PortMoved:
    """One port's counter deltas as a pair record says them (the fields `take` reads)."""

    device: str = wire(_name, "a device name")
    port: int = wire(lambda v: _int(v) and 0 <= v < 256, "a port number")
    moved: dict = wire(
        lambda v: (
            isinstance(v, dict)
            and len(v) <= MAX_COUNTERS
            and all(_name(k) and _int(n) and 0 <= n <= MAX_INT for k, n in v.items())
        ),
        "counter names and counts",
        keep=dict,
    )
    reset: list = wire(
        lambda v: isinstance(v, list) and len(v) <= MAX_COUNTERS and all(map(_name, v)),
        "counter names",
        keep=list,
        absent=[],
    )


class _NotPorts(ValueError):
    pass


def _refuse_port(name: str, words: str) -> Exception:
    return _NotPorts(name)


def port_counters(v) -> bool:
    """Up to MAX_PORTS ports' counter deltas ({"device", "port", "moved", "reset"}), or none."""
    if v is None:
        return True
    if not (isinstance(v, list) and len(v) <= MAX_PORTS and all(isinstance(p, dict) for p in v)):
        return False
    try:
        for p in v:
            take(PortMoved, p, _refuse_port)
    except _NotPorts:
        return False
    return True


def ports_copy(v) -> tuple[Deltas, ...]:
    """What the report uses of checked ports' deltas, typed (what it derives, kinds, is derived
    again)."""
    return tuple(Deltas(**take(PortMoved, p, _refuse_port)) for p in v or ())


def error_doc(e) -> bool:
    """An RdmacliError's document, or none."""
    return _error(e) is None


def figure(high: float) -> Any:
    """A figure field of a pair record: none, or from 0 to `high` (_figure, inline: a coordinator
    checks millions of these at fleet size)."""
    isfinite = math.isfinite

    def ok(v: Any) -> bool:
        return v is None or (type(v) in (int, float) and isfinite(v) and 0 <= v <= high)

    return wire(ok, f"a figure from 0 to {high:g}", default=None)


def count() -> Any:
    """A count field of a pair record: none, or a 64-bit count."""
    return wire(lambda v: v is None or (type(v) is int and 0 <= v <= MAX_INT), "a count from 0 to 2^63-1",
                default=None)  # fmt: skip


def table(value_ok: Callable[[Any], bool], words: str) -> Any:
    """A small table of a pair record (steps, stats): none, or short keys to good values."""
    return wire(lambda v: v is None or _table(v, value_ok), words, default=None)
