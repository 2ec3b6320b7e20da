"""One pair's test, as a mesh agent runs it: the Test and its flow, and the record it comes to.

The lower rank listens (on its rail's address and port), the higher connects; a token in the
private data names run, round and NICs, so a listener serves only its scheduled partner. The
slot's end bounds everything (its words are the mesh's: --round-time). What came of it is
judged here into a pair record's fields (records.PairRecord), this node's own cause looked at
first.
"""

from __future__ import annotations

import time
import typing
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from rdmacli.engine import lifecycle as L
from rdmacli.engine.client import ClientFlow
from rdmacli.engine.conn import Connection
from rdmacli.engine.flow import default_backend
from rdmacli.engine.protocol import Params
from rdmacli.engine.server import ServerFlow
from rdmacli.engine.session import CLIENT, SERVER, Test, default_flow, run
from rdmacli.engine.settings import DeadlineWords, Options, Timeouts
from rdmacli.engine.status import REJ_CONSUMER_DEFINED, printable, said_here
from rdmacli.engine.stops import Stops
from rdmacli.errors import Cause, RdmacliError, Stopped
from rdmacli.figures import BwFigures, BwServed, Figures, LatFigures, PingFigures, as_dict
from rdmacli.mesh.contract import RunSpec, side_of
from rdmacli.mesh.findings import ErrorDoc
from rdmacli.mesh.kinds import check
from rdmacli.mesh.records import PairRecord
from rdmacli.outcome import Outcome, State
from rdmacli.probe.token import LATER, Guarded, Token
from rdmacli.protocols.table import BW, CONNECT, LAT, PING, UD, Spec
from rdmacli.rdma import constants as C
from rdmacli.rdma.constants import PORT_SPACES
from rdmacli.transports import IMMEDIATE

if TYPE_CHECKING:
    from rdmacli.mesh.config import AgentConfig

BW_SHARE = 0.25  # of a slot, streamed by `--test bw` (at least BW_MIN_S, at most BW_MAX_S)
BW_MIN_S, BW_MAX_S, BW_DEPTH = 0.5, 10.0, 16


@dataclass(frozen=True)
class Kind:
    """A mesh test kind: the protocol on the wire, its parameters from the run spec, and the
    pair record's figures from each end's stats (a listens, b connects)."""

    spec: Spec
    params: Callable[[RunSpec], Params]
    figures: Callable[[Figures], dict] = lambda stats: {}
    needs: tuple[str, ...] = ()  # of the transport beyond the spec's (rdmacli.transports)

    def transport_needs(self) -> tuple[str, ...]:
        return self.spec.transport_needs + self.needs


def _bw(s: RunSpec) -> Params:
    seconds = min(max(s.round_s * BW_SHARE, BW_MIN_S), BW_MAX_S)
    return Params(size=BW.default_size, op="send", duration=seconds, depth=BW_DEPTH, bidir=True)


def _lat_figures(f: Figures) -> dict:
    """The latency probe: the network's round trip (perftest's columns), the host's beside it."""
    if not isinstance(f, LatFigures) or f.network_rtt_us is None or f.rtt_us is None:
        return {}
    net, host = f.network_rtt_us, f.rtt_us
    return {"rtt_p50_us": net.t_typical, "rtt_p99_us": net.p99, "rtt_avg_us": net.t_avg,
            "host_rtt_p50_us": host.t_typical, "rtt_min_us": net.t_min}  # fmt: skip


def _rping_figures(f: Figures) -> dict:
    """rping's cycle, as the host sees it."""
    if not isinstance(f, PingFigures) or f.rtt_us is None:
        return {}
    return {"rtt_p50_us": f.rtt_us.p50, "rtt_p99_us": f.rtt_us.p99, "rtt_avg_us": f.rtt_us.avg,
            "rtt_min_us": f.rtt_us.min}  # fmt: skip


def _bw_figures(f: Figures) -> dict:
    """Each end gives the stream that came to it as it arrived (its receive completions: the
    receiver's own count and time, never a figure its partner relayed), and what it sent as
    its completions counted; the coordinator checks each direction's two counts against each
    other. The connector b received a's stream (gbps_ab); the listener a, b's (gbps_ba)."""
    if isinstance(f, BwFigures):
        figures = {"gbps_ab": f.gbps_received, "gbps_sent": f.gbps}
    elif isinstance(f, BwServed):
        figures = {"gbps_ba": f.gbps_received, "gbps_sent": f.gbps_sent}
    else:
        return {}
    figures.update(messages_sent=f.messages_sent, messages_received=f.messages_received)
    return {k: v for k, v in figures.items() if v is not None}


# what a pair of each check runs (mesh.kinds names these rows by their import path); bw is
# SEND both ways at once: each end counts and times what arrives (_bw_figures), and its control
# messages say their kind in immediate data (not iWARP)
LATENCY = Kind(LAT, lambda s: Params(count=s.count, size=LAT.default_size, op="send"), _lat_figures)
RPING = Kind(PING, lambda s: Params(count=s.count, size=PING.default_size), _rping_figures)
EXCHANGE = Kind(CONNECT, lambda s: Params(count=s.count, size=CONNECT.default_size))
DATAGRAMS = Kind(UD, lambda s: Params(count=s.count, size=UD.default_size))
BANDWIDTH = Kind(BW, _bw, _bw_figures, needs=(IMMEDIATE,))


