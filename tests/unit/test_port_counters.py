"""Port counters from fake sysfs trees with the names real drivers use, deltas that never go
negative, and failures said as what the counters show."""

from __future__ import annotations

import pytest
from meshdata import report

from rdmacli.diag import counters as C
from rdmacli.errors import Cause, RdmacliError
from rdmacli.mesh import blame as _blame
from rdmacli.mesh import records
from rdmacli.mesh.report import Pair


def blame(*args, **kw) -> dict:
    """The blame as its JSON says it (data.blame): what these cases assert on."""
    return _blame.blame(*args, **kw).to_json()


RXE = {"hw_counters": {"sent_pkts": 100, "rcvd_pkts": 90, "completer_retry_err": 0, "duplicate_request": 0,
                       "rcvd_seq_err": 0, "link_downed": 0, "lifespan": 10}}  # fmt: skip
MLX5 = {
    "counters": {"port_rcv_errors": 0, "symbol_error": 0, "link_downed": 0, "port_xmit_data": 5},
    "hw_counters": {
        "out_of_sequence": 0,
        "packet_seq_err": 0,
        "local_ack_timeout_err": 0,
        "rnr_nak_retry_err": 0,
        "np_cnp_sent": 0,
        "rp_cnp_handled": 0,
    },  # fmt: skip
}


def tree(root, device: str, dirs: dict, port: int = 1) -> None:
    for d, files in dirs.items():
        path = root / device / "ports" / str(port) / d
        path.mkdir(parents=True, exist_ok=True)
        for name, value in files.items():
            (path / name).write_text(f"{value}\n")


def bump(root, device: str, d: str, name: str, value, port: int = 1) -> None:
    (root / device / "ports" / str(port) / d / name).write_text(f"{value}\n")


@pytest.mark.parametrize("device,dirs", [("rxe0", RXE), ("mlx5_0", MLX5)])
def test_every_counter_is_read_by_name_whatever_the_driver(tmp_path, device, dirs):
    tree(tmp_path, device, dirs)
    got = C.read(device, 1, sysfs=str(tmp_path))
    want = {n: v for files in dirs.values() for n, v in files.items() if n != "lifespan"}
    assert got == want


def test_rxe_retransmits_are_loss(tmp_path):
    tree(tmp_path, "rxe0", RXE)
    w = C.Watch(lambda d, p: C.read(d, p, sysfs=str(tmp_path)))
    w.see("rxe0", 1)
    bump(tmp_path, "rxe0", "hw_counters", "completer_retry_err", 35)
    bump(tmp_path, "rxe0", "hw_counters", "duplicate_request", 3)
    bump(tmp_path, "rxe0", "hw_counters", "sent_pkts", 400)
    (d,) = w.finish()
    assert d.moved == {"completer_retry_err": 35, "duplicate_request": 3, "sent_pkts": 300}
    assert d.kinds() == {"loss": {"completer_retry_err": 35, "duplicate_request": 3}}
    assert d.trouble() == ["loss"]


def test_mlx5_kinds(tmp_path):
    tree(tmp_path, "mlx5_0", MLX5)
    before = C.read("mlx5_0", 1, sysfs=str(tmp_path))
    for d, n in (("hw_counters", "out_of_sequence"), ("hw_counters", "rnr_nak_retry_err"),
                 ("counters", "symbol_error"), ("hw_counters", "np_cnp_sent")):  # fmt: skip
        bump(tmp_path, "mlx5_0", d, n, 2)
    d = C.delta("mlx5_0", 1, before, C.read("mlx5_0", 1, sysfs=str(tmp_path)))
    assert set(d.kinds()) == {"loss", "rnr", "link", "congestion"}
    assert d.trouble() == ["link", "loss", "rnr"]  # congestion is the fabric working


def test_the_older_kernels_place_of_the_cm_counters(tmp_path):
    ib = tmp_path / "infiniband"
    tree(ib, "rxe0", RXE)
    old = tmp_path / "infiniband_cm" / "rxe0" / "1" / "cm_rx_duplicates"
    old.mkdir(parents=True)
    (old / "rep").write_text("4\n")
    assert C.read("rxe0", 1, sysfs=str(ib))["cm_rx_duplicates.rep"] == 4


