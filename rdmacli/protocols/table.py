"""The one table of the protocols rdmacli speaks: what each C tool puts on the wire by default.

Options, defaults, `listen`'s mode choice, selftest, completions and docs all read from here, so a
port or a size limit is written once. Classes are named as strings and imported on demand: the
table itself is import-light (completions and `--help` read it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from rdmacli.rdma.constants import IB_MTU_BYTES

MAX_MTU = max(IB_MTU_BYTES.values())  # a datagram never exceeds the largest IB MTU


@dataclass(frozen=True)
class Spec:
    name: str  # rdmacli's name for it: connect, ping, ud, mcast
    c_tool: str  # the C utility it is wire-compatible with
    transport: str  # "RC" or "UD"
    default_port: int | None  # None: the protocol has no port (multicast joins a group)
    port_spaces: tuple[str, ...]  # the first is the default
    default_count: int | None  # None: until interrupted
    default_size: int
    min_size: int
    max_size: int  # the largest SIZE a server of ours accepts by default
    selftest_port: int | None  # apart from the tools' defaults, so a running server is not hit
    client: str  # "module:Class"
    server: str

    @property
    def default_port_space(self) -> str:
        return self.port_spaces[0]

    def client_class(self):
        return _load(self.client)

    def server_class(self):
        return _load(self.server)

    def check_size(self, size: int) -> str | None:
        """A reason SIZE is out of range, in the C tool's words where it has some."""
        if self.min_size <= size <= self.max_size:
            return None
        if self.name == "ping":  # rping.c's own message
            return f"Invalid size {size} (valid range is {self.min_size} to {self.max_size})"
        return f"size {size} is outside {self.min_size}..{self.max_size} for {self.name}"


def _load(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


PROTOCOLS: dict[str, Spec] = {
    s.name: s
    for s in (
        Spec(
            "connect",
            "ucmatose",
            "RC",
            7471,
            ("tcp", "ib"),
            10,
            100,
            0,
            64 * 1024 * 1024,
            17471,
            "rdmacli.protocols.cmatose:CmatoseClient",
            "rdmacli.protocols.cmatose:CmatoseServer",
        ),
        Spec(
            "ping",
            "rping",
            "RC",
            7174,
            ("tcp",),
            None,
            64,
            23,  # sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ") in rping.c
            65535,
            17174,
            "rdmacli.protocols.rping:RpingClient",
            "rdmacli.protocols.rping:RpingServer",
        ),
        Spec(
            "ud",
            "udaddy",
            "UD",
            7174,
            ("udp", "ipoib"),
            10,
            100,
            0,
            MAX_MTU,
            17175,
            "rdmacli.protocols.udaddy:UdClient",
            "rdmacli.protocols.udaddy:UdServer",
        ),
        Spec(
            "mcast",
            "mckey",
            "UD",
            None,
            ("udp", "ipoib"),
            10,
            100,
            1,
            MAX_MTU,
            None,
            "rdmacli.protocols.mckey:McastSender",
            "rdmacli.protocols.mckey:McastReceiver",
        ),
    )
}
CONNECT, PING, UD, MCAST = (PROTOCOLS[n] for n in ("connect", "ping", "ud", "mcast"))
# `rdmacli events`: the bare rdma_cm flow, no data (cmtime's steps); not a wire protocol of its own
EVENTS = Spec(
    "events",
    "cmtime",
    "RC",
    CONNECT.default_port,
    CONNECT.port_spaces,
    0,
    0,
    0,
    0,
    None,
    "rdmacli.protocols.bare:BareClient",
    "rdmacli.protocols.bare:BareServer",
)


# perftest's jobs (`rdmacli bw`, `rdmacli lat`): rdmacli to rdmacli, on perftest's default port;
# not C-tool wire protocols, so not in PROTOCOLS (selftest, mesh tests)
BW = Spec("bw", "ib_write_bw", "RC", 18515, ("tcp",), None, 65536, 1, 64 << 20, None,
          "rdmacli.protocols.bw:BwClient", "rdmacli.protocols.bw:BwServer")  # fmt: skip
LAT = Spec("lat", "ib_send_lat", "RC", 18515, ("tcp",), 1000, 64, 8, 1 << 20, None,
           "rdmacli.protocols.lat:LatClient", "rdmacli.protocols.lat:LatServer")  # fmt: skip


def mode_of(*, ud: bool = False, ping: bool = False, bw: bool = False, lat: bool = False) -> Spec:
    """The protocol a `connect`/`listen` invocation speaks, from its mode flags."""
    return UD if ud else PING if ping else BW if bw else LAT if lat else CONNECT


def known_ports() -> dict[int, str]:
    """Default port -> what speaks there (for completions and docs)."""
    out: dict[int, list[str]] = {}
    for s in PROTOCOLS.values():
        if s.default_port is not None:
            out.setdefault(s.default_port, []).append(f"{s.c_tool} / {s.name}")
    return {p: ", ".join(names) for p, names in out.items()}
