"""`rdmacli watch status` and `watch show` through ClusterShell's real exec worker, over state
files as agents write them (no RDMA: the agents' probing is the lab's to prove)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rdmacli.watch import status as S

NAMES = [f"n{i}" for i in range(1, 7)]


def doc(node: str, nics=(), pairs=()) -> dict:
    return {"type": "watch", "v": 1, "node": node, "port": 7590, "window": 5, "time": 0, "window_s": 10,
            "period_s": 50, "windows": 5, "skipped": 0,
            "nics": [{"rail": r, "address": "x", "device": None, "state": s, "cause": c} for r, s, c in nics],
            "pairs": [{"rail": r, "peer": p, "peer_rail": r, "state": s, "cause": c}
                      for r, p, s, c in pairs]}  # fmt: skip


def gathered(docs: dict, rails: int = 2) -> dict:
    g = S.Gathered(NAMES, rails)
    for node, d in docs.items():
        g.take(node, d)
    return S.blame(g).to_json()


def healthy(**more) -> dict:
    return {n: more.get(n, doc(n)) for n in NAMES}


def test_a_dead_link_a_lossy_nic_and_a_slow_node_are_each_named_for_what_they_are():
    docs = healthy(
        n1=doc("n1", pairs=[(0, "n4", "bad", "DEAD")]),
        n4=doc("n4", pairs=[(0, "n1", "bad", "DEAD")]),
        n2=doc("n2", nics=[(1, "bad", "LOSS")], pairs=[(1, p, "bad", "LOSS") for p in ("n3", "n5", "n6")]),
        n3=doc("n3", pairs=[(1, "n2", "bad", "LOSS")]),
        n6=doc("n6", nics=[(0, "bad", "SLOW"), (1, "bad", "SLOW")]),
    )
    v = gathered(docs)
    assert v["links"] == [
        {"a": "n1", "rail_a": 0, "b": "n4", "rail_b": 0, "cause": "DEAD", "flapping": False}
    ], v
    assert v["nics"] == [{"node": "n2", "rail": 1, "cause": "LOSS", "flapping": False}]
    assert v["nodes"] == [{"node": "n6", "causes": ["SLOW"]}]
    assert v["disputed"] == [] and v["missing"] == [] and v["refused"] == {}


def test_a_liar_cannot_name_an_honest_nic_or_link_and_bad_words_are_refused():
    """n5 says every pair with it is dead: its partners say nothing of those pairs, so each is
    disputed, never a link, and no honest NIC is named; records of the wrong shape are refused."""
    liar = doc("n5", pairs=[(r, p, "bad", "DEAD") for r in (0, 1) for p in NAMES if p != "n5"])
    v = gathered(healthy(n5=liar))
    assert v["nodes"] == v["nics"] == v["links"] == [], v
    assert len(v["disputed"]) == 10
    for bad in (
        {**doc("n3"), "node": "n4"},  # another node's words
        {**doc("n3"), "pairs": [{"rail": 7, "peer": "n1", "peer_rail": 7, "state": "bad", "cause": "DEAD"}]},
        {**doc("n3"), "pairs": [{"rail": 0, "peer": "nX", "peer_rail": 0, "state": "bad", "cause": "DEAD"}]},
        {**doc("n3"), "nics": [{"rail": 0, "state": "bad", "cause": "[red]x"}]},
        {**doc("n3"), "pairs": "all"},
    ):
        v = gathered(healthy(n3=bad))
        assert "n3" in v["refused"] and v["nics"] == [] and v["links"] == [], v


def test_a_pair_named_by_one_end_whose_other_end_never_answered_is_taken():
    docs = healthy(n1=doc("n1", pairs=[(0, "n4", "bad", "DEAD")]))
    del docs["n4"]
    v = gathered(docs)
    assert v["missing"] == ["n4"] and [(x["a"], x["b"]) for x in v["links"]] == [("n1", "n4")]


def test_with_groups_a_nic_named_by_most_of_its_own_partners_is_the_nic_not_two_links():
    """--pairs group, leaves n1-n4 and n5-n6: n1 rail 0 has three partners a period, all say it
    is dead (and it agrees on each pair). That is the NIC, counted against the plan's partners
    (a group's), not n - 1 (where two of five was not most, and two links were blamed)."""
    groups = ("a", "a", "a", "b", "b", "b")
    assert S.partner_counts(groups, NAMES, "group", 0) == dict.fromkeys(NAMES, 2)
    # two in the group and, over the rotations, one of the two pairs sampled between the groups
    # (a formula's 2 + 2 x 1 counted every sampled pair as every node's)
    assert S.partner_counts(groups, NAMES, "sample", 2) == dict.fromkeys(NAMES, 3)
    assert S.partner_counts(groups, NAMES, "all", 0) == {}
    groups = ("a", "a", "a", "a", "b", "b")
    docs = healthy(
        n1=doc("n1", pairs=[(0, p, "bad", "DEAD") for p in ("n2", "n3", "n4")]),
        n2=doc("n2", pairs=[(0, "n1", "bad", "DEAD")]),
        n3=doc("n3", pairs=[(0, "n1", "bad", "DEAD")]),
        n4=doc("n4", pairs=[(0, "n1", "bad", "DEAD")]),
    )
    g = S.Gathered(NAMES, 2, partners=S.partner_counts(groups, NAMES, "group", 0))
    for node, d in docs.items():
        g.take(node, d)
    v = S.blame(g).to_json()
    assert v["nics"] == [{"node": "n1", "rail": 0, "cause": "DEAD", "flapping": False}], v
    assert v["links"] == [], v


def test_a_nic_named_by_no_more_partner_nodes_than_liars_is_never_the_nic():
    """Issue 53: two agents (f = 2, blame.LIARS) that call one innocent NIC dead on their pairs
    with it (and it agrees, as a NIC they refuse would) name links at most, never the NIC: in a
    group of three two partners are all it has, and that is the rule's cost (a real fault seen
    by two partners only)."""
    groups = ("a", "a", "a", "b", "b", "b")
    cross = [(0, "n1", "bad", "DEAD")]
    docs = healthy(
        n1=doc("n1", pairs=[(0, "n2", "bad", "DEAD"), (0, "n3", "bad", "DEAD")]),
        n2=doc("n2", pairs=cross),
        n3=doc("n3", pairs=cross),
    )
    g = S.Gathered(NAMES, 2, partners=S.partner_counts(groups, NAMES, "group", 0))
    for node, d in docs.items():
        g.take(node, d)
    v = S.blame(g).to_json()
    assert v["nics"] == [] and v["nodes"] == [], v
    assert all("n1" in (x["a"], x["b"]) for x in v["links"] + v["disputed"]), v


def cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rdmacli", "watch", *args], capture_output=True, text=True,
                          timeout=120, **kw)  # fmt: skip


