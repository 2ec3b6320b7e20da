"""A stand-in mesh agent for the coordinator's re-tests (no RDMA): `python flaky_agent.py
mesh-agent ...`. Ranks 0-1 and 2-3 fail their pair in the schedule; in the re-test rounds the
coordinator sends, 0-1 passes (a transient fault) and 2-3 fails again (a confirmed one). Every
other pair passes. The re-test line is parsed by the real agent's code."""

from __future__ import annotations

import json
import sys
import threading
import time

from hanging_agent import spec_and_rank

from rdmacli.mesh import schedule
from rdmacli.mesh.agent import AgentConfig

FAILING = {(0, 1), (2, 3)}
CONFIRMED = {(2, 3)}


def main() -> None:
    spec, rank = spec_and_rank(sys.argv[2:])
    run, n = spec.run_id, spec.n
    cfg = AgentConfig(spec, rank)

    def say(rec: dict) -> None:
        print(json.dumps({"run": run, "rank": rank, **rec}), flush=True)

    def pair(rnd: int, peer: int, fail: bool, **extra) -> None:
        error = {"message": "deadline", "cause": "deadline"} if fail else None
        say({"type": "pair", "round": rnd, "peer": peer, "result": "fail" if fail else "pass",
             "error": error, **extra})  # fmt: skip

    say({"type": "agent", "ready": True})
    for rnd in schedule.rounds_for(n):
        peer = schedule.partner(rank, rnd, n)
        if peer is not None:
            pair(rnd, peer, (min(rank, peer), max(rank, peer)) in FAILING)

    def watch() -> None:  # as the real agent reads its stdin
        while (line := spec_and_rank.reader.readline()) is not None:
            cfg.take(line.decode())

    threading.Thread(target=watch, daemon=True).start()
    deadline = time.time() + 60
    while cfg.retest is None and time.time() < deadline:
        time.sleep(0.05)
    for k, pairs in enumerate((cfg.retest or {}).get("rounds", [])):
        for a, _, b, _ in pairs:
            if rank in (a, b):
                pair(schedule.retest_base(n) + k, b if rank == a else a, (a, b) in CONFIRMED, retest=True)
    say({"type": "done", "failed": 0})


if __name__ == "__main__":
    main()
