"""Inside the systemd lab (a minimal Debian booted with systemd as init, the package installed):
the watch agent's unit, run by systemd as a fleet runs it, observed step by step.

Run by the image's own unit (rdmacli-lab.service, the default target's one job) as root, with
Debian's python3 and the rdmacli the package installed. It decides nothing: every step's
outputs go to /lab/result.json, and tests/systemd/test_unit.py (on the host, after the VM
powered off) asserts on them. Each wait has a deadline and is a readiness record (a state
file's window count, systemd's own properties), never a fixed sleep.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import urllib.request

OUT = "/lab/result.json"
UNIT = "rdmacli-watch"
STATE = "/run/rdmacli/watch-7590.json"  # the agent's default state file (--port 7590)
DROPIN = f"/etc/systemd/system/{UNIT}.service.d/lab.conf"
WATCHDOG_S = 30  # the lab's, in a drop-in: the shipped 120 s is a fleet's
ARGS = "--window 10 --raise-after 2 --raise-window 3 --clear-after 2"
result: dict = {"steps": {}}


def sh(*cmd: str, timeout: float = 60) -> dict:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return {"cmd": " ".join(cmd), "rc": r.returncode, "out": r.stdout[-4000:], "err": r.stderr[-2000:]}


def prop(*names: str) -> dict[str, str]:
    out = sh("systemctl", "show", UNIT, "-p", ",".join(names))["out"]
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def until(what: str, ok, within: float, every: float = 1.0):
    """Wait for ok() to return something true, at most `within` s; its value, or None."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        v = ok()
        if v:
            return v
        time.sleep(every)
    result["steps"].setdefault("timeouts", []).append(what)
    return None


def state(path: str = STATE) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def metrics() -> str:
    try:
        return urllib.request.urlopen("http://10.77.1.1:9590/metrics", timeout=10).read().decode()
    except OSError as exc:
        return f"ERROR {exc}"


def step(name: str, value) -> None:
    result["steps"][name] = value
    with open(OUT, "w") as f:  # after every step: a VM that dies midway still says how far it got
        json.dump(result, f, indent=1)


def partner(k: int) -> subprocess.Popen:
    return subprocess.Popen(
        ["rdmacli", "watch", "run", "--map", "/etc/rdmacli/watch.map", "--node", f"n{k:02d}", "--key-file",
         "/etc/rdmacli/watch.key", "--state-file", f"/lab/n{k:02d}.json", *ARGS.split()],
        stdout=subprocess.DEVNULL, stderr=open(f"/lab/n{k:02d}.log", "w"),
    )  # fmt: skip


def venv_at(prefix: str) -> str:
    """A venv at `prefix` holding its own rdmacli (what `pip install` there leaves: the package,
    its native data path, a `rdmacli` script beside its python), its dependencies Debian's
    through --system-site-packages (no network in the VM); the script's path."""
    step(f"venv {prefix}", sh("python3", "-m", "venv", "--without-pip", "--system-site-packages", prefix))
    import rdmacli

    site = glob.glob(f"{prefix}/lib/python3*/site-packages")[0]
    shutil.copytree(os.path.dirname(rdmacli.__file__), f"{site}/rdmacli")
    script = f"{prefix}/bin/rdmacli"
    with open(script, "w") as f:
        f.write(f"#!{prefix}/bin/python3\nimport sys\nfrom rdmacli.__main__ import main\nsys.exit(main())\n")
    os.chmod(script, 0o755)
    return script


def unit_from_venvs() -> None:
    """`watch unit` run from a venv as an admin makes one (issue 73): in /root (mode 0700) it is
    refused; in a home directory others may read, the unit it prints (ProtectHome=read-only) is
    installed over the package's, started by systemd, and its agent runs from the venv."""
    step("unit_from_root_venv", sh(venv_at("/root/venv"), "watch", "unit"))
    os.makedirs("/home/op", exist_ok=True)
    os.chmod("/home/op", 0o755)  # Debian 12's adduser makes 0700 homes: that one is refused too
    program = venv_at("/home/op/venv")
    made = subprocess.run([program, "watch", "unit"], capture_output=True, text=True, timeout=60)
    step("unit_from_home_venv", {"rc": made.returncode, "out": made.stdout, "err": made.stderr[-2000:]})
    if made.returncode:
        return
    mine = f"/etc/systemd/system/{UNIT}.service"  # the admin's own, over the package's (the drop-in stays)
    with open(mine, "w") as f:
        f.write(made.stdout)
    sh("systemctl", "daemon-reload")
    t = time.time()
    step("venv_start", sh("systemctl", "start", UNIT, timeout=120))
    started = prop("ActiveState", "SubState", "MainPID", "FragmentPath", "User", "StatusText")
    step("venv_started", started)
    pid = started["MainPID"]
    with open(f"/proc/{pid}/cmdline") as f:
        step("venv_cmdline", f.read().replace("\0", " "))

    def window_of_its_own():
        s = state()
        return s and os.stat(STATE).st_mtime > t and s.get("windows", 0) >= 1 and s

    step("venv_state", until("a window of the venv's agent", window_of_its_own, 120))
    with open(f"/proc/{pid}/maps") as f:  # after a window: the probe's native loop is loaded by then
        step("venv_maps", sorted({line.split()[-1] for line in f if "rdmacli" in line}))
    step("venv_stop", sh("systemctl", "stop", UNIT, timeout=120))
    step("venv_stopped", prop("ActiveState", "Result", "ExecMainStatus"))
    os.remove(mine)
    sh("systemctl", "daemon-reload")