@pytest.fixture
def fabric(tmp_path):
    mapfile = tmp_path / "map"
    mapfile.write_text("".join(f"{n} 10.0.0.{i} 10.1.0.{i}\n" for i, n in enumerate(NAMES, 1)))
    return tmp_path, str(mapfile)


def test_status_gathers_through_the_exec_launcher_and_exits_1_with_the_blame(fabric):
    tmp, mapfile = fabric
    docs = healthy(
        n1=doc("n1", pairs=[(1, "n4", "bad", "LOSS")]), n4=doc("n4", pairs=[(1, "n1", "clearing", "LOSS")])
    )
    for n, d in docs.items():
        (tmp / f"{n}.json").write_text(json.dumps(d))
    agent = f"{sys.executable} -m rdmacli"
    r = cli("status", "n[1-6]", "--launcher", "exec", "--map", mapfile, "--state-file",
            f"{tmp}/{{node}}.json", "--agent-command", agent, "--json")  # fmt: skip
    out = json.loads(r.stdout)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert out["data"]["blame"]["links"] == [
        {"a": "n1", "rail_a": 1, "b": "n4", "rail_b": 1, "cause": "LOSS", "flapping": False}
    ]
    assert out["totals"]["answered"] == 6 and "n1:1-n4:1" in out["error"]["message"]
    (tmp / "n4.json").write_text(json.dumps(doc("n4")))
    (tmp / "n1.json").write_text(json.dumps(doc("n1")))
    (tmp / "n6.json").unlink()
    r = cli("status", "n[1-6]", "--launcher", "exec", "--map", mapfile, "--state-file",
            f"{tmp}/{{node}}.json", "--agent-command", agent, "--json")  # fmt: skip
    out = json.loads(r.stdout)
    # n6 answered, in `watch show`'s own words: no state file there (refused, not silent)
    assert out["data"]["blame"]["links"] == [] and out["data"]["blame"]["missing"] == [], out
    assert "no watch state file" in out["data"]["blame"]["refused"]["n6"], out
    assert (
        r.returncode != 0
        and out["error"]["cause"] == "missing"
        and "from 1 node(s): n6" in out["error"]["message"]
    )


