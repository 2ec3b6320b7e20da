"""`rdmacli watch`'s plan, window judgement, per-agent verdicts and metrics, on data alone."""

from __future__ import annotations

import json
import time

import pytest
from meshdata import parse_metrics

from rdmacli.errors import Cause, RdmacliError
from rdmacli.figures import ProbeFigures
from rdmacli.mesh import schedule
from rdmacli.mesh.checks import ports_copy
from rdmacli.probe.phase import ProbeEnd
from rdmacli.watch import judge
from rdmacli.watch.hysteresis import Policy, State
from rdmacli.watch.metrics import WatchMetrics
from rdmacli.watch.plan import WatchPlan
from rdmacli.watch.state import WatchState

NAMES = tuple(f"n{i}" for i in range(8))
ADDRS = tuple((f"10.0.0.{i}", f"10.1.0.{i}") for i in range(8))


class StandIn:
    """What the agent's loop reads of a window's phase (watch.agent.WindowPhase), at rest: a
    phase closed after each window, every NIC open, nothing dropped."""

    keep = False
    problems: list = []
    dropped: dict = {}
    waited: dict = {}  # rail -> (run-queue wait, wall): a host that never kept the probes waiting
    ports: dict[int, str] = {}  # rail -> its device

    def close(self):
        pass

    def drop(self, rail):
        pass

    def devices(self):
        return {rail: (dev, 1) for rail, dev in self.ports.items()}

    def take_refused(self):
        return {}


class Maker:
    """A function of (plan, k, stop) as the agent's phase maker (watch.agent.PhaseMaker)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, plan, k, stop):
        return self.fn(plan, k, stop)

    def close(self):
        pass


def plan(rank: int = 0, **kw) -> WatchPlan:
    return WatchPlan(names=NAMES, addresses=ADDRS, rank=rank, **kw)


def test_every_agent_computes_the_same_windows_and_each_pair_probes_both_ways():
    """No coordinator: window k's partners are round k of the mesh schedule at every node, so
    each pair's two ends probe each other in the same window, and a period covers every pair."""
    plans = [plan(r) for r in range(8)]
    covered = set()
    for k in range(plans[0].period_windows()):
        for r, p in enumerate(plans):
            for q in p.partners(k):
                assert r in plans[q].partners(k)  # both ends, the same window
                covered.add(frozenset((r, q)))
        assert plans[0].run_id(k) == plans[5].run_id(k) != plans[0].run_id(k + 1)
    assert len(covered) == 28 and plans[0].period_windows() == schedule.round_count(8)
    assert plans[3].tests(0) == [(0, plans[3].partners(0)[0], 0), (1, plans[3].partners(0)[0], 1)]
    full = plan(per_window=7)
    assert sorted(full.partners(4)) == [1, 2, 3, 4, 5, 6, 7] and full.period_windows() == 1


def test_a_window_closes_before_the_next_opens_and_the_rate_is_held():
    p = plan(window_s=10.0, count=10, per_window=7)
    assert p.phase_end(3) < p.begin(4) - 2.0  # the next window opens OPEN_LEAD_S before it begins
    assert p.window(p.begin(3) + 9.99) == 3 and p.window(p.begin(4)) == 4
    assert p.rate() <= 100
    for bad in ({"window_s": 1.0}, {"count": 0}, {"count": 100, "per_window": 7}, {"rank": 8}):
        with pytest.raises(ValueError):
            plan(**bad)


def rec(peer: int, rail: int = 0, result: str = "pass", sent: int = 10, answered: int = 10,
        p50: float | None = 10.0, low: float | None = 8.0, error: RdmacliError | None = None,
        counters: tuple = (), p99: float | None = None) -> ProbeEnd:  # fmt: skip
    figures = ProbeFigures(probes_sent=sent, probes_answered=answered, rtt_p50_us=p50, rtt_p99_us=p99,
                           rtt_min_us=low)  # fmt: skip
    return ProbeEnd(rail, peer, rail, result, error, figures, ports_copy(counters))


UNR = RdmacliError("no answer to SIDR", cause=Cause.UNREACHABLE)
DOWN = RdmacliError("port 1 of rxe0 is DOWN", cause=Cause.LOCAL_PORT_DOWN)
LATE = RdmacliError("this agent was late", cause=Cause.AGENT)


def test_a_window_is_dead_lossy_slow_its_own_fault_or_no_evidence_by_cause_not_words():
    ref = judge.Reference()
    assert judge.window_cause(rec(1, result="fail", sent=0, answered=0, error=UNR), ref) == judge.DEAD
    assert judge.window_cause(rec(1, result="fail", error=DOWN), ref) == "DOWN"
    assert judge.window_cause(rec(1, result="fail", error=LATE), ref) is judge.SKIP
    assert judge.window_cause(rec(1, answered=8), ref) == judge.LOSS
    assert judge.window_cause(rec(1, answered=9), ref) is None  # one datagram is no evidence alone
    assert judge.window_cause(rec(1, p50=90.0, low=80.0), ref) is None  # no reference yet: not slow
    for _ in range(12):  # the reference: enough good windows that one early slow one is no tail
        assert judge.window_cause(rec(1), ref) is None
    assert judge.window_cause(rec(1, p50=90.0, low=80.0), ref) == judge.SLOW
    assert judge.window_cause(rec(1, p50=90.0, low=9.0), ref) is None  # fast once: the hosts were busy


