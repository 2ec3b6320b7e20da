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

import fcntl
import json
import math
import os
import socket
import tempfile
import time
from functools import partial

from rdmacli.engine import lifecycle as L
from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import DeadlineWords, Options, Timeouts, default_backend
from rdmacli.engine.protocol import Params
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.session import CLIENT, SERVER, Test, default_flow, run
from rdmacli.engine.status import port_in_use
from rdmacli.engine.stops import Stops
from rdmacli.errors import Cause, RdmacliError, Stopped
from rdmacli.mesh import schedule
from rdmacli.mesh.contract import RunSpec, SpecError, side_of
from rdmacli.mesh.records import AgentRecord, DoneRecord, PairRecord, RailState
from rdmacli.mesh.token import Guarded, Token
from rdmacli.outcome import Outcome, State
from rdmacli.protocols.table import BW, LAT, PROTOCOLS
from rdmacli.rdma.constants import PORT_SPACES

# what a pair runs: `ping` is the latency probe (`rdmacli lat`'s send ping-pong: a network round
# trip, the responder's hold taken out); `rping` is rping's cycle, for a user who asks for that
# protocol; `bw` is `rdmacli bw --bidir`, each pair measured both ways at once
SPECS = {
    "ping": LAT,
    "rping": PROTOCOLS["ping"],
    "connect": PROTOCOLS["connect"],
    "ud": PROTOCOLS["ud"],
    "bw": BW,
}
BW_SHARE = 0.25  # of a slot, streamed by `--test bw` (at least BW_MIN_S, at most BW_MAX_S)
BW_MIN_S, BW_MAX_S, BW_DEPTH = 0.5, 10.0, 16
GAP = 0.15  # of a slot, kept free at its end for teardown before the next round


class AgentConfig:
    """This node's view of a run: the spec (immutable, as the coordinator sent it), its rank,
    and what the coordinator's later lines change: round 1's start (its go line, only ever
    earlier) and the re-test rounds."""

    def __init__(self, spec: RunSpec, rank: int):
        if not 0 <= rank < spec.n:
            raise SpecError(f"rank {rank} is not one of the spec's {spec.n} nodes")
        self.spec, self.rank = spec, rank
        self.start_at = spec.start_at  # moved earlier by the coordinator's go line
        self.retest: dict | None = None  # {"at": T, "rounds": [[(a, ra, b, rb), ...], ...]}, by take()

    @property
    def n(self) -> int:
        return self.spec.n

    @property
    def rails(self) -> int:
        return self.spec.rails

    def address(self, rank: int, rail: int) -> str:
        return self.spec.addresses[rank][rail]

    def port_of(self, rail: int) -> int:
        """The listener port of a rail: each rail its own (a node listens on all at once)."""
        return self.spec.port + rail

    def nic(self, rank: int, rail: int) -> int:
        """A NIC's number in the tokens: rank * rails + rail (the rank itself with one rail)."""
        return rank * self.rails + rail

    def record(self, kind, **fields):
        """A record of this agent's (contract's types), run and rank filled in."""
        return kind(run=self.spec.run_id, rank=self.rank, **fields)

    def take(self, line: str) -> str | None:
        """A line from the coordinator: "go" or "retest" if it was one and was taken."""
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if isinstance(msg, dict) and "go" in msg:
            return "go" if self.go(msg["go"]) else None
        if isinstance(msg, dict) and "retest" in msg and self.spec.retests and self.retest is None:
            plan = retest_plan(msg["retest"], self.n, self.rails)
            if plan is not None:
                self.retest = plan  # one assignment: the rounds' thread sees all of it or none
                return "retest"
        return None

    def go(self, value) -> bool:
        """The coordinator's `{"go": T}` (every agent is up): round 1 starts at T instead of the
        --start-at fallback. Only ever earlier, and never in the past."""
        try:
            t = float(value)
        except (ValueError, TypeError):
            return False
        if time.time() - 1 <= t < self.start_at:
            self.start_at = t
            return True
        return False


MAX_RETEST_ROUNDS = 64


