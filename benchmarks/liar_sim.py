"""Agents lying together, against the truth: the liar scenarios of `make scale-bench`.

Each scenario is a fabric of the simulator (fabric_sim.py: the real intake, verdict and blame)
with one real fault and a cabal of 1 to 3 agents accusing one innocent node: all its NICs, one
of them, or one of them under --cross-rail (each liar's every rail against it), by saying the
pairs failed (a deadline), by saying their own port's loss counters moved (or a few probes
lost), or by refusing it (its own end fails too, as with a dead link). Scored against the
truth: an innocent blamed is a node or NIC named that is neither a liar nor a real fault's, or a
link with no such end; with at most f liars (blame.LIARS) there must be none, and the real
faults must still be found (recall). Past f, what happens is shown, not judged.

    python benchmarks/liar_sim.py [--sizes 64x8:all,256x8:sample:2] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys

import fabric_sim as F

from rdmacli.mesh.blame import LIARS

TARGETS = ("node", "nic", "cross")  # every NIC of the victim, one, one under --cross-rail
LIES = ("deadline", "counters", "refuse")
REAL = tuple(k for k in F.KINDS if k != "liar")
GOALS = {"innocents_blamed": 0, "recall": 0.99}


def scenario(n: int, rails: int, pairs: str, test: str, liars: int, target: str, lie: str,
             seed: int) -> F.Scenario:  # fmt: skip
    """One cabal and one real fault, on distinct nodes; the liars are partners of the victim in
    the schedule (a sampled run tests only some pairs)."""
    rng = random.Random(seed)
    s = F.Scenario(n, rails, pairs, seed, test, cross=target == "cross")
    plan = F.make_plan(s)
    s.rounds = len(plan.rounds)
    victim = rng.randrange(n)
    partners = sorted(plan.schedule.partners(victim))
    cabal = tuple(rng.sample(partners, liars))
    s.cabal = F.Cabal(cabal, victim, None if target == "node" else rng.randrange(rails), lie)
    used = {victim, *cabal}
    kind = REAL[seed % len(REAL)]
    x = rng.choice([k for k in range(n) if k not in used])
    rail, peer = rng.randrange(rails), None
    if F.LEVEL[kind] == "links":
        peer = rng.choice([p for p in sorted(plan.schedule.partners(x)) if p not in used])
    s.faults.append(F.Fault(kind, x, rail, peer))
    return s


def innocents(s: F.Scenario, said: set[tuple]) -> list[str]:
    """What the verdict named of nobody at fault: a node, NIC or liar entry of an honest node
    that has no real fault, or a link with neither end a liar or a faulty node."""
    guilty = (
        set(s.cabal.liars) | {f.node for f in s.faults} | {f.peer for f in s.faults if f.peer is not None}
    )
    out = []
    for k in said:
        ends = {k[1][0], k[2][0]} if k[0] == "links" else {k[1]}
        if not ends & guilty:
            out.append(str(k))
    return sorted(out)


def run(n: int, rails: int, pairs: str, seed0: int = 1) -> list[dict]:
    """Every combination of liars (1 to f + 1), target, lie and test at one size: a row each."""
    rows = []
    combos = itertools.product(range(1, LIARS + 2), TARGETS, LIES, ("ping", "probe"))
    for k, (liars, target, lie, test) in enumerate(combos):
        if target == "cross" and rails < 2:
            continue
        s = scenario(n, rails, pairs, test, liars, target, lie, seed0 + k)
        doc, _ = F.coordinate(s)
        said = F.named(doc)
        sc = F.score(s, doc)
        rows.append({"liars": liars, "target": target, "lie": lie, "test": test, "seed": s.seed,
                     "fault": s.faults[0].kind, "innocents": innocents(s, said),
                     "found": sc["found"], "faults": sc["faults"]})  # fmt: skip
    return rows


def summarize(size: str, rows: list[dict]) -> list[dict]:
    """Per number of liars: scenarios, those with an innocent blamed, the real faults' recall."""
    out = []
    for liars in sorted({r["liars"] for r in rows}):
        mine = [r for r in rows if r["liars"] == liars]
        faults = sum(r["faults"] for r in mine)
        row = {"size": size, "liars": liars, "within_f": liars <= LIARS, "scenarios": len(mine),
               "innocents_blamed": sum(bool(r["innocents"]) for r in mine),
               "recall": round(sum(r["found"] for r in mine) / faults, 4) if faults else 1.0,
               "wrong": [r for r in mine if r["innocents"] or r["found"] < r["faults"]][:4]}  # fmt: skip
        out.append(row)
    return out


def missed_goals(row: dict) -> list[str]:
    """Within f, no innocent and every real fault; past f, nothing is promised."""
    if not row["within_f"]:
        return []
    out = []
    if row["innocents_blamed"] > GOALS["innocents_blamed"]:
        out.append(f"{row['liars']} liar(s): {row['innocents_blamed']} scenario(s) blamed an innocent")
    if row["recall"] < GOALS["recall"]:
        out.append(f"{row['liars']} liar(s): recall {row['recall']} < {GOALS['recall']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64x8:all,256x8:sample:2")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from results import versions, write

    ran_on = versions()
    table, missed = [], []
    for size in args.sizes.split(","):
        nodes_rails, _, pairs = size.partition(":")
        n, rails = (int(x) for x in nodes_rails.split("x"))
        for row in summarize(size, run(n, rails, pairs or "all", args.seed)):
            table.append(row)
            missed += [f"{size}: {m}" for m in missed_goals(row)]
            if not args.json:
                print(json.dumps({k: v for k, v in row.items() if k != "wrong"}), flush=True)
                for w in row["wrong"]:
                    print("  wrong:", json.dumps(w), flush=True)
    if args.json:
        print(json.dumps(table, indent=1))
    print("goals missed: " + "; ".join(missed) if missed else f"every goal met (f = {LIARS})", flush=True)
    write("liars", {"f": LIARS, "sizes": table, "goals_missed": missed},
          argv if argv is not None else sys.argv[1:], ran_on)  # fmt: skip
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