def test_a_lossy_partner_is_a_suspicious_peer_a_lossy_nic_of_our_own_is_named():
    policy = Policy(raise_after=2, raise_window=3, clear_after=2)
    s = WatchState(rails=2, policy=policy)
    for _ in range(3):  # rail 0: partner 5 loses probes; rail 1: every partner does
        s.feed([rec(5, answered=8), rec(6), rec(7)] + [rec(p, rail=1, answered=8) for p in (5, 6, 7)])
    assert s.nics[0].state is State.OK and s.nics[1].state is State.BAD and s.nics[1].cause == "LOSS"
    assert set(s.alerted_pairs()) == {(0, 5, 0), (1, 5, 1), (1, 6, 1), (1, 7, 1)}
    for _ in range(3):
        s.feed([rec(5), rec(6), rec(7)] + [rec(p, rail=1) for p in (5, 6, 7)])
    assert s.alerted_pairs() == {} and s.nics[1].state is State.OK
    assert s.pairs == {}  # quiet pairs are forgotten: held state grows with trouble


def test_metrics_show_a_peer_only_while_it_is_named():
    s = WatchState(rails=1, policy=Policy(raise_after=2, raise_window=3, clear_after=2))
    m = WatchMetrics("n0")
    for _ in range(2):
        dead = rec(3, result="fail", sent=0, answered=0, error=UNR)
        m.window(s.feed([dead, rec(4)]), {0: "rxe0"}, s, list(NAMES))
    got = parse_metrics(generate(m))
    peer = (
        ("cause", "DEAD"),
        ("node", "n0"),
        ("peer", "n3"),
        ("peer_rail", "0"),
        ("rail", "0"),
        ("state", "bad"),
    )
    assert got[("rdmacli_watch_peer_bad", peer)] == 1
    assert not any(name == "rdmacli_watch_peer_bad" and ("peer", "n4") in labels for name, labels in got)
    assert got[("rdmacli_watch_probes_sent_total", (("device", "rxe0"), ("node", "n0"), ("rail", "0")))] == 20
    for _ in range(2):
        m.window(s.feed([rec(3), rec(4)]), {0: "rxe0"}, s, list(NAMES))
    got = parse_metrics(generate(m))
    assert not any(name == "rdmacli_watch_peer_bad" for name, _ in got)
    assert got[("rdmacli_watch_windows_total", ())] == 4


def test_the_stacks_refusals_are_counted_per_nic_and_what_and_a_nic_closed_twice_counts_once():
    """A call the RDMA stack refused that the probe went on without (a SIDR request it could
    not answer, receives not posted again, an object not destroyed) is no `except: pass`: the
    NIC counts it, the phase moves the count out once (a NIC closed after its run and again at
    its drop adds nothing the second time), and /metrics counts it by rail and what."""
    from types import SimpleNamespace

    from rdmacli.probe.phase import Phase

    phase = Phase.__new__(Phase)
    phase.refused = {}
    nic = SimpleNamespace(answers_lost=1, reposts_failed=0, teardown_errors=2)
    phase._refusals(0, nic)
    phase._refusals(0, nic)  # closed again: its counts were taken
    assert (nic.answers_lost, nic.teardown_errors) == (0, 0)
    refused = phase.take_refused()
    assert refused == {0: {"answer": 1, "repost": 0, "teardown": 2}} and phase.take_refused() == {}
    s = WatchState(rails=1, policy=Policy(raise_after=2, raise_window=3, clear_after=2))
    m = WatchMetrics("n0")
    m.window(s.feed([rec(3)]), {0: "rxe0"}, s, list(NAMES), refused=refused)
    got = parse_metrics(generate(m))
    nic0 = (("device", "rxe0"), ("node", "n0"), ("rail", "0"))
    assert got[("rdmacli_watch_stack_refused_total", (*nic0, ("what", "teardown")))] == 2
    assert got[("rdmacli_watch_stack_refused_total", (*nic0, ("what", "answer")))] == 1
    assert not any(dict(labels).get("what") == "repost" for name, labels in got)