def test_show_refuses_what_is_not_a_regular_file(fabric, tmp_path):
    (tmp_path / "link.json").symlink_to("/etc/passwd")
    r = cli("show", "--state-file", str(tmp_path / "link.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    r = cli("run", "--map", fabric[1], "--node", "nZ", "--state-file", str(tmp_path / "s.json"))
    assert r.returncode == 2 and "nZ is not a node" in r.stderr, r.stderr
    r = cli("run", "--map", fabric[1], "--node", "n1", "--metrics", "9590")
    assert r.returncode == 2 and "ADDRESS:PORT" in r.stderr


def test_most_nics_slow_at_once_is_the_fabric_not_a_blame_one_slow_node_is_named():
    everyone = healthy(**{n: doc(n, nics=[(0, "bad", "SLOW"), (1, "bad", "SLOW")]) for n in NAMES[:4]})
    v = gathered(everyone)
    assert v["fabric_slow"] and v["nodes"] == v["nics"] == v["links"] == [], v
    v = gathered(healthy(n6=doc("n6", nics=[(0, "bad", "SLOW"), (1, "bad", "SLOW")])))
    assert not v["fabric_slow"] and v["nodes"] == [{"node": "n6", "causes": ["SLOW"]}], v


def test_the_agents_nodes_come_from_a_node_set_a_map_or_both(tmp_path):
    """`watch run --nodes` (a node set, its addresses from --address-template or the names
    resolved), `--map`, or both (the set's names, the map's addresses); read again on SIGHUP by
    the same function."""
    from rdmacli.errors import RdmacliError
    from rdmacli.watch.service import Options, load_plan

    def opts(**kw):
        base = dict(map_path=None, node="n2", port=7590, window_s=10.0, count=20, partners=None,
                    state_file=None, metrics=None)  # fmt: skip
        return Options(**{**base, **kw})

    plan = load_plan(opts(nodes="n[1-3]", template="10.9.0.1{rank}"))
    assert (plan.names, plan.addresses, plan.rank) == (("n1", "n2", "n3"), (("10.9.0.10",), ("10.9.0.11",),
                                                       ("10.9.0.12",)), 1)  # fmt: skip
    m = tmp_path / "map"
    m.write_text("n1 10.0.0.1 10.1.0.1\nn2 10.0.0.2 10.1.0.2\nn3 10.0.0.3 10.1.0.3\nn4 10.0.0.4 10.1.0.4\n")
    plan = load_plan(opts(nodes="n[2-3]", map_path=str(m)))
    assert plan.names == ("n2", "n3") and plan.addresses == (
        ("10.0.0.2", "10.1.0.2"),
        ("10.0.0.3", "10.1.0.3"),
    )
    assert load_plan(opts(map_path=str(m))).names == ("n1", "n2", "n3", "n4")
    g = tmp_path / "groups"
    g.write_text("n1 group=a\nn2 group=a\n")  # a map of groups: the addresses from the template
    plan = load_plan(opts(map_path=str(g), template="10.7.0.{rank}", pairs=("group", 0)))
    assert plan.addresses == (("10.7.0.0",), ("10.7.0.1",)) and plan.groups == ("a", "a")
    for bad in (opts(), opts(nodes="n[1-3]", template="10.9.0.1{rank}", node="n9"),
                opts(nodes="n[5-6]", map_path=str(m)),
                opts(map_path=str(m), template="{node}-ib")):  # fmt: skip
        with pytest.raises(RdmacliError) as err:
            load_plan(bad)
        assert err.value.exit_code == 2, err.value


def test_status_without_a_map_asks_the_node_set_one_rail_each(tmp_path):
    state = tmp_path / "{node}.json"
    for n in ("n1", "n2"):
        (tmp_path / f"{n}.json").write_text(
            json.dumps(doc(n, pairs=[(0, "n2" if n == "n1" else "n1", "bad", "DEAD")]))
        )
    r = cli("status", "n[1-2]", "--launcher", "exec", "--state-file", str(state), "--agent-command",
            f"{sys.executable} -m rdmacli", "--json")  # fmt: skip
    out = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr
    assert out["data"]["blame"]["links"] == [{"a": "n1", "rail_a": 0, "b": "n2", "rail_b": 0, "cause": "DEAD",
                                              "flapping": False}], out  # fmt: skip


def test_the_shipped_unit_runs_the_agent_on_the_map_unless_given_a_node_set():
    """rdmacli-watch.service as `watch unit` prints it: ExecStart this install's rdmacli by its
    absolute path (a venv's found too, not a PATH lookup), its words as systemd expands them ($VAR
    unquoted: split on white space), with the default environment and with a node set, options
    `watch run` takes."""
    import shlex

    from rdmacli.cli.watch import run
    from rdmacli.watch.install import program_words

    r = subprocess.run([sys.executable, "-m", "rdmacli", "watch", "unit", "--force"], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = dict(
        line.split("=", 1) for line in r.stdout.splitlines() if line and not line.startswith(("#", "["))
    )
    env = dict(word.split("=", 1) for word in shlex.split(lines["Environment"]))
    assert env == {"RDMACLI_WATCH_NODES": "--map /etc/rdmacli/watch.map", "RDMACLI_WATCH_ARGS": ""}
    words = shlex.split(lines["ExecStart"])
    prog = program_words()  # the rdmacli script beside this interpreter, else `python -m rdmacli`
    assert os.path.isabs(words[0]) and os.access(words[0], os.X_OK) and words[: len(prog) + 2] == [
        *prog, "watch", "run"]  # fmt: skip
    assert os.path.dirname(words[0]) == os.path.dirname(sys.executable)  # this install's, not PATH's
    after = words[len(prog) + 2 :]  # what follows `PROGRAM watch run`
    for nodes in (env["RDMACLI_WATCH_NODES"], "--nodes @rdma --address-template {node}-ib"):
        given = {**env, "RDMACLI_WATCH_NODES": nodes, "RDMACLI_WATCH_ARGS": "--metrics 10.0.0.5:9590"}
        args = [x for w in after for x in (given[w[1:]].split() if w.startswith("$") else [w])]
        ctx = run.make_context("run", args)
        assert ctx.params["metrics"] == ("10.0.0.5", 9590) and (ctx.params["map_path"] or ctx.params["nodes"])


def test_the_unit_is_valid_and_hardened(tmp_path):
    """`systemd-analyze verify` takes the unit `watch unit` prints, and its exposure (`systemd-analyze
    security`) is 3.0 or less (it was 9.6, UNSAFE: root with every capability, no sandbox)."""
    import re

    unit = tmp_path / "rdmacli-watch.service"
    argv = [sys.executable, "-m", "rdmacli", "watch", "unit", "--force"]  # this checkout may sit in /tmp
    unit.write_text(subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout)
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    level = re.search(r"Overall exposure level for rdmacli-watch.service: ([0-9.]+)", r.stdout)
    assert level and float(level.group(1)) <= 3.0, r.stdout[-3000:]
    for needed in ("DeviceAllow=/dev/infiniband/rdma_cm rw", "DeviceAllow=char-infiniband_verbs rw",
                   "LimitMEMLOCK=infinity", "CapabilityBoundingSet=\n"):  # fmt: skip
        assert needed in unit.read_text(), needed


@pytest.mark.parametrize(
    "text, words",
    [("[" * 100000 + "]" * 100000, "nested too deep"), ('{"x": NaN}', "NaN is not JSON"),
     ('{"x": -Infinity}', "-Infinity is not JSON"), ("[1, 2]", "not a JSON object"), ("{", "Expecting")],
    ids=["deep", "nan", "-infinity", "list", "cut"],  # pytest 7's id is the text: 200 KB in the environment
)  # fmt: skip
def test_show_on_a_corrupt_state_file_says_so_in_one_json_line(tmp_path, text, words):
    """Issue 70: deep nesting or NaN in the state file: a traceback and no JSON."""
    (tmp_path / "s.json").write_text(text)
    r = cli("show", "--state-file", str(tmp_path / "s.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = json.loads(r.stdout)
    assert words in line["error"]["message"] and "not a watch state file" in line["error"]["message"], line


def test_status_keeps_a_bounded_amount_of_a_node_that_prints_without_end(fabric):
    """Issue 70: `watch status` kept every line a node printed (400 000 lines: 200 MB). A node's
    answer is one line; of more, two are kept and the node refused."""
    tmp, mapfile = fabric
    flood = tmp / "flood.py"
    flood.write_text("import sys\nline = '{\"x\": 1}' + ' ' * 500 + '\\n'\nfor _ in range(400000):\n"
                     "    sys.stdout.write(line)\n")  # fmt: skip
    # measured in a process of its own: its children are this `watch status` and what it starts,
    # never another test's (RUSAGE_CHILDREN of a pytest worker counts every child it ever had)
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "sys.stdout.buffer.write(r.stdout); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)")  # fmt: skip
    cmd = [sys.executable, "-c", measure, sys.executable, "-m", "rdmacli", "watch", "status", "n[1-2]",
           "--launcher", "exec", "--map", mapfile, "--agent-command", f"{sys.executable} {flood}",
           "--json"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    out = json.loads(r.stdout)
    assert out["data"]["blame"]["refused"] == {"n1": "not one JSON line", "n2": "not one JSON line"}, out
    most = int(r.stderr.strip().splitlines()[-1])  # KiB: watch status and its launches
    assert most < 150 * 1024, most  # 488 MB of lines were held before


def test_status_says_whom_it_still_waits_for(fabric, monkeypatch):
    """Issue 75: `watch status` printed nothing while it waited."""
    tmp, mapfile = fabric
    slow = tmp / "slow.sh"
    slow.write_text("#!/bin/sh\nsleep 7\necho '{}'\n")
    slow.chmod(0o755)
    r = cli(
        "status", "n[1-2]", "--launcher", "exec", "--map", mapfile, "--agent-command", str(slow), "--json"
    )
    assert "watch status: waiting for 2 node(s): n1, n2 (5 s of 30)" in r.stderr, r.stderr
    assert json.loads(r.stdout)["data"]["blame"]["refused"]  # and then it judged what came
