"""Durations and sizes as people read them: the unit follows the magnitude (µs, ms, s; KiB, MiB,
GiB). JSON keeps numbers with the unit in the key (rtt_us, elapsed_ms); only what a person reads
goes through here. Below every layer: the engine, diag and render all say figures with it."""

from __future__ import annotations

UNITS = (("s", 1e6), ("ms", 1e3), ("µs", 1.0))


def unit_for(us: float) -> tuple[str, float]:
    """The unit a value of `us` microseconds reads best in, and its size in microseconds."""
    for name, scale in UNITS:
        if abs(us) >= scale:
            return name, scale
    return UNITS[-1]


def duration(us: float) -> str:
    """2041205 -> '2.04 s', 16677 -> '16.7 ms', 84.25 -> '84.2 µs' (three significant digits)."""
    name, scale = unit_for(us)
    return f"{_sig3(us / scale)} {name}"


def durations(values_us: list[float], by: float | None = None) -> tuple[list[str], str]:
    """Several values in one unit (chosen by `by`, default the largest), as ping(8) prints its
    rtt line: (['3.98', '8.97', '46.3'], 'ms')."""
    name, scale = unit_for(by if by is not None else max(values_us, default=0.0))
    return [_sig3(v / scale) for v in values_us], name


def _sig3(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def counter_words(counters: dict) -> str:
    """Counter deltas for people: 'completer_retry_err +3, duplicate_request +3'."""
    return ", ".join(f"{name} +{n}" for name, n in sorted(counters.items()))


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 ping', '2 pings' (or the plural given: '2 sheep')."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def bytes_words(n: int) -> str:
    """A size as people write it: exact binary units where they fit (64 KiB, 1 GiB), else bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"
