"""Help, version and error paths of the CLI, without RDMA."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from rdmacli import __version__
from rdmacli.cli import COMMANDS, cli


def test_help_lists_every_subcommand():
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0
    for name, (_, summary) in COMMANDS.items():
        assert name in r.output
        assert summary.split()[0] in r.output


def test_version():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output


def test_unknown_option_is_usage_error():
    r = CliRunner().invoke(cli, ["devices", "--bogus"])
    assert r.exit_code == 2


def test_devices_without_rdma_says_how_to_get_one(tmp_path, monkeypatch):
    from rdmacli.diag import devices

    monkeypatch.setattr(devices, "SYSFS", str(tmp_path))
    r = CliRunner().invoke(cli, ["devices", "--json"])
    assert r.exit_code == 3
    doc = json.loads(r.stdout)
    assert doc["exit_code"] == 3 and "rdma link add" in doc["error"]["hint"]


def test_missing_dependency_gives_advice():
    code = "import sys; sys.modules['rich'] = None; from rdmacli.__main__ import main; main()"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3
    assert "pip install rich" in r.stderr and "Traceback" not in r.stderr


def test_require_rdma_fails_a_run_where_no_lab_test_ran():
    import pathlib

    here = pathlib.Path(__file__).parent
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "rdma",
            "--require-rdma",
            str(here / "test_status.py"),
        ],
        capture_output=True,
        text=True,
        cwd=here.parents[1],
    )
    assert r.returncode != 0 and "the lab suite must run in full" in r.stdout
