"""The `rdmacli watch` agent's loop: one probe window after another, until it is stopped.

Each window k: from OPEN_LEAD_S before it begins, the NICs (probe.phase.Phase: one UD QP a
rail, receives posted, opened at the first window and kept open after) probe window k's
partners (WatchPlan.tests) until its phase ends; the records are judged and fed to the trackers
(WatchState), the metrics and the state file follow. A NIC is opened afresh after anything went
wrong on it or its link went down; all are closed when the agent stops.
A window opened a little late still runs (its partners ask again for its QP number); one a
third into its phase is skipped, counted, never judged on what little would be left. The plan
may be replaced between windows (SIGHUP re-reads the map: `reload`); a stop (SIGTERM) ends the
window in progress at its next loop turn.

The loop takes its phase as a factory, so its timing and bookkeeping are tested without RDMA;
the real factory (ProbePhases) is one probe.phase.Phase over the plan.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from rdmacli.watch.plan import OPEN_LEAD_S, WatchPlan
from rdmacli.watch.state import WatchState

if TYPE_CHECKING:
    from rdmacli.probe.phase import Phase, ProbeEnd

# a window is no evidence when this host kept its probe threads waiting for a CPU this share of
# the phase or more (probe.host: runnable, on a run queue). Measured in the lab (eight agents x
# two rails on two emulated CPUs beside a busy host): 0.12 to 0.38 while it ran on, 0.35 to 0.47
# while eight Python starts ran beside it, 0.58 to 0.78 while the eight agents started at once;
# a host with a CPU to spare keeps it near 0. Half: only a host that left the probes waiting
# more than it let them run, whose windows say nothing of the wire.
STARVED = 0.5
BEAT_S = 5.0  # the loop's sign of life at least this often (the watchdog's pings follow it)
PHASE_GRACE_S = 60.0  # past a phase's end: the NICs' close, the counters, the judgement


class WindowPhase(Protocol):
    """What the loop reads of a window's phase (probe.phase.Phase; the tests' stand-ins)."""

    keep: bool  # its NICs stay open for the next window (closed by PhaseMaker.close at the end)
    problems: list  # per rail: why its NIC did not open (an RdmacliError), or None
    waited: dict[int, tuple[float, float]]  # rail -> its probe thread's (run-queue wait, wall), s
    dropped: dict[int, tuple[int, int]]  # rail -> datagrams dropped: (a wrong tag, another QP)

    def run(self, begin: float, end: float) -> list[ProbeEnd]: ...

    def close(self) -> None: ...

    def drop(self, rail: int) -> None: ...

    def devices(self) -> dict[int, tuple[str | None, int]]: ...

    def take_refused(self) -> dict[int, dict[str, int]]: ...


class PhaseMaker(Protocol):
    """(plan, window k, stop) -> the window's phase; close() ends whatever it keeps open."""

    def __call__(self, plan: WatchPlan, k: int, stop: Callable[[], bool]) -> WindowPhase: ...

    def close(self) -> None: ...


class ProbePhases:
    """The real stack's phases (WatchAgent.make_phase): one probe.phase.Phase over the plan (its
    topology) and each window's tests and run id, its NICs kept open from window to window
    (keep=True): their QP, receives and the partners they already know. Opening every NIC and
    asking every partner by SIDR each window was about a fifth of the agent's CPU in the lab.
    `close` ends them (the agent's stop)."""

    def __init__(self):
        self.phase: Phase | None = None

    def __call__(self, plan: WatchPlan, k: int, stop: Callable[[], bool]) -> WindowPhase:
        from rdmacli.probe.kinds import KINDS
        from rdmacli.probe.phase import Phase

        problems: list = [None] * plan.rails
        run = bytes.fromhex(plan.run_id(k))
        if self.phase is None:
            self.phase = Phase(plan, plan.tests(k), problems, stop=stop, keep=True, run=run, count=plan.count,
                               kind=KINDS[plan.test])  # fmt: skip
        else:
            self.phase.next_window(plan, plan.tests(k), problems, run=run, count=plan.count)
        return self.phase

    def close(self) -> None:
        if self.phase is not None:
            self.phase.close()
            self.phase = None


