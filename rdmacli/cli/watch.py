"""`rdmacli watch`: the fabric checked all the time. `run` is the agent (a service on each node),
`show` prints this node's agent's state, `status` gathers every node's and blames as mesh does."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import fields

import click

import rdmacli.watch as defaults
from rdmacli.cli import HELP, options
from rdmacli.cli.app import App, file_option, json_reported, pairs_option, params_of
from rdmacli.sched.slurm import WATCH_PREFIX
from rdmacli.watch.hysteresis import Policy


def policy_options(f):
    """The verdict's options, one per field of watch/hysteresis.Policy (its default, least value
    and words are the field's): the policy declared once."""
    for fld in reversed(fields(Policy)):
        f = click.option(f"--{fld.name.replace('_', '-')}", type=click.IntRange(fld.metadata["least"]),
                         default=fld.default, show_default=True, help=fld.metadata["help"])(f)  # fmt: skip
    return f


DEFAULT_PORT = defaults.PORT


def _address_port(ctx, param, value):
    """ADDRESS:PORT ([v6]:PORT for IPv6), never a bare port: the endpoint is bound where asked."""
    if value is None:
        return None
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter("ADDRESS:PORT, e.g. 10.0.0.5:9590 or 127.0.0.1:9590 ([::1]:9590 for IPv6)")
    return host, int(port)


def port_option(help: str, high: int = 65535):
    """-p/--port on every watch command, as on every other command: the agents' probe port."""
    return click.option("-p", "--port", type=click.IntRange(1, high), default=DEFAULT_PORT, show_default=True,
                        help=help)  # fmt: skip


def _state_file(template: str | None, node: str) -> str | None:
    return template.replace("{node}", node) if template else None


@click.group("watch", context_settings=HELP)
def command() -> None:
    """Check the fabric all the time: an agent per node probes its rails' peers in windows, with
    verdicts over time (suspect, bad, flapping, cleared) and Prometheus metrics; `watch status`
    gathers every agent's verdicts into one blame (NIC, node, link), as `mesh` does."""


@command.command("run", context_settings=HELP)
@file_option(
    "--map",
    "map_path",
    help="The nodes and their rails' addresses (mesh's map: `NODE [group=G] [ADDRESS...]`); read "
    "again on SIGHUP.",
)
@click.option("--nodes", metavar="NODESET",
              help="The nodes as a node set ('n[001-128]', @group): the names, their addresses from "
              "--map, --address-template or their names resolved; expanded again on SIGHUP.")  # fmt: skip
@click.option("--address-template", "template", metavar="TEMPLATE",
              help="A node's RDMA address (one rail) from its name, e.g. '{node}-ib'.")  # fmt: skip
@options.node_option
@port_option("The probes' port (UDP port space) on rail 0, rail k on PORT + k; the same on every node.",
             high=65535 - 16)  # fmt: skip
@options.seconds_option(
    "--window",
    "window_s",
    low=5,
    high=3600,
    default=defaults.WINDOW_S,
    help="Seconds a probe window lasts (on the wall clock: every node's windows coincide).",
)
@click.option(
    "-C",
    "--count",
    type=click.IntRange(1, 1000),
    default=defaults.COUNT,
    show_default=True,
    help="Probes to each partner in a window (20: a NIC dropping 5 % shows in nearly every window).",
)
@click.option(
    "--partners",
    type=click.IntRange(1),
    default=None,
    help="Partners a window (rounds of the mesh schedule); default: all, within the rate budget.",
)
@pairs_option("between every two groups a period, the next K each period")
@click.option(
    "--state-file",
    metavar="PATH",
    help="Where the verdicts are written after each window (default /run/rdmacli/watch-PORT.json).",
)
@click.option(
    "--metrics",
    callback=_address_port,
    metavar="ADDRESS:PORT",
    help="Serve Prometheus /metrics there (off by default; bind to a management address).",
)
@file_option(
    "--key-file",
    help="The fabric's probe key (`rdmacli watch key FILE`; the same on every node, mode 0600): "
    "probes and answers are tagged with it, and forged ones dropped and counted.",
)
@file_option(
    "--web-config-file",
    help="TLS, client certificates and basic auth for /metrics: Prometheus's web config file "
    "(node_exporter's format), read again when it changes.",
)
@policy_options
def run(map_path, nodes, template, node, port, window_s, count, partners, pairs_spec, state_file, metrics,
        key_file, web_config_file, **policy) -> None:  # fmt: skip
    """Run this node's agent until SIGTERM (a systemd unit: rdmacli-watch.service, Type=notify)."""
    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.mesh.inputs import parse_pairs
    from rdmacli.watch.hysteresis import Policy
    from rdmacli.watch.service import Options, serve

    app = App.from_context()
    with app.errors("watch run"):
        pairs = parse_pairs(pairs_spec)
        if web_config_file and not metrics:
            raise click.UsageError("--web-config-file configures /metrics: give --metrics too")
        try:
            verdicts = Policy(**policy)
        except ValueError as exc:
            raise RdmacliError(str(exc), hint="--raise-after <= --raise-window <= --flap-window",
                               cause=Cause.USAGE) from None  # fmt: skip
        opts = Options(map_path, node, port, window_s, count, partners, state_file, metrics, pairs, nodes,
                       template, web_config_file, key_file)  # fmt: skip
        sys.exit(serve(opts, verdicts))


@command.command("key", context_settings=HELP)
@click.argument("path", metavar="FILE")
def key(path) -> None:
    """Make a new probe key in FILE (mode 0600, never over an existing file), for every node's
    agent (`watch run`'s key file)."""
    from rdmacli.watch.key import write_key

    app = App.from_context()
    with app.errors("watch key"):
        write_key(path)


