"""A stand-in discovery agent that starts as slowly as it is told: rank r waits the r-th of
SLOW_DELAYS (seconds; "dead": never reports; "bad": reports at once a rail with no address)
after reading its spec, then reports one rail. No
RDMA: what is under test is how long the coordinator waits for a launch."""

from __future__ import annotations

import json
import os
import sys
import time

from rdmacli.mesh import contract


def main() -> None:
    rank = int(sys.argv[sys.argv.index("--rank") + 1])
    spec = contract.read_spec(contract.LineReader(sys.stdin.buffer), 60)
    delay = os.environ["SLOW_DELAYS"].split(",")[rank]
    if delay == "dead":
        time.sleep(120)
        return
    if delay == "bad":
        rail = {"device": f"mlx5_{rank}", "port": 1, "address": ""}
    else:
        time.sleep(float(delay))
        rail = {"device": f"mlx5_{rank}", "port": 1, "address": f"192.0.2.{rank + 1}"}
    print(json.dumps({"type": "rails", "run": spec.run_id, "rank": rank, "rails": [rail]}), flush=True)


if __name__ == "__main__":
    main()
