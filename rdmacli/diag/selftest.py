"""`rdmacli selftest`: every protocol rdmacli speaks, server and client on this host.

The server side runs in a thread (its own event channel and selector loop; cffi and select
release the GIL), the client in the calling thread; both carry deadlines, so a row always ends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from rdmacli.errors import Cause, RdmacliError, no_device
from rdmacli.protocols.table import CONNECT, MCAST, PING
from rdmacli.protocols.table import PROTOCOLS as PROTOCOL_TABLE

if TYPE_CHECKING:
    from rdmacli.engine.session import Test

GROUP = "239.255.71.71"
PROBE_PORT = 17470  # the path probe's request goes here: any answer proves the path
PROTOCOLS = tuple(PROTOCOL_TABLE)  # connect, ping, ud, mcast


@dataclass
class Row:
    protocol: str
    verdict: str
    time_ms: float
    detail: str
    cause: Cause | None = None  # a failed row's: why, as data (errors.Cause)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cause"] = self.cause.value if self.cause else None
        return d


def rdma_ipv4s() -> list[tuple[str, str]]:
    """(device, IPv4) of every active port with an IPv4 address: from its GIDs where the
    transport's GIDs are addresses (RoCE), else from its netdev (iWARP, IPoIB)."""
    from rdmacli.diag.devices import list_devices
    from rdmacli.diag.local import netdev_address

    found = []
    devices = list_devices(use_pyverbs=False)
    if not devices:  # said as every command says it
        raise no_device()
    for d in devices:
        for p in d.ports:
            if p.state != "ACTIVE":
                continue
            ips = [g.ip for g in p.gids if g.ip and ":" not in g.ip]
            if not ips and p.transport != "RoCE" and p.netdev:
                ips = [ip for ip in [netdev_address(p.netdev, 4)] if ip]
            if ips:
                found.append((d.name, ips[0]))
    if not found:
        raise RdmacliError(
            "no active RDMA port with an IPv4 address to test on",
            hint="see `rdmacli doctor`; without RDMA hardware use `rdmacli lab`",
            cause=Cause.ENVIRONMENT,
        )
    return found


def reaches(src: str, dst: str, timeout_s: float = 3.0) -> str | None:
    """Why `src` cannot reach `dst` over RDMA, or None if it can: a connection request to a
    port nobody listens on must be answered (REJECTED, nothing listening). A resolved address
    alone proves nothing: a cached neighbour resolves while the packets are dropped."""
    from rdmacli.diag.doctor import probe
    from rdmacli.rdma.constants import PS_TCP

    _flow, err = probe(
        dst, PROBE_PORT, PS_TCP, route_only=False, resolve_ms=1500, connect_s=timeout_s, src=src
    )
    if err is None or err.details.get("event") == "REJECTED" or err.cause is Cause.NOBODY_LISTENING:
        return None  # accepted or refused (iWARP: a TCP reset at once): either way the peer answered
    return err.message


def pick_path(server: str | None = None, client: str | None = None) -> tuple[str, str, str]:
    """(server, client, why): across two devices when they reach each other, else one device to
    itself. Two local ports reach each other only with accept_local=1 and rp_filter=0, which a
    healthy host need not have (doctor's "local ports" check explains)."""
    found = rdma_ipv4s()
    server = server or found[0][1]
    if client:
        return server, client, "as given"
    dev = next((d for d, ip in found if ip == server), None)
    same = transport_of(dev)  # a path across two transports (RoCE to iWARP) goes nowhere
    other = next((ip for d, ip in found if d != dev and transport_of(d) == same), None)
    if other is None:
        return server, server, "one device to itself (the only one with an IPv4 address)"
    problem = reaches(other, server)
    if problem is None:
        return server, other, "across two devices"
    return server, server, f"one device to itself: across devices failed ({problem}); see `rdmacli doctor`"


