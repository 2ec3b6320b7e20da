"""scripts/lanes, which `make test` runs: lanes of a stage side by side, the next stage only when
every lane of this one has ended, every stage run even after a failure, and the count of suites
that passed and failed. Driven with a stand-in for make that records when each suite starts and
ends (the suites are what the lab suites are; the lanes only order them)."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_lanes(tmp_path: Path, *lanes: str, wait_for: str) -> tuple[int, str, list[tuple[str, str]]]:
    log = tmp_path / "log"
    fake = tmp_path / "fake-make"
    # a suite named fail* exits 2; one named slow* ends only once `wait_for` has ended (20 s at
    # most): it can end first only if the lanes run side by side, whatever the host's load
    fake.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        suite=$2
        echo "start $suite" >> {log}
        case $suite in slow*)
          i=0
          while ! grep -qx "end {wait_for}" {log} && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done ;;
        esac
        echo "end $suite" >> {log}
        echo "said by $suite"
        case $suite in fail*) exit 2 ;; esac
        exit 0
    """)
    )
    fake.chmod(0o755)
    r = subprocess.run(
        [str(ROOT / "scripts" / "lanes"), *lanes],
        env={**os.environ, "MAKE": str(fake)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [tuple(line.split()) for line in log.read_text().splitlines()]
    return r.returncode, r.stdout, events  # type: ignore[return-value]


def test_a_stage_starts_when_every_lane_of_the_one_before_has_ended(tmp_path):
    rc, out, events = run_lanes(tmp_path, "slow1", "quick1 quick2", "--", "last", wait_for="quick2")
    assert rc == 0, out
    assert events.index(("start", "last")) > events.index(("end", "slow1")), events
    assert events.index(("start", "quick2")) < events.index(("end", "slow1")), events  # side by side
    assert "[quick1] said by quick1" in out  # each line prefixed with its suite
    assert out.rstrip().endswith("suites: 4 passed, 0 failed"), out


def test_a_failure_stops_its_lane_but_every_stage_still_runs(tmp_path):
    rc, out, events = run_lanes(tmp_path, "fail1 never", "slow1", "--", "after", wait_for="fail1")
    assert rc != 0
    started = {name for kind, name in events if kind == "start"}
    assert "never" not in started and "after" in started, events
    assert "make test: fail1 FAILED (exit 2)" in out, out
    assert out.rstrip().endswith("suites: 2 passed, 1 failed"), out
