"""`rdmacli doctor`: the setup checks of users-and-diagnostics.md B.3, cheapest first.

Each check returns Check(name, verdict, detail, hint). Verdicts: pass, warn, fail, info.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import resource
import subprocess
from dataclasses import asdict, dataclass

from rdmacli.diag.devices import Device, list_devices, read_sysfs
from rdmacli.errors import MEMLOCK_HINT, Cause, no_device
from rdmacli.protocols.table import CONNECT

NEEDED_MEMLOCK = 8 * 1024 * 1024  # rdmacli's buffers stay far below this with default options
CAP_IPC_LOCK = 14


# what a failed check means, by the check, where its probe did not say more (errors.Cause)
CHECK_CAUSE = {
    "libraries": Cause.ENVIRONMENT,
    "devices": Cause.ENVIRONMENT,
    "device access": Cause.ENVIRONMENT,
    "local ports": Cause.LOCAL_PORT_DOWN,
    "memlock": Cause.MEMLOCK,
    "route": Cause.ROUTE,
}
# the checks without which nothing else can be examined: a host, not a check, that fails
SETUP_CHECKS = ("libraries", "devices", "device access")


@dataclass
class Check:
    check: str
    verdict: str  # pass | warn | fail | info | skipped
    detail: str
    hint: str | None = None
    cause: Cause | None = None  # for a failed check: why, as data (errors.Cause)

    def __post_init__(self) -> None:
        if self.verdict == "fail" and self.cause is None:
            self.cause = CHECK_CAUSE.get(self.check, Cause.CHECK_FAILED)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cause"] = self.cause.value if self.cause else None
        return d


def check_libraries() -> list[Check]:
    from rdmacli.errors import RdmacliError
    from rdmacli.rdma._ffi import rdmacm

    try:
        rdmacm()
    except RdmacliError as exc:
        return [Check("libraries", "fail", exc.message, exc.hint)]
    providers = (
        glob.glob("/usr/lib/*/libibverbs/*.so")
        + glob.glob("/usr/lib64/libibverbs/*.so")
        + glob.glob("/usr/lib/libibverbs/*.so")
    )
    if not providers:
        return [
            Check(
                "libraries",
                "fail",
                "librdmacm and libibverbs load, but no verbs provider is installed",
                "apt-get install ibverbs-providers (rdma-core)",
            )
        ]
    from rdmacli.rdma.versions import loaded_libraries

    releases = {lib: found.release or "unknown" for lib, found in loaded_libraries().items()}
    if len(set(releases.values())) == 1:  # the files' paths: `rdmacli --version`
        loaded = f"librdmacm and libibverbs of rdma-core {next(iter(releases.values()))}"
    else:
        loaded = ", ".join(f"{lib} of rdma-core {r}" for lib, r in releases.items())
    return [Check("libraries", "pass", f"{loaded}; {len(providers)} verbs providers")]


def check_data_path() -> list[Check]:
    """Which loops bw, lat and the probe measure with: the native data path, loaded for real, or
    the Python loops and why (a warning: everything works, the figures are the interpreter's)."""
    from rdmacli import native

    if native.load() is not None:
        return [Check("data path", "pass", "native (the loops of bw, lat and the probe in C)")]
    why = native.why() or "not built"
    said = "bw, lat and the mesh's probe measure with Python's loops (data_path: python)"
    return [Check("data path", "warn", f"python: {why}", said)]


def check_devices(devices: list[Device]) -> list[Check]:
    if not devices:
        err = no_device()
        return [Check("devices", "fail", err.message, err.hint)]
    return [Check("devices", "pass", ", ".join(f"{d.name} ({d.driver or '?'})" for d in devices))]


def transport_words(p) -> str:
    """The port's transport and what it has not: iWARP's limits said where a person looks first."""
    from rdmacli.transports import TRANSPORTS, describe

    return describe(TRANSPORTS.get(p.transport or ""), p.link_layer)


def check_ports(devices: list[Device]) -> list[Check]:
    out = []
    for d in devices:
        for p in d.ports:
            name = f"port {d.name}/{p.port}"
            detail = f"{p.state}, {p.phys_state}, {transport_words(p)}" + (
                f", MTU {p.active_mtu}" if p.active_mtu else ""
            )
            if p.state == "ACTIVE":
                out.append(Check(name, "pass", detail))
            elif p.state == "INIT" and p.link_layer == "InfiniBand":
                out.append(
                    Check(
                        name,
                        "fail",
                        detail,
                        "the port waits for a subnet manager: start opensm on the fabric",
                    )
                )
            else:
                nd = f" (netdev {p.netdev})" if p.netdev else ""
                out.append(
                    Check(
                        name,
                        "fail",
                        detail,
                        f"the link is down{nd}: check the cable/switch, or "
                        f"`ip link set {p.netdev or 'IFACE'} up`",
                    )
                )
            if p.link_layer == "InfiniBand":
                sm = read_sysfs(f"/sys/class/infiniband/{d.name}/ports/{p.port}/sm_lid")
                if sm in ("0", "0x0"):
                    out.append(
                        Check(
                            f"subnet manager {d.name}/{p.port}",
                            "fail",
                            "SM LID is 0",
                            "no subnet manager answers: start opensm",
                        )
                    )
    return out


def _netdev_ips() -> dict[str, list[str]]:
    r = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True)
    ips: dict[str, list[str]] = {}
    try:
        for link in json.loads(r.stdout or "[]"):
            ips[link["ifname"]] = [a["local"] for a in link.get("addr_info", []) if a.get("scope") != "host"]
    except (ValueError, KeyError):
        pass
    return ips


