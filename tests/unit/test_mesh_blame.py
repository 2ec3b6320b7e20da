"""Blame on synthetic results, merging both ends of a pair, and the coordinator's distrust of
agent output (records of another run, pairs the schedule does not have)."""

from __future__ import annotations

import json

import pytest
from meshdata import judged, make_plan, report

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import blame as _blame
from rdmacli.mesh import midrun, said, schedule
from rdmacli.mesh.findings import ErrorDoc, Slow
from rdmacli.mesh.intake import Intake
from rdmacli.mesh.report import Pair, cause_of, compare


def blame(*args, **kw) -> dict:
    """The blame as its JSON says it (data.blame): what these cases assert on."""
    return _blame.blame(*args, **kw).to_json()


NAMES = [f"n{i}" for i in range(8)]


def error(cause: Cause, message: str) -> dict:
    return RdmacliError(message, cause=cause).to_dict()


DOWN = error(Cause.LOCAL_PORT_DOWN, "resolve addr: port 1 of rxe_n3 is DOWN")
TMO = error(Cause.DEADLINE, "listen: no request from the partner within the round")
UNR = error(Cause.UNREACHABLE, "cm connect: UNREACHABLE")


@pytest.fixture(params=["as written", "reworded"], autouse=True)
def wording(request, monkeypatch):
    """Every test here runs twice: the second time every message an error carries is replaced,
    so blame that read words instead of causes would change (issue 18: causes are data)."""
    if request.param == "reworded":
        real = RdmacliError.to_dict

        def to_dict(self):
            return {**real(self), "message": "reworded", "hint": "reworded"}

        monkeypatch.setattr(RdmacliError, "to_dict", to_dict)
        for e in (DOWN, TMO, UNR):
            monkeypatch.setitem(e, "message", "reworded")
    return request.param


def full_mesh(n, fail):
    """Every pair of n nodes; fail(a, b) -> (listener error, connector error) or None."""
    pairs = []
    for rnd in range(schedule.round_count(n)):
        for a, b in schedule.pairs(n, rnd):
            p = Pair(a, b, rnd)
            errs = fail(a, b)
            for side, rank, peer, err in (
                ("listen", a, b, errs and errs[0]),
                ("connect", b, a, errs and errs[1]),
            ):
                p.reports[side] = report(rank, peer, "fail" if errs else "pass", err or None, rnd)
            pairs.append(p)
    return pairs


def test_a_node_down_is_blamed_not_its_partners():
    def fail(a, b):
        if 3 in (a, b):
            return (TMO, DOWN) if b == 3 else (DOWN, TMO)
        return None

    v = blame(8, full_mesh(8, fail), NAMES)
    assert [b["node"] for b in v["nodes"]] == ["n3"]
    assert v["nodes"][0]["failed"] == 7 and v["nodes"][0]["causes"] == {"DOWN": 7}
    assert v["links"] == [] and v["unexplained"] == []


def test_a_blocked_link_is_blamed_not_its_nodes():
    v = blame(8, full_mesh(8, lambda a, b: (TMO, UNR) if (a, b) == (2, 5) else None), NAMES)
    assert v["nodes"] == []
    assert v["links"] == [{"a": "n2", "b": "n5", "cause": "UNR"}]


def test_two_bad_nodes_do_not_drag_down_the_good_ones():
    v = blame(6, full_mesh(6, lambda a, b: (TMO, TMO) if {a, b} & {0, 1} else None), NAMES)
    assert sorted(b["node"] for b in v["nodes"]) == ["n0", "n1"]
    assert v["links"] == []


def test_two_nodes_alone_cannot_tell_node_from_link():
    v = blame(2, full_mesh(2, lambda a, b: (TMO, UNR)), NAMES)
    assert v["nodes"] == [] and v["links"] == []
    assert v["unexplained"] == [{"a": "n0", "b": "n1", "cause": "UNR"}]


def test_the_most_telling_end_names_the_cause():
    p = Pair(0, 1, 0, {"listen": report(0, 1, "fail", TMO), "connect": report(1, 0, "fail", DOWN)})
    assert p.result == "fail" and p.cause == "DOWN"
    code = lambda doc: cause_of(ErrorDoc.of(doc))  # noqa: E731 (as the intake types it)
    assert code(error(Cause.ROUTE, "resolve route: ROUTE_ERROR")) == "ROUTE"
    assert code(error(Cause.NOBODY_LISTENING, "x: nothing is listening at 10.0.0.1:7490")) == "NOLSN"
    assert code({"message": "nothing is listening", "cause": ["x"]}) == "FAIL"  # malformed: no guess
    assert code({"message": "unreachable"}) == "FAIL"  # no cause: the words decide nothing
    assert Pair(0, 1, 0).result == "missing" and Pair(0, 1, 0).cause == "MISS"


