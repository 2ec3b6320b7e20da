"""doctor on a healthy and on broken labs (each breakage undone after its test); selftest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from conftest import validate

from rdmacli.diag.devices import serves_ip
from rdmacli.lab import CLIENT, IWARP_CLIENT, IWARP_SERVER, SERVER
from rdmacli.lab.guest import iwarp_ready


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def wait_lab_ready(timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(serves_ip(side["rxe"], side["ipv4"]) for side in (SERVER, CLIENT)) and all(
            iwarp_ready(side) for side in siw_devices()
        ):
            return
        time.sleep(0.2)
    pytest.fail("the lab did not recover")


def wait_port_state(dev: str, state: str, timeout: float = 30) -> None:
    path = Path(f"/sys/class/infiniband/{dev}/ports/1/state")
    end = time.monotonic() + timeout
    while state not in path.read_text():
        if time.monotonic() > end:
            pytest.fail(f"{dev} port 1 is not {state} after {timeout} s: {path.read_text()}")
        time.sleep(0.1)


def doctor(lab, *args, env_prefix: list[str] | None = None) -> tuple[int, dict]:
    cmd = [*(env_prefix or []), *lab.rdmacli, "doctor", *args, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


def verdicts(doc: dict) -> dict[str, dict]:
    return {c["check"]: c for c in doc["data"]["checks"]}


CHECK_STATE = "/tmp/rdmacli-lab-check"  # the counters' baseline of the lab's `rdmacli check` runs


def check(lab, *args: str) -> tuple[int, dict]:
    """`rdmacli check --json` at its defaults (its 10 s deadline) on the lab's two RoCE ports."""
    cmd = [*lab.rdmacli, "check", "-d", SERVER["rxe"], "-d", CLIENT["rxe"], "--state-dir", CHECK_STATE, *args]
    r = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, validate(json.loads(r.stdout))


def failed_checks(doc: dict) -> list[str]:
    assert "checks" in doc["data"], doc["error"]  # judged (not, say, past its deadline: exit 6)
    return [f"{c['check']}: {c['detail']}" for c in doc["data"]["checks"] if c["verdict"] == "fail"]


