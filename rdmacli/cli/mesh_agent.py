"""`rdmacli mesh-agent`: one node's side of `rdmacli mesh`, started by the mesh's launcher.

Not for people to run by hand (though they can, to debug a node): it prints JSON lines.
"""

from __future__ import annotations

import json
import os
import sys

import click

from rdmacli.cli import options
from rdmacli.mesh.agent import TESTS

RANK_ENV = ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")


def _list(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


@click.command("mesh-agent")
@click.option("--run-id", required=True, help="The run's id (16 hex digits), from the coordinator.")
@click.option(
    "--start-at", type=options.Finite(0), required=True, help="UNIX time at which round slot 0 begins."
)
@click.option("--round-time", type=options.Finite(0.5, 3600), required=True, help="Seconds per round.")
@click.option("--port", type=click.IntRange(1, 65535), required=True, help="RDMA CM port of the listeners.")
@click.option(
    "--test", type=click.Choice(TESTS), default="ping", show_default=True, help="The test per pair."
)
@click.option(
    "--count", type=click.IntRange(1, 100000), default=20, show_default=True, help="Pings/messages."
)
@click.option(
    "--names", help="Every node's name, comma-separated, in rank order (default: SLURM_STEP_NODELIST)."
)
@click.option(
    "--addresses",
    help="Every node's RDMA addresses, comma-separated in rank order; a node's rails joined by '+'.",
)
@click.option("--cross-rail", is_flag=True, help="Every rail pair, not only rail k with rail k.")
@click.option(
    "--discover",
    is_flag=True,
    help="Only report this node's rails (one JSON record) and end: the coordinator's first pass.",
)
@click.option(
    "--rails", "rails_spec", help="With --discover: device names to take ({node}: this node's name)."
)
@click.option(
    "--family", type=click.Choice(["4", "6"]), default="4", help="With --discover: the address family."
)
@click.option("--rank", type=click.IntRange(0), help="This node's rank.")
@click.option(
    "--rank-from-env", is_flag=True, help="Take the rank from SLURM_PROCID (or the MPI launchers')."
)
@click.option("--quick", is_flag=True, help="Run the quick schedule (about log2(N) rounds).")
@click.option("--stop-on-eof", is_flag=True, help="End when stdin closes (an ssh launcher went away).")
@click.option(
    "--retests",
    is_flag=True,
    help="After the rounds, wait (a round and 10 s at most) for the coordinator's re-test rounds on stdin.",
)
def command(run_id, start_at, round_time, port, test, count, names, addresses, cross_rail, discover,
            rails_spec, family, rank, rank_from_env, quick, stop_on_eof, retests):  # fmt: skip
    """Run this node's pairs of a mesh run; one JSON record per line on stdout."""
    from rdmacli.cli._run import stop_signals
    from rdmacli.cli.options import injected_backend
    from rdmacli.errors import RdmacliError, Stopped
    from rdmacli.mesh.agent import AgentConfig, run_agent

    def emit(rec: dict) -> None:
        sys.stdout.write(json.dumps(rec, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def fail(message: str, code: int = 2) -> None:
        emit({"type": "error", "run": run_id, "rank": rank, "message": message})
        click.echo(f"mesh-agent: {message}", err=True)
        sys.exit(code)

    if rank is None and rank_from_env:
        found = next((os.environ[k] for k in RANK_ENV if os.environ.get(k, "").isdigit()), None)
        rank = int(found) if found is not None else None
    if rank is None:
        fail("no rank: give --rank, or --rank-from-env inside srun (SLURM_PROCID)")
    name_list = _list(names)
    addr_list = [a.split("+") for a in _list(addresses)]
    if not name_list and os.environ.get("SLURM_STEP_NODELIST"):
        from rdmacli.mesh.nodes import expand

        name_list = expand(os.environ["SLURM_STEP_NODELIST"])
    if discover:
        from rdmacli.mesh.rails import discover as find
        from rdmacli.mesh.rails import parse_devices

        me = name_list[rank] if rank < len(name_list) else None
        try:
            devices = parse_devices(rails_spec, me) if rails_spec else None
        except ValueError as exc:
            fail(f"--rails: {exc}")
        found = [r.to_dict() for r in find(int(family), devices)]
        emit({"type": "rails", "run": run_id, "rank": rank, "rails": found})
        return
    if not addr_list:
        from rdmacli.mesh.nodes import addresses as resolve

        addr_list = resolve(name_list)
    if (len(name_list) != len(addr_list) or len(addr_list) < 2 or rank >= len(addr_list)
            or len({len(a) for a in addr_list}) != 1):  # fmt: skip
        fail(f"inconsistent members: {len(name_list)} names, {len(addr_list)} addresses, rank {rank}")
    try:
        bytes.fromhex(run_id)
    except ValueError:
        fail(f"bad run id {run_id!r}")
    cfg = AgentConfig(
        rank=rank, addresses=addr_list, names=name_list, run_id=run_id, start_at=start_at,
        round_s=round_time, port=port, test=test, count=count, quick=quick, retests=retests, cross=cross_rail,
    )  # fmt: skip
    if not sys.stdin.isatty():
        import signal
        import threading

        def watch() -> None:
            """The coordinator's go line; with --stop-on-eof the end of stdin ends the agent."""
            for line in sys.stdin:
                if cfg.take(line) == "go":
                    emit({"type": "go", "run": run_id, "rank": rank, "start_at": cfg.start_at})
            if stop_on_eof:
                os.kill(os.getpid(), signal.SIGHUP)

        threading.Thread(target=watch, daemon=True).start()
    try:
        with stop_signals() as stops:
            run_agent(cfg, emit, stops=stops, backend=injected_backend())
    except Stopped as exc:
        emit({"type": "stopped", "run": run_id, "rank": rank, "signal": exc.signum})
        sys.exit(128 + exc.signum)
    except RdmacliError as exc:
        fail(exc.message, int(exc.exit_code))
    except BrokenPipeError:  # the launcher went away: nobody reads us any more
        sys.exit(141)
