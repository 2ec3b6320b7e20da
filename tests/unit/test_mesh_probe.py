"""`--test probe` without RDMA: its schedule (every pair in one phase), its datagram, its
counts and figures, the records' checks and the verdict's reading of loss. The probe on the
wire is proven in the lab (tests/mesh)."""

from __future__ import annotations

import json

import pytest

from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import healthy
from rdmacli.mesh.contract import RunSpec
from rdmacli.mesh.records import PairRecord, Violation
from rdmacli.mesh.report import Pair
from rdmacli.mesh.schedule import Schedule
from rdmacli.probe import nic as nicprobe
from rdmacli.probe import tally, timing, wire

PARTNER = wire.partner_source(True, bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1]), 0)  # 10.0.0.1, RoCE
ELSEWHERE = wire.partner_source(True, bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 66]), 0)  # another node


def test_every_pair_is_probed_in_one_phase_and_each_nic_with_all_its_partners():
    s = Schedule(6, rails=2, at_once=True)
    assert s.rounds() == [0]
    assert len(s.nic_pairs(0)) == 15 * 2  # rail-aligned: every node pair, rail k with rail k
    mine = s.tests_of(2, 0)
    assert sorted({p for _, p, _ in mine}) == [0, 1, 3, 4, 5]
    assert all(r == pr for r, _, pr in mine)
    assert s.has_test(2, 0, 1, 4, 1) and not s.has_test(2, 0, 1, 4, 0)
    assert not s.has_test(2, 1, 1, 4, 1) and not s.has_test(2, 0, 1, 2, 1) and not s.has_test(2, 0, 0, 9, 0)
    cross = Schedule(4, rails=2, cross=True, at_once=True)
    assert len(cross.nic_pairs(0)) == 6 * 4 and cross.has_test(0, 0, 0, 3, 1)
    # every test one end has is the other end's too, and the coordinator's list is the union
    for sched in (s, cross):
        union = {(a, ra, b, rb) for a in range(sched.n) for ra, b, rb in sched.tests_of(a, 0) if a < b}
        assert union == set(sched.nic_pairs(0))


def test_group_and_sample_pairs_are_probed_as_they_are_tested():
    groups = ("a", "a", "a", "b", "b", "b")
    rounds = Schedule(6, pairs="sample", groups=groups, sample=2)
    once = Schedule(6, pairs="sample", groups=groups, sample=2, at_once=True)
    tested = {p for r in range(rounds.node_rounds()) for p in rounds.node_pairs(r)}
    assert set(once.node_pairs(0)) == tested
    assert all(once.has_test(x, 0, 0, y, 0) and once.has_test(y, 0, 0, x, 0) for x, y in tested)
    assert not once.has_test(0, 0, 0, 5, 0) or (0, 5) in tested
    assert once.most_partners() == max(len(once.partners(r)) for r in range(6))
    assert Schedule(6, at_once=True).most_partners() == 5


def test_the_datagram_round_trips_and_anything_else_is_not_one():
    d = wire.Datagram(wire.PROBE, b"\x01" * 8, 7, 3, 9, 123, 456, 789)
    key = bytes(16)
    raw = d.pack(key)
    assert len(raw) == wire.PAYLOAD and wire.parse(raw, key) == d
    assert wire.parse(b"RPRB", key) is None and wire.parse(b"X" * 64, key) is None
    assert wire.parse(raw[:4] + b"\x09" + raw[5:], key) is None  # neither probe nor reply
    assert wire.parse(raw, b"another key, 16B") is wire.FORGED


def test_the_responders_hold_is_taken_out_only_when_it_can_be():
    t = tally.Tally()
    for seq in range(4):
        t.posted(seq, 1_000_000 * seq)
    assert t.replied(0, 100_000, 40_000)  # 100 µs round trip, 40 µs hold: 60 µs of network
    assert t.replied(1, 1_100_000, 200_000)  # a hold longer than the whole: not taken out
    assert not t.replied(1, 1_200_000, 0)  # a second reply to one probe counts once
    assert not t.replied(9, 1_200_000, 0)  # a reply to no probe of ours
    assert t.replied(2, 2_000_100, -1)  # no hold given; a round trip under the floor is the floor
    fig = t.figures()
    assert fig.probes_sent == 4 and fig.probes_answered == 3 and t.lost == fig.lost == 1
    assert fig.rtt_p50_us == 60.0 and fig.host_rtt_p50_us == 100.0
    assert fig.rtt_p50_us <= fig.rtt_p99_us and fig.rtt_p50_us <= fig.host_rtt_p50_us
    PairRecord.parse(
        {"type": "pair", "run": "ab" * 8, "rank": 1, "peer": 0, "round": 0, "result": "pass", **fig.to_dict()}
    )  # fmt: skip  (what an agent prints passes its checks)


def test_one_ends_result_comes_from_its_own_counts():
    t = tally.Tally()
    assert tally.verdict(t, False, None)[1].cause == Cause.UNREACHABLE
    assert tally.verdict(t, True, None)[1].cause == Cause.DEADLINE
    t.posted(1, 0)
    assert tally.verdict(t, True, None)[1].cause == Cause.LOSS
    t.posted(2, 0)
    t.replied(2, 5000, 0)
    assert tally.verdict(t, True, None) == ("pass", None)


def _rec(rank, peer, sent, answered, result="pass"):
    return PairRecord(run="ab" * 8, rank=rank, peer=peer, round=0, result=result,
                      probes_sent=sent, probes_answered=answered)  # fmt: skip


def test_a_pair_that_lost_probes_is_lossy_and_says_how_many():
    p = Pair(0, 1, 0)
    p.reports = {"listen": _rec(0, 1, 20, 20), "connect": _rec(1, 0, 20, 17)}
    assert p.result == "pass" and p.lossy and p.bad and p.lost() == 3 and p.probes() == (40, 37)
    doc = p.judged(["n0", "n1"]).to_json()
    assert doc["cause"] == "LOSS" and doc["probes_sent"] == 40 and doc["probes_answered"] == 37
    clean = Pair(0, 1, 0)
    clean.reports = {"listen": _rec(0, 1, 20, 20), "connect": _rec(1, 0, 20, 20)}
    assert not clean.lossy and clean.judged(["n0", "n1"]).cause is None


