"""Help, version and error paths of the CLI, without RDMA."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from rdmacli import __version__
from rdmacli.cli import COMMANDS, cli


def test_help_lists_every_subcommand_but_the_internal_agent():
    r = CliRunner().invoke(cli, ["--help"])
    assert r.exit_code == 0
    for name, (_, summary) in COMMANDS.items():
        if name == "mesh-agent":
            assert "mesh-agent" not in r.output  # started by `mesh`; documented in its own man page
            continue
        assert name in r.output
        assert summary.split()[0] in r.output


def test_version_names_the_rdma_core_it_runs_on():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0 and __version__ in r.output
    assert "librdmacm" in r.output and "libibverbs" in r.output


def test_a_mistyped_command_gets_a_suggestion_and_ping8s_letters_a_pointer():
    r = CliRunner().invoke(cli, ["pnig", "h"])
    assert r.exit_code == 2 and "Did you mean 'ping'?" in r.output
    r = CliRunner().invoke(cli, ["ping", "h", "-c", "5"])
    assert r.exit_code == 2 and "-C/--count" in r.output


def test_json_with_json_lines_or_events_is_refused_with_words():
    r = CliRunner().invoke(cli, ["connect", "h", "--json", "--json-lines"])
    assert r.exit_code == 2 and "two formats" in r.output
    r = CliRunner().invoke(cli, ["connect", "h", "--json", "--events"])
    assert r.exit_code == 2 and "--events" in r.output


def test_a_usage_errors_json_never_names_a_mistyped_command():
    r = subprocess.run([sys.executable, "-m", "rdmacli", "bogus", "--json"], capture_output=True, text=True)
    assert r.returncode == 2 and json.loads(r.stdout)["command"] == "rdmacli"


def test_a_usage_errors_json_names_the_command_typed_a_subcommand_too():
    """Issue 75: `watch status`'s usage error said "command": "watch"."""
    cases = ((["watch", "status"], "watch status"), (["watch", "status", "n1", "--bogus"], "watch status"),
             (["watch", "run", "--metrics"], "watch run"), (["lab", "run", "--nodes", "x"], "lab run"),
             (["ping"], "ping"), (["watch", "nope"], "watch"))  # fmt: skip
    for args, command in cases:
        r = subprocess.run([sys.executable, "-m", "rdmacli", *args, "--json"], capture_output=True, text=True)
        assert r.returncode == 2 and json.loads(r.stdout)["command"] == command, (args, r.stdout)


def test_messages_are_not_hard_wrapped_when_stderr_is_not_a_terminal():
    import os

    import pytest

    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has RDMA devices: `devices` has no error to print")
    r = subprocess.run([sys.executable, "-m", "rdmacli", "devices"], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 3 and all(x.startswith(("error:", "hint:", "cause:")) for x in lines), r.stderr
    assert any("rdma link add rxe0 type rxe netdev" in x for x in lines), r.stderr
    assert lines[-1] == "cause: environment", r.stderr  # the troubleshooting page's row


def test_no_rdma_device_is_said_one_way_by_every_command_that_meets_it(tmp_path, monkeypatch):
    """Issue 75: devices, doctor, selftest and the test commands said "no RDMA device" four ways.
    One message (errors.NO_DEVICE, then what saw it) and one hint, and a human error ends with
    its cause, as the JSON's error.cause names it."""
    from rdmacli.diag import devices
    from rdmacli.errors import NO_DEVICE, NO_DEVICE_HINT

    monkeypatch.setattr(devices, "SYSFS", str(tmp_path))
    said = {}
    for command in (["devices"], ["selftest"]):
        r = CliRunner().invoke(cli, command)
        assert r.exit_code == 3, (command, r.output)
        lines = r.stderr.strip().splitlines()
        said[command[0]] = lines
        assert lines[0].startswith(f"error: {NO_DEVICE} ("), (command, lines)
        assert lines[-1] == "cause: environment", (command, lines)
        doc = json.loads(CliRunner().invoke(cli, [*command, "--json"]).stdout)
        assert doc["error"]["message"].startswith(NO_DEVICE) and doc["error"]["hint"] == NO_DEVICE_HINT
        assert doc["error"]["cause"] == "environment"
    doc = json.loads(CliRunner().invoke(cli, ["doctor", "--json"]).stdout)
    [check] = [c for c in doc["data"]["checks"] if c["check"] == "devices"]
    assert check["detail"].startswith(NO_DEVICE) and check["hint"] == NO_DEVICE_HINT, check


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


def test_sizes_take_suffixes_everywhere_and_help_shows_the_bounds_enforced():
    from rdmacli.cli.options import Size

    size = Size(1, 4 << 30)
    assert [size.convert(v, None, None) for v in ("64K", "1M", "1MiB", "2g", "100", "4 KiB")] == [
        65536, 1 << 20, 1 << 20, 2 << 30, 100, 4096
    ]  # fmt: skip
    for cmd in ("bw", "lat", "connect", "listen", "ping", "mcast", "selftest"):
        r = CliRunner().invoke(cli, [cmd, "--help"])
        assert "SIZE" in r.output, cmd
    r = CliRunner().invoke(cli, ["ping", "h", "-S", "64K"])
    assert r.exit_code == 2 and "23 B to 65535 B" in r.output


def test_every_client_takes_dash_i_and_every_command_one_busy_poll_pair():
    for cmd in ("connect", "ping", "bw", "lat", "mcast", "events", "listen"):
        out = CliRunner().invoke(cli, [cmd, "--help"]).output
        assert "-I, -b, --bind" in out, cmd
        if cmd not in ("events", "mcast"):  # they have no busy-poll choice
            assert "--busy-poll / --no-busy-poll" in out, cmd


def test_events_offers_only_the_port_spaces_it_takes_and_says_which_side_was_doubled():
    out = CliRunner().invoke(cli, ["events", "--help"]).output
    assert "[tcp|ib]" in out and "udp" not in out
    r = CliRunner().invoke(cli, ["events", "--listen", "1.2.3.4"])
    assert r.exit_code == 2 and "give one" in r.output


def test_the_locked_memory_limit_is_said_with_one_hint_wherever_it_is_met(monkeypatch):
    """Issue 75: doctor, a refused queue and a refused registration each had their own advice."""
    import resource

    from rdmacli.diag import doctor
    from rdmacli.engine.conn import memlock_error
    from rdmacli.engine.status import call_error
    from rdmacli.errors import CAUSES, MEMLOCK_HINT, Cause
    from rdmacli.rdma.cm import RdmaCallError

    monkeypatch.setattr(resource, "getrlimit", lambda which: (64 * 1024, 64 * 1024))
    monkeypatch.setattr(doctor, "_has_cap", lambda cap: False)
    [row] = doctor.check_memlock()
    queue = call_error("create qp", RdmaCallError("rdma_create_qp", 12), "here")
    registration = memlock_error("reg mr", RdmaCallError("ibv_reg_mr", 12), 1 << 20)
    assert row.hint == MEMLOCK_HINT and queue.cause == registration.cause == Cause.MEMLOCK
    assert MEMLOCK_HINT in queue.hint and MEMLOCK_HINT in registration.hint
    assert MEMLOCK_HINT[1:] in CAUSES[Cause.MEMLOCK][1]
