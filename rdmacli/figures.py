"""Each protocol's figures as one typed record: what a connection counted and measured.

A protocol's `summary()` returns one of these; the outcome keeps it as is, the JSON summary
flattens it into its connection's document (`to_dict`, the same keys as before there were
types), and renderers, `bw`'s totals and the mesh agent choose by the record's type and read
its attributes: nobody asks a dict which keys it happens to have. A field that is None does not
apply (no round-trip time before the first ping) and is left out of the document.

Knows nothing of C, click or rich: the protocols, outcome and render/ all import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

# the least a round trip through a wire can be (two NICs' pipelines and the wire; the fastest RDMA
# round trips measured are above 1 µs): a figure below it was not measured
RTT_FLOOR_US = 0.5


def network_rtt(host_rtt, hold, floor):
    """The network's round trip: the host's less the responder's hold (its word, untrusted), taken
    out only when it leaves at least a wire's `floor`; else the host's. One rule for `lat`, the
    probe (tally) and the probe's C loop (probe.c's `counted`), in any one unit."""
    return host_rtt - hold if 0 <= hold <= host_rtt - floor else host_rtt


def percentile(ordered: Sequence[float], p: float) -> float:
    """The p-th percentile of sorted figures, linearly between ranks (what rping, lat and the
    probe report)."""
    k = (len(ordered) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass(frozen=True)
class Figures:
    """The base: a record that writes itself as a JSON object, nested records included."""

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            out[f.name] = v.to_dict() if isinstance(v, Figures) else v
        return out


def as_dict(figures: Figures | None) -> dict:
    """A connection's figures as its document's keys (none when its protocol counts nothing)."""
    return figures.to_dict() if figures is not None else {}


@dataclass(frozen=True)
class Traffic(Figures):
    """Messages and bytes moved: the totals line adds these up across connections (a one-way
    test has only one side's: the other is None)."""

    messages_sent: int | None = None
    messages_received: int | None = None
    bytes_sent: int | None = None
    bytes_received: int | None = None


# -- ping (rping) ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RttSummary(Figures):
    """ping(8)'s min/avg/max/mdev, with p50 and p99, in µs."""

    min: float
    avg: float
    max: float
    mdev: float
    p50: float
    p99: float


@dataclass(frozen=True)
class PingFigures(Figures):
    """A ping client's: ping(8)'s counts and round trips."""

    pings_sent: int = 0
    pings_completed: int = 0
    pings_failed: int = 0
    size_bytes: int = 0
    pings_validated: int | None = None  # -V only
    rtt_us: RttSummary | None = None
    time_ms: float | None = None
    throughput_mbps: float | None = None
    stopped_by: str | None = None  # an open-ended run's normal end: "deadline" or a signal


@dataclass(frozen=True)
class PingServed(Figures):
    """A ping server's, per client."""

    pings_served: int = 0
    size_bytes: int = 0


# -- connect, listen (ucmatose) ----------------------------------------------------------------
@dataclass(frozen=True)
class ExchangeFigures(Traffic):
    """ucmatose's message exchange, either side."""

    messages_expected: int = 0
    size_bytes: int = 0
    sends_confirmed_by_disconnect: int = 0  # sends whose completion the peer's DREQ stood for


# -- UD (udaddy) and multicast (mckey) ---------------------------------------------------------
@dataclass(frozen=True)
class JoinInfo(Figures):
    """What a multicast join gave: mckey's 'joined dgid: %s mlid 0x%x sl %d'."""

    mgid: str
    mlid: int
    sl: int
    qkey: int
    group: str


@dataclass(frozen=True)
class DatagramFigures(Figures):
    """UD and multicast datagrams: what was expected, sent, received and lost. A multicast
    member says whether it sent or received (`member`) and what it joined."""

    datagrams_expected: int = 0
    datagrams_received: int | None = None  # a multicast sender receives nothing
    datagrams_sent: int | None = None  # a multicast receiver sends nothing
    datagrams_lost: int | None = None
    size_bytes: int = 0
    remote_qpn: int | None = None  # UD: the peer's QP
    member: str | None = None  # multicast: sender or receiver
    mgid: str | None = None
    mlid: int | None = None
    sl: int | None = None
    qkey: int | None = None
    group: str | None = None

    @property
    def received(self) -> bool:
        """The receiving end (its count is what arrived), not the sending one."""
        return self.datagrams_received is not None


# -- bw ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rate(Figures):
    """One stream's messages over its time: Gb/s and messages per second."""

    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0
    gbps: float = 0.0
    msg_per_s: float = 0.0

    @classmethod
    def of(cls, messages: int, size: int, seconds: float) -> Rate:
        secs = max(seconds, 1e-9)
        nbytes = messages * size
        gbps = round(nbytes * 8 / secs / 1e9, 4)
        return cls(messages, nbytes, round(secs, 6), gbps, round(messages / secs, 1))


@dataclass(frozen=True)
class BwFigures(Traffic):
    """A bw client's QP: its stream, and with --bidir the server's as it reported it (null:
    the server's result never came)."""

    op: str = "write"
    size_bytes: int = 0
    depth: int = 0
    elapsed_us: float = 0.0
    gbps: float = 0.0
    msg_per_s: float = 0.0
    bidir: bool = False  # not written (the params say it): with it, reverse is written, null or not
    reverse: Rate | None = None  # the server's stream as it reported it; only a --bidir server sends it
    gbps_received: float | None = None  # SEND --bidir: the server's stream as it arrived here
    data_path: str = "python"  # which loop posted the stream: "native" (rdmacli.native) or "python"

    def to_dict(self) -> dict:
        d = super().to_dict()
        del d["bidir"]
        if self.bidir:
            d.setdefault("reverse", None)  # null: the server's result never came
        return d


@dataclass(frozen=True)
class BwTotals(Figures):
    """All of a bw run's QPs at once (they ran together): the summary's `data.bw`."""

    gbps: float
    msg_per_s: float
    seconds: float
    reverse_gbps: float | None = None  # --bidir: the servers' direction, as they reported it
    total_gbps: float | None = None  # --bidir: both ways
    line_rate_gbps: float | None = None  # the port's rate, where sysfs says it
    line_rate_fraction: float | None = None


@dataclass(frozen=True)
class BwServed(Traffic):
    """A bw server's QP: what arrived (SEND: counted and timed here), and with --bidir what it
    sent back."""

    op: str = "write"
    size_bytes: int = 0
    gbps_sent: float | None = None
    gbps_received: float | None = None


# -- lat ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Percentiles(Figures):
    """perftest's columns in µs: t_min, t_typical (the median), t_avg, t_max, p99, p99.9."""

    t_min: float
    t_typical: float
    t_avg: float
    t_max: float
    p99: float
    p99_9: float


@dataclass(frozen=True)
class LatFigures(Figures):
    """A lat client's: one-way latency as perftest prints it, and the round trips seen by the
    host and by the network (the server's hold time taken out)."""

    op: str = "send"
    size_bytes: int = 0
    iterations: int = 0
    stopped_by: str | None = None
    latency_us: Percentiles | None = None
    rtt_us: Percentiles | None = None
    network_rtt_us: Percentiles | None = None
    data_path: str = "python"  # which loop measured: "native" (rdmacli.native) or "python"
    timestamps: str = "host"  # "nic": nic_latency_us, by the NIC's completion timestamps, too
    timestamps_why: str | None = None  # "host": why not the NIC's (a device without them, ...)
    nic_latency_us: Percentiles | None = None  # one way: half the NIC's period between answers


@dataclass(frozen=True)
class LatServed(Figures):
    op: str = "send"
    size_bytes: int = 0
    iterations_answered: int = 0
    data_path: str = "python"  # which loop answered (most messages): "native" or "python"


# -- the probe (mesh --test probe, watch) -------------------------------------------------------
@dataclass(frozen=True)
class ProbeFigures(Figures):
    """One NIC's probes to one partner in a phase: counts, and the round trips in µs (None when
    no probe came back). rtt_* are the wire's (the responder's hold taken out), host_rtt_p50_us
    the host's own clock."""

    probes_sent: int = 0
    probes_answered: int = 0
    rtt_p50_us: float | None = None
    rtt_p99_us: float | None = None
    rtt_min_us: float | None = None
    rtt_avg_us: float | None = None
    host_rtt_p50_us: float | None = None

    @property
    def lost(self) -> int:
        return self.probes_sent - self.probes_answered


@dataclass(frozen=True)
class StepRow:
    """One of cmtime's steps over a run's connections (engine.timing): how many, the wall time
    from the first start to the last end, and the per-connection average and extremes, in µs."""

    step: str
    count: int
    total_us: float
    avg_us: float
    min_us: float
    max_us: float  # its document: dataclasses.asdict (outcome.Outcome.to_dict)
