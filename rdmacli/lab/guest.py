"""Runs inside the lab VM: build the Soft-RoCE topology, then run the user's command.

Invoked as `python -m rdmacli.lab.guest [--cwd DIR] [--shell] -- CMD...` by `rdmacli lab`.
Kept free of click and rich: it runs once per boot, and start-up under TCG is slow.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from rdmacli.lab import CLIENT, IWARP_CLIENT, IWARP_SERVER, NODES_MAP, RAILS_MAP, SERVER, node, siw

SETUP = [
    ["modprobe", "-a", "rdma_rxe", "rdma_ucm", "ib_uverbs"],
    ["ip", "link", "set", "lo", "up"],
    ["ip", "link", "add", SERVER["netdev"], "type", "veth", "peer", "name", CLIENT["netdev"]],
    ["ip", "addr", "add", SERVER["ipv4"] + "/24", "dev", SERVER["netdev"]],
    ["ip", "addr", "add", CLIENT["ipv4"] + "/24", "dev", CLIENT["netdev"]],
    ["ip", "-6", "addr", "add", SERVER["ipv6"] + "/64", "dev", SERVER["netdev"], "nodad"],
    ["ip", "-6", "addr", "add", CLIENT["ipv6"] + "/64", "dev", CLIENT["netdev"], "nodad"],
    ["ip", "link", "set", SERVER["netdev"], "up"],
    ["ip", "link", "set", CLIENT["netdev"], "up"],
    # Traffic between two local ports: librdmacm's README asks for accept_local; without these
    # sysctls a resolve from 10.77.0.2 to 10.77.0.1 ends in ADDR_ERROR -110 (seen in the lab).
    [
        "sysctl",
        "-qw",
        "net.ipv4.conf.all.accept_local=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.all.arp_ignore=2",
        "net.ipv4.conf.default.rp_filter=0",
    ],
    *[
        ["sysctl", "-qw", f"net.ipv4.conf.{d}.accept_local=1", f"net.ipv4.conf.{d}.rp_filter=0"]
        for d in (SERVER["netdev"], CLIENT["netdev"])
    ],
    ["rdma", "link", "add", SERVER["rxe"], "type", "rxe", "netdev", SERVER["netdev"]],
    ["rdma", "link", "add", CLIENT["rxe"], "type", "rxe", "netdev", CLIENT["netdev"]],
]


def _say(text: str) -> None:
    end = "\r\n" if os.environ.get("RDMACLI_LAB_TTY") else "\n"  # the host terminal is raw then
    sys.stderr.write(f"lab: {text}{end}")
    sys.stderr.flush()


def node_setup(n: int, rails: int = 1) -> list[tuple[list[str], str | None]]:
    """N nodes, each a veth per rail with its own rxe device, rail r of every node on bridge r
    (`rdmacli lab --nodes N --rails R`). As (argv, stdin) steps: one `ip -batch`, one sysctl and
    one `rdma -b -` for all of them, not six processes a NIC (under TCG a process start costs
    up to a second: 16 nodes x 2 rails took minutes to set up one command at a time)."""
    if not n:
        return []
    ip, keys, rdma = [], [], []
    for rail in range(rails):
        bridge = node(1, rail)["bridge"]
        ip += [f"link add {bridge} type bridge", f"link set {bridge} up"]
        for k in range(1, n + 1):
            nd = node(k, rail)
            ip += [
                f"link add {nd['netdev']} type veth peer name {nd['port']}",
                f"link set {nd['port']} master {bridge} up",
                f"addr add {nd['ipv4']}/24 dev {nd['netdev']}",
                f"link set {nd['netdev']} up",
            ]
            conf = f"net.ipv4.conf.{nd['netdev']}"
            keys += [f"{conf}.accept_local=1", f"{conf}.rp_filter=0"]
            rdma.append(f"link add {nd['rxe']} type rxe netdev {nd['netdev']}")
    return [
        (["modprobe", "-a", "bridge", "veth"], None),
        (["ip", "-batch", "-"], "\n".join(ip) + "\n"),
        (["sysctl", "-qw", *keys], None),
        (["rdma", "-b", "-"], "\n".join(rdma) + "\n"),
    ]


def iwarp_setup(ko: str) -> list[tuple[list[str], str | None]]:
    """siw0 and siw1 on a veth pair of their own (`rdmacli lab --iwarp`). `ko` is the module the
    host built (lab.siw), or "modprobe" where the kernel has one. With the same sysctls as the
    rxe pair: a default host's rp_filter and accept_local refuse traffic between two local ports."""
    a, b = IWARP_SERVER, IWARP_CLIENT
    load = (
        [["modprobe", "-a", "siw"]]
        if ko == "modprobe"
        else [["modprobe", "-a", *siw.DEPENDS], ["insmod", ko]]
    )
    ip = [
        f"link add {a['netdev']} type veth peer name {b['netdev']}",
        *(f"addr add {s['ipv4']}/24 dev {s['netdev']}" for s in (a, b)),
        *(f"link set {s['netdev']} up" for s in (a, b)),
    ]
    keys = [f"net.ipv4.conf.{s['netdev']}.{k}" for s in (a, b) for k in ("accept_local=1", "rp_filter=0")]
    rdma = [f"link add {s['siw']} type siw netdev {s['netdev']}" for s in (a, b)]
    return [
        *((cmd, None) for cmd in load),
        (["ip", "-batch", "-"], "\n".join(ip) + "\n"),
        (["sysctl", "-qw", *keys], None),
        (["rdma", "-b", "-"], "\n".join(rdma) + "\n"),
    ]