@command.command("unit", context_settings=HELP)
@click.option("--force", is_flag=True, help="Print it even where its sandbox could not reach this rdmacli.")
def unit(force) -> None:
    """Print the systemd unit that runs this install's agent (its ExecStart this rdmacli's path).
    Refused (exit 3) where the unit's sandbox would hide this install (a venv in /root or /tmp, a
    directory others cannot read); under a home directory others can read, it is printed with
    ProtectHome=read-only, and said."""
    from rdmacli.watch.install import checked_unit

    app = App.from_context()
    with app.errors("watch unit"):
        text, said = checked_unit(force)
    for line in said:
        click.echo(f"watch unit: {line}", err=True)
    click.echo(text, nl=False)


@command.command("daemonset", context_settings=HELP)
def daemonset() -> None:
    """Print a Kubernetes DaemonSet that runs the agent on every RDMA node (host network, the
    device plugin's RDMA devices, IPC_LOCK, not privileged; the key and web config as Secrets)."""
    from rdmacli.watch.install import daemonset_text

    click.echo(daemonset_text(), nl=False)


@command.command("show", context_settings=HELP)
@click.option("--node", metavar="NAME", help="This node's name (with {node} in --state-file).")
@port_option("The agent's port (--port of its `watch run`): its state file is named after it.")
@click.option("--state-file", metavar="PATH", help="The agent's state file ({node}: this node's name).")
def show(node, port, state_file) -> None:
    """Print this node's agent's verdicts (its state file) as one JSON line."""
    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.mesh.inputs import read_regular
    from rdmacli.watch.service import state_path

    app = App.from_context(json_lines=True)  # one line, its error too: `watch status` reads it
    with app.errors("watch show"):
        path = _state_file(state_file, node or "") or state_path(port)
        if not os.path.lexists(path):  # no agent writes there: this host's state, not a usage error
            whose = f"no agent writes {path}" if state_file else f"no agent of port {port} runs here"
            which = "--state-file" if state_file else "--port or --state-file"
            raise RdmacliError(
                f"no watch state file at {path}: {whose}, or it has not finished its first window",
                hint="start the agent (`systemctl start rdmacli-watch`, or `rdmacli watch run`), or "
                f"give the {which} it runs with",
                cause=Cause.ENVIRONMENT,
            )
        text = read_regular(path, "the watch state file", limit=4 * 2**20)
        try:
            doc = json.loads(text, parse_constant=_no_constant)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            line = json.dumps(doc, separators=(",", ":"), allow_nan=False)
        except (ValueError, RecursionError) as exc:  # NaN, nesting past Python's stack, a list
            why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:120]
            raise RdmacliError(f"{path}: not a watch state file ({why})", cause=Cause.USAGE) from None
        click.echo(line)


def _no_constant(name: str):
    """NaN and Infinity: Python's json takes them, JSON has none (and the agent writes none)."""
    raise ValueError(f"{name} is not JSON")


@command.command("status", context_settings=HELP)
@click.argument("nodes")
@file_option(
    "--map",
    "map_path",
    help="The map the agents run with (their names and rails); without it, the agents' nodes are "
    "NODES, one rail each (as `watch run --nodes` without a map).",
)
@click.option(
    "--launcher",
    type=click.Choice(["ssh", "exec"]),
    default="ssh",
    show_default=True,
    help="How `rdmacli watch show` runs on each node (ClusterShell's workers).",
)
@port_option("The agents' port (--port of their `watch run`).")
@click.option("--state-file", metavar="PATH", help="The agents' state file ({node}: each node's name).")
@options.seconds_option(
    "--timeout",
    low=1,
    high=600,
    default=30.0,
    help="Seconds to wait for every node's answer.",
)
@click.option(
    "--agent-command",
    default="rdmacli",
    show_default=True,
    metavar="CMD",
    help="How rdmacli is run on the nodes (words, no shell).",
)
@click.option(
    "--fanout",
    type=click.IntRange(1, 4096),
    default=defaults.FANOUT,
    show_default=True,
    help="Nodes asked at once, at most (ClusterShell's fanout): each answer is a Python start beside "
    "that node's agent.",
)
@pairs_option("between every two groups a period: the agents' own (it says how many partners a NIC has)")
@options.slurm_drain_options(WATCH_PREFIX)
@json_reported
def status(nodes, map_path, launcher, port, state_file, timeout, agent_command, fanout, pairs_spec,
           slurm_drain, max_drain, dry_run, app) -> None:  # fmt: skip
    """Gather the agents' current verdicts for NODES and blame them as `mesh` does."""
    from rdmacli.cli.ending import finish
    from rdmacli.watch.gather import gather

    params = params_of("nodes launcher port")
    with app.errors("watch status", params):
        from functools import partial

        from rdmacli.mesh.watchfindings import StatusReport
        from rdmacli.render.watch import status_view

        if dry_run and not slurm_drain:
            raise click.UsageError("--dry-run goes with --slurm-drain")
        outcome = gather(nodes, map_path, launcher, port, state_file, timeout, agent_command, params,
                         pairs_spec, fanout=fanout)  # fmt: skip
        report = outcome.report if isinstance(outcome.report, StatusReport) else None
        if slurm_drain:
            blame, ran = (report.blame, list(report.agents)) if report is not None else (None, [])
            asked = report.totals.nodes if report is not None and report.totals is not None else 0
            options.act_on_verdict(outcome, blame, ran, asked, WATCH_PREFIX, max_drain, dry_run)
        finish(app, outcome, partial(status_view, report=report))
