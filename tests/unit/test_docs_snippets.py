"""Every configuration snippet the docs give an admin to paste is parsed by the program that will
read it (issue 75): systemd's lines by systemd-analyze, the web config by the agent's own loader,
a ClusterShell topology by ClusterShell, slurm.conf's lines by their syntax, and the rdmacli
arguments they carry by rdmacli's own command. An unquoted `Environment=` line with a space in
its value (systemd splits it, and ignores the half that is no assignment) once stood in the
watch guide; no reader would have seen it."""

from __future__ import annotations

import pathlib
import re
import shlex
import shutil
import subprocess

import pytest

from rdmacli.cli import cli

ROOT = pathlib.Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
UNIT = ROOT / "rdmacli" / "watch" / "rdmacli-watch.service"
DIRECTIVES = ("Environment", "LoadCredential", "ReadWritePaths", "SupplementaryGroups", "ProtectHome")
DIRECTIVE = re.compile("(?:" + "|".join(DIRECTIVES) + ")=")
ENV_VARS = {"RDMACLI_WATCH_ARGS", "RDMACLI_WATCH_NODES"}


def fenced(lang: str) -> list[tuple[pathlib.Path, str]]:
    """Every ```lang block of the docs, with its page."""
    out = []
    for page in PAGES:
        out += [(page, m) for m in re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(), re.M | re.S)]
    return out


def systemd_lines() -> list[tuple[str, str]]:
    """(where, directive line) for every systemd directive shown to be pasted: a line of a code
    block (a `#` comment's text too, as `systemctl edit` shows one), a whole inline code span (it
    may wrap across lines), an indented line of help text (the CLI reference), and the unit's
    own commented examples; a trailing "(words)" is the page's, not the line's."""
    candidates = []
    for page in PAGES:
        text = page.read_text()
        code = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
        prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
        lines = [ln.rsplit("# ", 1)[-1] for block in code for ln in block.splitlines()]
        lines += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
        lines += [part for ln in prose.splitlines() if ln.startswith("    ") for part in ln.split("; ")]
        candidates += [(page.name, ln) for ln in lines]
    candidates += [(UNIT.name, ln.lstrip("#")) for ln in UNIT.read_text().splitlines() if ln.startswith("#")]
    out = [(where, re.sub(r"\s+\(.*\)$", "", ln.strip())) for where, ln in candidates]
    return [(where, ln) for where, ln in out if DIRECTIVE.match(ln)]


def test_the_docs_show_systemd_lines_to_check():
    found = systemd_lines()
    assert len({w for w, _ in found}) >= 3 and any(line.startswith("Environment=") for _, line in found)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze (package systemd)")
def test_every_systemd_line_in_the_docs_reads_as_systemd_reads_it(tmp_path):
    """The packaged unit with every directive the docs show as a drop-in's, through
    `systemd-analyze verify`: systemd's own quoting; a half it would ignore fails the test."""
    unit = UNIT.read_text().replace("ExecStart=rdmacli ", "ExecStart=/bin/true ")
    lines = systemd_lines()
    path = tmp_path / "rdmacli-watch.service"
    path.write_text(unit + "\n[Service]\n" + "\n".join(line for _, line in lines) + "\n")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    said = [ln for ln in (r.stdout + r.stderr).splitlines() if str(path) in ln or "ignoring" in ln]
    assert r.returncode == 0 and not said, said


def test_every_environment_line_carries_only_what_watch_run_takes():
    """Each assignment, split as systemd splits it, sets a variable the unit reads, and the words
    the unit's ExecStart expands from it are options `rdmacli watch run` has."""
    import click

    watch = cli.get_command(click.Context(cli), "watch")
    run = watch.get_command(click.Context(watch), "run")  # type: ignore[union-attr]
    options = {opt for p in run.params for opt in p.opts}
    for where, line in systemd_lines():
        if not line.startswith("Environment="):
            continue
        for assignment in shlex.split(line.removeprefix("Environment=")):
            name, _, value = assignment.partition("=")
            assert name in ENV_VARS, (where, line)
            flags = [w for w in value.split() if w.startswith("-")]
            assert set(flags) <= options, (where, line, set(flags) - options)


def test_the_web_config_in_the_docs_loads_in_the_agent(tmp_path):
    from rdmacli.watch import webconfig

    blocks = [text for _, text in fenced("yaml") if "tls_server_config" in text or "basic_auth_users" in text]
    assert blocks
    for text in blocks:
        path = tmp_path / "web.yml"
        path.write_text(text)
        path.chmod(0o600)
        for name in re.findall(r"_file: (\S+)", text):  # the files it names, as empty stand-ins
            (tmp_path / name).write_text("")
            (tmp_path / name).chmod(0o600)
        config = webconfig.load(str(path))
        assert config.tls is not None


def test_the_clustershell_topology_in_the_docs_parses(tmp_path):
    from ClusterShell.Topology import TopologyParser

    blocks = [text for _, text in fenced("ini") if "[routes]" in text]
    assert blocks
    for text in blocks:
        path = tmp_path / "topology.conf"
        path.write_text(text)
        tree = TopologyParser(str(path)).tree("mgmt")  # the admin host the guide launches from
        assert "gw[1-4]" in str(tree) and "gpu[0001-1000]" in str(tree)


def test_slurm_conf_lines_in_the_docs_are_key_value_lines_slurm_takes():
    known = {"HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState"}
    blocks = [text for _, text in fenced("ini") if "slurm.conf" in text]
    assert blocks
    for text in blocks:
        for line in text.splitlines():
            if line.strip() and not line.startswith("#"):
                key, eq, value = line.partition("=")
                assert eq and key in known and value and " " not in value, line
