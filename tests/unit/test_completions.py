"""Completions that install: the README's recipes, in a real bash with bash-completion, from this
virtual environment and from `make install` (a user's ~/.local, found by bash-completion itself)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
LOADER = "/usr/share/bash-completion/bash_completion"
pytestmark = pytest.mark.skipif(
    not (shutil.which("bash") and os.path.exists(LOADER)), reason="bash-completion is not installed"
)


def complete(setup: str, words: str, env: dict | None = None) -> list[str]:
    """What bash offers for `words` (the last one being completed) after `setup`."""
    script = f"""
source {LOADER}
{setup}
COMP_WORDS=({words}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
[[ "{words}" == *" " ]] && COMP_WORDS+=("") && COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
func=$(complete -p rdmacli | sed -E 's/.* -F ([^ ]+) .*/\\1/')
$func rdmacli
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    r = subprocess.run(
        ["bash", "--norc", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": path, **(env or {})},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_the_one_line_recipe_works_from_a_virtual_environment():
    offered = complete('eval "$(_RDMACLI_COMPLETE=bash_source rdmacli)"', "rdmacli pi")
    assert offered == ["ping"]
    assert "--count" in complete('eval "$(_RDMACLI_COMPLETE=bash_source rdmacli)"', "rdmacli ping h --cou")


def test_make_install_into_a_users_local_share_is_found_by_bash_completion(tmp_path):
    subprocess.run(
        ["make", "-s", "install", f"PREFIX={tmp_path}/.local"], cwd=ROOT, check=True, capture_output=True
    )
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / ".local" / "share")}
    offered = complete("__load_completion rdmacli", "rdmacli me", env)
    assert "mesh" in offered
    assert complete("__load_completion rdmacli", "rdmacli bw h -p ", env) == ["18515"]
