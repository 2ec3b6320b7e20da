"""datapath.h's integer constants, read from the header itself: the one place C and Python take
a status code, a clock mode or the probe datagram's layout from. Read from the text (not from the
built extension's `lib`) so that a pure install, which has no extension, says the same; a unit
test holds every one equal to `lib`'s where the extension is built."""

from __future__ import annotations

import os
import re

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "datapath.h")
_DEFINE = re.compile(r"^#define (RDMACLI_\w+) (\d+)(?:ull|u)?\b", re.M)


def defines(path: str = PATH) -> dict[str, int]:
    """Every `#define RDMACLI_NAME <decimal>` of the header, by name."""
    with open(path) as f:
        return {name: int(value) for name, value in _DEFINE.findall(f.read())}


DEFINES = defines()


def const(name: str) -> int:
    """One constant, by its C name (a KeyError names the one the header lacks)."""
    return DEFINES[name]