def iwarp_ready(side: dict) -> bool:
    """siw's GIDs are made from the MAC, not the addresses: ready is the port ACTIVE and its
    netdev holding the address."""
    from rdmacli.diag.devices import SYSFS, port_state
    from rdmacli.diag.local import netdev_of

    pdir = os.path.join(SYSFS, side["siw"], "ports", "1")
    return port_state(pdir)[0] == "ACTIVE" and netdev_of(side["ipv4"]) == side["netdev"]


KEPT_HOOKS = ("distutils-precedence.pth",)  # setuptools' own: imports nothing at start


def start_up_hooks() -> list[str]:
    """The .pth files outside this venv that run code at every interpreter start (a line that
    begins with `import`), setuptools' own aside. A container may add one (a CA injected into
    certifi: certifi, importlib.resources and pathlib imported by every Python): 35 ms on the
    host, about 2 s of the 3 s a Python takes to start under TCG, in every process of the lab."""
    import glob
    import site

    found = []
    for d in site.getsitepackages():
        if os.path.realpath(d).startswith(os.path.realpath(sys.prefix) + os.sep):
            continue  # the venv's own (rdmacli's editable install among them)
        for path in sorted(glob.glob(os.path.join(d, "*.pth"))):
            if os.path.basename(path) in KEPT_HOOKS or os.path.islink(path):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read(1 << 16)
            except OSError:
                continue
            if any(line.startswith(("import ", "import\t")) for line in text.splitlines()):
                found.append(path)
    return found


def mask_start_up_hooks() -> list[str]:
    """Inside the VM only: each start-up hook hidden under /dev/null (a bind mount, gone with
    the VM; the host's file is untouched). The lab has no network for such hooks to serve."""
    masked = []
    for path in start_up_hooks():
        if subprocess.run(["mount", "--bind", "/dev/null", path], capture_output=True).returncode == 0:
            masked.append(path)
    return masked


