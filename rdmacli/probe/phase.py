"""A node's probe phase: one NicProbe a rail, all at once, over the tests a front-end gives it
(mesh's schedule for one round, watch's for one window) and the topology it names them by."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from rdmacli.counters import Deltas
from rdmacli.errors import Cause, EnvironmentProblem, RdmacliError
from rdmacli.figures import ProbeFigures
from rdmacli.probe.host import Waited
from rdmacli.probe.kinds import DEFAULT, KINDS, ProbeKind, Prober
from rdmacli.probe.nic import Peer

BACKOFF_MAX = 8  # windows between two tries of a NIC that does not open, at most
# what the stack may refuse while a NIC probes on without it (probe.state.NicState's counts)
REFUSALS = {"answer": "answers_lost", "repost": "reposts_failed", "teardown": "teardown_errors"}


def let_go() -> None:
    """librdmacm's device list synced with the kernel's (rdma.cm.let_go_of_removed_devices): a
    removed device closed in this process, so that its removal can finish. Never fatal."""
    from rdmacli.rdma import cm

    try:
        cm.let_go_of_removed_devices()
    except EnvironmentProblem:  # no librdmacm at all: the NICs' own open says why
        pass


@dataclass(frozen=True)
class ProbeEnd:
    """This node's end of one test of a phase: its rail, the partner and the partner's rail,
    pass or fail with the error that says why, its figures, and its port's counters that moved
    (when it failed or lost probes). The front-ends read it as it is: watch judges it, mesh's
    agent makes its wire record of it (records.PairRecord.of_probe)."""

    rail: int
    peer: int
    peer_rail: int
    result: str  # pass or fail
    error: RdmacliError | None = None
    figures: ProbeFigures = ProbeFigures()
    counters: tuple[Deltas, ...] = ()  # its port's, where the pair failed or lost probes


class Topology(Protocol):
    """What a phase needs of the fabric (mesh's AgentConfig, watch's WatchPlan): this node's
    rank, each NIC's number (in the datagrams and SIDR tokens), address and port, and the key
    that tags the datagrams and tokens (the fabric's for watch, the run's for mesh)."""

    @property
    def rank(self) -> int: ...

    @property
    def probe_key(self) -> bytes: ...

    def nic(self, rank: int, rail: int) -> int: ...

    def address(self, rank: int, rail: int) -> str: ...

    def port_of(self, rail: int) -> int: ...


class Phase:
    """This node's probe phase (tests as (its rail, the partner, the partner's rail)): one
    NicProbe a rail. The NICs are opened here, before the agent says it is ready, so that the
    coordinator's go means every NIC of the fabric listens with its receives posted: a phase that
    began while some agents were still opening (posting a thousand receives each, sixteen agents
    on two emulated CPUs) had their partners' SIDR windows end unanswered. A rail that cannot
    open has its problem said in `problems` (the agent's per-rail list), as the agent's preflight
    does."""

    def __init__(
        self,
        cfg: Topology,
        tests: list[tuple[int, int, int]],
        problems: list,
        *,
        run: bytes,
        count: int,
        stop=lambda: False,
        keep: bool = False,
        kind: ProbeKind = KINDS[DEFAULT],
    ):
        self.prober = kind.nic_class()  # each NIC's (probe.kinds: a row a probe check)
        self.keep = keep  # NICs stay open after a run, for next_window (`rdmacli watch`)
        self.stop = stop
        self.nics: dict[int, Prober] = {}
        self.dropped: dict[int, tuple[int, int]] = {}  # rail -> (forged, foreign) of its last run
        # rail -> what the stack refused that its NIC went on without (REFUSALS), since last taken
        self.refused: dict[int, dict[str, int]] = {}
        # rail -> its probe thread's (run-queue wait, wall) of its last run, s (probe.host)
        self.waited: dict[int, tuple[float, float]] = {}
        # rail -> (its opens failed in a row, windows still to pass before the next try, why)
        self.backoff: dict[int, tuple[int, int, RdmacliError]] = {}
        self.next_window(cfg, tests, problems, run=run, count=count)

    def next_window(
        self, cfg: Topology, tests: list[tuple[int, int, int]], problems: list, *, run: bytes, count: int
    ) -> None:
        """Take a window's tests: a NIC kept open from the window before (keep) goes on with its
        QP and what it knows of its partners (NicProbe.retarget) when its rail, address and port
        are the same; any other is closed; a rail not open is opened."""
        self.cfg, self.problems, self.run_id, self.count = cfg, problems, run, count
        let_go()  # any device removed since (ours or not) is closed in this process, not held
        self.by_rail: dict[int, list[Peer]] = {}
        for rail, peer, peer_rail in tests:
            self.by_rail.setdefault(rail, []).append(
                Peer(
                    peer,
                    peer_rail,
                    cfg.nic(peer, peer_rail),
                    cfg.address(peer, peer_rail),
                    cfg.port_of(peer_rail),
                )
            )
        for rail in [r for r in self.backoff if r >= len(problems)]:
            del self.backoff[rail]  # a rail the new plan no longer has (a reload removed it)
        for rail, nic in list(self.nics.items()):
            if rail >= len(problems) or rail not in self.by_rail or problems[rail] is not None:
                self.drop(rail)  # removed by a reload, or no test of its own this window
                continue
            same = (nic.nic, nic.address, nic.port, nic.key) == (
                cfg.nic(cfg.rank, rail),
                cfg.address(cfg.rank, rail),
                cfg.port_of(rail),
                cfg.probe_key,
            )
            try:
                if not same:
                    raise LookupError("not this window's")
                nic.retarget(run, self.by_rail[rail], count)
            except Exception:  # noqa: BLE001 - closed; opened afresh below when it has tests
                self.drop(rail)
        for rail, peers in sorted(self.by_rail.items()):
            if problems[rail] is not None or rail in self.nics or self._waits(rail, problems):
                continue
            nic = self.prober(
                run=run,
                key=cfg.probe_key,
                nic=cfg.nic(cfg.rank, rail),
                address=cfg.address(cfg.rank, rail),
                port=cfg.port_of(rail),
                peers=peers,
                count=count,
                begin=0.0,
                end=0.0,
                stop=self.stop,
            )
            self.nics[rail] = nic
            try:
                nic.open()
            except Exception as exc:  # noqa: BLE001 - the stack refused something: this rail's cause
                problems[rail] = (
                    exc
                    if isinstance(exc, RdmacliError)
                    else RdmacliError(
                        f"the probe could not open on {cfg.address(cfg.rank, rail)}: {exc}",
                        cause=Cause.CALL_FAILED,
                    )
                )
                self.drop(rail)
                failed = self.backoff.get(rail, (0, 0, None))[0] + 1
                pause = min(2 ** (failed - 1), BACKOFF_MAX)
                if failed > 1:  # said with its backoff, the same words until the next try
                    why = problems[rail]
                    problems[rail] = RdmacliError(
                        f"{why.message} (failed {failed} times in a row: tried every {pause} window(s))",
                        cause=why.cause,
                        hint=why.hint,
                    )
                self.backoff[rail] = (failed, pause - 1, problems[rail])
            else:
                self.backoff.pop(rail, None)

    def _waits(self, rail: int, problems: list) -> bool:
        """A NIC that did not open is tried again after 1, 2, 4, then every BACKOFF_MAX windows
        (a device gone for good is not opened, its driver asked, every window for days); while
        it waits, its last problem is said again."""
        failed, wait, why = self.backoff.get(rail, (0, 0, None))
        if wait <= 0 or why is None:
            return False
        self.backoff[rail] = (failed, wait - 1, why)
        problems[rail] = why
        return True

    def devices(self) -> dict[int, tuple[str | None, int]]:
        """Each open rail's RDMA device and port, as its NIC found them."""
        return {rail: (nic.device, nic.ib_port) for rail, nic in self.nics.items()}

    def drop(self, rail: int) -> None:
        """Close one rail's NIC (the next window opens it afresh: after its link went down, or
        anything that went wrong)."""
        nic = self.nics.pop(rail, None)
        if nic is not None:
            nic.close()
            self._refusals(rail, nic)

    def _refusals(self, rail: int, nic: Prober) -> None:
        """The NIC's refusals (answers, reposts, teardown) moved into the phase's, counted once."""
        mine = self.refused.setdefault(rail, dict.fromkeys(REFUSALS, 0))
        for what, attr in REFUSALS.items():
            mine[what] += getattr(nic, attr, 0)
            setattr(nic, attr, 0)

    def take_refused(self) -> dict[int, dict[str, int]]:
        """Each rail's refusals since the last call (the watch agent's /metrics counts them)."""
        out, self.refused = self.refused, {}
        return {rail: counts for rail, counts in out.items() if any(counts.values())}

    def run(self, begin: float, end: float) -> list[ProbeEnd]:
        """Probe from `begin` to `end` on every open NIC, each in a thread (they are separate
        NICs); this node's end of every test."""
        cfg = self.cfg

        def one(rail: int) -> list[ProbeEnd]:
            peers = self.by_rail[rail]
            nic = self.nics.get(rail)
            if nic is None:  # this NIC cannot probe: each pair says why
                return [ProbeEnd(rail, p.rank, p.rail, "fail", self.problems[rail]) for p in peers]
            failed = True
            span = Waited()
            try:
                nic.phase(begin, end)
                nic.run()
                results = nic.results()
                failed = False
            except RdmacliError as exc:
                results = [(p, "fail", exc) for p in peers]
            except Exception as exc:  # noqa: BLE001 - the stack refused something: every pair says what
                err = RdmacliError(
                    f"the probe could not run on {cfg.address(cfg.rank, rail)}: {exc}",
                    cause=Cause.CALL_FAILED,
                )
                results = [(p, "fail", err) for p in peers]
            finally:
                self.dropped[rail] = (nic.forged_seen(), nic.foreign_seen())  # read before any close
                waited = span.end()
                if waited is not None:
                    self.waited[rail] = waited
                if failed or not self.keep or self.stop():  # a NIC kept open only when all went well
                    nic.close()
                self._refusals(rail, nic)
            return [
                ProbeEnd(rail, p.rank, p.rail, result, error, p.tally.figures(),
                         tuple(nic.counters) if nic.counters and (result != "pass" or p.tally.lost) else ())
                for p, result, error in results
            ]  # fmt: skip

        rails = sorted(self.by_rail)
        self.dropped, self.waited = {}, {}
        with ThreadPoolExecutor(max(len(rails), 1), thread_name_prefix="probe-rail") as pool:
            out = [rec for recs in pool.map(one, rails) for rec in recs]
        closed = [r for r, nic in self.nics.items() if nic.listen_id is None]  # closed by its run
        for rail in closed:
            self.drop(rail)
        if closed:
            let_go()  # a device removed under a NIC now closed: librdmacm lets go of it too
        return out

    def close(self) -> None:
        """Whatever is still open (a run that ended before its phase); closing twice is harmless."""
        for rail, nic in self.nics.items():
            nic.close()
            self._refusals(rail, nic)
