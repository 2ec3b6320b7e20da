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

import json
import os
import secrets
import socket
import time
from dataclasses import dataclass

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.flow import Options, Timeouts
from rdmacli.engine.server import ServerFlow
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import schedule
from rdmacli.mesh.token import Guarded, Token
from rdmacli.outcome import State
from rdmacli.protocols.table import PROTOCOLS
from rdmacli.rdma import addr as A
from rdmacli.rdma.constants import PORT_SPACES

TESTS = ("ping", "connect", "ud")
GAP = 0.15  # of a slot, kept free at its end for teardown before the next round


@dataclass
class AgentConfig:
    rank: int
    addresses: list[str]  # every member's RDMA address, by rank
    names: list[str]  # every member's name, by rank (for records people read)
    run_id: str  # 16 hex digits
    start_at: float  # UNIX time at which round slot 0 begins
    round_s: float
    port: int
    test: str = "ping"
    count: int = 20
    quick: bool = False

    @property
    def n(self) -> int:
        return len(self.addresses)

    @staticmethod
    def new_run_id() -> str:
        return secrets.token_hex(8)

    def go(self, line: str) -> bool:
        """The coordinator's `{"go": T}` (every agent is up): round 1 starts at T instead of the
        --start-at fallback. Only ever earlier, and never in the past."""
        try:
            t = float(json.loads(line)["go"])
        except (ValueError, KeyError, TypeError):
            return False
        if time.time() - 1 <= t < self.start_at:
            self.start_at = t
            return True
        return False


class MeshListenFlow(ServerFlow):
    """A listener for one partner: a stale or foreign request is rejected and it goes on."""

    def done(self) -> bool:
        return self.accepted >= 1 and self.all_finished()


def run_agent(cfg: AgentConfig, emit, *, backend=None, stop=lambda: False) -> int:
    """Run this node's rounds; emit an "agent" record, a "pair" record per pair, and "done"."""
    rounds = schedule.rounds_for(cfg.n, cfg.quick)
    emit(
        {
            "type": "agent",
            "run": cfg.run_id,
            "rank": cfg.rank,
            "node": cfg.names[cfg.rank],
            "address": cfg.addresses[cfg.rank],
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "clock": round(time.time(), 3),
            "rounds": len(rounds),
        }
    )
    failed = 0
    overran = None  # (what, seconds): the last pair ended after its slot did
    for slot, rnd in enumerate(rounds):
        if stop():
            break
        peer = schedule.partner(cfg.rank, rnd, cfg.n)
        if peer is None:
            continue
        # wait for the slot; start_at may move earlier meanwhile (the coordinator's "go")
        while (wait := cfg.start_at + slot * cfg.round_s - time.time()) > 0 and not stop():
            time.sleep(min(wait, 0.1))
        begin = cfg.start_at + slot * cfg.round_s
        end = begin + cfg.round_s * (1 - GAP)
        now = time.time()
        if now >= end:
            rec = pair_record(cfg, rnd, slot, peer)
            why = (
                f"the pair before it ({overran[0]}) ended {overran[1]:.1f} s after its slot: "
                "raise --round-time"
                if overran
                else "started late: raise --launch-timeout"
            )
            rec.update(
                result="fail",
                error=RdmacliError(
                    f"this node's agent reached round {slot} {now - end:.1f} s after its slot ended ({why})",
                    cause=Cause.AGENT,
                ).to_dict(),
            )
        else:
            rec = run_pair(cfg, rnd, slot, peer, end, backend=backend)
        late = time.time() - (begin + cfg.round_s)
        overran = (f"round {slot}, with {cfg.names[peer]}", late) if late > 0 else None
        failed += rec["result"] != "pass"
        emit(rec)
    emit({"type": "done", "run": cfg.run_id, "rank": cfg.rank, "failed": failed})
    return 0


def pair_record(cfg: AgentConfig, rnd: int, slot: int, peer: int) -> dict:
    a, b = sorted((cfg.rank, peer))
    return {
        "type": "pair",
        "run": cfg.run_id,
        "round": rnd,
        "slot": slot,
        "rank": cfg.rank,
        "peer": peer,
        "a": a,
        "b": b,
        "side": "listen" if cfg.rank < peer else "connect",
    }