def test_a_device_without_hw_counters_or_without_anything(tmp_path):
    tree(tmp_path, "mlx4_0", {"counters": {"port_rcv_errors": 1}})
    assert C.read("mlx4_0", 1, sysfs=str(tmp_path)) == {"port_rcv_errors": 1}
    assert C.read("gone0", 1, sysfs=str(tmp_path)) == {}
    assert C.read("../../etc", 1, sysfs=str(tmp_path)) == {}  # a name is never a path


def test_a_counter_that_goes_backwards_is_never_a_negative_delta(tmp_path):
    tree(tmp_path, "rxe0", RXE)
    before = C.read("rxe0", 1, sysfs=str(tmp_path))
    bump(tmp_path, "rxe0", "hw_counters", "sent_pkts", 7)  # reset (or a 32-bit wrap)
    d = C.delta("rxe0", 1, before, C.read("rxe0", 1, sysfs=str(tmp_path)))
    assert d.moved == {"sent_pkts": 7} and d.reset == ["sent_pkts"]
    assert all(v >= 0 for v in d.moved.values())


def test_files_that_are_not_counters_are_left_out(tmp_path):
    tree(tmp_path, "rxe0", {"hw_counters": {"ok": 1, "neg": "-3", "text": "abc", "big": "9" * 100}})
    (tmp_path / "rxe0" / "ports" / "1" / "hw_counters" / "dir").mkdir()
    assert C.read("rxe0", 1, sysfs=str(tmp_path)) == {"ok": 1}


def test_a_reader_that_fails_never_fails_the_test():
    def broken(device, port):
        raise OSError("gone")

    w = C.Watch(broken)
    w.see("rxe0", 1)
    assert w.finish() == []


def test_a_deadline_with_retransmits_is_packet_loss_and_keeps_its_first_words():
    d = C.Deltas("rxe0", 1, {"completer_retry_err": 35, "sent_pkts": 10})
    err = RdmacliError(
        "data: no progress within its deadline", cause=Cause.DEADLINE, details={"step": "data"}
    )
    got = C.explain(err, [d])
    assert got.cause is Cause.PACKET_LOSS and got.exit_code == 1
    assert got.details["reported_cause"] == "deadline" and got.details["step"] == "data"
    assert "completer_retry_err +35" in got.message and "sent_pkts" not in got.message
    # a rejection is a decision, a peer that left or a dead one (retries exhausted) is no fault
    # of the fabric though the NIC retransmitted; and nothing moved: nothing to say
    for cause in (Cause.REJECTED, Cause.PEER_ENDED, Cause.TRANSFER, Cause.LOSS):
        assert C.explain(RdmacliError("no", cause=cause), [d]) is None
    assert C.explain(err, [C.Deltas("rxe0", 1, {"sent_pkts": 10})]) is None


def pair_with(a, b, rnd, listen_moved, connect_moved, result="pass"):
    p = Pair(a, b, rnd)
    for side, rank, peer, moved in (("listen", a, b, listen_moved), ("connect", b, a, connect_moved)):
        error = RdmacliError("slow", cause=Cause.PACKET_LOSS).to_dict() if result == "fail" else None
        counters = ({"device": f"rxe{rank}", "port": 1, "moved": moved, "reset": []},) if moved else ()
        p.reports[side] = report(rank, peer, result, error, rnd, counters=counters)
    return p


def test_a_node_retransmitting_with_most_partners_is_named_and_its_partners_are_not():
    n, names = 6, [f"n{i}" for i in range(6)]
    pairs = []
    for a in range(n):
        for b in range(a + 1, n):
            loss = {"completer_retry_err": 4} if 3 in (a, b) else {"sent_pkts": 9}
            pairs.append(pair_with(a, b, 0, loss, loss))
    v = blame(n, pairs, names)
    assert [x["node"] for x in v["nodes"]] == ["n3"] and v["links"] == []
    assert v["nodes"][0]["causes"] == {"LOSS": 5}
    # the counters of its pairs, both ends (its partners retransmitted too), and its own apart
    assert v["nodes"][0]["counters"] == {"completer_retry_err": 40}
    assert v["nodes"][0]["own_counters"] == {"completer_retry_err": 20}


def test_a_lossy_pair_between_clean_nodes_is_a_lossy_link():
    n, names = 6, [f"n{i}" for i in range(6)]
    pairs = [pair_with(a, b, 0, {"duplicate_request": 2} if (a, b) == (1, 4) else {}, {})
             for a in range(n) for b in range(a + 1, n)]  # fmt: skip
    v = blame(n, pairs, names)
    assert v["nodes"] == [] and v["links"] == [
        {"a": "n1", "b": "n4", "cause": "LOSS", "counters": {"duplicate_request": 2}}
    ]