def retest_plan(value, n: int, rails: int = 1) -> dict | None:
    """The coordinator's re-test rounds, checked (its line reaches us through the launcher, but
    is input all the same): a start time that is not past, and rounds of tests [a, rail of a,
    b, rail of b] between two ranks of this run, no NIC in two tests of a round. None if
    anything is off (the agent then just ends)."""
    try:
        at, rounds = float(value["at"]), value["rounds"]
    except (KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(at) and at >= time.time() - 60) or not isinstance(rounds, list):
        return None
    if len(rounds) > MAX_RETEST_ROUNDS:
        return None
    out = []
    for rnd in rounds:
        if not isinstance(rnd, list) or len(rnd) > n * rails:
            return None
        seen: set[tuple[int, int]] = set()
        tests = []
        for t in rnd:
            if not (isinstance(t, list) and len(t) == 4 and _rank(t[0], n) and _rank(t[2], n)
                    and _rank(t[1], rails) and _rank(t[3], rails)):  # fmt: skip
                return None
            a, ra, b, rb = t
            if a == b or (a, ra) in seen or (b, rb) in seen:
                return None
            seen.update(((a, ra), (b, rb)))
            tests.append((a, ra, b, rb) if a < b else (b, rb, a, ra))
        out.append(tests)
    return {"at": at, "rounds": out}


def _rank(x, n: int) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < n


class MeshListenFlow(ServerFlow):
    """A listener for one partner: a stale or foreign request is rejected and it goes on. A
    request withdrawn before it was accepted (its requester gave up or asked again: its REJ
    came, or rdma_create_qp failed with EINVAL on a request the CM had already closed) is set
    aside, its error kept, and it goes on waiting: the partner asks again until the slot ends."""

    def on_finished(self, conn: Connection) -> None:
        if (
            conn.state == State.FAILED
            and not conn.connected
            and conn.phase in (L.ACCEPT, L.CREATE_QP)
            and not self.stopping
        ):
            self.accepted -= 1
            self.warn(f"request {conn.index} from {conn.remote} ended before it was accepted "
                      f"({conn.error.message if conn.error else 'no reason'}); still waiting")  # fmt: skip
            conn.reject()  # not the pair's connection; its error stays for the record
            self.retire(conn)
            return
        super().on_finished(conn)

    def done(self) -> bool:
        return self.accepted >= 1 and self.all_finished()


def run_agent(cfg: AgentConfig, emit, *, backend=None, stop=lambda: False, stops: Stops | None = None) -> int:
    """Run this node's rounds; emit an "agent" record, a "pair" record per test, and "done".
    A stop signal during a pair ends that pair between loop turns, then the agent (Stopped)."""
    locks = []
    try:
        problems = []  # per rail: why none of its pairs can run, or None
        for rail in range(cfg.rails):
            address, port = cfg.address(cfg.rank, rail), cfg.port_of(rail)
            lock, holder = hold_port(cfg, address, port)
            locks.append(lock)
            if holder is not None:
                problems.append(port_in_use("preflight", address, port, [holder], "flock"))
            else:  # reported as ready only when a pair can run
                problems.append(preflight(cfg, rail, backend))
        return _run_rounds(cfg, problems, emit, backend=backend, stop=stop, stops=stops)
    finally:
        for lock in locks:
            if lock is not None:
                os.close(lock)


LOCK_DIRS = ("/run/lock", tempfile.gettempdir())


def hold_port(cfg: AgentConfig, address: str, port: int) -> tuple[int | None, str | None]:
    """This run's claim on an address and port for the agent's whole life (a flock): another
    mesh run's agent for the same address finds it even between pairs, when no listener shows
    (its preflight bind would pass), and says who holds it. (fd, None), or (None, holder's
    words), or (None, None) where no lock can be made (the bind check still runs)."""
    name = f"rdmacli-mesh-{address}-{port}.lock"
    for d in LOCK_DIRS:
        try:  # never through a link; a file another user planted is refused (protected_regular)
            fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            said = os.pread(fd, 200, 0).decode("utf-8", "replace")
            os.close(fd)
            return None, "".join(ch for ch in said if ch.isprintable())[:120] or "another process"
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} (rdmacli mesh-agent, run {cfg.spec.run_id})".encode(), 0)
        return fd, None
    return None, None


RETEST_WAIT_S = 10.0  # after its rounds, an agent waits this long (plus a round) for re-tests