def generate(m: WatchMetrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(m.registry).decode()


class FakePhase(StandIn):
    """A window's phase without RDMA: its partners' records, as the plan says, and a log."""

    def __init__(self, log, plan, k, bad_peer=None, now=None):
        self.log, self.plan, self.k, self.bad_peer, self.now = log, plan, k, bad_peer, now

    def run(self, begin, end):
        self.log.append(("run", self.k, begin, end))
        if self.now is not None:  # a phase ends at its end
            self.now[0] = max(self.now[0], end)
        out = []
        for rail, peer, _ in self.plan.tests(self.k):
            if peer == self.bad_peer:
                out.append(rec(peer, rail, result="fail", sent=0, answered=0, error=UNR))
            else:
                out.append(rec(peer, rail))
        return out

    def close(self):
        self.log.append(("close", self.k))


def test_the_agent_runs_window_after_window_on_time_takes_a_new_plan_and_skips_a_late_one():
    from rdmacli.watch.agent import WatchAgent

    now = [1000.3]
    log, seen = [], []
    p = plan(3, window_s=10.0, per_window=7)

    def sleep(s):
        assert s >= 0
        now[0] += s
        return False

    agent = WatchAgent(p, WatchState(rails=2, policy=Policy(raise_after=2, raise_window=3)),
                       on_window=lambda k, recs, by_nic: seen.append((k, len(recs))),
                       make_phase=Maker(lambda pl, k, stop: FakePhase(log, pl, k, bad_peer=5, now=now)),
                       clock=lambda: now[0], sleep=sleep)  # fmt: skip
    assert agent.run(windows=2) == 2
    assert [e for e in log if e[0] == "run"] == [("run", 101, 1010.0, 1017.5), ("run", 102, 1020.0, 1027.5)]
    assert [e for e in log if e[0] == "close"] == [("close", 101), ("close", 102)]  # closed every time
    assert seen == [(101, 14), (102, 14)]  # 7 partners x 2 rails
    assert set(agent.state.alerted_pairs()) == {(0, 5, 0), (1, 5, 1)}  # the dead peer, on both rails
    assert all(t.state is State.OK for t in agent.state.nics.values())  # our NICs reach the rest
    late = iter([5.1, 3.0, 0.0])  # after a window: judging took 5.1 s (the next is skipped), then 3 s

    def slow_judge(k, recs, by_nic):
        now[0] += next(late, 0.0)

    agent.on_window = slow_judge
    assert agent.run(windows=3) == 3 and agent.skipped == 1
    # 103 ends at 1037.5, judged until 1042.5 + 0.1: past 104's limit (a third into its phase), so
    # 104 is skipped; 105 ends at 1057.5, judged until 1060.5: 106 opens 0.5 s after its begin,
    # a little late, and still runs
    assert [e[1] for e in log if e[0] == "run"][-3:] == [103, 105, 106]
    agent.reload(plan(3, window_s=20.0, per_window=7))
    assert agent.run(windows=1) == 1
    assert log[-2][:2] == ("run", 54) and agent.plan.window_s == 20.0  # the new plan: 1080 is 54 x 20 s
    agent.stop()
    assert agent.run() == 0


def test_a_window_this_host_kept_from_the_cpu_judges_nothing_but_a_ports_own_drop():
    """The lab under load (eight agents beside eight Python starts on two emulated CPUs) named
    every node of a healthy fabric DEAD or SLOW: the probe threads waited for a CPU while the
    partners' answers waited in the queue. Such a window (agent.STARVED of its phase or more
    on the run queue) is counted, feeds no pair, no NIC and no reference, and a port's own link
    drop is still named; the next window that gets the CPU is judged again."""
    from rdmacli.watch.agent import STARVED, WatchAgent

    now = [1000.3]
    waits = iter([4.0, 4.0, 4.0, 3.0, 0.0])  # of a 7.5 s phase: 53 % three times, then 40 % and none

    class Waiting(FakePhase):
        def run(self, begin, end):
            out = super().run(begin, end)
            self.waited = {0: (next(waits), end - begin), 1: (0.0, end - begin)}
            return out

    def sleep(s):
        now[0] += s
        return False

    st = WatchState(rails=2, policy=Policy(raise_after=2, raise_window=3))
    make = Maker(lambda pl, k, stop: Waiting([], pl, k, bad_peer=5, now=now))
    agent = WatchAgent(
        plan(3, window_s=10.0, per_window=7), st, clock=lambda: now[0], sleep=sleep, make_phase=make
    )
    assert agent.run(windows=3) == 3
    assert (agent.starved, agent.window_starved) == (3, True) and agent.host_wait >= STARVED
    assert st.pairs == {} and st.nics == {} and all(r.windows == 0 for r in st.refs.values())
    assert agent.run(windows=2) == 2 and agent.starved == 3 and not agent.window_starved
    assert set(st.alerted_pairs()) == {(0, 5, 0), (1, 5, 1)}  # judged again: the dead peer named
    s = WatchState(rails=1, policy=Policy(raise_after=2, raise_window=3))
    s.feed([rec(4)], drops={0: 1}, starved=True)  # a link drop is a fact of the port: named at once
    assert s.nics[0].state is State.BAD and s.nics[0].cause == "DOWN" and s.pairs == {}


def test_the_run_queue_wait_is_the_calling_threads_own():
    """probe.host reads the kernel's count for the thread that asks: a thread that sleeps does
    not wait on a run queue, whatever the rest of the host does."""
    from rdmacli.probe.host import Waited, run_delay_s

    if run_delay_s() is None:
        pytest.skip("this kernel has no /proc/thread-self/schedstat")
    span = Waited()
    time.sleep(0.2)
    waited, wall = span.end()
    assert wall >= 0.2 and 0 <= waited < wall


def test_slow_takes_the_fabrics_own_jitter_a_node_40ms_slow_is_slow_a_noisy_host_is_not():
    """The lab under TCG: good windows' round trips spread 1 to 8 ms, their p99 3x their p50.
    Against the best alone every node was slow; against the typical tail, a window of 6 ms is
    the fabric's own jitter and one 40 ms slower is slow."""
    noise = [1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0, 8000.0] * 3
    ref = judge.Reference()
    for p50 in noise:
        r = rec(1, p50=p50, low=p50 / 2, p99=3 * p50)
        assert judge.window_cause(r, ref) is None
    jitter = rec(1, p50=6000.0, low=4000.0)
    assert judge.window_cause(jitter, ref) is None
    slow = rec(1, p50=45000.0, low=41000.0)
    assert judge.window_cause(slow, ref) == judge.SLOW


def test_readiness_reaches_systemd_through_notify_socket(tmp_path, monkeypatch):
    """Type=notify: READY=1 as one datagram on $NOTIFY_SOCKET (a path, or @ for an abstract
    socket); nothing and no error where there is none."""
    import socket

    from rdmacli.watch.service import notify

    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    for address in (str(tmp_path / "notify"), "@rdmacli-test-notify"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.bind(address if address[0] != "@" else "\0" + address[1:])
            s.settimeout(5)
            monkeypatch.setenv("NOTIFY_SOCKET", address)
            assert notify("READY=1\nSTATUS=probing")
            assert s.recv(4096) == b"READY=1\nSTATUS=probing"


def test_a_host_wide_slowdown_makes_no_slow_partner_a_slow_partner_among_fast_ones_does():
    """Against this NIC's past alone, a slowdown of the whole host made every pair slow (the lab:
    six healthy NICs named). A pair is a slow partner only when it is also slower than its
    window-mates; the NIC's own window evidence still says slow (this host or this NIC: for
    `watch status` to tell apart across the fabric)."""
    s = WatchState(rails=1, policy=Policy(raise_after=2, raise_window=3))
    for _ in range(12):
        s.feed([rec(p, p50=5000.0, low=1000.0) for p in (1, 2, 3, 4)])
    for _ in range(3):  # everything 10x slower at once
        s.feed([rec(p, p50=50000.0, low=40000.0) for p in (1, 2, 3, 4)])
    assert s.alerted_pairs() == {} and s.nics[0].state is State.BAD and s.nics[0].cause == "SLOW"
    s2 = WatchState(rails=1, policy=Policy(raise_after=2, raise_window=3))
    for _ in range(12):
        s2.feed([rec(p, p50=5000.0, low=1000.0) for p in (1, 2, 3, 4)])
    for _ in range(3):  # partner 3 alone 40 ms slower
        s2.feed(
            [
                rec(p, p50=45000.0 if p == 3 else 5000.0, low=41000.0 if p == 3 else 1000.0)
                for p in (1, 2, 3, 4)
            ]
        )
    assert set(s2.alerted_pairs()) == {(0, 3, 0)} and s2.nics[0].state is State.OK


def test_a_port_whose_link_went_down_is_named_at_once_and_its_pairs_take_no_blame():
    """The NIC's own link_downed counter moved in the window (the lab: the cable's bridge port
    taken down for 5 s): the NIC is named DOWN in that window, and its pairs, which lost probes
    because of it, are not suspected for it; without the counter one lossy window names nothing."""
    policy = Policy(raise_after=2, raise_window=3, clear_after=2)
    s = WatchState(rails=2, policy=policy)
    dropped = ({"device": "rxe1", "port": 1, "moved": {"link_downed": 1, "rcvd_seq_err": 3}},)
    lost = [rec(p, rail=1, answered=4, counters=dropped) for p in (5, 6, 7)]
    window = [rec(p) for p in (5, 6, 7)] + lost
    s.feed(window)
    assert s.nics[1].state is State.BAD and s.nics[1].cause == "DOWN" and s.nics[0].state is State.OK
    assert not any(key[0] == 1 for key in s.pairs)  # explained by the port: no pair evidence
    t = WatchState(rails=2, policy=policy)
    t.feed([rec(p) for p in (5, 6, 7)] + [rec(p, rail=1, answered=4) for p in (5, 6, 7)])
    assert t.nics[1].state is State.SUSPECT  # a statistic: confirmed in later windows first


def test_a_nic_is_slow_on_two_thirds_of_its_partners_lossy_on_a_third():
    """A slow wire slows every partner of its NIC; a busy host only some of them."""
    from collections import Counter

    from rdmacli.watch.state import NicWindow, nic_cause

    assert nic_cause(NicWindow(partners=7, causes=Counter(SLOW=4))) is None  # about half: the host
    assert nic_cause(NicWindow(partners=7, causes=Counter(SLOW=5))) == judge.SLOW
    assert nic_cause(NicWindow(partners=7, causes=Counter(LOSS=3))) == judge.LOSS
    assert nic_cause(NicWindow(partners=7, causes=Counter(LOSS=1))) is None  # one partner's own fault


def test_two_partners_that_refuse_a_nic_in_a_small_group_do_not_make_its_own_window_name_it():
    """Issue 53: in a group of three (two partners), two agents that stop answering one NIC's
    probes (f = 2, blame.LIARS) made its own agent call it dead: two of two partners. Now a NIC
    is named from its partners' answers only past f of them; its own port's word still names it."""
    from collections import Counter

    from rdmacli.watch.state import NicWindow, nic_cause, pooled_loss

    assert nic_cause(NicWindow(partners=2, causes=Counter(DEAD=2))) is None
    assert nic_cause(NicWindow(partners=3, causes=Counter(DEAD=3))) == judge.DEAD
    assert nic_cause(NicWindow(partners=2, causes=Counter(DEAD=1, DOWN=1))) == "DOWN"
    two = NicWindow(partners=2, leaky=2, passed_lost=8, passed_sent=40)
    assert not pooled_loss(two) and pooled_loss(NicWindow(partners=3, leaky=3, passed_lost=8, passed_sent=60))


def test_a_nic_losing_a_tenth_of_its_round_trips_is_lossy_in_every_window_pooled():
    """5 % both ways: one or two of each partner's 20 lost, too few for any pair's window to be
    lossy (two or more) every time; pooled over the NIC's partners, the window shows it. One
    partner losing as many is that partner's fault, and a healthy window's single drop nothing."""
    from rdmacli.watch.state import NicWindow, nic_cause

    s = WatchState(rails=1)
    by_nic = s.feed([rec(p, sent=20, answered=19) for p in (1, 2, 3, 4, 5, 6, 7)])
    assert all(c is None for c in by_nic[0].causes) and nic_cause(by_nic[0]) == judge.LOSS
    one = s.feed([rec(1, sent=20, answered=13)] + [rec(p, sent=20, answered=20) for p in range(2, 8)])
    assert nic_cause(one[0]) is None  # n1's pair is lossy (its own fault), not this NIC
    blip = s.feed([rec(1, sent=20, answered=19)] + [rec(p, sent=20, answered=20) for p in range(2, 8)])
    assert nic_cause(blip[0]) is None and nic_cause(NicWindow()) is None


def test_grouped_every_pair_inside_a_group_each_period_and_samples_between_that_rotate():
    """Two leaves of four and one of three (the map's group= column, --pairs sample:2): each
    period probes every pair inside each leaf, and 2 pairs between every two leaves, the next 2
    the next period, so the 16 pairs between the two leaves of four are all probed within 8
    periods; both ends of every pair in the same window, as without groups."""
    groups = ("a", "a", "a", "a", "b", "b", "b", "b", "c", "c", "c")
    names = tuple(f"n{i}" for i in range(11))
    addrs = tuple((f"10.0.0.{i}",) for i in range(11))
    plans = [WatchPlan(names, addrs, r, per_window=2, groups=groups, sample=2) for r in range(11)]
    period = plans[0].period_windows()
    assert period == plans[7].period_windows() and period < plans[0].rounds  # fewer than all 55 pairs' rounds
    seen_by_period = []
    for cycle in range(8):
        seen = set()
        for k in range(cycle * period, (cycle + 1) * period):
            for r, p in enumerate(plans):
                for q in p.partners(k):
                    assert r in plans[q].partners(k)  # both ends, the same window
                    seen.add(frozenset((r, q)))
        inside = {frozenset((x, y)) for x in range(11) for y in range(x) if groups[x] == groups[y]}
        assert inside <= seen  # every leaf's own pairs, every period
        seen_by_period.append(seen - inside)
    ab = set().union(*seen_by_period) & {frozenset((x, y)) for x in range(4) for y in range(4, 8)}
    assert len(ab) == 16 and all(len(s) <= 2 * 3 for s in seen_by_period)  # 2 between each two leaves
    with pytest.raises(ValueError):
        WatchPlan(names, addrs, 0, sample=2)  # a sample needs groups


def test_a_drop_between_two_windows_probes_is_read_from_the_ports_counter_at_the_windows_end():
    """The lab's flapping port went down 4 s into a window, after its 3 s of probes: no probe
    lost, yet its link_downed counter moved. The agent reads the counter at each window's end
    (the gaps between phases counted too): that window names the NIC DOWN at once; the first
    reading is only the baseline, and a counter that went backwards (a reset) is a new one."""

    from rdmacli.watch.agent import WatchAgent

    value = {"rxe_b": 7}

    class Phase(StandIn):
        ports = {0: "rxe_a", 1: "rxe_b"}

        def run(self, begin, end):
            return [rec(5), rec(6), rec(5, rail=1), rec(6, rail=1)]

        def close(self):
            pass

    agent = WatchAgent(plan(0, window_s=10.0), WatchState(rails=2),
                       make_phase=Maker(lambda pl, k, stop: Phase()),
                       read_counters=lambda dev, port: {"link_downed": value.get(dev, 0)})  # fmt: skip
    agent.window(1)  # the baseline: 7 drops before the agent started are no evidence
    assert all(t.state is State.OK for t in agent.state.nics.values())
    value["rxe_b"] = 8
    agent.window(2)
    assert agent.state.nics[1].state is State.BAD and agent.state.nics[1].cause == "DOWN"
    assert agent.state.nics[0].state is State.OK
    value["rxe_b"] = 0  # reset: a new baseline, not a drop
    agent.window(3)
    assert agent.link_drops() == {0: 0, 1: 0}


def test_a_kept_phase_stays_open_its_nic_whose_link_went_down_is_opened_afresh_and_all_close_at_the_end():
    """The real phases keep their NICs open from window to window (keep): the agent closes
    nothing between windows, drops (to be opened afresh) the NIC whose port's link went down,
    a device-wide counter as well as the port's, and closes everything when it stops."""

    from rdmacli.watch.agent import WatchAgent

    log, value = [], {"rxe_b": 3}

    class Phase(StandIn):
        keep = True
        ports = {0: "rxe_a", 1: "rxe_b"}

        def run(self, begin, end):
            return [rec(5), rec(6), rec(5, rail=1), rec(6, rail=1)]

        def drop(self, rail):
            log.append(("drop", rail))

        def close(self):
            log.append("close")

    class Phases:
        phase = Phase()

        def __call__(self, pl, k, stop):
            return self.phase

        def close(self):
            log.append("all closed")

    agent = WatchAgent(plan(0, window_s=10.0), WatchState(rails=2), make_phase=Phases(),
                       read_counters=lambda dev, port: {"device.link_downed": value.get(dev, 0)})  # fmt: skip
    agent.window(1)
    value["rxe_b"] = 4
    agent.window(2)
    assert log == [("drop", 1)] and agent.state.nics[1].cause == "DOWN"
    now = [agent.plan.begin(agent.next_window()) - 5.0]
    agent.clock, agent.sleep = (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s) or False)
    assert agent.run(windows=1) == 1 and log == [("drop", 1), "all closed"]


def test_a_map_read_again_with_windows_as_long_gives_up_no_window():
    """A map read again (SIGHUP) with windows as long may not cost a window (the partners would
    find nobody there): after a judgement that ran past the next window's open, the next one still
    runs (it was skipped: the first window that could open on time was the one after)."""
    from rdmacli.watch.agent import WatchAgent

    now, log = [1000.3], []
    p = plan(3, window_s=10.0, per_window=7)

    def sleep(s):
        now[0] += s
        return False

    def slow_judge(k, recs, by_nic):  # judging took 1 s: past the next window's open
        now[0] += 1.0
        agent.reload(plan(3, window_s=10.0, per_window=7, count=12))  # the map read again

    agent = WatchAgent(p, WatchState(rails=2), on_window=slow_judge,
                       make_phase=Maker(lambda pl, k, stop: FakePhase(log, pl, k, now=now)),
                       clock=lambda: now[0], sleep=sleep)  # fmt: skip
    assert agent.run(windows=3) == 3
    assert [e[1] for e in log if e[0] == "run"] == [101, 102, 103] and agent.plan.count == 12


def test_a_reload_that_removes_or_reorders_nodes_keeps_each_verdict_under_its_name():
    """An admin takes a dead node (n5) out of the map and reorders the rest, then SIGHUP: the
    agent goes on (no IndexError: its trackers outlived the map's ranks, stop 52), the dead
    node's pairs are forgotten, and a pair named before keeps its verdict under its own name.
    The map is read in the agent's loop (`loader`), never in the signal handler."""
    from rdmacli.watch.agent import WatchAgent
    from rdmacli.watch.service import state_doc

    now, log = [1000.3], []

    def sleep(s):
        now[0] += s
        return False

    def bad(name):
        return Maker(lambda pl, k, stop: FakePhase(log, pl, k, bad_peer=pl.names.index(name), now=now))

    state = WatchState(rails=2, policy=Policy(raise_after=2))
    agent = WatchAgent(plan(0, window_s=10.0, per_window=7), state, make_phase=bad("n5"),
                       clock=lambda: now[0], sleep=sleep)  # fmt: skip
    agent.run(windows=2)
    assert {(r, agent.plan.names[p]) for r, p, _ in agent.state.alerted_pairs()} == {(0, "n5"), (1, "n5")}
    assert [p["peer"] for p in state_doc(agent, "n0", 1)["pairs"]] == ["n5", "n5"]
    kept = tuple(n for n in reversed(NAMES) if n != "n5")  # n5 gone, the rest in another order
    order = {n: i for i, n in enumerate(NAMES)}
    smaller = WatchPlan(names=kept, addresses=tuple(ADDRS[order[n]] for n in kept), rank=kept.index("n0"),
                        window_s=10.0, per_window=7)  # fmt: skip
    asked = []
    agent.loader = lambda: asked.append(1) or smaller
    agent.ask_reload()
    assert not asked  # nothing read in the handler
    agent.make_phase = bad("n7")
    agent.run(windows=2)
    assert asked == [1] and agent.plan is smaller
    named = {(r, agent.plan.names[p]) for r, p, _ in agent.state.alerted_pairs()}
    assert named == {(0, "n7"), (1, "n7")}  # n7 is rank 0 now; n5's trackers went with it
    assert {p["peer"] for p in state_doc(agent, "n0", 3)["pairs"]} == {"n7"}
    m = WatchMetrics("n0")
    m.window({}, {0: "rxe0"}, agent.state, list(agent.plan.names))  # the names of the new map
    assert "n7" in generate(m) and "n5" not in generate(m)


def test_the_watchdog_pings_while_the_agent_makes_progress_and_stops_when_it_is_stuck(tmp_path, monkeypatch):
    """systemd's watchdog (the unit's WatchdogSec): pings on $NOTIFY_SOCKET at half of
    $WATCHDOG_USEC while WatchAgent.alive (its loop beat lately, or its window's phase is within
    its end and a grace), none once the loop is stuck: systemd then restarts it."""
    import socket
    import threading
    import time

    from rdmacli.watch import service
    from rdmacli.watch.agent import BEAT_S, WatchAgent

    agent = WatchAgent(plan(0, window_s=10.0, per_window=7), WatchState(rails=2))
    assert agent.alive()  # just made: its loop has not had the time to stall
    agent.beat = time.monotonic() - 3 * BEAT_S
    assert not agent.alive()  # stuck outside a phase
    agent.busy_until = time.monotonic() + 30
    assert agent.alive()  # a phase within its end and grace
    agent.busy_until = time.monotonic() - 1
    assert not agent.alive()  # a phase stuck past it

    sock_path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(sock_path)
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", sock_path)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")
        agent.beat = time.monotonic()
        agent.stopping = threading.Event()
        service.watchdog(agent)
        assert sock.recv(100) == b"WATCHDOG=1"  # alive: pinged within 0.1 s
        agent.beat = time.monotonic() - 3 * BEAT_S
        time.sleep(0.3)
        while True:  # drain what was sent before it stalled
            try:
                sock.settimeout(0.05)
                sock.recv(100)
            except TimeoutError:
                break
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(100)  # stuck: no ping
        agent.stop()


