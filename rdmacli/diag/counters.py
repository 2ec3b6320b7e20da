"""What a port's counters explain about a failure: a deadline while the NIC retransmitted is
packet loss, RNR or link errors, with advice (the policy, above the engine; the engine is handed
it through the backend, `RdmaBackend.explain`). The reader is rdmacli/counters.py."""

from __future__ import annotations

from rdmacli.counters import (  # noqa: F401 (the reader's names, for the policy's callers)
    KIND_OF,
    KINDS,
    TROUBLE,
    Deltas,
    Watch,
    delta,
    kind_of,
    read,
    summed,
    trouble_of,
    words,
)
from rdmacli.errors import Cause, RdmacliError

ADVICE = {
    "loss": "packets were lost on the way: check the cable and optics, the switch port's error "
    "counters, and PFC/ECN configuration (a lossless class for RoCE)",
    "rnr": "the receiver had no receive posted in time (RNR): a slow or overloaded peer application",
    "link": "the link went down or saw symbol errors: check the cable, optics and the switch port",
    "errors": "the port dropped or refused packets: check the switch port and the port's MTU",
}


CAUSE_OF_KIND = {
    "link": Cause.LINK_ERRORS,
    "loss": Cause.PACKET_LOSS,
    "rnr": Cause.RNR,
    "errors": Cause.LINK_ERRORS,
}
NAME_OF_KIND = {
    "link": "link errors",
    "loss": "packet loss",
    "rnr": "receiver not ready (RNR)",
    "errors": "port errors",
}
# The causes lost packets explain: a deadline or slot that ran out while the NIC retransmitted,
# a CM request never answered. Not a peer that left (its DREQ, or retries exhausted: a killed
# peer makes the NIC retransmit too, and that is no fault of the fabric), nor UD loss (no
# retransmits there: it says loss already).
EXPLAINED = (Cause.DEADLINE, Cause.OVERRUN, Cause.UNREACHABLE)


def explain(err: RdmacliError | None, deltas: list[Deltas]) -> RdmacliError | None:
    """The error said again as what the counters show (packet loss, RNR, link errors), when it
    is of a kind loss explains and a trouble counter moved on the test's ports; else None."""
    if err is None or err.cause not in EXPLAINED:
        return None
    kinds = trouble_of(deltas)
    if not kinds:
        return None
    kind = kinds[0]
    return RdmacliError(
        f"{NAME_OF_KIND[kind]}: {words(deltas, (kind,))} (reported: {err.message})",
        hint=ADVICE[kind] + "; the counters are the port's, shared by everything on it",
        cause=CAUSE_OF_KIND[kind],
        details={
            **err.details,
            "reported": err.message,
            "reported_cause": err.cause.value,
            "counters": words(deltas),
        },
    )
