"""`rdmacli watch run` as a service: the plan from a map, signals, readiness, the state file.

systemd runs it as `Type=notify` (rdmacli/watch/rdmacli-watch.service): READY=1 goes to
$NOTIFY_SOCKET once the metrics endpoint (if any) listens and the first window is planned, and
STATUS= says what the last window saw. SIGTERM and SIGINT stop it at the window's next loop
turn (NICs closed, exit 0); SIGHUP re-reads the map (a map that no longer reads, or no longer
has this node, is refused in words and the old plan kept). After each window the agent's
verdicts are written atomically to the state file (`watch status` reads it through the
launcher); as root nothing but a regular file is replaced (render/files.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.watch.hysteresis import State
from rdmacli.watch.statefile import NicEntry, PairEntry, StateDoc

STATE_DIR = "/run/rdmacli"


def state_path(port: int) -> str:
    return os.path.join(STATE_DIR, f"watch-{port}.json")


def writable(path: str, made: bool) -> None:
    """The state file can be written (tried for real, before anything starts), or the agent
    cannot run: said with what to change, exit 3. `made`: the default's directory is made here."""
    import errno

    from rdmacli.render.files import check

    try:
        if made:
            os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
        check(path)
    except OSError as exc:
        hints = {
            errno.ENOENT: f"create {os.path.dirname(os.path.abspath(path))}, or give --state-file a path in "
            "a directory that exists (under systemd, the unit's RuntimeDirectory makes /run/rdmacli)",
            errno.EACCES: "run the agent as a user who may write there, or give --state-file PATH",
            errno.EROFS: "give --state-file a path on a writable file system (under systemd, "
            "ReadWritePaths= for its directory)",
            errno.ENOSPC: "free space on that file system, or give --state-file a path on another",
        }
        hint = hints.get(exc.errno or 0, "give --state-file the path of a regular file (not a directory, "
                         "a link or a FIFO), e.g. DIR/watch.json")  # fmt: skip
        said = f"cannot write the watch state file {path}: {exc.strerror or exc}"
        raise RdmacliError(said, hint=hint, cause=Cause.ENVIRONMENT) from exc


def notify(message: str) -> bool:
    """One sd_notify(3) datagram to $NOTIFY_SOCKET (an abstract socket when it starts with @);
    False where there is none (not under systemd)."""
    path = os.getenv("NOTIFY_SOCKET")
    if not path or path[0] not in "/@":
        return False
    if path[0] == "@":
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        try:
            s.sendto(message.encode(), path)
        except OSError:
            return False
    return True


@dataclass(frozen=True)
class Options:
    map_path: str | None  # mesh's map: names, rails' addresses, groups
    node: str | None
    port: int
    window_s: float
    count: int
    partners: int | None  # schedule rounds a window; None: every partner each window, within the rate budget
    state_file: str | None
    metrics: tuple[str, int] | None  # (address, port) of the /metrics endpoint
    pairs: tuple[str, int] = ("all", 0)  # mesh's --pairs: all, group or sample and its K
    nodes: str | None = None  # a node set (ClusterShell syntax, @groups too): the names, else the map's
    template: str | None = None  # --address-template: a node's one rail from its name
    web_config: str | None = None  # /metrics's TLS and basic auth (webconfig.py)
    key_file: str | None = None  # the fabric's probe key (key.py); None: probes not authenticated

    @property
    def source(self) -> str:
        """Where the nodes come from, as the messages say it."""
        return " and ".join(x for x in (self.nodes and f"--nodes {self.nodes}", self.map_path) if x)


def map_names(m) -> list[str]:
    """A map's nodes (mesh/inputs.MapFile: with addresses, or a map of groups), none without."""
    return list((m.addresses or m.groups) if m is not None else ())


def plan_nodes(opts: Options) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """The names, each one's rails' addresses (IP literals) and groups, from the node set and/or
    the map, as `mesh` takes them (mesh/nodes.addresses: the map's addresses, else the template,
    else the names resolved, all within one deadline). Read again on SIGHUP: a node set's
    @group or a name's address may have changed too."""
    from rdmacli.mesh import nodes as N
    from rdmacli.mesh.inputs import groups_of, read_map

    m = read_map(opts.map_path) if opts.map_path else None
    names = N.expand(opts.nodes) if opts.nodes else map_names(m)
    if not names:
        raise RdmacliError("watch needs its nodes: --nodes NODESET, --map FILE, or both", cause=Cause.USAGE)
    mapping = m.addresses if m else {}
    if opts.template and mapping:
        raise RdmacliError("give --address-template or --map's addresses, not both", cause=Cause.USAGE)
    addrs = N.addresses(names, template=opts.template, mapping=mapping, map_file=opts.map_path)
    kind, _ = opts.pairs
    groups = groups_of(names, m, opts.map_path, needed=True) if kind != "all" else ()
    return tuple(names), tuple(tuple(a) for a in addrs), groups


