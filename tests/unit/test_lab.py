"""The lab's host side: finding a kernel with rdma_rxe, and install advice for what is missing."""

from __future__ import annotations

import pytest

from rdmacli.errors import EnvironmentProblem
from rdmacli.lab import vm


def _kernel(tmp_path, version: str, rxe: bool):
    boot, mods = tmp_path / "boot", tmp_path / "modules"
    boot.mkdir(exist_ok=True)
    (boot / f"vmlinuz-{version}").write_text("kernel")
    if rxe:
        d = mods / version / "kernel/drivers/infiniband/sw/rxe"
        d.mkdir(parents=True)
        (d / "rdma_rxe.ko.xz").write_text("module")
    return str(boot), str(mods)


def test_find_kernel_picks_the_newest_with_rdma_rxe(tmp_path):
    _kernel(tmp_path, "6.1.0-9-amd64", rxe=True)
    _kernel(tmp_path, "6.1.0-56-amd64", rxe=True)
    boot, mods = _kernel(tmp_path, "6.12.0-1-amd64", rxe=False)
    image, version = vm.find_kernel(boot, mods)
    assert version == "6.1.0-56-amd64" and image.endswith("vmlinuz-6.1.0-56-amd64")


def test_no_kernel_with_rxe(tmp_path):
    boot, mods = _kernel(tmp_path, "6.1.0-1-amd64", rxe=False)
    assert vm.find_kernel(boot, mods) is None


@pytest.mark.parametrize(
    "missing,advice",
    [
        ("vng", "pip install virtme-ng"),
        ("qemu", "apt-get install qemu-system-x86"),
        ("kernel", "apt-get install linux-image-amd64"),
    ],
)
def test_missing_pieces_come_with_the_install_command(monkeypatch, missing, advice):
    def which(name, path=None):
        if name == "vng":
            return None if missing == "vng" else "/usr/bin/vng"
        return None if missing == "qemu" else f"/usr/bin/{name}"

    monkeypatch.setattr(vm.shutil, "which", which)
    monkeypatch.setattr(
        vm, "find_kernel", lambda *a: None if missing == "kernel" else ("/boot/vmlinuz-x", "x")
    )
    with pytest.raises(EnvironmentProblem) as exc:
        vm.find_tools()
    assert advice in exc.value.hint and exc.value.exit_code == 3


def test_vm_command_shares_the_directory_and_skips_kvm_when_broken(tmp_path):
    tools = vm.LabTools(vng="/x/vng", qemu="/x/qemu", kernel="/boot/vmlinuz-v", kernel_version="v")
    cmd = vm.vng_command(tools, ["pytest", "-m", "rdma"], kvm=False, cwd=str(tmp_path))
    assert cmd[:3] == ["/x/vng", "-r", "/boot/vmlinuz-v"] and "--disable-kvm" in cmd
    assert ["--rwdir", str(tmp_path)] == cmd[cmd.index("--rwdir") : cmd.index("--rwdir") + 2]
    assert "rdmacli.lab.guest" in cmd[-1] and "pytest -m rdma" in cmd[-1]
    assert "--disable-kvm" not in vm.vng_command(tools, ["true"], kvm=True, cwd=str(tmp_path))


def test_start_up_hooks_outside_the_venv_are_found_and_the_venvs_own_are_kept(tmp_path, monkeypatch):
    import site
    import sys

    from rdmacli.lab import guest

    system, venv = tmp_path / "dist-packages", tmp_path / "venv" / "site-packages"
    system.mkdir()
    venv.mkdir(parents=True)
    (system / "_ca.pth").write_text("import os;exec('import certifi')\n")
    (system / "distutils-precedence.pth").write_text("import os; __import__('_distutils_hack')\n")
    (system / "paths.pth").write_text("/opt/somewhere\n")
    (venv / "_editable.pth").write_text("import _editable_finder\n")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(venv), str(system)])
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert guest.start_up_hooks() == [str(system / "_ca.pth")]