def test_a_probed_pair_is_as_slow_as_its_calmer_end_says():
    """Every probe crosses the wire both ways, whoever sent it: a slow wire slows both ends'
    round trips, a busy prober only its own. One end's slow figures make no slow pair."""
    from rdmacli.mesh import schedule
    from rdmacli.mesh.blame import judge_slow

    def rec(rank, peer, p50, low):
        return PairRecord(run="ab" * 8, rank=rank, peer=peer, round=0, result="pass", probes_sent=20,
                          probes_answered=20, rtt_p50_us=p50, rtt_p99_us=p50 * 1.2,
                          host_rtt_p50_us=p50 + 1, rtt_min_us=low)  # fmt: skip

    def fabric(slow_ends):
        pairs = []
        for rnd in range(schedule.round_count(8)):
            for a, b in schedule.pairs(8, rnd):
                p = Pair(a, b, 0)
                slow = {a, b} == {2, 5}
                fig = {e: (900.0, 300.0) if slow and e in slow_ends else (10.0, 9.0) for e in (a, b)}
                p.reports = {"listen": rec(a, b, *fig[a]), "connect": rec(b, a, *fig[b])}
                pairs.append(p)
        return pairs

    one_end = fabric({5})  # n5's agent starved: its own probes slow, n2's to it not
    judge_slow(one_end, 2.0, 0.9)
    assert not [p for p in one_end if p.slow]
    pair = next(p for p in one_end if {p.a, p.b} == {2, 5})
    assert pair.metric("rtt_p50_us") == 10.0 and pair.metric("rtt_min_us") == 9.0
    both = fabric({2, 5})  # the wire between them: both ends' round trips slow
    judge_slow(both, 2.0, 0.9)
    assert [(p.a, p.b) for p in both if p.slow] == [(2, 5)]
    # a connection test's figures stay the connector's (its listener measures no round trip)
    conn = Pair(0, 1, 0)
    conn.reports = {"listen": PairRecord(run="ab" * 8, rank=0, peer=1, round=0, result="pass"),
                    "connect": PairRecord(run="ab" * 8, rank=1, peer=0, round=0, result="pass",
                                          rtt_p50_us=50.0)}  # fmt: skip
    assert conn.metric("rtt_p50_us") == 50.0


def test_an_end_cannot_claim_more_answers_than_probes():
    with pytest.raises(Violation, match="probes_answered"):
        PairRecord.parse({"type": "pair", "run": "ab" * 8, "rank": 1, "peer": 0, "round": 0,
                          "result": "pass", "probes_sent": 3, "probes_answered": 4})  # fmt: skip
    with pytest.raises(Violation, match="probes_sent"):
        PairRecord.parse({"type": "pair", "run": "ab" * 8, "rank": 1, "peer": 0, "round": 0,
                          "result": "pass", "probes_sent": 2**64})  # fmt: skip


def test_the_phase_is_as_long_as_its_busiest_nic_needs_and_nothing_is_retested():
    from rdmacli.mesh.plan import Plan

    spec = RunSpec(run_id="ab" * 8, names=[f"n{i}" for i in range(16)],
                   addresses=[[f"10.0.{k}.{i}" for k in range(2)] for i in range(16)],
                   test="probe")  # fmt: skip
    plan = Plan.start(spec, nodes_spec="n[0-15]", launch_s=30, retest_rounds=2)
    assert plan.rounds == (0,) and plan.retest_rounds == 0 and not plan.spec.retests
    assert plan.spec.round_s >= timing.phase_s(15, spec.count)
    # 1000 nodes: the rate bound, not the gap, sets the phase; the matrix in well under 5 minutes
    assert timing.phase_s(999, 20) == timing.RESOLVE_S + 999 * 20 / timing.MAX_RATE + timing.TAIL_S < 120


def test_an_end_probing_more_than_the_run_asks_is_a_violation():
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan

    addrs = [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]]
    spec = RunSpec(run_id="ab" * 8, names=["a", "b", "c"], addresses=addrs,
                   test="probe", count=5)  # fmt: skip
    intake = Intake(Plan.start(spec, nodes_spec="a,b,c", launch_s=30))
    assert not intake.take_pair(_rec(2, 0, 6, 6))
    assert "6 probes" in intake.violations[2][0]
    assert intake.take_pair(_rec(2, 0, 5, 5)) and intake.take_pair(_rec(1, 2, 5, 4))
    assert not intake.take_pair(_rec(1, 1, 5, 5))  # itself: no such test


def test_a_late_loop_still_sends_every_probe_before_the_window_ends(monkeypatch):
    """The pacing alone (the verbs faked): a loop that wakes late catches up, so each resolved
    partner gets its --count probes before the send window closes, and none after."""
    from types import SimpleNamespace

    posted = []
    monkeypatch.setattr(
        nicprobe.verbs, "post_send", lambda qp, slot, mr, off, n, **kw: posted.append(kw["remote_qpn"])
    )
    peers = [nicprobe.Peer(rank, 0, rank, f"10.0.0.{rank}", 7490) for rank in (1, 2, 3)]
    nic = nicprobe.NicProbe(run=b"\0" * 8, key=bytes(16), nic=0, address="10.0.0.9", port=7490, peers=peers,
                            count=20, begin=0.0, end=10.0)  # fmt: skip
    assert callable(nic.run) and callable(nic.open) and callable(nic.close)  # no attribute hides them
    nic.mr = SimpleNamespace(write=lambda data, off: None)
    nic.listen_id = SimpleNamespace(qp=None, own=lambda ah: ah)
    nic.free_sends = list(range(64))
    for p in peers:
        p.ah, p.qpn, p.resolved = SimpleNamespace(ptr=None), 100 + p.rank, True
        nic._schedule(p, 2.0)
    now = 2.0
    while now < nic.send_end:
        nic._send_due(now)
        nic.free_sends = list(range(64))  # completions came
        now += 0.9  # a busy host: a turn every 0.9 s, far slower than the probes' step
    assert [p.tally.sent for p in peers] == [20, 20, 20] and len(posted) == 60
    nic._send_due(nic.send_end + 1)
    assert len(posted) == 60


