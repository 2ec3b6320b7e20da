"""Soft-iWARP (siw) for the lab: the kernel module, found or built once per kernel and cached.

Debian 12's kernel is built without siw (`CONFIG_RDMA_SIW is not set`), while it ships rdma_rxe.
The module builds out of tree in seconds from the kernel's own source package (only
`drivers/infiniband/sw/siw` is unpacked) against the matching headers; the .ko is cached under
the lab's cache directory, keyed by the kernel version, and the guest loads it with insmod after
its dependencies (ib_core, libcrc32c). A kernel that has siw is used as it is.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile

from rdmacli.errors import EnvironmentProblem

SUBDIR = "drivers/infiniband/sw/siw"
DEPENDS = ("ib_core", "libcrc32c")  # `modinfo siw.ko`: depends: ib_core,libcrc32c


def in_tree(version: str, modules: str = "/lib/modules") -> bool:
    return bool(glob.glob(os.path.join(modules, version, "kernel", SUBDIR, "siw.ko*")))


def source_tarball(version: str, src: str = "/usr/src") -> str | None:
    """Debian's linux-source-X.Y tarball for a kernel version "X.Y.0-N-arch"."""
    m = re.match(r"(\d+\.\d+)", version)
    if not m:
        return None
    found = sorted(glob.glob(os.path.join(src, f"linux-source-{m.group(1)}.tar.*")))
    return found[0] if found else None


def module(version: str, cache: str, say=lambda text: None) -> str | None:
    """The path of a siw.ko for kernel `version`, built on first use; None where the kernel has
    siw of its own (the guest then uses modprobe)."""
    if in_tree(version):
        return None
    path = os.path.join(cache, "siw", version, "siw.ko")
    if os.path.exists(path):
        return path
    headers = os.path.join("/lib/modules", version, "build")
    tarball = source_tarball(version)
    missing = [
        what
        for what, ok in (
            (f"linux-headers-{version}", os.path.isdir(headers)),
            ("linux-source", tarball is not None),
            ("make", shutil.which("make") is not None),
        )
        if not ok
    ]
    if missing or tarball is None:
        raise EnvironmentProblem(
            f"the lab's kernel {version} has no Soft-iWARP module, and building one needs "
            + ", ".join(missing),
            hint=f"apt-get install {' '.join(missing)}  (or `make deps`)",
        )
    say(f"building the Soft-iWARP module for {version} (once; cached in {os.path.dirname(path)})")
    with tempfile.TemporaryDirectory(prefix="rdmacli-siw-") as tmp:
        _run(["tar", "-xf", tarball, "-C", tmp, "--wildcards", f"*/{SUBDIR}/*"], "unpack the siw sources")
        dirs = glob.glob(os.path.join(tmp, "*", SUBDIR))
        if not dirs:
            raise EnvironmentProblem(f"{tarball} holds no {SUBDIR}", hint="reinstall linux-source")
        where = dirs[0]
        _run(["make", "-s", "-C", headers, f"M={where}", "CONFIG_RDMA_SIW=m", "modules"], "build siw.ko")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shutil.copyfile(os.path.join(where, "siw.ko"), path + ".new")
        os.replace(path + ".new", path)
    return path


def _run(cmd: list[str], what: str) -> None:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"could not {what}: {exc}") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-5:]
        raise EnvironmentProblem(f"could not {what}: " + " / ".join(tail), hint="see `make deps`")
