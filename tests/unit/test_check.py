"""`rdmacli check` on a made sysfs: each fault named with its reason in every format, the counters'
baseline rules, the fabric's word from a watch state (untrusted), the deadline and the exit codes.
The lab suite runs it on real Soft-RoCE ports (tests/lab/test_check.py)."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
from click.testing import CliRunner

from rdmacli import counters
from rdmacli.cli import check as check_cli
from rdmacli.cli import cli
from rdmacli.diag import baseline, devices
from rdmacli.schema import SUMMARY_SCHEMA

IP_GID = "0000:0000:0000:0000:0000:ffff:0a4d:0001"  # ::ffff:10.77.0.1
EMPTY = "0000:0000:0000:0000:0000:0000:0000:0000"


EDR = "100 Gb/sec (4X EDR)"


def make_port(
    root, dev: str, port: int = 1, *, state="4: ACTIVE", phys="5: LinkUp", rate=EDR, gid=IP_GID, counts=None
):
    pdir = root / dev / "ports" / str(port)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs", "counters"):
        (pdir / sub).mkdir(parents=True, exist_ok=True)
    (pdir / "state").write_text(state + "\n")
    (pdir / "phys_state").write_text(phys + "\n")
    (pdir / "link_layer").write_text("Ethernet\n")
    (root / dev / "node_type").write_text("1: CA\n")  # with Ethernet: RoCE
    (pdir / "rate").write_text(rate + "\n")
    (pdir / "gids" / "0").write_text(gid + "\n")
    (pdir / "gid_attrs" / "types" / "0").write_text("RoCE v2\n")
    (pdir / "gid_attrs" / "ndevs" / "0").write_text(f"eth_{dev}\n")
    set_counts(root, dev, port, counts or {})


def set_counts(root, dev: str, port: int, counts: dict[str, int]) -> None:
    for name in ("link_downed", "symbol_error", "port_rcv_errors"):
        value = counts.get(name, 0)
        (root / dev / "ports" / str(port) / "counters" / name).write_text(f"{value}\n")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A made sysfs with one healthy RoCE port (rxe0/1), a state dir and no watch agent."""
    sysfs = tmp_path / "sys"
    sysfs.mkdir()
    monkeypatch.setattr(devices, "SYSFS", str(sysfs))
    monkeypatch.setattr(counters, "SYSFS", str(sysfs))
    monkeypatch.setattr(baseline, "boot_id", lambda: "boot-1")
    make_port(sysfs, "rxe0")
    return sysfs


def run(tmp_path, *args: str):
    base = ["check", "--state-dir", str(tmp_path / "state"), "--watch-state", str(tmp_path / "watch.json")]
    r = CliRunner().invoke(cli, [*base, *args])
    assert "Traceback" not in r.output, r.output
    return r


def doc_of(tmp_path, *args: str) -> dict:
    r = run(tmp_path, *args, "--format", "json")
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SUMMARY_SCHEMA)
    assert doc["exit_code"] == r.exit_code
    return doc


def failed(doc: dict) -> list[str]:
    return [f"{c['check']}: {c['detail']}" for c in doc["data"]["checks"] if c["verdict"] == "fail"]


def test_a_healthy_port_is_healthy_in_every_format(tmp_path, host):
    doc = doc_of(tmp_path)
    assert doc["exit_code"] == 0 and doc["data"]["healthy"] and not failed(doc), doc["data"]["checks"]
    assert doc["params"]["format"] == "json"
    r = run(tmp_path, "--format", "nhc")
    assert (r.exit_code, r.stdout) == (0, "")  # NHC: nothing to say
    r = run(tmp_path, "--format", "npd")
    assert r.exit_code == 0 and r.stdout.startswith("rdmacli: healthy") and len(r.stdout.strip()) <= 80
    r = run(tmp_path, "--format", "line")
    assert r.exit_code == 0 and r.stdout.strip().endswith("| Healthy")


def test_a_port_down_a_missing_address_and_a_slow_rate_are_each_the_reason(tmp_path, host):
    make_port(host, "rxe0", state="1: DOWN", phys="3: Disabled")
    r = run(tmp_path, "--format", "nhc")
    assert r.exit_code == 1 and r.stdout.strip() == "rdmacli: port rxe0/1 DOWN, DISABLED, 100 Gb/s"
    make_port(host, "rxe0", gid=EMPTY)
    assert failed(doc_of(tmp_path)) == ["port rxe0/1: ACTIVE, LINK_UP, 100 Gb/s, no IP address on eth_rxe0"]
    make_port(host, "rxe0", rate="50 Gb/sec (2X EDR)")
    doc = doc_of(tmp_path, "--expect", "rxe0:1=100")
    assert failed(doc) == ["port rxe0/1: ACTIVE, LINK_UP, 50 Gb/s, expected 100 Gb/s"]
    assert doc_of(tmp_path, "--expect", "rxe0:1=50")["exit_code"] == 0