def test_a_rail_whose_nic_did_not_open_says_why_in_the_state_file():
    """A device gone (a driver reload): the phase could not open rail 1; the state file's NIC
    entry says why (it said bad, cause ENV, and nowhere why) and its metric is 1; once it opens
    again, nothing and 0."""
    from rdmacli.watch.agent import WatchAgent
    from rdmacli.watch.service import state_doc

    now, log = [1000.3], []
    gone = RdmacliError("no RDMA device has 10.1.0.0 any more", cause=Cause.ENVIRONMENT)

    class Gone(FakePhase):
        problems = [None, gone]

    def sleep(s):
        now[0] += s
        return False

    agent = WatchAgent(plan(0, window_s=10.0, per_window=7), WatchState(rails=2),
                       make_phase=Maker(lambda pl, k, stop: Gone(log, pl, k, now=now)), clock=lambda: now[0],
                       sleep=sleep)  # fmt: skip
    m = WatchMetrics("n0")
    agent.run(windows=1)
    nics = state_doc(agent, "n0", 1)["nics"]
    assert [n["problem"] for n in nics] == [None, "no RDMA device has 10.1.0.0 any more"]
    m.window({}, {}, agent.state, list(agent.plan.names), agent.problems)
    assert 'rdmacli_watch_nic_unopened{node="n0",rail="1"} 1.0' in generate(m)
    assert 'rdmacli_watch_nic_unopened{node="n0",rail="0"} 0.0' in generate(m)
    agent.make_phase = Maker(lambda pl, k, stop: FakePhase(log, pl, k, now=now))
    agent.run(windows=1)
    assert [n["problem"] for n in state_doc(agent, "n0", 2)["nics"]] == [None, None]
    m.window({}, {}, agent.state, list(agent.plan.names), agent.problems)
    assert 'rdmacli_watch_nic_unopened{node="n0",rail="1"} 0.0' in generate(m)