@pytest.mark.parametrize(
    "counters",
    [
        "x",
        [{"device": "rxe0", "port": 1, "moved": {"a": -1}}],
        [{"device": "rxe0", "port": 1, "moved": {"a": True}}],
        [{"device": "", "port": 1, "moved": {}}],
        [{"device": "rxe0", "port": "1", "moved": {}}],
        [{"device": "rxe0", "port": 1, "moved": {f"c{i}": 1 for i in range(300)}}],
        [{"device": "rxe0", "port": 1, "moved": {}, "reset": "all"}],
        [{"device": "rxe0", "port": 1, "moved": {}}] * 9,
    ],
)
def test_an_agents_counters_are_checked_before_use(counters):
    rec = {
        "run": "r",
        "rank": 0,
        "round": 0,
        "peer": 1,
        "result": "pass",
        "error": None,
        "counters": counters,
    }
    with pytest.raises(records.Violation, match="counters is not a list of ports' counter deltas"):
        records.PairRecord.parse(rec)


def test_an_agents_kinds_are_never_taken_only_derived():
    port = {"device": "rxe0", "port": 1, "moved": {"sent_pkts": 3}, "kinds": {"loss": {"x": 1}}}
    rec = {"run": "r", "rank": 0, "round": 0, "peer": 1, "result": "pass", "error": None, "counters": [port]}
    assert records.PairRecord.parse(rec).counters == (C.Deltas("rxe0", 1, {"sent_pkts": 3}),)


def test_the_connection_managers_duplicates_are_loss_and_its_retries_only_shown(tmp_path):
    """ib_cm's per-port counters (under the port since Linux 5.14; /sys/class/infiniband_cm/DEV/PORT
    before): a lossy path often loses CM messages before any QP exists."""
    ib = tmp_path / "infiniband"
    tree(ib, "rxe0", RXE)
    cm = ib / "rxe0" / "ports" / "1"
    for d in ("cm_rx_duplicates", "cm_tx_retries"):
        (cm / d).mkdir(parents=True)
        for msg in ("req", "rep", "rtu"):
            (cm / d / msg).write_text("0\n")
    before = C.read("rxe0", 1, sysfs=str(ib))
    assert before["cm_rx_duplicates.req"] == 0 and before["cm_tx_retries.rep"] == 0
    (cm / "cm_rx_duplicates" / "req").write_text("2\n")
    (cm / "cm_tx_retries" / "req").write_text("3\n")
    d = C.delta("rxe0", 1, before, C.read("rxe0", 1, sysfs=str(ib)))
    assert d.kinds() == {"loss": {"cm_rx_duplicates.req": 2}, "cm_retries": {"cm_tx_retries.req": 3}}
    assert d.trouble() == ["loss"]
    only_retries = C.Deltas("rxe0", 1, {"cm_tx_retries.req": 3})
    assert only_retries.trouble() == []  # a dead peer makes the CM retry too: not loss


def test_tests_run_one_after_another_add_up_to_one_runs_counters_and_steps():
    """A size sweep (-a) runs a test per size: its summary's counters and step table are those
    of all of them, added up per port and per step."""
    from rdmacli.counters import Deltas
    from rdmacli.diag.counters import summed
    from rdmacli.outcome import summed_steps

    a = Deltas("rxe0", 1, {"port_xmit_packets": 10, "rnr_nak_retry_err": 1})
    b = Deltas("rxe0", 1, {"port_xmit_packets": 5}, ["x"])
    c = Deltas("rxe1", 1, {"port_rcv_packets": 3})
    [p0, p1] = (p.to_dict() for p in summed([a, b, c]))
    assert p0["moved"] == {"port_xmit_packets": 15, "rnr_nak_retry_err": 1} and p0["reset"] == ["x"]
    assert "rnr" in p0["kinds"] and p1["moved"] == {"port_rcv_packets": 3}
    from rdmacli.figures import StepRow

    row = StepRow("resolve addr", count=1, total_us=10.0, avg_us=10.0, min_us=10.0, max_us=10.0)
    other = StepRow("resolve addr", count=1, total_us=30.0, avg_us=30.0, min_us=30.0, max_us=30.0)
    [s] = summed_steps([[row], [other]])
    assert (s.count, s.total_us, s.avg_us, s.min_us, s.max_us) == (2, 40.0, 20.0, 10.0, 30.0)
