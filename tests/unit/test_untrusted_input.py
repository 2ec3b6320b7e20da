"""Property-based tests (Hypothesis) of every parser of outside input: what peers put in private
data (the hello of connect and ud, rping's adverts, the mesh token), what agents print, what
people write in node names, map and baseline files. None may raise anything but its own refusal,
and what passes a check is safe to use."""

from __future__ import annotations

import json
import shlex
import string

import pytest
from ClusterShell.Worker.Exec import _replace_cmd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from meshdata import make_plan

from rdmacli.errors import RdmacliError
from rdmacli.mesh import inputs, records
from rdmacli.mesh.intake import Intake
from rdmacli.probe import token as T
from rdmacli.protocols import hello as H
from rdmacli.protocols import rping, table

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)


@FAST
@given(st.binary(max_size=200))
def test_private_data_parsers_never_raise_on_any_bytes(data):
    hello = H.parse(data)
    if hello is not None:  # a hello that parses is then only ever checked, with words
        for kind in (table.CONNECT.hello_kind, table.PING.hello_kind, table.UD.hello_kind):
            reason = H.check(hello, kind, 65535)
            assert reason is None or isinstance(reason, str)
    tok = T.parse(data)
    want = T.Token(bytes(8), 1, 2, 3)
    reason = T.check(tok, want)
    assert reason is None or (tok == want) is False
    if reason:
        assert want.run.hex() not in reason  # a refusal echoes nothing expected
    try:
        addr, rkey, size = rping.unpack_info(data)
    except ValueError:
        assert len(data) != rping.INFO.size
    else:
        assert 0 <= size < 2**32 and 0 <= addr < 2**64


@FAST
@given(st.text(max_size=300) | st.builds(lambda t: "fe80::1%" + t, st.text(max_size=20)))
def test_node_names_that_pass_are_safe_on_any_command_line(name):
    if inputs.valid_name(name):
        assert not name.startswith("-")
        assert not set(name) & set(string.whitespace + "'\"`$;&|<>()\\*?[]{}!/")
    else:
        with pytest.raises(RdmacliError) as exc:
            inputs.check_names([name])
        assert exc.value.exit_code == 2


@FAST
@given(st.lists(st.text(max_size=30), min_size=1, max_size=6))
def test_clustershell_gets_back_exactly_the_words_it_was_given(words):
    try:
        line = inputs.clustershell_command(words)
    except RdmacliError:
        assert any("%hosts" in w.replace("%", "%%") for w in words) or "%hosts" in shlex.join(words)
        return
    # the exec worker expands %h, %n, ... in its command: after it, the words are ours again
    assert _replace_cmd(line, "nodeX", 7) == "exec " + shlex.join(words)


@FAST
@given(json_values)
def test_agent_records_of_any_shape_never_crash_the_collector(value):
    plan = make_plan(["n0", "n1", "n2", "n3"], [[f"10.0.0.{i}"] for i in range(4)])
    c = Intake(plan)
    rec = (
        value
        if not isinstance(value, dict)
        else {"type": "pair", "run": plan.spec.run_id, "rank": 1, **value}
    )
    line = json.dumps(rec, allow_nan=True)
    c.on_line("n1", line, False)
    c.on_line("n1", line[:1000], False)
    for p in c.pairs.values():
        for r in p.reports.values():
            assert records.PairRecord.parse(r.to_dict()) == r  # only checked records are ever used
            json.dumps(r.to_dict(), allow_nan=False)