def test_the_state_file_is_declared_once_what_an_agent_writes_is_what_status_takes_back():
    """service.state_doc writes a statefile.StateDoc; `watch status` parses each node's as
    untrusted input: an agent's own doc comes back field for field, and each field out of its
    type or bounds is refused in words (a liar's doc never reaches the blame)."""
    from rdmacli.watch.agent import WatchAgent
    from rdmacli.watch.service import state_doc
    from rdmacli.watch.statefile import Refused, StateDoc

    now, log = [1000.3], []
    st = WatchState(rails=2, policy=Policy(raise_after=1))
    agent = WatchAgent(plan(0, window_s=10.0, per_window=7), st,
                       make_phase=Maker(lambda pl, k, stop: FakePhase(log, pl, k, bad_peer=5, now=now)),
                       clock=lambda: now[0],
                       sleep=lambda s: now.__setitem__(0, now[0] + s) or False)  # fmt: skip
    agent.run(windows=1)
    agent.forged, agent.foreign = {0: 3}, {1: 2}
    doc = json.loads(json.dumps(state_doc(agent, "n0", 7)))
    assert doc["pairs"] and doc["nics"][0]["forged"] == 3 and doc["nics"][1]["foreign"] == 2
    back = StateDoc.parse(doc, "n0", list(agent.plan.names), 2)
    assert json.loads(json.dumps(back.to_dict())) == doc
    bad = [
        ("nics", [{"rail": 0, "forged": -1}]),
        ("nics", [{"rail": 0, "foreign": 2.5}]),
        ("nics", [{"rail": 2}]),
        ("nics", [{"rail": 0, "problem": "x" * 301}]),
        ("nics", [{"rail": 0, "cause": "EVIL"}]),
        ("nics", [{"rail": 0, "reference": {"best_p50_us": "fast"}}]),
        ("pairs", [{"rail": 0, "peer": "n0", "peer_rail": 0, "state": "bad"}]),
        ("pairs", [{"rail": 0, "peer": "nobody", "peer_rail": 0, "state": "bad"}]),
        ("windows", 1.5),
        ("window", -1),
        ("time", float("inf")),
        ("port", 70000),
        ("authenticated", "yes"),
        ("host_wait", 1.5),  # a share of a phase
        ("host_wait", -0.1),
        ("host_wait", "busy"),
        ("starved", 0.5),
    ]
    for key, value in bad:
        with pytest.raises(Refused):
            StateDoc.parse({**doc, key: value}, "n0", list(agent.plan.names), 2)


