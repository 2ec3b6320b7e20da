"""Which rdma-core the runtime libraries come from, for `--version`: read from the file the
dynamic loader picks for each soname (librdmacm.so.1 -> librdmacm.so.1.3.44.0 is rdma-core 44).
No library is loaded, so `--version` stays as light as `--help`."""

from __future__ import annotations

import glob
import os
import re

SONAMES = {"librdmacm": "librdmacm.so.1", "libibverbs": "libibverbs.so.1"}
DIRS = ["/lib/*-linux-gnu", "/usr/lib/*-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/usr/local/lib*"]


def rdma_core_versions() -> dict[str, str | None]:
    """{library: rdma-core release or None (not found)}, LD_LIBRARY_PATH first, as the loader."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d] + DIRS
    found: dict[str, str | None] = {}
    for lib, soname in SONAMES.items():
        found[lib] = None
        for pattern in dirs:
            hits = sorted(glob.glob(os.path.join(pattern, soname)))
            if hits:
                m = re.search(r"\.so\.\d+\.\d+\.(\d+)\.\d+$", os.path.realpath(hits[0]))
                found[lib] = m.group(1) if m else "unknown"
                break
    return found
