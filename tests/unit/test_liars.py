"""One liar among honest agents cannot move the verdict (issue 34): stand-in agents' records of
a whole mesh (8, 16 and 64 nodes; latency and bandwidth) through the intake and the verdict, one
node forging each figure in turn. Nobody honest is blamed, no honest pair is failed or slow, and
the liar is named (a violation, inconsistent reports, or the blame of its own pairs)."""

from __future__ import annotations

import json
import random

import pytest
from meshdata import judged, make_plan

from rdmacli.mesh import schedule
from rdmacli.mesh.intake import Intake

RATE = 100.0  # every port's line rate, as each honest agent says it


def honest(rank: int, peer: int, rnd: int, test: str, rng: random.Random) -> dict:
    """An honest end's record. Latency: the connector (the higher rank) carries the figures.
    Bandwidth: each end the stream that came to it, the rate it sent at and its counts both
    ways, the same messages the partner counted (a pair's own generator, so both ends agree)."""
    rec = {"type": "pair", "run": "ab" * 8, "rank": rank, "peer": peer, "round": rnd, "result": "pass"}
    if test == "ping" and rank > peer:
        p50 = 10.0 + rng.random()
        rec.update(rtt_p50_us=p50, rtt_p99_us=p50 * 1.3, host_rtt_p50_us=p50 + 4)
    elif test == "bw":
        a, b = sorted((rank, peer))
        pr = random.Random(f"{a}-{b}-{rnd}")
        n_ab, n_ba = 1000 + pr.randrange(100), 1000 + pr.randrange(100)
        g_ab, g_ba = 88.0 + pr.random() * 4, 88.0 + pr.random() * 4
        if rank == a:  # the listener: b's stream came to it
            rec.update(gbps_ba=g_ba, gbps_sent=g_ab * 0.98, messages_sent=n_ab, messages_received=n_ba)
        else:
            rec.update(gbps_ab=g_ab, gbps_sent=g_ba * 0.98, messages_sent=n_ba, messages_received=n_ab)
    return rec


def mesh(n: int, test: str, liar: int, lie, base=lambda rec: rec) -> tuple[dict, Intake]:
    """The verdict of a mesh whose `liar` changes its own records with lie(rec) -> rec (None:
    not sent) and its agent record with lie({"agent": ...}); every honest record goes through
    base(rec) (a fabric other than the quiet default)."""
    rng = random.Random(n * 7 + liar)
    names = [f"n{i:02d}" for i in range(n)]
    plan = make_plan(names, [[f"10.0.0.{i}"] for i in range(n)], test=test)
    c = Intake(plan)
    for rank in range(n):
        rails = [
            {"address": f"10.0.0.{rank}", "device": "mlx5_0", "port": 7490, "ready": True, "rate_gbps": RATE}
        ]
        rec = {"type": "agent", "run": plan.spec.run_id, "rank": rank, "node": names[rank], "rails": rails}
        rec = lie(rec) if rank == liar else rec
        c.on_line(names[rank], json.dumps(rec), False)
    for rnd in plan.rounds:
        for a, b in schedule.pairs(n, rnd):
            for rank, peer in ((a, b), (b, a)):
                rec = honest(rank, peer, rnd, test, rng)
                rec = lie(rec) if rank == liar else base(rec)
                if peer == liar and hasattr(
                    lie, "partner"
                ):  # what an honest end computed from the liar's word
                    rec = lie.partner(rec)
                if rec is not None:
                    c.on_line(names[rank], json.dumps(rec), False)
    every: list[dict] = []  # every pair's document (a 64-node mesh lists only the troubled ones)
    doc = judged(plan, c, matrix=lambda p: every.append(p.to_json())).to_dict()
    doc["data"]["pairs"] = every
    return doc, c


def named(doc: dict) -> set[str]:
    """Every node the verdict names: blamed (node, NIC or link end), or warned about."""
    blame = doc["data"]["blame"]
    out = {b["node"] for b in blame["nodes"]} | {b["node"] for b in blame["nics"]}
    out |= {x[k] for x in blame["links"] + blame["unexplained"] for k in ("a", "b")}
    out |= {w.split(":")[0].split("'")[0] for w in doc["warnings"]}
    return out


def connector(rec: dict) -> bool:
    return rec.get("type") == "pair" and rec["rank"] > rec["peer"]


