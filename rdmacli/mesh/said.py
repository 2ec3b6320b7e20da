"""Words a mesh run says beside its verdict, each from one finding: the slot's margin (pairs
that take most of their round) and the datagrams the probe's NICs dropped."""

from __future__ import annotations

import math

from rdmacli.mesh.contract import MAX_ROUND_S
from rdmacli.mesh.plan import Plan
from rdmacli.mesh.report import Pair

SLOT_FULL = 0.7  # of a slot: a pair that takes more is close to overrunning


def margin(plan: Plan, slowest: tuple[float, Pair] | None) -> str | None:
    """Words when pairs take most of their slot (measured by the agents: a pair's setup, test
    and teardown), with the round time that would leave room."""
    if slowest is None or slowest[0] <= SLOT_FULL * plan.spec.round_s:
        return None
    took, p = slowest
    want = math.ceil(took / SLOT_FULL * 2) / 2
    pair = f"{plan.spec.names[p.a]}-{plan.spec.names[p.b]}, round {p.round}"
    if want > MAX_ROUND_S:  # no slot holds it: a clock that jumped, or an agent's word
        return (
            f"a pair took {took:.1f} s of its {plan.spec.round_s:g} s slot ({pair}), more than any "
            f"--round-time allows ({MAX_ROUND_S:g} s): a node's clock jumped, or its agent's figure is wrong"
        )
    return (
        f"pairs take up to {took:.1f} s of their {plan.spec.round_s:g} s slot ({pair}): a slower "
        f"pair will overrun; raise --round-time to {want:g} or more"
    )


def dropped_words(plan: Plan, dropped: dict) -> list[str]:
    """The probe's NICs that dropped datagrams claiming this run (at most one line): tagged under
    another key than the run's (forged), or from another QP than SIDR named (foreign: only the
    run's agents hold its key). None was answered or counted, so no verdict moved."""
    nics = [(rank, *row) for rank, rows in sorted(dropped.items()) for row in rows]
    if not nics:
        return []
    forged, foreign = sum(n[2] for n in nics), sum(n[3] for n in nics)
    rails = plan.rails > 1
    where = ", ".join(plan.spec.names[r] + (f":{k}" if rails else "") for r, k, _, _ in nics[:8])
    more = f" and {len(nics) - 8} more" if len(nics) > 8 else ""
    return [
        f"{len(nics)} NIC(s) dropped probe datagrams claiming this run ({where}{more}): {forged} with "
        f"a wrong tag, {foreign} from another QP than the partner's SIDR named; none was answered "
        "or counted (something on the fabric sends probes it did not get from this run's agents)"
    ]
