"""Benchmark figures as data: one JSON file a run under benchmarks/results/, with the machine and
the versions it ran on, so that docs/benchmarks.md is generated from them (scripts/gendocs.py)
and no figure lives in prose. History is the files' git log, not a diary."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _cmd(*args: str) -> str | None:
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=HERE)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def machine() -> dict:
    """What ran it: the CPU, its count, the kernel, and whether it was emulated (the lab's TCG)."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        # the lab's CPU names itself (systemd-detect-virt inside it saw the host's container)
        "virtualization": "qemu" if "QEMU" in (model or "") else _cmd("systemd-detect-virt"),
    }


def versions() -> dict:
    from rdmacli import __version__
    from rdmacli.native import installed
    from rdmacli.rdma.versions import loaded_libraries

    return {
        "rdmacli": __version__,
        "commit": _cmd("git", "rev-parse", "--short=12", "HEAD"),
        "data_path": installed()[0],
        **{lib: found.release for lib, found in loaded_libraries().items()},
        "perftest": _cmd("dpkg-query", "-W", "-f=${Version}", "perftest"),
        "rdmacm-utils": _cmd("dpkg-query", "-W", "-f=${Version}", "rdmacm-utils"),
    }


def write(kind: str, figures: dict, args: list[str] | None = None, ran_on: dict | None = None) -> Path:
    """benchmarks/results/KIND-YYYYMMDDTHHMMSSZ.json; its path is printed for the run's log.
    `ran_on`: versions() as the run began (a run is long; the checkout may move under it)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    doc = {
        "schema": "rdmacli-bench/1",
        "kind": kind,
        "when": now.isoformat(timespec="seconds"),
        "args": args if args is not None else sys.argv[1:],
        "machine": machine(),
        "versions": ran_on or versions(),
        "figures": figures,
    }
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{kind}-{now:%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    print(f"results written to {path.relative_to(HERE.parent)}", flush=True)
    return path