def setup(deadline_s: float = 30.0, nodes: int = 0, rails: int = 1, iwarp: str | None = None) -> None:
    from rdmacli.diag.devices import serves_ip

    masked = mask_start_up_hooks()
    if masked:
        _say(f"start-up hooks masked in the VM (each Python starts ~2 s sooner): {' '.join(masked)}")
    if os.environ.get("RDMACLI_LAB_PYRAM"):
        from rdmacli.lab import pyram

        t0 = time.monotonic()
        served = pyram.unpack(os.environ.pop("RDMACLI_LAB_PYRAM"))
        where = " ".join(served) or "none (read over 9p as before)"
        _say(f"Python files in RAM ({time.monotonic() - t0:.1f} s): {where}")

    steps = [(c, None) for c in SETUP] + node_setup(nodes, rails) + (iwarp_setup(iwarp) if iwarp else [])
    for cmd, stdin in steps:
        r = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"lab: setup step failed: {' '.join(cmd)}: {r.stderr.strip()}")
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    # Ready when both ports are ACTIVE and carry GIDs for their IPv4 and IPv6 addresses.
    end = time.monotonic() + deadline_s
    while True:
        wanted = [(side["rxe"], ip) for side in (SERVER, CLIENT) for ip in (side["ipv4"], side["ipv6"])]
        wanted += [(node(k, r)["rxe"], node(k, r)["ipv4"]) for k in range(1, nodes + 1) for r in range(rails)]
        missing = [(rxe, ip) for rxe, ip in wanted if not serves_ip(rxe, ip)]
        missing += [
            (s["siw"], s["ipv4"]) for s in (IWARP_SERVER, IWARP_CLIENT) if iwarp and not iwarp_ready(s)
        ]
        if not missing:
            break
        if time.monotonic() > end:
            raise SystemExit(f"lab: devices not ready after {deadline_s:.0f} s: missing {missing}")
        time.sleep(0.2)
    for side, role in ((SERVER, "server"), (CLIENT, "client")):
        _say(f"{side['rxe']} on {side['netdev']}: {side['ipv4']} {side['ipv6']} ({role} side)")
    if iwarp:
        for side, role in ((IWARP_SERVER, "server"), (IWARP_CLIENT, "client")):
            _say(f"{side['siw']} on {side['netdev']}: {side['ipv4']} (iWARP, {role} side)")
    if nodes:
        with open(NODES_MAP, "w") as f:
            f.writelines(f"{node(k)['name']} {node(k)['ipv4']}\n" for k in range(1, nodes + 1))
        with open(RAILS_MAP, "w") as f:
            f.writelines(
                f"{node(k)['name']} {' '.join(node(k, r)['ipv4'] for r in range(rails))}\n"
                for k in range(1, nodes + 1)
            )
        _say(
            f"{nodes} nodes n01..n{nodes:02d} x {rails} rail(s) (rail r: 10.77.(1+r).1-{nodes} on its own "
            f"bridge), one rxe per rail; maps: {NODES_MAP} (rail 0), {RAILS_MAP} (every rail)"
        )


