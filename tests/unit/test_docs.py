"""Man pages and completions: generated from the click tree, checked in, linted, and exercised
in real bash, zsh and fish."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import click
import pytest

from rdmacli.cli import COMMANDS

ROOT = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # the build-time generator, not part of the package
from gendocs import _commands, command_context, generate  # noqa: E402

PAGES = sorted((ROOT / "man").glob("*.1"))


def test_generated_docs_are_checked_in_and_fresh():
    for rel, text in generate().items():
        path = ROOT / rel
        assert path.exists(), f"{rel} missing: run `make docs`"
        assert path.read_text() == text, f"{rel} is stale: run `make docs`"


def test_every_command_has_a_page():
    names = {p.name for p in PAGES}
    assert names == {"rdmacli.1", *(f"rdmacli-{n}.1" for n in COMMANDS)}


@pytest.mark.parametrize("name,cmd", _commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_page_options_match_help(name, cmd):
    page = ROOT / "man" / ("rdmacli.1" if name == "rdmacli" else f"rdmacli-{name}.1")
    text = page.read_text().replace("\\-", "-")
    documented = set(re.findall(r"^\.B (-[^ \n]+.*)$", text, re.M))
    doc_opts = {o.strip(",") for line in documented for o in line.split() if o.startswith("-")}
    ctx = command_context(name, cmd)
    commands = [cmd]
    if isinstance(cmd, click.Group) and name != "rdmacli":  # watch run, show, status: theirs too
        commands += [cmd.get_command(ctx, sub) for sub in cmd.list_commands(ctx)]
        for sub in cmd.list_commands(ctx):
            assert f'.SS "OPTIONS OF {sub.upper()}"' in page.read_text(), f"{page.name} lacks {sub}'s options"
    help_opts = {
        o
        for c in commands
        for p in c.get_params(ctx)
        if isinstance(p, click.Option) and not p.hidden
        for o in p.opts + p.secondary_opts
    }
    assert help_opts - doc_opts == set(), f"options missing from {page.name}"
    assert doc_opts - help_opts == set(), f"{page.name} documents options that do not exist"
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT", "SEE ALSO"):
        assert f".SH {section}" in page.read_text()
    if name != "rdmacli":
        assert ".SH EXAMPLES" in page.read_text()


def test_pages_lint_clean_and_render():
    mandoc, groff = shutil.which("mandoc"), shutil.which("groff")
    assert mandoc and groff, "apt-get install mandoc groff-base"
    r = subprocess.run([mandoc, "-T", "lint", *map(str, PAGES)], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr
    for page in PAGES:
        g = subprocess.run([groff, "-ww", "-z", "-man", str(page)], capture_output=True, text=True)
        assert g.returncode == 0 and not g.stderr.strip(), f"{page.name}: {g.stderr}"
    out = subprocess.run(
        ["man", "-l", str(ROOT / "man" / "rdmacli-ping.1")],
        capture_output=True,
        text=True,
        env={**os.environ, "MANWIDTH": "80"},
    )
    assert out.returncode == 0 and "EXIT STATUS" in out.stdout and "--validate" in out.stdout


@pytest.fixture
def shell_env(tmp_path):
    """PATH with an `rdmacli` that runs this checkout, as an installed entry point would."""
    exe = tmp_path / "rdmacli"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m rdmacli "$@"\n')
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}


def _shell(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is needed for the completion tests (apt-get install {name})"
    return path


@pytest.mark.parametrize(
    "words,cword,expect", [("rdmacli pi", 1, "ping"), ("rdmacli ping --val", 2, "--validate")]
)
def test_bash_completion(shell_env, words, cword, expect):
    script = (
        f"source {ROOT}/completions/rdmacli.bash; COMP_WORDS=({words}); COMP_CWORD={cword};"
        ' _rdmacli_completion rdmacli; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    r = subprocess.run(
        [_shell("bash"), "-c", script], capture_output=True, text=True, env=shell_env, timeout=60
    )
    assert expect in r.stdout.split(), r.stdout + r.stderr


@pytest.mark.parametrize(
    "words,current,expect", [("rdmacli pi", 2, "ping"), ("rdmacli ping --val", 3, "--validate")]
)
def test_zsh_completion(shell_env, words, current, expect):
    # compadd and _describe only exist inside a completion widget: stand-ins print the candidates
    script = (
        f"compdef() {{ :; }}; source {ROOT}/completions/_rdmacli;"
        " compadd() { print -l -- ${(P)${@[-1]}} };"
        " _describe() { print -l -- ${(P)3} };"
        f" words=({words}); CURRENT={current}; _rdmacli_completion"
    )
    r = subprocess.run(
        [_shell("zsh"), "-f", "-c", script], capture_output=True, text=True, env=shell_env, timeout=60
    )
    got = [line.split(":")[0] for line in r.stdout.split("\n")]
    assert expect in got, r.stdout + r.stderr


@pytest.mark.parametrize("line,expect", [("rdmacli pi", "ping"), ("rdmacli ping --val", "--validate")])
def test_fish_completion(shell_env, line, expect):
    script = f"source {ROOT}/completions/rdmacli.fish; complete -C'{line}'"
    r = subprocess.run(
        [_shell("fish"), "--no-config", "-c", script],
        capture_output=True,
        text=True,
        env=shell_env,
        timeout=60,
    )
    assert expect in [x.split("\t")[0] for x in r.stdout.splitlines()], r.stdout + r.stderr


def test_dynamic_completion_offers_known_ports(shell_env):
    env = {
        **shell_env,
        "COMP_WORDS": "rdmacli connect x -p ",
        "COMP_CWORD": "4",
        "_RDMACLI_COMPLETE": "bash_complete",
    }
    r = subprocess.run(["rdmacli"], capture_output=True, text=True, env=env, timeout=60)
    assert "plain,7471" in r.stdout and "plain,7174" in r.stdout


def test_the_readme_is_short_and_starts_with_the_users_install():
    """A newcomer's README: at most 15 KB, the install a user does within its first 80 lines,
    before the developer's `make` commands; no dated diary."""
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 15 * 1024, len(text.encode())
    lines = text.splitlines()
    first_install = next(i for i, line in enumerate(lines) if "pipx install" in line or "pip install" in line)
    assert first_install < 80, first_install
    assert first_install < next(i for i, line in enumerate(lines) if line.startswith("make test"))
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "dates belong to git log"


