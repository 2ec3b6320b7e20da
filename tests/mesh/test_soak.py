"""The watch agents' soak (`make lab-soak`; not in `make test`): eight agents on the lab's eight
nodes x two rails, with the fabric's key, for SOAK_S seconds (default 1800), and in the middle
what a fleet does to them: one agent restarted (SIGTERM, started again), every agent reloaded
(SIGHUP, the same map), one node's rail cut off for a while (netem loss 100 %) and given back.

What is printed and held: each agent's resident memory, open fds, threads, and its QPs, cm_ids,
MRs and PDs (`rdma resource`, by pid) once it has judged two windows and again at the end: flat
(the same counts, memory within SOAK_RSS_MB); nothing named while the fabric is healthy (before
the cut, and from CLEAR_S after it is given back); the cut named. Address handles are not in
`rdma resource`'s accounting: the native loop holds one a partner (test_mesh_probe)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from meshlab import RAILS_MAP, netem, no_netem

from rdmacli.lab import node
from rdmacli.watch.hysteresis import ALERTED  # named: a suspect (one bad window) is shown, not named

pytestmark = pytest.mark.soak

EIGHT = [f"n{k:02d}" for k in range(1, 9)]
SOAK_S = float(os.environ.get("SOAK_S", "1800"))
RSS_MB = float(os.environ.get("SOAK_RSS_MB", "8"))
WINDOW_S = 10
PORT = "7598"
CLEAR_S = 180.0  # after the cut is given back, until nothing may be named
CUT_S = 60.0
RESOURCES = ("qp", "cm_id", "mr", "pd")


def state(d, name: str) -> dict:
    try:
        return json.loads((d / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def start(d, mapfile, key, name: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rdmacli", "watch", "run", "--map", str(mapfile), "--node", name, "--port",
           PORT, "--window", str(WINDOW_S), "--key-file", str(key), "--state-file",
           str(d / f"{name}.json")]  # fmt: skip
    with open(d / f"{name}.err", "a") as err:  # a file: half an hour of words never fills a pipe
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)


def open_fds(pid: int) -> list[str]:
    """What an agent's fds are open on, by kind (a socket's or pipe's inode left out)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(re.sub(r"\[\d+\]$", "", os.readlink(f"/proc/{pid}/fd/{fd}")))
        except OSError:
            pass  # closed as it was read
    return sorted(out)


def figures(pid: int) -> dict:
    """An agent's footprint: memory, fds, threads, and its RDMA objects by kind. Its fds are
    the fewest of three looks a second apart: an agent writing its state file or reading its
    port's counters holds one more for a moment, and a leaked fd is there every time."""
    looks = []
    for k in range(3):
        looks.append(open_fds(pid))
        if k < 2:
            time.sleep(0.5)
    out: dict = {"fd_kinds": min(looks, key=len)}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == "VmRSS":
                out["rss_mb"] = round(int(value.split()[0]) / 1024, 1)
            elif key == "Threads":
                out["threads"] = int(value)
    out["fds"] = len(out["fd_kinds"])
    for kind in RESOURCES:
        cmd = ["rdma", "-j", "resource", "show", kind]
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        out[kind] = sum(1 for r in json.loads(got.stdout or "[]") if r.get("pid") == pid)
    return out


def ready(d, names, since: dict | None = None, windows: int = 2) -> bool:
    return all(state(d, n).get("windows", 0) >= (since or {}).get(n, 0) + windows for n in names)


def named(d) -> dict[str, list]:
    out = {}
    for n in EIGHT:
        doc = state(d, n)
        bad = [x for x in doc.get("pairs", []) + doc.get("nics", []) if x.get("state") in ALERTED]
        if bad:
            out[n] = bad
    return out


