"""`rdmacli watch status` at fleet size, with ground truth: `make watch-sim` (host only, no RDMA).

The lab runs 8 nodes; a fleet is 1000 x 8 NICs in leaves of 32. Here each node's agent state
(the doc `watch show` prints, service.state_doc's shape) is made from faults the simulator
injects, and fed to the real `watch status` path: every doc checked as untrusted input
(status.Gathered.take), then one blame (gather.judged). It reports what that costs (CPU seconds,
peak memory of the blame, bytes gathered and of the JSON) and whether the blame is true:
precision (what is named is a fault), recall (every fault is named) and healthy fleets with
no blame.

Faults, as the agents would say them (hysteresis over: each subject bad or not):
  bad_nic     its own agent names the NIC; its partners name their pairs with it
  dead_link   both ends name the pair
  slow_node   its own agent names every rail of it slow
  no_agent    no doc (the node down); its partners name their pairs with it DEAD
  liar        names every pair with its partners DEAD; they say nothing of it: nothing named

    python benchmarks/watch_sim.py [--nodes 1000] [--rails 8] [--leaf 32] [--scenarios 20]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc

from rdmacli.watch import status as S
from rdmacli.watch.gather import judged

KINDS = ("bad_nic", "dead_link", "slow_node", "no_agent", "liar")


def name(i: int) -> str:
    return f"n{i:04d}"


def docs_of(n: int, rails: int, leaf: int, faults: list[tuple], rng: random.Random):
    """Every agent's doc for these faults, and the names the blame should give."""
    group = [i // leaf for i in range(n)]
    partners = lambda i: [j for j in range(group[i] * leaf, min((group[i] + 1) * leaf, n)) if j != i]  # noqa: E731
    nics = {i: {} for i in range(n)}  # node -> {rail: cause}
    pairs = {i: {} for i in range(n)}  # node -> {(rail, peer): cause}
    missing, expect = set(), set()
    for kind, i, rail, j in faults:
        if kind == "bad_nic":
            nics[i][rail] = "LOSS"
            for p in partners(i):
                pairs[p][(rail, i)] = "LOSS"
                pairs[i][(rail, p)] = "LOSS"
            expect.add(f"{name(i)}:{rail}")
        elif kind == "dead_link":
            pairs[i][(rail, j)] = pairs[j][(rail, i)] = "DEAD"
            expect.add(f"{name(min(i, j))}:{rail}-{name(max(i, j))}:{rail}")
        elif kind == "slow_node":
            for r in range(rails):
                nics[i][r] = "SLOW"
            expect.add(name(i))
        elif kind == "no_agent":
            missing.add(i)
            for p in partners(i):
                for r in range(rails):
                    pairs[p][(r, i)] = "DEAD"
            expect.add(name(i))
        elif kind == "liar":
            for p in partners(i):
                for r in range(rails):
                    pairs[i][(r, p)] = "DEAD"
    docs = {}
    for i in range(n):
        if i in missing:
            continue
        docs[name(i)] = {
            "type": "watch", "v": 1, "node": name(i), "port": 7590, "window": 1000, "time": 1.79e9,
            "window_s": 10, "period_s": 30, "windows": 1000, "skipped": 0,
            "nics": [{"rail": r, "address": f"10.{r}.{i >> 8}.{i & 255}", "device": f"mlx5_{r}",
                      "state": "bad" if r in nics[i] else "ok", "cause": nics[i].get(r)}
                     for r in range(rails)],
            "pairs": [{"rail": r, "peer": name(p), "peer_rail": r, "state": "bad", "cause": c}
                      for (r, p), c in sorted(pairs[i].items())],
        }  # fmt: skip
    return docs, expect


def scenario(n: int, rails: int, leaf: int, rng: random.Random, healthy: bool) -> list[tuple]:
    """One fault of each kind, on distinct nodes (a fault's node is no other fault's)."""
    if healthy:
        return []
    nodes = rng.sample(range(n), 2 * len(KINDS))
    out = []
    for kind, i in zip(KINDS, nodes):
        j = (i // leaf) * leaf + (i % leaf + 1) % min(leaf, n - (i // leaf) * leaf)  # a leaf partner
        if kind == "dead_link" and j in nodes:
            continue
        out.append((kind, i, rng.randrange(rails), j))
    return out


def run(n: int, rails: int, leaf: int, seed: int, healthy: bool) -> dict:
    rng = random.Random(seed)
    docs, expect = docs_of(n, rails, leaf, scenario(n, rails, leaf, rng, healthy), rng)
    names = [name(i) for i in range(n)]
    groups = tuple(str(i // leaf) for i in range(n))
    lines = {
        node: json.dumps(doc, separators=(",", ":")) for node, doc in docs.items()
    }  # what `watch show` prints
    tracemalloc.start()
    t0 = time.process_time()
    g = S.Gathered(names, rails, partners=S.partner_counts(groups, names, "group", 0))
    for node, line in lines.items():
        g.take(node, json.loads(line))
    out = judged(g, names, {"nodes": f"n[0000-{n - 1:04d}]"})
    cpu = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    said = set(out.report.blame.names(rails))
    data_kb = len(json.dumps(out.to_dict()["data"])) / 1024
    return {"cpu_s": cpu, "peak_mb": peak / 2**20, "gathered_mb": sum(map(len, lines.values())) / 2**20,
            "json_kb": data_kb, "named": len(said), "true": len(said & expect),
            "faults": len(expect), "found": len(expect & said), "false": sorted(said - expect)[:3],
            "missed": sorted(expect - said)[:3], "healthy_blamed": bool(not expect and said)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--leaf", type=int, default=32)
    ap.add_argument("--scenarios", type=int, default=20)
    args = ap.parse_args(argv)
    rows = [
        run(args.nodes, args.rails, args.leaf, seed, healthy=seed % 5 == 0) for seed in range(args.scenarios)
    ]
    named = sum(r["named"] for r in rows)
    faults = sum(r["faults"] for r in rows)
    print(f"watch status, {args.nodes} nodes x {args.rails} rails, leaves of {args.leaf}, --pairs group, "
          f"{len(rows)} scenarios ({sum(not r['faults'] for r in rows)} healthy):")  # fmt: skip
    print(f"  precision {sum(r['true'] for r in rows) / max(named, 1):.3f}  recall "
          f"{sum(r['found'] for r in rows) / max(faults, 1):.3f}  healthy fleets blamed "
          f"{sum(r['healthy_blamed'] for r in rows)}")  # fmt: skip
    for key in ("cpu_s", "peak_mb", "gathered_mb", "json_kb"):
        vals = [r[key] for r in rows]
        print(f"  {key}: median {statistics.median(vals):.2f}, max {max(vals):.2f}")
    bad = [r for r in rows if r["false"] or r["missed"] or r["healthy_blamed"]]
    for r in bad[:5]:
        print(f"  wrong: false {r['false']} missed {r['missed']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
