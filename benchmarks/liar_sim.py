"""Agents lying together, against the truth: the liar scenarios of `make scale-bench`.

Each scenario is a fabric of the simulator (fabric_sim.py: the real intake, verdict and blame)
with one real fault and a cabal of 1 to 3 agents accusing one innocent node: all its NICs, one
of them, or one of them under --cross-rail (each liar's every rail against it), by saying the
pairs failed (a deadline), by saying their own port's loss counters moved (or a few probes
lost), or by refusing it (its own end fails too, as with a dead link). Scored against the
truth: an innocent blamed is a node or NIC named that is neither a liar nor a real fault's, or a
link with no such end; with at most f liars (blame.LIARS) there must be none, and the real
faults must still be found (recall). Past f, what happens is shown, not judged.

    python benchmarks/liar_sim.py [--sizes "64x8:all 128x8:all@t,t+1"] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys

import fabric_sim as F

from rdmacli.mesh.blame import LIAR_SHARE, LIARS

TARGETS = ("node", "nic", "cross")  # every NIC of the victim, one, one under --cross-rail
LIES = ("deadline", "counters", "refuse")
REAL = tuple(k for k in F.KINDS if k != "liar")
GOALS = {"innocents_blamed": 0, "recall": 0.99, "precision": 0.99, "localization": 0.95}
# sizes, space-separated: f at full and sampled meshes; at 128 x 8 (127 partners) the share's 15
# liars and one more; at 1 000 x 8 sampled (a few partners each: f is what holds there)
SIZES = "64x8:all 256x8:sample:2 128x8:all@t,t+1 1000x8:sample:2"


def tolerated(partners: int) -> int:
    """The most liars that cannot blame a victim with this many partner nodes (blame's rule: more
    than f partner nodes, and more than LIAR_SHARE of the NIC's tested pairs): the cabal a fleet
    tolerates grows with the partners each NIC is tested with."""
    return max(LIARS, math.floor(LIAR_SHARE * partners))


def cabal_size(spec: str, partners: int) -> int:
    """A liar count as given: a number, or t / t+K (the most tolerated here, and K past it)."""
    if spec.startswith("t"):
        return tolerated(partners) + int(spec[1:] or 0)
    return int(spec)


def scenario(n: int, rails: int, pairs: str, test: str, liars: str, target: str, lie: str,
             seed: int) -> tuple[F.Scenario, int]:  # fmt: skip
    """One cabal and one real fault, on distinct nodes; the liars are partners of the victim in
    the schedule (a sampled run tests only some pairs), as many as `liars` says (a number, or t
    and t+1: the victim's tolerance and one more). The scenario, and the victim's tolerance."""
    rng = random.Random(seed)
    s = F.Scenario(n, rails, pairs, seed, test, cross=target == "cross")
    plan = F.make_plan(s)
    s.rounds = len(plan.rounds)
    victim = rng.randrange(n)
    partners = sorted(plan.schedule.partners(victim))
    cabal = tuple(rng.sample(partners, min(cabal_size(liars, len(partners)), len(partners) - 2)))
    s.cabal = F.Cabal(cabal, victim, None if target == "node" else rng.randrange(rails), lie)
    used = {victim, *cabal}
    kind = REAL[seed % len(REAL)]
    x = rng.choice([k for k in range(n) if k not in used])
    rail, peer = rng.randrange(rails), None
    if F.LEVEL[kind] == "links":
        peer = rng.choice([p for p in sorted(plan.schedule.partners(x)) if p not in used])
    s.faults.append(F.Fault(kind, x, rail, peer))
    return s, tolerated(len(partners))


def innocents(s: F.Scenario, said: set[tuple]) -> list[str]:
    """What the verdict named of nobody at fault: a node, NIC or liar entry of an honest node
    that has no real fault, or a link with neither end a liar or a faulty node. A late agent of a
    connection test is no fault (fabric_sim.Fault.key): only its row's `late` names it rightly."""
    late = {f.node for f in s.faults if f.key(s.test == "probe")[0] == "late"}
    faulty = {f.node for f in s.faults if f.node not in late}
    faulty |= {f.peer for f in s.faults if f.peer is not None}
    guilty = set(s.cabal.liars) | faulty
    out = []
    for k in said:
        if k[0] == "late":
            if k[1] not in late:
                out.append(str(k))
            continue
        ends = {k[1][0], k[2][0]} if k[0] == "links" else {k[1]}
        if not ends & guilty:
            out.append(str(k))
    return sorted(out)


def run(n: int, rails: int, pairs: str, seed0: int = 1, counts: tuple[str, ...] | None = None) -> list[dict]:
    """Every combination of liars (`counts`: 1 to f + 1 by default), target, lie and test at one
    size: a row each."""
    rows = []
    counts = counts or tuple(str(k) for k in range(1, LIARS + 2))
    combos = itertools.product(counts, TARGETS, LIES, ("ping", "probe"))
    for k, (given, target, lie, test) in enumerate(combos):
        if target == "cross" and rails < 2:
            continue
        s, tol = scenario(n, rails, pairs, test, given, target, lie, seed0 + k)
        doc, _ = F.coordinate(s)
        said = F.named(doc)
        sc = F.score(s, doc)
        wrong = innocents(s, said)
        rows.append({"given": given, "liars": len(s.cabal.liars), "tolerated": tol, "target": target,
                     "lie": lie, "test": test, "seed": s.seed, "fault": s.faults[0].kind,
                     "innocents": wrong, "named": len(said), "found": sc["found"],
                     "localized": sc["localized"], "faults": sc["faults"]})  # fmt: skip
    return rows


def summarize(size: str, rows: list[dict]) -> list[dict]:
    """Per liar count given: scenarios, those with an innocent blamed, the real faults' recall.
    Within: every scenario's cabal at most its victim's tolerance (f, or the share's more)."""
    out = []
    for given in dict.fromkeys(r["given"] for r in rows):
        mine = [r for r in rows if r["given"] == given]
        faults, named = sum(r["faults"] for r in mine), sum(r["named"] for r in mine)
        liars = sorted({r["liars"] for r in mine})
        row = {"size": size, "liars": liars[0] if len(liars) == 1 else f"{liars[0]}-{liars[-1]}",
               "tolerated": max(r["tolerated"] for r in mine),
               "within_f": all(r["liars"] <= r["tolerated"] for r in mine), "scenarios": len(mine),
               "innocents_blamed": sum(bool(r["innocents"]) for r in mine),
               "recall": round(sum(r["found"] for r in mine) / faults, 4) if faults else 1.0,
               "precision": round(1 - sum(len(r["innocents"]) for r in mine) / named, 4) if named else 1.0,
               "localization": round(sum(r["localized"] for r in mine) / faults, 4) if faults else 1.0,
               "wrong": [r for r in mine if r["innocents"] or r["found"] < r["faults"]][:4]}  # fmt: skip
        out.append(row)
    return out


def missed_goals(row: dict) -> list[str]:
    """Within the tolerance (f, or the share's more), no innocent and every real fault; past it,
    nothing is promised."""
    if not row["within_f"]:
        return []
    out = []
    if row["innocents_blamed"] > GOALS["innocents_blamed"]:
        out.append(f"{row['liars']} liar(s): {row['innocents_blamed']} scenario(s) blamed an innocent")
    for key in ("recall", "precision", "localization"):
        if row[key] < GOALS[key]:
            out.append(f"{row['liars']} liar(s): {key} {row[key]} < {GOALS[key]}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes",
        default=SIZES,
        help="NxR[:pairs][@counts], counts a list of liar counts: "
        "numbers, t (the most the victim's partners tolerate) or t+1; default 1 to f + 1",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from results import versions, write

    ran_on = versions()
    table, missed = [], []
    for size in args.sizes.split(" "):
        shape, _, counts = size.partition("@")
        nodes_rails, _, pairs = shape.partition(":")
        n, rails = (int(x) for x in nodes_rails.split("x"))
        given = tuple(counts.split(",")) if counts else None
        for row in summarize(size, run(n, rails, pairs or "all", args.seed, given)):
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