def test_slow_waits_for_three_windows_of_reference_however_many_partners_each_had():
    """MIN_REFERENCE counts windows, not pairs: counted by pair, one window of seven partners
    was a reference, and in the lab's CI a reference learnt while eight agents started (a busy
    host under TCG answers sooner) named a healthy NIC slow two windows later."""
    s = WatchState(rails=1, policy=Policy(raise_after=1, raise_window=1, clear_after=1))
    partners = range(1, 8)
    s.feed([rec(p, p50=1000.0, low=500.0) for p in partners])  # one window: no reference yet
    s.feed([rec(p, p50=5000.0, low=4000.0) for p in partners])  # 5x slower: not judged
    assert s.nics[0].state is State.OK and s.pairs == {}
    assert s.refs[0].figures()["windows"] == 2 and s.refs[0].figures()["best_p50_us"] is None
    s.feed([rec(p, p50=1000.0, low=500.0) for p in partners])  # the third window of reference
    s.feed([rec(p, p50=9000.0, low=8000.0) for p in partners])
    assert s.nics[0].state is State.BAD and s.nics[0].cause == judge.SLOW


def test_a_state_file_that_cannot_be_written_is_counted_said_and_written_again_the_agent_goes_on(
    tmp_path, monkeypatch
):
    """Issue 70: a symlink, a directory or a FIFO put at the state path while the agent runs, or
    its directory removed, ended the agent with a traceback. `serve` (the agent's real path, its
    probes and clock replaced) now counts each failed write, says it once per reason, goes on to
    the next window, and writes again once it can."""
    import io
    import os
    import shutil

    from rdmacli.watch import agent as agent_mod
    from rdmacli.watch import service

    mapfile = tmp_path / "two.map"
    mapfile.write_text("n1 192.0.2.1\nn2 192.0.2.2\n")
    where = tmp_path / "state"
    where.mkdir()
    path = where / "w.json"
    sabotage = [
        lambda: path.symlink_to(tmp_path / "elsewhere"),
        lambda: path.mkdir(),
        lambda: os.mkfifo(path),
        lambda: shutil.rmtree(where),
        None,  # nothing in the way: written again
    ]
    seen, made = [], []

    class Quiet(StandIn):
        def run(self, begin, end):
            return []

    class Phases:
        def __call__(self, pl, k, stop):
            return Quiet()

        def close(self):
            pass

    def run_windows(self, windows=None):
        for k in range(len(sabotage) + 1):
            self.window(k)
            if k < len(sabotage):  # between two windows: the next write meets this
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                elif path.is_symlink() or path.exists():
                    path.unlink()
                where.mkdir(exist_ok=True)
                if sabotage[k] is not None:
                    sabotage[k]()
            seen.append(path.is_file() and not path.is_symlink())
        return len(sabotage) + 1

    class Agent(agent_mod.WatchAgent):
        def __init__(self, *a, **kw):
            super().__init__(*a, make_phase=Phases(), **kw)
            made.append(self)

    monkeypatch.setattr(agent_mod, "WatchAgent", Agent)
    monkeypatch.setattr(Agent, "run", run_windows)
    monkeypatch.setattr(service, "preflight", lambda plan, err: None)
    monkeypatch.setattr(service.signal, "signal", lambda *a: None)
    metrics = []
    from rdmacli.watch import metrics as metrics_mod

    class Metrics(metrics_mod.WatchMetrics):
        def __init__(self, node):
            super().__init__(node)
            metrics.append(self)

    monkeypatch.setattr(metrics_mod, "WatchMetrics", Metrics)  # serve imports it at call time
    err = io.StringIO()
    opts = service.Options(map_path=str(mapfile), node="n1", port=7590, window_s=10.0, count=10,
                           partners=None, state_file=str(path), metrics=None)  # fmt: skip
    assert service.serve(opts, Policy(), err=err) == 0
    said = err.getvalue()
    assert "Traceback" not in said
    assert said.count("not written") == 4, said  # four reasons, each said once
    assert "written again" in said and "No such file or directory" in said, said
    assert metrics[0].state_write_failures._value.get() == 4
    assert seen == [False] * 5 + [True], seen  # seen after each sabotage; the last window wrote it
    doc = json.loads(path.read_text())
    assert doc["node"] == "n1" and doc["windows"] == made[0].state.windows