def carries(rec: dict) -> bool:
    """A record with figures: the connector's (latency), either end's (bandwidth)."""
    return connector(rec) or (rec.get("type") == "pair" and "gbps_sent" in rec)


def forged(**figures):
    """A liar that puts these figures in every record it carries figures in."""
    return lambda rec: {**rec, **figures} if carries(rec) else rec


def responder(rec: dict) -> dict:
    """The liar as a latency responder: it claims a hold of nearly the whole round trip, and the
    honest connector (its own floor keeps a wire's round trip) reports the least it may."""
    return rec


responder.partner = forged(rtt_p50_us=0.6, rtt_p99_us=0.8)  # type: ignore[attr-defined]

LIES = {
    ("ping", "its hold claimed as the round trip"): responder,
    # latency: a round trip no wire has, one far faster than the fabric, one slow for all
    ("ping", "under the floor"): forged(rtt_p50_us=0.01, rtt_p99_us=0.02),
    ("ping", "too fast"): forged(rtt_p50_us=0.6, rtt_p99_us=0.7, host_rtt_p50_us=14.0),
    ("ping", "network above host"): forged(rtt_p50_us=30.0, rtt_p99_us=40.0, host_rtt_p50_us=12.0),
    ("ping", "p50 above p99"): forged(rtt_p50_us=12.0, rtt_p99_us=11.0),
    # bandwidth: above every port, above its partners' ports only (its own said to be huge)
    ("bw", "above every port"): forged(gbps_ab=1e3, gbps_ba=1e3),
    ("bw", "1 Eb/s"): forged(gbps_ab=1e9),
    ("bw", "above its partners' ports"): lambda rec: (
        {**rec, "rails": [{**rec["rails"][0], "rate_gbps": 1e4}]}
        if rec["type"] == "agent"
        else forged(gbps_ab=900.0, gbps_ba=900.0)(rec)
    ),  # fmt: skip
    # bandwidth as received, checked against the sender's count and rate: the liar says its
    # partners' streams came slowly (they would be the slow ones), or more came than was sent
    ("bw", "its partners' streams said slow"): forged(gbps_ab=5.0, gbps_ba=5.0),
    ("bw", "more received than sent"): lambda rec: (
        {**rec, "messages_received": rec["messages_received"] + 500} if carries(rec) else rec
    ),  # fmt: skip
    ("bw", "fewer received than sent"): lambda rec: (
        {**rec, "messages_received": rec["messages_received"] // 2} if carries(rec) else rec
    ),  # fmt: skip
    ("bw", "a count past 64 bits"): forged(messages_sent=2**64),
    ("bw", "its own port said slow"): lambda rec: (
        {**rec, "rails": [{**rec["rails"][0], "rate_gbps": 1.0}]} if rec["type"] == "agent" else rec
    ),  # fmt: skip
}


@pytest.mark.parametrize("n", [8, 16, 64])
@pytest.mark.parametrize("case", list(LIES), ids=lambda c: f"{c[0]}: {c[1]}")
def test_one_liar_in_n_moves_nothing_and_is_named(n, case):
    test, _ = case
    liar = n // 2  # more than f partners on each side of it: lies as connector and as responder
    doc, c = mesh(n, test, liar, LIES[case])
    name = f"n{liar:02d}"
    honest_pairs = [p for p in doc["data"]["pairs"] if liar not in (p["a_rank"], p["b_rank"])]
    assert honest_pairs and all(p["result"] == "pass" and not p["slow"] for p in honest_pairs), [
        p for p in honest_pairs if p["result"] != "pass" or p["slow"]
    ][:3]
    assert named(doc) == {name}, (named(doc), doc["warnings"][:3], doc["data"]["blame"])
    # not a clean pass: the liar's records refused (its pairs then fail, SILENT, and it is the
    # node blamed), or its figures set aside as inconsistent
    causes = ("peer_protocol_violation", "inconsistent_reports", "check_failed")
    assert doc["result"] == "fail" and doc["error"]["cause"] in causes, doc["error"]


@pytest.mark.parametrize("n", [8, 16, 64])
def test_a_liar_that_accuses_one_partner_blames_nobody_honest(n):
    """The liar fails its pair with one partner (a deadline, say): that pair fails and no
    one else; the partner, which passes with everyone else and passed that pair cleanly, is not
    named a bad node, nor the end of a bad link: the pair is disputed, blamed on nobody."""
    liar, victim = 1, n - 1

    def accuse(rec):
        if rec["type"] == "pair" and rec["peer"] == victim:
            return {**rec, "result": "fail", "error": {"message": "x", "cause": "deadline"}}
        return rec

    doc, _ = mesh(n, "ping", liar, accuse)
    blame = doc["data"]["blame"]
    assert blame["nodes"] == [] and blame["nics"] == [] and blame["links"] == []
    # the pair the liar failed, its partner passed cleanly: disputed, blamed on nobody
    assert [({x["a"], x["b"]}, x["failed_by"]) for x in blame["disputed"]] == [
        ({f"n{liar:02d}", f"n{victim:02d}"}, f"n{liar:02d}")
    ]
    failed = [(p["a_rank"], p["b_rank"]) for p in doc["data"]["pairs"] if p["result"] != "pass"]
    assert failed == [(liar, victim)]


@pytest.mark.parametrize("test", ["ping", "bw"])
def test_the_honest_mesh_is_a_clean_pass(test):
    """The control: the same stand-ins with nobody lying pass, nobody named."""
    doc, _ = mesh(16, test, 99, lambda rec: rec)
    assert doc["result"] == "pass" and named(doc) == set() and doc["warnings"] == [], doc["warnings"]


def test_an_honest_fast_node_in_a_noisy_fabric_is_no_liar():
    """The lab under TCG: typical pairs 7x the best, and one lightly loaded node's
    pairs all about 4x faster than everyone else's; it was called inconsistent in a healthy run.
    Where the fabric's own jitter (typical p99 over typical p50) is wide, the hosts' time is most of every
    figure and nothing is called a lie for being fast; in a quiet fabric figures that far out are
    still a lie (the "too fast" case above)."""
    spread = random.Random(5)

    def noisy(rec):  # everyone's figures spread 4 to 12 ms, as under TCG: the honest base
        if connector(rec):
            p50 = 4000.0 + spread.random() * 8000
            return {**rec, "rtt_p50_us": p50, "rtt_p99_us": p50 * 3, "host_rtt_p50_us": p50 + 4}
        return rec

    fast_node = 5

    class Lie:
        def __call__(self, rec):
            if connector(rec):
                return {**rec, "rtt_p50_us": 700.0, "rtt_p99_us": 2100.0, "host_rtt_p50_us": 704.0}
            return noisy(rec)

        def partner(self, rec):
            return {**noisy(rec), **({"rtt_p50_us": 700.0, "rtt_p99_us": 2100.0} if connector(rec) else {})}

    doc, _ = mesh(16, "ping", fast_node, Lie(), base=noisy)
    assert doc["result"] == "pass" and named(doc) == set(), (doc["warnings"], doc["data"]["blame"])
    ref = doc["data"]["slow_reference"]["aligned"]
    assert ref["jitter"] > 2  # the noise that makes it so


DEADLINE = {"message": "no progress within its deadline", "cause": "deadline", "exit_code": 1}
NONE_ANSWERED = {"message": "no probe answered", "cause": "packet_loss", "exit_code": 1}


LOSS_MOVED = ({"device": "mlx5_0", "port": 1, "moved": {"packet_seq_err": 7, "out_of_seq_request": 7}},)


def accused(n: int, rails: int, cross: bool, liars: set[int], victim: tuple[int, int], test: str,
            lie: str = "fail") -> dict:  # fmt: skip
    """A mesh of honest stand-ins in which `liars` fail every pair they have with one NIC of an
    innocent node (`victim`: rank, rail), a deadline (`ping`) or every probe lost (`probe`),
    while the victim passes those pairs cleanly, as it does with everyone. `lie="counters"`:
    they pass those pairs but say their own port's loss counters moved (with the probe, that
    three of five probes were lost); `lie="refuse"`: they do not answer, so the victim's own end
    fails too."""
    names = [f"n{i}" for i in range(n)]
    plan = make_plan(
        names, [[f"10.{k}.0.{i}" for k in range(rails)] for i in range(n)], cross=cross, test=test
    )
    c = Intake(plan)
    for rank in range(n):
        rs = [{"address": f"10.{k}.0.{rank}", "device": f"mlx5_{k}", "port": 7490 + k, "ready": True,
               "rate_gbps": RATE} for k in range(rails)]  # fmt: skip
        c.on_line(names[rank], json.dumps({"type": "agent", "run": plan.spec.run_id, "rank": rank,
                                           "node": names[rank], "rails": rs}), False)  # fmt: skip
    for rnd in plan.rounds:
        for rank in range(n):
            for rail, peer, peer_rail in plan.schedule.tests_of(rank, rnd):
                rec = {"type": "pair", "run": plan.spec.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "result": "pass", "rail": rail, "peer_rail": peer_rail}  # fmt: skip
                if test == "probe":
                    rec.update(probes_sent=5, probes_answered=5, rtt_min_us=9.0)
                if test == "probe" or rank > peer:
                    rec.update(rtt_p50_us=10.0, rtt_p99_us=13.0, host_rtt_p50_us=14.0)
                told = rank in liars and (peer, peer_rail) == victim
                refused = lie == "refuse" and (rank, rail) == victim and peer in liars
                if (told or refused) and lie == "counters":
                    if test == "probe":
                        rec["probes_answered"] = 2
                    else:
                        rec["counters"] = LOSS_MOVED
                elif told or refused:
                    for k in ("rtt_p50_us", "rtt_p99_us", "host_rtt_p50_us", "rtt_min_us"):
                        rec.pop(k, None)
                    rec.update(result="fail", error=DEADLINE if test == "ping" else NONE_ANSWERED)
                    if test == "probe":
                        rec["probes_answered"] = 0
                c.on_line(names[rank], json.dumps(rec), False)
    return judged(plan, c).to_dict()


@pytest.mark.parametrize("test", ["ping", "probe"])
@pytest.mark.parametrize(
    "n, rails, cross, liars",
    [(8, 2, True, {7}), (4, 2, True, {3}), (8, 1, False, {6, 7}), (8, 2, False, {5, 7})],
    ids=["cross-rail liar of 8x2", "cross-rail liar of 4x2", "two colluding liars of 8", "two liars of 8x2"],
)
def test_an_innocent_nic_accused_by_liars_on_a_few_pairs_is_not_blamed(n, rails, cross, liars, test):
    """Issue 53: a liar failing (or losing every probe of) only its pairs with one rail of an
    innocent node got that NIC blamed under --cross-rail (its two rails counted as two
    partners), and two colluding liars got the node blamed: blame's common-ends rule took two
    failing pairs as enough, and the accused's own clean pass of them was never weighed. Now
    those pairs are disputed: blamed on nobody, listed with the end that failed them."""
    doc = accused(n, rails, cross, liars, (1, 0), test)
    blame = doc["data"]["blame"]
    assert blame["nodes"] == [] and blame["nics"] == [] and blame["links"] == [], blame
    assert blame["unexplained"] == [] and blame["disputed"]
    assert {x["failed_by"] for x in blame["disputed"]} == {f"n{r}" for r in liars}
    assert all("n1" in (x["a"], x["b"]) for x in blame["disputed"])


@pytest.mark.parametrize("test", ["ping", "probe"])
@pytest.mark.parametrize("lie", ["counters", "refuse"])
@pytest.mark.parametrize(
    "n, rails, cross, liars",
    [(8, 2, True, {7}), (8, 1, False, {6, 7}), (8, 2, True, {5, 7}), (16, 2, False, {3, 9})],
    ids=["cross-rail liar of 8x2", "two colluding liars of 8", "two cross-rail liars of 8x2", "two of 16x2"],
)
def test_what_a_clean_pass_cannot_contradict_names_no_innocent_from_f_liars(
    n, rails, cross, liars, lie, test
):
    """Issue 53, the lies a clean pass does not contradict: liars that say their own port's loss
    counters moved on their pairs with one innocent NIC (or that they lost its probes), or that
    refuse it (its own end fails too), look like a lossy or dead NIC seen from its partners. Up
    to f = 2 liar nodes (blame.LIARS; a node's rails one witness) name nobody: the pairs stay
    links or unexplained, each with a liar at one end. One liar more can (the rule's cost)."""
    doc = accused(n, rails, cross, liars, (1, 0), test, lie)
    blame = doc["data"]["blame"]
    assert blame["nodes"] == [] and blame["nics"] == [], blame
    for x in blame["links"] + blame["unexplained"]:
        assert {x["a"], x["b"]} & {f"n{r}" for r in liars}, x
    assert doc["data"]["liars_tolerated"] == 2
    more = accused(n, rails, cross, {*liars, 4, 6} - {1} if len(liars) < 3 else liars, (1, 0), test, lie)
    assert ("n1", 0) in {(b["node"], b.get("rail", 0)) for b in more["data"]["blame"]["nics"]} or [
        b["node"] for b in more["data"]["blame"]["nodes"]
    ] == ["n1"], more["data"]["blame"]


def test_a_liar_failing_several_honest_partners_is_named_for_it():
    """A liar that fails its pairs with three partners that passed them cleanly contradicts more
    than f nodes: named for inconsistent reports (each honest partner contradicts only the liar).
    With two it goes unnamed (verdict.MIN_CONTRADICTED): two liars at odds with one innocent
    would get the innocent named otherwise."""
    doc = accused(8, 1, False, {7}, (1, 0), "ping")  # one partner: disputed, not named
    assert not any("inconsistent reports" in w for w in doc["warnings"])

    def both(rec):
        if rec["type"] == "pair" and rec["peer"] in (1, 2, 3):
            return {**{k: v for k, v in rec.items() if not k.startswith("rtt") and k != "host_rtt_p50_us"},
                    "result": "fail", "error": DEADLINE}  # fmt: skip
        return rec

    doc, _ = mesh(8, "ping", 7, both)
    said = [w for w in doc["warnings"] if "inconsistent reports" in w]
    assert len(said) == 1 and said[0].startswith("n07:") and "clean passes contradict" in said[0], said
    assert doc["data"]["blame"]["nodes"] == [] and doc["data"]["blame"]["nics"] == []


@pytest.mark.parametrize("test", ["ping", "bw"])
def test_two_liars_whose_figures_disagree_with_one_innocents_do_not_get_it_named(test):
    """Issue 53: two colluding liars carrying figures on their pairs with n1 that no honest pair
    has (a round trip far under the fabric's best; counts received that disagree with what n1
    says it sent) put n1 at odds with two partners, and two was enough to name it for
    inconsistent reports. Now more than f (verdict.MIN_CONTRADICTED) are needed."""
    lie = LIES[("ping", "too fast")] if test == "ping" else LIES[("bw", "more received than sent")]

    def both(rec):
        return lie(rec) if rec.get("type") == "pair" and rec["peer"] == 1 else rec

    doc, c = mesh(8, test, 6, both, base=lambda rec: both(rec) if rec.get("rank") == 7 else rec)
    assert "n01" not in named(doc), (named(doc), doc["warnings"][:3])


@pytest.mark.parametrize("test", ["ping", "probe"])
@pytest.mark.parametrize("lie", ["counters", "refuse"])
def test_three_liars_of_a_large_mesh_name_no_innocent(lie, test):
    """Issue 70: with three liars (one more than f) an innocent was blamed at any size, from
    the common-ends rule's lone pairs. The witnesses a NIC is blamed from must now be more than
    a share of its tested partners too (blame.LIAR_SHARE): three of 63 partners are not, so the
    pairs stay with the liars; the cabal a fleet tolerates grows with it."""
    doc = accused(64, 1, False, {5, 9, 40}, (1, 0), test, lie)
    blame = doc["data"]["blame"]
    assert blame["nodes"] == [] and blame["nics"] == [], blame
    for x in blame["links"] + blame["unexplained"]:
        assert {x["a"], x["b"]} & {"n5", "n9", "n40"}, x
    assert doc["data"]["liars_share"] == 0.125


def test_a_nic_lossy_with_a_third_of_a_large_mesh_is_still_found():
    """The share's cost is bounded: a NIC whose loss shows on a seventh of 63 partners (a NIC
    dropping a few packets shows on some pairs only) is still the one fault that explains them."""
    witnesses = set(range(2, 64, 7))  # 9 partner nodes: more than an eighth
    doc = accused(64, 1, False, witnesses, (1, 0), "ping", "counters")
    assert [b["node"] for b in doc["data"]["blame"]["nodes"]] == ["n1"], doc["data"]["blame"]
