"""`rdmacli lab`: run commands on real Soft-RoCE in a throw-away VM."""

from __future__ import annotations

import sys

import click

from rdmacli.cli.app import App


@click.group("lab")
def command() -> None:
    """Run commands in a disposable Soft-RoCE VM (virtme-ng + qemu + rdma_rxe).

    Inside, rxe0 sits on veth0 (10.77.0.1, fd77::1) and rxe1 on veth1 (10.77.0.2, fd77::2);
    memlock is unlimited; the current directory is shared read-write. When this side is a
    terminal, the command gets a real one inside (a pty with your TERM and window size, job
    control, Ctrl-C and Ctrl-Z to its foreground job); Ctrl-] ends the VM from the host.
    """


@command.command("run", context_settings={"ignore_unknown_options": True})
@click.option(
    "--rwdir",
    "rwdirs",
    multiple=True,
    type=click.Path(file_okay=False),
    help="Another host directory the VM may write to (repeatable).",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def run_cmd(rwdirs: tuple[str, ...], cmd: tuple[str, ...]) -> None:
    """Boot the lab, run CMD in the current directory and exit with its status."""
    app = App()
    with app.errors("lab"):
        from rdmacli.lab import vm

        sys.exit(vm.run(list(cmd), rwdirs=rwdirs, say=lambda t: app.err.print(f"lab: {t}")))


@command.command("shell")
def shell_cmd() -> None:
    """Boot the lab and open an interactive shell in it."""
    app = App()
    with app.errors("lab"):
        from rdmacli.lab import vm

        sys.exit(vm.run([], shell=True, say=lambda t: app.err.print(f"lab: {t}")))