def check_netdevs_and_gids(devices: list[Device]) -> list[Check]:
    out = []
    ips = _netdev_ips()
    for d in devices:
        for p in d.ports:
            if not p.netdev:
                continue
            state = read_sysfs(f"/sys/class/net/{p.netdev}/operstate") or "unknown"
            addrs = ips.get(p.netdev, [])
            verdict = "pass" if state in ("up", "unknown") and addrs else "fail"
            hint = None
            if state not in ("up", "unknown"):
                hint = f"`ip link set {p.netdev} up`"
            elif not addrs:
                hint = f"give {p.netdev} an IP address: rdma_cm resolves by IP"
            out.append(
                Check(
                    f"netdev {p.netdev}",
                    verdict,
                    f"{d.name}/{p.port} -> {p.netdev} ({state}) {' '.join(addrs) or 'no IP'}",
                    hint,
                )
            )
            if p.transport != "RoCE":  # only RoCE's GIDs are made from the addresses
                continue
            gid_ips = {g.ip for g in p.gids if g.ip and g.type == "RoCE v2"}
            for ip in addrs:
                if ipaddress.ip_address(ip).is_link_local:
                    continue
                if ip in gid_ips:
                    idx = next(g.index for g in p.gids if g.ip == ip and g.type == "RoCE v2")
                    out.append(Check(f"gid {ip}", "pass", f"RoCE v2 GID index {idx} on {d.name}"))
                else:
                    out.append(
                        Check(
                            f"gid {ip}",
                            "fail",
                            f"no RoCE v2 GID for {ip} on {d.name}",
                            "the GID table follows the netdev's addresses; re-add the "
                            "address or recreate the rxe device",
                        )
                    )
    return out


def _has_cap(cap: int) -> bool:
    status = read_sysfs("/proc/self/status") or ""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def check_memlock() -> list[Check]:
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= NEEDED_MEMLOCK:
        text = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
        return [Check("memlock", "pass", f"RLIMIT_MEMLOCK {text}")]
    detail = f"RLIMIT_MEMLOCK is {soft // 1024} KiB; rdmacli may need {NEEDED_MEMLOCK >> 20} MiB"
    hint = MEMLOCK_HINT
    if _has_cap(CAP_IPC_LOCK):
        return [
            Check("memlock", "warn", detail + " (ignored here: CAP_IPC_LOCK, but not for other users)", hint)
        ]
    return [Check("memlock", "fail", detail, hint)]


