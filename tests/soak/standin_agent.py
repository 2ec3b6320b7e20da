"""`rdmacli` with only the watch agent's RDMA prober replaced, for the agent's soak on a host
without RDMA (tests/soak/agent_chaos.py): each window's phase waits out its time on the wall
clock, as a real phase does, and returns every test of the plan answered, so a healthy fabric
whose verdicts must stay empty whatever is done to the agent. Everything else (the CLI, the map,
the reloads, the state file, /metrics, the web config, the key) is the real code.

    python tests/soak/standin_agent.py watch run --map FILE --node n1 ...
"""

from __future__ import annotations

import sys
import time

from rdmacli.figures import ProbeFigures
from rdmacli.probe.phase import ProbeEnd
from rdmacli.watch import agent as agent_mod
from rdmacli.watch import service


class Healthy:
    """A window's phase (watch.agent.WindowPhase) whose every partner answered every probe."""

    keep = False
    problems: list = []
    dropped: dict = {}
    waited: dict = {}

    def __init__(self, plan, k, stop):
        self.plan, self.k, self.stop = plan, k, stop
        self.problems = [None] * plan.rails

    def run(self, begin: float, end: float) -> list[ProbeEnd]:
        while time.time() < end and not self.stop():
            time.sleep(min(0.2, max(end - time.time(), 0.0)))
        count = self.plan.count
        figures = ProbeFigures(probes_sent=count, probes_answered=count, rtt_p50_us=10.0, rtt_min_us=8.0)
        return [
            ProbeEnd(rail, peer, peer_rail, "pass", None, figures)
            for rail, peer, peer_rail in self.plan.tests(self.k)
        ]

    def close(self) -> None:
        pass

    def drop(self, rail: int) -> None:
        pass

    def devices(self) -> dict:
        return {rail: (f"standin{rail}", 1) for rail in range(self.plan.rails)}

    def take_refused(self) -> dict:
        return {}


class Phases:
    def __call__(self, plan, k, stop):
        return Healthy(plan, k, stop)

    def close(self) -> None:
        pass


class Agent(agent_mod.WatchAgent):
    def __init__(self, *a, **kw):
        super().__init__(*a, make_phase=Phases(), **kw)


agent_mod.WatchAgent = Agent  # type: ignore[misc]  # serve() imports it at call time
service.preflight = lambda plan, err, **kw: None  # no RDMA device to look for

if __name__ == "__main__":
    from rdmacli.__main__ import main

    sys.exit(main())
