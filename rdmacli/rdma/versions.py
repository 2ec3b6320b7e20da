"""Which rdma-core runtime rdmacli runs on, for `--version` and `doctor`: each library is loaded
as the binding loads it (ctypes, no cffi: `--version` stays light), and its release is read from
the file the loader mapped (librdmacm.so.1 -> librdmacm.so.1.3.44.0 is rdma-core 44), so a
broken or empty file says "not loadable" with the loader's words, never a release."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

SONAMES = {"librdmacm": "librdmacm.so.1", "libibverbs": "libibverbs.so.1"}


@dataclass(frozen=True)
class Library:
    soname: str
    path: str | None = None  # the file the loader mapped
    release: str | None = None  # rdma-core's release from that file's name, or None
    error: str | None = None  # the loader's words when it could not load it

    def words(self) -> str:
        if self.error:
            return f"not loadable ({self.error})"
        return f"rdma-core {self.release or 'unknown'} ({self.path})"


def _mapped(soname: str) -> str | None:
    """The path the dynamic loader mapped for `soname` (this process's /proc/self/maps)."""
    base = soname.split(".so")[0] + ".so"
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(base):
                    return path
    except OSError:
        return None
    return None


def loaded_libraries() -> dict[str, Library]:
    """{library: what the loader gives for its soname}, as the binding's dlopen would."""
    import ctypes

    found = {}
    for lib, soname in SONAMES.items():
        try:
            ctypes.CDLL(soname)
        except OSError as exc:
            found[lib] = Library(soname, error=str(exc))
            continue
        path = _mapped(soname)
        m = re.search(r"\.so\.\d+\.\d+\.(\d+)\.\d+$", path or "")
        found[lib] = Library(soname, path, m.group(1) if m else None)
    return found
