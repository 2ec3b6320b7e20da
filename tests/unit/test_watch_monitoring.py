"""The monitoring shipped with `rdmacli watch`: its alert rules checked and unit-tested by
Prometheus's own promtool, and every series the rules and the Grafana dashboard ask for is one
the agent exports (a renamed metric must not leave a dashboard silently empty)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from rdmacli.watch.hysteresis import Policy
from rdmacli.watch.metrics import WatchMetrics
from rdmacli.watch.state import WatchState

HERE = Path(__file__).resolve().parents[2]
MON = HERE / "rdmacli" / "watch" / "monitoring"


def promtool() -> str:
    found = shutil.which("promtool") or str(HERE / "build" / "tools" / "promtool")
    assert os.access(found, os.X_OK), "no promtool: `make deps` unpacks Debian's into build/tools"
    return found


def test_the_alert_rules_pass_promtools_check_and_their_unit_tests():
    r = subprocess.run(
        [promtool(), "check", "rules", str(MON / "alerts.yml")], capture_output=True, text=True
    )
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"], cwd=MON, capture_output=True, text=True
    )
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def exported() -> set[str]:
    """The series names an agent exports, after a window with a named pair and NIC."""
    from prometheus_client import generate_latest

    from rdmacli.figures import ProbeFigures
    from rdmacli.probe.phase import ProbeEnd

    s = WatchState(rails=1, policy=Policy(raise_after=1, raise_window=1))
    m = WatchMetrics("n1")
    from rdmacli.counters import Deltas

    moved = (Deltas("rxe0", 1, {"completer_retry_err": 1}),)
    figures = ProbeFigures(probes_sent=10, probes_answered=8, rtt_p50_us=10.0)
    recs = [ProbeEnd(0, p, 0, "pass", None, figures, moved) for p in (2, 3, 4)]  # more than LIARS partners
    m.window(s.feed(recs), {0: "rxe0"}, s, ["n0", "n1", "n2", "n3", "n4"])
    text = generate_latest(m.registry).decode()
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(rdmacli_watch_[a-z_]+)", expr))


def test_every_series_the_rules_and_the_dashboard_ask_for_is_exported():
    have = exported()
    assert {"rdmacli_watch_nic_bad", "rdmacli_watch_peer_bad", "rdmacli_watch_rtt_seconds_bucket"} <= have
    exprs = re.findall(r"expr: >?\s*\n?\s*(.+)", (MON / "alerts.yml").read_text())
    dash = json.loads((MON / "grafana-dashboard.json").read_text())
    exprs += [t["expr"] for p in dash["panels"] for t in p["targets"]]
    asked = set().union(*map(metric_names, exprs))
    assert asked and asked <= have, asked - have
    assert dash["uid"] == "rdmacli-watch" and len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