def test_a_failed_transfer_with_loss_counters_and_a_live_partner_is_loss():
    """RETRY_EXC while the NIC retransmitted: loss, when the partner reported the pair too (it
    was alive); alone, or with no counter moving, it stays FAIL (a dead peer looks the same)."""
    retry = error(Cause.TRANSFER, "work completion: RETRY_EXC")
    moved = ({"device": "rxe0", "port": 1, "moved": {"completer_retry_err": 2}},)
    ends = {"listen": report(0, 1, "fail", error(Cause.PEER_ENDED, "x")),
            "connect": report(1, 0, "fail", retry, counters=moved)}  # fmt: skip
    p = Pair(0, 1, 0, dict(ends))
    assert p.cause == "LOSS" and p.error().reported_code == "FAIL"
    assert Pair(0, 1, 0, {"connect": ends["connect"]}).cause == "FAIL"
    still = Pair(0, 1, 0, {**ends, "connect": report(1, 0, "fail", retry)})
    assert still.cause == "FAIL"
    rnr = ({"device": "rxe0", "port": 1, "moved": {"rcvd_rnr_err": 1}},)
    assert Pair(0, 1, 0, {**ends, "connect": report(1, 0, "fail", retry, counters=rnr)}).cause == "RNR"
    # a cause that is not a transfer's is never changed by counters here (the agent's own job)
    late = {"listen": report(0, 1, "fail", TMO), "connect": report(1, 0, "fail", TMO, counters=moved)}
    tmo = Pair(0, 1, 0, late)
    assert tmo.cause == "TMO"


