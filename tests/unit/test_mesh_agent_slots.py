"""An agent keeps to its time slots: a pair that overruns its slot costs the next pair only when
that pair's slot is over too, and the record then says why (the overrun, not a late start)."""

from __future__ import annotations

import errno
from dataclasses import replace
from types import SimpleNamespace

from fakerdma import FakeBackend

from rdmacli.mesh import agent
from rdmacli.mesh.agent import AgentConfig, run_agent
from rdmacli.mesh.contract import RunSpec


def test_a_pair_that_overran_its_slot_is_named_in_the_next_ones_failure(monkeypatch):
    now = [1000.0]  # a clock of our own: no test here depends on how fast this host is
    clock = SimpleNamespace(time=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(agent, "time", clock)

    def slow_pair(cfg, rnd, slot, peer, end, rail=0, peer_rail=0, *, backend=None, stops=None):
        clock.sleep(0.75)  # every pair overruns its 0.5 s slot by 0.25 s
        return replace(agent.pair_record(cfg, rnd, slot, peer), result="pass")

    monkeypatch.setattr(agent, "run_pair", slow_pair)
    spec = RunSpec(run_id="00" * 8, names=["n1", "n2", "n3", "n4"], start_at=now[0] + 0.2, round_s=0.5,
                   addresses=[["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"], ["10.0.0.4"]])  # fmt: skip
    records = []
    run_agent(AgentConfig(spec, 0), lambda rec: records.append(rec.to_dict()), backend=FakeBackend())
    assert records[0]["type"] == "agent" and records[0]["ready"] is True
    pairs = [r for r in records if r["type"] == "pair"]
    assert len(pairs) == 3
    # slot 0 runs and overruns; slot 1 starts late but before its end and runs; slot 2's end
    # has passed by the time slot 1's pair ends
    assert [p["result"] for p in pairs] == ["pass", "pass", "fail"]
    err = pairs[2]["error"]
    assert err["cause"] == "agent" and "the pair before it (round 1, with" in err["message"]
    assert "raise --round-time" in err["message"] and "--launch-timeout" not in err["message"]


def test_an_agent_whose_mesh_port_is_held_says_so_once_and_runs_no_pair(monkeypatch):
    """Ready means ready: the agent binds and listens on the mesh port before it reports; a port
    another run holds is found then, said as its cause with the holder, for every pair."""
    from rdmacli.rdma.cm import RdmaCallError

    backend = FakeBackend()

    def bind(cm, sa):
        raise RdmaCallError("rdma_bind_addr", errno.EADDRINUSE)

    backend.script["bind"] = bind
    backend.holders = ["python3 (pid 77)"]
    ran = []
    monkeypatch.setattr(agent, "run_pair", lambda *a, **kw: ran.append(a))
    addresses = [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]]
    spec = RunSpec(run_id="00" * 8, names=["n1", "n2", "n3"], addresses=addresses, round_s=1)
    records = []
    run_agent(AgentConfig(spec, 1), lambda rec: records.append(rec.to_dict()), backend=backend)
    assert records[0]["type"] == "agent" and records[0]["ready"] is False
    pairs = [r for r in records if r["type"] == "pair"]
    assert pairs and not ran
    for p in pairs:
        assert p["result"] == "fail" and p["error"]["cause"] == "port_in_use"
        assert p["error"]["holders"] == ["python3 (pid 77)"]
