"""A watch agent through a driver reload: its RDMA device deleted under it (`rdma link delete`,
what unloading a driver does to each device) and added again. rxe, like every driver without
`disassociate_ucontext`, finishes the delete only once every process has closed the device: an
agent that kept its NIC open across windows held the delete forever. Here the delete must end,
the agent say in its state what is missing, go on probing, and take the device back when it
returns. Two lab nodes the watch test does not use (n15, n16), rail 0, their own port."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from meshlab import RAILS_MAP

from rdmacli.lab import node

PAIR = ("n15", "n16")
PORT = "7596"


def state(d, name: str) -> dict:
    try:
        return json.loads((d / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def until(cond, seconds: float, what: str, procs) -> None:
    """Poll `cond` (state files), failing with the agents' stderr if one died or time ran out."""
    end = time.monotonic() + seconds
    while not cond():
        dead = {n: p.stderr.read()[-1500:] for n, p in procs.items() if p.poll() is not None}
        assert not dead, dead
        assert time.monotonic() < end, what
        time.sleep(1)


def problem(d, name: str):
    nics = state(d, name).get("nics") or [{}]
    return nics[0].get("problem")


def test_a_device_deleted_under_the_agent_is_let_go_said_and_taken_back(tmp_path):
    if not RAILS_MAP:
        pytest.fail("no lab nodes: run with `make lab-mesh-test`")
    mapfile = tmp_path / "pair.map"
    mapfile.write_text("".join(f"{n} {node(int(n[1:]))['ipv4']}\n" for n in PAIR))
    rxe, netdev = node(16)["rxe"], node(16)["netdev"]
    procs = {
        n: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rdmacli",
                "watch",
                "run",
                "--map",
                str(mapfile),
                "--node",
                n,
                "--port",
                PORT,
                "--window",
                "5",
                "--state-file",
                str(tmp_path / f"{n}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for n in PAIR
    }
    added = True
    try:
        until(lambda: all(state(tmp_path, n).get("windows", 0) >= 2 for n in PAIR), 180, "two windows", procs)
        assert problem(tmp_path, "n16") is None
        seen = state(tmp_path, "n16")["windows"]
        delete = subprocess.Popen(["rdma", "link", "delete", rxe], stderr=subprocess.PIPE, text=True)
        added = False
        try:
            rc = delete.wait(timeout=60)  # the agent lets the device go within its window
        except subprocess.TimeoutExpired:
            pytest.fail(f"`rdma link delete {rxe}` still waits after 60 s: the agent holds the device")
        assert rc == 0, delete.stderr.read()
        until(lambda: problem(tmp_path, "n16") is not None, 60, "n16 says its NIC is missing", procs)
        words = problem(tmp_path, "n16")
        assert words and "Traceback" not in words, words
        gone_at = state(tmp_path, "n16")["windows"]
        assert gone_at > seen
        subprocess.run(["rdma", "link", "add", rxe, "type", "rxe", "netdev", netdev], check=True, timeout=60)
        added = True
        until(lambda: problem(tmp_path, "n16") is None, 90, "n16 takes its device back", procs)
        back = state(tmp_path, "n16")["windows"]
        until(lambda: state(tmp_path, "n16")["windows"] >= back + 2, 60, "two windows more", procs)
        assert problem(tmp_path, "n16") is None
    finally:
        if not added:
            subprocess.run(["rdma", "link", "add", rxe, "type", "rxe", "netdev", netdev], timeout=60)
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        codes = {n: p.wait(timeout=60) for n, p in procs.items()}
    assert codes == dict.fromkeys(PAIR, 0), [p.stderr.read()[-800:] for p in procs.values()]
    left = subprocess.run(["rdma", "resource", "show", "cm_id"], capture_output=True, text=True).stdout
    assert f":{PORT}" not in left, left
