"""Issue 51: a new probe-based check is one module and a row (rdmacli.probe.kinds)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from rdmacli.probe import kinds


class EchoNic:
    """A prober of another kind, as a new module would give: the keywords Phase makes it with,
    and what Phase drives (probe.kinds.Prober)."""

    made: list = []

    def __init__(self, **kw):
        self.nic, self.address, self.port, self.key = kw["nic"], kw["address"], kw["port"], kw["key"]
        self.peers, self.device, self.ib_port, self.listen_id, self.counters = kw["peers"], "echo0", 1, 1, []
        EchoNic.made.append(self)

    def open(self):
        pass

    def retarget(self, run, peers, count):
        self.peers = peers

    def phase(self, begin, end):
        pass

    def run(self):
        for p in self.peers:
            p.tally.sent, p.tally.answered = 3, 3

    def results(self):
        return [(p, "pass", None) for p in self.peers]

    def close(self):
        self.listen_id = None

    def forged_seen(self):
        return 0

    def foreign_seen(self):
        return 0


def test_a_row_is_what_a_phase_runs(monkeypatch):
    """Phase makes each NIC's prober from the kind's row; the rest of the phase is the same."""
    from rdmacli.probe import phase as ph

    monkeypatch.setattr(ph, "let_go", lambda: None)
    echo = kinds.ProbeKind("echo", "an echo of another kind", f"{__name__}:EchoNic")
    topo = SimpleNamespace(rank=0, probe_key=bytes(16), nic=lambda r, k: r,
                           address=lambda r, k: f"10.0.0.{r}", port_of=lambda k: 7490)  # fmt: skip
    EchoNic.made.clear()
    p = ph.Phase(topo, [(0, 1, 0), (0, 2, 0)], [None], run=bytes(8), count=3, kind=echo)
    recs = p.run(0.0, 0.0)
    assert [type(n) for n in EchoNic.made] == [EchoNic]
    assert [(r.peer, r.result) for r in recs] == [(1, "pass"), (2, "pass")]
    p.close()


def test_the_probe_row_names_the_nic_prober():
    from rdmacli.probe.nic import NicProbe

    assert kinds.KINDS[kinds.DEFAULT].nic_class() is NicProbe


def test_a_row_added_reaches_mesh_and_watch_with_no_other_change(tmp_path):
    """Added before anything else is imported (as a new module's row in the table would be): the
    mesh's --test choices and words, its at-once schedule and the contract's check, and watch's
    plan take it; nothing imports the prober until a phase opens."""
    script = textwrap.dedent(
        """
        import sys
        from rdmacli.probe import kinds
        kinds.KINDS["echo"] = kinds.ProbeKind("echo", "an echo of another kind", "nowhere:Nic")
        from click.testing import CliRunner
        from rdmacli.cli import cli
        from rdmacli.mesh import contract, schedule
        from rdmacli.watch.plan import WatchPlan
        out = CliRunner().invoke(cli, ["mesh", "--help"], terminal_width=200).output
        assert "echo" in contract.TESTS and "echo" in schedule.AT_ONCE, contract.TESTS
        assert "echo" in out and "an echo of another kind" in out, out
        WatchPlan(("a", "b"), (("10.0.0.1",), ("10.0.0.2",)), 0, test="echo")
        assert "nowhere" not in sys.modules  # the prober is imported only where a phase opens
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr[-3000:]


def test_watch_refuses_a_check_it_has_no_row_for():
    from rdmacli.watch.plan import WatchPlan

    with pytest.raises(ValueError, match="no probe check"):
        WatchPlan(("a", "b"), (("10.0.0.1",), ("10.0.0.2",)), 0, test="nonesuch")
