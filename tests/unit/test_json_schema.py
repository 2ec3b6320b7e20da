"""Every command's --json summary has the same top-level keys and validates against the one
documented schema (rdmacli.outcome.SUMMARY_SCHEMA): here the failure documents a host without
RDMA gives; the lab suite validates every success document it reads (tests/lab/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

from rdmacli.outcome import SUMMARY_SCHEMA, ConnOutcome, Outcome, State

RUNS = {
    "connect": ["connect", "192.0.2.1"],
    "listen": ["listen"],
    "listen --ping": ["listen", "--ping"],
    "ping": ["ping", "192.0.2.1", "-C", "1"],
    "mcast": ["mcast", "239.1.1.1"],
    "events": ["events", "192.0.2.1"],
    "devices": ["devices"],
    "doctor": ["doctor"],
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
    readme = (root / "README.md").read_text()
    page = (root / "man" / "rdmacli.1").read_text()
    for key in SUMMARY_SCHEMA["required"]:
        assert f"| `{key}` |" in readme, f"README's JSON table lacks {key}"
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