def test_an_expected_port_that_is_not_there_fails_and_a_bad_expect_is_usage(tmp_path, host):
    doc = doc_of(tmp_path, "--expect", "mlx5_0:1=400")
    assert doc["exit_code"] == 1 and failed(doc) == ["port mlx5_0/1: not found"]
    for bad in ("mlx5_0=400", "mlx5_0:1=0", "mlx5_0:1=fast", "../x:1=1", "mlx5_0:999=1"):
        r = run(tmp_path, "--expect", bad)
        assert r.exit_code == 2 and "DEVICE:PORT=GBPS" in r.output or "Gb/s" in r.output, (bad, r.output)
    assert doc_of(tmp_path, "-d", "mlx5_9")["exit_code"] == 1


def test_counters_first_run_then_rules_then_reset_and_a_new_boot(tmp_path, host, monkeypatch):
    set_counts(host, "rxe0", 1, {"link_downed": 3})  # from before the first check: not judged
    first = doc_of(tmp_path)
    assert first["exit_code"] == 0 and any("baseline taken" in c["detail"] for c in first["data"]["checks"])
    set_counts(host, "rxe0", 1, {"link_downed": 3, "symbol_error": 10, "port_rcv_errors": 100})
    assert doc_of(tmp_path)["exit_code"] == 0  # under 120 an hour, counted over an hour at least
    set_counts(host, "rxe0", 1, {"symbol_error": 10, "port_rcv_errors": 100, "link_downed": 4})
    r = run(tmp_path, "--format", "npd")
    assert (
        r.exit_code == 1
        and r.stdout.startswith("rdmacli: counters rxe0/1 link_downed +1")
        and len(r.stdout) <= 81
    )
    set_counts(host, "rxe0", 1, {"symbol_error": 200})  # link_downed went back (3 -> 0): a reset
    doc = doc_of(tmp_path)
    assert doc["exit_code"] == 0 and any("went back" in c["detail"] for c in doc["data"]["checks"]), failed(
        doc
    )
    set_counts(host, "rxe0", 1, {"symbol_error": 400})
    assert failed(doc_of(tmp_path))[0].startswith("counters rxe0/1: symbol_error +200")
    monkeypatch.setattr(baseline, "boot_id", lambda: "boot-2")
    doc = doc_of(tmp_path)
    assert doc["exit_code"] == 0 and any(
        "since the host booted" in c["detail"] for c in doc["data"]["checks"]
    )


def test_the_baseline_rolls_forward_after_an_hour_and_a_gone_port_fails_until_rebaselined(tmp_path, host):
    t0 = 1_000_000.0
    rows, base = baseline.judge(None, {"rxe0/1": {"link_downed": 0}, "rxe1/1": {}}, "b", t0)
    rows, base = baseline.judge(base, {"rxe0/1": {"link_downed": 1}, "rxe1/1": {}}, "b", t0 + 60)
    assert [r.verdict for r in rows] == ["fail", "pass"] and base.since == t0
    rows, base = baseline.judge(base, {"rxe0/1": {"link_downed": 1}}, "b", t0 + 3700)
    assert [(r.check, r.verdict) for r in rows] == [("counters rxe0/1", "fail"), ("port rxe1/1", "fail")]
    assert base.since == t0 + 3700 and "rxe1/1" in base.ports  # rolled; the gone port kept
    rows, base = baseline.judge(base, {"rxe0/1": {"link_downed": 1}}, "b", t0 + 3760)
    assert [(r.check, r.verdict) for r in rows] == [("counters rxe0/1", "pass"), ("port rxe1/1", "fail")]
    make_port(host, "rxe1")
    run(tmp_path)
    import shutil

    shutil.rmtree(host / "rxe1")
    assert failed(doc_of(tmp_path)) == ["port rxe1/1: at the last check, gone now (a removed device)"]
    assert doc_of(tmp_path, "--rebaseline")["exit_code"] == 0
    assert doc_of(tmp_path)["exit_code"] == 0


