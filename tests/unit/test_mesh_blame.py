"""Blame on synthetic results, merging both ends of a pair, and the coordinator's distrust of
agent output (records of another run, pairs the schedule does not have)."""

from __future__ import annotations

import json

import pytest

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import schedule
from rdmacli.mesh.coordinator import Collector, Plan, outcome, start_plan
from rdmacli.mesh.report import Pair, blame, cause_of, compare

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
            for side, rank, err in (("listen", a, errs and errs[0]), ("connect", b, errs and errs[1])):
                p.reports[side] = {"rank": rank, "result": "fail" if errs else "pass", "error": err or None}
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
    v = blame(4, full_mesh(4, lambda a, b: (TMO, TMO) if {a, b} & {0, 1} else None), NAMES)
    assert sorted(b["node"] for b in v["nodes"]) == ["n0", "n1"]
    assert v["links"] == []


def test_two_nodes_alone_cannot_tell_node_from_link():
    v = blame(2, full_mesh(2, lambda a, b: (TMO, UNR)), NAMES)
    assert v["nodes"] == [] and v["links"] == []
    assert v["unexplained"] == [{"a": "n0", "b": "n1", "cause": "UNR"}]


def test_the_most_telling_end_names_the_cause():
    p = Pair(
        0, 1, 0, {"listen": {"result": "fail", "error": TMO}, "connect": {"result": "fail", "error": DOWN}}
    )
    assert p.result == "fail" and p.cause == "DOWN"
    assert cause_of(error(Cause.ROUTE, "resolve route: ROUTE_ERROR")) == "ROUTE"
    assert cause_of(error(Cause.NOBODY_LISTENING, "x: nothing is listening at 10.0.0.1:7490")) == "NOLSN"
    assert cause_of({"message": "nothing is listening", "cause": ["x"]}) == "FAIL"  # malformed: no guess
    assert cause_of({"message": "unreachable"}) == "FAIL"  # no cause: the words decide nothing
    assert Pair(0, 1, 0).result == "missing" and Pair(0, 1, 0).cause == "MISS"


def test_baseline_flags_pairs_that_started_failing_or_got_slower():
    old = {"command": "mesh", "data": {"pairs": [
        {"a": "n0", "b": "n1", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
        {"a": "n0", "b": "n2", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
        {"a": "n1", "b": "n2", "result": "pass", "rtt_p50_us": 10.0, "rtt_p99_us": 20.0},
    ]}}  # fmt: skip
    new = [
        {"a": "n1", "b": "n0", "result": "fail", "cause": "UNR"},
        {"a": "n0", "b": "n2", "result": "pass", "rtt_p50_us": 11.0, "rtt_p99_us": 90.0},
        {"a": "n1", "b": "n2", "result": "pass", "rtt_p50_us": 11.0, "rtt_p99_us": 21.0},
    ]
    flagged = compare(old, new)
    assert [(f["a"], f["b"]) for f in flagged] == [("n1", "n0"), ("n0", "n2")]
    assert flagged[0]["change"] == "now failing" and "rtt_p99_us 20 -> 90" in flagged[1]["change"]


def plan(n=4):
    p = Plan(
        nodes_spec="n[0-3]", names=NAMES[:n], addresses=[f"10.0.0.{i}" for i in range(n)], run_id="ab" * 8,
        round_s=1, launch_s=1, port=7490, test="ping", count=5, quick=False,
    )  # fmt: skip
    start_plan(p)
    return p


def test_the_collector_uses_only_records_of_this_run_that_the_schedule_has():
    pl = plan()
    c = Collector(pl)
    rnd = pl.rounds[0]
    peer = schedule.partner(0, rnd, 4)
    good = {
        "type": "pair",
        "run": pl.run_id,
        "rank": 0,
        "peer": peer,
        "round": rnd,
        "result": "pass",
        "error": None,
    }
    for bad in (
        {**good, "run": "cd" * 8},  # another run
        {**good, "peer": (peer % 3) + 1 if (peer % 3) + 1 != peer else 3 - peer},  # not this round's partner
        {**good, "rank": 9},  # no such node
        {**good, "rank": True},
        {**good, "result": "maybe"},
        {**good, "error": "text"},
        [1, 2],
    ):
        c.on_line("n0", json.dumps(bad), False)
    c.on_line("n0", "not json {", False)
    c.on_line("n0", "{broken", False)
    assert c.ignored == 7 and all(not p.reports for p in c.pairs.values())
    assert c.stderr["n0"] == ["[1, 2]", "not json {"]  # kept as words for a node that never reports
    c.on_line("n0", json.dumps({**good, "a": 99, "b": "x"}), False)  # a/b are recomputed, not trusted
    assert c.pairs[(0, peer)].reports["listen"]["result"] == "pass"
    assert (c.pairs[(0, peer)].reports["listen"]["a"], c.pairs[(0, peer)].reports["listen"]["b"]) == (0, peer)


def test_a_node_whose_agent_never_ran_is_blamed_with_its_launcher_words(wording):
    pl = plan()
    c = Collector(pl)
    for rank in (0, 1, 2):
        c.on_line(NAMES[rank], json.dumps({"type": "agent", "run": pl.run_id, "rank": rank}), False)
    c.on_line("n3", "bash: rdmacli: command not found", True)
    c.on_exit("n3", 127)
    for rnd in pl.rounds:
        for a, b in schedule.pairs(4, rnd):
            for rank, peer in ((a, b), (b, a)):
                if rank == 3:
                    continue
                err = None if 3 not in (a, b) else TMO
                rec = {"type": "pair", "run": pl.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "result": "fail" if err else "pass", "error": err}  # fmt: skip
                c.on_line(NAMES[rank], json.dumps(rec), False)
    out = outcome(pl, c, {}, t0=0).to_dict()
    assert out["exit_code"] == 1 and out["totals"]["pairs_failed"] == 3
    assert [b["node"] for b in out["data"]["blame"]["nodes"]] == ["n3"]
    failing = [p for p in out["data"]["pairs"] if p["result"] == "fail"]
    assert {p["cause"] for p in failing} == {"AGENT"}
    assert failing[0]["error"]["cause"] == "agent"
    if wording == "as written":
        message = failing[0]["error"]["message"]
        assert "exit status 127" in message and "command not found" in message
