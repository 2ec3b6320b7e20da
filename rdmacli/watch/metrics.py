"""`rdmacli watch`'s Prometheus series, on prometheus_client's own registry and HTTP server.

Per NIC (labels node, rail, device): probes sent and answered, the network round trips (the
prober's and responder's delays out) as a histogram, the trouble counters' movement by kind, and
its verdict while it is named. Per peer a series only while that pair is named (bad, clearing
or flapping): what a scrape holds grows with NICs and with trouble, never with healthy pairs.
The process's own CPU comes from prometheus_client's process collector (process_cpu_seconds).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

from rdmacli.diag import counters as ctr
from rdmacli.watch.agent import STARVED

# network round trips: from a few µs (hardware) to the lab's emulated milliseconds, and a slow
# node's tens of milliseconds
RTT_BUCKETS = (5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.25, 1.0)
NIC = ("node", "rail", "device")
PEER = ("node", "rail", "peer", "peer_rail", "cause", "state")


class WatchMetrics:
    def __init__(self, node: str):
        self.node = node
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        self.sent = Counter("rdmacli_watch_probes_sent", "Probes this NIC sent", NIC, registry=r)
        self.answered = Counter("rdmacli_watch_probes_answered", "Probes of this NIC answered", NIC,
                                registry=r)  # fmt: skip
        self.rtt = Histogram("rdmacli_watch_rtt_seconds", "Network round trip of a probed pair in a window "
                             "(its p50; prober and responder delays out)", NIC, buckets=RTT_BUCKETS,
                             registry=r)  # fmt: skip
        self.moved = Counter("rdmacli_watch_nic_counter", "Trouble counters' movement on this NIC's port, "
                             "by kind", (*NIC, "kind"), registry=r)  # fmt: skip
        self.windows = Counter("rdmacli_watch_windows", "Probe windows this agent ran", registry=r)
        self.cpu = Gauge("rdmacli_watch_cpu_per_nic", "This agent's CPU over its last window, as a fraction "
                         "of one core per NIC (the budget: 0.03)", registry=r)  # fmt: skip
        self.nic_bad = Gauge("rdmacli_watch_nic_bad", "1 while this NIC is named (bad, clearing or flapping)",
                             (*NIC, "cause", "state"), registry=r)  # fmt: skip
        self.peer_bad = Gauge("rdmacli_watch_peer_bad", "1 while this pair of NICs is named (bad, clearing "
                              "or flapping); no series for a healthy pair", PEER, registry=r)  # fmt: skip
        self.unopened = Gauge("rdmacli_watch_nic_unopened", "1 while this rail's NIC cannot be opened "
                              "(its device gone, a driver reload, no address): tried again with backoff",
                              ("node", "rail"), registry=r)  # fmt: skip
        self.forged = Counter("rdmacli_watch_forged", "Probe datagrams and SIDR requests this NIC dropped "
                              "for a wrong tag: forged, or an agent with another --key-file", NIC,
                              registry=r)  # fmt: skip
        self.foreign = Counter("rdmacli_watch_foreign", "Datagrams with a good tag from another QP than "
                               "the partner's SIDR named (or a QP of its number elsewhere): answers "
                               "dropped, and probes claiming a partner that SIDR showed had not "
                               "restarted (a key holder forging)",
                               NIC, registry=r)  # fmt: skip
        self.refused = Counter("rdmacli_watch_stack_refused", "Calls the RDMA stack refused that this NIC's "
                               "probing went on without, by what: a partner's SIDR request not answered "
                               "(it asks again), receives not posted again, an object not destroyed",
                               (*NIC, "what"), registry=r)  # fmt: skip
        self.state_write_failures = Counter("rdmacli_watch_state_write_failures", "Windows whose state file "
                                            "could not be written (tried again after the next window)",
                                            registry=r)  # fmt: skip
        self.host_wait = Gauge("rdmacli_watch_host_wait_ratio", "The share of the last window's probe phase "
                               "this agent's probe threads waited for a CPU (run queue); from "
                               f"{STARVED:g} the window judges nothing", registry=r)  # fmt: skip
        self.starved = Counter("rdmacli_watch_windows_starved", "Windows not judged: this host kept "
                               "the probes from the CPU (a busy host is not a bad fabric)",
                               registry=r)  # fmt: skip
        self.shown: dict[str, set[tuple]] = {"nic": set(), "peer": set()}

    def window(self, by_nic: dict, devices: dict[int, str | None], state, names: list[str],
               problems: dict[int, str] | None = None,
               forged: dict[int, int] | None = None,
               foreign: dict[int, int] | None = None,
               refused: dict[int, dict[str, int]] | None = None) -> None:  # fmt: skip
        """One window's counts and the verdicts after it; `problems`: the rails whose NIC did
        not open (WatchAgent.problems), every rail's series set each window; `forged`: each
        rail's datagrams with a wrong tag (WatchAgent.forged); `foreign`: with a good tag from
        another QP than SIDR named (WatchAgent.foreign); `refused`: each rail's stack refusals by
        what (WatchAgent.refused)."""
        self.windows.inc()
        for rail, n in (forged or {}).items():
            self.forged.labels(self.node, str(rail), devices.get(rail) or "").inc(n)
        for rail, n in (foreign or {}).items():
            self.foreign.labels(self.node, str(rail), devices.get(rail) or "").inc(n)
        for rail, counts in (refused or {}).items():
            for what, n in counts.items():
                if n:
                    self.refused.labels(self.node, str(rail), devices.get(rail) or "", what).inc(n)
        for rail in range(state.rails):
            self.unopened.labels(self.node, str(rail)).set(1 if rail in (problems or {}) else 0)
        for rail, w in by_nic.items():
            labels = (self.node, str(rail), devices.get(rail) or "")
            self.sent.labels(*labels).inc(w.sent)
            self.answered.labels(*labels).inc(w.answered)
            for us in w.rtts_us:
                self.rtt.labels(*labels).observe(us / 1e6)
            for name, v in w.counters.items():
                kind = ctr.kind_of(name)
                if kind in ctr.TROUBLE:
                    self.moved.labels(*labels, kind).inc(v)
        nics = {
            (self.node, str(rail), devices.get(rail) or "", t.cause or "", t.state.value)
            for rail, t in state.nics.items()
            if t.alerted
        }
        peers = {
            (self.node, str(rail), names[peer], str(peer_rail), t.cause or "", t.state.value)
            for (rail, peer, peer_rail), t in state.alerted_pairs().items()
        }
        self._show(self.nic_bad, "nic", nics)
        self._show(self.peer_bad, "peer", peers)

    def _show(self, gauge: Gauge, kind: str, now: set[tuple]) -> None:
        for labels in self.shown[kind] - now:
            gauge.remove(*labels)
        for labels in now:
            gauge.labels(*labels).set(1)
        self.shown[kind] = now