@pytest.mark.parametrize("nodes, rails", [(1000, 8), (4000, 1)])
def test_a_dead_nics_state_at_fleet_size_is_carried_whole_and_read_by_watch_status(nodes, rails):
    """Issue 70: the real state document of an agent whose NIC is dead, at 1000 nodes x 8 rails
    (7992 pair entries, over the 4096 bound) or at 4000 nodes (a 276 KB line, over the 64 KiB
    line bound), was refused by `watch status`, and blame rested on its partners alone. The pairs a
    NIC its own agent names are counted in its entry (compact form); the bounds follow the fleet."""
    from types import SimpleNamespace

    from rdmacli.watch.service import state_doc
    from rdmacli.watch.statefile import max_line
    from rdmacli.watch.status import Gathered, blame

    names = tuple(f"n{i:04d}" for i in range(nodes))
    addrs = tuple(tuple(f"10.{r}.{i // 250}.{i % 250}" for r in range(rails)) for i in range(nodes))
    pl = WatchPlan(names=names, addresses=addrs, rank=0, window_s=600.0, count=1, per_window=nodes - 1)
    st = WatchState(rails=rails, policy=Policy(raise_after=2, raise_window=3, clear_after=2))
    dead = 0  # every rail of n0000 dead: the worst case, every pair of it named
    for _ in range(2):
        st.feed([rec(peer, rail, result="fail", sent=0, answered=0, error=UNR) if rail == dead or rails == 1
                 else rec(peer, rail) for rail, peer, _ in pl.tests(0)])  # fmt: skip
    agent = SimpleNamespace(
        plan=pl, state=st, devices={}, problems={}, forged={}, foreign={}, skipped=0, starved=0, host_wait=0.0
    )
    doc = state_doc(agent, "n0000", 1)
    line = json.dumps(doc, allow_nan=False)
    assert len(line) < max_line(nodes, rails) and len(line) < 64 * 1024, len(line)  # bytes, not entries
    assert doc["nics"][dead]["state"] == "bad" and doc["nics"][dead]["pairs_named"] == nodes - 1
    g = Gathered(list(names), rails)
    g.take("n0000", json.loads(line))
    assert g.refused == {}, g.refused
    v = blame(g).to_json()
    said = v["nodes"] if rails == 1 else v["nics"]
    assert [x["node"] for x in said] == ["n0000"], v
