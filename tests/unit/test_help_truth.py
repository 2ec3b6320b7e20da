"""Help that is true: every command's --help names only options it has (another tool's letters
only when attributed to that tool), every example parses with its command's own parser, every
command has examples, one placeholder style, and a C tool's letter is hinted per command."""

from __future__ import annotations

import re
import shlex

import click
import pytest
from click.testing import CliRunner

from rdmacli.cli import cli
from rdmacli.cli.examples import EXAMPLES
from rdmacli.cli.letters import LETTERS, TWINS, letters_of


def command_tree():
    """(path words, command) of every command and subcommand, as the command line resolves them."""
    root = click.Context(cli, info_name="rdmacli")
    out = [((), cli)]
    for name in cli.list_commands(root):
        cmd = cli.get_command(root, name)
        out.append(((name,), cmd))
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd, info_name=name, parent=root)
            out += [((name, sub), cmd.get_command(ctx, sub)) for sub in cmd.list_commands(ctx)]
    return out


TREE = command_tree()
IDS = [" ".join(p) or "rdmacli" for p, _ in TREE]


def own_options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])} | {
        "-h",
        "--help",
    }


# an option of another tool or command is named with it: "rping -s", "perftest's -n",
# "`rdmacli listen --bw`", "srun's --nodelist", "ssh's ConnectTimeout"
ATTRIBUTED = re.compile(
    r"(rdmacli [a-z-]+( [a-z]+)?|`[a-z-]+|rping|ucmatose|udaddy|mckey|cmtime|perftest|ib_\w+|ping\(8\)|"
    r"srun|ssh|sh|rc_pingpong|watch run)('s)?[^.;()]{0,40}$"
)


def help_text(path: tuple[str, ...]) -> str:
    """What --help prints, without the Examples epilog (its commands are parsed below)."""
    r = CliRunner().invoke(cli, [*path, "--help"], terminal_width=1000)
    assert r.exit_code == 0, r.output
    return r.output.split("\nExamples:")[0].split("\n  Examples:")[0]


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_help_names_only_options_the_command_has(path, cmd):
    text = " ".join(help_text(path).split())
    own = own_options(cmd)
    wrong = []
    for m in re.finditer(r"(?<![\w/}{'-])(--?[A-Za-z][\w-]*)", text):
        opt = m.group(1)
        if opt in own or ATTRIBUTED.search(text[max(0, m.start() - 60) : m.start()]):
            continue
        wrong.append(f"{opt} in ...{text[max(0, m.start() - 50) : m.end() + 10]}...")
    assert not wrong, wrong


def test_man_page_notes_name_only_options_their_command_has():
    """The hand-written notes of the man pages and the CLI reference (scripts/gendocs.py), held
    to the same rule as --help: a group's notes may name its subcommands' options."""
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).parents[2] / "scripts"))
    import gendocs

    commands = {" ".join(p) or "rdmacli": c for p, c in TREE}
    wrong = []
    for key, extra in gendocs.EXTRA.items():
        text = " ".join(" ".join(extra.get(k, "") for k in ("notes", "description", "security")).split())
        cmd = commands[key]
        own = own_options(cmd).union(*(own_options(s) for s in getattr(cmd, "commands", {}).values()))
        for m in re.finditer(r"(?<![\w/}{'-])(--?[A-Za-z][\w-]*)", text):
            if m.group(1) not in own and not ATTRIBUTED.search(text[max(0, m.start() - 60) : m.start()]):
                wrong.append(f"{key}: {m.group(1)} in ...{text[max(0, m.start() - 50) : m.end() + 10]}")
    assert not wrong, wrong


def parse_example(words: list[str]) -> None:
    """Parse an rdmacli command line with the real parsers, subcommands resolved, callbacks run
    (values converted and checked), the command itself not invoked."""
    ctx = cli.make_context("rdmacli", list(words), resilient_parsing=False)
    cmd, args = cli, [*ctx.protected_args, *ctx.args]
    while isinstance(cmd, click.Group) and args:
        name, sub, rest = cmd.resolve_command(ctx, args)
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd, args = sub, [*ctx.protected_args, *ctx.args] if isinstance(sub, click.Group) else []


def example_commands():
    for key, rows in EXAMPLES.items():
        for title, text in rows:
            for line in text.split("\n"):
                words = shlex.split(line)
                for i, w in enumerate(words):  # `... | rdmacli ...`, `sh -c 'rdmacli ...'`
                    if w == "rdmacli":
                        cut = next(
                            (j for j in range(i, len(words)) if words[j] in ("|", ">", ";", "&&")), None
                        )
                        yield key, title, words[i + 1 : cut]
                        break
                    if w.startswith("rdmacli "):
                        yield key, title, shlex.split(w)[1:]
                        break


