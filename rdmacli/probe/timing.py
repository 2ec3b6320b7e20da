"""The probe phase's arithmetic, as pure functions of numbers: the coordinator sizes a mesh's
round with it (mesh/plan), watch sizes its windows with it (watch/plan), and each NIC paces its
probes with it (nic): one set of numbers, said here."""

from __future__ import annotations

RESOLVE_S = 5.0  # from the phase's start, for every peer's SIDR (asked again every ATTEMPT_S)
ATTEMPT_S = 1.0  # one SIDR exchange takes a millisecond on hardware; unanswered, it is asked again,
MAX_ATTEMPT_S = 8.0  # each time waiting twice as long, up to this (a partner starved of CPU
# answers late: the lab's 32 emulated NICs on two CPUs needed seconds, and asking again every
# second only added load)
GAP_S = 0.1  # between two probes to one peer, at least
MAX_RATE = 250.0  # probes a second a NIC sends, at most: 8 NICs of one node share one Python (its GIL)
TAIL_S = 3.0  # after the last probe, for the last replies (a reply later than this is lost)
MAX_RESOLVING = 64  # SIDR exchanges in flight a NIC
SEND_DEPTH, RECV_DEPTH = 256, 1024
SPREAD = 0.6  # of a peer's send window its probes are spread over; the rest is for catching up
# a NIC's QP is up this long before the phase starts, so every partner's first SIDR finds it;
# no less than the coordinator's go lead (plan.GO_LEAD_S): once open, the start no longer moves
OPEN_LEAD_S = 2.0
MAX_KNOWN = 4096  # partners a NIC keeps from window to window, at most


def attempt_s(attempt: int) -> float:
    """How long SIDR attempt number `attempt` (from 1) waits for its answer."""
    return min(ATTEMPT_S * 2 ** max(attempt - 1, 0), MAX_ATTEMPT_S)


def phase_s(partners: int, count: int) -> float:
    """The probe phase's length for a NIC with `partners` peers, `count` probes each: their
    SIDR, the probes spread at GAP_S or MAX_RATE, whichever is slower, and the tail."""
    return RESOLVE_S + max(count * GAP_S, partners * count / MAX_RATE) + TAIL_S


def tail_s(span: float) -> float:
    """Of a phase `span` seconds long, the end kept for the last replies (no probe leaves then)."""
    return min(TAIL_S, span / 3)


def resolve_end(begin: float, send_end: float, partners: int, count: int) -> float:
    """Until when a NIC asks its partners for their QP numbers: as long as their probes still fit
    in the send window (at least RESOLVE_S), so that a SIDR slowed by a busy host costs probes,
    not the pair."""
    room = count * max(GAP_S / 4, partners / MAX_RATE) / SPREAD  # the last peer's probes
    return max(begin + 0.5, min(max(begin + RESOLVE_S, send_end - room), send_end - 0.5))


def step_s(send_left_s: float, probes_left: int, partners: int) -> float:
    """Between two probes to one partner: what is left spread over SPREAD of what is left of the
    send window (a busy host catches up in the rest), never faster than GAP_S / 4 or MAX_RATE
    over all partners."""
    return max(SPREAD * send_left_s / probes_left, GAP_S / 4, partners / MAX_RATE)


def rate(probes: int, send_span_s: float) -> float:
    """Probes a second a NIC sends at most when each partner's `probes` are spread over SPREAD
    of a send span (step_s's pace)."""
    return probes / (SPREAD * send_span_s)


def most_probes(at_rate: float, send_span_s: float) -> float:
    """rate() solved for the probes: how many fit in a send span at `at_rate`."""
    return at_rate * SPREAD * send_span_s


def replies_bound(count: int) -> int:
    """A partner's probes a NIC answers in a window, at most, from the QP SIDR named and from
    any other QP claiming it (probe.c answer, PythonLoop._answer): it sends `count`, and a few
    of the window before may still come. A key holder flooding probes in its name costs the
    partner nothing, and costs us at most this many replies."""
    return 2 * count + 8


def replaced_bound(partners: int) -> int:
    """Reply AHs a NIC may replace in a window (probe.c answer, PythonLoop._answer): a restart
    and a claim a partner, with room; past it, probes from a QP that claims a partner and has
    no AH yet are dropped (counted foreign). What a window holds stays bounded by its partners."""
    return 4 * partners + 64
