"""`rdmacli mesh-agent` (one node's side of a mesh run) through the CLI on the scripted backend."""

from __future__ import annotations

import json
import time

import pytest

from rdmacli.mesh.contract import RunSpec
from rdmacli.protocols import hello as H
from rdmacli.rdma import constants as C

from .peers import rping_server


def spec_line(**kw) -> bytes:
    spec = {"run_id": "ab" * 8, "start_at": time.time(), "round_s": 2, "port": 7490, "names": ["n0", "n1"],
            "addresses": [["10.0.0.1"], ["10.0.0.2"]], "count": 3, **kw}  # fmt: skip
    return RunSpec(**spec).to_line()


def agent(rdmacli, backend, rank: int, **kw):
    """The agent of `rank`, its spec on stdin as the launcher writes it."""
    return rdmacli(backend, "mesh-agent", "--rank", str(rank), input=spec_line(**kw))


def records(r) -> list[dict]:
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_the_connecting_agent_runs_its_pair_and_reports_it(rdmacli, backend):
    rping_server(backend)
    r = agent(rdmacli, backend, 1, test="rping")
    assert r.exit_code == 0, r.stderr
    kinds = [rec["type"] for rec in records(r)]
    assert kinds[0] == "agent" and kinds[-1] == "done" and kinds.count("pair") == 1
    [pair] = [rec for rec in records(r) if rec["type"] == "pair"]
    assert (pair["rank"], pair["peer"], pair["side"], pair["result"]) == (1, 0, "connect", "pass")
    assert pair["stats"]["pings_completed"] == 3 and pair["rtt_p50_us"] > 0
    token = backend.conn_params[0].private_data[-16:]  # the mesh token rides the request
    assert token and backend.conn_params[0].private_data != token


def test_the_default_probe_reports_the_network_round_trip_beside_the_hosts(rdmacli, backend):
    import struct

    from rdmacli.rdma import constants as C

    def answer(cm, wr):  # the listener answers each ping with its hold time in front
        if wr["opcode"] == C.WR_SEND:
            backend.deliver(cm, struct.pack(">Q", 1000) + bytes(56))

    backend.on_send = answer
    r = agent(rdmacli, backend, 1)
    [pair] = [rec for rec in records(r) if rec["type"] == "pair"]
    assert pair["result"] == "pass", pair
    assert pair["stats"]["iterations"] == 3
    assert 0 < pair["rtt_p50_us"] < pair["host_rtt_p50_us"]  # the listener's hold taken out
    hello = backend.conn_params[0].private_data[:20]
    assert hello.startswith(b"RDMACLI") and hello[8] == 5  # lat's hello, before the token


def test_a_bw_pair_is_measured_both_ways(rdmacli, backend):
    """SEND both ways: the connector reports the partner's stream as it arrived here (its own
    count and time, not the RESULT the partner told it) and its own stream as sent."""
    from rdmacli.protocols import bw

    from .test_bw_lat import bw_server

    bw_server(backend)

    def answer(cm, wr):  # the listener's stream (30 sends), then its RESULT claiming 1000
        if wr["opcode"] == C.WR_SEND_WITH_IMM and wr.get("imm") == bw.DONE:
            for _ in range(30):
                backend.deliver(cm, bytes(65536))
            backend.deliver(cm, bw.RESULT_FORMAT.pack(1000, 0.25), imm=bw.RESULT)

    backend.on_send = answer
    r = agent(rdmacli, backend, 1, test="bw")
    [pair] = [rec for rec in records(r) if rec["type"] == "pair"]
    assert pair["result"] == "pass", pair
    assert pair["messages_received"] == 30 and pair["messages_sent"] > 0 and pair["gbps_sent"] > 0
    told = 1000 * 65536 * 8 / 0.25 / 1e9  # the RESULT's figure: not the pair's
    assert pair["gbps_ab"] > 0 and pair["gbps_ab"] != pytest.approx(told, rel=0.01)
    assert "gbps_ba" not in pair  # the listener's to give: it received that stream
    hello = H.parse(backend.conn_params[0].private_data)
    assert hello.flags & 3 == 2  # SEND: each end counts what arrives


def test_a_partner_that_never_listens_is_its_cause_not_words(rdmacli, backend):
    from rdmacli.rdma import constants as C

    backend.script["connect"] = lambda cm, p: [backend.event(cm, C.REJECTED, 8)]
    r = agent(rdmacli, backend, 1)
    [pair] = [rec for rec in records(r) if rec["type"] == "pair"]
    assert pair["result"] == "fail" and pair["error"]["cause"] == "nobody_listening"
    assert [rec["failed"] for rec in records(r) if rec["type"] == "done"] == [1]


def test_a_bad_spec_is_refused_with_words_and_a_record(rdmacli, backend):
    bad = spec_line().replace(b'"addresses":[["10.0.0.1"],["10.0.0.2"]]', b'"addresses":[["10.0.0.1"]]')
    for line, words in (
        (bad, "2 names, 1 addresses"),
        (b'{"v":1,"run_id":"ab"}\n', "no run_id or names"),
        (b"not json\n", "not JSON"),
        (spec_line().replace(b'"port":7490', b'"port":"7490"'), "bad port"),
        (b"", "stdin ended before the run spec came"),
        (spec_line(start_at=1e12), "this node's clock and the coordinator's disagree"),  # waited for ever
    ):
        r = rdmacli(backend, "mesh-agent", "--rank", "0", input=line)
        assert r.exit_code == 2 and words in r.stderr, (line, r.stderr)
        assert json.loads(r.stdout)["type"] == "error"
    r = rdmacli(backend, "mesh-agent", "--rank", "5", input=spec_line())
    assert r.exit_code == 2 and "rank 5 is not one of the spec's 2 nodes" in r.stderr


def test_a_pairs_deadline_speaks_of_the_meshs_own_options(rdmacli, backend):
    r = agent(rdmacli, backend, 0)  # the listener; its partner never comes
    [pair] = [rec for rec in records(r) if rec["type"] == "pair"]
    err = pair["error"]
    assert pair["result"] == "fail" and err["cause"] == "deadline"
    assert "--round-time" in err["message"] and "--timeout" not in err["message"]
    assert "--wait" not in err["message"]