@pytest.mark.parametrize("key,title,words", list(example_commands()), ids=lambda x: str(x)[:40])
def test_every_example_parses_with_its_commands_own_parser(key, title, words):
    try:
        parse_example(words)
    except click.exceptions.Exit:  # a group without a subcommand shows its help
        pass
    except click.UsageError as exc:
        pytest.fail(f"{key}: {title}: rdmacli {' '.join(words)}: {exc.format_message()}")


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_every_command_has_examples_in_its_help(path, cmd):
    key = " ".join(path) or "rdmacli"
    if isinstance(cmd, click.Group) and path:
        return  # a group's examples are its subcommands'
    assert EXAMPLES.get(key), f"{key} has no examples (rdmacli/cli/examples.py)"
    r = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
    assert "Examples:" in r.output and "$ rdmacli" in r.output


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_one_placeholder_style(path, cmd):
    """A value's placeholder says what it is (SECONDS, SIZE, PORT, N, ...), never click's type
    names; sizes and their defaults in binary units."""
    text = help_text(path)
    for generic in ("FLOAT RANGE", "INTEGER RANGE", "FLOAT", "INTEGER", "TEXT", "BYTES"):
        assert not re.search(rf"\s--?[\w-]+ {generic}\b", text), (generic, text)
    assert not re.search(r"default: \d+[KMG]\b", text), text  # "1G": say 1 GiB


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_a_choice_whose_help_describes_one_choice_describes_them_all(path, cmd):
    for p in cmd.params:
        if isinstance(p, click.Option) and isinstance(p.type, click.Choice) and p.help:
            words = re.sub(r"\[default[^]]*\]", "", p.help)  # naming the default describes nothing
            said = [c for c in p.type.choices if re.search(rf"\b{re.escape(c)}\b", words)]
            if said:
                assert len(said) == len(p.type.choices), (p.opts, set(p.type.choices) - set(said))


def error_of(args: list[str]) -> str:
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    return r.output.strip().splitlines()[-1]


# commands that take any words as their own command (lab run) would run them: not asked here
LEAVES = [(p, c) for p, c in TREE if p and not isinstance(c, click.Group) and p != ("lab", "run")]


@pytest.mark.parametrize("path,cmd", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_a_c_tools_letter_is_hinted_only_with_an_option_the_command_has(path, cmd):
    own = own_options(cmd)
    for letter in sorted({row.letter for row in LETTERS}):
        if letter in own:
            continue
        line = error_of([*path, letter, "1"])
        assert "No such option" in line, line
        assert set(named_here(line)) <= own, (path, letter, line)


TWIN_LETTERS = [(cmd, tool, x) for cmd, tools in TWINS.items() for tool in tools for x in letters_of(tool)]


@pytest.mark.parametrize("cmd,tool,letter", TWIN_LETTERS, ids=[f"{c}-{t}{x}" for c, t, x in TWIN_LETTERS])
def test_every_letter_of_a_commands_c_tools_gets_a_pointer_where_the_command_lacks_it(cmd, tool, letter):
    """Issue 75: every letter of rping, ucmatose, udaddy, mckey, cmtime, perftest and ping(8) that
    the command doing that tool's job does not take gets rdmacli's pointer, naming only options
    the command has."""
    own = own_options(dict(TREE)[(cmd,)])
    if letter in own:
        return
    line = error_of([cmd, letter, "1", "192.0.2.1"])
    assert "No such option" in line and "(here:" in line, line
    assert set(named_here(line)) <= own, (cmd, letter, line)


def named_here(line: str) -> list[str]:
    """The options a pointer names as this command's: those inside a quoted `rdmacli OTHER ...`
    are that other command's, checked to be its own."""
    said = line.split("(here:", 1)[-1] if "(here:" in line else ""
    for other in re.findall(r"`rdmacli ([a-z-]+)([^`]*)`", said):
        name, rest = other
        assert set(re.findall(r"(--[\w-]+)", rest)) <= own_options(dict(TREE)[(name,)]), (line, name)
    return re.findall(r"(--[\w-]+)", re.sub(r"`rdmacli [^`]*`", "", said))


@pytest.mark.parametrize(
    "args, words",
    [(["bw", "h", "-b"], "--bidir (perftest's -b)"), (["bw", "h", "-q", "4"], "--qps (perftest's -q)"),
     (["listen", "--ping", "-P"], "--persistent (rping's -P)"), (["lat", "h", "-b"], "ping-pong"),
     (["bw", "h", "-t", "128"], "--depth (perftest's -t"), (["ping", "h", "-c", "5"], "-C/--count")],
)  # fmt: skip
def test_a_letter_with_another_meaning_here_is_said_where_click_fails_on_it(args, words):
    """`bw HOST -b` failed with click's "requires an argument" alone; `bw HOST -q 4` with
    "unexpected extra argument": each now names the other tool's meaning and this command's."""
    line = error_of(args)
    assert f"(here: {words}" in line or words in line.split("(here:", 1)[-1], line


def test_the_letters_people_type_are_read_as_their_tools():
    assert "HOST argument" in error_of(["connect", "-s", "192.0.2.1"])  # ucmatose's -s SERVER
    assert "HOST argument" in error_of(["events", "-s", "192.0.2.1"])
    assert "GROUP argument" in error_of(["mcast", "-m", "239.1.1.1"])  # mckey's -m GROUP
    assert "-C/--count" in error_of(["ping", "h", "-c", "5"])
    assert "-C/--count" in error_of(["bw", "h", "-n", "5"])
    assert "lat counts iterations" in error_of(["lat", "-D", "3", "h"])  # never --duration, which lat lacks
    for args in (["selftest", "-q"], ["devices", "-q"], ["doctor", "-n", "5"]):
        line = error_of(args)
        assert "No such option" in line and "(here:" not in line, line


def test_a_number_given_to_a_flag_is_said_so_not_a_bad_host():
    line = error_of(["bw", "-q", "4", "192.0.2.1"])
    assert "'4' is not an address" in line and "perftest's -q is --qps" in line
    assert "perftest" not in error_of(["connect", "5"])  # connect has no --qps


def test_lat_names_no_duration_it_lacks():
    text = help_text(("lat",))
    assert "-D" not in text.replace("-D/", "") and "--duration" not in text
    assert "-D" in help_text(("bw",))


def value_options():
    """(command path, an option's first long name, its type) for every option with a range."""
    for path, cmd in LEAVES:
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, (click.IntRange, click.FloatRange)):
                yield path, next(o for o in p.opts if o.startswith("--")), p.type