def test_a_bad_baseline_file_is_said_and_replaced(tmp_path, host):
    (tmp_path / "state").mkdir()
    for junk in (b"{", b"[]", json.dumps({"type": baseline.TYPE, "boot": "boot-1", "since": 1, "ports": {
            "../../x": {"link_downed": 1}}}).encode(), b"x" * (baseline.MAX_BYTES + 10)):  # fmt: skip
        (tmp_path / "state" / baseline.FILE).write_bytes(junk)
        doc = doc_of(tmp_path)
        assert doc["exit_code"] == 0 and any("not a baseline" in c["detail"] for c in doc["data"]["checks"])
        assert baseline.load(str(tmp_path / "state" / baseline.FILE))[0] is not None  # replaced


def test_an_unwritable_state_dir_is_a_warning_not_a_failure(tmp_path, host):
    (tmp_path / "file").write_text("")
    r = CliRunner().invoke(cli, ["check", "--state-dir", str(tmp_path / "file" / "x"), "--watch-state",
                                 str(tmp_path / "w"), "--json"])  # fmt: skip
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and any(
        c["verdict"] == "warn" and "cannot keep the counters' baseline" in c["detail"]
        for c in doc["data"]["checks"]
    )


def watch_state(tmp_path, nics, *, age_s: float = 0.0, **extra) -> None:
    doc = {"type": "watch", "v": 1, "node": "n1", "time": time.time() - age_s, "period_s": 30.0,
           "nics": nics, "pairs": [], **extra}  # fmt: skip
    (tmp_path / "watch.json").write_text(json.dumps(doc))


def test_the_fabrics_word_fails_a_nic_the_watch_agent_names_and_a_bad_state_is_not_taken(tmp_path, host):
    watch_state(tmp_path, [{"rail": 0, "device": "rxe0", "state": "bad", "cause": "DEAD"}])
    r = run(tmp_path, "--format", "line")
    assert (
        r.exit_code == 1
        and "| ERROR: rdmacli: fabric rail 0 (rxe0) the watch agent names it bad: DEAD" in r.stdout
    )
    watch_state(tmp_path, [{"rail": 0, "device": "rxe0", "state": "ok"}])
    assert doc_of(tmp_path)["exit_code"] == 0
    watch_state(tmp_path, [{"rail": 0, "state": "bad", "cause": "DEAD"}], age_s=3600)
    doc = doc_of(tmp_path)
    assert doc["exit_code"] == 0 and any("older than 600 s" in c["detail"] for c in doc["data"]["checks"])
    for nics in ([{"rail": 99, "state": "bad"}], [{"rail": 0, "state": "evil"}], "x", [{}] * 17):
        watch_state(tmp_path, nics)
        doc = doc_of(tmp_path)
        assert doc["exit_code"] == 0, nics  # not taken: said, and judged by the rest
        assert any(c["check"] == "fabric" and c["verdict"] == "info" for c in doc["data"]["checks"]), nics
    (tmp_path / "watch.json").write_bytes(b"[" * 100000)
    assert doc_of(tmp_path)["exit_code"] == 0
    bad = {"not a watch state": {"type": "summary"}, "its time is not a time": {"time": "soon"}}
    for words, extra in {**bad, "its time is not a time ": {"period_s": float("inf")}}.items():
        watch_state(tmp_path, [{"rail": 0, "state": "bad", "cause": "DEAD"}], **extra)
        details = [c["detail"] for c in doc_of(tmp_path)["data"]["checks"] if c["check"] == "fabric"]
        assert any(words.strip() in d for d in details), (extra, details)


def test_words_from_a_state_file_reach_no_line_raw(tmp_path, host):
    watch_state(tmp_path, [{"rail": 0, "device": "x\x1b]0;owned\x07", "state": "bad", "cause": "DEAD"}])
    for fmt in ("nhc", "npd", "line"):
        r = run(tmp_path, "--format", fmt)
        assert (
            r.exit_code == 1
            and "\x1b" not in r.stdout
            and "\x07" not in r.stdout
            and r.stdout.count("\n") == 1
        )


