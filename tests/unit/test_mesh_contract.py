"""The mesh's contract: the run spec (declared once, checked field by field, sent on stdin, never
argv) and the agents' typed records; one side rule, one table of short codes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import threading
import zlib

import pytest

from rdmacli.errors import Cause
from rdmacli.mesh import contract, records
from rdmacli.mesh.contract import RunSpec, SpecError
from rdmacli.mesh.findings import ErrorDoc

HERE = os.path.dirname(__file__)


def fleet_spec(nodes: int = 10_000, rails: int = 8) -> RunSpec:
    names = [f"gpu{i:05d}" for i in range(nodes)]
    addresses = [[f"10.{k}.{i // 256}.{i % 256}" for k in range(rails)] for i in range(nodes)]
    return RunSpec(run_id="0123456789abcdef", names=names, addresses=addresses, start_at=1.79e9, quick=True)


def test_a_spec_survives_its_line_and_a_fleets_travels_compressed():
    small = RunSpec(run_id="ab" * 8, names=["n1", "n2"], addresses=[["10.0.0.1"], ["10.0.0.2"]])
    assert RunSpec.from_line(small.to_line()) == small and b"zlib" not in small.to_line()
    big = fleet_spec()
    line = big.to_line()
    plain = len(json.dumps(big.to_dict()))
    assert plain > 1_000_000 and len(line) < plain / 3, (plain, len(line))  # about 1.8 MB to a few hundred KB
    assert RunSpec.from_line(line) == big


def test_every_field_is_checked_and_refused_in_words():
    base = RunSpec(run_id="ab" * 8, names=["n1", "n2"], addresses=[["10.0.0.1"], ["10.0.0.2"]]).to_dict()
    for change, words in (
        ({"run_id": "xyz"}, "bad run_id"),
        ({"names": ["n1"]}, "bad names"),
        ({"names": ["n1", "n1"]}, "bad names"),
        ({"names": ["n1", "-oProxyCommand=x"]}, "bad names"),
        ({"addresses": [["10.0.0.1"], ["10.0.0.2", "10.1.0.2"]]}, "bad addresses"),
        ({"addresses": [["10.0.0.1"], ["$(reboot)"]]}, "bad addresses"),
        ({"round_s": 0.1}, "bad round_s"),
        ({"round_s": float("nan")}, "bad round_s"),
        ({"port": 0}, "bad port"),
        ({"port": True}, "bad port"),
        (
            {"port": 65535, "addresses": [["10.0.0.1", "10.1.0.1"], ["10.0.0.2", "10.1.0.2"]]},
            "past port 65535",
        ),
        ({"test": "rm"}, "bad test"),
        ({"count": 10**9}, "bad count"),
        ({"quick": "yes"}, "bad quick"),
        ({"discover": {"rails": None}}, "bad discover"),
        ({"addresses": []}, "no addresses"),
        ({"pairs": "most"}, "bad pairs"),
        ({"groups": "leaf1"}, "bad groups"),  # a string is not a group per node
        ({"groups": ["leaf1"]}, "2 names, 1 groups"),
        ({"groups": ["leaf1", "$(reboot)"]}, "bad groups"),
        ({"pairs": "sample"}, "a sample"),  # without K
        ({"pairs": "group", "sample": 3}, "a sample"),
        ({"sample": 10**6}, "bad sample"),
        ({"rotation": -1}, "bad rotation"),
        ({"extra": 1}, "unknown field 'extra'"),
        ({"v": 2}, "not version 1"),
    ):
        with pytest.raises(SpecError, match=words):
            RunSpec.from_line(json.dumps({**base, **change}))


def test_a_compressed_spec_that_inflates_past_the_limit_is_refused():
    bomb = zlib.compress(b" " * (contract.MAX_SPEC + 10))
    line = json.dumps({"v": 1, "zlib": base64.b64encode(bomb).decode()})
    with pytest.raises(SpecError, match="inflates past"):
        RunSpec.from_line(line)
    with pytest.raises(SpecError, match="bad compressed form"):
        RunSpec.from_line('{"v": 1, "zlib": "not base64!"}')


def test_defaults_are_declared_once_and_the_cli_takes_them():
    from rdmacli.cli.mesh import command

    params = {p.name: p for p in command.params}
    for name, option in (("count", "count"), ("port", "port"), ("round_s", "round_time"), ("test", "test")):
        assert params[option].default == contract.default(name) and params[option].show_default


def test_the_reader_takes_the_spec_and_the_lines_after_it_from_a_pipe_within_its_deadline():
    r, w = os.pipe()
    reader = contract.LineReader(os.fdopen(r, "rb", buffering=0))
    big = fleet_spec(2000, 8)
    writer = threading.Thread(target=lambda: (os.write(w, big.to_line() + b'{"go": 1}\n'), None))
    writer.start()
    assert contract.read_spec(reader, 30) == big
    assert reader.readline(limit=1000) == b'{"go": 1}'
    writer.join()
    import time

    waiting = threading.Thread(target=lambda: result.append(reader.readline(time.monotonic() + 0.3)))
    result: list = []
    waiting.start()
    waiting.join(60)  # a hang guard, not a speed test: the deadline is 0.3 s
    assert not waiting.is_alive() and result == [None]  # nothing more: the deadline, not a hang
    os.close(w)
    assert reader.readline() is None  # end of file


def test_a_spec_for_10000_nodes_of_8_rails_reaches_an_agent_through_the_launcher(monkeypatch):
    """The real ClusterShell exec worker; the agent is a stand-in that reads the spec as the
    real one does and answers with its digest. Its command line stays short."""
    from rdmacli.mesh.launch import ClusterShellLauncher

    spec = fleet_spec()
    want = hashlib.sha256(json.dumps(spec.to_dict(), sort_keys=True).encode()).hexdigest()
    cmd = [sys.executable, os.path.join(HERE, "mesh_agents", "spec_echo.py"), "mesh-agent", "--rank", "9999"]
    lines = []
    launcher = ClusterShellLauncher("exec")
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(HERE)))
    launcher.run({"gpu09999": cmd}, spec.to_line(), lambda node, line, err: lines.append((node, line, err)),
                 lambda node, rc: None, 120)  # fmt: skip
    records = [json.loads(x) for node, x, err in lines if not err and x.startswith("{")]
    assert records and records[0]["host"] == f"10000x8 {want}", lines[-5:]
    assert records[0]["node"] == "gpu09999" and len(" ".join(cmd)) < 300


def test_records_are_typed_both_ways_and_checked_on_the_way_in():
    rec = records.PairRecord(run="ab" * 8, rank=3, peer=1, round=2, result="pass", rtt_p50_us=12.5)
    line = json.dumps(rec.to_dict())
    back = records.parse_record(line, "ab" * 8)
    assert back == rec and back.side == "connect" and rec.to_dict()["a"] == 1
    assert records.parse_record(line, "cd" * 8) is None  # another run's: ignored, not a violation
    with pytest.raises(records.Violation, match="not a figure from 0"):
        records.parse_record(line.replace("12.5", "-1"), "ab" * 8)
    said = {"type": "agent", "run": "ab" * 8, "rank": 0, "node": "n\x1b[2J",
            "rails": [{"ready": False}, {"device": "a b"}]}  # fmt: skip
    agent = records.parse_record(json.dumps(said), "ab" * 8)
    assert agent.node == "n[2J" and agent.ready_rails(2) == [1] and agent.rails[1].device is None


def test_one_side_rule_and_one_table_of_short_codes():
    from rdmacli.mesh import report

    assert contract.side_of(0, 1) == "listen" and contract.side_of(5, 2) == "connect"
    codes = [code for code, _, _ in report.CODES]
    causes = [c for _, cs, _ in report.CODES for c in cs]
    assert len(set(codes)) == len(codes) and len(set(causes)) == len(causes)
    assert report.cause_of(ErrorDoc.of({"message": "x", "cause": Cause.LOCAL_PORT_DOWN.value})) == "DOWN"


def test_the_agents_test_kinds_are_the_contracts():
    from rdmacli.mesh import pair
    from rdmacli.mesh.kinds import PAIR_CHECKS
    from rdmacli.mesh.schedule import AT_ONCE

    # a connection test runs through a pair.Kind; the connectionless probe (rdmacli/probe) does not
    assert tuple(PAIR_CHECKS) + AT_ONCE == contract.TESTS
    assert all(isinstance(c.pair_kind(), pair.Kind) for c in PAIR_CHECKS.values())


def test_a_new_test_kind_is_one_row_and_its_module():
    """A kind of test the mesh never had, in a fresh interpreter: its row in mesh.kinds (added
    before anything else is read, as a new module's row would be) and its runner (here, this
    script's own pair.Kind), nothing else. `mesh --help` offers it with its words, the run spec
    takes it, the schedule gives it a slot per pair (not a phase), an agent imports its runner
    only when a pair runs; run end to end through the library on the in-process launcher, its
    pairs pass, the matrix is titled with its figure and the Prometheus file labels it."""
    script = textwrap.dedent(
        """
        import os, sys, tempfile
        sys.path.insert(0, "tests/unit")
        from rdmacli.mesh import kinds
        row = kinds.Check("echo", "an echo of another kind", "echomod:ECHO", "echo time")
        kinds.PAIR_CHECKS["echo"] = row
        from click.testing import CliRunner
        from rdmacli.cli import cli
        from rdmacli.mesh import contract, schedule
        out = CliRunner().invoke(cli, ["mesh", "--help"], terminal_width=200).output
        assert "echo" in contract.TESTS and "echo" not in schedule.AT_ONCE, contract.TESTS
        assert "echo (an echo of another kind)" in " ".join(out.split()), out
        import types
        from rdmacli.engine.protocol import Params
        from rdmacli.mesh import pair
        from rdmacli.protocols.table import CONNECT
        echomod = types.ModuleType("echomod")
        echomod.ECHO = pair.Kind(CONNECT, lambda s: Params(count=1, size=8), lambda stats: {"setup_us": 1.0})
        sys.modules["echomod"] = echomod
        from meshfabric import Fabric, InProcessLaunch
        from rdmacli.mesh import run as mesh
        from rdmacli.mesh.contract import RunSpec
        names = ["n1", "n2", "n3"]
        spec = RunSpec(run_id="ab" * 8, names=names, addresses=[[f"10.0.0.{i}"] for i in (1, 2, 3)],
                       test="echo", round_s=1)
        request = mesh.Request(spec=spec, nodes_spec="n[1-3]", launch_s=30, retest_rounds=2, slow_factor=1000)
        outcome = mesh.run(request, InProcessLaunch(Fabric()))
        doc = outcome.to_dict()
        assert doc["result"] == "pass" and doc["totals"]["pairs_passed"] == 3, doc["error"]
        import io
        from rich.console import Console
        from rdmacli.render import prometheus
        from rdmacli.render.mesh import print_mesh
        class App:
            out = Console(file=io.StringIO(), width=200)
        print_mesh(App, outcome, outcome.report)
        text = App.out.file.getvalue()
        assert "rdmacli mesh: echo time per pair" in " ".join(text.split()), text
        with tempfile.TemporaryDirectory() as where:
            prometheus.write(os.path.join(where, "m.prom"), outcome, outcome.report)
            assert 'test="echo"' in open(os.path.join(where, "m.prom")).read()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=str(pathlib.Path(__file__).parents[2]))  # fmt: skip
    assert done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-3000:]


