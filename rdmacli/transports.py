"""The three RDMA transports, and what each can do, in one table: the commands refuse, the
diagnosis reads GIDs and doctor and selftest speak from these rows, never from a device's name.

Which transport a port runs is read from sysfs (diag.devices.transport_of): a device whose
node_type is RNIC is iWARP; a CA is InfiniBand or RoCE by its port's link layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError

# what a test may need of its transport (Transport's fields of the same names)
DATAGRAMS = "datagrams"
MULTICAST = "multicast"
IMMEDIATE = "immediate"


@dataclass(frozen=True)
class Transport:
    name: str  # as ibv_devinfo's `transport` and rdma_cm(7) name it
    datagrams: bool  # UD QPs: udaddy, mckey, the mesh's probe and watch
    multicast: bool
    immediate: bool  # SEND or RDMA WRITE with immediate data (lat --op write, bw --bidir)
    atomics: bool
    ip_gids: bool  # the GID table holds the port's IP addresses (RoCE); else the port's own ids
    private_data: int  # bytes a connection request may carry to the peer (rdma_connect(3))
    words: str  # what it is, for people

    def lacks(self, needs: tuple[str, ...]) -> list[str]:
        return [n for n in needs if not getattr(self, n)]


INFINIBAND = Transport(name="InfiniBand", datagrams=True, multicast=True, immediate=True, atomics=True,
                       ip_gids=False, private_data=56, words="InfiniBand")  # fmt: skip
ROCE = Transport(name="RoCE", datagrams=True, multicast=True, immediate=True, atomics=True, ip_gids=True,
                 private_data=56, words="RoCE (RDMA over Ethernet)")  # fmt: skip
# iWARP (RFC 5040/5041/5044): RDMA over TCP through MPA. Connected only: no UD QPs, no multicast,
# no immediate data (siw takes the work request, then fails the QP: its transmit path has no such
# opcode), no atomics (siw's atomic_cap is 0); MPA carries up to 256 bytes of private
# data; an RDMA READ's sink is written by the peer's READ response, so it needs remote-write
# access (rping.c registers its sink so for that reason).
IWARP = Transport(name="iWARP", datagrams=False, multicast=False, immediate=False, atomics=False,
                  ip_gids=False, private_data=256, words="iWARP (RDMA over TCP)")  # fmt: skip
TRANSPORTS = {t.name: t for t in (INFINIBAND, ROCE, IWARP)}

NEED_WORDS = {
    DATAGRAMS: "unreliable datagrams (UD QPs)",
    MULTICAST: "multicast",
    IMMEDIATE: "immediate data (SEND or RDMA WRITE with immediate)",
}
INSTEAD = {
    DATAGRAMS: "connected tests work there: `rdmacli connect`, `ping`, `bw`, `lat --op send`; "
    "for a fabric, `rdmacli mesh --test ping` (or rping, connect)",
    MULTICAST: "connected tests work there: `rdmacli connect`, `ping`, `bw`",
    IMMEDIATE: "use `lat --op send`, a one-way `bw` (without --bidir) or perftest's exchange "
    "(--perftest); for a fabric, `rdmacli mesh --test ping` (or rping, connect)",
}


def of(node_type: str | None, link_layer: str | None) -> Transport | None:
    """The transport of a port from sysfs' node_type ("1: CA", "4: RNIC") and link_layer."""
    kind = (node_type or "").split(":", 1)[-1].strip()
    if kind == "RNIC":
        return IWARP
    if kind == "CA":
        return INFINIBAND if link_layer == "InfiniBand" else ROCE if link_layer == "Ethernet" else None
    return None


def refusal(transport: Transport, device: str, needs: tuple[str, ...]) -> RdmacliError | None:
    """The error that refuses a test on `transport` lacking what it needs (exit 3), else None."""
    lacks = transport.lacks(needs)
    if not lacks:
        return None
    what = " and ".join(NEED_WORDS[n] for n in lacks)
    return RdmacliError(
        f"{device} is {transport.words}, which has no {what}",
        hint=INSTEAD[lacks[0]],
        cause=Cause.TRANSPORT,
        details={"transport": transport.name},
    )


def describe(transport: Transport | None, link_layer: str) -> str:
    """A port's transport and what it has not, as doctor says it ("iWARP (no ...)")."""
    if transport is None:
        return link_layer
    lacks = [NEED_WORDS[n] for n in transport.lacks(tuple(NEED_WORDS))]
    over = f" over {link_layer}" if transport is ROCE else ""
    return transport.name + over + (f" (no {', no '.join(lacks)})" if lacks else "")