def test_the_docs_site_builds_strictly_with_every_page_in_its_nav():
    """mkdocs build --strict (as `make lint`): a broken link, a missing anchor or a page left out
    of the nav fails; the generated reference pages are in the nav."""
    mkdocs = shutil.which("mkdocs") or str(pathlib.Path(sys.executable).parent / "mkdocs")
    if not os.path.exists(mkdocs):
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    conf = (ROOT / "mkdocs.yml").read_text()
    for page in ("reference/cli.md", "reference/json.md", "troubleshooting.md", "benchmarks.md"):
        assert page in conf, page
    site = str(ROOT / "build" / "site-test")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [mkdocs, "build", "--strict", "--quiet", "--site-dir", site]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_no_dated_diary_in_the_docs_or_the_makefile():
    for path in [ROOT / "Makefile", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        if path.name == "benchmarks.md":  # the results files' own timestamps
            continue
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), (
            f"{path.relative_to(ROOT)}: dates belong to git log"
        )


def test_every_cause_is_explained_for_people():
    from rdmacli.errors import CAUSES, EXIT_OF, Cause

    assert set(CAUSES) == set(Cause)
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    for cause in Cause:
        meaning, advice = CAUSES[cause]
        assert meaning and advice
        assert f"| `{cause.value}` | {int(EXIT_OF[cause])} |" in page


def test_the_cli_reference_documents_each_command_once_and_shows_choices_as_typed():
    """Issue 75: every command was documented twice (the root group's commands walked again),
    and `[write\\|read\\|send]` showed its backslash (an escape inside a code span)."""
    import re
    from collections import Counter

    text = (ROOT / "docs" / "reference" / "cli.md").read_text()
    heads = Counter(re.findall(r"^#{2,3} (rdmacli[^\n]*)$", text, re.M))
    assert heads and all(n == 1 for n in heads.values()), [h for h, n in heads.items() if n > 1]
    assert "rdmacli watch status" in heads and "rdmacli bw" in heads
    spans = re.findall(r"`([^`\n]*)`", text)
    assert not [s for s in spans if "\\|" in s]


GUIDES = [ROOT / "docs" / "getting-started.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
LONGEST_BLOCK = 200  # words of prose between blank lines (a list item counts alone)
# what a diary says: a past incident told as the reason, not the rule it left (that is git log's)
DIARY = re.compile(
    r"by chance|\bonce (hid|blamed|had|named|took|broke|failed|saw|lost|cost)\b"
    r"|\bin CI\b(?! scripts)|\b(this|last|the last) (session|stop)\b|\bturned out\b",
    re.I,
)


def prose_blocks(text: str) -> list[str]:
    """A page's prose: blocks between blank lines, with fenced code, tables, headings and
    admonitions' markers left out; a list's items apart (each is read on its own)."""
    text = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.M | re.S)
    blocks = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith(("|", "#", "!!!", "<!--"))]
        item: list[str] = []
        for ln in lines:
            if re.match(r"\s*(- |\d+\. )", ln) and item:
                blocks.append(" ".join(item))
                item = []
            item.append(ln)
        if item:
            blocks.append(" ".join(item))
    return blocks


GENERATED_MARK = "generated by scripts/gendocs.py"
WRITTEN = [p for p in sorted((ROOT / "docs").rglob("*.md")) if GENERATED_MARK not in p.read_text()]


@pytest.mark.parametrize("page", WRITTEN, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_written_page_reads_in_blocks_a_reader_takes_in_at_once(page):
    """Issue 75: not only the guides; every page written by hand (the generated ones are tables)."""
    blocks = prose_blocks(page.read_text())
    long = [(len(b.split()), b[:60]) for b in blocks if len(b.split()) > LONGEST_BLOCK]
    assert not long, f"{page.name}: blocks over {LONGEST_BLOCK} words: {long}"


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_a_guide_reads_in_short_sections_with_what_to_type_first(page):
    """Issue 75: the mesh guide was one paragraph of 900 words and the watch guide opened with
    350. Every guide: what to type before any section (a quick start: commands, and what they
    print), prose in blocks a reader takes in at once, sections once it is long, no diary."""
    text = page.read_text()
    long = [(len(b.split()), b[:60]) for b in prose_blocks(text) if len(b.split()) > LONGEST_BLOCK]
    assert not long, f"{page.name}: blocks over {LONGEST_BLOCK} words: {long}"
    body = text.split("\n## ", 1)[0]
    if page.name != "getting-started.md":  # the tutorial: its sections are the steps, each with its commands
        assert "```" in body or "\n| `" in body, f"{page.name}: no command before its first section"
    words = sum(len(b.split()) for b in prose_blocks(text))
    assert words < 400 or text.count("\n## ") >= 2, f"{page.name}: {words} words in fewer than two sections"
    said = DIARY.search(" ".join(text.split()))
    assert not said, f"{page.name}: a diary line: ...{said.group(0)}..."
