"""`rdmacli mesh NODES`: every pair of nodes tested over RDMA, with blame, on ClusterShell or srun."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import click

from rdmacli.cli import HELP, options
from rdmacli.cli.app import file_option, pairs_option, params_of, reported
from rdmacli.mesh import plan as P
from rdmacli.mesh.contract import MAX_ROUND_S, TEST_WORDS, TESTS, default
from rdmacli.mesh.launch import LAUNCHERS
from rdmacli.sched.slurm import MESH_PREFIX


@click.command("mesh", context_settings=HELP)
@click.argument("nodes")
@click.option(
    "--launcher",
    type=click.Choice(LAUNCHERS),
    default="ssh",
    show_default=True,
    help="How agents start: ClusterShell's ssh worker, srun (inside a Slurm allocation), or "
    "ClusterShell's exec worker (all agents on this machine, one per node address: labs, CI).",
)
@click.option(
    "--test",
    type=click.Choice(TESTS),
    default=default("test"),
    show_default=True,
    help="Per pair: " + "; ".join(f"{test} ({words})" for test, words in TEST_WORDS.items()) + ".",
)
@options.count_option("Pings (or messages) per pair.", high=100_000, default=default("count"))
@click.option(
    "-p",
    "--port",
    type=click.IntRange(1, 65535),
    default=default("port"),
    show_default=True,
    help="RDMA CM port the lower rank of each pair listens on.",
)
@click.option(
    "--quick", is_flag=True, help="About log2(N) rounds instead of N-1: each node meets that many partners."
)
@options.seconds_option(
    "--round-time",
    low=0.5,
    high=MAX_ROUND_S,
    default=default("round_s"),
    help="Seconds per round: each pair's slot (setup, test, teardown); a pair still running at its"
    " end is torn down there (OVER). A dead node costs its pairs one round each. Real "
    "fabrics: 1 is plenty; the emulated lab: 3 up to 8 nodes, 6 for 16.",
)
@click.option(
    "--launch-timeout",
    type=options.Finite(1, 3600),
    metavar="SECONDS",
    help="Seconds for the launcher to start every agent before round 1 begins (and for rail "
    "discovery). Default: as the launch goes: 60 s and 0.02 s a node for the first agent, then "
    "discovery waits after each report as long again as the slowest start-up so far (20 s at "
    "least), and the run's deadline is twice discovery's slowest; 600 s at most. Round 1 starts "
    "as soon as every agent is ready.",
)
@click.option(
    "--address-template",
    metavar="TEMPLATE",
    help="A node's RDMA address from its name, e.g. '{node}-ib' ({rank} also works).",
)
@file_option(
    "--map",
    "map_file",
    help="A file of `NODE [group=NAME] [ADDRESS...]` lines: each node's rails (rail k the k-th "
    "address; none: discovered) and group (for --pairs).",
)
@click.option(
    "--agent-command",
    metavar="CMD",
    help="How to run rdmacli on the nodes [default: rdmacli; exec: this Python's rdmacli].",
)
@click.option(
    "--ssh-options", metavar="OPTS", help="Extra ssh options for ClusterShell (e.g. '-i key -p 2222')."
)
@file_option(
    "--topology",
    "topology_file",
    help="ClusterShell's tree mode (with --launcher ssh): a topology file ([routes], `THIS_HOST: "
    "gw[1-4]`, `gw[1-4]: node[1-1000]`): agents start through the gateways, which run "
    "ClusterShell.",
)
@options.seconds_option(
    "--ssh-timeout",
    "connect_timeout",
    low=1,
    high=600,
    default=10.0,
    help="ssh's connection timeout per node (ssh's ConnectTimeout, not the CM's).",
)
@click.option(
    "--srun-args",
    metavar="ARGS",
    help="srun placement options instead of srun's --nodelist=NODES --ntasks-per-node=1.",
)
@click.option(
    "--rails",
    "rails_spec",
    default="auto",
    show_default=True,
    metavar="auto|DEVICES",
    help="Each node's NICs to test: auto (every ACTIVE port with an address, devices in natural "
    "order, then ports) or device names in rail order (mlx5_0,mlx5_3; {node} stands for the "
    "node's name). Found by each node's agent first. With --map or --address-template the "
    "addresses given are the rails.",
)
@click.option("-6", "--ipv6", is_flag=True, help="With --rails: the nodes' IPv6 addresses instead of IPv4.")
@click.option(
    "--cross-rail",
    is_flag=True,
    help="Test every rail of a node with every rail of the others (R x R per pair of nodes, R "
    "times the rounds), not only rail k with rail k.",
)
@pairs_option("between every two groups (1-10000), a window that moves with --rotation")
@click.option(
    "--rotation",
    type=click.IntRange(0, 2**40),
    metavar="N",
    help="With --pairs sample:K, which window of the pairs between groups (default: hours since "
    "the epoch, so an hourly run covers every pair between groups of a and b nodes in a*b/K hours).",
)
@click.option(
    "--rail",
    "show_rail",
    type=click.IntRange(0, 15),
    metavar="K",
    help="Show rail K's matrix (default: the worst rail's) besides the per-node summary.",
)
@click.option(
    "--slow-factor",
    type=options.Finite(1.0, 1000),
    metavar="FACTOR",
    default=P.SLOW_FACTOR,
    show_default=True,
    help="A passing pair is slow when its latency (p50) exceeds this times the best comparable "
    "pair's (same test, rail-aligned or cross-rail) and the median p99 of those pairs (the "
    "fabric's own jitter).",
)
@click.option(
    "--slow-fraction",
    type=options.Finite(0.0, 1.0),
    metavar="FRACTION",
    default=P.SLOW_FRACTION,
    show_default=True,
    help="With --test bw, a passing pair is slow when a direction's Gb/s is below this fraction of the best.",
)
@click.option(
    "--retest-rounds",
    type=click.IntRange(0, 64),
    default=P.RETEST_ROUNDS,
    show_default=True,
    help="Extra rounds at the end in which failed and slow pairs are tested again before they "
    "count (confirmed or transient in the report); 0: no re-tests. A NIC that failed first still "
    "counts against it; a link is blamed only when confirmed.",
)
@file_option(
    "--baseline",
    help="An earlier run's --json summary: flag pairs that started failing or got slower.",
)
@file_option(
    "--prometheus",
    "prometheus_file",
    help="Also write the run's per-pair and per-node figures for Prometheus (node_exporter's "
    "textfile collector), atomically.",
)
@file_option(
    "--matrix",
    "matrix_file",
    help="Also write every pair's result, one JSON line each, gzip-compressed (the summary lists "
    "every pair up to 2000 of them, above that only those with trouble).",
)
@options.slurm_drain_options(MESH_PREFIX)
@reported
def command(prometheus_file, matrix_file, slurm_drain, max_drain, dry_run, app, **given):
    """Test every pair of NODES over RDMA and tell a bad node from a bad link.

    NODES is a ClusterShell node set: node[001-128], 10.0.0.[1-8], @group. One agent
    (`rdmacli mesh-agent`) starts on each node; all compute the same round-robin schedule, so no
    node is in two tests at once and no controller is needed. In each pair the lower rank
    listens and the higher connects. Exit status 0 all pairs passed, 1 failures found, 2 usage,
    3 environment, 6 incomplete (with --slurm-drain too: what was drained is data.slurm).
    """
    import os

    from rdmacli.cli.ending import finish
    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.mesh import inputs, request
    from rdmacli.mesh import run as mesh
    from rdmacli.mesh.meshreport import MeshReport
    from rdmacli.render.matrix import matrix_file as matrix_sink
    from rdmacli.render.mesh import LiveMesh, print_mesh

    params = params_of(
        "nodes launcher test count port quick round_time launch_timeout retest_rounds rails_spec cross_rail "
        "slow_factor slow_fraction pairs_spec rotation"
    )
    with app.errors("mesh", params):
        if dry_run and not slurm_drain:
            raise click.UsageError("--dry-run goes with --slurm-drain")
        for option, path in (("--prometheus", prometheus_file), ("--matrix", matrix_file)):
            if path:  # found out now, by trying, not after the run
                from rdmacli.render import files

                try:
                    files.check(path)
                except OSError as exc:
                    where = os.path.dirname(os.path.abspath(path))
                    words = f"cannot write in {where}: {exc.strerror}" if exc.strerror else str(exc)
                    raise RdmacliError(f"{option}: {words}", cause=Cause.USAGE) from exc
        # everything read from people and files is checked before any agent starts
        planned = request.plan(
            request.Given(**given), matrix=partial(matrix_sink, matrix_file) if matrix_file else None
        )
        spec = planned.request.spec
        params["rotation"] = spec.rotation if spec.pairs == "sample" else None
        launch = app.launch or planned.launch
        live = LiveMesh(app)
        debug = bool(os.environ.get("RDMACLI_DEBUG"))
        with inputs.topology_file(planned.topology) as path:  # the checked text, where ClusterShell loads it
            if path is not None:
                launch = replace(planned.launch, topology=path)
            outcome = mesh.run(planned.request, launch, live, params=params, debug=debug)
        report = outcome.report if isinstance(outcome.report, MeshReport) else None
        if prometheus_file and report is not None:
            from rdmacli.render import prometheus

            try:
                prometheus.write(prometheus_file, outcome, report)
            except OSError as exc:
                outcome.warnings.append(
                    f"--prometheus: could not write {prometheus_file}: {exc.strerror or exc}"
                )
        if slurm_drain:
            rows = report.nodes if report is not None else ()
            ran = [r.node for r in rows if r.agent == "ran"]
            blame = report.blame if report is not None else None
            options.act_on_verdict(outcome, blame, ran, len(rows), MESH_PREFIX, max_drain, dry_run)
        live.rest(outcome)
        render = partial(print_mesh, report=report, rail=planned.request.show_rail) if report else None
        finish(app, outcome, render=render)