@dataclass
class WatchAgent:
    plan: WatchPlan
    state: WatchState
    on_window: Callable[[int, list, dict], None] | None = None  # (k, ends, by_nic): metrics, state
    make_phase: PhaseMaker = field(default_factory=ProbePhases)
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], bool] | None = None  # True if stopped meanwhile; the stop event's wait
    stopping: threading.Event = field(default_factory=threading.Event)
    next_plan: WatchPlan | None = None
    loader: Callable[[], WatchPlan | None] | None = None  # the plan read again (ask_reload), None: refused
    beat: float = field(default_factory=time.monotonic)  # the loop's last sign of progress (monotonic)
    busy_until: float = 0.0  # a window's phase running: until when it must have ended (monotonic)
    problems: dict = field(default_factory=dict)  # rail -> why its NIC did not open in the last window
    forged: dict = field(default_factory=dict)  # rail -> datagrams and tokens with a wrong tag, last window
    foreign: dict = field(default_factory=dict)  # rail -> from another QP than SIDR named, last window
    refused: dict = field(default_factory=dict)  # rail -> {what: n}: the stack's refusals (probe.phase)
    reload_asked: bool = False
    skipped: int = 0  # windows whose open time had passed when the loop came to them
    starved: int = 0  # windows run with the probe threads kept from the CPU (STARVED): not judged
    host_wait: float = 0.0  # the last window's share of its phase its probe threads waited for a CPU
    devices: dict[int, str | None] = field(default_factory=dict)  # rail -> its RDMA device, as last found
    ports: dict[int, int] = field(default_factory=dict)  # rail -> the device's port
    downed: dict[int, int] = field(default_factory=dict)  # rail -> its link_downed at the last window's end
    read_counters: Callable[[str | None, int], dict] | None = None  # diag.counters.read unless given

    @property
    def window_starved(self) -> bool:
        """The last window's probe threads waited STARVED of its phase or more: it judged nothing."""
        return self.host_wait >= STARVED

    def link_drops(self) -> dict[int, int]:
        """Each NIC's link drops since the last window's end, from its port's own counter read
        now: every second counted, the gaps between phases too (a phase's own counters cover its
        3 s of probes and its margins, and a 5 s outage every 30 s fell outside them, window after
        window, in the lab). The first reading is the baseline; a counter that went backwards (a
        reset) is a new baseline."""
        from rdmacli.diag import counters
        from rdmacli.watch.state import LINK_DOWN_COUNTERS, link_downs

        def read_one(device, port):
            return counters.read(device, port, only=LINK_DOWN_COUNTERS)

        read = self.read_counters or read_one
        out = {}
        for rail, device in self.devices.items():
            values = read(device, self.ports.get(rail, 1))
            now = link_downs(values)
            before = self.downed.get(rail)
            if before is not None and now >= before:
                out[rail] = now - before
            self.downed[rail] = now
        return out

    def forget_rails(self, rails: int) -> None:
        """What the agent knows of each rail, kept only for the rails a new plan still has (a
        reload that removed a rail: its device, port and counters are no NIC of this node's now)."""
        for per_rail in (self.devices, self.ports, self.downed, self.problems, self.forged, self.foreign,
                         self.refused):  # fmt: skip
            for rail in [r for r in per_rail if r >= rails]:
                del per_rail[rail]

    def reload(self, plan: WatchPlan) -> None:
        """A new plan (the map changed), taken at the next window."""
        self.next_plan = plan

    def ask_reload(self) -> None:
        """Read the plan again (`loader`) before the next window: what SIGHUP's handler does,
        and all it does (reading a map and resolving names is no work for a signal handler)."""
        self.reload_asked = True

    def stop(self) -> None:
        self.stopping.set()

    def next_window(self) -> int:
        """The first window whose NICs can still open on time."""
        return self.plan.window(self.clock() + OPEN_LEAD_S) + 1

    def late_limit(self, k: int) -> float:
        """Until when window k may still be opened: a third into its phase. A little late (a
        busy host closing the last window) costs its partners a SIDR asked again, which they
        do; later, too few probes would be left to judge by, and the window is skipped."""
        return self.plan.begin(k) + (self.plan.phase_end(k) - self.plan.begin(k)) / 3

    def run(self, windows: int | None = None) -> int:
        """Windows until stopped (or `windows` of them); the number run. The NICs kept open
        between windows are closed when it ends, however it ends."""
        try:
            return self._windows(windows)
        finally:
            self.make_phase.close()

    def _windows(self, windows: int | None) -> int:
        done = 0
        k = self.next_window()
        while not self.stopping.is_set() and (windows is None or done < windows):
            if self.reload_asked and self.loader is not None:
                self.reload_asked = False
                plan = self.loader()
                if plan is not None:
                    self.reload(plan)
            if self.next_plan is not None:
                same = self.next_plan.window_s == self.plan.window_s
                self.state.rekey(self.plan.names, self.next_plan.names, self.next_plan.rails)
                self.plan, self.next_plan = self.next_plan, None
                self.forget_rails(self.plan.rails)
                if not same:  # its windows are its own: counted afresh (the same: the next one)
                    k = self.next_window()
            open_at = self.plan.begin(k) - OPEN_LEAD_S
            wait = open_at - self.clock()
            if self.clock() > self.late_limit(k):  # too late for this one: the next
                self.skipped += 1
                k = self.next_window()
                continue
            if wait > 0 and self._sleep(wait):
                break
            self.window(k)
            done += 1
            k += 1
        return done

    def _sleep(self, seconds: float) -> bool:
        """Sleep until the next window in beats (a sign of life each BEAT_S); True if stopped."""
        sleep = self.sleep or self.stopping.wait
        while seconds > 0:
            step = min(seconds, BEAT_S)
            if sleep(step):
                return True
            seconds -= step
            self.beat = time.monotonic()
        return False

    def alive(self) -> bool:
        """Whether the agent is making progress, for systemd's watchdog (service.py pings it only
        then): its loop beat within two beats, or a window's phase still within its end and a
        grace. A phase stuck past that, or a loop stuck anywhere, stops the pings and systemd
        restarts the agent."""
        return time.monotonic() < max(self.beat + 2 * BEAT_S, self.busy_until)

    def window(self, k: int) -> None:
        plan = self.plan
        self.busy_until = time.monotonic() + max(plan.phase_end(k) - self.clock(), 0.0) + PHASE_GRACE_S
        phase = self.make_phase(plan, k, self.stopping.is_set)
        try:
            ends = phase.run(plan.begin(k), plan.phase_end(k))
        finally:
            self.beat = time.monotonic()
            if not phase.keep or self.stopping.is_set():
                phase.close()
        for rail, (device, port) in phase.devices().items():
            self.devices[rail], self.ports[rail] = device, port
        self.forged = {rail: n[0] for rail, n in phase.dropped.items()}
        self.foreign = {rail: n[1] for rail, n in phase.dropped.items()}
        self.refused = phase.take_refused()
        self.problems = {rail: str(p)[:300] for rail, p in enumerate(phase.problems) if p is not None}
        drops = self.link_drops()
        for rail, n in drops.items():
            if n:  # a port that went down: its NIC opened afresh
                phase.drop(rail)
        if self.stopping.is_set():  # a window cut short is no evidence
            return
        self.host_wait = min(max((w / wall for w, wall in phase.waited.values()), default=0.0), 1.0)
        self.starved += self.window_starved
        by_nic = self.state.feed(ends, drops, starved=self.window_starved)
        if self.on_window is not None:
            self.on_window(k, ends, by_nic)
