"""Native loops built as they ship, with their verbs and clocks replaced by a script: a twin C file
(tests/unit/*_twin.c) that reads the verbs header, redefines the names the loop calls and includes
the loop's own source, compiled with _build's flags beside the rest of the extension."""

from __future__ import annotations

import importlib.util
import os

import pytest

from rdmacli.native import _build

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name: str, tmp_dir: str, replaces: tuple[str, ...]):
    """The extension with `name`.c (which includes the sources `replaces`) for those sources, and
    `name`.h's script and records declared to cffi; the loaded module."""
    cffi = pytest.importorskip("cffi")
    if not os.path.exists("/usr/include/infiniband/verbs.h"):
        pytest.skip("no libibverbs headers (make venv installs them)")
    ffi = cffi.FFI()
    with open(os.path.join(HERE, f"{name}.h")) as f:
        ffi.cdef(_build.cdef() + f.read())
    ffi.set_source(
        f"_{name}",
        f'#include "datapath.h"\n#include "{name}.h"',
        sources=[os.path.join(_build.HERE, s) for s in _build.SOURCES if s not in replaces]
        + [os.path.join(HERE, f"{name}.c")],
        include_dirs=[_build.HERE, HERE],
        libraries=["ibverbs", "rdmacm"],
        extra_compile_args=_build.CFLAGS,
    )
    path = ffi.compile(tmpdir=tmp_dir, verbose=False)
    spec = importlib.util.spec_from_file_location(f"_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
