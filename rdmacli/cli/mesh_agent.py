"""`rdmacli mesh-agent`: one node's side of `rdmacli mesh`, started by the mesh's launcher.

Not for people to run by hand (though they can, to debug a node): it reads the run spec
(mesh/contract.py) as the first line of its stdin, or from --spec FILE, and prints JSON lines.
Its command line carries only its rank: the spec's size never meets argv's limit.
"""

from __future__ import annotations

import os
import sys

import click

from rdmacli.cli import HELP
from rdmacli.cli.app import file_option
from rdmacli.outcome import dumps

RANK_ENV = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
NODE_ENV = "RDMACLI_NODE"  # --rank-from-host: this node's name in the run, where its hostname is not


@click.command("mesh-agent", context_settings=HELP)
@click.option("--rank", type=click.IntRange(0), help="This node's rank.")
@click.option(
    "--rank-from-env", is_flag=True, help="Take the rank from SLURM_PROCID (or the MPI launchers')."
)
@click.option(
    "--rank-from-host",
    is_flag=True,
    help=f"Take the rank from this node's name in the run: ${NODE_ENV}, else its hostname (ClusterShell's "
    "tree mode, where every node runs one command).",
)
@file_option(
    "--spec",
    "spec_file",
    help="Read the run spec (one JSON line) from FILE instead of the first line of stdin.",
)
@click.option("--stop-on-eof", is_flag=True, help="End when stdin closes (an ssh launcher went away).")
def command(rank, rank_from_env, rank_from_host, spec_file, stop_on_eof):
    """Run this node's pairs of a mesh run; one JSON record per line on stdout."""
    from rdmacli.cli.app import App
    from rdmacli.cli.ending import stop_signals
    from rdmacli.errors import RdmacliError, Stopped
    from rdmacli.mesh import contract, records
    from rdmacli.mesh.agent import AgentConfig, run_agent

    run_id = None

    def emit(rec) -> None:
        doc = rec if isinstance(rec, dict) else rec.to_dict()
        sys.stdout.write(dumps(doc, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def fail(message: str, code: int = 2) -> None:
        emit(records.ErrorRecord(run=run_id, rank=rank, message=message))
        click.echo(f"mesh-agent: {message}", err=True)
        sys.exit(code)

    if rank is None and rank_from_env:
        found = next((os.environ[k] for k in RANK_ENV if os.environ.get(k, "").isdigit()), None)
        rank = int(found) if found is not None else None
    if rank is None and not rank_from_host:
        fail("no rank: give --rank, or --rank-from-env inside srun (SLURM_PROCID)")
    stdin = contract.LineReader(getattr(sys.stdin, "buffer", sys.stdin))
    try:
        if spec_file:
            from rdmacli.mesh.inputs import read_regular

            try:
                text = read_regular(spec_file, "--spec", contract.MAX_SPEC)
            except RdmacliError as exc:
                raise contract.SpecError(exc.message) from exc
            spec = contract.RunSpec.from_line(text.split(b"\n", 1)[0])
        elif stdin.isatty():
            fail("no run spec: it comes on stdin from `rdmacli mesh`; by hand, give --spec FILE")
        else:
            spec = contract.read_spec(stdin)
        run_id = spec.run_id
        if rank is None:  # --rank-from-host: found among the run's names
            import socket

            # only here: mesh.nodes and its checks are ~70 ms of an agent's start under TCG
            from rdmacli.mesh.nodes import rank_of_host

            node = os.environ.get(NODE_ENV) or socket.gethostname()
            rank = rank_of_host(spec.names, node)
            if rank is None:
                fail(f"--rank-from-host: this node ({node[:64]}) is none of the run's nodes, or several")
        if spec.discover is not None:
            discover(spec, rank, emit, fail)
            return
        cfg = AgentConfig(spec, rank)
    except (contract.SpecError, OSError) as exc:
        fail(str(exc))
    if not stdin.isatty():
        import signal
        import threading

        def watch() -> None:
            """The coordinator's go and re-test lines; with --stop-on-eof the end of stdin ends
            the agent."""
            while True:
                try:
                    line = stdin.readline(limit=records.MAX_LINE)
                except contract.SpecError:
                    break
                if line is None:
                    break
                if cfg.take(line.decode(errors="replace")) == "go":
                    emit(cfg.record(records.GoRecord, start_at=cfg.start_at))
            if stop_on_eof:
                os.kill(os.getpid(), signal.SIGHUP)

        threading.Thread(target=watch, daemon=True).start()
    try:
        with stop_signals() as stops:
            run_agent(cfg, emit, stops=stops, backend=App.from_context().backend)
    except Stopped as exc:
        emit(cfg.record(records.StoppedRecord, signal=exc.signum))
        sys.exit(128 + exc.signum)
    except RdmacliError as exc:
        fail(exc.message, int(exc.exit_code))
    except BrokenPipeError:  # the launcher went away: nobody reads us any more
        sys.exit(141)


def discover(spec, rank: int, emit, fail) -> None:
    """A discovery spec's job: this node's rails, one record, then end."""
    from rdmacli.mesh.rails import discover as find
    from rdmacli.mesh.rails import parse_devices
    from rdmacli.mesh.records import RailsRecord

    me = spec.names[rank] if rank < spec.n else None
    if me is None:
        fail(f"rank {rank} is not one of the spec's {spec.n} nodes")
    try:
        devices = parse_devices(spec.discover.rails, me) if spec.discover.rails else None
    except ValueError as exc:
        fail(f"--rails: {exc}")
    found = [r.to_dict() for r in find(spec.discover.family, devices)]
    emit(RailsRecord(run=spec.run_id, rank=rank, rails=found))