def main() -> None:
    # the package installed here, under systemd, as a fleet's apt does it (its dependencies are
    # in the image already: no network in the VM)
    step("install", sh("apt-get", "install", "-y", "-q", "/lab/rdmacli.deb", timeout=600))
    step("installed_unit", prop("LoadState", "UnitFileState", "FragmentPath", "ActiveState"))
    from rdmacli.lab.guest import setup

    t0 = time.monotonic()
    setup(nodes=4, rails=1)  # n01..n04, a veth and an rxe each, on one bridge (the lab's nodes)
    step("setup_s", round(time.monotonic() - t0, 1))
    step("version", sh("rdmacli", "--version"))
    os.makedirs("/etc/rdmacli", exist_ok=True)
    with open("/etc/rdmacli/watch.map", "w") as f:
        f.writelines(f"n{k:02d} 10.77.1.{k}\n" for k in range(1, 5))
    step("key", sh("rdmacli", "watch", "key", "/etc/rdmacli/watch.key"))
    os.makedirs(os.path.dirname(DROPIN), exist_ok=True)
    with open(DROPIN, "w") as f:  # what an admin's `systemctl edit` writes (the unit's own comments)
        f.write("[Service]\nLoadCredential=watch.key:/etc/rdmacli/watch.key\n"
                f'Environment="RDMACLI_WATCH_ARGS=--node n01 --key-file '
                f'/run/credentials/{UNIT}.service/watch.key --metrics 10.77.1.1:9590 {ARGS}"\n'
                f"WatchdogSec={WATCHDOG_S}\n")  # fmt: skip
    step("unit_file", sh("systemctl", "cat", UNIT))
    step("security", sh("systemd-analyze", "security", "--no-pager", UNIT))
    partners = {k: partner(k) for k in (2, 3, 4)}
    t = time.monotonic()
    step("enable", sh("systemctl", "enable", "--now", UNIT, timeout=120))
    step("enable_s", round(time.monotonic() - t, 1))
    step("started", prop("ActiveState", "SubState", "Type", "StatusText", "MainPID", "User", "NRestarts"))
    pid = prop("MainPID")["MainPID"]
    step("ps", sh("ps", "-o", "user=,uid=,comm=", "-p", pid))
    step("status_ready", sh("systemctl", "status", "--no-pager", "-l", UNIT))
    step("devices", sh("ls", "-l", "/dev/infiniband"))
    judged = until("two windows judged", lambda: (s := state()) and s.get("windows", 0) >= 2 and s, 240)
    step("state_healthy", judged)
    step("metrics_healthy", metrics())
    step("cut", sh("ip", "link", "set", "n03", "down"))  # n03's NIC cut off from the fabric
    t = time.monotonic()

    def named_n03():
        s = state()
        pairs = (s or {}).get("pairs") or []
        return [p for p in pairs if p.get("peer") == "n03" and p.get("state") in ("bad", "flapping")] or None

    step("named", until("n03 named", named_n03, 120))
    step("named_s", round(time.monotonic() - t, 1))
    step("metrics_named", metrics())
    step("show", sh("rdmacli", "watch", "show", "--state-file", STATE))
    sh("ip", "link", "set", "n03", "up")
    with open("/etc/rdmacli/watch.map", "w") as f:  # n04 leaves the fabric's map
        f.writelines(f"n{k:02d} 10.77.1.{k}\n" for k in range(1, 4))
    partners.pop(4).send_signal(signal.SIGTERM)
    windows = (state() or {}).get("windows", 0)
    step("reload", sh("systemctl", "reload", UNIT))

    def without_n04():
        s = state()
        return s and s.get("windows", 0) >= windows + 2 and not any(
            p.get("peer") == "n04" for p in s.get("pairs") or []) and s  # fmt: skip

    step("state_reloaded", until("a window after the reload", without_n04, 120))
    step("after_reload", prop("ActiveState", "MainPID", "NRestarts", "StatusText"))
    old = prop("MainPID")["MainPID"]
    os.kill(int(old), signal.SIGSTOP)  # stuck: no progress, no watchdog ping
    t = time.monotonic()

    def restarted():
        p = prop("MainPID", "NRestarts", "ActiveState")
        return p["NRestarts"] != "0" and p["MainPID"] not in ("0", old) and p["ActiveState"] == "active" and p

    step("watchdog", until("restarted by its watchdog", restarted, WATCHDOG_S + 150))
    step("watchdog_s", round(time.monotonic() - t, 1))
    before = (state() or {}).get("windows", 0)
    until("a window after the restart", lambda: (state() or {}).get("windows", 0) > before, 60)
    t = time.monotonic()
    step("stop", sh("systemctl", "stop", UNIT, timeout=120))
    step("stop_s", round(time.monotonic() - t, 1))
    step("stopped", prop("ActiveState", "Result", "ExecMainStatus", "ExecMainCode", "TimeoutStopUSec"))
    step("state_after_stop", {"doc": state()})  # its last window's, kept (RuntimeDirectoryPreserve)
    step("journal", sh("journalctl", "-u", UNIT, "--no-pager", "-o", "cat"))
    unit_from_venvs()
    for p in partners.values():
        p.send_signal(signal.SIGTERM)
    step("partners_exit", {k: p.wait(timeout=60) for k, p in partners.items()})
    step("cm_ids_left", sh("rdma", "resource", "show", "cm_id"))


if __name__ == "__main__":
    try:
        main()
        result["done"] = True
    except BaseException:  # noqa: BLE001 - said in the result, for the host's assertion message
        result["error"] = traceback.format_exc()[-3000:]
    step("end", time.time())
    sys.exit(0)
