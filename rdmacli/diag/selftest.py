"""`rdmacli selftest`: every protocol rdmacli speaks, server and client on this host.

The server side runs in a thread (its own event channel and selector loop; cffi and select
release the GIL), the client in the calling thread; both carry deadlines, so a row always ends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass

from rdmacli.errors import RdmacliError

PORTS = {"connect": 17471, "ping": 17174, "ud": 17175}  # apart from the tools' defaults
GROUP = "239.255.71.71"
PROTOCOLS = ("connect", "ping", "ud", "mcast")


@dataclass
class Row:
    protocol: str
    verdict: str
    time_ms: float
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def pick_addresses() -> tuple[str, str]:
    """A server and a client IPv4 address with RoCE/IB GIDs, on two devices when there are two."""
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
            exit_code=3,
        )
    server = found[0][1]
    client = next((ip for dev, ip in found if dev != found[0][0]), server)
    return server, client


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
            raise RdmacliError(f"the server side was not ready within {timeout:.0f} s")
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
    from rdmacli.engine.flow import ClientFlow, Options, ServerFlow, Timeouts
    from rdmacli.engine.mcast import McastFlow
    from rdmacli.protocols import cmatose, mckey, rping, udaddy
    from rdmacli.rdma import addr
    from rdmacli.rdma import constants as C

    tmo = Timeouts(2000, min(10.0, timeout), min(10.0, timeout), timeout)
    src = addr.resolve(client_ip, 0)
    if name == "mcast":
        group = addr.resolve(GROUP, 0)

        def make_server(obs):
            return McastFlow(
                group=group,
                src=addr.resolve(server_ip, 0),
                observer=obs,
                make_protocol=lambda: mckey.McastMember(count, size, sender=False),
                timeouts=tmo,
                options=Options(ps=C.PS_UDP),
            )

        def make_client():
            return McastFlow(
                group=group,
                src=src,
                timeouts=tmo,
                options=Options(ps=C.PS_UDP),
                make_protocol=lambda: mckey.McastMember(count, size, sender=True),
            )

        ready = "joined"
        what = f"{count} datagrams of {size} B to {GROUP}"
    else:
        ps = C.PS_UDP if name == "ud" else C.PS_TCP
        bind = addr.resolve(server_ip, PORTS[name], passive=True)
        dst = addr.resolve(server_ip, PORTS[name])
        if name == "connect":
            server_proto, client_proto = (
                lambda: cmatose.CmatoseServer(count, size),
                lambda: cmatose.CmatoseClient(count, size),
            )
            what = f"{count} messages of {size} B each way"
        elif name == "ping":
            problem = rping.check_size(size)
            if problem:
                return Row(name, "fail", 0.0, problem)
            server_proto = lambda: rping.RpingServer(size)  # noqa: E731
            client_proto = lambda: rping.RpingClient(size, count, validate=True)  # noqa: E731
            what = f"{count} validated pings of {size} B"
        else:
            server_proto, client_proto = (
                lambda: udaddy.UdServer(count, size),
                lambda: udaddy.UdClient(count, size),
            )
            what = f"{count} datagrams of {size} B each way"

        def make_server(obs):
            return ServerFlow(
                bind=bind,
                max_clients=1,
                make_protocol=server_proto,
                observer=obs,
                timeouts=tmo,
                options=Options(ps=ps),
            )

        def make_client():
            return ClientFlow(
                dst=dst, src=src, make_protocol=client_proto, timeouts=tmo, options=Options(ps=ps)
            )

        ready = "ready"
    errors, ms = _pair(make_server, make_client, ready, timeout)
    if errors:
        first = errors[0]
        text = first.message if isinstance(first, RdmacliError) else f"{type(first).__name__}: {first}"
        return Row(name, "fail", round(ms, 1), text)
    return Row(name, "pass", round(ms, 1), f"{what}, {client_ip} -> {server_ip}")