def load_plan(opts: Options):
    """The plan from the nodes (plan_nodes) and this node's name (given, else the host's, as
    `mesh-agent --rank-from-host` finds it)."""
    from rdmacli.mesh.nodes import rank_of_host
    from rdmacli.probe.siphash import PUBLIC_KEY
    from rdmacli.watch.key import read_key
    from rdmacli.watch.plan import RATE_BUDGET, WatchPlan

    key = read_key(opts.key_file) if opts.key_file else PUBLIC_KEY
    names, addrs, groups = plan_nodes(opts)
    me = opts.node or socket.gethostname()
    rank = rank_of_host(names, me)
    if rank is None:
        raise RdmacliError(f"{me} is not a node of {opts.source}", hint="give --node NAME", cause=Cause.USAGE)
    _, sample = opts.pairs
    per = opts.partners
    try:
        if per is None:  # every partner each window, as many as the budget allows
            rounds = WatchPlan(names, addrs, rank, opts.port, opts.window_s, 1, 1, groups, sample).rounds
            per = max(1, min(rounds, WatchPlan.most_per_window(opts.window_s, opts.count)))
        return WatchPlan(names, addrs, rank, opts.port, opts.window_s, opts.count, per, groups, sample, key)
    except ValueError as exc:
        raise RdmacliError(
            f"watch: {exc} (at most {RATE_BUDGET:g} probes a second a NIC)", cause=Cause.USAGE
        ) from None


def state_doc(agent, node: str, k: int | None) -> dict:
    """What the state file holds (statefile.StateDoc): this agent's named and suspect subjects,
    nothing healthy, and each NIC's facts. A pair named with a NIC this agent names is counted in
    that NIC's entry (pairs_named), not listed: the NIC explains it (the compact form that keeps a
    dead NIC's state of a 1000 x 8 fabric a few hundred bytes, where it was 7992 entries)."""
    plan, st = agent.plan, agent.state
    nics = []
    named_nics = {rail for rail, t in st.nics.items() if t.alerted}  # their pairs are implied (compact)
    implied = {rail: 0 for rail in named_nics}
    pairs = []
    for (rail, peer, peer_rail), t in sorted(st.pairs.items()):
        if t.state is State.OK:
            continue
        if rail in named_nics and t.alerted:
            implied[rail] += 1
            continue
        pairs.append(PairEntry(rail=rail, peer=plan.names[peer], peer_rail=peer_rail, state=t.state.value,
                               cause=t.cause))  # fmt: skip
    for rail in range(plan.rails):
        t, ref = st.nics.get(rail), st.refs.get(rail)
        nics.append(
            NicEntry(
                rail=rail,
                state=(t.state if t else State.OK).value,
                cause=t.cause if t else None,
                address=plan.addresses[plan.rank][rail],
                device=agent.devices.get(rail),
                problem=agent.problems.get(rail),
                forged=agent.forged.get(rail, 0),
                foreign=agent.foreign.get(rail, 0),
                reference=ref.figures() if ref is not None else None,
                pairs_named=implied.get(rail, 0),
            )
        )
    return StateDoc(
        node=node,
        port=plan.port,
        window=k,
        time=round(time.time(), 3),
        window_s=plan.window_s,
        period_s=plan.period_s(),
        windows=st.windows,
        skipped=agent.skipped,
        starved=agent.starved,
        host_wait=round(agent.host_wait, 3),
        authenticated=plan.authenticated,
        nics=tuple(nics),
        pairs=tuple(pairs),
    ).to_dict()


