"""Colluding mesh agents, for tests only:
`python colluding_agent.py VICTIM LIAR,LIAR -m rdmacli mesh-agent --rank N`.

On the liars' ranks the real agent runs (its stdin, the coordinator's lines, untouched), and every
pair record it prints of a pair with VICTIM is turned into a failure with a plausible cause and
nothing else (the figures that would contradict it left out); the rest passes through. On every
other node the real agent runs alone. Issue 53's rule: the victim's own end passes those pairs
cleanly, so they are disputed, counted against neither NIC, and nobody is blamed or drained.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

KEEP = (
    "type",
    "run",
    "rank",
    "peer",
    "round",
    "slot",
    "rail",
    "peer_rail",
)  # who and when: the rest is the lie


def main() -> None:
    victim, liars, args = int(sys.argv[1]), {int(r) for r in sys.argv[2].split(",")}, sys.argv[3:]
    rank = int(args[args.index("--rank") + 1])
    if rank not in liars:
        os.execv(sys.executable, [sys.executable, *args])
    agent = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True)
    assert agent.stdout is not None
    for line in agent.stdout:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and rec.get("type") == "pair" and rec.get("peer") == victim:
            rec = {k: rec[k] for k in KEEP if k in rec}
            rec.update(result="fail", error={"message": "transfer failed (colluding)", "cause": "transfer",
                                             "exit_code": 1})  # fmt: skip
            line = json.dumps(rec) + "\n"
        sys.stdout.write(line)
        sys.stdout.flush()
    sys.exit(agent.wait())


if __name__ == "__main__":
    main()
