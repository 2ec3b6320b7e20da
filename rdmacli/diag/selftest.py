"""`rdmacli selftest`: every protocol rdmacli speaks, server and client on this host.

The server side runs in a thread (its own event channel and selector loop; cffi and select
release the GIL), the client in the calling thread; both carry deadlines, so a row always ends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.protocols.table import CONNECT, MCAST, PING
from rdmacli.protocols.table import PROTOCOLS as PROTOCOL_TABLE

GROUP = "239.255.71.71"
PROBE_PORT = 17470  # the path probe's request goes here: any answer proves the path
PROTOCOLS = tuple(PROTOCOL_TABLE)  # connect, ping, ud, mcast


@dataclass
class Row:
    protocol: str
    verdict: str
    time_ms: float
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def rdma_ipv4s() -> list[tuple[str, str]]:
    """(device, IPv4) of every active port with a RoCE/IB GID for an IPv4 address."""
    from rdmacli.diag.devices import list_devices

    found = []
    for d in list_devices(use_pyverbs=False):
        for p in d.ports:
            if p.state != "ACTIVE":
                continue
            ips = [g.ip for g in p.gids if g.ip and ":" not in g.ip]
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
    if err is None or err.details.get("event") == "REJECTED":
        return None  # accepted or refused: either way the peer's CM answered
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
    other = next((ip for d, ip in found if d != dev), None)
    if other is None:
        return server, server, "one device to itself (the only one with an IPv4 address)"
    problem = reaches(other, server)
    if problem is None:
        return server, other, "across two devices"
    return server, server, f"one device to itself: across devices failed ({problem}); see `rdmacli doctor`"


def _pair(make_server, make_client, ready_type: str, timeout: float) -> tuple[list, float]:
    """Run a server flow in a thread and a client flow here; returns (errors, ms)."""
    ready = threading.Event()
    errors: list = []
    t0 = time.monotonic()

    def observe(rec: dict) -> None:
        if rec.get("type") == ready_type:
            ready.set()

    server = make_server(observe)

    def serve() -> None:
        try:
            server.run()
        except Exception as exc:  # reported as the row's reason
            errors.append(exc)
        finally:
            ready.set()
            server.close()

    thread = threading.Thread(target=serve, name="selftest-server", daemon=True)
    thread.start()
    client = None
    try:
        if not ready.wait(timeout):
            raise RdmacliError(f"the server side was not ready within {timeout:.0f} s", cause=Cause.DEADLINE)
        if errors:
            return errors, (time.monotonic() - t0) * 1e3
        client = make_client()
        client.run()
    except Exception as exc:
        errors.append(exc)
    finally:
        if client is not None:
            client.close()
        client_failed = errors or (client is not None and client.first_error() is not None)
        if not client_failed:
            thread.join(5)  # let the server finish its side (its DISCONNECTED, its counts)
        server.stop()  # a failed client will not come back: the server need not wait it out
        thread.join(timeout + 5)
    # the client's own errors say most about why a row failed: they come first
    conn_errors = [
        c.error for flow in (client, server) if flow is not None for c in flow.all_conns if c.error
    ]
    return conn_errors + [e for e in errors if e not in conn_errors], (time.monotonic() - t0) * 1e3


def run_protocol(name: str, server_ip: str, client_ip: str, *, count: int, size: int, timeout: float) -> Row:
    from rdmacli.engine.client import ClientFlow
    from rdmacli.engine.flow import Options, Timeouts
    from rdmacli.engine.mcast import McastFlow
    from rdmacli.engine.server import ServerFlow
    from rdmacli.rdma import addr
    from rdmacli.rdma.constants import PORT_SPACES

    spec = PROTOCOL_TABLE[name]
    problem = spec.check_size(size)
    if problem:
        return Row(name, "fail", 0.0, problem)
    tmo = Timeouts(2000, min(10.0, timeout), min(10.0, timeout), timeout, timeout)
    opts = Options(ps=PORT_SPACES[spec.default_port_space])
    src = addr.resolve(client_ip, 0)
    client_cls, server_cls = spec.client_class(), spec.server_class()
    if spec is MCAST:
        group = addr.resolve(GROUP, 0)

        def make_server(obs):
            return McastFlow(
                group=group,
                src=addr.resolve(server_ip, 0),
                observer=obs,
                make_protocol=lambda: server_cls(count, size),
                timeouts=tmo,
                options=opts,
            )

        def make_client():
            return McastFlow(
                group=group,
                src=src,
                timeouts=tmo,
                options=opts,
                make_protocol=lambda: client_cls(count, size),
            )

        ready = "joined"
        what = f"{count} datagrams of {size} B to {GROUP}"
    else:
        bind = addr.resolve(server_ip, spec.selftest_port, passive=True)
        dst = addr.resolve(server_ip, spec.selftest_port)
        if spec is PING:
            server_proto = lambda: server_cls(size)  # noqa: E731
            client_proto = lambda: client_cls(size, count, validate=True)  # noqa: E731
            what = f"{count} validated pings of {size} B"
        else:
            server_proto = lambda: server_cls(count, size)  # noqa: E731
            client_proto = lambda: client_cls(count, size)  # noqa: E731
            what = f"{count} {'messages' if spec is CONNECT else 'datagrams'} of {size} B each way"

        def make_server(obs):
            return ServerFlow(
                bind=bind, max_clients=1, make_protocol=server_proto, observer=obs, timeouts=tmo, options=opts
            )

        def make_client():
            return ClientFlow(dst=dst, src=src, make_protocol=client_proto, timeouts=tmo, options=opts)

        ready = "ready"
    errors, ms = _pair(make_server, make_client, ready, timeout)
    if errors:
        first = errors[0]
        text = first.message if isinstance(first, RdmacliError) else f"{type(first).__name__}: {first}"
        return Row(name, "fail", round(ms, 1), text)
    return Row(name, "pass", round(ms, 1), f"{what}, {client_ip} -> {server_ip}")
