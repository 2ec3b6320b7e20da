"""A stand-in mesh agent that only reads its run spec as the real one does (the first line of
stdin) and says what it got: its size and a digest, as an `agent` record's words. No RDMA."""

from __future__ import annotations

import hashlib
import json
import sys

from rdmacli.mesh import contract


def main() -> None:
    rank = int(sys.argv[sys.argv.index("--rank") + 1])
    spec = contract.read_spec(contract.LineReader(sys.stdin.buffer), 60)
    digest = hashlib.sha256(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()
    print(json.dumps({"type": "agent", "run": spec.run_id, "rank": rank, "node": spec.names[rank],
                      "host": f"{spec.n}x{spec.rails} {digest}", "rails": []}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
