"""One way to run a test: `run(Test(...)) -> Outcome`.

Every command (connect, listen, ping, mcast, events), selftest, doctor's probes and the mesh
agent describe what to run as a Test (a protocol from the table, a role, Params, addresses,
deadlines) and call run(). It builds the flow the role needs, runs it with stop requests
(signals) that end it between loop turns, always tears it down, and returns the Outcome. Knows
nothing of click or rich; the backend is injected (the scripted one in unit tests).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, replace
from typing import Callable

from rdmacli.engine.flow import Flow, Observer
from rdmacli.engine.protocol import Params, Protocol
from rdmacli.engine.results import from_flow
from rdmacli.engine.settings import Options, Timeouts
from rdmacli.engine.spec import Spec
from rdmacli.engine.stops import Stops
from rdmacli.errors import Cause, RdmacliError, Stopped, internal_error
from rdmacli.outcome import Outcome

CLIENT, SERVER = "client", "server"  # multicast: the sender is the client, a receiver the server


@dataclass
class Test:
    """What to run. Addresses are words until run() resolves them (a bad one is a usage
    error of the run, with its summary, not a traceback)."""

    command: str  # the summary's `command`
    spec: Spec  # a row of protocols/table.py: what goes on the wire
    role: str  # CLIENT or SERVER
    params: Params = field(default_factory=Params)
    host: str | None = None  # client: the server; multicast: the group
    port: int | None = None  # None: the spec's default port
    bind: str | None = None  # server: the address to listen on; client, multicast: the source
    connections: int | None = 1  # client: connections; multicast: QPs; server: clients (None: until stopped)
    send_only: bool = False  # multicast sender: join send-only
    route_only: bool = False  # client: stop after ROUTE_RESOLVED (doctor's resolution probe)
    timeouts: Timeouts = field(default_factory=Timeouts)
    options: Options = field(default_factory=Options)
    summary: dict = field(default_factory=dict)  # the summary's `params`
    needs: tuple[str, ...] = ()  # of the transport, beyond what the spec needs (rdmacli.transports)

    def make_protocol(self) -> Callable[[], Protocol]:
        cls = self.spec.client_class() if self.role == CLIENT else self.spec.server_class()
        params = self.params
        if self.role == CLIENT and self.connections and self.connections > 1:
            params = replace(params, group=self.connections)  # said to the server (hello)
        return lambda: cls.from_params(params)


# A flow factory: (test, the flow's common arguments) -> the Flow. A caller with needs of its own
# (the mesh: a token around each protocol, a listener that waits out stale requests) passes one
# that adjusts the arguments and calls default_flow with its own server class.
FlowFactory = Callable[[Test, dict], Flow]


def build(
    test: Test, *, observer: Observer | None = None, backend=None, factory: FlowFactory | None = None
) -> Flow:
    """The flow a test's role needs, its addresses resolved."""
    common = dict(
        make_protocol=test.make_protocol(),
        observer=observer,
        timeouts=test.timeouts,
        options=test.options,
        backend=backend,
        needs=test.spec.transport_needs + test.needs,
    )
    return (factory or default_flow)(test, common)


def default_flow(test: Test, common: dict, *, server: type | None = None, client: type | None = None) -> Flow:
    """The engine's flow for a test's role: a multicast flow, a server (`server`: a ServerFlow
    subclass), or a client (`client`: a ClientFlow subclass)."""
    from rdmacli.rdma import addr

    if test.spec.joins_group:
        from rdmacli.engine.mcast import McastFlow

        return McastFlow(
            group=addr.resolve(test.host, 0, what="multicast group"),
            src=addr.resolve(test.bind, 0, what="bind address") if test.bind else None,
            connections=test.connections or 1,
            send_only=test.send_only,
            **common,
        )
    port = (test.spec.default_port or 0) if test.port is None else test.port
    if test.role == SERVER:
        from rdmacli.engine.nativeserver import NativeServerFlow

        return (server or NativeServerFlow)(
            bind=addr.resolve(test.bind, port, passive=True, what="bind address"),
            max_clients=test.connections,
            **common,
        )
    from rdmacli.engine.nativeflow import NativeClientFlow

    return (client or NativeClientFlow)(
        dst=addr.resolve(test.host, port, what="server address"),
        src=addr.resolve(test.bind, 0, what="source address") if test.bind else None,
        connections=test.connections or 1,
        route_only=test.route_only,
        **common,
    )


def run(
    test: Test,
    *,
    observer: Observer | None = None,
    backend=None,
    stops: Stops | None = None,
    factory: FlowFactory | None = None,
) -> Outcome:
    """Run a test to its end and tear it down; its Outcome says what it came to. Never raises
    for a failed test: errors (a bug too, as an internal error) are in the outcome."""
    stops = stops or Stops()
    error: RdmacliError | None = None
    signum: int | None = None
    flow = None
    try:
        flow = build(test, observer=observer, backend=backend, factory=factory)
        with stops.running(flow):  # from here a signal asks the flow to stop, nothing more
            try:
                flow.run()
                if flow.stopping and stops.signum is not None:
                    signum = stops.signum
            finally:
                flow.close()  # never raises, on success, error and signal alike
    except Stopped as exc:  # before the flow existed
        signum = exc.signum
    except KeyboardInterrupt:
        signum = signal.SIGINT
    except RdmacliError as exc:
        error = exc
    except Exception as exc:  # a bug: still torn down, and reported in words
        if os.environ.get("RDMACLI_DEBUG"):
            raise
        error = internal_error(exc)
    if flow is None:  # failed before anything existed (no device, bad address)
        return Outcome(test.command, test.summary, error=error, signal=signum)
    flow.close()  # a no-op, unless a stop came between the flow's creation and its run
    why = signal.Signals(signum).name if signum is not None else None
    if why is None and error is not None and error.cause is Cause.DEADLINE and not error.details.get("step"):
        why = "deadline"  # the overall --timeout (a connection's own deadline names its step)
    if why is not None and end_open(flow, why):
        signum = error = None  # ping(8): a stop is the normal end of an open-ended run
    if signum is None and stops.signum is not None:
        flow.warnings.append(
            f"{signal.Signals(stops.signum).name} arrived after the run had ended; its result stands"
        )
    outcome = from_flow(test.command, flow, test.summary, error=error, signal=signum)
    with_counters(outcome, flow.counters.finish(), flow.backend.explain)
    return outcome


def with_counters(outcome: Outcome, deltas, explain) -> None:
    """The ports' counter deltas into the outcome; a failure the counters explain (a deadline
    while retransmits moved) is said as what they show: packet loss, RNR, link errors
    (`explain`: the backend's, the policy of diag.counters)."""
    outcome.counters = list(deltas)
    if outcome.signal is not None:
        return
    outcome.error = explain(outcome.error, deltas) or outcome.error
    for c in outcome.connections:
        c.error = explain(c.error, deltas) or c.error


def end_open(flow: Flow, why: str) -> bool:
    """The run was ended from outside (a deadline or a signal): each open connection's
    protocol says whether that is its normal end (ping(8)), a failure of its own, or
    neither. True when every open connection had its say (the stop is then no error)."""
    open_conns = [c for c in flow.all_conns if not c.finished]
    said = [(c, c.protocol.on_stop(c, why) if c.protocol else None) for c in open_conns]
    if not open_conns or any(verdict is None for _, verdict in said):
        return False
    for conn, verdict in said:
        if verdict is True:
            conn.finish()
        elif verdict is not None:
            conn.fail(verdict)
    return True