def test_the_python_loop_drops_and_counts_what_its_key_did_not_tag(monkeypatch):
    """Probes and answers claiming a partner, tagged under another key (a forger's): never
    answered, never counted as answers, counted as forged; the partner's own still are."""
    from types import SimpleNamespace

    from rdmacli.probe import datagrams
    from rdmacli.rdma import constants as C

    key, run = bytes(range(16)), b"\2" * 8
    peers = [nicprobe.Peer(1, 0, 1, "10.0.0.1", 7490)]
    nic = nicprobe.NicProbe(run=run, key=key, nic=0, address="10.0.0.9", port=7490, peers=peers, count=5,
                            begin=0.0, end=10.0)  # fmt: skip
    sent = [
        wire.Datagram(wire.PROBE, run, 1, 1, 0, 5).pack(key),  # the partner's probe
        wire.Datagram(wire.PROBE, run, 2, 1, 0, 5).pack(b"forger's own key"),  # claiming the partner
        wire.Datagram(wire.REPLY, run, 1, 0, 1, 5, 6, 7).pack(bytes(16)),  # an answer nobody sent
        wire.Datagram(wire.REPLY, run, 1, 0, 1, 5, 6, 7).pack(key),  # the partner's answer
    ]
    nic.recvs, nic.free_sends = len(sent), []
    nic.mr = SimpleNamespace(read=lambda off, n: sent[off // wire.SLOT][:n])
    nic.listen_id = SimpleNamespace(qp=None, own=lambda ah: ah)
    wcs = [SimpleNamespace(wr_id=i, ok=True, opcode=C.WC_RECV, byte_len=wire.GRH_BYTES + wire.PAYLOAD,
                           status=0, src_qp=77, grh=False, slid=5) for i in range(len(sent))]  # fmt: skip
    nic.cq = SimpleNamespace(poll=lambda: [wcs.pop(0)] if wcs else [])
    monkeypatch.setattr(datagrams.verbs, "post_recv_slots", lambda *a: None)
    taken = []
    monkeypatch.setattr(nic, "_answer", lambda d, wc, slot, src, t: taken.append(("answer", d.seq)))
    monkeypatch.setattr(nic, "_counted", lambda d, wc, src, t: taken.append(("counted", d.seq)))
    nic._completions()
    assert taken == [("answer", 1), ("counted", 1)] and nic.forged == 2 == nic.forged_seen()


def test_an_answer_from_another_qp_than_sidr_named_is_dropped_and_counted(monkeypatch):
    """An answer tagged under the key (a key holder's) from another QP than the partner's SIDR
    named, or from a QP of its number on another node (a QP number is one device's: in the lab
    a forger's had n16's, and n15 took it for n16): never counted as an answer, counted as
    foreign; the partner's own is counted. A
    partner's probe is answered from whatever QP it came (its agent may have restarted: the
    tag says it holds the key)."""
    from types import SimpleNamespace

    from rdmacli.probe import datagrams
    from rdmacli.rdma import constants as C

    key, run = bytes(range(16)), b"\2" * 8
    peers = [nicprobe.Peer(1, 0, 1, "10.0.0.1", 7490)]
    nic = nicprobe.NicProbe(run=run, key=key, nic=0, address="10.0.0.9", port=7490, peers=peers, count=5,
                            begin=0.0, end=10.0)  # fmt: skip
    peers[0].qpn, peers[0].resolved, peers[0].source = 77, True, PARTNER
    peers[0].tally.posted(1, 5)
    sent = [  # (datagram, the QP it came from, that QP's node)
        (wire.Datagram(wire.REPLY, run, 1, 0, 1, 5, 6, 7).pack(key), 99, PARTNER),  # an answer from QP 99
        (wire.Datagram(wire.REPLY, run, 1, 0, 1, 5, 6, 7).pack(key), 77, ELSEWHERE),  # QP 77 of another node
        (wire.Datagram(wire.REPLY, run, 1, 0, 1, 5, 6, 7).pack(key), 77, PARTNER),  # the partner's own
        (wire.Datagram(wire.PROBE, run, 1, 1, 0, 5).pack(key), 66, PARTNER),  # its probe, from a new QP
    ]

    def read(off: int, n: int) -> bytes:
        raw, _, at = sent[off // wire.SLOT]
        return raw[:n] if off % wire.SLOT else bytes(8) + at[:16] + bytes(16)  # the datagram, or a GRH

    nic.recvs, nic.free_sends = len(sent), [len(sent) + k for k in range(8)]
    nic.mr = SimpleNamespace(read=read, write=lambda data, off: None, addr=0)
    nic.listen_id = SimpleNamespace(qp=None, pd=None, own=lambda ah: ah)
    wcs = [SimpleNamespace(wr_id=i, ok=True, opcode=C.WC_RECV, byte_len=wire.GRH_BYTES + wire.PAYLOAD,
                           status=0, src_qp=qp, grh=True, slid=0)
           for i, (_, qp, _) in enumerate(sent)]  # fmt: skip
    nic.cq = SimpleNamespace(poll=lambda: [wcs.pop(0)] if wcs else [])
    monkeypatch.setattr(datagrams.verbs, "post_recv_slots", lambda *a: None)
    monkeypatch.setattr(datagrams.verbs.AH, "from_wc", lambda pd, wc, grh, port: SimpleNamespace(
        ptr=None, destroy=lambda: None))  # fmt: skip
    replies = []
    monkeypatch.setattr(
        datagrams.verbs, "post_send", lambda qp, slot, mr, off, n, **kw: replies.append(kw["remote_qpn"])
    )
    nic._completions()
    assert peers[0].tally.answered == 1  # its own answer, once
    assert nic.foreign == 2 == nic.foreign_seen() and nic.forged == 0
    assert replies == [66]  # its probe answered where it came from


def test_a_sidr_token_is_taken_only_under_its_key():
    from rdmacli.probe import token as T

    tok = T.Token(b"\3" * 8, 0, 4, 9)
    data = b"\0" * T.OFFSET + T.seal(tok, bytes(16))
    assert T.opened(data, bytes(16)) == tok and T.parse(data) == tok
    assert T.opened(data, b"another key, 16B") is wire.FORGED
    assert T.opened(data[:-1], bytes(16)) is wire.FORGED  # the tag cut short
    forged = bytearray(data)
    forged[T.OFFSET + 14] ^= 1  # another source NIC, the tag kept
    assert T.opened(bytes(forged), bytes(16)) is wire.FORGED
    assert T.opened(b"\0" * T.OFFSET + b"not a token", bytes(16)) is None


def test_a_probe_run_on_a_host_without_rdma_ends_at_its_phase_and_says_why(monkeypatch):
    """The whole path through the library (coordinator, in-process agents, the phase) where the
    stack cannot open: every pair fails with the environment's words, nothing hangs, the
    run ends by itself and the verdict stands."""
    from meshfabric import Fabric, InProcessLaunch

    from rdmacli.errors import EnvironmentProblem
    from rdmacli.mesh import run as mesh

    def no_stack():
        raise EnvironmentProblem("no RDMA devices were detected (test)")

    monkeypatch.setattr(nicprobe.cm, "EventChannel", no_stack)
    monkeypatch.setattr(timing, "RESOLVE_S", 0.5)
    monkeypatch.setattr(timing, "TAIL_S", 0.5)
    spec = RunSpec(run_id="cd" * 8, names=["n1", "n2", "n3"], addresses=[[f"10.0.0.{i}"] for i in (1, 2, 3)],
                   test="probe", count=2, round_s=0.5)  # fmt: skip
    request = mesh.Request(spec=spec, nodes_spec="n[1-3]", launch_s=30, retest_rounds=2)
    doc = mesh.run(request, InProcessLaunch(Fabric())).to_dict()
    assert doc["totals"]["rounds"] == 1 and doc["totals"]["pairs"] == 3 and doc["totals"]["pairs_failed"] == 3
    for p in doc["data"]["pairs"]:
        assert p["cause"] == "ENV" and "no RDMA devices" in p["error"]["message"], p


def test_a_run_whose_pairs_passed_but_lost_probes_says_so_in_the_probes_words():
    from rdmacli.mesh import verdict
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan
    from rdmacli.mesh.records import AgentRecord, DoneRecord, RailState

    names = [f"n{i}" for i in range(4)]
    spec = RunSpec(run_id="ab" * 8, names=names, addresses=[[f"10.0.0.{i + 1}"] for i in range(4)],
                   test="probe", count=10)  # fmt: skip
    plan = Plan.start(spec, nodes_spec="n[0-3]", launch_s=30)
    intake = Intake(plan)
    for r in range(4):
        rails = (RailState(rail=0, address=f"10.0.0.{r + 1}", device="mlx5_0", port=7490, ready=True),)
        intake.take(AgentRecord(run=spec.run_id, rank=r, node=names[r], address=rails[0].address,
                                rails=rails, ready=True))  # fmt: skip
    for a in range(4):
        for b in range(4):
            if a != b:  # n2 loses 3 of its 10 probes' answers with everyone, both ways
                assert intake.take_pair(_rec(a, b, 10, 7 if 2 in (a, b) else 10))
    for r in range(4):
        intake.take(DoneRecord(run=spec.run_id, rank=r))
    outcome = verdict.judge(plan, intake.evidence(), {"test": "probe"}, elapsed_ms=1.0)
    doc = outcome.to_dict()
    assert doc["exit_code"] == 1 and doc["error"]["cause"] == "packet_loss", doc["error"]
    assert "18 probes were lost" in doc["error"]["message"] and "n2" in doc["error"]["message"]
    assert [n["node"] for n in doc["data"]["blame"]["nodes"]] == ["n2"]


# ---- at fleet size: healthy pairs said compactly (records.HealthyRecord, mesh/healthy.py) ------


def test_every_nic_test_has_one_index_both_ends_agree_on():
    groups = ("a",) * 4 + ("b",) * 4
    for sched in (Schedule(7, rails=2, at_once=True), Schedule(5, rails=3, cross=True, at_once=True),
                  Schedule(8, rails=2, pairs="sample", groups=groups, sample=3, at_once=True)):  # fmt: skip
        for rank in range(sched.n):
            for rail in range(sched.rails):
                tests = sched.nic_tests(rank, rail)
                assert len(tests) == sched.nic_tests_count(rank)
                assert sorted(tests) == sorted((p, pr) for r, p, pr in sched.tests_of(rank, 0) if r == rail)
                for i, (peer, peer_rail) in enumerate(tests):
                    assert sched.nic_index(rank, rail, peer, peer_rail) == i
                assert sched.nic_index(rank, rail, rank, rail) is None
                assert sched.nic_index(rank, rail, sched.n, rail) is None


def _ends(names, rails, lossy=(), slow=(), count=10):
    """Every end's pair record of a probe phase: NICs in `lossy` lose 2 probes with every
    partner, pairs touching a NIC in `slow` take 5x as long."""
    sched = Schedule(len(names), rails=rails, at_once=True)
    out = {r: [] for r in range(len(names))}
    for rank in range(len(names)):
        for rail in range(rails):
            for peer, peer_rail in sched.nic_tests(rank, rail):
                ends = {(rank, rail), (peer, peer_rail)}
                base = 10.0 + (rank + peer) % 3 * 0.1
                rtt = base * 5 if ends & set(slow) else base
                answered = count - 2 if ends & set(lossy) else count
                out[rank].append(PairRecord(run="ab" * 8, rank=rank, peer=peer, round=0, rail=rail,
                                            peer_rail=peer_rail, result="pass", probes_sent=count,
                                            probes_answered=answered, rtt_p50_us=round(rtt, 2),
                                            rtt_p99_us=round(rtt * 1.3, 2), rtt_min_us=round(rtt * 0.8, 2),
                                            host_rtt_p50_us=round(rtt + 4, 2)))  # fmt: skip
    return sched, out


def _judged(names, rails, per_rank, compact: bool, count=10, matrix=None):
    from rdmacli.mesh import verdict
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan
    from rdmacli.mesh.records import AgentRecord, DoneRecord, RailState

    addrs = [[f"10.{k}.0.{i + 1}" for k in range(rails)] for i in range(len(names))]
    spec = RunSpec(run_id="ab" * 8, names=names, addresses=addrs, test="probe", count=count)
    plan = Plan.start(spec, nodes_spec="sim", launch_s=30)
    intake = Intake(plan)
    for r, name in enumerate(names):
        states = tuple(RailState(rail=k, address=addrs[r][k], device=f"mlx5_{k}", port=7490, ready=True)
                       for k in range(rails))  # fmt: skip
        intake.take(
            AgentRecord(run=spec.run_id, rank=r, node=name, address=addrs[r][0], rails=states, ready=True)
        )
        recs = healthy.compact(plan.schedule, count, per_rank[r]) if compact else per_rank[r]
        for rec in recs:
            assert intake.on_line(name, __import__("json").dumps(rec.to_dict()), False) is not None
        intake.take(DoneRecord(run=spec.run_id, rank=r))
    assert not intake.violations
    return verdict.judge(plan, intake.evidence(), {"test": "probe"}, elapsed_ms=1.0, matrix=matrix).to_dict()


@pytest.mark.parametrize("listed", [2000, 0])
def test_compact_healthy_records_give_the_verdict_full_records_give(monkeypatch, listed):
    """The same phase said pair by pair and compactly: the same totals, blame, node and NIC
    tables; with every pair listed (a small run) the same pairs too, and with trouble only
    listed (LISTED_PAIRS 0: a fleet's run) only the lossy and slow ones."""
    from rdmacli.mesh import verdict

    monkeypatch.setattr(verdict, "LISTED_PAIRS", listed)
    names = [f"n{i}" for i in range(9)]
    sched, per_rank = _ends(names, 2, lossy=[(3, 1)], slow=[(6, 0)])
    compact = [len(healthy.compact(sched, 10, per_rank[r])) for r in range(9)]
    assert compact[0] == 2 + 1 and compact[3] == 1 + 8  # a NIC a record; its pairs with the lossy NIC apart
    full, small = _judged(names, 2, per_rank, False), _judged(names, 2, per_rank, True)
    assert small["totals"] == full["totals"] and small["totals"]["pairs"] == 72
    assert small["data"]["blame"] == full["data"]["blame"]
    assert [b["node"] + ":" + str(b["rail"]) for b in small["data"]["blame"]["nics"]] == ["n3:1", "n6:0"]
    for table in ("nodes", "nics"):
        assert small["data"][table] == full["data"][table], table
    assert small["data"]["slow_reference"] == full["data"]["slow_reference"]
    if listed:
        assert small["data"]["pairs"] == full["data"]["pairs"] and len(small["data"]["pairs"]) == 72
    else:
        assert {(p["a"], p["rail_a"], p["b"]) for p in small["data"]["pairs"]} == {
            (p["a"], p["rail_a"], p["b"]) for p in full["data"]["pairs"]
        }
        assert (
            all(p["cause"] in ("LOSS", "SLOW") for p in small["data"]["pairs"])
            and len(small["data"]["pairs"]) == 16
        )


def test_the_matrix_file_gets_every_pair_of_a_compact_probe_the_summary_only_the_troubled(monkeypatch):
    from rdmacli.mesh import verdict

    monkeypatch.setattr(verdict, "LISTED_PAIRS", 0)
    names = [f"n{i}" for i in range(6)]
    _, per_rank = _ends(names, 2, lossy=[(2, 0)])
    rows: list[dict] = []
    doc = _judged(names, 2, per_rank, True, matrix=lambda p: rows.append(p.to_json()))
    assert len(rows) == 30 and len({(p["a"], p["rail_a"], p["b"], p["rail_b"]) for p in rows}) == 30
    assert sum(p["cause"] == "LOSS" for p in rows) == 5 and len(doc["data"]["pairs"]) == 5
    clean = [p for p in rows if p["cause"] is None]
    assert all(p["probes_sent"] == p["probes_answered"] == 20 and p["rtt_p50_us"] >= 10 for p in clean)


def _healthy(**kw):
    from rdmacli.mesh.records import HealthyRecord

    d = {"type": "healthy", "run": "ab" * 8, "rank": 0, "rail": 0, "round": 0, "first": 0, "probes": 5,
         "rtt_p50_us": [10.0, None], "rtt_p99_us": [12.0, None], "host_rtt_p50_us": [14.0, None],
         "rtt_min_us": [9.5, None], **kw}  # fmt: skip
    return HealthyRecord.parse(d)


@pytest.mark.parametrize("bad", [
    {"rtt_p50_us": [float("nan"), None]}, {"rtt_p50_us": [1e300, None]}, {"rtt_p50_us": [0.01, None]},
    {"rtt_p50_us": [13.0, None]}, {"host_rtt_p50_us": [9.0, None]}, {"rtt_p99_us": [12.0]},
    {"rtt_p50_us": [True, None]}, {"rtt_p50_us": [10.0] * 2000, "rtt_p99_us": [12.0] * 2000,
                                   "host_rtt_p50_us": [14.0] * 2000, "rtt_min_us": [9.0] * 2000},
    {"first": -1}, {"probes": "5"}, {"rtt_p50_us": [None, None], "rtt_p99_us": [12.0, None]},
    {"rtt_min_us": [10.5, None]}, {"rtt_min_us": [0.1, None]}, {"rtt_min_us": [9.5]},
])  # fmt: skip
def test_a_healthy_record_of_no_round_trips_is_its_senders_violation(bad):
    assert _healthy().probes == 5 and list(_healthy().entries()) == [(0, 10.0, 12.0, 14.0, 9.5)]
    with pytest.raises(Violation):
        _healthy(**bad)


def test_an_end_says_a_test_once_healthy_or_in_its_own_record_and_only_tests_it_has():
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan

    addrs = [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]]
    spec = RunSpec(run_id="ab" * 8, names=["a", "b", "c"], addresses=addrs, test="probe", count=5)
    intake = Intake(Plan.start(spec, nodes_spec="a,b,c", launch_s=30))
    assert intake.take(_healthy()) is not None  # n0's test 0 (with b) healthy
    assert intake.take(_healthy()) is None and "second report" in intake.violations[0][-1]
    assert not intake.take_pair(_rec(0, 1, 5, 5)) and "second report" in intake.violations[0][-1]
    assert intake.take_pair(_rec(0, 2, 5, 4))  # its test with c, in a record of its own
    assert (
        intake.take(
            _healthy(first=1, rtt_p50_us=[10.0], rtt_p99_us=[12.0], host_rtt_p50_us=[14.0], rtt_min_us=[9.0])
        )
        is None
    )
    assert "second report" in intake.violations[0][-1]
    one = {"rtt_p50_us": [10.0], "rtt_p99_us": [12.0], "host_rtt_p50_us": [14.0], "rtt_min_us": [9.0]}
    for bad, words in (({"first": 2, **one}, "past its NIC's 2 partners"), ({"probes": 6}, "6 probes"),
                       ({"rail": 1}, "rail 1")):  # fmt: skip
        assert intake.take(_healthy(rank=1, **bad)) is None and words in intake.violations[1][-1], words
    rounds = Intake(Plan.start(RunSpec(run_id="ab" * 8, names=["a", "b", "c"], addresses=addrs),
                               nodes_spec="a,b,c", launch_s=30))  # fmt: skip
    assert rounds.take(_healthy()) is None and "run of rounds" in rounds.violations[0][-1]


def test_a_cross_rail_probe_on_separate_networks_is_refused_at_its_phases_end():
    """Rail-aligned pairs healthy (compact), every cross-rail pair unanswered: the rails are
    separate networks, and the run says so rather than blame each cross pair as a link; one
    cross-rail pair that passed and it goes on."""
    from rdmacli.mesh import midrun
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan

    names = [f"n{i}" for i in range(4)]
    addrs = [[f"10.{k}.0.{i + 1}" for k in range(2)] for i in range(4)]
    spec = RunSpec(run_id="ab" * 8, names=names, addresses=addrs, test="probe", count=5, cross_rail=True)

    def run(cross_ok: bool):
        plan = Plan.start(spec, nodes_spec="sim", launch_s=30)
        intake = Intake(plan)
        for rank in range(4):
            recs = []
            for rail in range(2):
                for peer, peer_rail in plan.schedule.nic_tests(rank, rail):
                    rec = {"run": spec.run_id, "rank": rank, "peer": peer, "round": 0, "rail": rail,
                           "peer_rail": peer_rail, "result": "pass", "probes_sent": 5, "probes_answered": 5,
                           "rtt_p50_us": 10.0, "rtt_p99_us": 12.0, "host_rtt_p50_us": 14.0}  # fmt: skip
                    if rail != peer_rail and not (cross_ok and {rank, peer} == {0, 1}):
                        why = {"message": "no answer to SIDR within 1 s", "cause": "unreachable"}
                        rec = {**rec, "result": "fail", "probes_answered": 0, "error": why}
                    recs.append(rec)
            for rec in healthy.compact(plan.schedule, 5, [PairRecord(**r) for r in recs]):
                assert intake.take(rec) is not None
        return midrun.probe_cross_rail_refusal(plan, intake.evidence())

    refused = run(cross_ok=False)
    assert refused is not None and "separate networks" in refused.message and refused.exit_code == 2
    assert run(cross_ok=True) is None


def test_a_nic_kept_open_probes_partners_that_answered_without_sidr_and_asks_again_when_they_restart(
    monkeypatch,
):
    """`rdmacli watch` keeps each NIC open from window to window (NicProbe.retarget): a partner
    that answered keeps its QP number and AH (no SIDR), one that answered nothing is asked again,
    one whose own probes come from another QP is asked again by SIDR while its count goes on:
    the QP we know is a key holder's claim (dismissed, counted foreign, never asked for again),
    a new one its agent restarted (its count starts afresh); every AH is destroyed once: the
    retired at the next window, the rest with the listener they hang on (rdma.handle)."""
    from types import SimpleNamespace

    from rdmacli.rdma.handle import Handle

    destroyed = []

    class Made(Handle):  # a C object whose destruction is recorded
        def __init__(self, name):
            self.kind, self.ptr = name, 1

        def _free(self):
            destroyed.append(self.kind)

    def ah(name):
        return Made(name)

    asked = []
    monkeypatch.setattr(
        nicprobe.cm.CmId, "create", lambda *a: asked.append(a) or (_ for _ in ()).throw(OSError(5, "x"))
    )
    peers = [nicprobe.Peer(rank, 0, rank, f"10.0.0.{rank}", 7490) for rank in (1, 2, 3)]
    nic = nicprobe.NicProbe(run=b"\1" * 8, key=bytes(16), nic=0, address="10.0.0.9", port=7490, peers=peers,
                            count=5, begin=0.0, end=10.0)  # fmt: skip
    nic.recvs, nic.sends, nic.free_sends = 64, 64, list(range(64, 128))
    nic.mr = SimpleNamespace(write=lambda data, off: None)
    channel = Made("channel")
    nic.listen_id = channel.own(Made("listener"))
    nic.listen_id.qp = None

    def reply_ah(name):  # made on the listener's PD, as the Python loop's replies are (datagrams)
        return nic.listen_id.own(ah(name))

    monkeypatch.setattr(nicprobe.verbs, "post_send", lambda *a, **kw: None)
    for p, answered in zip(peers[:2], (5, 0)):
        p.ah, p.qpn, p.qkey, p.resolved = ah(f"ah{p.rank}"), 100 + p.rank, 7, True
        p.tally.sent, p.tally.answered = 5, answered
    again = [nicprobe.Peer(rank, 0, rank, f"10.0.0.{rank}", 7490) for rank in (1, 2, 3)]
    nic.retarget(b"\2" * 8, again, 5)
    assert [p.known is not None for p in again] == [True, False, False]
    nic.phase(20.0, 30.0)
    nic._ask(20.0)
    one = again[0]
    assert one.resolved and one.cached and one.qpn == 101 and one.attempts == 0
    assert len(asked) == 2 and [p.attempts for p in again[1:]] == [1, 1]  # SIDR for the other two
    nic._send_due(20.0 + one.step)  # its first probe a random part of a step late: not all at once
    sent = one.tally.sent
    assert sent >= 1
    nic.ahs[(1, 0)] = (101, PARTNER, reply_ah("reply1"))  # its probes from the QP we know: nothing to do
    nic._stale(20.5)
    assert one.resolved and one.tally.sent == sent
    # from another QP: a restart, or a key holder claiming it
    nic.ahs[(1, 1)] = (555, PARTNER, reply_ah("reply1b"))
    nic._stale(21.0)
    assert one.confirming == 555 and one.resolved and one.tally.sent == sent  # counted on while SIDR says
    nic.listen_id.pd = None
    monkeypatch.setattr(nicprobe.verbs.AH, "from_attr", lambda pd, attr: ah("sidr"))

    def sidr_says(qpn: int) -> None:  # the partner's address answers SIDR with its QP number
        one.resolving = SimpleNamespace(key=42, destroy=lambda: None)
        nic.inflight[42] = (one.index, 99.0)
        events = [
            SimpleNamespace(
                type=nicprobe.C.ESTABLISHED,
                id=42,
                ah_attr=SimpleNamespace(is_global=1),
                ud_qp_num=qpn,
                ud_qkey=7,
                dgid=PARTNER[:16],
                dlid=0,
            )
        ]
        channel.get = lambda: events.pop() if events else None
        nic.channel = channel
        nic._cm_events()

    sidr_says(101)  # the QP we know: a claim, dismissed and counted; nothing forgotten
    assert one.confirming == 0 and one.dismissed == 555 and nic.foreign == 1
    assert one.resolved and one.cached and one.qpn == 101 and one.tally.sent == sent and 1 in nic.known
    nic._stale(21.5)  # the same claim again: not asked again
    assert one.confirming == 0 and one.tally.sent == sent
    nic.resolve_end, at = 21.6, nic.resolve_end
    # another claim, too late in the window to ask SIDR:
    nic.ahs[(1, 1)] = (666, PARTNER, reply_ah("reply1x"))
    asks = list(nic.asks)
    nic._stale(21.7)  # dismissed, counted, nothing forgotten (a key holder's, late in each window)
    assert one.confirming == 0 and one.dismissed == 666 and nic.foreign == 2
    assert one.resolved and one.cached and one.qpn == 101 and one.tally.sent == sent and 1 in nic.known
    assert nic.asks == asks  # not asked
    nic.resolve_end = at
    nic.ahs[(1, 1)] = (
        777,
        PARTNER,
        reply_ah("reply1c"),
    )  # another QP again, and this time SIDR names it: a restart
    nic._stale(22.0)
    assert one.confirming == 777
    sidr_says(777)
    assert one.resolved and not one.cached and one.qpn == 777 and one.tally.sent == 0 and 1 not in nic.known
    assert one.source == PARTNER  # where SIDR's AH says its QP is: what its datagrams are held to
    nic.retarget(b"\3" * 8, [nicprobe.Peer(3, 0, 3, "10.0.0.3", 7490)], 5)  # the next window
    assert sorted(destroyed) == ["ah1", "ah2"], destroyed  # retired before this window's end: gone
    nic.close()
    # each once, every reply AH with its listener (reply1b and reply1x too, which the test itself
    # replaced), the listener after what hangs on it, the channel last
    assert destroyed[-2:] == ["listener", "channel"], destroyed
    assert sorted(destroyed[2:-2]) == ["reply1", "reply1b", "reply1c", "reply1x", "sidr"], destroyed


def test_the_datagrams_an_agents_nics_dropped_reach_the_report_and_bad_counts_are_its_violation():
    """mesh --test probe: an agent says per NIC what it dropped (a wrong tag, another QP than
    SIDR named) in its done record, checked as untrusted input; the run's warnings say it in one
    line, however many NICs, naming at most eight."""
    from rdmacli.mesh.intake import Intake
    from rdmacli.mesh.plan import Plan
    from rdmacli.mesh.records import DoneRecord, parse_record
    from rdmacli.mesh.said import dropped_words

    names = [f"n{i}" for i in range(12)]
    addrs = [[f"10.0.0.{i}", f"10.0.1.{i}"] for i in range(12)]
    spec = RunSpec(run_id="ab" * 8, names=names, addresses=addrs, test="probe", count=5)
    plan = Plan.start(spec, nodes_spec="n[0-11]", launch_s=30)
    intake = Intake(plan)
    done = DoneRecord(run=spec.run_id, rank=3, dropped=((1, 12, 0), (0, 0, 2)))
    rec = parse_record(json.dumps(done.to_dict()), spec.run_id)
    assert rec == done
    intake.take(rec)
    assert intake.evidence().dropped == {3: ((1, 12, 0), (0, 0, 2))}
    (words,) = dropped_words(plan, intake.evidence().dropped)
    assert "2 NIC(s)" in words and "n3:1, n3:0" in words and "12 with a wrong tag, 2 from another QP" in words
    many = {r: ((0, 1, 0), (1, 1, 0)) for r in range(12)}
    (words,) = dropped_words(plan, many)
    assert "24 NIC(s)" in words and "and 16 more" in words
    assert dropped_words(plan, {}) == []
    for bad in ([[0, -1, 0]], [[99, 1, 1]], [[0, 1]], "x", [[0, 1.5, 0]], [[0, 2**80, 0]], [[0, 1, 1]] * 99):
        with pytest.raises(Violation):
            parse_record(
                json.dumps({"type": "done", "run": spec.run_id, "rank": 3, "dropped": bad}), spec.run_id
            )


def test_a_nic_that_does_not_open_is_tried_again_with_backoff_and_its_problem_said_meanwhile(monkeypatch):
    """A device gone (a driver unloaded) is not opened every window for days: tried again after
    1, 2, 4, then every 8 windows, its problem said in every window (the same words until the
    next try); once it opens, every window again."""
    from types import SimpleNamespace

    from rdmacli.errors import RdmacliError
    from rdmacli.probe import phase as ph

    tries, opens = [], {"ok": False}

    class Nic:
        def __init__(self, **kw):
            self.nic, self.address, self.port, self.key = kw["nic"], kw["address"], kw["port"], kw["key"]

        def open(self):
            tries.append(window[0])
            if not opens["ok"]:
                raise RdmacliError("no RDMA device has 10.0.0.1 any more", cause=Cause.ENVIRONMENT)

        def retarget(self, *a):
            pass

        def close(self):
            pass

    monkeypatch.setattr(ph.ProbeKind, "nic_class", lambda self: Nic)
    monkeypatch.setattr(ph, "let_go", lambda: None)
    topo = SimpleNamespace(rank=0, probe_key=bytes(16), nic=lambda r, k: r,
                           address=lambda r, k: f"10.0.0.{r}", port_of=lambda k: 7490)  # fmt: skip
    window = [1]
    problems = [None]
    p = ph.Phase(topo, [(0, 1, 0)], problems, run=b"\0" * 8, count=5, keep=True)
    said = [str(problems[0])]
    for w in range(2, 32):
        window[0] = w
        problems = [None]
        p.next_window(topo, [(0, 1, 0)], problems, run=b"\0" * 8, count=5)
        assert problems[0] is not None  # said every window
        said.append(str(problems[0]))
    assert tries == [1, 2, 4, 8, 16, 24]
    assert said[1] == said[2] and "failed 2 times in a row" in said[1]  # the same words while it waits
    opens["ok"] = True
    window[0] = 32
    problems = [None]
    p.next_window(topo, [(0, 1, 0)], problems, run=b"\0" * 8, count=5)
    assert tries[-1] == 32 and problems == [None] and not p.backoff


def test_a_qp_claiming_a_partner_never_displaces_the_sidr_named_ones_answers_and_no_ah_dies_in_flight(
    monkeypatch,
):
    """Issue 52: a key holder's probes from its own QP, claiming a partner, took the partner's one
    reply AH (re-targeting its answers) and destroyed it under a reply in flight. Now the QP SIDR
    named keeps its own AH; every other QP that claims the partner shares a second, replaced ones
    are retired (destroyed at the window's turn, never under a send) and their number is bounded
    a window (timing.replaced_bound: past it, such probes are dropped and counted foreign)."""
    from types import SimpleNamespace

    from rdmacli.probe.timing import replaced_bound
    from rdmacli.probe.wire import PROBE, Datagram

    made, destroyed, sent = [], [], []

    def from_wc(pd, wc, grh, port):
        ah = SimpleNamespace(ptr=wc.src_qp, destroy=lambda: destroyed.append(wc.src_qp))
        made.append(ah)
        return ah

    monkeypatch.setattr(nicprobe.verbs.AH, "from_wc", from_wc)
    monkeypatch.setattr(
        nicprobe.verbs, "post_send", lambda *a, ah, remote_qpn, **kw: sent.append((ah, remote_qpn))
    )
    partner = nicprobe.Peer(1, 0, 1, "10.0.0.1", 7490)
    partner.qpn, partner.resolved, partner.source = 101, True, PARTNER
    nic = nicprobe.NicProbe(run=b"\1" * 8, key=bytes(16), nic=0, address="10.0.0.9", port=7490,
                            peers=[partner], count=100, begin=0.0, end=10.0)  # fmt: skip
    nic.recvs, nic.sends, nic.free_sends = 64, 64, list(range(64, 128))
    nic.mr = SimpleNamespace(write=lambda data, off: None, addr=0)
    nic.listen_id = SimpleNamespace(qp=None, pd=None, own=lambda ah: ah)

    def probe_from(qp: int) -> int:
        nic._answer(Datagram(PROBE, nic.run_id, 1, 1, 0, 5), SimpleNamespace(src_qp=qp), 0, PARTNER, 7)
        nic.free_sends.append(64)
        return sent[-1][1] if sent else 0

    assert probe_from(101) == 101
    home = nic.ahs[(1, 0)][-1]
    for qp in (666, 101, 667, 101, 666):  # the forger's QPs between the partner's own probes
        assert probe_from(qp) == qp
        assert nic.ahs[(1, 0)][-1] is home  # the partner's AH never displaced
    assert [ah for ah, _ in sent if ah != 101] == [666, 667, 666] and destroyed == []
    assert nic.replaced == 2 and len(nic.retired) == 2  # 666's and 667's first AHs: retired, alive
    bound = replaced_bound(1)  # below the replies a QP may have (timing.replies_bound(100))
    for qp in range(1000, 1000 + bound):
        probe_from(qp)
    assert nic.replaced == bound and nic.foreign > 0 and destroyed == []  # bounded; nothing destroyed
    assert probe_from(101) == 101 and nic.ahs[(1, 0)][-1] is home  # the partner still answered
    nic.retarget(b"\2" * 8, [nicprobe.Peer(1, 0, 1, "10.0.0.1", 7490)], 5)  # the window's turn
    assert len(destroyed) == bound  # each retired AH once, at the window's turn (the slots' own at the next)


def test_a_flood_of_probes_in_a_partners_name_costs_the_partner_no_answer(monkeypatch):
    """Issue 52, the lab's key holder: thousands of probes a window from its QP in n16's name
    filled n15's send queue with replies, and n16's own probes went unanswered (its pair
    suspect). A partner's probes are answered at most timing.replies_bound a window from each
    of its two AHs' QPs: the flood is dropped past it (counted foreign), the partner's own go on."""
    from types import SimpleNamespace

    from rdmacli.probe.timing import replies_bound
    from rdmacli.probe.wire import PROBE, Datagram

    sent = []
    monkeypatch.setattr(
        nicprobe.verbs.AH, "from_wc", lambda pd, wc, grh, port: SimpleNamespace(ptr=wc.src_qp)
    )
    monkeypatch.setattr(nicprobe.verbs, "post_send", lambda *a, ah, remote_qpn, **kw: sent.append(remote_qpn))
    partner = nicprobe.Peer(1, 0, 1, "10.0.0.1", 7490)
    partner.qpn, partner.resolved, partner.source = 101, True, PARTNER
    nic = nicprobe.NicProbe(run=b"\1" * 8, key=bytes(16), nic=0, address="10.0.0.9", port=7490,
                            peers=[partner], count=5, begin=0.0, end=10.0)  # fmt: skip
    nic.recvs, nic.sends, nic.free_sends = 64, 64, [64]
    nic.mr = SimpleNamespace(write=lambda data, off: None, addr=0)
    nic.listen_id = SimpleNamespace(qp=None, pd=None, own=lambda ah: ah)

    def probe_from(qp: int) -> None:
        nic._answer(Datagram(PROBE, nic.run_id, 1, 1, 0, 5), SimpleNamespace(src_qp=qp), 0, PARTNER, 7)
        nic.free_sends = [64]  # its send completed

    for _ in range(1000):
        probe_from(666)
    bound = replies_bound(5)
    assert sent.count(666) == bound and nic.foreign == 1000 - bound
    for _ in range(5):
        probe_from(101)
    assert sent.count(101) == 5  # the partner's own probes, all answered


@pytest.mark.parametrize("before,after", [(2, 1), (3, 2)])
def test_a_window_on_a_plan_with_fewer_rails_closes_the_removed_rails_nics_and_goes_on(
    monkeypatch, before, after
):
    """Issue 70: a map of 2 rails, then 1, then SIGHUP (and 3 -> 2) ended the agent with
    `IndexError: tuple index out of range`: the next window compared each open NIC with the new
    plan's rail of the same number, which the plan no longer had. A removed rail's NIC is closed,
    its back-off forgotten; the kept rails go on with their QPs (retargeted, not reopened)."""
    from types import SimpleNamespace

    from rdmacli.probe import phase as ph

    opened, closed, retargeted = [], [], []

    class Nic:
        def __init__(self, **kw):
            self.nic, self.address, self.port, self.key = kw["nic"], kw["address"], kw["port"], kw["key"]

        def open(self):
            opened.append(self.address)

        def retarget(self, *a):
            retargeted.append(self.address)

        def close(self):
            closed.append(self.address)

    monkeypatch.setattr(ph.ProbeKind, "nic_class", lambda self: Nic)
    monkeypatch.setattr(ph, "let_go", lambda: None)

    def topo(rails):
        addrs = tuple(tuple(f"10.0.{k}.{r}" for k in range(rails)) for r in range(2))
        return SimpleNamespace(rank=0, probe_key=bytes(16), nic=lambda r, k: addrs[r].index(addrs[r][k]),
                               address=lambda r, k: addrs[r][k], port_of=lambda k: 7490)  # fmt: skip

    p = ph.Phase(topo(before), [(k, 1, k) for k in range(before)], [None] * before, run=b"\0" * 8, count=5,
                 keep=True)  # fmt: skip
    p.backoff[before - 1] = (1, 1, RdmacliError("x", cause=Cause.ENVIRONMENT))
    assert sorted(p.nics) == list(range(before))
    problems = [None] * after
    p.next_window(topo(after), [(k, 1, k) for k in range(after)], problems, run=b"\0" * 8, count=5)
    assert sorted(p.nics) == list(range(after)) and problems == [None] * after
    assert closed == [f"10.0.{k}.0" for k in range(after, before)]  # the removed rails' NICs only
    assert retargeted == [f"10.0.{k}.0" for k in range(after)] and len(opened) == before
    assert all(r < after for r in p.backoff)