def check_access() -> list[Check]:
    nodes = ["/dev/infiniband/rdma_cm", *sorted(glob.glob("/dev/infiniband/uverbs*"))]
    missing = [n for n in nodes if not os.path.exists(n)]
    denied = [n for n in nodes if os.path.exists(n) and not os.access(n, os.R_OK | os.W_OK)]
    if missing and nodes[0] in missing:
        return [
            Check("device access", "fail", "/dev/infiniband/rdma_cm does not exist", "`modprobe rdma_ucm`")
        ]
    if denied:
        return [
            Check(
                "device access",
                "fail",
                f"no read/write access to {' '.join(denied)}",
                'add a udev rule KERNEL=="rdma_cm", MODE="0666" (and uverbs*), or run '
                "with access (container: --device)",
            )
        ]
    return [Check("device access", "pass", f"{len(nodes)} device nodes readable and writable")]


def check_sysctls(devices: list[Device]) -> list[Check]:
    netdevs = {p.netdev for d in devices for p in d.ports if p.netdev}
    if len(netdevs) < 2:
        return []
    vals = {
        k: read_sysfs(f"/proc/sys/net/ipv4/conf/all/{k}")
        for k in ("arp_ignore", "arp_announce", "accept_local", "rp_filter")
    }
    detail = ", ".join(f"{k}={v}" for k, v in vals.items())
    if vals["arp_ignore"] == "0":
        arp = Check(
            "sysctl",
            "warn",
            f"{len(netdevs)} RDMA netdevs; {detail}",
            "on multi-interface hosts set net.ipv4.conf.all.arp_ignore=2",
        )
    else:
        arp = Check("sysctl", "pass", detail)
    return [arp, *check_local_ports(sorted(netdevs))]


def local_port_sysctls(netdev: str) -> dict[str, int]:
    """The effective values the kernel uses for one netdev: accept_local is all OR the
    device's, rp_filter the larger of the two (Documentation/networking/ip-sysctl)."""

    def val(scope: str, key: str) -> int:
        v = read_sysfs(f"/proc/sys/net/ipv4/conf/{scope}/{key}")
        return int(v) if v and v.isdigit() else 0

    return {
        "accept_local": val("all", "accept_local") | val(netdev, "accept_local"),
        "rp_filter": max(val("all", "rp_filter"), val(netdev, "rp_filter")),
    }


def check_local_ports(netdevs: list[str]) -> list[Check]:
    """Whether this host's own RDMA ports can reach each other (selftest across devices)."""
    blocked = {}
    for nd in netdevs:
        v = local_port_sysctls(nd)
        if v["accept_local"] != 1 or v["rp_filter"] != 0:
            blocked[nd] = v
    if not blocked:
        return [Check("local ports", "pass", f"{', '.join(netdevs)} can reach each other")]
    detail = "; ".join(
        f"{nd}: accept_local={v['accept_local']} rp_filter={v['rp_filter']}" for nd, v in blocked.items()
    )
    return [
        Check(
            "local ports",
            "info",
            f"this host's RDMA ports cannot reach each other ({detail}); other hosts are not affected",
            "only traffic between two local ports needs it (selftest then uses one device to itself): "
            + " ".join(
                f"sysctl -w net.ipv4.conf.{nd}.accept_local=1 net.ipv4.conf.{nd}.rp_filter=0"
                for nd in blocked
            )
            + " net.ipv4.conf.all.rp_filter=0",
        )
    ]


def local_checks() -> list[Check]:
    checks = check_libraries() + check_data_path()
    devices = list_devices()
    checks += check_devices(devices)
    checks += check_ports(devices)
    checks += check_netdevs_and_gids(devices)
    checks += check_memlock()
    checks += check_access()
    checks += check_sysctls(devices)
    return checks