def _run_rounds(cfg, problems, emit, *, backend, stop, stops) -> int:
    rounds = schedule.main_rounds(cfg.n, cfg.spec.quick, cfg.rails, cfg.spec.cross_rail)
    rails = tuple(
        RailState(rail=rail, address=(me := cfg.address(cfg.rank, rail)), device=_device_of(me),
                  port=cfg.port_of(rail), ready=problems[rail] is None)
        for rail in range(cfg.rails)
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
            rounds=len(rounds),
            ready=all(p is None for p in problems),
        )
    )
    main = [
        (rnd, slot, lambda s=slot: cfg.start_at + s * cfg.spec.round_s,
         schedule.tests_of(cfg.rank, rnd, cfg.n, cfg.rails, cfg.spec.cross_rail))
        for slot, rnd in enumerate(rounds)
    ]  # fmt: skip
    failed = _run_slots(cfg, main, problems, emit, backend=backend, stop=stop, stops=stops)
    if cfg.spec.retests:
        plan = wait_for_retests(cfg, cfg.start_at + len(rounds) * cfg.spec.round_s, stop)
        if plan is not None:
            base = schedule.retest_base(cfg.n, cfg.rails, cfg.spec.cross_rail)
            slots = []
            for k, tests in enumerate(plan["rounds"]):
                mine = [(ra, b, rb) for a, ra, b, rb in tests if a == cfg.rank]
                mine += [(rb, a, ra) for a, ra, b, rb in tests if b == cfg.rank]
                slots.append((base + k, len(rounds) + k, lambda k=k: plan["at"] + k * cfg.spec.round_s, mine))
            failed += _run_slots(
                cfg, slots, problems, emit, backend=backend, stop=stop, stops=stops, retest=True
            )
    emit(cfg.record(DoneRecord, failed=failed))
    return 0


def _device_of(address: str) -> str | None:
    from rdmacli.mesh.rails import device_of

    try:
        return device_of(address)
    except Exception:  # a name for the report only: never a reason not to run
        return None


def wait_for_retests(cfg: AgentConfig, main_end: float, stop) -> dict | None:
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

        def one(test, begin=begin, end=end, rnd=rnd, slot=slot, overran=overran) -> dict:
            rail, peer, peer_rail = test
            now = time.time()
            if problems[rail] is not None:  # this NIC cannot run a pair: each says why, none is tried
                rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail)
                rec.update(result="fail", error=problems[rail].to_dict())
            elif now >= end:
                rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail)
                why = (
                    f"the pair before it ({overran[0]}) ended {overran[1]:.1f} s after its slot: "
                    "raise --round-time"
                    if overran
                    else "started late: raise --launch-timeout"
                )
                rec.update(
                    result="fail",
                    error=RdmacliError(
                        f"this node's agent reached round {slot} {now - end:.1f} s after its slot "
                        f"ended ({why})",
                        cause=Cause.AGENT,
                    ).to_dict(),
                )
            else:
                rec = run_pair(cfg, rnd, slot, peer, end, rail, peer_rail, backend=backend, stops=stops)
                rec["took_s"] = round(max(time.time() - max(begin, now), 0.0), 3)  # torn down too
            if retest:
                rec["retest"] = True
            return rec

        recs = at_once(one, tests, stops)
        late = time.time() - (begin + cfg.spec.round_s)
        peers = sorted({cfg.spec.names[p] for _, p, _ in tests})
        overran = (f"round {slot}, with {', '.join(peers)}", late) if late > 0 else None
        for rec in recs:
            failed += rec["result"] != "pass"
            emit(PairRecord(**rec))
    return failed


def at_once(fn, items: list, stops: Stops | None) -> list:
    """fn over items, each in a thread of its own (inline when there is one), results in order.
    A stop signal stops every running test (Stops holds them all); the first exception of a
    thread (Stopped) is raised here once every thread has ended."""
    if len(items) == 1:
        return [fn(items[0])]
    import threading

    results: list = [None] * len(items)
    errors: list = []

    def work(i, item):
        try:
            results[i] = fn(item)
        except BaseException as exc:  # raised in the caller's thread, below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, it), daemon=True) for i, it in enumerate(items)]
    for t in threads:
        t.start()
    stopped = None
    for t in threads:
        while t.is_alive():
            try:
                t.join(0.2)
            except Stopped as exc:  # a signal between two flows: the threads' flows stop at start
                stopped = stopped or exc
                if stops is not None:
                    stops.stop()
    if stopped is not None:
        raise stopped
    if errors:
        raise errors[0]
    return results


