"""Every command's --json summary has the same top-level keys and validates against the one
documented schema (rdmacli.schema.SUMMARY_SCHEMA): here the failure documents a host without
RDMA gives; the lab suite validates every success document it reads (tests/lab/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import MISSING, fields

import jsonschema
import pytest

from rdmacli.outcome import ConnOutcome, Outcome, State
from rdmacli.schema import SUMMARY_SCHEMA

RUNS = {
    "connect": ["connect", "192.0.2.1"],
    "listen": ["listen"],
    "listen --ping": ["listen", "--ping"],
    "ping": ["ping", "192.0.2.1", "-C", "1"],
    "mcast": ["mcast", "239.1.1.1"],
    "events": ["events", "192.0.2.1"],
    "devices": ["devices"],
    "doctor": ["doctor"],
    "check": ["check", "--state-dir", "/tmp/rdmacli-schema-check"],
    "selftest": ["selftest"],
    "usage: bad group": ["mcast", "10.1.1.1"],
    "usage: bad address": ["listen", "-b", "300.1.1.1"],
    "usage: bad size": ["listen", "--ping", "-S", "7"],
}


def rdmacli_json(args: list[str]) -> tuple[int, dict]:
    r = subprocess.run(
        [sys.executable, "-m", "rdmacli", *args, "--json"], capture_output=True, text=True, timeout=60
    )
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.mark.parametrize("name", list(RUNS))
def test_every_commands_failure_document_validates(name):
    import os

    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has RDMA devices: the lab suite validates the success documents")
    code, doc = rdmacli_json(RUNS[name])
    jsonschema.validate(doc, SUMMARY_SCHEMA)
    assert list(doc) == list(SUMMARY_SCHEMA["required"])  # the same keys, in the same order
    assert doc["exit_code"] == code != 0 and doc["result"] == "fail"
    if name.startswith("usage"):
        assert code == 2
    else:
        assert code in (1, 3), doc  # no device: the environment (doctor: its checks failed)


def test_outcome_states_give_results_and_totals():
    def conns(*states):
        return [ConnOutcome(i, s) for i, s in enumerate(states)]

    assert Outcome("x", connections=conns(State.DONE, State.REJECTED)).exit_code == 0
    rejected_only = Outcome("x", connections=conns(State.REJECTED)).to_dict()
    assert rejected_only["result"] == "fail" and rejected_only["totals"]["connections_passed"] == 0
    assert "every client was rejected" in rejected_only["error"]["message"]
    stopped = Outcome("x", connections=conns(State.DONE, State.INTERRUPTED), signal=15).to_dict()
    assert stopped["exit_code"] == 143 and stopped["result"] == "interrupted"
    assert stopped["totals"]["connections_failed"] == 0 and stopped["totals"]["connections_interrupted"] == 1
    for doc in (rejected_only, stopped):
        jsonschema.validate(doc, SUMMARY_SCHEMA)


def test_the_schema_is_documented_key_by_key():
    import pathlib

    root = pathlib.Path(__file__).parents[2]
    readme = (root / "docs" / "reference" / "json.md").read_text()
    page = (root / "man" / "rdmacli.1").read_text()
    for key in SUMMARY_SCHEMA["required"]:
        assert f"| `{key}` |" in readme, f"the docs' JSON reference lacks {key}"
        assert f".B {key}" in page, f"rdmacli(1) JSON OUTPUT lacks {key}"


@pytest.mark.parametrize(
    "args,expect",
    [
        (["listen", "--ping", "-S", "100"], {"size_bytes": 100, "port": 7174, "mode": "ping"}),
        (["listen", "--ping"], {"size_bytes": 64, "port": 7174, "max_size_bytes": 65535}),
        (["listen"], {"size_bytes": 100, "port": 7471, "port_space": "tcp", "mode": "connect"}),
        (["listen", "--ud"], {"port": 7174, "port_space": "udp", "max_size_bytes": 4096}),
        (["listen", "--ud", "-p", "7471", "-P", "ipoib"], {"port": 7471, "port_space": "ipoib"}),
        (["connect", "192.0.2.1", "--ud"], {"port": 7174, "port_space": "udp", "size_bytes": 100}),
    ],
)
def test_defaults_come_from_the_protocol_table_and_given_values_stay(args, expect):
    """params in the summary are what the run used (a host without RDMA fails after parsing)."""
    import os

    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has RDMA devices")
    _, doc = rdmacli_json(args)
    assert {k: doc["params"][k] for k in expect} == expect


def emitted_record_types() -> dict[str, set[str]]:
    """Every `"type": "<name>"` in a dict the code builds, by module (schema.py's own JSON
    schema words excepted): what --json-lines and the mesh agents can print."""
    import ast
    import pathlib

    import rdmacli

    root = pathlib.Path(rdmacli.__file__).parent
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if path.name == "schema.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if getattr(k, "value", None) == "type" and isinstance(getattr(v, "value", None), str):
                        found.setdefault(v.value, set()).add(str(path.relative_to(root)))
    return found


def test_every_record_type_the_code_emits_is_declared_and_documented():
    import pathlib
    from dataclasses import fields

    from rdmacli.mesh.records import RECORDS
    from rdmacli.schema import RECORD_TYPES

    found = emitted_record_types()
    undeclared = {t: m for t, m in found.items() if t not in RECORD_TYPES and t not in RECORDS}
    assert not undeclared, undeclared
    root = pathlib.Path(__file__).parents[2]
    readme, man = (
        (root / "docs" / "reference" / "json.md").read_text(),
        (root / "man" / "rdmacli.1").read_text(),
    )
    agent_man = (root / "man" / "rdmacli-mesh-agent.1").read_text()
    for t in RECORD_TYPES:
        assert f"`{t}`" in readme and t in man, t
    for t, cls in RECORDS.items():  # the agent's records: their types, each field named
        assert t in agent_man and all(f.name.replace("_", "\\_") in agent_man or f.name in agent_man
                                      for f in fields(cls)), t  # fmt: skip


def test_a_runs_records_are_each_one_typed_class_declared_with_its_keys():
    """The engine's records are classes (rdmacli/events.py), each listed once in EVENTS: the docs'
    table is made from them, so a record added without its row, or a key without its word,
    fails here; and each writes the keys its row names, in that order."""
    from rdmacli import events as E
    from rdmacli.figures import JoinInfo, Rate
    from rdmacli.schema import RECORD_TYPES

    made = {c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E.Event)} - {E.Event}
    assert made == set(E.EVENTS) and len({c.TYPE for c in made}) == len(made)
    sample = {
        E.Joined: {"info": JoinInfo("ff0e::1", 0xC001, 0, 0x1234, "239.0.0.1")},
        E.Progress: {"rate": Rate.of(10, 4096, 1.0)},
    }
    for c in E.EVENTS:
        assert RECORD_TYPES[c.TYPE] == c.described() and c.WORDS, c
        given = {f.name: 0 for f in fields(c) if f.default is MISSING and f.default_factory is MISSING}
        d = c(**{**given, **sample.get(c, {})}).to_dict()
        assert (
            next(iter(d)) == "type"
            and d["type"] == c.TYPE
            and list(d)[-2:] == ["t_us", "side"]
            or (c.TYPE in ("cm_event", "request") and list(d)[1] == "t_us")
        ), (c, list(d))


def test_every_command_is_named_among_the_summarys_command_values():
    from rdmacli.cli import COMMANDS
    from rdmacli.schema import SUMMARY_KEYS

    [text] = [t for key, _, t in SUMMARY_KEYS if key == "command"]
    named = set(text.replace(",", " ").replace(":", " ").split())
    assert set(COMMANDS) - {"mesh-agent", "lab"} <= named, set(COMMANDS) - named


def test_every_document_rdmacli_writes_is_strict_json():
    """No `NaN` or `Infinity` ever reaches a reader: every json.dumps in rdmacli/ refuses them
    (allow_nan=False), and outcome.dumps writes a non-finite number as null."""
    import ast
    import pathlib

    from rdmacli.outcome import dumps

    root = pathlib.Path(__file__).parents[2] / "rdmacli"
    loose = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr == "dumps" and getattr(node.func.value, "id", None) == "json":
                strict = any(
                    k.arg == "allow_nan" and getattr(k.value, "value", True) is False for k in node.keywords
                )
                if not strict:
                    loose.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not loose, loose
    assert json.loads(dumps({"a": float("nan"), "b": [float("inf"), 1.5]})) == {"a": None, "b": [None, 1.5]}


PARAMS_KEYS = {  # the summary's `params` of each command, in order: a JSON contract scripts read
    "ping": "wait_s host port bind count size_bytes validate interval_s",
    "connect": "wait_s host port bind connections count size_bytes port_space tos ack_timeout",
    "events": "wait_s host listen port bind connections port_space",
    "bw": "host port bind op size_bytes qps depth bidir count duration_s busy_poll wait_s perftest all_sizes",
    "lat": "host port bind op size_bytes count busy_poll wait_s perftest all_sizes",
    "mcast": "wait_s group send bind qps count size_bytes port_space send_only no_loopback",
    "listen": "bind port connections count size_bytes port_space persistent max_clients max_pinned_bytes "
    "max_size_bytes mode wait_s perftest all_sizes",
}
ARGS = {"ping": ["192.0.2.1"], "connect": ["192.0.2.1"], "events": ["192.0.2.1"], "bw": ["192.0.2.1"],
        "lat": ["192.0.2.1"], "mcast": ["239.1.1.1"], "listen": []}  # fmt: skip


@pytest.mark.parametrize("command", sorted(PARAMS_KEYS))
def test_each_command_summarises_its_parameters_under_their_json_names(command):
    """cli.app.params_of makes every command's `params` from the parameters as declared: the
    keys, their units (size_bytes, interval_s) and their order are the same as they ever were."""
    import os

    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has RDMA devices")
    _, doc = rdmacli_json([command, *ARGS[command]])
    assert list(doc["params"]) == PARAMS_KEYS[command].split()
