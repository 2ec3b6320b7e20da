"""A port's counters around a test: what the NIC saw that the verbs never say (the reader,
below the engine; what the counters explain about a failure is diag/counters.py's policy).

A test over a lossy link often passes slowly or fails with a deadline: the words of a dead link.
The NIC knows better: its retransmit, sequence-error and timeout counters move. Every file under
a port's `counters/` and `hw_counters/` (and the device's own `hw_counters/`) is read by name,
whatever the driver (rxe, mlx5, irdma, ...), before and after; the deltas that are not zero are
reported, and the known names are sorted into kinds (loss, rnr, link, errors, congestion).

Counters belong to the port, not to a process: everything on the port moves them. A delta that
goes backwards (a reset, a 32-bit wrap) is never negative: it is taken as counted from zero and
flagged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

SYSFS = "/sys/class/infiniband"  # diag.devices reads the same tree

MAX_FILES = 512  # per directory: a counter directory is a few dozen files on every driver
MAX_BYTES = 64  # a counter file holds one decimal number

# What a counter's movement means, by the names drivers use (rxe, mlx5, the IB PMA counters).
KINDS = {
    "loss": (
        # the requester retransmitted, or the responder saw a gap or a repeat: packets were lost
        "completer_retry_err", "retry_exceeded_err", "duplicate_request", "out_of_seq_request",
        "rcvd_seq_err", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
        "implied_nak_seq_err", "req_transport_retries_exceeded", "rx_icrc_encapsulated",
        "resp_cqe_flush_error", "req_cqe_flush_error",
    ),
    "rnr": (
        "rnr_nak_retry_err", "rcvd_rnr_err", "send_rnr_err", "retry_rnr_exceeded_err",
        "req_rnr_retries_exceeded", "resp_rnr_nak",
    ),
    "link": (
        "link_downed", "symbol_error", "link_error_recovery", "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
    ),
    "errors": (
        "port_rcv_errors", "port_xmit_discards", "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_rcv_constraint_errors",
        "VL15_dropped", "send_err", "rx_write_requests_err", "rx_read_requests_err",
    ),
    "congestion": (
        "np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets", "rp_cnp_ignored",
    ),
}  # fmt: skip
KIND_OF = {name: kind for kind, names in KINDS.items() for name in names}


def kind_of(name: str) -> str | None:
    """A counter's kind by its name. The CM's duplicates received are loss (the peer is alive
    and asked again: what it sent or our answer was lost); its own retries are not trouble by
    themselves (a dead peer makes them too), only shown."""
    if name.startswith("cm_rx_duplicates."):
        return "loss"
    if name.startswith("cm_tx_retries."):
        return "cm_retries"
    return KIND_OF.get(name.removeprefix("device."))


# the kinds that mean trouble, most telling first (a link that went down also loses packets;
# congestion notifications are the fabric working as configured)
TROUBLE = ("link", "loss", "rnr", "errors")


def port_dirs(device: str, port: int, sysfs: str | None = None) -> list[tuple[str, str]]:
    """(prefix, directory) of every counter directory of a device's port: the verbs counters,
    and the connection manager's per message type (its MADs are lost before any QP exists, so
    a lossy path often shows there first): under the port since Linux 5.14, in
    /sys/class/infiniband_cm before."""
    base = sysfs or SYSFS
    root = os.path.join(base, device)
    pdir = os.path.join(root, "ports", str(port))
    cm = os.path.join(os.path.dirname(base.rstrip("/")), "infiniband_cm", device, str(port))
    return [
        ("", os.path.join(pdir, "counters")),
        ("", os.path.join(pdir, "hw_counters")),
        ("device.", os.path.join(root, "hw_counters")),
        ("cm_rx_duplicates.", os.path.join(pdir, "cm_rx_duplicates")),
        ("cm_tx_retries.", os.path.join(pdir, "cm_tx_retries")),
        ("cm_rx_duplicates.", os.path.join(cm, "cm_rx_duplicates")),
        ("cm_tx_retries.", os.path.join(cm, "cm_tx_retries")),
    ]


def read(device: str, port: int = 1, *, sysfs: str | None = None, only=None) -> dict[str, int]:
    """Every counter of the port by name (a device-wide one as `device.NAME`), or those of
    `only` (names without the prefix: `rdmacli watch` reads one a window, not 37); what cannot
    be read as a non-negative integer is left out. Never raises."""
    out: dict[str, int] = {}
    if not device or "/" in device or device.startswith("."):
        return out
    for prefix, d in port_dirs(device, port, sysfs):
        try:
            names = sorted(os.listdir(d))[:MAX_FILES]
        except OSError:
            continue
        for name in names:
            # lifespan: a setting (ms between refreshes), not a count
            if name == "lifespan" or (only is not None and name not in only):
                continue
            try:
                with open(os.path.join(d, name), "rb") as f:
                    raw = f.read(MAX_BYTES + 1)
            except OSError:
                continue
            text = raw.decode("ascii", "replace").strip()
            if len(raw) <= MAX_BYTES and text.isdigit():
                out.setdefault(prefix + name, int(text))
    return out


@dataclass
class Deltas:
    """What moved on one port during a test: non-zero deltas by name, and the names whose value
    went backwards (reset or wrapped: their delta is counted from zero)."""

    device: str
    port: int
    moved: dict[str, int] = field(default_factory=dict)
    reset: list[str] = field(default_factory=list)

    def kinds(self) -> dict[str, dict[str, int]]:
        """The moved counters of each trouble kind (loss, rnr, link, errors, congestion)."""
        out: dict[str, dict[str, int]] = {}
        for name, n in self.moved.items():
            kind = kind_of(name)
            if kind:
                out.setdefault(kind, {})[name] = n
        return out

    def trouble(self) -> list[str]:
        """The trouble kinds that moved, most telling first."""
        kinds = self.kinds()
        return [k for k in TROUBLE if k in kinds]

    def to_dict(self, kinds: bool = True) -> dict:
        """As the summary's `counters` says a port (a mesh record's leave its kinds out)."""
        d = {"device": self.device, "port": self.port, "moved": dict(self.moved)}
        sorted_ = self.kinds() if kinds else None
        if sorted_:
            d["kinds"] = sorted_
        if self.reset:
            d["reset"] = list(self.reset)
        return d


def summed(deltas: list[Deltas]) -> list[Deltas]:
    """Several tests' ports as one test's: what moved on each port added up, the resets of
    all (a size sweep runs one test per size, one after another)."""
    ports: dict[tuple, Deltas] = {}
    for d in deltas:
        p = ports.setdefault((d.device, d.port), Deltas(d.device, d.port))
        for name, n in d.moved.items():
            p.moved[name] = p.moved.get(name, 0) + n
        p.reset.extend(r for r in d.reset if r not in p.reset)
    return list(ports.values())


def delta(device: str, port: int, before: dict[str, int], after: dict[str, int]) -> Deltas:
    out = Deltas(device, port)
    for name, now in after.items():
        was = before.get(name)
        if was is None:
            continue  # appeared during the test: nothing to compare with
        if now < was:
            out.reset.append(name)
            d = now  # counted again from zero
        else:
            d = now - was
        if d:
            out.moved[name] = d
    return out


class Watch:
    """Counters of every port a test used: read when the test first meets a port, and again at
    its end (`finish`). `reader(device, port) -> dict` is the backend's."""

    def __init__(self, reader):
        self.reader = reader
        self.before: dict[tuple[str, int], dict[str, int]] = {}

    def see(self, device: str | None, port: int | None) -> None:
        if not device:
            return
        key = (device, port or 1)
        if key not in self.before:
            try:
                self.before[key] = self.reader(device, port or 1)
            except (OSError, ValueError):  # sysfs unreadable: a diagnosis, never a reason to fail
                self.before[key] = {}

    def finish(self) -> list[Deltas]:
        out = []
        for (device, port), before in self.before.items():
            try:
                after = self.reader(device, port)
            except (OSError, ValueError):  # the port gone since (a device removed): nothing to compare
                continue
            d = delta(device, port, before, after)
            if d.moved or d.reset:
                out.append(d)
        return out


def trouble_of(deltas: list[Deltas]) -> list[str]:
    """The trouble kinds any of these ports saw, most telling first."""
    seen = {k for d in deltas for k in d.trouble()}
    return [k for k in TROUBLE if k in seen]


def words(deltas: list[Deltas], kinds: tuple[str, ...] = TROUBLE) -> str:
    """'rxe0 port 1: completer_retry_err +35, duplicate_request +3' for the counters of `kinds`."""
    parts = []
    for d in deltas:
        names = {n: v for k, c in d.kinds().items() if k in kinds for n, v in c.items()}
        if names:
            body = ", ".join(f"{n} +{v}" for n, v in sorted(names.items()))
            parts.append(f"{d.device} port {d.port}: {body}")
    return "; ".join(parts)
