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

from rdmacli.lab import CLIENT, SERVER

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
    sys.stderr.write(f"lab: {text}\n")
    sys.stderr.flush()


def _gid_ips(dev: str) -> set[str]:
    from rdmacli.diag.devices import list_devices

    ips = set()
    for d in list_devices(use_pyverbs=False):
        if d.name == dev:
            for p in d.ports:
                if p.state == "ACTIVE":
                    ips.update(g.ip for g in p.gids if g.ip)
    return ips


def setup(deadline_s: float = 30.0) -> None:
    for cmd in SETUP:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"lab: setup step failed: {' '.join(cmd)}: {r.stderr.strip()}")
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    # Ready when both ports are ACTIVE and carry GIDs for their IPv4 and IPv6 addresses.
    end = time.monotonic() + deadline_s
    while True:
        missing = [
            (side["rxe"], ip)
            for side in (SERVER, CLIENT)
            for ip in (side["ipv4"], side["ipv6"])
            if ip not in _gid_ips(side["rxe"])
        ]
        if not missing:
            break
        if time.monotonic() > end:
            raise SystemExit(f"lab: devices not ready after {deadline_s:.0f} s: missing {missing}")
        time.sleep(0.2)
    for side, role in ((SERVER, "server"), (CLIENT, "client")):
        _say(f"{side['rxe']} on {side['netdev']}: {side['ipv4']} {side['ipv6']} ({role} side)")


def lab_env() -> dict[str, str]:
    env = dict(os.environ)
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
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    t0 = time.monotonic()
    setup()
    _say(f"ready in {time.monotonic() - t0:.1f} s")
    if args.cwd:
        os.chdir(args.cwd)
    if args.shell or not cmd:
        cmd = [os.environ.get("SHELL", "/bin/bash"), "-i"]
    try:
        return subprocess.call(cmd, env=lab_env())
    except FileNotFoundError:
        _say(f"command not found: {cmd[0]}")
        return 127


if __name__ == "__main__":
    sys.exit(main())
