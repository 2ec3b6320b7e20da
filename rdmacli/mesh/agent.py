"""One agent per node (`rdmacli mesh-agent`): its pairs of the schedule, one JSON line each.

Rounds are time slots from a start time the coordinator chose for all agents: round k of the
run is [start + k*round_s, start + (k+1)*round_s). The start is --start-at at the latest, or
earlier when the coordinator, having heard from every agent, writes `{"go": T}` to their stdin
through the launcher (ClusterShell's worker write, srun --input=all): no start-up races a fixed
launch time, and nothing else ever flows towards the agents. A late, slow or dead partner costs only that
slot; nobody waits on anybody past it, so faults never cascade through the schedule (clocks
must agree to well under a slot: NTP does; on one machine it is the same clock). In a pair the
lower rank listens and the higher connects, asking again until the slot ends (the listener may
not be up yet). Every record goes to `emit`; the agent never needs to hear from anyone.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace

from rdmacli.engine.settings import Options
from rdmacli.engine.stops import Stops
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import schedule
from rdmacli.mesh.config import GAP, AgentConfig, Retests, at_once
from rdmacli.mesh.lock import hold_port
from rdmacli.mesh.pair import kind_of, pair_record, run_pair
from rdmacli.mesh.records import AgentRecord, DoneRecord, PairRecord, RailState
from rdmacli.probe.kinds import KINDS as PROBE_KINDS
from rdmacli.rdma.constants import PORT_SPACES


def run_agent(cfg: AgentConfig, emit, *, backend=None, stop=lambda: False, stops: Stops | None = None) -> int:
    """Run this node's rounds; emit an "agent" record, a "pair" record per test, and "done".
    A stop signal during a pair ends that pair between loop turns, then the agent (Stopped)."""
    locks = []
    try:
        problems: list[RdmacliError | None] = []  # per rail: why none of its pairs can run, or None
        for rail in range(cfg.rails):
            address, port = cfg.address(cfg.rank, rail), cfg.port_of(rail)
            lock, problem = hold_port(cfg.spec.run_id, address, port)
            locks.append(lock)
            if problem is not None:
                problems.append(problem)
            else:  # reported as ready only when a pair can run
                problems.append(preflight(cfg, rail, backend))
        return _run_rounds(cfg, problems, emit, backend=backend, stop=stop, stops=stops)
    finally:
        for lock in locks:
            if lock is not None:
                lock.release()  # the lock file goes with it


RETEST_WAIT_S = 10.0  # after its rounds, an agent waits this long (plus a round) for re-tests


def _run_rounds(cfg, problems, emit, *, backend, stop, stops) -> int:
    sched = schedule.Schedule.of(cfg.spec)
    rounds = sched.rounds()
    phase = None
    if sched.at_once:  # the connectionless probe: its NICs open before this agent says it is ready
        from rdmacli.probe.phase import Phase

        phase = Phase(cfg, sched.tests_of(cfg.rank, 0), problems, run=bytes.fromhex(cfg.spec.run_id),
                      count=cfg.spec.count, stop=stop, kind=PROBE_KINDS[cfg.spec.test])  # fmt: skip
    try:
        _say_ready(cfg, problems, emit, backend, len(rounds))
        if phase is not None:  # one phase, every partner at once
            failed = _run_probe(cfg, phase, emit, stop=stop)
            dropped = tuple((rail, *n) for rail, n in sorted(phase.dropped.items()) if any(n))
            emit(cfg.record(DoneRecord, failed=failed, dropped=dropped))
            return 0
    finally:
        if phase is not None:
            phase.close()
    main = [
        (rnd, slot, lambda s=slot: cfg.start_at + s * cfg.spec.round_s,
         sched.tests_of(cfg.rank, rnd))
        for slot, rnd in enumerate(rounds)
    ]  # fmt: skip
    failed = _run_slots(cfg, main, problems, emit, backend=backend, stop=stop, stops=stops)
    if cfg.spec.retests:
        plan = wait_for_retests(cfg, cfg.start_at + len(rounds) * cfg.spec.round_s, stop)
        if plan is not None:
            base = sched.retest_base()
            slots = []
            for k, tests in enumerate(plan.rounds):
                mine = [(ra, b, rb) for a, ra, b, rb in tests if a == cfg.rank]
                mine += [(rb, a, ra) for a, ra, b, rb in tests if b == cfg.rank]
                slots.append((base + k, len(rounds) + k, lambda k=k: plan.at + k * cfg.spec.round_s, mine))
            failed += _run_slots(
                cfg, slots, problems, emit, backend=backend, stop=stop, stops=stops, retest=True
            )
    emit(cfg.record(DoneRecord, failed=failed))
    return 0


def _say_ready(cfg: AgentConfig, problems: list, emit, backend, rounds: int) -> None:
    """This agent's record: its rails as found, each ready when its pairs can run."""
    found = [_port_of(cfg.address(cfg.rank, rail)) for rail in range(cfg.rails)]
    rails = tuple(
        RailState(rail=rail, address=cfg.address(cfg.rank, rail), device=dev, port=cfg.port_of(rail),
                  ready=problems[rail] is None, rate_gbps=_rate_of(backend, dev, ib_port))
        for rail, (dev, ib_port) in enumerate(found)
    )  # fmt: skip
    emit(
        cfg.record(
            AgentRecord,
            node=cfg.spec.names[cfg.rank],
            address=cfg.address(cfg.rank, 0),
            rails=rails,
            host=socket.gethostname(),
            pid=os.getpid(),
            clock=round(time.time(), 3),
            rounds=rounds,
            ready=all(p is None for p in problems),
        )
    )