def test_check_is_healthy_on_the_lab_and_names_a_rate_below_the_expected(lab):
    rc, doc = check(lab, "--rebaseline")
    assert rc == 0 and doc["data"]["healthy"], failed_checks(doc)
    ports = {c["check"]: c for c in doc["data"]["checks"] if c["check"].startswith("port ")}
    assert set(ports) == {f"port {SERVER['rxe']}/1", f"port {CLIENT['rxe']}/1"}
    assert all(c["verdict"] == "pass" and c["detail"].startswith("ACTIVE, LINK_UP") for c in ports.values())
    rc, doc = check(lab, "--expect", f"{SERVER['rxe']}:1=3200")
    assert rc == 1 and len(failed_checks(doc)) == 1, failed_checks(doc)
    assert failed_checks(doc)[0].startswith(f"port {SERVER['rxe']}/1: ACTIVE, LINK_UP, ")
    assert failed_checks(doc)[0].endswith("expected 3200 Gb/s")
    # one line for node-problem-detector, its exit status what NPD reads (1: NonOK)
    cmd = [*lab.rdmacli, "check", "-d", SERVER["rxe"], "--state-dir", CHECK_STATE, "--format", "npd",
           "--expect", f"{SERVER['rxe']}:1=3200"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stdout.count("\n") == 1 and len(r.stdout.strip()) <= 80, r.stdout
    assert r.stdout.startswith(f"rdmacli: port {SERVER['rxe']}/1 ACTIVE, LINK_UP")


def test_doctor_passes_on_the_healthy_lab(lab):
    rc, doc = doctor(lab, lab.server, "-p", "9")
    checks = verdicts(doc)
    local = [c for c in doc["data"]["checks"] if c["check"] not in ("route", "resolve", "connect 9")]
    assert all(c["verdict"] == "pass" for c in local), local
    assert checks["route"]["verdict"] == checks["resolve"]["verdict"] == "pass"
    assert re.search(r"address [\d.]+ (µs|ms|s), route [\d.]+ (µs|ms|s)", checks["resolve"]["detail"])
    # ... and the peer has nothing listening on port 9: classified, with advice
    assert checks["connect 9"]["verdict"] == "fail"
    assert checks["connect 9"]["detail"].startswith("nothing is listening")
    assert "rdmacli listen" in checks["connect 9"]["hint"]
    assert rc == 1


def test_doctor_all_local_checks_pass(lab):
    rc, doc = doctor(lab)
    assert rc == 0 and doc["result"] == "pass", doc
    names = {c["check"] for c in doc["data"]["checks"]}
    assert {"libraries", "devices", "memlock", "device access", "sysctl", f"gid {lab.server}"} <= names


def siw_devices() -> list[dict]:
    """The lab's Soft-iWARP pair, where this boot has it (`rdmacli lab --iwarp`)."""
    return [IWARP_SERVER, IWARP_CLIENT] if os.environ.get("RDMACLI_LAB_IWARP_SERVER") else []


def test_doctor_without_rdma_devices(lab):
    try:
        sh("rdma", "link", "delete", SERVER["rxe"])
        sh("rdma", "link", "delete", CLIENT["rxe"])
        for side in siw_devices():
            sh("rdma", "link", "delete", side["siw"])
        rc, doc = doctor(lab)
        dev = verdicts(doc)["devices"]
        assert dev["verdict"] == "fail" and "rdma link add" in dev["hint"] and dev["cause"] == "environment"
        # as `rdmacli devices` on the same host: the environment (3), said as data
        assert rc == 3 and doc["error"]["cause"] == "environment", doc["error"]
        r = lab.run("devices", "--json")
        assert r.returncode == rc, r.stdout + r.stderr
    finally:
        for side in (SERVER, CLIENT):
            subprocess.run(
                ["rdma", "link", "add", side["rxe"], "type", "rxe", "netdev", side["netdev"]],
                capture_output=True,
            )
        for side in siw_devices():
            subprocess.run(
                ["rdma", "link", "add", side["siw"], "type", "siw", "netdev", side["netdev"]],
                capture_output=True,
            )
        wait_lab_ready()


def test_doctor_port_whose_netdev_is_down(lab):
    assert check(lab, "--rebaseline")[0] == 0  # its own baseline, whichever cases ran before
    try:
        sh("ip", "link", "set", CLIENT["netdev"], "down")
        wait_port_state(CLIENT["rxe"], "DOWN")
        rc, doc = doctor(lab)
        port = verdicts(doc)[f"port {CLIENT['rxe']}/1"]
        assert rc == 1 and port["verdict"] == "fail"
        assert f"ip link set {CLIENT['netdev']} up" in port["hint"]
        assert verdicts(doc)[f"netdev {CLIENT['netdev']}"]["verdict"] == "fail"
        # and `rdmacli check` names it, within its deadline, as the reason a scheduler drains for
        rc, doc = check(lab)
        said = failed_checks(doc)
        assert rc == 1 and any(f.startswith(f"port {CLIENT['rxe']}/1: DOWN") for f in said), said
        # Soft-RoCE counts the bounce too: the counter rule says the link went down
        assert any(f.startswith(f"counters {CLIENT['rxe']}/1: link_downed +1") for f in said), said
        assert f"ip link set {CLIENT['netdev']} up" in verdicts(doc)[f"port {CLIENT['rxe']}/1"]["hint"]
    finally:
        sh("ip", "link", "set", CLIENT["netdev"], "up")
        wait_lab_ready()


# slurmd's HealthCheckInterval here (real hosts run it every few minutes): 20 s, not 5. Under TCG
# one check takes tens of seconds of the boot's one emulated CPU, so at 5 s slurmd ran them back
# to back and the case's own commands always shared the CPU with one: its --rebaseline ran past
# its 50 s deadline once (exit 6), and beside a busy host slurmd killed checks at its 60 s
HEALTH_S = 10  # slurmd runs the check every 10 s: a run takes 3-5 s under TCG


def test_check_as_slurms_health_check_drains_resumes_and_keeps_an_operators_drain(lab, tmp_path):
    """Debian's slurmd runs `rdmacli check --slurm` as its HealthCheckProgram: a rail taken down
    drains the node with rdmacli's reason within an interval or so; back up, the counters say
    the link went down (Soft-RoCE counts it) until the admin takes the baseline again, and then
    the next check resumes it. An operator's drain stays, with its words, through a fault and
    its repair."""
    import shlex

    import slurmlab

    from rdmacli.sched import slurm

    name, rxe = slurmlab.node_name(), CLIENT["rxe"]
    state, log, prog = tmp_path / "check", tmp_path / "health.log", tmp_path / "health-check"
    state.mkdir()
    # --deadline 50 (the most; slurmd kills its program at 60): on a loaded host one emulated CPU ran
    # the check past its default 10 s and it could not judge (exit 6), so it drained nothing
    check_cmd = [*lab.rdmacli, "check", "-d", rxe, "--state-dir", str(state), "--watch-state",
                 str(state / "none"), "--deadline", "50"]  # fmt: skip
    prog.write_text(  # slurmd gives its program a bare environment: the script says what it needs
        f"#!/bin/sh\nexport SLURM_CONF={tmp_path}/slurm.conf PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"exec {shlex.join(check_cmd)} --slurm --format line >>{log} 2>&1\n"
    )
    prog.chmod(0o755)

    def node(text: str) -> slurm.Node:
        return slurm.parse_node(name, text)

    def runs() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    def scontrol(env, *args: str) -> None:
        subprocess.run(["scontrol", *args], env=env, check=True, capture_output=True, text=True)

    def rebaseline() -> None:
        r = subprocess.run([*check_cmd, "--rebaseline"], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr

    def next_runs(env, k: int) -> list[str]:
        """The health check's next k runs (its log's lines), waited for: readiness, not time."""
        seen, end = len(runs()), time.monotonic() + k * HEALTH_S + 120
        while len(runs()) < seen + k:
            assert time.monotonic() < end, slurmlab.last_words(log)
            time.sleep(0.5)
        return runs()[seen:]

    within = 3 * HEALTH_S + 150  # an interval, a check that may take its --deadline under TCG, and room
    with slurmlab.running(tmp_path, f"HealthCheckProgram={prog}\nHealthCheckInterval={HEALTH_S}\n") as env:
        assert not node(slurmlab.show_node(env)).drained and runs(), runs()  # passed at slurmd's start
        try:
            sh("ip", "link", "set", CLIENT["netdev"], "down")
            wait_port_state(rxe, "DOWN")
            ours = lambda t: node(t).drained_by(slurm.PREFIX)  # noqa: E731
            text = slurmlab.wait_node(env, ours, "drained by rdmacli", within, log)
            assert node(text).drained and node(text).reason.startswith(f"rdmacli: port {rxe}/1 DOWN"), text
            r = subprocess.run(["sinfo", "-R", "-h", "-o", "%E|%U|%N"], capture_output=True, text=True,
                               env=env)  # fmt: skip
            said = r.stdout
            print(f"\ncheck --slurm, {CLIENT['netdev']} down: sinfo -R: {said}{slurmlab.show_node(env)}")
            assert said.startswith(f"rdmacli: port {rxe}/1 DOWN") and f"|root(0)|{name}" in said, said
        finally:
            sh("ip", "link", "set", CLIENT["netdev"], "up")
            wait_lab_ready()
        text = slurmlab.wait_node(env, lambda t: "link_downed" in node(t).reason, "reworded", within, log)
        assert node(text).drained  # up again, but the link went down since the baseline: still drained
        rebaseline()  # the admin, after the repair (beside slurmd's own runs: the baseline is locked)
        slurmlab.wait_node(env, lambda t: not node(t).drained, "resumed", within, log)
        operator = "maintenance: new optics (lab operator)"
        scontrol(env, "update", f"NodeName={name}", "State=DRAIN", f"Reason={operator}")
        try:
            sh("ip", "link", "set", CLIENT["netdev"], "down")
            wait_port_state(rxe, "DOWN")
            assert any("ERROR: rdmacli: port" in line for line in next_runs(env, 2))
            assert node(slurmlab.show_node(env)).reason == operator
        finally:
            sh("ip", "link", "set", CLIENT["netdev"], "up")
            wait_lab_ready()
        rebaseline()
        assert next_runs(env, 2)[-1].endswith("| Healthy")
        text = slurmlab.show_node(env)
        print(f"check --slurm healthy again beside an operator's drain: {text}")
        assert node(text).drained and node(text).reason == operator, text  # healthy: still theirs
        scontrol(env, "update", f"NodeName={name}", "State=RESUME")


def test_doctor_memlock_too_small(lab):
    # root ignores RLIMIT_MEMLOCK through CAP_IPC_LOCK: drop it, as an ordinary user has none
    prefix = [
        "sh",
        "-c",
        'ulimit -l 64 && exec setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock "$@"',
        "sh",
    ]
    rc, doc = doctor(lab, env_prefix=prefix)
    mem = verdicts(doc)["memlock"]
    assert rc == 1 and mem["verdict"] == "fail" and "64 KiB" in mem["detail"]
    assert "ulimit -l unlimited" in mem["hint"]


def test_doctor_peer_without_rdma_behind_it(lab):
    try:
        sh("ip", "link", "add", "dummy7", "type", "dummy")
        sh("ip", "addr", "add", "10.99.0.1/24", "dev", "dummy7")
        sh("ip", "link", "set", "dummy7", "up")
        rc, doc = doctor(lab, "10.99.0.2")
        route = verdicts(doc)["route"]
        assert rc == 1 and route["verdict"] == "fail" and "dummy7" in route["detail"]
        assert "no RDMA device" in route["detail"] and "veth0" in route["hint"]
        assert verdicts(doc)["resolve"]["verdict"] == "fail"
    finally:
        subprocess.run(["ip", "link", "del", "dummy7"], capture_output=True)


def test_selftest_passes_on_the_lab(lab):
    r = lab.run("selftest", "--json", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert [row["protocol"] for row in doc["data"]["rows"]] == ["connect", "ping", "ud", "mcast"]
    assert all(row["verdict"] == "pass" for row in doc["data"]["rows"])
    assert doc["data"]["server_address"] != doc["data"]["client_address"]  # two devices: a real crossing


def test_selftest_reports_the_protocol_that_cannot_complete(lab):
    r = lab.run("selftest", "-S", "2048", "--json", timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    rows = {row["protocol"]: row for row in json.loads(r.stdout)["data"]["rows"]}
    assert rows["connect"]["verdict"] == rows["ping"]["verdict"] == "pass"
    assert rows["ud"]["verdict"] == "fail" and "active MTU 1024" in rows["ud"]["detail"]


def test_selftest_passes_with_the_kernels_default_sysctls(lab):
    """A dual-port host as shipped: local ports cannot reach each other. The self-test takes
    one device to itself, says so, and doctor explains what the cross-port path needs."""
    names = ["all", "default", SERVER["netdev"], CLIENT["netdev"]]
    keys = ("accept_local", "rp_filter", "arp_ignore")
    saved = {
        (n, k): Path(f"/proc/sys/net/ipv4/conf/{n}/{k}").read_text().strip() for n in names for k in keys
    }
    try:
        for n in names:
            sh("sysctl", "-qw", f"net.ipv4.conf.{n}.accept_local=0", f"net.ipv4.conf.{n}.arp_ignore=0")
        sh("sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2")  # systemd's default: loose
        sh("ip", "neigh", "flush", "all")  # a fresh host has no neighbour cached
        r = lab.run("selftest", "--json", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        doc = json.loads(r.stdout)
        assert doc["data"]["path"].startswith("one device to itself"), doc["data"]
        assert doc["data"]["server_address"] == doc["data"]["client_address"]
        assert all(row["verdict"] == "pass" for row in doc["data"]["rows"]), doc["data"]["rows"]
        rc, ddoc = doctor(lab)
        local = verdicts(ddoc)["local ports"]
        assert local["verdict"] == "info" and "accept_local=1" in local["hint"], local
    finally:
        for (n, k), v in saved.items():
            subprocess.run(["sysctl", "-qw", f"net.ipv4.conf.{n}.{k}={v}"], capture_output=True)
