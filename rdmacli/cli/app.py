"""The application object: consoles, output mode and the one place errors become exit codes."""

from __future__ import annotations

import functools
import os
import signal
import sys
from contextlib import contextmanager
from functools import cached_property
from typing import Iterator

import click

from rdmacli.errors import RdmacliError, Stopped
from rdmacli.outcome import dumps


class App:
    """People read stderr, programs read stdout (design: output and exit codes)."""

    def __init__(
        self,
        *,
        json_mode: bool = False,
        json_lines: bool = False,
        quiet: bool = False,
        steps: bool = False,
        backend=None,
        launch=None,
    ):
        self.json_mode = json_mode
        self.json_lines = json_lines
        self.quiet = quiet
        self.steps = steps  # the step timing table in the summary (JSON always has steps_us)
        self.backend = backend  # the RDMA stack tests run on: None is the real one
        self.launch = launch  # how mesh agents start, when a test gives one: None builds it from options
        self.warned: set[str] = set()  # warnings already said as they showed (not said again at the end)

    @classmethod
    def from_context(cls, **modes) -> App:
        """This command's App: the output modes it was given, and the services the root group
        was handed through click's `obj` (a test's scripted RDMA stack, an in-process mesh
        launcher); the real ones when none."""
        obj = click.get_current_context().find_root().obj or {}
        return cls(**modes, backend=obj.get("backend"), launch=obj.get("launch"))

    # rich is imported only when a person is shown something: --json runs never pay for it
    @cached_property
    def err(self):
        from rich.console import Console

        # not on a terminal (a log, a CI job): no hard wrap at 80 columns inside commands and words
        return Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())

    @cached_property
    def out(self):
        from rich.console import Console

        return Console(highlight=False, soft_wrap=True)

    @property
    def tty(self) -> bool:
        return sys.stderr.isatty()

    @property
    def machine(self) -> bool:
        return self.json_mode or self.json_lines

    @property
    def live(self) -> bool:
        """Live tables only for a person at a terminal."""
        return not self.machine and self.tty and "NO_COLOR" not in os.environ and not self.quiet

    def emit_json(self, doc: dict) -> None:
        if self.json_lines:
            sys.stdout.write(dumps(doc, separators=(",", ":")) + "\n")
        else:
            sys.stdout.write(dumps(doc, indent=2) + "\n")
        sys.stdout.flush()

    def info(self, text: str) -> None:
        if not self.quiet and not self.machine:
            self.err.print(text)

    def report_error(self, exc: RdmacliError) -> None:
        from rdmacli.cli.hints import fit, typed_options
        from rdmacli.render.text import printable  # words may carry a peer's or an agent's text

        options = typed_options()
        hint = exc.hint if options is None else fit(exc.hint, options)  # only options it has
        message, hint = printable(exc.message), hint and printable(hint)
        # the cause as JSON's error.cause has it: the troubleshooting page's row, searchable
        cause = exc.cause.value if exc.cause is not None else "internal"  # every instance has one
        if self.machine:  # keep rich out of script runs
            hinted = f"hint: {hint}\n" if hint else ""
            sys.stderr.write(f"error: {message}\n{hinted}cause: {cause}\n")
            return
        self.err.print(f"[bold red]error:[/] {_esc(message)}")
        if hint:
            self.err.print(f"[yellow]hint:[/] {_esc(hint)}")
        self.err.print(f"[dim]cause:[/] {cause}")

    @contextmanager
    def errors(self, command: str, params: dict | None = None) -> Iterator[None]:
        """Turn RdmacliError and stop signals into the documented exit codes and a summary,
        never a traceback. SIGTERM and SIGHUP end a run like Ctrl-C (exit 128 + signal)."""
        from rdmacli.cli.ending import finish, stop_signals
        from rdmacli.outcome import Outcome

        try:
            with stop_signals():
                yield
        except RdmacliError as exc:
            if not self.machine:  # words are enough for a person when nothing ran
                self.report_error(exc)
                sys.exit(int(exc.exit_code))
            finish(self, Outcome(command, params or {}, error=exc))
        except (Stopped, KeyboardInterrupt) as exc:
            outcome = Outcome(command, params or {}, signal=getattr(exc, "signum", signal.SIGINT))
            if not self.machine:
                self.err.print("interrupted")
                sys.exit(outcome.exit_code)
            finish(self, outcome)


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class FilePath(click.Path):
    """A file named on the command line: completed as a path by the shells, checked where it is
    read or written (mesh.inputs.read_regular, render.files), so a directory, a FIFO or a link
    gets the same `error:`/`hint:` words as any other bad file, never click's usage style."""

    def convert(self, value, param, ctx):
        return value if isinstance(value, str) else str(value)


