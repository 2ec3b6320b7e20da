"""The click command tree. Subcommands are imported only when run, to keep start-up short."""

from __future__ import annotations

import importlib

import click

from rdmacli import __version__
from rdmacli.cli.examples import epilog

# name -> (module, one-line summary). The summary is shown by --help without importing the module.
COMMANDS = {
    "connect": ("rdmacli.cli.connect", "Connect to a server and exchange messages (like ucmatose -s)."),
    "listen": ("rdmacli.cli.listen", "Serve connect/ping clients (like ucmatose, rping -s)."),
    "ping": ("rdmacli.cli.ping", "RDMA READ/WRITE ping-pong with round-trip times (like rping -c)."),
    "bw": ("rdmacli.cli.bw", "Measure bandwidth to `rdmacli listen --bw` (like ib_write_bw)."),
    "lat": ("rdmacli.cli.lat", "Measure latency to `rdmacli listen --lat` (like ib_send_lat)."),
    "mcast": ("rdmacli.cli.mcast", "Join a multicast group and receive, or send to it (like mckey)."),
    "events": ("rdmacli.cli.events", "Run the bare rdma_cm flow and show every event and step time."),
    "devices": ("rdmacli.cli.devices", "List RDMA devices, ports, GIDs and netdevs."),
    "doctor": ("rdmacli.cli.doctor", "Diagnose the RDMA setup and the path to a peer, with advice."),
    "check": ("rdmacli.cli.check", "Judge this node's RDMA health for Slurm, NHC and node-problem-detector."),
    "selftest": ("rdmacli.cli.selftest", "Smoke-test every protocol on this host, one row each."),
    "lab": ("rdmacli.cli.lab", "Run commands in a disposable Soft-RoCE VM."),
    "mesh": ("rdmacli.cli.mesh", "Test every pair of many nodes (ssh, srun or exec agents), with blame."),
    "mesh-agent": ("rdmacli.cli.mesh_agent", "One node's agent of `rdmacli mesh` (started by its launcher)."),
    "watch": ("rdmacli.cli.watch", "Check the fabric all the time: an agent per node, verdicts, metrics."),
}


# -h and --help on every command and subcommand, said on each (not only inherited from the root
# group): click caches a command's help option when it first makes a context, and a command made
# without the root group (a test, a subcommand's make_context) would otherwise cache --help alone
HELP = {"help_option_names": ["-h", "--help"]}

HIDDEN = {"mesh-agent"}  # started by `rdmacli mesh`, not by people: documented, not listed


def foreign_hint(letter: str, ctx: click.Context | None) -> str | None:
    """What another tool's `letter` is in the command typed (cli/letters.py), or None: never an
    option it lacks."""
    from rdmacli.cli.letters import foreign_hint as hint

    if ctx is None:
        return None
    command = ctx.command_path.split(" ", 1)[1] if " " in ctx.command_path else ""
    own = {o for p in ctx.command.params for o in getattr(p, "opts", [])}
    return hint(letter, command, own)


def _extra_after_letter(exc: click.UsageError, args: list[str]) -> str | None:
    """The letter a value was given to when click says an argument was unexpected (a flag here
    that takes a value there: `bw HOST -q 4`)."""
    import re

    m = re.match(r"Got unexpected extra arguments? \(([^)\s]+)", exc.message)
    if not m or m.group(1) not in args:
        return None
    k = args.index(m.group(1))
    return args[k - 1] if k > 0 and re.fullmatch(r"-[A-Za-z]", args[k - 1]) else None


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if args and name not in COMMANDS and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, sorted(set(COMMANDS) - HIDDEN), n=1, cutoff=0.5)
            ctx.fail(f"No such command '{name}'." + (f" Did you mean '{close[0]}'?" if close else ""))
        return super().resolve_command(ctx, args)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["rdmacli.argv"] = list(args)  # as typed: for the pointers of other tools' letters
        return super().parse_args(ctx, args)

    def _typed(self, ctx: click.Context) -> click.Context | None:
        """The context of the command typed (click's BadOptionUsage comes without one)."""
        argv = ctx.meta.get("rdmacli.argv", [])
        name = next((a for a in argv if not a.startswith("-")), None)
        cmd = self.get_command(ctx, name) if name else None
        return click.Context(cmd, info_name=name, parent=ctx) if cmd is not None else None

    def invoke(self, ctx: click.Context):
        args = ctx.meta.get("rdmacli.argv", [])
        try:
            return super().invoke(ctx)
        except click.NoSuchOption as exc:
            here = foreign_hint(exc.option_name, exc.ctx)
            if here and not exc.possibilities:
                exc.message = exc.message.rstrip(".") + f" (here: {here})"
            raise
        except click.BadOptionUsage as exc:  # a letter here that needs a value it has not got
            here = foreign_hint(exc.option_name, exc.ctx or self._typed(ctx))
            if here and "requires an argument" in exc.message:
                exc.message = exc.message.rstrip(".") + f" (here: {here})"
            raise
        except click.UsageError as exc:  # a flag here given another tool's value
            letter = _extra_after_letter(exc, args)
            here = foreign_hint(letter, exc.ctx) if letter else None
            if here:
                exc.message = exc.message.rstrip(".") + f" (here: {here})"
            raise

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[name][0])
        finish_command(module.command, name)
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx) if name not in HIDDEN]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def finish_command(cmd: click.Command, path: str) -> None:
    """Give `cmd` (and a group's subcommands) its Examples epilog from cli/examples.py, and one
    placeholder style: a whole number is PORT or N, never click's "INTEGER RANGE" (every other
    type names its metavar where it is declared; tests/unit/test_help_truth.py holds them)."""
    if cmd.epilog is None:
        cmd.epilog = epilog(path)
    from rdmacli.cli.values import Whole

    for param in cmd.params:
        t = param.type
        if type(t) is click.IntRange and not (t.clamp or t.min_open or t.max_open):  # closed ranges
            param.type = Whole(t.min, t.max)  # its errors in the one style (cli/values.py)
        whole = isinstance(param.type, click.types.IntParamType) and param.type.name != "size"
        if isinstance(param, click.Option) and param.metavar is None and not param.is_flag and whole:
            param.metavar = "PORT" if param.name == "port" else "N"
    for sub_name, sub in getattr(cmd, "commands", {}).items():
        finish_command(sub, f"{path} {sub_name}")


def show_version(ctx: click.Context) -> None:
    """The version, the data path this install measures with (and why), and the rdma-core
    libraries as the loader actually loads them: what a bug report needs."""
    from rdmacli.native import installed
    from rdmacli.rdma.versions import loaded_libraries

    kind, detail = installed()
    click.echo(f"rdmacli, version {__version__}")
    click.echo(f"data path: {kind} ({detail})")
    for lib, found in loaded_libraries().items():
        click.echo(f"{lib}: {found.words()}")
    ctx.exit()


EPILOG = """\b
Exit status:
  0 success, 1 test failed, 2 usage, 3 local environment, 4 address/route
  resolution failed, 5 rejected or unreachable, 6 deadline expired, 128+N stopped
  by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""
EPILOG += "\n" + (epilog("rdmacli") or "")


@click.group(cls=LazyGroup, context_settings=HELP, epilog=EPILOG)
@click.option(
    "-V",
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, param, value: value and show_version(ctx),
    help="Show the version, the data path (native or Python, and why) and the rdma-core "
    "libraries as loaded (librdmacm, libibverbs), and exit.",
)
def cli() -> None:
    """RDMA connectivity toolkit: the librdmacm test utilities (rping, ucmatose, udaddy,
    mckey, cmtime) in one command, with deadlines, decoded errors and JSON."""
