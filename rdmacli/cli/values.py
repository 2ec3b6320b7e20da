"""The CLI's value types: whole numbers, finite numbers and sizes in a range, each bad value said
in one style (issue 75): what was typed, why not, the range in the option's units."""

from __future__ import annotations

import math
import re

import click


def out_of_range(typed, number, low, high, words=str) -> str:
    """One style for every bad value (issue 75): what was typed, why not, the range in the
    option's units: `'1G' is more than 64 MiB (0 B to 64 MiB)`."""
    span = f"{words(low)} or more" if high is None else f"{words(low)} to {words(high)}"
    if low is not None and number < low:
        return f"{str(typed)!r} is less than {words(low)} ({span})"
    return f"{str(typed)!r} is more than {words(high)} ({span})"


class Whole(click.IntRange):
    """A whole number in a range, its errors in the one style (out_of_range): click's say
    "'abc' is not a valid integer range" and "70000 is not in the range 1<=x<=65535"."""

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{str(value)!r} is not a whole number ({self._describe_range()})", param, ctx)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            self.fail(out_of_range(value, number, self.min, self.max), param, ctx)
        return number

    def _describe_range(self) -> str:
        if self.max is None:
            return f"{self.min} or more"
        return f"{self.min} to {self.max}" if self.min is not None else f"{self.max} or less"


class Finite(click.FloatRange):
    """A number in a range, never NaN or infinity: click's FloatRange lets NaN through (it
    compares false with both bounds), and a NaN deadline never fires. Every float option."""

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{str(value)!r} is not a number ({self.min:g} to {self.max:g})", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{str(value)!r} is not a finite number ({self._describe_range()})", param, ctx)
        low, high = self.min, self.max
        below = low is not None and (number <= low if self.min_open else number < low)
        above = high is not None and (number >= high if self.max_open else number > high)
        if below or above:
            why = (f"is not more than {low:g}" if below and self.min_open else f"is less than {low:g}"
                   if below else f"is more than {high:g}")  # fmt: skip
            self.fail(f"{str(value)!r} {why} ({self._describe_range()})", param, ctx)
        return number

    def _describe_range(self) -> str:
        low = f"more than {self.min:g}" if self.min_open else f"{self.min:g}"
        return f"{low} to {self.max:g}"


SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


class Size(click.IntRange):
    """A size in bytes, with a binary suffix as dd and perftest users type it: 64K, 1M, 1MiB,
    2g (K = KiB = 1024). Bounds are checked on the bytes, and said in --help as sizes."""

    name = "size"

    def __init__(self, low: int, high: int) -> None:
        super().__init__(low, high)
        self.low, self.high = low, high  # a size is always bounded both ways

    def convert(self, value, param, ctx):
        from rdmacli.units import bytes_words

        if isinstance(value, int):
            number = value
        else:
            m = re.fullmatch(r"\s*(\d{1,16})\s*([kmg]?)(?:i?b)?\s*", str(value), re.IGNORECASE)
            if m is None:
                self.fail(f"{str(value)!r} is not a size (bytes, or with K, M, G: 64K, 1M, 1MiB; "
                          f"{self._describe_range()})", param, ctx)  # fmt: skip
            number = int(m.group(1)) * SIZE_UNITS[m.group(2).lower()]
        if not self.low <= number <= self.high:
            self.fail(out_of_range(value, number, self.low, self.high, bytes_words), param, ctx)
        return number

    def _describe_range(self) -> str:
        from rdmacli.units import bytes_words

        return f"{bytes_words(self.low)} to {bytes_words(self.high)}"
