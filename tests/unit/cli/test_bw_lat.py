"""`rdmacli bw` and `rdmacli lat`, and `listen --bw/--lat`, on the scripted RDMA stack: what
they put on the wire, what they count and print, and what they refuse. (Figures are the lab's.)"""

from __future__ import annotations

import struct

from rdmacli.protocols import hello as H
from rdmacli.protocols import table
from rdmacli.protocols.rping import pack_info
from rdmacli.rdma import constants as C


def bw_server(backend, size: int = 65536, advertised: int | None = None) -> None:
    """`listen --bw`: accepts and advertises a buffer of `advertised` bytes."""
    info = pack_info(0x10000, 0x77, size if advertised is None else advertised)
    backend.script["connect"] = lambda cm, p: [backend.event(cm, C.ESTABLISHED, private_data=info)]


def test_bw_writes_its_count_into_the_advertised_buffer_and_reports_rates(rdmacli, backend):
    bw_server(backend)
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "100", "--depth", "16", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    [c] = r.doc["connections"]
    assert c["messages_sent"] == 100 and c["bytes_sent"] == 100 * 65536 and c["gbps"] > 0
    writes = [w for w in backend.sends if w["opcode"] == C.WR_RDMA_WRITE]
    assert len(writes) == 100 and {(w["remote_addr"], w["rkey"], w["length"]) for w in writes} == {
        (0x10000, 0x77, 65536)
    }
    hello = H.parse(backend.conn_params[0].private_data)
    assert (hello.kind, hello.size, hello.flags) == (table.BW.hello_kind, 65536, 0)
    assert r.doc["data"]["bw"]["gbps"] > 0


def test_bw_keeps_at_most_16_mib_in_flight_unless_depth_is_given(rdmacli, backend):
    """128 x 1 MiB in flight held the one-sided heartbeat ~10 s behind the window under rxe/TCG,
    the server's idle deadline: the default window is capped in bytes; --depth is as given."""
    for args, size, depth in ((), 1 << 20, 16), ((), 65536, 128), (("--depth", "64"), 1 << 20, 64):
        bw_server(backend, size)
        r = rdmacli(backend, "bw", "10.0.0.1", "-S", str(size), "-C", "40", *args, "--json")
        assert r.exit_code == 0, r.stdout + r.stderr
        assert r.doc["connections"][0]["depth"] == depth, (args, size)


def test_bw_never_writes_past_what_the_server_advertised(rdmacli, backend):
    bw_server(backend, advertised=4096)  # less than the 64 KiB it asked for
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "10", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "peer_protocol_violation"
    assert not [w for w in backend.sends if w["opcode"] == C.WR_RDMA_WRITE]


def test_bw_refuses_a_zero_duration_and_a_depth_above_the_device(rdmacli, backend):
    r = rdmacli(backend, "bw", "10.0.0.1", "--duration", "0")
    assert r.exit_code == 2 and "'0' is not more than 0 (more than 0 to 86400)" in r.stderr
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "10", "-D", "3")
    assert r.exit_code == 2 and "two ways to end the run" in r.stderr
    bw_server(backend)
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "10", "--depth", "2000000", "--json")
    assert r.exit_code == 3 and r.doc["error"]["cause"] == "device_limit", r.doc["error"]


