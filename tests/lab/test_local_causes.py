"""Failures whose cause is on this host are said as such: a netdev taken down mid-ping, the RDMA
device deleted mid-run, a buffer above the locked-memory limit. Each breakage is undone."""

from __future__ import annotations

import json
import subprocess

from conftest import summary
from test_doctor_selftest import check, failed_checks, sh, wait_lab_ready

from rdmacli.lab import CLIENT


def recreate_client_device() -> None:
    """rxe1 anew. Found here: on Linux 6.1, a Soft-RoCE device whose netdev went down under an
    active connection makes no new connection once the netdev is up again (rping -c times out
    too, 20 s later as well) until the device is recreated; a down/up with no connection open
    is harmless (doctor's test)."""
    subprocess.run(["rdma", "link", "delete", CLIENT["rxe"]], capture_output=True, timeout=60)
    sh("rdma", "link", "add", CLIENT["rxe"], "type", "rxe", "netdev", CLIENT["netdev"])
    wait_lab_ready()


def pinging(lab, servers):
    """A ping from the client device, well under way (ten pings done)."""
    servers([*lab.rdmacli, "listen", "--ping", "--persistent", "-b", lab.server, "--json-lines"], ready=True)
    client = servers(
        [*lab.rdmacli, "ping", lab.server, "-I", lab.client, "--idle-timeout", "3", "--json-lines"],
        ready=False,
    )
    client.wait_for('"ping":10,')
    return client


def test_a_netdev_taken_down_mid_ping_is_named_not_blamed_on_the_peer(lab, servers):
    client = pinging(lab, servers)
    try:
        sh("ip", "link", "set", CLIENT["netdev"], "down")
        rc, out, err = client.finish(timeout=120)
    finally:
        sh("ip", "link", "set", CLIENT["netdev"], "up")
        recreate_client_device()
    doc = summary(out)
    assert rc == 3, out + err
    assert f"{CLIENT['rxe']} port 1 went DOWN: netdev {CLIENT['netdev']} is down" in doc["error"]["message"]
    assert f"ip link set {CLIENT['netdev']} up" in doc["error"]["hint"]
    assert doc["connections"][0]["pings_completed"] >= 11  # what was done before is still reported


def test_a_device_deleted_mid_run_is_named(lab, servers):
    assert check(lab, "--rebaseline")[0] == 0  # `rdmacli check` has seen both devices
    client = pinging(lab, servers)
    try:
        # returns once every user of the device let go: rdmacli must tear down on DEVICE_REMOVAL
        sh("timeout", "60", "rdma", "link", "delete", CLIENT["rxe"])
        rc, out, err = client.finish(timeout=120)
        # `rdmacli check` names the device gone since its last check (a scheduler drains for it)
        check_rc, check_doc = check(lab)
    finally:
        recreate_client_device()
    assert check_rc == 1, failed_checks(check_doc)
    assert f"port {CLIENT['rxe']}/1: at the last check, gone now (a removed device)" in failed_checks(
        check_doc
    )
    doc = summary(out)
    assert rc == 3, out + err
    assert f"the RDMA device {CLIENT['rxe']} was removed" in doc["error"]["message"]
    assert "rdma link add" in doc["error"]["hint"] and "Traceback" not in err


def test_a_buffer_above_the_locked_memory_limit_names_both(lab):
    # root ignores RLIMIT_MEMLOCK through CAP_IPC_LOCK: drop it, as an ordinary user has none
    limited = [
        "sh",
        "-c",
        'ulimit -l 64 && exec setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock "$@"',
        "sh",
    ]
    size = 8 * 2**20
    r = subprocess.run(
        [
            *limited,
            *lab.rdmacli,
            "connect",
            lab.server,
            "-b",
            lab.client,
            "-C",
            "1",
            "-S",
            str(size),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 3, r.stdout + r.stderr
    err = json.loads(r.stdout)["error"]
    assert f"registering {size} bytes (8.0 MiB)" in err["message"] and "at 64 KiB" in err["message"]
    assert "ulimit -l unlimited" in err["hint"]
