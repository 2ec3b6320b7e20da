"""What a person gave `rdmacli mesh`, checked and made into a run: everything read from people
and files (the node set, the map, the topology, the baseline, the launcher's arguments, the
rails) is checked here, before any agent starts, and said as a usage error where it is wrong.
The CLI (cli/mesh.py) declares the options and renders; the run is mesh/run.py's."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import contract, inputs
from rdmacli.mesh import nodes as N
from rdmacli.mesh.run import Launch, Request


@dataclass(frozen=True)
class Given:
    """`rdmacli mesh`'s options as click parsed them (names as cli/mesh.py declares them)."""

    nodes: str
    launcher: str
    test: str
    count: int
    port: int
    quick: bool
    round_time: float
    rails_spec: str
    ipv6: bool
    cross_rail: bool
    pairs_spec: str
    rotation: int | None
    show_rail: int | None
    slow_factor: float
    slow_fraction: float
    retest_rounds: int
    launch_timeout: float | None
    address_template: str | None
    map_file: str | None
    agent_command: str | None
    ssh_options: str | None
    topology_file: str | None
    connect_timeout: float
    srun_args: str | None
    baseline: str | None


@dataclass(frozen=True)
class Planned:
    """A checked request, how its agents start, and the topology file's checked text (ssh's
    tree mode: written where ClusterShell loads it, inputs.topology_file)."""

    request: Request
    launch: Launch
    topology: str | None


def _usage(words: str) -> RdmacliError:
    return RdmacliError(words, cause=Cause.USAGE)


def _rails_and_addresses(
    g: Given, names: list[str], mapping: dict
) -> tuple[tuple[tuple[str, ...], ...], contract.Discover | None]:
    """The rails' addresses given (--address-template or the map), or what the agents are to
    discover (--rails, the family)."""
    given = g.address_template or mapping
    if g.address_template and mapping:
        raise _usage("give --address-template or --map's addresses, not both")
    if given and g.rails_spec != "auto":
        raise _usage(
            "--rails names devices the agents find; with --map or --address-template the "
            "addresses given are the rails"
        )
    if not given:
        if g.rails_spec != "auto":
            from rdmacli.mesh.rails import parse_devices

            try:
                parse_devices(g.rails_spec)
            except ValueError as exc:
                raise _usage(f"bad --rails {g.rails_spec!r}: {exc}") from exc
        return (), contract.Discover(None if g.rails_spec == "auto" else g.rails_spec, 6 if g.ipv6 else 4)
    addresses = N.addresses(names, template=g.address_template, mapping=mapping, map_file=g.map_file)
    if addresses and g.port + len(addresses[0]) - 1 > 65535:
        raise _usage(f"--port {g.port}: rail {len(addresses[0]) - 1} would listen past 65535")
    return tuple(tuple(a) for a in addresses), None


def plan(g: Given, matrix=None) -> Planned:
    """The run `g` asks for (`matrix`: run.Request's sink factory, the CLI's)."""
    base = inputs.read_baseline(g.baseline) if g.baseline else None
    agent_cmd = inputs.split_args("--agent-command", g.agent_command)
    inputs.split_args("--srun-args", g.srun_args)
    inputs.split_args("--ssh-options", g.ssh_options)
    if g.topology_file and g.launcher != "ssh":
        raise _usage("--topology is ClusterShell's tree mode: give it with --launcher ssh")
    topology = inputs.read_topology(g.topology_file) if g.topology_file else None
    pairs, sample = inputs.parse_pairs(g.pairs_spec)
    mapped = inputs.read_map(g.map_file) if g.map_file else None
    names = N.expand(g.nodes)
    groups = inputs.groups_of(names, mapped, g.map_file, needed=pairs != "all")
    rotation = g.rotation
    if pairs == "sample" and rotation is None:
        rotation = int(time.time() // 3600)  # the hour: an hourly run moves its window
    addresses, discover = _rails_and_addresses(g, names, mapped.addresses if mapped is not None else {})
    spec = contract.RunSpec(
        run_id=contract.new_run_id(), probe_key=contract.new_probe_key(), names=tuple(names),
        addresses=addresses, round_s=g.round_time, port=g.port, test=g.test, count=g.count, quick=g.quick,
        cross_rail=g.cross_rail, discover=discover, pairs=pairs, groups=groups, sample=sample,
        rotation=rotation or 0,
    )  # fmt: skip
    request = Request(
        spec=spec, nodes_spec=g.nodes, launch_s=g.launch_timeout, retest_rounds=g.retest_rounds,
        slow_factor=g.slow_factor, slow_fraction=g.slow_fraction, baseline=base, show_rail=g.show_rail,
        matrix=matrix,
    )  # fmt: skip
    launch = Launch(g.launcher, agent_cmd, g.ssh_options, g.srun_args, g.connect_timeout)
    return Planned(request, launch, topology)