def test_baseline_flags_pairs_that_started_failing_or_got_slower():
    old = {"command": "mesh", "data": {"pairs": [
        {"a": "n0", "b": "n1", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
        {"a": "n0", "b": "n2", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
        {"a": "n1", "b": "n2", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
    ]}}  # fmt: skip
    from meshdata import pair_result

    new = [
        pair_result("n1", "n0", "fail", "UNR"),
        pair_result("n0", "n2", rtt_p50_us=11.0, rtt_p99_us=90.0),
        pair_result("n1", "n2", rtt_p50_us=11.0, rtt_p99_us=21.0),
    ]
    from rdmacli.mesh.inputs import baseline_pairs

    flagged = compare(baseline_pairs(old), new)
    assert [(f.a, f.b) for f in flagged] == [("n1", "n0"), ("n0", "n2")]
    assert flagged[0].change == "now failing" and "rtt_p99_us 20 -> 90" in flagged[1].change


def plan(n=4):
    return make_plan(NAMES[:n], [[f"10.0.0.{i}"] for i in range(n)])


def pair_rec(pl, rank, rnd, result="pass", **kw) -> dict:
    peer = schedule.partner(rank, rnd, pl.n)
    rec = {"type": "pair", "run": pl.spec.run_id, "rank": rank, "peer": peer, "round": rnd, "result": result}
    rec.update(kw)
    return rec


def test_the_collector_uses_only_records_of_this_run_that_the_schedule_has():
    pl = plan()
    c = Intake(pl)
    rnd = pl.rounds[0]
    good = pair_rec(pl, 0, rnd)
    peer = good["peer"]
    c.on_line("n0", json.dumps({**good, "run": "cd" * 8}), False)  # another run: not ours
    assert c.ignored == 1 and not c.violations
    for bad in (
        {**good, "peer": (peer % 3) + 1 if (peer % 3) + 1 != peer else 3 - peer},  # not its partner
        {**good, "rank": 9},  # no such node
        {**good, "rank": True},
        {**good, "result": "maybe"},
        {**good, "error": "text"},
    ):
        c.on_line("n0", json.dumps(bad), False)
    c.on_line("n0", "{broken", False)
    c.on_line("n0", "not json {", False)
    c.on_line("n0", json.dumps([1, 2]), False)
    assert len(c.violations[0]) == 6 and all(not p.reports for p in c.pairs.values())
    assert c.stderr["n0"] == ["not json {", "[1, 2]"]  # kept as words for a node that never reports
    c.on_line("n0", json.dumps({**good, "a": 99, "b": "x", "evil": "[red]x"}), False)  # a/b recomputed
    taken = c.pairs[(0, 0, peer, 0)].reports["listen"]
    assert taken.result == "pass" and (taken.rank, taken.peer) == (0, peer) and "evil" not in taken.to_dict()


def test_an_agent_speaks_only_for_its_own_node():
    """A stand-in agent on n3 prints records as ranks 0 and 1: named, never used; the honest
    records of n0 and n1 decide their pairs."""
    pl = plan()
    c = Intake(pl)
    for rnd in pl.rounds:
        for rank in (0, 1):
            if schedule.partner(rank, rnd, 4) in (2, 3) or schedule.partner(rank, rnd, 4) == 1 - rank:
                c.on_line("n3", json.dumps(pair_rec(pl, rank, rnd, "fail", error=TMO)), False)
    assert (
        c.violations[3]
        and all("record for rank" in v for v in c.violations[3])
        and not any(p.reports for p in c.pairs.values())
    )
    out = judged(pl, c).to_dict()
    assert any("n3's agent sent" in w for w in out["warnings"])
    assert [n["violations"] for n in out["data"]["nodes"]] == [0, 0, 0, len(c.violations[3])]


@pytest.mark.parametrize(
    "hostile",
    [
        {"error": {"message": 5}},
        {"error": {"message": "x", "cause": ["DOWN"]}},
        {"rtt_p99_us": "fast"},
        {"rtt_p50_us": float("nan")},
        {"steps_us": {"x": -1}},
        {"error": {"message": "x" * 10_000}},
        {"counters": [{"device": "rxe0", "port": 1, "moved": {"\x1b]0;owned\x07retry": 1}}]},
        {"counters": [{"device": "rxe0", "port": 1, "moved": {"[link=https://x]err[/link]": 1}}]},
        {"counters": [{"device": "[bold]rxe0", "port": 1, "moved": {"port_rcv_errors": 1}}]},
    ],
)
def test_a_malformed_record_is_its_senders_violation_and_the_run_goes_on(hostile):
    pl = plan()
    c = Intake(pl)
    rnd = pl.rounds[0]
    rec = pair_rec(pl, 0, rnd, "fail" if "error" in hostile else "pass", **hostile)
    c.on_line("n0", json.dumps(rec), False)
    assert len(c.violations[0]) == 1 and not c.pairs[(0, 0, rec["peer"], 0)].reports
    doc = judged(pl, c).to_dict()  # the summary still comes, valid JSON
    json.dumps(doc, allow_nan=False)


def test_lines_too_long_or_too_deep_are_refused_not_parsed():
    pl = plan()
    c = Intake(pl)
    c.on_line("n1", "{" + " " * 100_000 + "}", False)  # longer than any record: not parsed
    c.on_line("n1", "[" * 30_000 + "]" * 30_000, False)  # not a record: words, bounded
    c.on_line("n1", '{"a":' * 10_000 + "1" + "}" * 10_000, False)  # deeper than Python recurses
    assert c.violations[1] == ["a line of 100002 bytes", "a line that is not JSON"]
    assert len(c.stderr["n1"][0]) <= 300


def test_a_pair_passes_only_when_both_ends_say_so(wording):
    """An agent that prints its `agent` line and exits: its partners' passes do not make the
    pairs pass; its silence is its own cause, and it is the node blamed."""
    pl = plan()
    c = Intake(pl)
    for rank in range(4):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": rank}), False)
    for rnd in pl.rounds:
        for rank in (0, 1, 2):
            c.on_line(NAMES[rank], json.dumps(pair_rec(pl, rank, rnd)), False)
    out = judged(pl, c).to_dict()
    failing = [p for p in out["data"]["pairs"] if p["result"] == "fail"]
    assert len(failing) == 3 and {p["cause"] for p in failing} == {"SILENT"}
    assert all(p["error"]["cause"] == "silent_end" for p in failing)
    if wording == "as written":
        assert all("n3 never reported" in p["error"]["message"] for p in failing)
    assert [b["node"] for b in out["data"]["blame"]["nodes"]] == ["n3"] and out["exit_code"] != 0


def test_a_node_whose_agent_never_ran_is_blamed_with_its_launcher_words(wording):
    pl = plan()
    c = Intake(pl)
    for rank in (0, 1, 2):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": rank}), False)
    c.on_line("n3", "bash: rdmacli: command not found", True)
    c.on_exit("n3", 127)
    for rnd in pl.rounds:
        for a, b in schedule.pairs(4, rnd):
            for rank, peer in ((a, b), (b, a)):
                if rank == 3:
                    continue
                err = None if 3 not in (a, b) else TMO
                rec = {"type": "pair", "run": pl.spec.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "result": "fail" if err else "pass", "error": err}  # fmt: skip
                c.on_line(NAMES[rank], json.dumps(rec), False)
    out = judged(pl, c).to_dict()
    assert out["exit_code"] == 1 and out["totals"]["pairs_failed"] == 3
    assert [b["node"] for b in out["data"]["blame"]["nodes"]] == ["n3"]
    failing = [p for p in out["data"]["pairs"] if p["result"] == "fail"]
    assert {p["cause"] for p in failing} == {"AGENT"}
    assert failing[0]["error"]["cause"] == "agent"
    if wording == "as written":
        message = failing[0]["error"]["message"]
        assert "exit status 127" in message and "command not found" in message


def test_words_from_agents_reach_a_terminal_escaped(capsys, wording):
    from rdmacli.cli.app import App
    from rdmacli.render.mesh import print_mesh

    pl = plan()
    c = Intake(pl)
    for rank in (0, 1, 2):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": rank}), False)
    c.on_line("n3", "\x1b]0;owned\x07\x1b[2J junk", True)
    c.on_exit("n3", 1)
    out = judged(pl, c)
    print_mesh(App(), out, out.report)
    App().report_error(RdmacliError("agent said \x1b[2J", cause=Cause.AGENT))
    out = capsys.readouterr()
    assert "\x1b]" not in out.out + out.err and "\x1b[2J" not in out.out + out.err
    if wording == "as written":
        assert "\\x1b]0;owned\\x07" in out.out


def test_a_name_with_rich_markup_or_an_escape_is_printed_as_text(capsys):
    """Behind the intake's check (names as sysfs has them), the renderer still prints a
    device's or a counter's name as text: no style taken, no sequence sent."""
    from dataclasses import replace

    from rdmacli.cli.app import App
    from rdmacli.mesh.findings import Blame, Culprit
    from rdmacli.render.mesh import print_mesh

    pl = plan()
    out = judged(pl, Intake(pl))
    odd = {"[link=https://evil]x[/link]\x1b[2J": 3}
    blamed = Blame(nodes=(Culprit("n1", 1, 3, 3, {"LOSS": 3}, counters=odd),),
                   nics=(Culprit("n2", 2, 2, 3, {"LOSS": 2}, rail=0, device="[blink]rxe1"),))  # fmt: skip
    print_mesh(App(), out, replace(out.report, blame=blamed))
    out = capsys.readouterr().out
    assert "\x1b[2J" not in out and "[link=https://evil]x[/link]" in out and "[blink]rxe1" in out


def test_a_line_the_launcher_cut_is_its_senders_violation():
    from rdmacli.mesh.records import OVERLONG

    c = Intake(plan())
    c.on_line("n1", '{"type": "pair", "run"' + OVERLONG, False)
    assert c.violations == {1: ["a line of over 65536 bytes"]}


def lossy_mesh(n: int, lossy: set) -> list[Pair]:
    """Every pair of n nodes passes; those in `lossy` ({a, b} sets) with a retransmit counted."""
    moved = ({"device": "rxe0", "port": 1, "moved": {"completer_retry_err": 1}},)
    pairs = []
    for rnd in range(schedule.round_count(n)):
        for a, b in schedule.pairs(n, rnd):
            extra = {"counters": moved} if frozenset((a, b)) in lossy else {}
            p = Pair(a, b, rnd)
            p.reports = {
                "listen": report(a, b, "pass", None, rnd),
                "connect": report(b, a, "pass", None, rnd, **extra),
            }
            pairs.append(p)
    return pairs


def test_a_node_common_to_lossy_pairs_its_partners_have_alone_is_the_node_blamed():
    """A 5 % lossy node shows on a few of its pairs only: one bad node explains them, where
    three bad links would take three faults; lone lossy pairs stay links. Two such pairs are
    not enough (issue 53): that is what two agents lying together (blame.LIARS) can make, by
    claiming their own counters moved on their pairs with an innocent node."""
    v = blame(8, lossy_mesh(8, {frozenset((5, 4)), frozenset((5, 7)), frozenset((5, 1))}), NAMES)
    assert [b["node"] for b in v["nodes"]] == ["n5"] and v["links"] == [], v
    v = blame(8, lossy_mesh(8, {frozenset((5, 4)), frozenset((5, 7))}), NAMES)
    assert v["nodes"] == [] and v["nics"] == [] and len(v["links"]) == 2, v
    v = blame(8, lossy_mesh(8, {frozenset((2, 7))}), NAMES)
    assert v["nodes"] == [] and [{x["a"], x["b"]} for x in v["links"]] == [{"n2", "n7"}]
    v = blame(8, lossy_mesh(8, {frozenset((0, 1)), frozenset((2, 3))}), NAMES)  # two links, no end shared
    assert v["nodes"] == [] and len(v["links"]) == 2


def test_a_bad_node_carries_its_pairs_counters_from_both_ends():
    """The lab: n05 dropped packets and its partners retransmitted (their counters moved, not
    its own): the node is named with the counters that name it, its own apart."""
    lossy = {frozenset((5, 6)), frozenset((5, 7)), frozenset((5, 8))}
    v = blame(10, lossy_mesh(10, lossy), [f"n{i}" for i in range(10)])  # n5 listens: theirs moved
    [node] = v["nodes"]
    assert node["counters"] == {"completer_retry_err": 3} and "own_counters" not in node


def test_first_attempts_that_failed_without_counters_and_passed_again_name_nobody():
    """CI's red: on an overloaded lab host n08's pairs with n01 (its listener up late: NOLSN)
    and n02 (resolve addr still running at the slot's end: OVER) failed once, no counter moving,
    and passed their re-tests. Two such pairs at one node are the host's noise, not a bad node;
    the same two first attempts with retransmits counted are a lossy node (issue 31's rule)."""
    from dataclasses import replace

    nolsn = error(Cause.NOBODY_LISTENING, "cm connect: nothing is listening")
    over = error(Cause.OVERRUN, "resolve addr: still running at the end of this pair's slot")
    moved = ({"device": "rxe0", "port": 1, "moved": {"completer_retry_err": 3}},)
    for counters, named in (((), []), (moved, ["n7"])):
        pairs = full_mesh(8, lambda a, b: None)
        for p in pairs:
            if {p.a, p.b} in ({0, 7}, {1, 7}, {2, 7}):
                first = replace(p, reports=dict(p.reports))
                err = nolsn if p.a != 1 else over
                first.reports["connect"] = report(
                    7, p.a, "fail", err, p.round, **({"counters": counters} if counters else {})
                )
                p.first = first
        v = blame(8, pairs, NAMES)
        assert [b["node"] for b in v["nodes"]] == named and v["links"] == [], v


def test_one_unreachable_partner_and_one_slow_one_are_two_faults_not_a_bad_nic():
    """CI's red of the probe's lab test: n02's NIC on rail 0 reached every partner but n07
    (the blocked link) and was slow with one more; the minority rule took the two as one bad
    NIC. They show different symptoms: the link is named, the NIC is not; two pairs of one
    symptom at one end (from more than blame.LIARS partners) still name it."""
    pairs = full_mesh(8, lambda a, b: (UNR, UNR) if {a, b} == {1, 6} else None)
    for p in pairs:
        if {p.a, p.b} == {1, 3}:
            p.slow = Slow("rtt_p50_us", 900.0, 10.0, 20.0)
    v = blame(8, pairs, NAMES)
    assert v["nodes"] == [] and {"n1", "n6"} in [{x["a"], x["b"]} for x in v["links"]], v
    pairs = full_mesh(8, lambda a, b: (UNR, UNR) if {a, b} in ({1, 6}, {1, 3}, {1, 4}) else None)
    assert [b["node"] for b in blame(8, pairs, NAMES)["nodes"]] == ["n1"]


def test_a_pair_slow_only_while_its_hosts_were_busy_is_not_slow_a_slow_wire_is():
    """The lab's probe on 32 emulated NICs: a few pairs' typical round trips far above the rest
    while their fastest was the fabric's own (a prober waiting for a CPU). Slow is the wire's:
    its fastest round trip slow too (x2 the fastest pair's and above the typical median)."""
    from rdmacli.mesh.blame import judge_slow

    def mesh_with(p50_of, min_of):
        pairs = []
        for rnd in range(schedule.round_count(8)):
            for a, b in schedule.pairs(8, rnd):
                p = Pair(a, b, rnd)
                p50, low = p50_of(a, b), min_of(a, b)
                fig = {
                    "rtt_p50_us": p50,
                    "rtt_p99_us": p50 * 1.2,
                    "host_rtt_p50_us": p50 + 1,
                    "rtt_min_us": low,
                }
                p.reports = {"listen": report(a, b, "pass", None, rnd),
                             "connect": report(b, a, "pass", None, rnd, **fig)}  # fmt: skip
                pairs.append(p)
        return pairs

    busy = mesh_with(lambda a, b: 900.0 if {a, b} == {2, 5} else 10.0, lambda a, b: 9.0)
    judge_slow(busy, 2.0, 0.9)
    assert not [p for p in busy if p.slow]
    wire = mesh_with(
        lambda a, b: 900.0 if {a, b} == {2, 5} else 10.0, lambda a, b: 300.0 if {a, b} == {2, 5} else 9.0
    )
    judge_slow(wire, 2.0, 0.9)
    assert [(p.a, p.b) for p in wire if p.slow] == [(2, 5)]


@pytest.mark.parametrize("again", ["clean", "lossy"])
def test_a_pair_that_passed_with_one_retransmit_is_tested_again_before_a_link_is_blamed(again):
    """A CI red (a healthy two-rail lab run, exit 1: "every pair passed, but the
    NICs' counters show trouble on n02:0-n07:0, n04:1-n05:1"): one retransmit in a pair's slot
    on a host too busy to answer in time blamed a link. A passing pair whose loss counter moved
    is re-tested like a failed one: clean again, it is transient (a warning, exit 0); lossy again,
    the link is blamed for loss (exit 1, PACKET_LOSS)."""
    pl = make_plan(NAMES[:4], [[f"10.0.0.{i}"] for i in range(4)], retest_rounds=2)
    c = Intake(pl)
    for rank in range(4):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": rank}), False)
    moved = [{"device": "rxe0", "port": 1, "moved": {"completer_retry_err": 1}}]
    for rnd in pl.rounds:
        for rank in range(4):
            rec = pair_rec(pl, rank, rnd)
            if {rank, rec["peer"]} == {1, 2} and rank == 2:
                rec["counters"] = moved
            c.on_line(NAMES[rank], json.dumps(rec), False)
    rounds = midrun.choose_retests(pl, list(c.pairs.values()), c.ready_nics())
    assert rounds == [[(1, 0, 2, 0)]], rounds
    base = pl.schedule.retest_base()
    c.set_retests(rounds, base)
    for rank, peer in ((1, 2), (2, 1)):
        rec = {"type": "pair", "run": pl.spec.run_id, "rank": rank, "peer": peer, "round": base}
        rec["result"] = "pass"
        if again == "lossy" and rank == 2:
            rec["counters"] = moved
        c.on_line(NAMES[rank], json.dumps(rec), False)
    out = judged(pl, c).to_dict()
    [pair] = [p for p in out["data"]["pairs"] if {p["a"], p["b"]} == {"n1", "n2"}]
    assert pair["retest"]["first"]["cause"] == "LOSS" and pair["result"] == "pass", pair
    blamed = out["data"]["blame"]
    assert blamed["nodes"] == [] and blamed["nics"] == []
    if again == "clean":
        assert pair["retest"]["verdict"] == "transient" and blamed["links"] == [], blamed
        assert out["exit_code"] == 0 and any("lost packets once" in w for w in out["warnings"]), out
    else:
        assert pair["retest"]["verdict"] == "confirmed", pair
        assert [(x["a"], x["b"], x["cause"]) for x in blamed["links"]] == [("n1", "n2", "LOSS")], blamed
        assert out["exit_code"] != 0 and out["error"]["cause"] == Cause.PACKET_LOSS.value, out["error"]


def test_the_round_time_advice_stays_within_what_the_option_takes_and_is_said_once(capsys):
    """A pair that took most of its slot: the advice names a --round-time the option takes; a
    figure no slot could hold (a clock that jumped, an agent's lie: 86 400 s) gets words, not
    `--round-time 123429`. Said as it showed, it is not said again with the summary."""
    from rdmacli.cli.app import App
    from rdmacli.render.mesh import LiveMesh
    from rdmacli.render.summary import print_warnings

    pl = plan()
    p = Pair(0, 1, 1)
    assert "raise --round-time to " in said.margin(pl, (3.5, p))
    words = said.margin(pl, (86400.0, p))
    assert "--round-time to" not in words and "more than any --round-time allows (3600 s)" in words
    app = App()
    LiveMesh(app).warning(words)
    print_warnings(app, [words, "another"])
    err = capsys.readouterr().err
    assert err.count("more than any --round-time") == 1 and "warning: another" in err


LATE = error(Cause.AGENT, "this node's agent reached round 2 1.7 s after its slot ended (started late)")


def late_run(retest_passes: bool | None):
    """Eight nodes, every pair passing but n5's with n2: n5's agent reached that slot late (its
    own AGENT record), n2 waited for it (TMO). retest_passes None: no re-test round ran."""
    addrs = [[f"10.0.0.{i}"] for i in range(8)]
    pl = make_plan(NAMES, addrs, retest_rounds=0 if retest_passes is None else 1)
    c = Intake(pl)
    for rank in range(8):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": rank}), False)
    late_round = None
    for rnd in pl.rounds:
        for a, b in schedule.pairs(8, rnd):
            bad = {a, b} == {2, 5}
            late_round = rnd if bad else late_round
            for rank, peer in ((a, b), (b, a)):
                err = (LATE if rank == 5 else TMO) if bad else None
                rec = {"type": "pair", "run": pl.spec.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "result": "fail" if err else "pass", "error": err}  # fmt: skip
                c.on_line(NAMES[rank], json.dumps(rec), False)
    rounds = midrun.choose_retests(pl, list(c.pairs.values()), c.ready_nics())
    if retest_passes is not None:
        assert rounds == [[(2, 0, 5, 0)]], rounds  # a late agent's pair is tested again
        c.set_retests(rounds, pl.schedule.retest_base())
        for rank, peer in ((2, 5), (5, 2)):
            err = None if retest_passes else (LATE if rank == 5 else TMO)
            rec = {"type": "pair", "run": pl.spec.run_id, "rank": rank, "peer": peer,
                   "round": pl.schedule.retest_base(), "result": "fail" if err else "pass", "error": err,
                   "retest": True}  # fmt: skip
            c.on_line(NAMES[rank], json.dumps(rec), False)
    return judged(pl, c).to_dict()


@pytest.mark.parametrize("retest_passes", [None, True, False])
def test_a_late_agents_pair_is_tested_again_and_never_blames_a_link_or_a_nic(retest_passes):
    """Issue 70: in the lab an agent reached its round 1.7 s after its slot ended; the pair failed
    AGENT, was not tested again, and was blamed as a bad link (exit 1). Lateness is the agent's own
    condition: its pair is re-tested like a failed one, and whatever the re-test says of lateness
    no NIC, node or link is blamed on it; the late node's row says `late`."""
    out = late_run(retest_passes)
    b = out["data"]["blame"]
    assert b["links"] == [] and b["nics"] == [] and b["nodes"] == [] and b["unexplained"] == [], b
    rows = {r["node"]: r for r in out["data"]["nodes"]}
    assert rows["n5"]["agent"] == "late" and rows["n2"]["agent"] == "ran", rows["n5"]
    if retest_passes:
        pair = next(p for p in out["data"]["pairs"] if {p["a"], p["b"]} == {"n2", "n5"})
        assert pair["result"] == "pass" and pair["retest"]["verdict"] == "transient", pair


def test_a_run_interrupted_while_its_agents_start_blames_nobody():
    """Issue 75: Ctrl-C while a mesh's agents started ended with "bad node n1: failed or was slow
    with 1 of 1 partners". A stopped run blames on what both ends of a pair said, never on ends
    that had no time to speak."""
    pl = make_plan(NAMES[:4], [[f"10.0.0.{i}"] for i in range(4)])
    c = Intake(pl)
    c.on_line("n0", json.dumps({"type": "agent", "run": pl.spec.run_id, "rank": 0}), False)
    out = judged(pl, c, signal=2).to_dict()
    b = out["data"]["blame"]
    assert b["nodes"] == [] and b["nics"] == [] and b["links"] == [], b
    assert out["result"] == "interrupted", out["result"]