def preflight(cfg: AgentConfig, rail: int = 0, backend=None) -> RdmacliError | None:
    """Can this NIC run a pair? Its RDMA stack opens, and its address takes a listener on the
    rail's port (the engine's own listener, opened and closed): what stops every pair is found
    before round 1, and said once as its cause (a port another run holds, no device, an address
    not here)."""
    from rdmacli.rdma import addr

    me, port = cfg.address(cfg.rank, rail), cfg.port_of(rail)
    flow = None
    try:
        where = addr.resolve(me, port, passive=True, what="this node's address")
        ps = PORT_SPACES[SPECS[cfg.spec.test].default_port_space]
        flow = ServerFlow(
            bind=where, max_clients=0, make_protocol=lambda: None, backend=backend, options=Options(ps=ps)
        )
        flow.open_listener()
    except RdmacliError as exc:
        return exc
    finally:
        if flow is not None:
            flow.close()
    return None


def pair_record(cfg: AgentConfig, rnd: int, slot: int, peer: int, rail: int = 0, peer_rail: int = 0) -> dict:
    """A pair record's fields so far (records.PairRecord's, built up by judge())."""
    return {"run": cfg.spec.run_id, "round": rnd, "slot": slot, "rank": cfg.rank, "peer": peer,
            "rail": rail, "peer_rail": peer_rail}  # fmt: skip


def pair_test(cfg: AgentConfig, rnd: int, peer: int, end: float, rail: int = 0, peer_rail: int = 0):
    """This NIC's side of a test, bounded by the slot's end, and its flow factory: the lower
    rank listens, on its rail's address and port."""
    listen = side_of(cfg.rank, peer) == "listen"
    spec = SPECS[cfg.spec.test]
    left = max(end - time.time(), 0.2)
    timeouts = Timeouts(
        connect_s=min(10.0, left),
        idle_s=min(10.0, left),
        overall_s=left,
        wait_s=left,
        resolve_ms=2000,
        words=DeadlineWords(
            overall=f"the end of this pair's slot (--round-time {cfg.spec.round_s:g} s)",
            wait="the {s:.1f} s left of this pair's slot (--round-time)",
            more_time="raise --round-time",
            wait_longer="raise --round-time",
            overrun="a pair that needs more than its slot: raise --round-time (a slow or lossy "
            "partner also overruns; see the counters)",
        ),
    )
    # the token names the connector's NIC as src: the listener checks who asks, for what
    me, them = cfg.nic(cfg.rank, rail), cfg.nic(peer, peer_rail)
    lo, hi = (me, them) if listen else (them, me)
    token = Token(bytes.fromhex(cfg.spec.run_id), rnd, hi, lo)
    partner = cfg.address(peer, peer_rail)
    return Test(
        "mesh-agent",
        spec,
        SERVER if listen else CLIENT,
        pair_params(cfg),
        host=None if listen else partner,
        port=cfg.port_of(rail if listen else peer_rail),
        bind=cfg.address(cfg.rank, rail),
        connections=1,
        timeouts=timeouts,
        options=Options(ps=PORT_SPACES[spec.default_port_space]),
    ), partial(mesh_flow, token, partner if listen else None)


def mesh_flow(token: Token, partner: str | None, test: Test, common: dict):
    """A pair's flow (session.FlowFactory): its token around the protocol (a listener checks
    who asks: `partner`'s address), and a listener that waits out stale requests."""
    inner = common["make_protocol"]
    common = {**common, "make_protocol": lambda: Guarded(inner(), token, partner)}
    return default_flow(test, common, server=MeshListenFlow)


def pair_params(cfg: AgentConfig) -> Params:
    if cfg.spec.test == "ping":
        return Params(count=cfg.spec.count, size=LAT.default_size, op="send")
    if cfg.spec.test == "bw":
        seconds = min(max(cfg.spec.round_s * BW_SHARE, BW_MIN_S), BW_MAX_S)
        return Params(size=BW.default_size, op="write", duration=seconds, depth=BW_DEPTH, bidir=True)
    return Params(count=cfg.spec.count, size=SPECS[cfg.spec.test].default_size)


