"""`rdmacli lab`: run commands on real Soft-RoCE in a throw-away VM."""

from __future__ import annotations

import sys

import click

from rdmacli.cli import HELP
from rdmacli.cli.app import App
from rdmacli.lab import MAX_NODES, MAX_RAILS

# the lab's shape, on `lab run` and `lab shell` alike: each option's name and click's keywords
LAB_OPTIONS = (
    ("--iwarp", dict(is_flag=True, default=None,
                     help="Also Soft-iWARP: siw0 on veth2 (10.78.0.1) and siw1 on veth3 (10.78.0.2); "
                     "RDMACLI_LAB_IWARP_SERVER and RDMACLI_LAB_IWARP_CLIENT inside. Where the kernel lacks "
                     "siw (Debian's), the module is built once from linux-source and cached.")),
    ("--rails", dict(type=click.IntRange(1, MAX_RAILS), default=None,
                     help="With --nodes: R NICs per node, rail r of every node on its own bridge and subnet "
                     "10.77.(1+r).0/24 (the map of every rail: RDMACLI_LAB_RAILS_MAP inside).")),
    ("--nodes", dict(type=click.IntRange(0, MAX_NODES), default=None,
                     help="Also N mesh nodes n01..nNN: netdevs on one bridge with an rxe device each, "
                     "10.77.1.1-N (RDMACLI_LAB_NODES, RDMACLI_LAB_NODE_ADDRS and the map file "
                     "RDMACLI_LAB_NODES_MAP inside).")),
)  # fmt: skip


def nodes_option(f):
    for name, kw in LAB_OPTIONS:
        f = click.option(name, **kw)(f)
    return f


@click.group("lab", context_settings=HELP)
@nodes_option
@click.pass_context
def command(ctx: click.Context, nodes: int | None, rails: int | None, iwarp: bool | None) -> None:
    """Run commands in a disposable Soft-RoCE VM (virtme-ng + qemu + rdma_rxe).

    Inside, rxe0 sits on veth0 (10.77.0.1, fd77::1) and rxe1 on veth1 (10.77.0.2, fd77::2);
    memlock is unlimited; the current directory is shared read-write. When this side is a
    terminal, the command gets a real one inside (a pty with your TERM and window size, job
    control, Ctrl-C and Ctrl-Z to its foreground job); Ctrl-] ends the VM from the host.
    With --nodes N there are N more nodes for `rdmacli mesh` (try `rdmacli lab --nodes 8 run --
    sh -c 'rdmacli mesh "$RDMACLI_LAB_NODES" --launcher exec --map "$RDMACLI_LAB_NODES_MAP"'`).
    """
    ctx.obj = {"nodes": nodes or 0, "rails": rails or 1, "iwarp": bool(iwarp)}


@command.command("run", context_settings={**HELP, "ignore_unknown_options": True})
@click.option(
    "--rwdir",
    "rwdirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Another host directory the VM may write to (repeatable).",
)
@nodes_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run_cmd(
    ctx: click.Context,
    rwdirs: tuple[str, ...],
    nodes: int | None,
    rails: int | None,
    iwarp: bool | None,
    cmd: tuple[str, ...],
) -> None:
    """Boot the lab, run CMD in the current directory and exit with its status."""
    app = App.from_context()
    with app.errors("lab"):
        from rdmacli.lab import vm

        n = nodes if nodes is not None else ctx.obj["nodes"]
        r = rails if rails is not None else ctx.obj["rails"]
        w = iwarp or ctx.obj["iwarp"]
        say = lambda t: app.err.print(f"lab: {t}")  # noqa: E731
        sys.exit(vm.run(list(cmd), rwdirs=rwdirs, nodes=n, rails=r, iwarp=w, say=say))


@command.command("shell", context_settings=HELP)
@nodes_option
@click.pass_context
def shell_cmd(ctx: click.Context, nodes: int | None, rails: int | None, iwarp: bool | None) -> None:
    """Boot the lab and open an interactive shell in it."""
    app = App.from_context()
    with app.errors("lab"):
        from rdmacli.lab import vm

        n = nodes if nodes is not None else ctx.obj["nodes"]
        r = rails if rails is not None else ctx.obj["rails"]
        w = iwarp or ctx.obj["iwarp"]
        sys.exit(vm.run([], shell=True, nodes=n, rails=r, iwarp=w, say=lambda t: app.err.print(f"lab: {t}")))