def test_python_pack_holds_each_tree_once_and_leaves_the_big_unused_entries_on_9p(tmp_path, monkeypatch):
    import json
    import tarfile

    from rdmacli.lab import pyram

    stdlib, purelib, parent = tmp_path / "lib", tmp_path / "site", tmp_path / "proj"
    made = (stdlib / "__pycache__", stdlib / "test", purelib / "pip", purelib / "click", purelib / "material")
    for d in made:
        d.mkdir(parents=True)
    (purelib / "6ec57f84__mypyc.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")  # mypy's core
    (parent / "rdmacli").mkdir(parents=True)
    (stdlib / "os.py").write_text("x = 1\n")
    (stdlib / "__pycache__" / "os.cpython-311.pyc").write_bytes(b"pyc")
    (stdlib / "__pycache__" / "os.cpython-311.opt-1.pyc").write_bytes(b"opt")
    (purelib / "click" / "core.py").write_text("")
    (purelib / "pip-23.2.dist-info").mkdir()
    (parent / "rdmacli" / "__init__.py").write_text("")
    paths = {"stdlib": str(stdlib), "purelib": str(purelib)}
    monkeypatch.setattr(pyram.sysconfig, "get_paths", lambda: paths)
    out = tmp_path / "pack.tar"
    assert pyram.pack(str(parent), str(out)) == [str(stdlib), str(purelib), str(parent / "rdmacli")]
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile(pyram.MANIFEST))
    assert {"0/os.py", "0/__pycache__/os.cpython-311.pyc", "1/click/core.py", "2/__init__.py"} <= names
    assert not any("opt-1" in n or n.startswith(("0/test", "1/pip", "1/material", "1/6ec")) for n in names)
    assert [t["left_out"] for t in manifest] == [
        ["test"],
        ["6ec57f84__mypyc.cpython-311-x86_64-linux-gnu.so", "material", "pip", "pip-23.2.dist-info"],
        [],
    ]
    # the same directory twice (a venv whose site-packages is the stdlib's) is packed once
    paths["purelib"] = str(stdlib)
    assert pyram.trees(str(parent)) == [str(stdlib), str(parent / "rdmacli")]


def test_the_vms_cpus_are_the_hosts_unless_said(monkeypatch):
    """make test's side-by-side boots ask one emulated CPU each (RDMACLI_LAB_CPUS=1): two VMs of
    two on two cores stalled each other."""
    import os

    from rdmacli.lab import vm

    monkeypatch.delenv("RDMACLI_LAB_CPUS", raising=False)
    assert vm.lab_cpus() == (os.cpu_count() or 1)
    monkeypatch.setenv("RDMACLI_LAB_CPUS", "1")
    assert vm.lab_cpus() == 1
    for junk in ("0", "-1", "two", ""):
        monkeypatch.setenv("RDMACLI_LAB_CPUS", junk)
        assert vm.lab_cpus() == (os.cpu_count() or 1)


def test_the_guest_terminal_takes_keys_that_come_after_stdin_read_empty(tmp_path):
    """The guest's stdin is a virtio port, which reads empty (and polls HUP) while qemu's side is
    not connected, as when the guest first reads it. A FIFO whose writer has gone behaves the
    same, and gets a writer again: the keys written then must still reach the shell (the pty
    relay took the first empty read as the end of input, and a lab shell sat deaf at its prompt)."""
    import os
    import select
    import subprocess
    import sys
    import time

    fifo = tmp_path / "keys"
    os.mkfifo(fifo)
    keys = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    os.close(os.open(fifo, os.O_WRONLY))  # a writer came and went: reads are empty now, polls HUP
    os.set_blocking(keys, True)
    shell = "['sh', '-c', 'echo READY; read line; echo got:$line']"
    code = (
        "import os, sys; from rdmacli.lab.guest import run_in_pty; "
        f"sys.exit(run_in_pty({shell}, dict(os.environ), '24 80', None))"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=keys, stdout=subprocess.PIPE)
    os.close(keys)
    assert child.stdout is not None
    seen = b""

    def until(word: bytes) -> bool:
        nonlocal seen
        deadline = time.monotonic() + 30
        while word not in seen and time.monotonic() < deadline:
            if select.select([child.stdout], [], [], deadline - time.monotonic())[0]:
                chunk = child.stdout.read1(4096)  # type: ignore[union-attr]
                if not chunk:
                    break
                seen += chunk
        return word in seen

    try:
        assert until(b"READY"), seen  # relayed by the loop whose every turn read stdin empty
        with open(fifo, "wb") as writer:  # the host side connected again
            writer.write(b"hello\n")
        assert until(b"got:hello"), seen
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()
