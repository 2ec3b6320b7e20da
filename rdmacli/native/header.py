"""datapath.h's and cmplan.h's integer constants, read from the headers themselves: the one place
C and Python take a status code, a clock mode or the probe datagram's layout from. Read from the
text (not from the built extension's `lib`) so that a pure install, which has no extension, says
the same; a unit test holds every one equal to `lib`'s where the extension is built."""

from __future__ import annotations

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
HEADERS = ("datapath.h", "cmplan.h")  # the data path's, then the connection manager's (each a cdef section)
PATH = os.path.join(HERE, HEADERS[0])
PATHS = tuple(os.path.join(HERE, name) for name in HEADERS)
_DEFINE = re.compile(r"^#define (RDMACLI_\w+) (\d+)(?:ull|u)?\b", re.M)


def defines(path: str = PATH) -> dict[str, int]:
    """Every `#define RDMACLI_NAME <decimal>` of the header, by name."""
    with open(path) as f:
        return {name: int(value) for name, value in _DEFINE.findall(f.read())}


DEFINES = {name: value for path in PATHS for name, value in defines(path).items()}


def const(name: str) -> int:
    """One constant, by its C name (a KeyError names the one the header lacks)."""
    return DEFINES[name]