@FAST
@given(st.binary(max_size=400))
def test_map_and_baseline_files_of_any_bytes_are_read_or_refused_in_words(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("in") / "f"
    path.write_bytes(data)
    for read in (inputs.read_map, inputs.read_baseline):
        try:
            read(str(path))
        except RdmacliError as exc:
            assert exc.exit_code == 2


@FAST
@given(json_values)
def test_baselines_of_any_json_are_read_or_refused_in_words(tmp_path_factory, value):
    path = tmp_path_factory.mktemp("b") / "baseline.json"
    doc = {"command": "mesh", "data": {"pairs": [value]}} if not isinstance(value, list) else value
    path.write_text(json.dumps(doc))
    try:
        got = inputs.read_baseline(str(path))
    except RdmacliError as exc:
        assert exc.exit_code == 2
    else:
        from meshdata import pair_result

        from rdmacli.mesh.report import compare

        compare(got, [pair_result("n0", "n1", "fail", "TMO")])


port_counters = st.fixed_dictionaries(
    {
        "device": st.text(min_size=1, max_size=8),
        "port": st.integers(0, 300),
        "moved": st.dictionaries(st.text(max_size=8), st.integers(min_value=0, max_value=2**80)),
        "reset": st.lists(st.text(max_size=4), max_size=2),
    }
)
pair_fields = st.fixed_dictionaries(
    {},
    optional={
        "result": st.sampled_from(["pass", "fail"]) | json_values,
        "error": st.none() | json_values | st.fixed_dictionaries({"message": st.text(max_size=20),
                                                                 "cause": st.text(max_size=20)}),
        "rtt_p50_us": st.floats() | st.integers() | json_values,
        "rtt_p99_us": st.floats(allow_nan=False) | st.integers(min_value=-(2**70), max_value=2**70),
        "took_s": st.floats() | st.integers(min_value=0, max_value=2**70),
        "gbps_ab": st.floats(min_value=0),
        "gbps_ba": st.floats(min_value=0),
        "steps_us": st.dictionaries(st.text(max_size=8), st.floats() | st.integers(), max_size=4),
        "stats": json_values,
        "counters": st.lists(port_counters, max_size=2),
        "rail": st.integers(-2, 3) | json_values,
        "peer_rail": st.integers(-2, 3),
        "round": st.integers(-1, 10),
    },
)  # fmt: skip


@FAST
@given(st.lists(pair_fields, max_size=6))
def test_one_agent_saying_anything_never_ends_the_run_and_the_honest_pairs_stand(lies):
    """The coordinator's whole path (lines in, records, verdict, JSON, text and Prometheus out)
    with one agent (n3) saying anything among honest ones: no exception, strict JSON, and the
    pairs between honest nodes keep their results."""
    import io
    import os
    import tempfile

    from meshdata import judged
    from rich.console import Console

    from rdmacli.cli.app import App
    from rdmacli.mesh import schedule
    from rdmacli.render import prometheus
    from rdmacli.render.mesh import print_mesh

    names = [f"n{i}" for i in range(6)]
    plan = make_plan(names, [[f"10.0.0.{i}"] for i in range(6)], test="bw")
    c = Intake(plan)
    liar = 3
    for rank in range(6):
        c.on_line(
            names[rank],
            json.dumps({"type": "agent", "run": plan.spec.run_id, "rank": rank, "rails": []}),
            False,
        )
    for rnd in plan.rounds:
        for a, b in schedule.pairs(6, rnd):
            for rank, peer in ((a, b), (b, a)):
                if rank == liar:
                    continue
                figures = {"rtt_p50_us": 10.0, "rtt_p99_us": 12.0, "gbps_ab": 90.0, "gbps_ba": 90.0}
                rec = {"type": "pair", "run": plan.spec.run_id, "rank": rank, "peer": peer, "round": rnd,
                       "result": "pass", **figures}  # fmt: skip
                c.on_line(names[rank], json.dumps(rec), False)
    for lie in lies:
        rec = {
            "type": "pair",
            "run": plan.spec.run_id,
            "rank": liar,
            "peer": 0,
            "round": plan.rounds[0],
            **lie,
        }
        c.on_line(names[liar], json.dumps(rec, allow_nan=True), False)
    out = judged(plan, c)
    doc = out.to_dict()
    json.dumps(doc, allow_nan=False)
    for p in doc["data"]["pairs"]:
        if liar not in (p["a_rank"], p["b_rank"]):
            assert p["result"] == "pass", p
    app = App()
    app.__dict__["out"] = Console(file=io.StringIO(), width=120)
    print_mesh(app, out, out.report)
    with tempfile.TemporaryDirectory() as where:
        prometheus.write(os.path.join(where, "mesh.prom"), out, out.report)


@pytest.mark.parametrize(
    "lie",
    [
        {"took_s": 1e308},  # once: margin()'s arithmetic overflowed inside the launcher's callback
        {"rtt_p50_us": 1e308, "rtt_p99_us": 1e308},  # once: Infinity in the summary (not JSON)
        {"gbps_ab": 1e9},  # 1 Eb/s: no port made
        {
            "counters": [
                {"device": "rxe0", "port": 1, "moved": {"completer_retry_err": 10**4298}, "reset": []}
            ]
        },
        {"stats": {"pings": 10**30}},
        {"steps_us": {"cm connect": 1e300}},
    ],
)
def test_figures_beyond_what_hardware_measures_are_the_senders_violation(lie):
    from meshdata import judged

    plan = make_plan(["n0", "n1", "n2", "n3"], [[f"10.0.0.{i}"] for i in range(4)])
    c = Intake(plan)
    rnd = plan.rounds[0]
    from rdmacli.mesh import schedule

    peer = schedule.partner(3, rnd, 4)
    rec = {
        "type": "pair",
        "run": plan.spec.run_id,
        "rank": 3,
        "peer": peer,
        "round": rnd,
        "result": "pass",
        **lie,
    }
    c.on_line("n3", json.dumps(rec), False)
    assert len(c.violations[3]) == 1 and not c.pairs[(min(3, peer), 0, max(3, peer), 0)].reports
    json.dumps(judged(plan, c).to_dict(), allow_nan=False)


def test_a_line_is_refused_while_it_is_read_never_held_whole():
    """A line past MAX_LINE is said once (its head and the OVERLONG mark) and its rest skipped
    as it arrives, in any chunking; the lines around it are untouched."""
    from rdmacli.mesh.lines import LineSplitter
    from rdmacli.mesh.records import MAX_LINE, OVERLONG

    s = LineSplitter()
    out = s.feed(b"one\r\ntw")
    for _ in range(40):
        out += s.feed(b"o" * 65536)
        assert len(s.pending) <= MAX_LINE
    out += s.feed(b"o\nthree\nfou") + s.flush()
    assert out[0] == b"one" and out[1].endswith(OVERLONG.encode()) and out[1].startswith(b"twooo")
    assert out[2:] == [b"three", b"fou"]
    assert LineSplitter().feed(b"x" * (MAX_LINE + 5) + b"\nok\n")[1] == b"ok"


@pytest.mark.parametrize("kind", ["exec", "srun"])
def test_a_liars_endless_line_costs_the_coordinator_a_line_not_its_size(kind, tmp_path, monkeypatch):
    """64 MiB without a newline through the launcher: passed on as one short violation line,
    the next line intact, and the coordinator's memory does not grow by the line's size."""
    import os
    import sys
    import tracemalloc

    from rdmacli.mesh.launch import ClusterShellLauncher, SrunLauncher
    from rdmacli.mesh.records import OVERLONG

    agent = [sys.executable, os.path.join(os.path.dirname(__file__), "mesh_agents", "long_line.py"), "64"]
    lines = []
    tracemalloc.start()
    if kind == "exec":
        ClusterShellLauncher("exec").run({"n1": agent}, b"{}\n", lambda n, line, e: lines.append((n, line)),
                                         lambda n, rc: None, 60)  # fmt: skip
    else:  # srun's own output, as --label prints it: a stand-in srun is the agent behind a label
        fake = tmp_path / "srun"
        fake.write_text(f"#!/bin/sh\n{' '.join(agent)} | sed 's/^/0: /'\n")
        fake.chmod(0o755)
        SrunLauncher().run([str(fake)], ["n1"], b"{}\n", lambda n, line, e: lines.append((n, line)),
                           lambda n, rc: None, 60)  # fmt: skip
    peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    assert [(n, line.endswith(OVERLONG)) for n, line in lines] == [("n1", True), ("n1", False)], lines[:3]
    assert lines[1][1] == "after" and len(lines[0][1]) < 100
    assert peak_mib < 16, peak_mib  # the line is 64 MiB; ClusterShell alone held it whole


@pytest.mark.parametrize(
    "name, ok",
    [("010.0.0.1", False), ("0x0a.0.0.1", False), ("1234", False), ("10.0.0.01", False), ("n1.42", False),
     ("10.0.0.1", True), ("n01", True), ("node-1.example.com", True), ("fd77::1", True), ("42n", True)],
)  # fmt: skip
def test_a_name_the_resolver_would_read_as_a_number_is_no_address(name, ok):
    """The resolver reads 010.0.0.1 as 8.0.0.1 (octal) and 1234 as 0.0.4.210: a map or a node
    set that says so meant something else. Only an IP literal in its usual form is an address;
    a name whose last label is a number is refused in words."""
    assert inputs.valid_name(name) is ok
    if not ok:
        with pytest.raises(RdmacliError) as got:
            inputs.check_names([name], "address")
        assert "010.0.0.1 is 8.0.0.1" in got.value.message and got.value.exit_code == 2


def test_two_spellings_of_one_address_are_one_node():
    """::ffff:10.0.0.1 is 10.0.0.1 (IPv4-mapped): two nodes given them test one host against itself."""
    from rdmacli.mesh import nodes

    assert nodes.canonical("::ffff:10.0.0.1") == "10.0.0.1" and nodes.canonical("fd77:0::1") == "fd77::1"
    with pytest.raises(RdmacliError) as got:
        nodes.addresses(["a", "b"], mapping={"a": ["10.0.0.1"], "b": ["::ffff:10.0.0.1"]}, map_file="m")
    assert "a and b both have 10.0.0.1" in got.value.message


@pytest.mark.parametrize("size", [0, 1, 2])
def test_the_line_bound_holds_on_every_line_whatever_the_chunking(size):
    """Issue 70: the bound was enforced on a partial line only, so a 65-130 KB line passed or
    failed with the pipe's chunking. Every line past MAX_LINE is said overlong, whole or not."""
    from rdmacli.mesh.lines import LineSplitter
    from rdmacli.mesh.records import MAX_LINE, OVERLONG

    data = b"a\n" + b"x" * (MAX_LINE + 1 + size * 40000) + b"\nb\n"
    for chunk in (len(data), 65536, 4096, 1000, 7):
        s, out = LineSplitter(), []
        for i in range(0, len(data), chunk):
            out += s.feed(data[i : i + chunk])
        out += s.flush()
        assert out[0] == b"a" and out[1].endswith(OVERLONG.encode()), (chunk, out[1][:40])
        assert out[2:] == [b"b"], chunk
        assert len(out[1]) < 100