def test_the_deadline_ends_a_check_that_hangs_with_could_not_judge(tmp_path, host, monkeypatch):
    monkeypatch.setattr(check_cli, "judge", lambda *a, **kw: time.sleep(30))  # a read that does not end
    t0 = time.monotonic()
    r = run(tmp_path, "--deadline", "1", "--format", "npd")
    assert time.monotonic() - t0 < 10
    assert (
        r.exit_code == 6 and r.stdout.startswith("rdmacli: could not judge") and len(r.stdout.strip()) <= 80
    )
    assert run(tmp_path, "--deadline", "51").exit_code == 2


def test_a_check_waiting_for_another_checks_baseline_says_so_not_a_hung_driver(tmp_path, host):
    """In the lab an admin's --rebaseline beside slurmd's own check ran past its deadline and
    blamed "a driver or sysfs read": the words now say what the check was doing when the
    deadline came, and how long each part took."""
    import fcntl
    import os

    state = tmp_path / "state"
    state.mkdir()
    fd = os.open(state / ".check.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another check's, from load to save
    try:
        r = run(tmp_path, "--deadline", "2", "--rebaseline")
    finally:
        os.close(fd)
    assert r.exit_code == 6, r.output
    assert "2 s: waiting for the counters' baseline (another rdmacli check holds it) (starting" in r.output
    assert "finding the devices" in r.output and "slurmd's, NHC's" in r.output and "dmesg" not in r.output
    assert run(tmp_path, "--deadline", "10", "--rebaseline").exit_code == 0  # let go: it goes on


def test_no_device_at_all_is_unhealthy(tmp_path, host):
    import shutil

    shutil.rmtree(host / "rxe0")
    doc = doc_of(tmp_path, "--rebaseline")
    assert doc["exit_code"] == 1 and failed(doc)[0].startswith("devices: no RDMA device")


def test_the_shipped_nhc_check_dies_with_the_reason_and_only_logs_what_it_could_not_judge(
    tmp_path, monkeypatch
):
    import subprocess

    monkeypatch.setenv("HOME", str(tmp_path))  # the check's own state dir (not root: ~/.local/state)
    nhc = check_cli.config_text("nhc")
    assert "check_rdmacli" in nhc and "RDMACLI" not in nhc
    (tmp_path / "rdmacli.nhc").write_text(nhc)
    stubs = 'die() { echo "DIE $1 $2"; }; log() { echo "LOG $*"; }; '
    script = f"{stubs} source {tmp_path}/rdmacli.nhc; check_rdmacli --state-dir {tmp_path}/st"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120).stdout
    # this host has no RDMA device (the unit suite's machine): unhealthy, with its reason
    if not devices.list_devices(use_pyverbs=False):
        assert out.startswith("DIE 1 rdmacli: devices no RDMA device"), out
    out = subprocess.run(
        ["bash", "-c", script + " --deadline 99"], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.startswith("LOG check_rdmacli: could not judge (exit 2)"), out.stdout  # not a drain


def test_the_shipped_npd_config_keeps_node_problem_detectors_rules():
    doc = json.loads(check_cli.config_text("npd"))
    cfg = doc["pluginConfig"]
    assert doc["plugin"] == "custom" and cfg["max_output_length"] == 80

    def seconds(text: str) -> float:
        assert text.endswith("s") and float(text[:-1]) > 0, text
        return float(text[:-1])

    conditions = {c["type"] for c in doc["conditions"]}
    assert all(c["reason"] and c["message"] for c in doc["conditions"])
    assert {r["type"] for r in doc["rules"]} == {"temporary", "permanent"}
    for rule in doc["rules"]:
        assert rule["type"] == "temporary" or rule["condition"] in conditions
        args = rule["args"]
        deadline = float(args[args.index("--deadline") + 1])
        assert args[args.index("--format") + 1] == "npd" and "check" in args
        # rdmacli ends (and says Unknown) before NPD kills it
        assert (
            deadline < seconds(rule["timeout"]) <= seconds(cfg["timeout"]) < seconds(cfg["invoke_interval"])
        )
        assert rule["path"].startswith("/")


def test_a_check_of_some_devices_neither_judges_nor_forgets_the_others(tmp_path, host):
    make_port(host, "rxe1")
    assert doc_of(tmp_path)["exit_code"] == 0  # the baseline knows both
    doc = doc_of(tmp_path, "-d", "rxe1")
    assert doc["exit_code"] == 0 and not any("rxe0" in c["check"] for c in doc["data"]["checks"]), failed(doc)
    set_counts(host, "rxe0", 1, {"link_downed": 1})
    assert failed(doc_of(tmp_path))[0].startswith("counters rxe0/1: link_downed +1")  # still its baseline