@pytest.mark.parametrize("path,opt,kind", list(value_options()), ids=lambda x: str(x))
def test_a_bad_value_is_said_in_one_style_what_was_typed_why_not_and_the_range(path, opt, kind):
    """Issue 75: `-p abc` said "'abc' is not a valid integer range."; `-S 1G` said "1073741824 is
    not in the range 0 B to 64 MiB." (not what was typed). Every range option, given a word and a
    value past its top, says what was typed, why not, and its range."""
    floating = isinstance(kind, click.FloatRange)
    above = None if kind.max is None else f"{kind.max * 10:g}" if floating else str(kind.max + 1)
    for value, why in (("abc", "is not a"), (above, "is more than")):
        if value is None:  # no top
            continue
        line = error_of([*path, opt, value, "192.0.2.1"])
        span = line.rsplit("(", 1)[-1]
        assert f"'{value}' {why}" in line and (" to " in span or " or more" in span), (line, kind)


def test_the_launchers_hints_name_only_options_of_the_command_that_says_them():
    """Issue 75: `watch status 'n[1-2]'` over ssh hinted --ssh-options, which it lacks."""
    from rdmacli.mesh.launched import LAUNCHER_HINTS, launcher_hint
    from rdmacli.watch.gather import STATUS_OPTIONS

    for launcher in LAUNCHER_HINTS:
        for path, options in ((("mesh",), None), (("watch", "status"), STATUS_OPTIONS)):
            hint = launcher_hint(launcher) if options is None else launcher_hint(launcher, options)
            named = set(re.findall(r"(--[\w-]+)", hint or ""))
            assert named <= own_options(dict(TREE)[path]), (path, launcher, hint)
    assert "--ssh-options" not in (launcher_hint("ssh", STATUS_OPTIONS) or "")


def hint_literals() -> list[tuple[str, str]]:
    """Every hint written in rdmacli/: a `hint=` argument or a *HINT constant, an f-string's
    fields as `…` (where it came from, the text)."""
    import ast
    import pathlib

    def text(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return (text(node.left) or "") + (text(node.right) or "")
        return None

    root = pathlib.Path(__file__).parents[2] / "rdmacli"
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            hinted = isinstance(node, ast.keyword) and node.arg == "hint"
            hinted = hinted or (isinstance(node, ast.Assign) and any("HINT" in n for n in names))
            said = text(node.value) if hinted else None  # type: ignore[attr-defined]
            if said:
                out.append((f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 0)}", said))
    return out


HINTS = hint_literals()
EVERY_OPTION = frozenset(o for _, cmd in TREE for o in own_options(cmd))


def test_every_option_a_hint_names_is_an_rdmacli_option_or_marked_as_another_tools():
    """A hint fits the command typed by the options it names (cli/hints.py), so another tool's
    option must be marked as such (a code span, or after its tool's possessive): `--ulimit
    memlock=-1` for a container was read as rdmacli's and its advice would have gone."""
    from rdmacli.cli.hints import named

    assert len(HINTS) > 50
    strange = [(where, sorted(named(h) - EVERY_OPTION)) for where, h in HINTS if named(h) - EVERY_OPTION]
    assert not strange


@pytest.mark.parametrize("path,cmd", TREE, ids=IDS)
def test_every_hint_as_each_command_says_it_keeps_its_advice_and_names_only_its_options(path, cmd):
    """Issue 75: hints named options the command typed lacks (`ping` told to check the port
    space with -P). Every hint, as this command would print it: what is left names only its
    options, and something is left where the hint is not wholly about other commands' options
    (the advice is more than its options)."""
    from rdmacli.cli.hints import fit, named

    options = frozenset(own_options(cmd) | own_options(cli))
    for where, hint in HINTS:
        said = fit(hint, options)
        assert said or (named(hint) and not named(hint) & options), (where, hint)
        assert named(said or "") <= options, (where, said)