def _run_probe(cfg: AgentConfig, phase, emit, *, stop) -> int:
    """The probe phase (rdmacli/probe): its NICs are open and answer from the loop's start,
    probe from round 1's start (the go line may bring it forward: the phase starts at
    whichever comes first) to the slot's end less GAP, and a record per test."""
    from rdmacli.mesh.healthy import compact
    from rdmacli.probe.timing import OPEN_LEAD_S

    if not phase.by_rail:
        return 0
    while (wait := cfg.start_at - time.time()) > OPEN_LEAD_S and not stop():
        time.sleep(min(wait - OPEN_LEAD_S, 0.1))
    begin = cfg.start_at
    end = begin + cfg.spec.round_s * (1 - GAP)
    ends = phase.run(begin, end)
    recs = [PairRecord.of_probe(phase.run_id.hex(), cfg.rank, e) for e in ends]
    for rec in compact(schedule.Schedule.of(cfg.spec), cfg.spec.count, recs):
        emit(rec)
    return sum(e.result != "pass" for e in ends)


def _port_of(address: str) -> tuple[str | None, int]:
    from rdmacli.mesh.rails import port_of

    try:
        return port_of(address) or (None, 1)
    except (OSError, ValueError):  # sysfs unreadable: a name for the report, never a reason not to run
        return None, 1


def _rate_of(backend, device: str | None, port: int) -> float | None:
    """Its port's line rate, the bound of every rate its pairs report (the coordinator checks)."""
    try:
        if backend is None:
            from rdmacli.engine.flow import default_backend

            backend = default_backend()
        return backend.rate_bound_gbps(device, port) if device else None
    except (OSError, ValueError, RdmacliError):  # no rate known: the coordinator checks nothing by it
        return None


def wait_for_retests(cfg: AgentConfig, main_end: float, stop) -> Retests | None:
    """The coordinator's re-test rounds (possibly none), or None when they did not come in time
    (a coordinator that died or was cut off: the agent ends rather than wait on it)."""
    deadline = main_end + RETEST_WAIT_S + cfg.spec.round_s
    while cfg.retest is None and time.time() < deadline and not stop():
        time.sleep(0.05)
    return cfg.retest


def _run_slots(cfg, slots, problems, emit, *, backend, stop, stops, retest: bool = False) -> int:
    """Run this node's tests of some slots: (round, slot index, its start time, tests), a test
    being (this node's rail, the partner, the partner's rail). The tests of one slot run at
    once, one thread each: they are separate NICs."""
    failed = 0
    overran = None  # (what, seconds): the last pair ended after its slot did
    for rnd, slot, begin_at, tests in slots:
        if stop():
            break
        if not tests:
            continue
        # wait for the slot; start_at may move earlier meanwhile (the coordinator's "go")
        while (wait := begin_at() - time.time()) > 0 and not stop():
            time.sleep(min(wait, 0.1))
        begin = begin_at()
        end = begin + cfg.spec.round_s * (1 - GAP)

        def one(test, begin=begin, end=end, rnd=rnd, slot=slot, overran=overran) -> PairRecord:
            rail, peer, peer_rail = test
            now = time.time()
            if problems[rail] is not None:  # this NIC cannot run a pair: each says why, none is tried
                rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail, error=problems[rail])
            elif now >= end:
                why = (
                    f"the pair before it ({overran[0]}) ended {overran[1]:.1f} s after its slot: "
                    "raise --round-time"
                    if overran
                    else "started late: raise --launch-timeout"
                )
                late = RdmacliError(
                    f"this node's agent reached round {slot} {now - end:.1f} s after its slot ended ({why})",
                    cause=Cause.AGENT,
                )
                rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail, error=late)
            else:
                rec = run_pair(cfg, rnd, slot, peer, end, rail, peer_rail, backend=backend, stops=stops)
                rec = replace(rec, took_s=round(max(time.time() - max(begin, now), 0.0), 3))  # torn down too
            return replace(rec, retest=True) if retest else rec

        recs = at_once(one, tests, stops)
        late = time.time() - (begin + cfg.spec.round_s)
        peers = sorted({cfg.spec.names[p] for _, p, _ in tests})
        overran = (f"round {slot}, with {', '.join(peers)}", late) if late > 0 else None
        for rec in recs:
            failed += rec.result != "pass"
            emit(rec)
    return failed


def preflight(cfg: AgentConfig, rail: int = 0, backend=None) -> RdmacliError | None:
    """Can this NIC run a pair? Its RDMA stack opens, and its address takes a listener on the
    rail's port (the engine's own listener, opened and closed): what stops every pair is found
    before round 1, and said once as its cause (a port another run holds, no device, an address
    not here)."""
    import typing

    from rdmacli.engine import session
    from rdmacli.engine.server import ServerFlow
    from rdmacli.protocols.table import UD
    from rdmacli.rdma import addr

    me, port = cfg.address(cfg.rank, rail), cfg.port_of(rail)
    probe = PROBE_KINDS.get(cfg.spec.test)
    if probe is not None:  # its NICs answer SIDR on a UD port space
        spec, space, needs = UD, probe.port_space, probe.needs
    else:
        kind = kind_of(cfg.spec.test)
        spec, space, needs = kind.spec, kind.spec.default_port_space, kind.needs
    listener = session.Test("mesh-agent", spec, session.SERVER, bind=me, port=port, connections=0,
                            options=Options(ps=PORT_SPACES[space]), needs=needs)  # fmt: skip
    flow: ServerFlow | None = None
    try:
        addr.resolve(me, port, passive=True, what="this node's address")  # said in these words
        flow = typing.cast(ServerFlow, session.build(listener, backend=backend))
        lid = flow.open_listener()
        flow.check_transport(lid.device, lid.port_num)  # iWARP: no UD, no imm
    except RdmacliError as exc:
        return exc
    finally:
        if flow is not None:
            flow.close()
    return None