def kind_of(test: str) -> Kind:
    """The pair runner of the run's check (its row in mesh.kinds)."""
    row = check(test)
    if row is None or row.at_once:
        raise ValueError(f"{test!r} runs no pair")
    return typing.cast(Kind, row.pair_kind())


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

    def refusal(self, conn: Connection, ev) -> str | None:
        """The token's word first (probe.token.Guarded): a listener late in an earlier round
        tells the next round's requester so (LATER) before "full" or "stopping", which are final."""
        refusal = getattr(conn.protocol, "refusal", None)
        return refusal(conn, ev) if refusal is not None else None


class MeshConnectFlow(ClientFlow):
    """A requester for one partner: besides nothing listening yet, a listener of an earlier
    round on the partner's port (its agent late: LATER) is a partner not there yet, asked again
    while the slot lasts."""

    def asks_again(self, ev) -> bool:
        if ev.type == C.REJECTED and ev.status == REJ_CONSUMER_DEFINED:
            return printable(ev.private_data or b"") == LATER
        return super().asks_again(ev)


def pair_record(cfg: AgentConfig, rnd: int, slot: int, peer: int, rail: int = 0, peer_rail: int = 0, *,
                error: RdmacliError | None = None) -> PairRecord:  # fmt: skip
    """This end's record of a test with `peer`'s NIC: failed with `error` until judge() says more."""
    said = ErrorDoc.of(error.to_dict()) if error else None
    return PairRecord(run=cfg.spec.run_id, rank=cfg.rank, peer=peer, round=rnd, result="fail", rail=rail,
                      peer_rail=peer_rail, slot=slot, error=said)  # fmt: skip


def pair_test(cfg: AgentConfig, rnd: int, peer: int, end: float, rail: int = 0, peer_rail: int = 0):
    """This NIC's side of a test, bounded by the slot's end, and its flow factory: the lower
    rank listens, on its rail's address and port."""
    listen = side_of(cfg.rank, peer) == "listen"
    kind = kind_of(cfg.spec.test)
    spec = kind.spec
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
        kind.params(cfg.spec),
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
    return default_flow(test, common, server=MeshListenFlow, client=MeshConnectFlow)


def run_pair(
    cfg: AgentConfig, rnd: int, slot: int, peer: int, end: float, rail: int = 0, peer_rail: int = 0, *,
    backend=None, stops: Stops | None = None,
) -> PairRecord:  # fmt: skip
    """One test with one partner's NIC, bounded by the slot's end. A stop signal ends the agent."""
    rec = pair_record(cfg, rnd, slot, peer, rail, peer_rail)
    test, factory = pair_test(cfg, rnd, peer, end, rail, peer_rail)
    outcome = run(test, backend=backend, stops=stops, factory=factory)
    if outcome.signal is not None:
        raise Stopped(outcome.signal)
    listen = side_of(cfg.rank, peer) == "listen"
    return judge(
        rec, outcome, listen, cfg.address(cfg.rank, rail), backend=backend, kind=kind_of(cfg.spec.test)
    )


def local_cause_of(err: RdmacliError, address: str, backend=None) -> RdmacliError:
    """Look at this node first: its own port, netdev or address, said before the partner is
    blamed (the engine does this for a cm_id's device; a resolve refused at once or a listener
    that nobody reached never had one). `err` as it is when it already says this node's cause,
    or this node has none."""
    if err.details.get("local_cause"):
        return err
    backend = backend or default_backend()
    try:
        cause = backend.address_cause(address)
    except Exception:  # a diagnosis must never hide the error it explains
        return err
    if cause is None:
        return err
    text = f"{cause.text} [this node, {address}] (reported: {err.message})"
    return said_here(cause, text, err.message, err.cause.value if err.cause else None, {})


def judge(rec: PairRecord, outcome: Outcome, listen: bool, address: str = "", *, backend=None,
          kind: Kind | None = None) -> PairRecord:  # fmt: skip
    """pass: the partner's connection (the accepted one, for a listener) ended done."""
    conns = [c for c in outcome.connections if c.state != State.REJECTED]
    conn = conns[-1] if conns else None
    withdrawn = [c.error for c in outcome.connections if c.state == State.REJECTED and c.error]
    said: dict[str, Any] = {}  # what the outcome adds to the record: PairRecord's fields
    if outcome.counters:
        said["counters"] = tuple(outcome.counters)
    if conn is not None and conn.state == State.DONE and outcome.error is None and conn.error is None:
        said.update(result="pass", error=None)
    else:
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
        said.update(result="fail", error=ErrorDoc.of(local_cause_of(err, address, backend).to_dict()))
    if outcome.connections or outcome.steps_us:  # else nothing was set up (its own address did not resolve)
        steps = {s.step: s.avg_us for s in outcome.steps_us}
        said["steps_us"] = steps
        if not listen:
            setup = ("resolve addr", "resolve route", "create qp", "cm connect")
            said["setup_us"] = round(sum(steps.get(k, 0) for k in setup), 1)
        if conn is not None:
            said.update(kind.figures(conn.stats) if kind is not None and conn.stats is not None else {})
            said["stats"] = {
                k: v for k, v in as_dict(conn.stats).items() if not isinstance(v, (dict, type(None)))
            }
    return replace(rec, **said)