def _pair(server: Test, client: Test, ready_type: type, timeout: float) -> tuple[list, float]:
    """Run the server side in a thread and the client side here (engine.session); returns the
    errors that failed the row, the client's first, and how long it took in ms."""
    from rdmacli.engine.session import run
    from rdmacli.engine.stops import Stops

    ready = threading.Event()
    stops = Stops()
    outcomes: dict = {}
    t0 = time.monotonic()

    def observe(rec) -> None:
        if isinstance(rec, ready_type):
            ready.set()

    def serve() -> None:
        try:
            outcomes["server"] = run(server, observer=observe, stops=stops)
        finally:
            ready.set()

    thread = threading.Thread(target=serve, name="selftest-server", daemon=True)
    thread.start()
    if not ready.wait(timeout):
        stops.stop()
        thread.join(timeout + 5)
        late = RdmacliError(f"the server side was not ready within {timeout:.0f} s", cause=Cause.DEADLINE)
        return [late], (time.monotonic() - t0) * 1e3
    if "server" not in outcomes:  # the server side is still up: run the client against it
        outcomes["client"] = run(client)
        if outcomes["client"].run_error() is None:
            thread.join(5)  # let the server finish its side (its DISCONNECTED, its counts)
    stops.stop()  # a failed client will not come back: the server need not wait it out
    thread.join(timeout + 5)
    # the client's own errors say most about why a row failed: they come first
    errors = []
    for side in ("client", "server"):
        out = outcomes.get(side)
        if out is not None:
            errors += [c.error for c in out.connections if c.error]
            if out.error is not None and out.error not in errors:
                errors.append(out.error)
    return errors, (time.monotonic() - t0) * 1e3


def transport_of(device: str | None):
    from rdmacli.diag.devices import transport_of

    return transport_of(device)


def not_applicable(name: str, server_ip: str) -> Row | None:
    """A row the transport under `server_ip` cannot run (iWARP: UD, multicast), marked so in
    the words the commands refuse it with (transports.refusal)."""
    from rdmacli.diag.local import port_of_address
    from rdmacli.transports import refusal

    found = port_of_address(server_ip)
    transport = transport_of(found[0] if found else None)
    err = transport and refusal(transport, found[0], PROTOCOL_TABLE[name].transport_needs)
    return Row(name, "n/a", 0.0, f"not applicable: {err.message}") if err else None


def run_protocol(name: str, server_ip: str, client_ip: str, *, count: int, size: int, timeout: float) -> Row:
    from rdmacli.engine.protocol import Params
    from rdmacli.engine.session import CLIENT, SERVER, Test
    from rdmacli.engine.settings import Options, Timeouts
    from rdmacli.events import Joined, Ready
    from rdmacli.rdma.constants import PORT_SPACES

    spec = PROTOCOL_TABLE[name]
    skipped = not_applicable(name, server_ip)
    if skipped is not None:
        return skipped
    problem = spec.check_size(size)
    if problem:
        return Row(name, "fail", 0.0, problem, Cause.USAGE)
    common = dict(
        params=Params(count=count, size=size, validate=spec is PING),
        timeouts=Timeouts(2000, min(10.0, timeout), min(10.0, timeout), timeout, timeout),
        options=Options(ps=PORT_SPACES[spec.default_port_space]),
    )
    if spec is MCAST:
        server = Test("selftest", spec, SERVER, host=GROUP, bind=server_ip, **common)
        client = Test("selftest", spec, CLIENT, host=GROUP, bind=client_ip, **common)
        ready: type = Joined
        what = f"{count} datagrams of {size} B to {GROUP}"
    else:
        port = spec.selftest_port
        server = Test("selftest", spec, SERVER, port=port, bind=server_ip, **common)
        client = Test("selftest", spec, CLIENT, host=server_ip, port=port, bind=client_ip, **common)
        ready = Ready
        if spec is PING:
            what = f"{count} validated pings of {size} B"
        else:
            what = f"{count} {'messages' if spec is CONNECT else 'datagrams'} of {size} B each way"
    errors, ms = _pair(server, client, ready, timeout)
    if errors:
        first = errors[0]
        if isinstance(first, RdmacliError):
            return Row(name, "fail", round(ms, 1), first.message, first.cause)
        return Row(name, "fail", round(ms, 1), f"{type(first).__name__}: {first}", Cause.INTERNAL)
    return Row(name, "pass", round(ms, 1), f"{what}, {client_ip} -> {server_ip}")