def test_eight_agents_for_half_an_hour_through_a_restart_a_reload_and_a_fault(tmp_path):
    if not RAILS_MAP:
        pytest.fail("no two-rail lab: run with `make lab-soak`")
    d = tmp_path
    mapfile = d / "watch.map"
    with open(RAILS_MAP) as f:
        mapfile.write_text("".join(line for line in f if line.split()[0] in EIGHT))
    key = d / "fabric.key"
    made = subprocess.run([sys.executable, "-m", "rdmacli", "watch", "key", str(key)], timeout=120)
    assert made.returncode == 0
    procs = {n: start(d, mapfile, key, n) for n in EIGHT}
    cut = node(5, 1)["netdev"]
    began: dict[str, dict] = {}
    events: list[str] = []
    try:
        end = time.monotonic() + 300
        while not ready(d, EIGHT):
            assert time.monotonic() < end and all(p.poll() is None for p in procs.values())
            time.sleep(1)
        began = {n: figures(p.pid) for n, p in procs.items()}
        t0 = time.monotonic()
        plan = [(SOAK_S / 4, "restart"), (SOAK_S / 2, "reload"), (SOAK_S * 2 / 3, "cut"),
                (SOAK_S * 2 / 3 + CUT_S, "uncut")]  # fmt: skip
        cut_at = uncut_at = None
        was_named = False
        while time.monotonic() - t0 < SOAK_S:
            now = time.monotonic() - t0
            while plan and now >= plan[0][0]:
                _, what = plan.pop(0)
                events.append(f"{now:.0f} s: {what}")
                if what == "restart":
                    procs["n03"].send_signal(signal.SIGTERM)
                    assert procs["n03"].wait(timeout=60) == 0
                    # the old agent's state file said 45 windows: ready() took it for the new one's
                    # and its footprint was read as it started (0 MB, 3 fds), failing the soak
                    (d / "n03.json").unlink(missing_ok=True)
                    procs["n03"] = start(d, mapfile, key, "n03")
                    seen = {"n03": 0}
                    end = time.monotonic() + 300
                    while not ready(d, ["n03"], seen):
                        assert time.monotonic() < end
                        time.sleep(1)
                    began["n03"] = figures(procs["n03"].pid)
                elif what == "reload":
                    for p in procs.values():
                        p.send_signal(signal.SIGHUP)
                elif what == "cut":
                    netem(cut, "loss 100%")
                    cut_at = now
                else:
                    no_netem(cut)
                    uncut_at = now
            dead = {n: (d / f"{n}.err").read_text()[-800:] for n, p in procs.items() if p.poll() is not None}
            assert not dead, dead
            bad = named(d)
            if cut_at is None or (uncut_at is not None and now > uncut_at + CLEAR_S):
                assert not bad, (events, bad)  # healthy: nothing named
            elif bad:
                was_named = True
            time.sleep(2)
        assert was_named, "the cut rail was never named"
        ended = {n: figures(p.pid) for n, p in procs.items()}
    finally:
        no_netem(cut)
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        codes = {n: p.wait(timeout=60) for n, p in procs.items()}
    print(f"\nsoak: {SOAK_S:g} s, 8 agents x 2 rails, windows of {WINDOW_S} s; {'; '.join(events)}")
    print(f"{'node':6} {'rss MB':>15} {'fds':>9} {'threads':>9} " + " ".join(f"{k:>9}" for k in RESOURCES))
    for n in EIGHT:
        a, b = began[n], ended[n]
        cols = [f"{a[k]:>4} -> {b[k]:<4}" for k in ("fds", "threads", *RESOURCES)]
        print(f"{n:6} {a['rss_mb']:>6} -> {b['rss_mb']:<6} " + " ".join(cols))
    assert codes == dict.fromkeys(EIGHT, 0), codes
    for n in EIGHT:
        a, b = began[n], ended[n]
        assert b["rss_mb"] - a["rss_mb"] <= RSS_MB, (n, a, b)
        more = Counter(b["fd_kinds"]) - Counter(a["fd_kinds"])
        assert all(a[k] == b[k] for k in ("fds", *RESOURCES)), (n, dict(more), a, b)
        assert abs(a["threads"] - b["threads"]) <= 2, (n, a, b)  # a phase's rail threads, if sampled in one
