"""Regenerates rdmacli/rdma/_cffi_abi.py from _cdef.py: `python -m rdmacli.rdma._build`.

cffi's out-of-line ABI mode: the declarations are parsed once, here, into a pure-Python module,
so a run of rdmacli needs neither pycparser nor a compiler (start-up matters: design, Start-up).
tests/unit/test_layout.py fails when the committed module is stale.
"""

from __future__ import annotations

import os
import sys
import tempfile


def generate(path: str) -> None:
    import cffi

    from rdmacli.rdma._cdef import CDEF

    builder = cffi.FFI()
    builder.cdef(CDEF)
    builder.set_source("rdmacli.rdma._cffi_abi", None)
    builder.emit_python_code(path)


def generated_text() -> str:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "_cffi_abi.py")
        generate(path)
        with open(path) as f:
            return f.read()


if __name__ == "__main__":
    target = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cffi_abi.py")
    generate(target)
    sys.stdout.write(f"wrote {target}\n")
