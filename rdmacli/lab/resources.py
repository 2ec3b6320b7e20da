"""What `rdma resource show` says: listeners and the resources a process holds.

Shared by the lab tests and the benchmarks, which wait for a C tool's listener this way (a C
tool prints no readiness line that can be trusted in a pipe) and check for leaks.
"""

from __future__ import annotations

import json
import subprocess
import time


def show(kind: str) -> list[dict]:
    r = subprocess.run(["rdma", "-j", "resource", "show", kind], capture_output=True, text=True)
    try:
        return json.loads(r.stdout or "[]")
    except ValueError:
        return []


def listening(port: int) -> bool:
    return any(
        i.get("state") == "LISTEN" and i.get("src-addr", "").endswith(f":{port}") for i in show("cm_id")
    )


def wait_for_listener(port: int, timeout: float = 30.0, *, present: bool = True) -> bool:
    """Wait until a listener on `port` exists (or, with present=False, is gone); False on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if listening(port) == present:
            return True
        time.sleep(0.1)
    return False


def resources_of(pid: int) -> dict[str, list[dict]]:
    """`rdma resource show` entries (cm_id, qp, mr, cq, pd) owned by a process."""
    return {
        kind: [e for e in show(kind) if e.get("pid") == pid] for kind in ("cm_id", "qp", "mr", "cq", "pd")
    }