def run_pair(
    cfg: AgentConfig, rnd: int, slot: int, peer: int, end: float, rail: int = 0, peer_rail: int = 0, *,
    backend=None, stops: Stops | None = None,
) -> dict:  # fmt: skip
    """One test with one partner's NIC, bounded by the slot's end. A stop signal ends the agent."""
    rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail)
    test, factory = pair_test(cfg, rnd, peer, end, rail, peer_rail)
    outcome = run(test, backend=backend, stops=stops, factory=factory)
    if outcome.signal is not None:
        raise Stopped(outcome.signal)
    return judge(
        rec, outcome, side_of(cfg.rank, peer) == "listen", cfg.address(cfg.rank, rail), backend=backend
    )


def local_cause_of(error: dict, address: str, backend=None) -> dict | None:
    """Look at this node first: its own port, netdev or address, said before the partner is
    blamed (the engine does this for a cm_id's device; a resolve refused at once or a listener
    that nobody reached never had one)."""
    backend = backend or default_backend()
    try:
        cause = backend.address_cause(address)
    except Exception:  # a diagnosis must never hide the error it explains
        return None
    if cause is None:
        return None
    return RdmacliError(
        f"{cause.text} [this node, {address}] (reported: {error.get('message')})",
        hint=cause.hint,
        cause=cause.cause,
        details={
            "local_cause": cause.text,
            "reported": error.get("message"),
            "reported_cause": error.get("cause"),
        },
    ).to_dict()


def judge(rec: dict, outcome: Outcome, listen: bool, address: str = "", *, backend=None) -> dict:
    """pass: the partner's connection (the accepted one, for a listener) ended done."""
    conns = [c for c in outcome.connections if c.state != State.REJECTED]
    conn = conns[-1] if conns else None
    withdrawn = [c.error for c in outcome.connections if c.state == State.REJECTED and c.error]
    if outcome.counters:
        rec["counters"] = tuple(
            {k: p[k] for k in ("device", "port", "moved", "reset") if k in p} for p in outcome.counters
        )
    if conn is not None and conn.state == State.DONE and outcome.error is None and conn.error is None:
        rec["result"] = "pass"
        rec["error"] = None
    else:
        rec["result"] = "fail"
        err = (
            (conn.error if conn is not None else None)
            or (withdrawn[-1] if withdrawn else None)
            or outcome.error
        )
        if err is None:
            rejected = len(outcome.connections) - len(conns)
            err = RdmacliError(
                "no request from the partner within the round"
                + (f" ({rejected} foreign or stale request(s) rejected)" if rejected else ""),
                cause=Cause.DEADLINE,
            )
        rec["error"] = err.to_dict()
        if not rec["error"].get("local_cause"):
            here = local_cause_of(rec["error"], address, backend)
            if here is not None:
                rec["error"] = here
    if not outcome.connections and not outcome.steps_us:
        return rec  # nothing was set up (this node's own address did not resolve)
    rec["steps_us"] = {s["step"]: s["avg_us"] for s in outcome.steps_us}
    if not listen:
        setup = ("resolve addr", "resolve route", "create qp", "cm connect")
        rec["setup_us"] = round(sum(rec["steps_us"].get(k, 0) for k in setup), 1)
    if conn is not None:
        rec.update(figures(conn.stats))
        rec["stats"] = {k: v for k, v in conn.stats.items() if not isinstance(v, (dict, type(None)))}
    return rec


def figures(stats: dict) -> dict:
    """A pair's figures from its connector's stats, whichever test it ran: round trips (the
    network's, when the latency probe measured it), and Gb/s each way (a listens, b connects:
    the connector's own stream is b to a, the listener's, reported back, a to b)."""
    out = {}
    net, host = stats.get("network_rtt_us"), stats.get("rtt_us")
    if net:  # the latency probe: perftest's columns
        out.update(rtt_p50_us=net["t_typical"], rtt_p99_us=net["p99"], rtt_avg_us=net["t_avg"])
        out["host_rtt_p50_us"] = host["t_typical"]
    elif host:  # rping's cycle
        out.update(rtt_p50_us=host["p50"], rtt_p99_us=host["p99"], rtt_avg_us=host.get("avg"))
    if "gbps" in stats:
        out["gbps_ba"] = stats["gbps"]
        if stats.get("reverse"):
            out["gbps_ab"] = stats["reverse"]["gbps"]
    return out
