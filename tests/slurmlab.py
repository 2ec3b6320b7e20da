"""A real single-node Slurm (Debian's munged, slurmctld and slurmd) inside a lab boot, for the
mesh suite's srun launcher and the rdma suite's `check --slurm` as HealthCheckProgram. No
systemd in the VM: the daemons are started here and stopped by their pid files."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

import pytest

SLURM_CONF = """ClusterName=lab
SlurmctldHost={host}
SlurmctldPort={port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.sock
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SchedulerType=sched/builtin
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{extra}NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=lab Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def node_name() -> str:
    """The one node's name in slurm.conf: this VM's short hostname."""
    return socket.gethostname().split(".")[0]


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def running(d, extra: str = "", port: int = 6817):
    """Slurm up in directory d (a pathlib.Path), slurm.conf with `extra` lines (a
    HealthCheckProgram); yields the environment its commands need (SLURM_CONF). Ready when the
    node is idle (at slurmd's start a HealthCheckProgram must have passed once). `port` is
    slurmctld's (slurmd's the next): the mesh suite's two lanes each run a Slurm of their own
    in one boot."""
    for tool in ("munged", "slurmctld", "slurmd", "srun", "sinfo", "scontrol"):
        found = shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}")
        assert found, f"{tool} missing (scripts/bootstrap)"
    (d / "state").mkdir()
    (d / "spool").mkdir()
    key = d / "munge.key"
    sh("dd", "if=/dev/urandom", f"of={key}", "bs=1024", "count=1")
    key.chmod(0o600)
    conf = d / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=node_name(), d=d, cpus=os.cpu_count() or 1, extra=extra, port=port,
                                      slurmd_port=port + 1))  # fmt: skip
    # no systemd in the VM: slurmd makes its cgroup v2 scope itself, under a system.slice
    (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n")
    os.makedirs("/sys/fs/cgroup/system.slice", exist_ok=True)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    sh("munged", "-f", f"--key-file={key}", f"--socket={d}/munge.sock", f"--pid-file={d}/munged.pid",
       f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed")  # fmt: skip
    subprocess.run(["slurmctld", "-c", "-f", str(conf)], check=True, env=env)
    subprocess.run(["slurmd", "-c", "-f", str(conf)], check=True, env=env)
    try:
        end = time.monotonic() + 120
        while True:  # ready when this VM's node is idle (nodes of `extra` may never answer)
            r = subprocess.run(["sinfo", "-h", "-n", node_name(), "-o", "%T"], capture_output=True, text=True,
                               env=env)  # fmt: skip
            if r.stdout.strip() == "idle":
                break
            assert time.monotonic() < end, f"slurm not idle after 120 s: {r.stdout} {r.stderr}"
            time.sleep(0.5)
        yield env
    finally:
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            try:
                os.kill(int((d / pidfile).read_text().split()[0]), 15)
            except (OSError, ValueError):
                pass


def show_node(env: dict, name: str | None = None) -> str:
    r = subprocess.run(["scontrol", "show", "node", name or node_name()], capture_output=True, text=True,
                       env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


def lab_nodes(k: int) -> str:
    """slurm.conf lines for the mesh lab's nodes n01..nk, each at its rail-0 address: no slurmd
    answers for them (they stay DOWN, not responding), but Slurm knows their names, and a drain,
    its reason and a resume are Slurm's own, as on a real cluster."""
    return "".join(f"NodeName=n{j:02d} NodeAddr=10.77.1.{j} CPUs=1 State=UNKNOWN\n" for j in range(1, k + 1))


def sinfo(env: dict) -> str:
    """What an admin reads: `sinfo -R` (reason, user, nodes)."""
    r = subprocess.run(["sinfo", "-R", "-o", "%30E %9U %N"], env=env, capture_output=True, text=True)
    return r.stdout + r.stderr


def scontrol(env: dict, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], env=env, check=check, capture_output=True, text=True)


def reason_of(env: dict, name: str) -> str:
    """A node's drain reason, as rdmacli's parser reads `scontrol show node` ("" when none)."""
    from rdmacli.sched.slurm import parse_node

    node = parse_node(name, show_node(env, name))
    return node.reason if node.drained else ""


def last_words(log) -> str:
    """The tails of a health check's log and of slurmd's and slurmctld's beside it (the run's
    directory), for a failure's message: why a check did not run or did not act."""
    if log is None:
        return ""
    logs = [log, log.parent / "slurmd.log", log.parent / "slurmctld.log"]
    return "".join(f"\n--- {p.name}:\n{p.read_text()[-1500:]}" for p in logs if p.exists())


def wait_node(env: dict, ok, what: str, timeout: float, log=None) -> str:
    """`scontrol show node` until ok(its text): the readiness of a drain or a resume."""
    end = time.monotonic() + timeout
    while True:
        text = show_node(env)
        if ok(text):
            return text
        if time.monotonic() > end:
            pytest.fail(f"not {what} after {timeout} s: {text}\nlast words:{last_words(log)}")
        time.sleep(0.5)