def lab_env(nodes: int = 0, rails: int = 1, iwarp: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if iwarp:
        env.update(
            {
                "RDMACLI_LAB_IWARP_SERVER": IWARP_SERVER["ipv4"],
                "RDMACLI_LAB_IWARP_CLIENT": IWARP_CLIENT["ipv4"],
            }
        )
    if nodes:
        env.update(
            {
                "RDMACLI_LAB_NODES": f"n[01-{nodes:02d}]" if nodes > 1 else "n01",
                "RDMACLI_LAB_NODE_ADDRS": f"10.77.1.[1-{nodes}]",
                "RDMACLI_LAB_NODES_MAP": NODES_MAP,
                "RDMACLI_LAB_RAILS": str(rails),
                "RDMACLI_LAB_RAILS_MAP": RAILS_MAP,
            }
        )
    env.update(
        {
            "RDMACLI_LAB": "1",
            "RDMACLI_LAB_SERVER": SERVER["ipv4"],
            "RDMACLI_LAB_CLIENT": CLIENT["ipv4"],
            "RDMACLI_LAB_SERVER6": SERVER["ipv6"],
            "RDMACLI_LAB_CLIENT6": CLIENT["ipv6"],
        }
    )
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rdmacli.lab.guest")
    parser.add_argument("--cwd")
    parser.add_argument("--shell", action="store_true")
    parser.add_argument("--nodes", type=int, default=0)
    parser.add_argument("--rails", type=int, default=1)
    parser.add_argument("--iwarp", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    t0 = time.monotonic()
    ko = os.environ.pop("RDMACLI_LAB_SIW", "modprobe") if args.iwarp else None
    setup(nodes=args.nodes, rails=args.rails, iwarp=ko)
    _say(f"ready in {time.monotonic() - t0:.1f} s")
    if args.cwd:
        os.chdir(args.cwd)
    if args.shell or not cmd:
        cmd = [os.environ.get("SHELL", "/bin/bash"), "-i"]
    if os.environ.get("RDMACLI_LAB_TTY"):  # the host side is a terminal: give the command one
        return run_in_pty(
            cmd,
            lab_env(args.nodes, args.rails, args.iwarp),
            os.environ["RDMACLI_LAB_TTY"],
            os.environ.get("RDMACLI_LAB_WINSIZE"),
        )
    try:
        return subprocess.call(cmd, env=lab_env(args.nodes, args.rails, args.iwarp))
    except FileNotFoundError:
        _say(f"command not found: {cmd[0]}")
        return 127


def _set_winsize(fd: int, size: str) -> None:
    import fcntl
    import struct
    import termios

    rows, cols = (int(x) for x in size.split())
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def run_in_pty(cmd: list[str], env: dict, size: str, winsize_file: str | None) -> int:
    """Run `cmd` on a pseudo-terminal of its own, in a session of its own: job control,
    Ctrl-C and Ctrl-Z reach its foreground job through the terminal's line discipline, and
    `tty`, isatty() and the window size work as on a real host. The VM's stdin and stdout are
    virtio pipes; this relays them to the pty's master. The host writes window size changes
    to `winsize_file` (a shared directory); they are applied as they come (SIGWINCH follows).

    stdin reading empty is not the end of the keys: a virtio port reads empty (and polls HUP)
    while qemu's side of it is not connected, as it can be when the guest first reads it, so
    it is looked at again a quarter second later (taken as the end, every key typed after it
    was lost: a lab shell beside a busy host sat 300 s at its prompt, deaf)."""
    import pty
    import select

    pid, master = pty.fork()
    if pid == 0:  # the child: its stdin, stdout and stderr are the pty, its controlling terminal
        try:
            _set_winsize(0, size)
            os.execvpe(cmd[0], cmd, env)
        except OSError as exc:
            os.write(2, f"lab: cannot run {cmd[0]}: {exc}\r\n".encode())
        os._exit(127)
    _set_winsize(master, size)
    stdin_quiet_until, last, status, drain_until = 0.0, size, None, None
    while drain_until is None or time.monotonic() < drain_until:
        if status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:  # the shell is gone: hang up what it left on the terminal, as a real one does
                _hang_up_session(pid)
                drain_until = time.monotonic() + 5
            else:
                status = None
        fds = [master] + ([0] if time.monotonic() >= stdin_quiet_until else [])
        ready, _, _ = select.select(fds, [], [], 0.25)
        if master in ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process on the terminal has gone
                data = b""
            if not data:
                break
            os.write(1, data)
        if 0 in ready:
            data = os.read(0, 65536)
            if data:
                os.write(master, data)
            else:  # not connected now (a virtio port), or closed: look again, not in a spin
                stdin_quiet_until = time.monotonic() + 0.25
        if winsize_file:
            try:
                with open(winsize_file) as f:
                    now = f.read().strip()
            except OSError:
                now = last
            if now and now != last:
                _set_winsize(master, now)
                last = now
    if status is None:
        _, status = os.waitpid(pid, 0)
    _hang_up_session(pid)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _hang_up_session(sid: int) -> None:
    """SIGHUP to every process of a session (background jobs keep the terminal open otherwise)."""
    import signal

    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # field 6 of stat: the session id
                os.kill(int(entry), signal.SIGHUP)
        except (OSError, ValueError, IndexError):
            pass


if __name__ == "__main__":
    sys.exit(main())
