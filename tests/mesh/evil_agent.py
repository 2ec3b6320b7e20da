"""A hostile mesh agent, for tests only: `python evil_agent.py EVIL_RANK -m rdmacli mesh-agent --rank N`.

On the node of rank EVIL_RANK it lies: for every pair of ranks 0 and 1 it
prints a failed record as if it were them, floods junk (a line deeper than Python parses, a
record of the wrong shape, a line of 1 MiB), and exits 1 without running a single pair. On every
other node it runs the real agent.
"""

from __future__ import annotations

import json
import os
import sys

from rdmacli.mesh import contract, schedule


def main() -> None:
    evil, args = int(sys.argv[1]), sys.argv[2:]
    rank = int(args[args.index("--rank") + 1])
    if rank != evil:  # the real agent, its stdin (the spec first) untouched
        os.execv(sys.executable, [sys.executable, *args])
    spec = contract.read_spec(contract.LineReader(sys.stdin.buffer), 60)
    run, n = spec.run_id, spec.n
    out = sys.stdout  # it never says `agent`: its launcher's words (stderr) tell of it
    for victim in (0, 1):
        for rnd in schedule.rounds_for(n, False):
            peer = schedule.partner(victim, rnd, n)
            if peer is None:
                continue
            lie = {"type": "pair", "run": run, "rank": victim, "peer": peer, "round": rnd, "result": "fail",
                   "error": {"message": "forged", "cause": "local_port_down", "exit_code": 3}}  # fmt: skip
            out.write(json.dumps(lie) + "\n")
    out.write('{"a":' * 5000 + "1" + "}" * 5000 + "\n")
    out.write(json.dumps({"type": "pair", "run": run, "rank": rank, "peer": 0, "round": 0,
                          "result": "pass", "rtt_p99_us": "fast"}) + "\n")  # fmt: skip
    out.write("{" + "x" * 2**20 + "}\n")
    out.flush()
    sys.stderr.write("\x1b]0;owned\x07\x1b[2J terminal junk on stderr\n")
    sys.exit(1)


if __name__ == "__main__":
    main()
