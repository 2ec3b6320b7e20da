"""The Python files the lab's processes import, held in the VM's RAM.

Under TCG the guest reaches the host's files through 9p with no cache: a stat took 1 ms on the
read-only root and 4-5 ms on the project's read-write mount, and a Python that imports rdmacli
makes hundreds of them. Measured in the VM: of the 8 s a `rdmacli ping -C 1` took, 3.8 s were
stats and reads of .py and .pyc files; copying the trees file by file inside the guest took
minutes (one 9p round trip per file and attribute).

So the host packs the interpreter's standard library, the venv's site-packages and the rdmacli
package into one uncompressed tar (one file, read in large 9p reads); the guest unpacks it into
tmpfs and bind-mounts each copy over its original path. Every path stays what it was (`__file__`,
tracebacks, the tests' own lookups); the host's files are never written. What is left out of the
pack (pip, the stdlib's test suite, static libraries) stays reachable: the original directory is
bind-mounted aside first and the copy holds a symlink to each left-out entry there.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sysconfig
import tarfile

MANIFEST = "manifest.json"
# top-level entries left on 9p (big, and nothing the lab's processes import)
LEFT_OUT = frozenset(
    {
        "test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
        "lib2to3",
        "pip",
        "virtme",
        "virtme_ng_init",
        # the docs' and the type checker's (about 165 of the venv's 263 MB; no lab process imports
        # them): under a second boot beside it the pack's unpacking took 82 s where it takes 23
        "material",
        "materialx",
        "babel",
        "mkdocs",
        "mkdocs_get_deps",
        "pymdownx",
        "backrefs",
        "mypy",
        "mypyc",
        "kubernetes_validate",  # the DaemonSet test's Kubernetes schemas, on the host only (108 MB)
    }
)
LEFT_OUT_SUFFIX = "__mypyc.cpython"  # mypy's compiled core: one .so named by a hash (36 MB)


def left_out(entry: str) -> bool:
    """Whether a tree's top-level entry stays on 9p (reachable through a symlink, never lost)."""
    if entry.endswith(".dist-info"):
        return entry.split("-")[0] in LEFT_OUT
    return entry in LEFT_OUT or LEFT_OUT_SUFFIX in entry


def trees(pkg_parent: str) -> list[str]:
    """The directories whose files every lab process reads: stdlib, site-packages, rdmacli."""
    paths = sysconfig.get_paths()
    found = []
    for path in (paths["stdlib"], paths["purelib"], os.path.join(pkg_parent, "rdmacli")):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def _keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = info.name
    if name.endswith((".opt-1.pyc", ".opt-2.pyc", ".a")) or info.isdev() or info.isfifo():
        return None  # optimised bytecode nobody runs, static libpython (25 MB)
    return info


def pack(pkg_parent: str, dest: str) -> list[str]:
    """Host side: write the tar to `dest`; the trees it holds are returned (the manifest's order)."""
    roots = trees(pkg_parent)
    manifest = []
    with tarfile.open(dest, "w", format=tarfile.GNU_FORMAT) as tar:
        for i, root in enumerate(roots):
            aside = []
            for entry in sorted(os.listdir(root)):
                if left_out(entry):
                    aside.append(entry)
                    continue
                tar.add(os.path.join(root, entry), arcname=f"{i}/{entry}", filter=_keep)
            manifest.append({"path": root, "left_out": aside})
        data = json.dumps(manifest, allow_nan=False).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return roots


def unpack(pack_path: str, ram: str = "/run/rdmacli-lab/py") -> list[str]:
    """Guest side (root): unpack into tmpfs and bind each copy over its original path.

    Returns the paths now served from RAM; any step that fails leaves that tree on 9p (slower,
    never wrong)."""
    os.makedirs(ram, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "rdmacli-py", ram]).returncode:
        return []
    if subprocess.run(["tar", "-xf", pack_path, "-C", ram], capture_output=True).returncode:
        subprocess.run(["umount", ram])
        return []
    with open(os.path.join(ram, MANIFEST)) as f:
        manifest = json.load(f)
    served = []
    for i, tree in enumerate(manifest):
        path, copy, aside = tree["path"], os.path.join(ram, str(i)), os.path.join(ram, f"orig{i}")
        if not os.path.isdir(path) or not os.path.isdir(copy):
            continue
        os.makedirs(aside, exist_ok=True)
        if subprocess.run(["mount", "--bind", path, aside]).returncode:
            continue
        for entry in tree["left_out"]:
            os.symlink(os.path.join(aside, entry), os.path.join(copy, entry))
        if subprocess.run(["mount", "--bind", copy, path]).returncode == 0:
            served.append(path)
    return served