def make_protocol(cfg: AgentConfig, listen: bool, token: Token):
    spec = PROTOCOLS[cfg.test]
    if cfg.test == "ping":
        inner = spec.server_class()() if listen else spec.client_class()(spec.default_size, cfg.count)
    else:
        cls = spec.server_class() if listen else spec.client_class()
        inner = cls(cfg.count, spec.default_size)
    return Guarded(inner, token)


def run_pair(cfg: AgentConfig, rnd: int, slot: int, peer: int, end: float, *, backend=None) -> dict:
    """One test with one partner, bounded by the slot's end."""
    rec = pair_record(cfg, rnd, slot, peer)
    listen = cfg.rank < peer
    spec = PROTOCOLS[cfg.test]
    left = max(end - time.time(), 0.2)
    timeouts = Timeouts(
        connect_s=min(10.0, left), idle_s=min(10.0, left), overall_s=left, wait_s=left, resolve_ms=2000
    )
    options = Options(ps=PORT_SPACES[spec.default_port_space])
    key = bytes.fromhex(cfg.run_id)
    # the token names the connector as src: the listener checks who asks, for what
    lo, hi = (cfg.rank, peer) if listen else (peer, cfg.rank)
    token = Token(key, rnd, hi, lo)
    flow = None
    error: RdmacliError | None = None
    try:
        me = A.resolve(cfg.addresses[cfg.rank], cfg.port if listen else 0, what="this node's address")
        if listen:
            flow = MeshListenFlow(
                bind=me,
                max_clients=1,
                make_protocol=lambda: make_protocol(cfg, True, token),
                timeouts=timeouts,
                options=options,
                backend=backend,
            )
        else:
            dst = A.resolve(cfg.addresses[peer], cfg.port, what="the partner's address")
            flow = ClientFlow(
                dst=dst,
                src=me,
                make_protocol=lambda: make_protocol(cfg, False, token),
                timeouts=timeouts,
                options=options,
                backend=backend,
            )
        flow.run()
    except RdmacliError as exc:
        error = exc
    finally:
        if flow is not None:
            flow.close()
    return judge(rec, flow, error, listen, cfg.addresses[cfg.rank])


def local_cause_of(error: dict, address: str) -> dict | None:
    """Look at this node first: its own port, netdev or address, said before the partner is
    blamed (the engine does this for a cm_id's device; a resolve refused at once or a listener
    that nobody reached never had one)."""
    from rdmacli.diag.local import cause_for_address

    try:
        cause = cause_for_address(address)
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


def judge(rec: dict, flow, error: RdmacliError | None, listen: bool, address: str = "") -> dict:
    """pass: the partner's connection (the accepted one, for a listener) ended done."""
    conns = [] if flow is None else [c for c in flow.all_conns if c.state != State.REJECTED]
    conn = conns[-1] if conns else None
    if conn is not None and conn.state == State.DONE and error is None and conn.error is None:
        rec["result"] = "pass"
        rec["error"] = None
    else:
        rec["result"] = "fail"
        err = (conn.error if conn is not None else None) or error
        if err is None and flow is not None:
            rejected = [c for c in flow.all_conns if c.state == State.REJECTED]
            err = RdmacliError(
                "no request from the partner within the round"
                + (f" ({len(rejected)} foreign or stale request(s) rejected)" if rejected else ""),
                cause=Cause.DEADLINE,
            )
        if err is None:
            err = RdmacliError("the pair failed before it started", cause=Cause.INTERNAL)
        rec["error"] = err.to_dict()
        if not rec["error"].get("local_cause"):
            here = local_cause_of(rec["error"], address)
            if here is not None:
                rec["error"] = here
    if flow is not None:
        steps = flow.timer.summary()
        rec["steps_us"] = {s["step"]: s["avg_us"] for s in steps}
        if not listen:
            setup = ("resolve addr", "resolve route", "create qp", "cm connect")
            rec["setup_us"] = round(sum(rec["steps_us"].get(k, 0) for k in setup), 1)
        if conn is not None and conn.protocol is not None:
            stats = conn.protocol.summary()
            rtt = stats.get("rtt_us")
            if rtt:
                rec.update(rtt_p50_us=rtt["p50"], rtt_p99_us=rtt["p99"], rtt_avg_us=rtt.get("avg"))
            rec["stats"] = {k: v for k, v in stats.items() if not isinstance(v, dict)}
    return rec