def test_lat_times_a_send_ping_pong_and_takes_out_the_servers_hold(rdmacli, backend):
    hold_ns = 1_000  # less than any round trip through Python

    def answer(cm, wr):  # the server answers each message with its hold time in front
        if wr["opcode"] == C.WR_SEND:
            backend.deliver(cm, struct.pack(">Q", hold_ns) + bytes(56))

    backend.on_send = answer
    r = rdmacli(backend, "lat", "10.0.0.1", "-C", "50", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    [c] = r.doc["connections"]
    assert c["iterations"] == 50
    for key in ("t_min", "t_typical", "t_avg", "t_max", "p99", "p99_9"):
        assert c["latency_us"][key] > 0
    assert c["network_rtt_us"]["t_avg"] < c["rtt_us"]["t_avg"]  # the hold taken out
    assert abs(c["latency_us"]["t_typical"] * 2 - c["rtt_us"]["t_typical"]) < 0.1
    # the host's clock measured, and the summary says why not the NIC's
    assert c["timestamps"] == "host" and c["timestamps_why"] and "nic_latency_us" not in c


def test_lat_says_the_nics_figure_when_its_completion_timestamps_measured():
    """Where the native loop timed answers by the NIC's clock, the one-way figure is half the
    NIC's period between answers, beside the host's (unchanged), and the text says it."""
    from rdmacli import native as N
    from rdmacli.protocols.lat import LatClient
    from rdmacli.render.summary import latency

    client = LatClient("send", 64, 4)
    for rtt in (10e-6, 11e-6, 12e-6, 30e-6):
        client.note(rtt, 0.0)
    client.clock = N.NicClock(N.CLOCK_NIC, (1 << 48) - 1, 1_000_000)
    for period in (4e-6, 4.2e-6, 4.4e-6):
        client.nic.add(period)
    f = client.summary()
    assert f.timestamps == "nic" and f.timestamps_why is None
    assert f.nic_latency_us.t_typical == 2.1 and f.latency_us.t_typical == 5.75
    said = "one way by the NIC's completion timestamps: t_min 2.00 µs t_typical 2.10 µs"
    assert said in latency("x", f)[-1]
    client.nic = type(client.nic)()  # the device had none: the host's, and why
    client.clock = N.NicClock(why="rxe0 has no completion timestamps")
    f = client.summary()
    assert (f.timestamps, f.nic_latency_us) == ("host", None)
    assert f.timestamps_why == "rxe0 has no completion timestamps"
    assert "NIC" not in " ".join(latency("x", f))


def test_lat_server_rejects_a_client_without_its_hello(rdmacli, backend):
    backend.script["listen"] = lambda cm: [backend.request()][:0]
    r = rdmacli(backend, "listen", "--lat", "--json")
    assert r.exit_code != 0 and b"needs an rdmacli lat client" in backend.rejections[0]


def test_a_one_sided_run_sends_the_server_a_heartbeat_each_second(rdmacli, backend):
    bw_server(backend)
    r = rdmacli(backend, "bw", "10.0.0.1", "--duration", "1.3", "--depth", "4", "-S", "64", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    beats = [w for w in backend.sends if w["opcode"] == C.WR_SEND]
    assert len(beats) == 1 and beats[0]["length"] == 0  # the server's recv completes: progress


def bidir_server(backend, result: bytes) -> None:
    """A `listen --bw` that answers the client's DONE with `result` as its RESULT."""
    from rdmacli.protocols import bw

    bw_server(backend)

    def answer(cm, wr):
        if wr["opcode"] == C.WR_SEND_WITH_IMM and wr.get("imm") == bw.DONE:
            backend.deliver(cm, result, imm=bw.RESULT)

    backend.on_send = answer


def test_bidir_advertises_its_buffer_stops_the_server_and_reports_both_ways(rdmacli, backend):
    from rdmacli.protocols import bw

    bidir_server(backend, bw.RESULT_FORMAT.pack(40, 0.5))
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "50", "--depth", "8", "--bidir", "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    hello = H.parse(backend.conn_params[0].private_data)
    assert hello.flags == H.BIDIR | 0 and hello.count == 8  # write, both ways, the server's window
    ctl = [w for w in backend.sends if w["opcode"] == C.WR_SEND_WITH_IMM]
    assert [w["imm"] for w in ctl] == [bw.ADVERT, bw.DONE]
    advert = ctl[0]["mr"].read(0, 16)
    addr, rkey, size = struct.unpack(">QII", advert)
    assert size == 65536 and ctl[0]["length"] == 16
    [c] = r.doc["connections"]
    assert c["reverse"]["messages"] == 40 and c["reverse"]["bytes"] == 40 * 65536
    b = r.doc["data"]["bw"]
    assert b["reverse_gbps"] == round(40 * 65536 * 8 / 0.5 / 1e9, 4)
    assert b["total_gbps"] == round(b["gbps"] + b["reverse_gbps"], 4)


def test_bidir_refuses_an_impossible_result_from_the_server(rdmacli, backend):
    from rdmacli.protocols import bw

    bidir_server(backend, bw.RESULT_FORMAT.pack(1 << 50, float("nan")))
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "10", "--bidir", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "peer_protocol_violation", r.doc["error"]


def test_bidir_refuses_a_result_faster_than_its_own_port(rdmacli, backend):
    """40 x 64 KiB in 1 ms is 21 Gb/s: a finite, well-formed figure, and more than this
    client's 10 Gb/s port could have received: the server's word is not taken."""
    from rdmacli.protocols import bw

    backend.rate_gbps = 10.0
    bidir_server(backend, bw.RESULT_FORMAT.pack(40, 0.001))
    r = rdmacli(backend, "bw", "10.0.0.1", "-C", "50", "--depth", "8", "--bidir", "--json")
    assert r.exit_code == 1 and r.doc["error"]["cause"] == "peer_protocol_violation", r.doc["error"]
    assert "above this port's 10 Gb/s" in r.doc["error"]["message"]


def test_bw_server_refuses_unknown_options_in_the_hello():
    import pytest

    from rdmacli.engine.protocol import Reject

    data = H.Hello(table.BW.hello_kind, 0, 4096, flags=0x40).pack()
    with pytest.raises(Reject, match="bad bw request"):
        H.operation(data, table.BW.hello_kind, 1 << 20, {0: "write"}, 1, options=H.BIDIR)
    kind = table.BW.hello_kind
    assert H.operation(H.Hello(kind, 0, 4096, flags=H.BIDIR | 1).pack(), kind, 1 << 20,
                       {1: "read"}, 1, options=H.BIDIR) == ("read", 4096, H.BIDIR)  # fmt: skip


def test_lat_stopped_by_ctrl_c_after_answered_iterations_ends_normally(rdmacli, backend):
    import os
    import signal

    answered = []

    def answer(cm, wr):
        if wr["opcode"] == C.WR_SEND:
            answered.append(1)
            backend.deliver(cm, struct.pack(">Q", 1000) + bytes(56))
            if len(answered) == 20:
                os.kill(os.getpid(), signal.SIGINT)

    backend.on_send = answer
    r = rdmacli(backend, "lat", "10.0.0.1", "-C", "100000", "--json")
    assert r.exit_code == 0 and r.doc["result"] == "pass", r.doc["error"]
    [c] = r.doc["connections"]
    assert c["stopped_by"] == "SIGINT" and 19 <= c["iterations"] < 100000


def test_bw_says_its_qp_count_in_each_hello(rdmacli, backend):
    bw_server(backend)
    r = rdmacli(backend, "bw", "10.0.0.1", "--qps", "3", "-C", "10", "--json")
    assert r.exit_code == 0, r.doc["error"]
    assert [H.parse(p.private_data).group for p in backend.conn_params] == [3, 3, 3]


def test_bw_all_sizes_runs_a_connection_per_size_each_announcing_the_sweep(rdmacli, backend):
    """-a on rdmacli's own exchange: every power of two from 2 B to 8 MiB in turn, one
    connection each, each hello saying the size and how many come (so that a default server
    waits for the next); one summary with the table by size."""

    def serve(cm, p):  # `listen --bw`: a buffer of the size each hello asks for
        size = H.parse(p.private_data).size
        return [backend.event(cm, C.ESTABLISHED, private_data=pack_info(0x10000, 0x77, size))]

    backend.script["connect"] = serve
    r = rdmacli(backend, "bw", "10.0.0.1", "-a", "-C", "3", "--json")
    assert r.exit_code == 0, r.doc["error"]
    sizes = [1 << i for i in range(1, 24)]
    hellos = [H.parse(p.private_data) for p in backend.conn_params]
    assert [h.size for h in hellos] == sizes and {h.group for h in hellos} == {23}
    assert [row["size_bytes"] for row in r.doc["data"]["sweep"]] == sizes
    assert [c["conn"] for c in r.doc["connections"]] == list(range(23))
    assert all(row["messages_sent"] == 3 for row in r.doc["data"]["sweep"])
    writes = [w["length"] for w in backend.sends if w["opcode"] == C.WR_RDMA_WRITE]
    assert writes == [s for s in sizes for _ in range(3)]  # never past the size asked and advertised
    assert r.doc["params"]["all_sizes"] is True and r.doc["totals"]["connections_passed"] == 23


def test_a_sweep_stops_at_the_first_size_that_fails(rdmacli, backend):
    def serve(cm, p):  # a server that takes sizes up to 64 B only
        size = H.parse(p.private_data).size
        if size > 64:
            return [backend.event(cm, C.REJECTED, status=28, private_data=b"rdmacli: size too big\0")]
        return [backend.event(cm, C.ESTABLISHED, private_data=pack_info(0x10000, 0x77, size))]

    backend.script["connect"] = serve
    r = rdmacli(backend, "bw", "10.0.0.1", "-a", "-C", "2", "--json")
    assert r.exit_code != 0 and r.doc["result"] == "fail"
    assert [row["size_bytes"] for row in r.doc["data"]["sweep"]] == [2, 4, 8, 16, 32, 64, 128]
    assert [c["state"] for c in r.doc["connections"]][-2:] == ["done", "failed"]
    assert r.doc["error"]["cause"] == "rejected"  # the size the server refused: said as the run's end


def test_all_sizes_refuses_what_perftest_refuses_with_it(rdmacli, backend):
    for args in (["bw", "10.0.0.1", "-a", "-D", "3"], ["bw", "10.0.0.1", "-a", "--qps", "2"],
                 ["listen", "--all-sizes"]):  # fmt: skip
        r = rdmacli(backend, *args)
        assert r.exit_code == 2 and ("-a" in r.stderr or "--all-sizes" in r.stderr), r.stderr


def test_lat_all_sizes_is_a_table_by_size_on_the_terminal(rdmacli, backend):
    def answer(cm, wr):
        if wr["opcode"] == C.WR_SEND:
            backend.deliver(cm, bytes(wr["length"]))

    backend.on_send = answer
    r = rdmacli(backend, "lat", "10.0.0.1", "-a", "-C", "5")
    assert r.exit_code == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#bytes", "#iterations"])
    sizes = [int(line.split()[0]) for line in lines[head + 1 : head + 19]]
    assert sizes == [1 << i for i in range(3, 21)]  # 8 B (its hold) to 1 MiB, the server's range
    assert "send latency by size" in r.stdout and "--- " not in r.stdout
