"""One partner's probes, counted, and one end's verdict on them: the figures a pair record
carries, and pass or fail with the cause in words."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import ProbeFigures, network_rtt, percentile
from rdmacli.native.header import const

FLOOR_NS = const("RDMACLI_FLOOR_NS")  # no wire's round trip is shorter (figures.RTT_FLOOR_US)


@dataclass
class Tally:
    """What one NIC's probes to one peer came to: the prober's own counts and clock."""

    sent: int = 0
    answered: int = 0
    pending: dict[int, int] = field(default_factory=dict)  # seq -> t1 (ns)
    host_ns: list[int] = field(default_factory=list)
    net_ns: list[int] = field(default_factory=list)

    def posted(self, seq: int, t1: int) -> None:
        self.sent += 1
        self.pending[seq] = t1

    def replied(self, seq: int, t4: int, hold_ns: int) -> bool:
        """A reply to probe `seq`: counted once; the responder's hold (its word) is taken out
        only when it is less than the whole round trip, never below the wire's floor."""
        t1 = self.pending.pop(seq, None)
        if t1 is None or t4 < t1:
            return False
        host = max(t4 - t1, FLOOR_NS)
        self.answered += 1
        self.host_ns.append(host)
        self.net_ns.append(network_rtt(host, hold_ns, FLOOR_NS))
        return True

    @property
    def lost(self) -> int:
        return self.sent - self.answered

    def figures(self) -> ProbeFigures:
        """The pair's figures: counts, and the round trips in µs."""
        if not self.net_ns:
            return ProbeFigures(probes_sent=self.sent, probes_answered=self.answered)
        net = sorted(self.net_ns)
        return ProbeFigures(
            probes_sent=self.sent,
            probes_answered=self.answered,
            rtt_p50_us=_us(percentile(net, 50)),
            rtt_p99_us=_us(percentile(net, 99)),
            rtt_min_us=_us(net[0]),
            rtt_avg_us=_us(statistics.fmean(net)),
            host_rtt_p50_us=_us(statistics.median(self.host_ns)),
        )


def _us(ns: float) -> float:
    return round(ns / 1000.0, 1)


def verdict(
    tally: Tally, resolved: bool, error: RdmacliError | None, attempts: int = 1
) -> tuple[str, RdmacliError | None]:
    """One end's result for a pair: pass when any probe came back (its loss is its figure,
    which the verdict reads); fail when the peer never resolved or nothing came back."""
    if not resolved and not attempts and error is None:  # this end's own lateness, not the partner's
        return "fail", RdmacliError(
            "this NIC never asked the partner for its QP number: its loop first ran after the "
            "phase's SIDR window (this node's agent was late or starved of CPU)",
            cause=Cause.AGENT,
        )
    if not resolved:
        return "fail", error or RdmacliError(
            "the partner's NIC never answered its SIDR request (no QP number to probe)",
            cause=Cause.UNREACHABLE,
        )
    if tally.sent == 0:
        return "fail", RdmacliError(
            "the partner's NIC answered too late in the phase for any probe: raise --round-time",
            cause=Cause.DEADLINE,
        )
    if tally.answered == 0:
        return "fail", RdmacliError(
            f"no probe answered: {tally.sent} of {tally.sent} lost (the SIDR exchange worked, "
            "datagrams did not)",
            hint="check the fabric between the two NICs (MTU, ACLs, the switch port) and their counters",
            cause=Cause.LOSS,
        )
    return "pass", None