def check_peer_route(peer: str, devices: list[Device]) -> list[Check]:
    r = subprocess.run(["ip", "-j", "route", "get", peer], capture_output=True, text=True)
    try:
        route = json.loads(r.stdout)[0]
    except (ValueError, IndexError):
        return [
            Check(
                "route",
                "fail",
                f"no route to {peer}: {r.stderr.strip()}",
                f"check `ip route get {peer}` and the address",
            )
        ]
    dev = route.get("dev")
    rdma = {p.netdev: d.name for d in devices for p in d.ports if p.netdev}
    if dev == "lo":
        # a local address: rdma_cm loops back through the device that owns it
        owner = next((d.name for d in devices for p in d.ports for g in p.gids if g.ip == peer), None)
        if owner:
            return [Check("route", "pass", f"{peer} is local, on {owner}")]
    if dev in rdma:
        return [Check("route", "pass", f"{peer} via {dev} ({rdma[dev]}), src {route.get('prefsrc', '?')}")]
    return [
        Check(
            "route",
            "fail",
            f"{peer} is reached via {dev}, which has no RDMA device",
            f"use an address on an RDMA netdev ({', '.join(sorted(rdma)) or 'none'}), "
            "or fix the routing so the peer is reached through one",
        )
    ]


def probe(
    peer: str,
    port: int,
    ps: int,
    *,
    route_only: bool,
    resolve_ms: int,
    connect_s: float,
    src: str | None = None,
):
    """The bare rdma_cm flow to `peer` (engine.session); returns (outcome, error or None)."""
    from rdmacli.engine.session import CLIENT, Test, run
    from rdmacli.engine.settings import Options, Timeouts
    from rdmacli.protocols.table import EVENTS

    test = Test(
        "doctor",
        EVENTS,
        CLIENT,
        host=peer,
        port=port,
        bind=src,
        route_only=route_only,
        timeouts=Timeouts(resolve_ms, connect_s, connect_s, None),
        options=Options(ps=ps),
    )
    outcome = run(test)
    return outcome, outcome.run_error()


def check_peer_resolve(peer: str, ps: int, resolve_ms: int = 2000) -> list[Check]:
    from rdmacli.units import duration

    outcome, err = probe(peer, CONNECT.default_port, ps, route_only=True, resolve_ms=resolve_ms, connect_s=5)
    if err is not None:
        return [Check("resolve", "fail", err.message, err.hint, cause=err.cause)]
    steps = {s.step: s.avg_us for s in outcome.steps_us}
    conn = outcome.connections[0]
    return [
        Check(
            "resolve",
            "pass",
            f"address {duration(steps.get('resolve addr', 0))}, route "
            f"{duration(steps.get('resolve route', 0))}, {conn.local} -> {conn.remote} on "
            f"{conn.device}",
        )
    ]


# what a failed connect probe is called, by its cause (errors.Cause)
CONNECT_KIND = {
    Cause.NOBODY_LISTENING: "nothing is listening",
    Cause.REJECTED: "rejected",
    Cause.UNREACHABLE: "unreachable",
    Cause.DEADLINE: "timed out",
}


def check_peer_connect(peer: str, port: int, ps: int, connect_s: float = 5.0) -> list[Check]:
    _flow, err = probe(peer, port, ps, route_only=False, resolve_ms=2000, connect_s=connect_s)
    name = f"connect {port}"
    if err is None:
        return [Check(name, "pass", f"a server at {peer} port {port} accepted the connection")]
    kind = CONNECT_KIND.get(err.cause, "failed")
    if err.details.get("peer_reason"):
        kind += f" by the application: {err.details['peer_reason']!r}"
    return [Check(name, "fail", f"{kind}: {err.message}", err.hint, cause=err.cause)]


def peer_checks(peer: str, port: int | None, ps: int) -> list[Check]:
    checks = check_peer_route(peer, list_devices(use_pyverbs=False))
    checks += check_peer_resolve(peer, ps)
    if port is not None:
        checks += check_peer_connect(peer, port, ps)
    return checks
