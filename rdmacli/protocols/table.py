"""The one table of the protocols rdmacli speaks: what each C tool puts on the wire by default.

Options, defaults, `listen`'s mode choice, selftest, completions and docs all read from here, so a
port or a size limit is written once. Classes are named as strings and imported on demand: the
table itself is import-light (completions and `--help` read it).
"""

from __future__ import annotations

from rdmacli.engine.spec import Spec
from rdmacli.rdma.constants import IB_MTU_BYTES

MAX_MTU = max(IB_MTU_BYTES.values())  # a datagram never exceeds the largest IB MTU


PROTOCOLS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            name="connect",
            c_tool="ucmatose",
            transport="RC",
            default_port=7471,
            port_spaces=("tcp", "ib"),
            default_count=10,
            default_size=100,
            min_size=0,
            max_size=64 * 1024 * 1024,
            selftest_port=17471,
            client="rdmacli.protocols.cmatose:CmatoseClient",
            server="rdmacli.protocols.cmatose:CmatoseServer",
            hello_kind=1,
        ),
        Spec(
            name="ping",
            c_tool="rping",
            transport="RC",
            default_port=7174,
            port_spaces=("tcp",),
            default_count=None,
            default_size=64,
            min_size=23,  # sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ") in rping.c
            max_size=65535,
            selftest_port=17174,
            client="rdmacli.protocols.rping:RpingClient",
            server="rdmacli.protocols.rping:RpingServer",
            hello_kind=2,
            serves="Serve `rdmacli ping` and rping clients (like rping -s) instead of connect; -S defaults "
            "to {default_size} and grows to what a client asks for, up to --max-size.",
        ),
        Spec(
            name="ud",
            c_tool="udaddy",
            transport="UD",
            default_port=7174,
            port_spaces=("udp", "ipoib"),
            default_count=10,
            default_size=100,
            min_size=0,
            max_size=MAX_MTU,
            selftest_port=17175,
            client="rdmacli.protocols.udaddy:UdClient",
            server="rdmacli.protocols.udaddy:UdServer",
            hello_kind=3,
            serves="Unreliable datagrams, wire-compatible with {c_tool} (port {default_port}).",
        ),
        Spec(
            name="mcast",
            c_tool="mckey",
            transport="UD",
            default_port=None,
            port_spaces=("udp", "ipoib"),
            default_count=10,
            default_size=100,
            min_size=1,
            max_size=MAX_MTU,
            selftest_port=None,
            client="rdmacli.protocols.mckey:McastSender",
            server="rdmacli.protocols.mckey:McastReceiver",
        ),
    )
}
CONNECT, PING, UD, MCAST = (PROTOCOLS[n] for n in ("connect", "ping", "ud", "mcast"))
# `rdmacli events`: the bare rdma_cm flow, no data (cmtime's steps); not a wire protocol of its own
EVENTS = Spec(
    name="events",
    c_tool="cmtime",
    transport="RC",
    default_port=CONNECT.default_port,
    port_spaces=CONNECT.port_spaces,
    default_count=0,
    default_size=0,
    min_size=0,
    max_size=0,
    selftest_port=None,
    client="rdmacli.protocols.bare:BareClient",
    server="rdmacli.protocols.bare:BareServer",
)


# perftest's jobs (`rdmacli bw`, `rdmacli lat`): rdmacli to rdmacli, on perftest's default port;
# not C-tool wire protocols, so not in PROTOCOLS (selftest, mesh tests)
BW = Spec(
    name="bw",
    c_tool="ib_write_bw",
    transport="RC",
    default_port=18515,
    port_spaces=("tcp",),
    default_count=None,
    default_size=65536,
    min_size=1,
    max_size=64 << 20,
    selftest_port=None,
    client="rdmacli.protocols.bw:BwClient",
    server="rdmacli.protocols.bw:BwServer",
    hello_kind=4,
    serves="Serve `rdmacli bw` clients (perftest's ib_*_bw job).",
)
LAT = Spec(
    name="lat",
    c_tool="ib_send_lat",
    transport="RC",
    default_port=18515,
    port_spaces=("tcp",),
    default_count=1000,
    default_size=64,
    min_size=8,
    max_size=1 << 20,
    selftest_port=None,
    client="rdmacli.protocols.lat:LatClient",
    server="rdmacli.protocols.lat:LatServer",
    hello_kind=5,
    serves="Serve `rdmacli lat` clients (ib_send_lat's job).",
)


def rows() -> tuple[Spec, ...]:
    """Every row: the C tools' protocols, the bare flow and perftest's jobs."""
    return (*PROTOCOLS.values(), EVENTS, BW, LAT)


def modes() -> tuple[Spec, ...]:
    """The rows `listen` serves by a flag of their name (--ping, --ud, --bw, --lat), in order."""
    return tuple(s for s in rows() if s.serves)


def mode_of(name: str | None) -> Spec:
    """The protocol a `connect`/`listen` invocation speaks: its mode flag's row, else connect."""
    return next((s for s in modes() if s.name == name), CONNECT)


def known_ports() -> dict[int, str]:
    """Default port -> what speaks there (for completions and docs)."""
    out: dict[int, list[str]] = {}
    for s in PROTOCOLS.values():
        if s.default_port is not None:
            out.setdefault(s.default_port, []).append(f"{s.c_tool} / {s.name}")
    return {p: ", ".join(names) for p, names in out.items()}
