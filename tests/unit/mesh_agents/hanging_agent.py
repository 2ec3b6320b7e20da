"""A stand-in mesh agent for the coordinator's tests (no RDMA): `python hanging_agent.py HANG_RANK
mesh-agent ...`. Every rank reports itself and passes its pairs at once; the rank HANG_RANK
reports its first pair only, then ignores SIGTERM and sleeps (a hung agent). With HANG_MODE=pipes
it leaves instead a process of its own session behind that holds its stdout and stderr open, and
exits (a worker whose pipes never close)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from rdmacli.mesh import schedule


def main() -> None:
    hang, args = int(sys.argv[1].split(":")[0]), sys.argv[3:]  # HANG_RANK[:a tag the test finds it by]
    spec, rank = spec_and_rank(args)
    run, n = spec.run_id, spec.n

    def say(rec: dict) -> None:
        print(json.dumps({"run": run, "rank": rank, **rec}), flush=True)

    say({"type": "agent", "ready": True})
    for slot, rnd in enumerate(schedule.rounds_for(n, spec.quick)):
        peer = schedule.partner(rank, rnd, n)
        if peer is None:
            continue
        if rank == hang and slot > 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if os.environ.get("HANG_MODE") == "pipes":
                holder = "import signal, time; signal.signal(15, signal.SIG_IGN); time.sleep(90)"
                subprocess.Popen([sys.executable, "-c", holder], start_new_session=True)
                os._exit(0)
            while True:
                time.sleep(60)
        say({"type": "pair", "round": rnd, "slot": slot, "peer": peer, "result": "pass", "error": None})
    say({"type": "done", "failed": 0})


def spec_and_rank(args: list[str]):
    """As the real agent starts: its rank from argv, the run spec from its stdin (and the
    reader, whose next lines are the coordinator's go and re-test lines)."""
    from rdmacli.mesh import contract

    reader = contract.LineReader(sys.stdin.buffer)
    spec_and_rank.reader = reader
    return contract.read_spec(reader, 60), int(args[args.index("--rank") + 1])


if __name__ == "__main__":
    main()
