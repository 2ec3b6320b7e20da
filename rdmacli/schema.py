"""The summary document's contract, declared once: its keys in words, its JSON Schema, and the
record types --json-lines prints before it. Outcome.to_dict builds the document; the docs (gendocs)
and every test that validates a summary read it from here.
"""

from __future__ import annotations

from rdmacli.errors import Cause
from rdmacli.events import EVENTS
from rdmacli.outcome import SCHEMA, State

# What --json-lines prints before the summary: every record type a command emits, declared once
# (README, rdmacli(1); tests/unit/test_json_schema.py walks the code for any it does not list)
RECORD_TYPES = {
    **{e.TYPE: e.described() for e in EVENTS},  # a flow's, as it runs (rdmacli/events.py)
    "pair": "mesh: one pair's verdict as it comes in: a, b, rail, result, cause",
    "summary": "the last record: the summary document",
    "watch": "an agent's state file, as `watch show` prints it: node, window, nics, pairs (not OK only)",
}
# What a mesh agent prints for its coordinator (rdmacli-mesh-agent(1))


# What each top-level key holds, for people (rdmacli(1) JSON OUTPUT, README).
SUMMARY_KEYS = [
    ("schema", "string", f'always "{SCHEMA}"; changes only with an incompatible change'),
    ("type", "string", 'always "summary" (--json-lines records before it have other types)'),
    (
        "command",
        "string",
        "the subcommand: connect, listen, ping, bw, lat, mcast, events, devices, doctor, check, selftest, "
        "mesh, watch status (rdmacli for a usage error before one was named)",
    ),
    ("result", "string", "pass (exit 0), fail, or interrupted (stopped by a signal)"),
    ("exit_code", "integer", "the process exit status (see EXIT STATUS)"),
    ("params", "object", "the parameters the run used, defaults resolved (size_bytes, port, ...)"),
    (
        "totals",
        "object of integers",
        "connections, connections_passed / _failed / _rejected / _interrupted, and the "
        "command's own counts (messages_received, bytes_sent, checks, devices, ...); a "
        "persistent server's connections_unlisted: counted here, not in `connections`",
    ),
    (
        "connections",
        "array",
        "one object per connection or multicast member: conn, state (pending, established, "
        "done, failed, rejected, interrupted), local, remote, device, protocol (connect, ping, "
        "ud, mcast, events) and role (client, server), the protocol's counts and error (a "
        "persistent server's last 100)",
    ),
    ("steps_us", "array", "per rdma_cm step (cmtime's names): count, total_us, avg_us, min_us, max_us"),
    ("elapsed_ms", "number", "wall time of the run in milliseconds"),
    (
        "error",
        "object or null",
        "what ended the run: cause (one of a fixed set: nobody_listening, rejected, "
        "unreachable, address_error, route_error, deadline, local_port_down, memlock, ...; "
        "scripts decide from it, never from the message), message and hint (for people, "
        "may be reworded), exit_code (follows from the cause), and step, event, status, "
        "errno or reject_reason where known",
    ),
    ("warnings", "array of strings", "what went wrong without failing the run"),
    (
        "counters",
        "array",
        "per RDMA port the test used (device, port): the counters of its counters/ and "
        "hw_counters/ that moved during the test (moved: name -> delta), the trouble kinds "
        "among them (kinds: loss, rnr, link, errors, congestion) and those that went backwards "
        "(reset). A port's counters are shared by everything on it, not this process's own",
    ),
    (
        "data",
        "object",
        "what only this command reports: data_path (connect and events as clients: native or "
        "python, which ran the connections), devices (devices), checks (doctor, check), rows, "
        "path and addresses (selftest), run_id, agents_up_s, nodes, pairs and blame (mesh), "
        "bw (bw's totals), sweep (bw and lat -a: each size's figures, in order), slurm (check "
        "--slurm: the node's action; mesh and watch status --slurm-drain: policy, cap, over_cap, "
        "dry_run, actions node by node and errors); empty otherwise",
    ),
]

# The JSON Schema of every summary document. Units are in the key names (_us, _ms, _bytes).
_ERROR = {
    "type": ["object", "null"],
    "required": ["message", "hint", "exit_code", "cause"],
    "properties": {
        "message": {"type": "string"},
        "cause": {"enum": [c.value for c in Cause]},
        "hint": {"type": ["string", "null"]},
        "exit_code": {"type": "integer"},
        "step": {"type": "string"},
        "event": {"type": "string"},
        "status": {"type": "integer"},
        "errno": {"type": "string"},
    },
}
SUMMARY_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "rdmacli summary document",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "schema",
        "type",
        "command",
        "result",
        "exit_code",
        "params",
        "totals",
        "connections",
        "steps_us",
        "elapsed_ms",
        "error",
        "warnings",
        "counters",
        "data",
    ],
    "properties": {
        "schema": {"const": SCHEMA},
        "type": {"const": "summary"},
        "command": {"type": "string"},
        "result": {"enum": ["pass", "fail", "interrupted"]},
        "exit_code": {"type": "integer", "minimum": 0, "maximum": 255},
        "params": {"type": "object"},
        "totals": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "connections": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["conn", "state", "local", "remote", "device"],
                "properties": {
                    "conn": {"type": "integer"},
                    "state": {"enum": [s.value for s in State]},
                    "local": {"type": "string"},
                    "remote": {"type": "string"},
                    "device": {"type": ["string", "null"]},
                    "error": _ERROR,
                },
            },
        },
        "steps_us": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["step", "count", "total_us", "avg_us", "min_us", "max_us"],
                "properties": {
                    "step": {"type": "string"},
                    "count": {"type": "integer"},
                    "total_us": {"type": "number"},
                    "avg_us": {"type": "number"},
                    "min_us": {"type": "number"},
                    "max_us": {"type": "number"},
                },
            },
        },
        "elapsed_ms": {"type": "number", "minimum": 0},
        "error": _ERROR,
        "warnings": {"type": "array", "items": {"type": "string"}},
        "counters": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["device", "port", "moved"],
                "properties": {
                    "device": {"type": "string"},
                    "port": {"type": "integer"},
                    "moved": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
                    "kinds": {"type": "object"},
                    "reset": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "data": {"type": "object"},
    },
}
