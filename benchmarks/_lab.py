"""Helpers shared by the benchmarks: they run inside the lab (`make bench`), never as tests."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time

from rdmacli.lab import resources
from rdmacli.protocols.table import PROTOCOLS

SERVER = os.environ.get("RDMACLI_LAB_SERVER", "10.77.0.1")
CLIENT = os.environ.get("RDMACLI_LAB_CLIENT", "10.77.0.2")
RDMACLI = [sys.executable, "-m", "rdmacli"]
CONNECT_PORT, PING_PORT = PROTOCOLS["connect"].default_port, PROTOCOLS["ping"].default_port


def wait_listener(port: int, timeout: float = 60.0) -> None:
    if not resources.wait_for_listener(port, timeout):
        raise SystemExit(f"no listener on {port}")


def wait_no_listener(port: int, timeout: float = 60.0) -> None:
    resources.wait_for_listener(port, timeout, present=False)


def timed(cmd: list[str], timeout: float = 300) -> tuple[float | None, str]:
    """Wall time of a command in seconds (None if it failed or hung), and its stdout."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, ""
    wall = time.monotonic() - t0
    return (wall if r.returncode == 0 else None), r.stdout


def timed_work(cmd: list[str], timeout: float = 300) -> tuple[float | None, float | None]:
    """(wall, work) in seconds, None if the command failed or hung. work runs from the first
    line the tool prints to its exit: for a Python process it leaves out the interpreter's
    start (2-3 s under TCG, varying by half a second, which would swamp 31 connections' worth
    of work), and it is measured the same way for the C tools (line-buffered by `stdbuf -oL`)."""
    import threading

    t0 = time.monotonic()
    first = None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for _ in proc.stdout:
            if first is None:
                first = time.monotonic()
        rc = proc.wait()
    finally:
        watchdog.cancel()
    end = time.monotonic()
    if rc != 0 or first is None:
        tell_failed(cmd, rc, proc.stderr.read() if proc.stderr else "")
        return None, None
    return end - t0, end - first


def tell_failed(cmd: list[str], rc: int | None, stderr: str) -> None:
    """A failed run, on stderr: which command, its exit and the end of what it said (a figure
    without its run says only that a run failed)."""
    print(f"  (failed, exit {rc}: {' '.join(cmd)}: {stderr.strip()[-300:]})", file=sys.stderr, flush=True)


def timed_own(cmd: list[str], timeout: float = 300) -> tuple[float | None, float | None]:
    """(wall, work) of an rdmacli command run with --json as a user runs it (no record per
    event or step): work is its own clock, `elapsed_ms` of its summary, from its engine's start
    (event channel open, before the first connection) to the end of its teardown."""
    import json

    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        tell_failed(cmd, None, f"hung past {timeout} s")
        return None, None
    wall = time.monotonic() - t0
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = None
    if r.returncode != 0 or not isinstance(doc, dict):
        error = doc.get("error") if isinstance(doc, dict) else None  # its summary's own words
        tell_failed(cmd, r.returncode, str(error.get("message")) if isinstance(error, dict) else r.stderr)
        return None, None
    return wall, doc["elapsed_ms"] / 1e3


def tcp_listening(port: int) -> bool:
    """A TCP listener on `port` (perftest's own exchange listens on TCP; its rdma_cm one, -R,
    on a cm_id). Read from /proc, never by connecting: perftest's server takes one connection."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        if any(r[3] == "0A" and int(r[1].rsplit(":", 1)[1], 16) == port for r in rows if len(r) > 3):
            return True
    return False


def wait_tcp_listener(port: int, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not tcp_listening(port):
        if time.monotonic() > end:
            raise SystemExit(f"no TCP listener on {port}")
        time.sleep(0.1)


def tx_bytes(ip: str) -> int | None:
    """Bytes the netdev holding `ip` has sent (its statistics), or None: what a run moved on
    the wire, read around it (the lab's client is rxe1 on veth1)."""
    out = subprocess.run(["ip", "-o", "addr", "show", "to", ip], capture_output=True, text=True).stdout
    if not out.split():
        return None
    dev = out.split()[1].split("@")[0]
    try:
        with open(f"/sys/class/net/{dev}/statistics/tx_bytes") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def gid_index(device: str, ip: str) -> int:
    """The RoCE v2 GID index of `ip` on `device` port 1 (perftest's -x, without -R)."""
    from rdmacli.diag.devices import SYSFS, port_gids

    for g in port_gids(os.path.join(SYSFS, device, "ports", "1")):
        if g.ip == ip and g.type == "RoCE v2":
            return g.index
    raise SystemExit(f"{device} has no RoCE v2 GID for {ip}")


C_LINES = ["stdbuf", "-oL"]  # a C tool's stdout line by line into a pipe, as rdmacli's JSON lines


def server(cmd: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def stop(proc: subprocess.Popen, timeout: float = 60) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fmt(x: float | None, scale: float = 1e3, missing: str = "hung/failed") -> str:
    return f"{missing:>10}" if x is None else f"{x * scale:10.1f}"


def median(values: list[float | None]) -> float | None:
    """Median of the runs; None if any run failed (a failure is never averaged away)."""
    if not values or any(v is None for v in values):
        return None
    vals = sorted(values)
    return vals[len(vals) // 2]


def ratio(a: float | None, b: float | None) -> str:
    """a / b as "1.23x", or "-" where either is missing, NaN, or b is not positive."""
    bad = a is None or b is None or math.isnan(a) or math.isnan(b) or b <= 0
    return "-" if bad else f"{a / b:.2f}x"
