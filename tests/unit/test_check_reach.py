"""`rdmacli check --partners`: each rail asks its partners' connection managers (the ring of the
map), and a rail fails only when none of two or more answered. The CM's answers are scripted here
(reach.probe); the lab asks real Soft-RoCE partners (tests/mesh/test_rails.py)."""

from __future__ import annotations

import threading
import time

import pytest
from test_check import doc_of, host, run  # noqa: F401 - host: the made sysfs (a fixture)

from rdmacli.diag import reach
from rdmacli.errors import Cause, RdmacliError

pytestmark = pytest.mark.usefixtures("host")
NODES = {f"n{k}": (f"10.1.0.{k}", f"10.2.0.{k}") for k in range(1, 6)}


@pytest.fixture
def fabric(tmp_path, monkeypatch):
    """A map of five nodes with two rails, this node n2, and a scripted CM: `silent` holds the
    addresses nobody answers from; every probe is recorded (src, dst, seconds)."""
    (tmp_path / "map").write_text("".join(f"{n} {a} {b}\n" for n, (a, b) in NODES.items()))
    asked: list[tuple[str, str, float]] = []
    silent: set[str] = set()
    lock = threading.Lock()

    def probe(dst, port, ps, *, route_only, resolve_ms, connect_s, src=None):
        assert port == reach.PORT and not route_only and connect_s <= reach.PROBE_MAX_S
        with lock:
            asked.append((src, dst, connect_s))
        if dst in silent:
            return None, RdmacliError(f"cm connect: no answer from {dst}", cause=Cause.UNREACHABLE)
        return None, RdmacliError("nothing is listening", cause=Cause.NOBODY_LISTENING)

    monkeypatch.setattr(reach, "probe", probe)
    monkeypatch.setattr(reach, "on_this_host", lambda address: address in NODES["n2"])
    return str(tmp_path / "map"), asked, silent


def rows(doc: dict) -> dict[str, dict]:
    return {c["check"]: c for c in doc["data"]["checks"] if c["check"].startswith("reach")}


def test_each_rail_asks_the_next_partners_of_the_ring_from_its_own_address(tmp_path, fabric):
    path, asked, _ = fabric
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "3")
    assert doc["exit_code"] == 0 and [c["verdict"] for c in rows(doc).values()] == ["pass", "pass"]
    assert sorted((s, d) for s, d, _ in asked) == sorted(
        (NODES["n2"][r], NODES[p][r]) for r in (0, 1) for p in ("n3", "n4", "n5")
    )
    assert "3 partner(s) answered" in rows(doc)["reach rail 1"]["detail"]
    assert doc["params"]["partners"] == 3
    asked.clear()  # the ring wraps: n5's partners are n1 and n2, never itself
    doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "16")
    assert {d for _, d, _ in asked} == {a for n, rails in NODES.items() if n != "n2" for a in rails}


def test_a_rail_no_partner_answers_fails_and_one_silent_partner_blames_nobody(tmp_path, fabric):
    path, _, silent = fabric
    silent.update({NODES["n3"][0]} | {NODES[p][1] for p in ("n3", "n4", "n5")})
    r = run(tmp_path, "--map", path, "--node", "n2", "--partners", "3", "--format", "nhc")
    assert r.exit_code == 1, r.output
    assert r.stdout.startswith(
        "rdmacli: reach rail 1 10.2.0.2: none of 3 partners answered (n3 10.2.0.3: cm"
    ), r.stdout
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "3")
    rail0 = rows(doc)["reach rail 0"]
    assert rail0["verdict"] == "warn" and "2 of 3 partner(s) answered; not n3 10.1.0.3" in rail0["detail"]
    assert rows(doc)["reach rail 1"]["cause"] == "unreachable"
    # one partner asked cannot tell whose fault its silence is: said, never the node's reason
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "1")
    assert doc["exit_code"] == 0 and {c["verdict"] for c in rows(doc).values()} == {"warn"}


def test_every_rails_first_partner_is_asked_first_within_the_deadline_and_the_rest_said(
    tmp_path, fabric, monkeypatch
):
    path, asked, _ = fabric

    def slow(dst, port, ps, *, route_only, resolve_ms, connect_s, src=None):
        asked.append((src, dst, connect_s))
        time.sleep(connect_s + 0.4)  # a CM that never answers: each probe past its limit (its teardown)
        return None, RdmacliError("cm connect: timed out", cause=Cause.UNREACHABLE)

    monkeypatch.setattr(reach, "probe", slow)
    t0 = time.monotonic()
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "3", "--deadline", "5")
    took = time.monotonic() - t0
    assert "checks" in doc["data"] and took < 5, (took, doc["error"])  # judged in time: not exit 6
    # n3 on both rails first: a dead rail's silences take no rail's first answer
    assert [(s, d) for s, d, _ in asked[:2]] == [
        (NODES["n2"][0], NODES["n3"][0]),
        (NODES["n2"][1], NODES["n3"][1]),
    ]
    said = " ".join(c["detail"] for c in rows(doc).values())
    assert "not asked in time: n5" in said and all(s >= reach.PROBE_MIN_S for _, _, s in asked), said


def test_the_map_and_this_node_are_checked_as_usage(tmp_path, fabric):
    path, _, _ = fabric
    assert run(tmp_path, "--partners", "2").exit_code == 2  # no map
    assert run(tmp_path, "--map", path).exit_code == 2  # a map, nothing to ask
    r = run(tmp_path, "--map", path, "--node", "n9", "--partners", "2")
    assert r.exit_code == 2 and "n9 is not a node of" in r.output
    (tmp_path / "groups").write_text("n1 group=a\nn2 group=a\n")
    r = run(tmp_path, "--map", str(tmp_path / "groups"), "--node", "n2", "--partners", "1")
    assert r.exit_code == 2 and "gives no addresses" in r.output
    assert run(tmp_path, "--map", path, "--node", "n2", "--partners", "17").exit_code == 2


def test_a_rail_whose_map_address_is_not_this_hosts_is_said_not_asked(tmp_path, fabric, monkeypatch):
    path, asked, _ = fabric
    monkeypatch.setattr(reach, "on_this_host", lambda address: address == NODES["n2"][0])
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "2")
    assert rows(doc)["reach rail 1"]["verdict"] == "warn" and "not an address of this host" in str(rows(doc))
    assert {s for s, _, _ in asked} == {NODES["n2"][0]} and doc["exit_code"] == 0


def test_a_probe_refused_before_it_ran_is_a_silent_partner_with_its_words(tmp_path, fabric, monkeypatch):
    path, _, _ = fabric

    def refused(dst, port, ps, *, route_only, resolve_ms, connect_s, src=None):
        raise RdmacliError(f"bad address {dst}", cause=Cause.ADDRESS)

    monkeypatch.setattr(reach, "probe", refused)
    doc = doc_of(tmp_path, "--map", path, "--node", "n2", "--partners", "2")
    rail0 = rows(doc)["reach rail 0"]
    assert rail0["verdict"] == "fail" and "n3 10.1.0.3: bad address 10.1.0.3" in rail0["detail"], rail0
