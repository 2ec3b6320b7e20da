"""Host side of the lab: find qemu, a kernel with rdma_rxe and virtme-ng; decide KVM or TCG; boot.

Each missing piece is reported with the command that installs it. KVM is tried for real once per
kernel and cached, because on some hosts /dev/kvm exists but qemu aborts (or hangs) under it.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass

from rdmacli.errors import EnvironmentProblem
from rdmacli.lab import pyram

# where the rdmacli package lives: the guest imports it from there (PYTHONPATH)
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "rdmacli")
# Variables the guest command should see; the VM does not inherit the host environment.
PASS_ENV = ("TERM", "NO_COLOR", "FORCE_COLOR", "CI", "COLUMNS", "LANG", "LC_ALL", "HOME", "PYTEST_ADDOPTS")


@dataclass
class LabTools:
    vng: str
    qemu: str
    kernel: str
    kernel_version: str


def _qemu_name() -> str:
    machine = platform.machine()
    return {"x86_64": "qemu-system-x86_64", "aarch64": "qemu-system-aarch64"}.get(
        machine, f"qemu-system-{machine}"
    )


def find_kernel(boot: str = "/boot", modules: str = "/lib/modules") -> tuple[str, str] | None:
    """The newest installed kernel that ships the rdma_rxe module."""
    found = []
    for image in glob.glob(os.path.join(boot, "vmlinuz-*")):
        version = os.path.basename(image)[len("vmlinuz-") :]
        rxe = glob.glob(os.path.join(modules, version, "kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*"))
        if rxe and os.access(image, os.R_OK):
            found.append((_version_key(version), image, version))
    if not found:
        return None
    _, image, version = max(found)
    return image, version


def _version_key(version: str) -> tuple:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.-]", version))


def find_tools() -> LabTools:
    bindir = os.path.dirname(sys.executable)
    vng = shutil.which("vng") or shutil.which("vng", path=bindir)
    if not vng:
        raise EnvironmentProblem(
            "virtme-ng (vng) is not installed",
            hint="pip install virtme-ng  (in the environment rdmacli runs in)",
        )
    qemu = shutil.which(_qemu_name())
    if not qemu:
        raise EnvironmentProblem(f"{_qemu_name()} is not installed", hint="apt-get install qemu-system-x86")
    kernel = find_kernel()
    if not kernel:
        raise EnvironmentProblem(
            "no kernel with the rdma_rxe module under /boot and /lib/modules",
            hint="apt-get install linux-image-amd64  (Debian's kernel ships rdma_rxe)",
        )
    return LabTools(vng=vng, qemu=qemu, kernel=kernel[0], kernel_version=kernel[1])


def kvm_works(tools: LabTools, timeout_s: float = 8.0) -> bool:
    """Boot the kernel under KVM until it panics for lack of a root: proof KVM runs guests here."""
    if os.environ.get("RDMACLI_LAB_ACCEL") in ("kvm", "tcg"):
        return os.environ["RDMACLI_LAB_ACCEL"] == "kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    key = f"{tools.kernel}:{os.stat(tools.kernel).st_mtime_ns}:{tools.qemu}"
    path = os.path.join(CACHE, "kvm.json")
    try:
        with open(path) as f:
            cache = json.load(f)
        if key in cache:
            return bool(cache[key])
    except (OSError, ValueError):
        cache = {}
    cmd = [
        tools.qemu,
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "256",
        "-display",
        "none",
        "-nodefaults",
        "-no-reboot",
        "-serial",
        "stdio",
        "-kernel",
        tools.kernel,
        "-append",
        "console=ttyS0 panic=-1 loglevel=1",
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout_s)
        ok = r.returncode == 0 and b"Kernel panic" in r.stdout
    except subprocess.TimeoutExpired:
        ok = False
    try:
        os.makedirs(CACHE, exist_ok=True)
        cache[key] = ok
        with open(path, "w") as f:
            json.dump(cache, f)
    except OSError:
        pass
    return ok


def precompile(root: str) -> None:
    """Byte-compile rdmacli (and the tests beside it) on the host before a boot. The guest
    writes no bytecode, so without this every Python process in the VM compiled every module it
    imported from source: on a fresh clone, about a second of each process start under TCG."""
    import compileall

    for sub in ("rdmacli", "tests", "benchmarks"):
        path = os.path.join(root, sub)
        if os.path.isdir(path):
            compileall.compile_dir(path, quiet=2, workers=1)


def lab_cpus() -> int:
    """The VM's emulated CPUs: the host's, or RDMACLI_LAB_CPUS (boots side by side: under TCG
    more emulated CPUs than the host has cores stall each other, each VM's CPU thread preempted
    while it holds what the other waits for)."""
    given = os.environ.get("RDMACLI_LAB_CPUS", "")
    return int(given) if given.isdigit() and int(given) > 0 else os.cpu_count() or 1


def vng_command(
    tools: LabTools,
    command: list[str],
    *,
    shell: bool = False,
    kvm: bool = False,
    cwd: str | None = None,
    rwdirs: tuple[str, ...] = (),
    memory: str = "2G",
    cpus: int | None = None,
    extra_env: dict[str, str] | None = None,
    nodes: int = 0,
    rails: int = 1,
    iwarp: bool = False,
) -> list[str]:
    cwd = cwd or os.getcwd()
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    env["PATH"] = os.path.dirname(sys.executable) + ":" + os.environ.get("PATH", "/usr/bin:/bin")
    env["PYTHONPATH"] = PKG_PARENT + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the guest sees the host's files: it writes none
    env.update(extra_env or {})
    if "COLUMNS" not in env and sys.stdout.isatty():  # the VM's console does not know our width
        env["COLUMNS"] = str(shutil.get_terminal_size().columns)
    guest = [
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        sys.executable,
        "-m",
        "rdmacli.lab.guest",
        "--cwd",
        cwd,
    ]
    if shell:
        guest.append("--shell")
    if nodes:
        guest += ["--nodes", str(nodes), "--rails", str(rails)]
    if iwarp:
        guest.append("--iwarp")
    guest += ["--", *command]
    cmd = [
        tools.vng,
        "-r",
        tools.kernel,
        "--force-9p",
        "--memory",
        memory,
        "--cpus",
        str(cpus or lab_cpus()),
    ]
    if not kvm:
        cmd.append("--disable-kvm")
    for d in (cwd, *rwdirs):
        cmd += ["--rwdir", d]
    cmd += ["--", shlex.join(guest)]
    return cmd


def _call_relayed(cmd: list[str], env: dict) -> int:
    """Run the VM; relay its output through pipes unless both streams are terminals.

    The VM reopens its stdout: given a regular file it writes from offset 0 over what was
    already there (seen with `make test > log`), so files only ever see our own writes.
    """
    if sys.stdout.isatty() and sys.stderr.isatty():
        return subprocess.call(cmd, env=env)
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )

    def copy(src, dst) -> None:
        for chunk in iter(lambda: src.read1(65536), b""):
            dst.write(chunk)
            dst.flush()

    threads = [
        threading.Thread(target=copy, args=(proc.stdout, sys.stdout.buffer), daemon=True),
        threading.Thread(target=copy, args=(proc.stderr, sys.stderr.buffer), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        rc = proc.wait()
    except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: the VM goes too, never left behind
        stop_vm(proc)
        raise
    for t in threads:
        t.join(10)
    return rc


def run(
    command: list[str],
    *,
    shell: bool = False,
    rwdirs: tuple[str, ...] = (),
    nodes: int = 0,
    rails: int = 1,
    iwarp: bool = False,
    say=lambda text: None,
) -> int:
    tools = find_tools()
    kvm = kvm_works(tools)
    siw_env = {}
    if iwarp:
        from rdmacli.lab import siw

        siw_env = {"RDMACLI_LAB_SIW": siw.module(tools.kernel_version, CACHE, say) or "modprobe"}
    say(f"booting {tools.kernel_version} under {'KVM' if kvm else 'TCG (no working KVM)'} with virtme-ng")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(tools.vng) + ":" + env.get("PATH", "")
    t0 = time.monotonic()
    with python_pack() as pack_env:
        if sys.stdin.isatty() and sys.stdout.isatty():
            say(f"a terminal inside: {ESCAPE_NAME} ends the VM")
            with TerminalRelay() as relay:
                cmd = vng_command(
                    tools,
                    command,
                    shell=shell,
                    kvm=kvm,
                    rwdirs=(*rwdirs, relay.dir),
                    extra_env={**relay.guest_env(), **pack_env, **siw_env},
                    nodes=nodes,
                    rails=rails,
                    iwarp=iwarp,
                )
                rc = relay.run(cmd, env)
        else:
            cmd = vng_command(
                tools,
                command,
                shell=shell,
                kvm=kvm,
                rwdirs=rwdirs,
                nodes=nodes,
                rails=rails,
                iwarp=iwarp,
                extra_env={**pack_env, **siw_env},
            )
            rc = _call_relayed(cmd, env)
    say(f"VM exited with status {rc} after {time.monotonic() - t0:.1f} s")
    return rc


@contextlib.contextmanager
def python_pack():
    """Ready the host's Python files for a boot: byte-compiled (precompile), then the trees
    every lab process imports packed in one tar the guest unpacks into RAM (lab.pyram: 9p under
    TCG made each process start seconds slower). Yields the guest's environment for it; the tar
    is removed after the boot. Where it cannot be made, the guest reads the files over 9p."""
    precompile(PKG_PARENT)  # first: the pack carries the bytecode this writes
    path = None
    try:
        os.makedirs(CACHE, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix="pyram-", suffix=".tar", dir=CACHE)
        os.close(fd)
        pyram.pack(PKG_PARENT, path)
        made = {"RDMACLI_LAB_PYRAM": path}
    except (OSError, tarfile.TarError):
        made = {}
    try:
        yield made  # what the boot raises goes to the caller, not to the except above
    finally:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


ESCAPE, ESCAPE_NAME = b"\x1d", "Ctrl-]"


class TerminalRelay:
    """The host's terminal, raw, relayed to the VM's stdin; the guest gives the command a pty of
    its own (lab.guest.run_in_pty). Keys reach the guest as bytes, so Ctrl-C and Ctrl-Z go to
    the guest's foreground job, not to qemu; window size changes travel through a file in a
    shared directory. Ctrl-] ends the VM from the host."""

    def __init__(self):
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="rdmacli-lab-tty-")
        self.winsize = os.path.join(self.dir, "winsize")
        self.saved = None

    def size(self) -> str:
        cols, rows = shutil.get_terminal_size()
        return f"{rows} {cols}"

    def guest_env(self) -> dict[str, str]:
        return {"RDMACLI_LAB_TTY": self.size(), "RDMACLI_LAB_WINSIZE": self.winsize}

    def _write_size(self, *_args) -> None:
        tmp = self.winsize + ".new"
        with open(tmp, "w") as f:
            f.write(self.size())
        os.replace(tmp, self.winsize)

    def __enter__(self):
        import signal
        import termios
        import tty

        self._write_size()
        self.saved = termios.tcgetattr(0)
        tty.setraw(0)
        self.old_winch = signal.signal(signal.SIGWINCH, self._write_size)
        return self

    def __exit__(self, *exc) -> None:
        import signal
        import termios

        signal.signal(signal.SIGWINCH, self.old_winch)
        termios.tcsetattr(0, termios.TCSADRAIN, self.saved)
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, cmd: list[str], env: dict) -> int:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, start_new_session=True)

        def keys() -> None:
            while proc.poll() is None:
                try:
                    data = os.read(0, 4096)
                except OSError:
                    return
                if not data:
                    return
                if ESCAPE in data:
                    stop_vm(proc)
                    return
                try:
                    proc.stdin.write(data)
                    proc.stdin.flush()
                except (BrokenPipeError, ValueError):
                    return

        threading.Thread(target=keys, daemon=True).start()
        try:
            rc = proc.wait()
            return 128 - rc if rc < 0 else rc  # the shell's convention for a signal
        except BaseException:
            stop_vm(proc)
            raise


def stop_vm(proc: subprocess.Popen) -> None:
    """vng and its qemu: the whole process group (vng alone would leave qemu running)."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                os.killpg(proc.pid, sig if sig else 0)
                sig = 0  # sent once; then only ask whether anyone is left
            except ProcessLookupError:  # the group is empty: everything is gone
                proc.wait()
                return
            proc.poll()  # reap vng, so a zombie leader does not keep the group alive
            time.sleep(0.1)
    proc.wait()
