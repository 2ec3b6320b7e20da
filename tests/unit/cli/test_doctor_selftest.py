"""`rdmacli doctor` and `selftest` failures carry causes (as data), on a host whose checks fail."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rdmacli.cli import cli
from rdmacli.diag import doctor
from rdmacli.diag.selftest import Row
from rdmacli.errors import Cause


def run(*args: str):
    r = CliRunner().invoke(cli, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def no_device(monkeypatch, *extra):
    checks = [
        doctor.Check("libraries", "pass", "librdmacm, libibverbs"),
        doctor.Check("devices", "fail", "no RDMA device", "modprobe rdma_rxe"),
        *extra,
    ]
    monkeypatch.setattr(doctor, "local_checks", lambda: list(checks))


def test_doctor_on_a_host_without_a_device_exits_as_devices_does_with_causes(monkeypatch):
    no_device(monkeypatch, doctor.Check("memlock", "fail", "64 KiB", "ulimit -l unlimited"))
    r = run("doctor", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 3 and doc["error"]["cause"] == "environment"  # `devices`: 3 as well
    failed = {c["check"]: c["cause"] for c in doc["data"]["checks"] if c["verdict"] == "fail"}
    assert failed == {"devices": "environment", "memlock": "memlock"}


def test_doctor_says_the_peer_checks_it_skipped_and_why(monkeypatch):
    no_device(monkeypatch)
    r = run("doctor", "127.0.0.1", "-p", "7471", "--json")
    [peer] = [c for c in json.loads(r.stdout)["data"]["checks"] if c["check"] == "peer"]
    assert peer["verdict"] == "skipped" and "devices check failed" in peer["detail"]
    r = run("doctor", "127.0.0.1", "-p", "7471")
    assert "skipped" in r.stdout and "1 skipped" in r.stdout


def test_a_failed_check_that_leaves_the_host_usable_is_check_failed(monkeypatch):
    checks = [doctor.Check("libraries", "pass", "ok"), doctor.Check("sysctl", "fail", "rp_filter=1")]
    monkeypatch.setattr(doctor, "local_checks", lambda: list(checks))
    r = run("doctor", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["error"]["cause"] == "check_failed"
    assert "1 of 2 checks failed: sysctl" in doc["error"]["message"]
    assert doc["data"]["checks"][1]["cause"] == "check_failed"


def test_selftest_failures_carry_each_rows_cause(monkeypatch):
    from rdmacli.diag import selftest

    monkeypatch.setattr(selftest, "pick_path", lambda s, c: ("10.0.0.1", "10.0.0.2", "one device"))
    rows = {
        "connect": Row("connect", "pass", 1.0, "ok"),
        "ping": Row("ping", "fail", 2.0, "x", Cause.DEADLINE),
    }
    monkeypatch.setattr(selftest, "run_protocol", lambda name, *a, **kw: rows[name])
    r = run("selftest", "--protocol", "connect", "--protocol", "ping", "--json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["error"]["cause"] == "check_failed", doc["error"]
    assert [x["cause"] for x in doc["data"]["rows"]] == [None, "deadline"]


def test_doctors_help_names_the_checks_that_exit_3():
    """Issue 75: doctor's help said 1 when a check fails and 3 when the host cannot be examined,
    while 2 failed checks of 5 (devices among them) exited 3. The help names the checks whose
    failure exits 3 (doctor.SETUP_CHECKS), as the code decides."""
    words = " ".join(run("doctor", "--help").stdout.split())
    said = words[words.index("Exits 0") :]
    assert all(name in said.split("3 when")[1].split("else 1")[0] for name in doctor.SETUP_CHECKS), said
