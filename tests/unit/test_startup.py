"""Start-up: --version and --help import click and rdmacli's command table, nothing more.

Under TCG a Python process takes seconds to start; every import rdmacli adds is paid by every
lab test and every scripted call. `python -X importtime` lists what a run imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

OWN_ALLOWED = {
    "rdmacli",
    "rdmacli.__main__",
    "rdmacli.cli",
    "rdmacli.cli.examples",  # the Examples epilogs: a table of strings
    "rdmacli.native",  # where the extension is, found without loading it (--version)
    "rdmacli.native.header",  # datapath.h's constants, read from the header (one small file)
    "rdmacli.rdma",
    "rdmacli.rdma.versions",
}


def imported(*args: str) -> set[str]:
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rdmacli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    names = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("connect", "--help")])
def test_version_and_help_import_nothing_beyond_click(args):
    names = imported(*args)
    assert "click" in names
    heavy = {
        n for n in names if n.split(".")[0] in ("rich", "cffi", "_cffi_backend", "pyverbs", "ClusterShell")
    }
    assert not heavy, heavy
    if args[0] != "connect":
        assert {n for n in names if n.startswith("rdmacli")} <= OWN_ALLOWED


def test_watch_show_loads_no_metrics_server(tmp_path):
    """`watch show` runs on every node at each `watch status` poll (eight Python starts a poll in
    the lab, under TCG): it reads a file and prints a line, and loads neither prometheus_client
    nor ssl (the /metrics endpoint's, 52 ms of its 62 on this host) nor the probe."""
    state = tmp_path / "s.json"
    state.write_text("{}")
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "rdmacli", "watch", "show", "--state-file",
                        str(state)], capture_output=True, text=True, timeout=60)  # fmt: skip
    names = {
        line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")
    }
    assert "rdmacli.watch.service" in names, r.stderr[-2000:]
    heavy = {n for n in names if n.split(".")[0] in ("prometheus_client", "ssl", "cffi", "rich")}
    table = {"rdmacli.probe", "rdmacli.probe.kinds"}  # the probe checks' names (the schedule's), no probe
    assert not heavy and not {n for n in names if n.startswith("rdmacli.probe")} - table, heavy