def file_option(*decls: str, help: str):
    """An option naming a file (FilePath, metavar FILE): every command's, declared alike."""
    return click.option(*decls, type=FilePath(), metavar="FILE", help=help)


def one_format(json_mode: bool, json_lines: bool) -> None:
    """--json and --json-lines together: the same usage error on every command that has both."""
    if json_mode and json_lines:
        raise click.UsageError("--json and --json-lines are two formats: choose one")


json_option = click.option(
    "--json", "json_mode", is_flag=True, help="Print one JSON summary document on stdout."
)


def pairs_option(what: str):
    """mesh's --pairs, said once for mesh and watch: `what` ends its help (how sample:K moves)."""
    return click.option(
        "--pairs",
        "pairs_spec",
        default="all",
        show_default=True,
        metavar="all|group|sample:K",
        help="Which node pairs: all; group, every pair inside each group of the map's group=NAME "
        f"column (a leaf, rack or plane), all groups at once; sample:K, those and K pairs {what}.",
    )


json_lines_option = click.option(
    "--json-lines", "json_lines", is_flag=True, help="Stream one JSON object per event, then the summary."
)
quiet_option = click.option("-q", "--quiet", is_flag=True, help="Print only errors and the summary.")


def reported(f):
    """--json, --json-lines, -q -> `app: App`: the output options of every command that runs
    something and reports it (cli.options.output adds the CM event view's)."""

    @functools.wraps(f)
    def wrapper(*args, json_mode, json_lines, quiet, **kw):
        one_format(json_mode, json_lines)
        return f(*args, app=App.from_context(json_mode=json_mode, json_lines=json_lines, quiet=quiet), **kw)

    return json_option(json_lines_option(quiet_option(wrapper)))


def json_reported(f):
    """--json -> `app: App`: the output option of the commands that print one document."""

    @functools.wraps(f)
    def wrapper(*args, json_mode, **kw):
        return f(*args, app=App.from_context(json_mode=json_mode), **kw)

    return json_option(wrapper)


# A parameter's name in the summary's `params` where it is not its Python name: the unit said
# (JSON carries no units), or the word people know for a spec the command parses.
JSON_NAMES = {
    "size": "size_bytes",
    "max_size": "max_size_bytes",
    "max_pinned": "max_pinned_bytes",
    "interval": "interval_s",
    "duration": "duration_s",
    "timeout": "timeout_s",
    "round_time": "round_time_s",
    "launch_timeout": "launch_timeout_s",
    "rails_spec": "rails",
    "pairs_spec": "pairs",
    "fmt": "format",
    "deadline": "deadline_s",
    "expects": "expect",
    "devices": "device",
}


def params_of(names: str, **values) -> dict:
    """The summary's `params`: the named parameters (space-separated, in their order) as the
    command line gave them (click's context), or as the command settled them (`values`: a
    protocol's default port, a size resolved, a bound computed), each under its JSON name. The
    options are declared once, in the decorators; this says which of them a summary repeats."""
    given = click.get_current_context().params
    return {JSON_NAMES.get(n, n): values[n] if n in values else given[n] for n in names.split()}