def open_metrics(registry, opts: Options):
    """The /metrics endpoint (endpoint.serve_metrics), or the reason it cannot open in words: a
    port taken, an address not this host's, a web config or a certificate that does not load."""
    from rdmacli.watch.endpoint import serve_metrics
    from rdmacli.watch.webconfig import WebConfigError, WebSource

    addr, port = opts.metrics or ("", 0)
    web = None
    try:
        if opts.web_config:
            web = WebSource(opts.web_config)
            if web.config.tls is not None:
                web.context()
    except WebConfigError as exc:
        hint = "Prometheus's web config: tls_server_config (PEM files) and basic_auth_users (bcrypt)"
        raise RdmacliError(f"--web-config-file: {exc}", hint=hint, cause=Cause.USAGE) from None
    try:
        return serve_metrics(registry, addr, port, web)
    except OSError as exc:
        hint = "another process may serve that port, or the address is not this host's"
        raise RdmacliError(
            f"--metrics {addr}:{port}: {exc.strerror or exc}", hint=hint, cause=Cause.ENVIRONMENT
        ) from None


def watchdog(agent) -> None:
    """systemd's watchdog (the unit's WatchdogSec, $WATCHDOG_USEC for this process): a thread that
    pings at half the interval while the agent says it makes progress (WatchAgent.alive), and
    stops pinging when it does not (systemd then restarts it)."""
    usec, pid = os.getenv("WATCHDOG_USEC"), os.getenv("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
        return
    every = int(usec) / 2e6

    def ping() -> None:
        while not agent.stopping.wait(every):
            if agent.alive():
                notify("WATCHDOG=1")

    import threading

    threading.Thread(target=ping, name="watchdog", daemon=True).start()


def rails_found(plan, *, port_of=None, netdev_of=None) -> list[str | None]:
    """This node's rails as the host has them: for each rail, None when an RDMA port holds its
    address, else why not in words (the address on no netdev of this host, or on a netdev with
    no RDMA device: no driver loaded, `rdma link add` not run)."""
    from rdmacli.diag.local import netdev_of as find_netdev
    from rdmacli.mesh.rails import port_of as find_port

    port_of, netdev_of = port_of or find_port, netdev_of or find_netdev
    out: list[str | None] = []
    for address in plan.addresses[plan.rank]:
        if port_of(address) is not None:
            out.append(None)
        elif netdev_of(address) is None:
            out.append(f"{address} is on no network interface of this host")
        else:
            out.append(f"{address} is on {netdev_of(address)}, which no RDMA device has")
    return out


def refuse_transport(plan, *, port_of=None, transport_of=None) -> None:
    """watch's checks are probe kinds (UD datagrams): a rail on a transport without them
    (iWARP) cannot run one, said at start with what works there, exit 3."""
    from rdmacli.diag.devices import transport_of as find_transport
    from rdmacli.mesh.rails import port_of as find_port
    from rdmacli.probe.kinds import KINDS
    from rdmacli.transports import refusal

    port_of, transport_of = port_of or find_port, transport_of or find_transport
    for rail, address in enumerate(plan.addresses[plan.rank]):
        found = port_of(address)
        transport = transport_of(*found) if found else None
        err = transport and refusal(transport, found[0], KINDS[plan.test].needs)
        if err:
            raise RdmacliError(
                f"rail {rail} ({address}): {err.message}: watch's {plan.test} check needs them",
                hint=f"watch runs on RoCE and InfiniBand; on iWARP, {err.hint}",
                cause=Cause.TRANSPORT,
            )


def preflight(plan, err, *, port_of=None, netdev_of=None) -> None:
    """Said at start: a rail without an RDMA port is named (the agent goes on with the others and
    opens it again each window); with none at all the agent cannot run (exit 3). `port_of`,
    `netdev_of`: how the host is looked at (rails_found's)."""
    refuse_transport(plan, port_of=port_of)
    missing = rails_found(plan, port_of=port_of, netdev_of=netdev_of)
    hint = "load the RDMA driver (`rdma link` lists the devices; Soft-RoCE: `rdma link add`), or fix the map"
    if all(missing):
        said = "; ".join(w for w in missing if w)
        raise RdmacliError(
            f"no rail of this node has an RDMA device: {said}", hint=hint, cause=Cause.ENVIRONMENT
        )
    for rail, why in enumerate(missing):
        if why:
            print(f"watch: rail {rail}: {why}; its pairs fail until it appears ({hint})", file=err)


def serve(opts: Options, policy, *, err=sys.stderr) -> int:
    """Run the agent until SIGTERM/SIGINT; 0 then."""
    from rdmacli.render.files import replace
    from rdmacli.watch.agent import WatchAgent
    from rdmacli.watch.metrics import WatchMetrics
    from rdmacli.watch.state import WatchState

    plan = load_plan(opts)
    node = plan.names[plan.rank]
    path = opts.state_file or state_path(opts.port)
    writable(path, made=opts.state_file is None)
    metrics = WatchMetrics(node)
    if opts.metrics is not None:
        open_metrics(metrics.registry, opts)
    preflight(plan, err)
    cpu = [time.process_time()]

    said: dict[int, str] = {}
    unwritten: list[str] = []  # why the state file was not written last time ([]: it was)

    def write_state(k: int | None) -> None:
        """The state file replaced (render/files.replace: a temporary file in its directory made
        without following links, renamed over it). A failure (a disk full, a link, a FIFO or a
        directory put there, the directory removed) is counted and said when its reason changes;
        the agent goes on probing and serving /metrics, and writes again after the next window."""
        try:
            replace(path, (json.dumps(state_doc(agent, node, k), allow_nan=False) + "\n").encode())
        except OSError as exc:
            why = exc.strerror or str(exc)
            metrics.state_write_failures.inc()
            if unwritten != [why]:
                print(f"watch: the state file {path} not written: {why}; tried again after the next window",
                      file=err)  # fmt: skip
            unwritten[:] = [why]
            return
        if unwritten:
            print(f"watch: the state file {path} written again", file=err)
            unwritten.clear()

    said_starved = [False]

    def on_window(k, ends, by_nic):
        for rail in sorted(set(said) | set(agent.problems)):  # a rail's NIC gone or back, said once
            now = agent.problems.get(rail)
            if now != said.get(rail):
                print(f"watch: rail {rail}: {now or 'open again'}", file=err)
        said.clear()
        said.update(agent.problems)
        names = list(agent.plan.names)
        metrics.window(
            by_nic,
            agent.devices,
            agent.state,
            names,
            agent.problems,
            agent.forged,
            agent.foreign,
            agent.refused,
        )
        metrics.host_wait.set(agent.host_wait)
        if agent.window_starved != said_starved[0]:  # said when it starts and when it ends
            said_starved[0] = agent.window_starved
            words = (f"not judged, its probe threads waited {agent.host_wait:.0%} of the phase for a CPU "
                     "(this host is too busy to measure the fabric)" if agent.window_starved
                     else "this host gives the probes the CPU again: judged")  # fmt: skip
            print(f"watch: window {k}: {words}", file=err)
        if agent.window_starved:
            metrics.starved.inc()
        used = time.process_time() - cpu[0]
        cpu[0] += used
        metrics.cpu.set(used / agent.plan.window_s / max(agent.plan.rails, 1))
        write_state(k)
        subjects = [*agent.state.pairs.values(), *agent.state.nics.values()]
        named = sum(t.alerted for t in subjects)
        notify(f"STATUS=window {k}: {named} named")

    def read_again():
        """SIGHUP's plan, read in the agent's loop (never in the handler): None when refused."""
        try:
            new = load_plan(opts)
        except Exception as exc:  # noqa: BLE001 - a bad map is refused, the agent goes on
            print(f"watch: {opts.source} not taken, the old plan goes on: {exc}", file=err)
            return None
        if new.names[new.rank] != node:
            print(
                f"watch: {opts.source} not taken: it makes this node {new.names[new.rank]}, not {node}",
                file=err,
            )
            return None
        print(f"watch: {opts.source} read again; the new plan starts at the next window", file=err)
        return new

    agent = WatchAgent(
        plan, WatchState(rails=plan.rails, policy=policy), on_window=on_window, loader=read_again
    )

    def stop(signum, frame):
        agent.stop()

    def reload(signum, frame):
        agent.ask_reload()

    watchdog(agent)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, stop)
    signal.signal(signal.SIGHUP, reload)
    write_state(None)
    notify(f"READY=1\nSTATUS=probing {plan.rails} rail(s), {len(plan.partners(0))} partner(s) a window")
    print(
        f"watch: {node}, {plan.rails} rail(s), windows of {plan.window_s:g} s, every pair within "
        f"{plan.period_s():g} s; state in {path}",
        file=err,
    )
    if not plan.authenticated:
        print(
            "watch: probes not authenticated (no --key-file): any process on the fabric can forge "
            "them and move the verdicts; `rdmacli watch key FILE` makes a key for every node",
            file=err,
        )
    agent.run()
    notify("STOPPING=1")
    return 0
