"""Builds rdmacli's native data path (cffi's API mode): `python -m rdmacli.native._build`.

The C (SOURCES) is compiled against libibverbs' headers into `_datapath.*.so` next to this
file. `make venv` runs this; a machine without a compiler or libibverbs-dev gets no extension
and rdmacli measures with its pure-Python loops (rdmacli.native.load() says why). Warnings are
errors; RDMACLI_NATIVE_SANITIZE=1 builds with AddressSanitizer and UBSan (a test does, run
with libasan preloaded).
"""

from __future__ import annotations

import os
import re
import sys

from rdmacli.native.header import PATHS  # the headers, said once

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = "rdmacli.native._datapath"
CFLAGS = ["-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]
# loop.h: what lat.c inlines; cmrun.h: what the connection manager's files (cm*.c) share
SOURCES = (
    "datapath.c",
    "lat.c",
    "bw.c",
    "datagram.c",
    "probe.c",
    "cm.c",
    "cmflow.c",
    "cmrun.c",
    "cmconn.c",
    "cmserve.c",
)
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


def cdef() -> str:
    """The declarations between each header's markers (cffi's cdef reads no #include)."""
    parts = []
    for path in PATHS:
        name = os.path.basename(path)
        with open(path) as f:
            found = re.search(r"/\* cdef-begin \*/(.*)/\* cdef-end \*/", f.read(), re.S)
        if found is None:
            raise RuntimeError(f"{name} has lost its cdef-begin and cdef-end markers")
        parts.append(found.group(1))
    return "".join(parts)


def builder(sanitize: bool = False):
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cdef())
    flags = CFLAGS + (SANITIZE if sanitize else [])
    ffi.set_source(
        MODULE,
        '#include "datapath.h"',
        sources=[os.path.join(HERE, name) for name in SOURCES],
        include_dirs=[HERE],
        libraries=["ibverbs", "rdmacm"],
        extra_compile_args=flags,
        extra_link_args=SANITIZE if sanitize else [],
    )
    return ffi


def build(target_dir: str | None = None, sanitize: bool = False) -> str:
    """Compile; returns the extension's path. target_dir: where the package root is (the
    extension lands in <target_dir>/rdmacli/native/)."""
    import tempfile

    root = target_dir or os.path.dirname(os.path.dirname(HERE))
    with tempfile.TemporaryDirectory() as tmp:
        path = builder(sanitize).compile(tmpdir=tmp, verbose=False)
        name = os.path.basename(path)
        dest = os.path.join(root, "rdmacli", "native", name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        os.replace(path, dest)
    return dest


if __name__ == "__main__":
    sanitize = os.environ.get("RDMACLI_NATIVE_SANITIZE") == "1"
    out = sys.argv[1] if len(sys.argv) > 1 else None
    sys.stdout.write(f"built {build(out, sanitize)}\n")
