"""The systemd lab, host side: a minimal Debian 12 made with mmdebstrap from Debian's packages,
the package built from this tree (`make deb`) installed in it, booted by virtme-ng with systemd
as init, its default target one unit that runs tests/systemd/guest_unit.py and powers off.

Why an image of its own: the lab's VM boots this host's root, where systemd starts every
service the host has enabled (and, on a container's root, thinks it is in a container and
ignores the kernel's command line), then waits at a login prompt. A minimal image boots to its
one job under TCG in about half a minute, and the unit under test is the package's, at the
distribution's unit path, as a fleet installs it.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# what the agent's unit and the lab's nodes need, all from Debian (the package's own
# dependencies come with it: apt-get install ./rdmacli_*.deb)
PACKAGES = ["systemd", "systemd-sysv", "udev", "kmod", "iproute2", "procps", "rdma-core", "ibverbs-providers"]
# rxe asks the crypto API for crc32 when a device is made (a soft dependency modprobe does not list:
# without it `rdma link add` fails ENOENT)
MODULES = ["rdma_rxe", "rdma_ucm", "ib_uverbs", "bridge", "veth", "crc32_generic", "crc32_pclmul"]
LAB_TARGET = """[Unit]
Description=rdmacli systemd lab
Requires=basic.target rdmacli-lab.service
After=basic.target
AllowIsolate=yes
"""
LAB_SERVICE = """[Unit]
Description=rdmacli systemd lab: the case, then power off
After=basic.target

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 /lab/guest_unit.py
ExecStopPost=/bin/systemctl --no-block poweroff
TimeoutStartSec=1200
"""


def depends(deb: str) -> list[str]:
    """The package's dependencies by name (its Depends field), for the image to hold them: the
    package itself is installed inside the booted VM, by apt, with no network."""
    field = subprocess.run(
        ["dpkg-deb", "-f", deb, "Depends"], check=True, capture_output=True, text=True
    ).stdout
    names = {part.split("|")[0].split("(")[0].split(":")[0].strip() for part in field.split(",")}
    return sorted(n for n in names if n and not n.startswith("python3-cffi-backend-api"))


def build(deb: str, dest: Path, kernel_version: str) -> None:
    """The image at `dest` (made afresh): Debian 12 with the package's dependencies, the package
    in /lab (installed by the guest, under systemd), the kernel's RDMA modules, and the lab's
    own target as the default."""
    if dest.exists():
        shutil.rmtree(dest)
    mirror = "http://deb.debian.org/debian"
    include = ",".join([*PACKAGES, *depends(deb)])
    subprocess.run(["mmdebstrap", "--variant=apt", f"--include={include}", "bookworm", str(dest), mirror],
                   check=True, capture_output=True, text=True)  # fmt: skip
    modules(dest, kernel_version)
    (dest / "lab").mkdir()
    shutil.copy(HERE / "guest_unit.py", dest / "lab" / "guest_unit.py")
    shutil.copy(deb, dest / "lab" / "rdmacli.deb")
    system = dest / "etc" / "systemd" / "system"
    (system / "rdmacli-lab.target").write_text(LAB_TARGET)
    (system / "rdmacli-lab.service").write_text(LAB_SERVICE)
    default = system / "default.target"
    if default.exists() or default.is_symlink():
        default.unlink()
    default.symlink_to("/etc/systemd/system/rdmacli-lab.target")


def modules(dest: Path, version: str) -> None:
    """The kernel's modules the lab loads, with what they need, and their index (depmod)."""
    shown = "".join(  # one name a call: modprobe reads the words after the first as its parameters
        subprocess.run(["modprobe", "-S", version, "--show-depends", name], check=True, capture_output=True,
                       text=True).stdout
        for name in MODULES
    )  # fmt: skip
    for line in shown.splitlines():
        parts = line.split()
        if parts and parts[0] == "insmod":
            src = Path(parts[1])
            to = dest / src.relative_to("/")
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, to)
    base = Path("/lib/modules") / version
    for f in glob.glob(str(base / "modules.*")):
        shutil.copy(f, dest / "lib" / "modules" / version)
    subprocess.run(["depmod", "-b", str(dest), version], check=True)


def boot(dest: Path, kernel: str, vng: str, timeout: float) -> subprocess.CompletedProcess:
    """Boot the image (TCG when KVM does not work here) until it powers off."""
    from rdmacli.lab.vm import find_tools, kvm_works, lab_cpus

    tools = find_tools()
    cmd = [vng, "-r", kernel, "--root", str(dest), "--rw", "--force-9p", "--memory", "2G", "--cpus",
           str(lab_cpus()), "--systemd"]  # fmt: skip
    if not kvm_works(tools):
        cmd.append("--disable-kvm")
    env = dict(os.environ, PATH=os.path.dirname(vng) + ":" + os.environ.get("PATH", ""))
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


if __name__ == "__main__":  # by hand: python tests/systemd/image.py DEB DEST
    from rdmacli.lab.vm import find_tools

    tools = find_tools()
    build(sys.argv[1], Path(sys.argv[2]), tools.kernel_version)
    r = boot(Path(sys.argv[2]), tools.kernel, tools.vng, 1500)
    print(r.stdout[-3000:], r.stderr[-3000:])
