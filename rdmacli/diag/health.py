"""`rdmacli check`: this node's RDMA health, judged in seconds for a scheduler's health check.

Each check is a doctor.Check row; the node is unhealthy when any row fails. What is judged: every
port of every device (or those `--expect` names) up (ACTIVE, LinkUp) at its expected rate, with
an IP address where its transport needs one (RoCE, iWARP); a port seen at the last check and gone
now (a removed device); the error counters a healthy NIC does not move (diag/baseline.py). The
fabric's word on this node (watch/word.py) is added by the command. Host settings (memlock, the
data path) are said, not judged: `rdmacli doctor` judges them.

Everything here reads sysfs and one state file: no device is opened, so a check takes
milliseconds and cannot hang on a driver; its deadline (cli/check.py) is a backstop.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rdmacli.diag.devices import DEVICE_NAME, rate_gbps
from rdmacli.diag.doctor import Check
from rdmacli.errors import Cause

MAX_RATE_GBPS = 3200.0  # above any port's line rate (XDR 4x is 800 Gb/s)


@dataclass(frozen=True)
class Expect:
    """--expect DEV:PORT=RATE: this port must be there, up, at RATE Gb/s (at least)."""

    device: str
    port: int
    gbps: float

    @classmethod
    def parse(cls, text: str) -> Expect:
        """Raises ValueError with the words a person reads."""
        where, eq, rate = text.partition("=")
        device, colon, port = where.rpartition(":")
        if not (eq and colon and DEVICE_NAME.fullmatch(device) and port.isdigit() and 1 <= int(port) <= 255):
            raise ValueError(f"{text!r} is not DEVICE:PORT=GBPS (e.g. mlx5_0:1=400)")
        try:
            gbps = float(rate)
        except ValueError:
            gbps = -1.0
        if not 0 < gbps <= MAX_RATE_GBPS:
            raise ValueError(f"{text!r}: the rate is Gb/s, above 0 and at most {MAX_RATE_GBPS:g}")
        return cls(device, int(port), gbps)


def needs_ip(port) -> bool:
    """A RoCE port's GID table holds its netdev's IP addresses: without one, the connection
    manager cannot reach it. (InfiniBand's GIDs are its own; iWARP's are its MAC.)"""
    from rdmacli.transports import TRANSPORTS

    transport = TRANSPORTS.get(port.transport or "")
    return transport is not None and transport.ip_gids


def port_checks(devices, expects: list[Expect], only: set[str] | None = None) -> list[Check]:
    """One row per port judged: up, at its rate, with its address. `only`: these devices; with
    `--expect`, the ports it names (each must exist)."""
    out: list[Check] = []
    wanted = {(e.device, e.port): e for e in expects}
    seen = set()
    for d in devices:
        if only is not None and d.name not in only:
            continue
        for p in d.ports:
            key = (d.name, p.port)
            if wanted and key not in wanted:
                continue
            seen.add(key)
            out.append(_port(d.name, p, wanted.get(key)))
    gone = "`rdmacli devices` lists what is there; a removed device needs its driver reloaded"
    for device, port in sorted(set(wanted) - seen):
        out.append(Check(f"port {device}/{port}", "fail", "not found", gone, Cause.DEVICE_REMOVED))
    if only is not None:
        for name in sorted(only - {d.name for d in devices}):
            out.append(Check(f"device {name}", "fail", "not found", gone, Cause.DEVICE_REMOVED))
    return out


def _port(device: str, p, expect: Expect | None) -> Check:
    name = f"port {device}/{p.port}"
    gbps = rate_gbps(p.rate)
    detail = f"{p.state}, {p.phys_state}, {gbps:g} Gb/s" if gbps is not None else f"{p.state}, {p.phys_state}"
    netdev = p.netdev or "its netdev"
    if p.state != "ACTIVE" or p.phys_state != "LINK_UP":
        if p.state == "INIT" and p.link_layer == "InfiniBand":
            hint = "the port waits for a subnet manager: start opensm on the fabric"
        else:
            hint = f"the link is down: check the cable and the switch port, or `ip link set {netdev} up`"
        return Check(name, "fail", detail, hint, Cause.LOCAL_PORT_DOWN)
    if expect is not None and (gbps is None or gbps < expect.gbps):
        slow = "a link trained below its rate (width or speed down): reseat or replace the cable or optic"
        return Check(name, "fail", f"{detail}, expected {expect.gbps:g} Gb/s", slow, Cause.LINK_ERRORS)
    if needs_ip(p) and not any(g.ip for g in p.gids):
        bare = f"give {netdev} its address (RoCE's GIDs follow it): the connection manager cannot reach it"
        return Check(name, "fail", f"{detail}, no IP address on {netdev}", bare, Cause.LOCAL_ADDRESS_GONE)
    return Check(name, "pass", detail)


def host_checks() -> list[Check]:
    """memlock and the data path, as doctor says them, never failing the check: a scheduler's
    health check judges the fabric, and doctor is where a host's settings are judged."""
    from rdmacli.diag import doctor

    rows = doctor.check_memlock() + doctor.check_data_path()
    return [Check(c.check, "warn" if c.verdict == "fail" else c.verdict, c.detail, c.hint) for c in rows]


def state_dir_default() -> str:
    """Where a root service keeps state (systemd's StateDirectory=rdmacli), or the user's own."""
    if os.geteuid() == 0:
        return "/var/lib/rdmacli"
    return os.path.join(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "rdmacli")
