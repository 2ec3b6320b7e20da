"""Entry point; checks the third-party imports so a broken install gives advice, not a traceback."""

import importlib.util
import sys


def main() -> None:
    try:
        import click
    except ImportError:  # pragma: no cover - exercised by a subprocess test
        missing("click")
    if importlib.util.find_spec("rich") is None:  # looked up, not imported: --help stays light
        missing("rich")
    from rdmacli.cli import cli

    try:
        cli.main(prog_name="rdmacli", standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help, --version
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # a usage error: click's words, and JSON if asked for
        exc.show()
        if {"--json", "--json-lines"} & set(sys.argv[1:]):
            usage_json(exc)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)


def missing(name: str) -> None:
    sys.stderr.write(
        f"rdmacli: cannot import {name}: No module named '{name}'\n"
        f"hint: install it with `pip install {name}` (or reinstall rdmacli: `pip install rdmacli`)\n"
    )
    sys.exit(3)


def typed_command(exc, commands) -> str:
    """The command typed, as a summary's `command` names it ("watch status", not "watch"):
    click's context where the error has one, else the words typed that are commands; never a
    word the user mistyped."""
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and " " in ctx.command_path:
        return ctx.command_path.split(" ", 1)[1]
    words = [a for a in sys.argv[1:] if not a.startswith("-")]
    if not words or words[0] not in commands:
        return "rdmacli"
    import click

    from rdmacli.cli import cli

    group = cli.get_command(click.Context(cli), words[0])
    subs = getattr(group, "commands", {})
    return f"{words[0]} {words[1]}" if len(words) > 1 and words[1] in subs else words[0]


def usage_json(exc) -> None:
    """A script that asked for JSON gets a summary document for a usage error too."""

    from rdmacli.cli import COMMANDS
    from rdmacli.errors import Cause, RdmacliError
    from rdmacli.outcome import Outcome, dumps

    command = typed_command(exc, COMMANDS)
    err = RdmacliError(exc.format_message(), hint="see --help", cause=Cause.USAGE)
    doc = Outcome(command, error=err).to_dict()
    if "--json-lines" in sys.argv[1:]:  # a stream's reader reads lines: the summary is one
        sys.stdout.write(dumps(doc, separators=(",", ":")) + "\n")
    else:
        sys.stdout.write(dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