def test_an_agent_whose_stdin_is_empty_or_dev_null_says_so_at_once(tmp_path):
    """epoll refuses /dev/null and regular files: the reader reads them plainly (they never
    block) and says the spec never came, not an errno."""
    import subprocess

    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for source in ("/dev/null", str(empty)):
        with open(source, "rb") as stdin:  # the timeout only guards a hang: past the 120 s wait
            r = subprocess.run([sys.executable, "-m", "rdmacli", "mesh-agent", "--rank", "0"], stdin=stdin,
                               capture_output=True, text=True, timeout=300)  # fmt: skip
        # its words say it did not wait out the spec's deadline ("within 120 s") but saw the end
        assert r.returncode == 2 and "stdin ended before the run spec came" in r.stderr, r.stderr
        assert json.loads(r.stdout)["type"] == "error"


def test_a_map_gives_groups_with_or_without_addresses_and_refuses_a_mix(tmp_path):
    from rdmacli.mesh import inputs

    path = tmp_path / "map"
    path.write_text("n1 group=leaf1 10.0.0.1\nn2 10.0.0.2 group=leaf2 # a comment\n")
    m = inputs.read_map(str(path))
    assert m.addresses == {"n1": ["10.0.0.1"], "n2": ["10.0.0.2"]}
    assert m.groups == {"n1": "leaf1", "n2": "leaf2"}
    path.write_text("n1 group=leaf1\nn2 group=leaf2\n")  # groups only: the rails are discovered
    m = inputs.read_map(str(path))
    assert m.addresses == {}
    assert inputs.groups_of(["n2", "n1"], m, str(path), needed=True) == ("leaf2", "leaf1")
    with pytest.raises(inputs.RdmacliError, match="no group for n3"):
        inputs.groups_of(["n1", "n3"], m, str(path), needed=True)
    for text, words in (
        ("n1 group=leaf1 10.0.0.1\nn2 group=leaf2\n", "some nodes have addresses and some not"),
        ("n1 group=$(x) 10.0.0.1\n", "a group name is"),
        ("n1 group=a group=b\n", "one group"),
        ("n1\n", "expected"),
    ):
        path.write_text(text)
        with pytest.raises(inputs.RdmacliError, match=words):
            inputs.read_map(str(path))
