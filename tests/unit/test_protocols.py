"""Wire formats and pure protocol logic (no RDMA needed)."""

from __future__ import annotations

import pytest

from rdmacli.protocols import hello as H
from rdmacli.protocols import rping, table
from rdmacli.protocols.table import PING


def test_rping_pattern_matches_the_reference_example():
    # reference section 1.5: -S 64, ping 0 and ping 1
    p0 = rping.pattern(0, 64)
    assert p0 == b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\0"
    assert rping.pattern(1, 64).startswith(b"rdma-ping-1: BCD")
    assert len(p0) == 64 and p0[-1] == 0


def test_rping_pattern_wraps_z_to_a_and_start_advances_per_ping():
    p = rping.pattern(57, 100)  # start = 65 + 57 = 'z'
    body = p[len(b"rdma-ping-57: ") : -1]
    assert body[:3] == b"zAB"
    assert rping.pattern(58, 40)[len(b"rdma-ping-58: ")] == ord("A")  # start wrapped


def test_rping_min_size_fits_the_prefix():
    p = rping.pattern(2_147_483_647, PING.min_size)
    assert p == b"rdma-ping-2147483647: \0"


def test_rping_info_is_16_bytes_big_endian():
    raw = rping.pack_info(0x1122334455667788, 0xAABBCCDD, 64)
    assert raw == bytes.fromhex("1122334455667788aabbccdd00000040")
    assert rping.unpack_info(raw) == (0x1122334455667788, 0xAABBCCDD, 64)
    with pytest.raises(ValueError, match="bogus data, size 15"):
        rping.unpack_info(raw[:15])


@pytest.mark.parametrize("size,ok", [(22, False), (23, True), (65535, True), (65536, False)])
def test_rping_size_bounds(size, ok):
    assert (PING.check_size(size) is None) == ok


def test_hello_round_trip_and_zero_padding():
    h = H.Hello(table.PING.hello_kind, 500, 4096)
    padded = h.pack() + bytes(56 - H.SIZE)  # IB CM pads REQ private data to 56 bytes
    assert H.parse(padded) == h
    assert H.parse(bytes(56)) is None  # a C tool sends nothing: zeros
    assert H.parse(b"RDMACLI") is None  # truncated


def test_hello_check_rejects_with_reasons():
    assert H.check(H.Hello(table.CONNECT.hello_kind, 10, 100), table.CONNECT.hello_kind) is None
    assert "speaks connect" in H.check(H.Hello(table.PING.hello_kind, 1, 64), table.CONNECT.hello_kind)
    assert "exceeds the server limit 1024" in H.check(
        H.Hello(table.CONNECT.hello_kind, 1, 4096), table.CONNECT.hello_kind, 1024
    )
    assert "count" in H.check(H.Hello(table.CONNECT.hello_kind, H.MAX_COUNT + 1, 1), table.CONNECT.hello_kind)


def test_ping_stats():
    s = rping.ping_stats(rping.RttStats.of([0.001, 0.002, 0.003]), 3, 64, 3, 0, 0.0, 1.0)
    assert s.rtt_us.min == 1000 and s.rtt_us.max == 3000
    assert s.rtt_us.avg == 2000 and s.rtt_us.p50 == 2000
    assert s.pings_validated == 3 and s.throughput_mbps == round(3 * 64 * 2 * 8 / 1e6, 3)
    assert s.to_dict()["rtt_us"]["p50"] == 2000 and "stopped_by" not in s.to_dict()  # absent: n/a


def test_ping_summary_reads_like_ping8():
    from rdmacli.outcome import ConnOutcome, State
    from rdmacli.render.summary import connection_details

    figures = rping.ping_stats(rping.RttStats.of([0.001, 0.003]), 2, 64, 2, 0, 0.0, 1.0)
    c = ConnOutcome(0, State.DONE, remote="10.0.0.1:7174", stats=figures, protocol="ping", role="client")
    lines = connection_details(c)
    assert lines[0] == "--- 10.0.0.1:7174 rdma ping statistics ---"
    assert lines[1].startswith("2 pings sent, 2 completed, 2 validated, 0 failed")
    assert lines[2].startswith("rtt min/avg/max/mdev = 1.00/2.00/3.00/1.00 ms, p50 2.00 ms")


def test_rtt_stats_keep_constant_memory_for_any_count():
    import statistics

    values = [(i % 997) * 1e-6 + 1e-3 for i in range(200_000)]
    stats = rping.RttStats.of(values)
    assert len(stats.sample) == rping.RttStats.SAMPLE
    s = stats.summary_us()
    assert s.min == 1000.0 and s.max == 1996.0
    assert abs(s.avg - statistics.fmean(values) * 1e6) < 0.05
    assert abs(s.mdev - statistics.pstdev(values) * 1e6) < 0.05
    assert abs(s.p50 - 1498) < 15 and abs(s.p99 - 1986) < 15  # estimated from the sample


@pytest.mark.parametrize(
    "us,text",
    [(0.5, "0.50 µs"), (84.25, "84.2 µs"), (999, "999 µs"), (16677, "16.7 ms"), (2041205, "2.04 s")],
)
def test_durations_read_in_the_unit_of_their_magnitude(us, text):
    from rdmacli.units import duration

    assert duration(us) == text


def test_a_ud_receiver_posts_the_whole_count_as_udaddy_does():
    """UD has no flow control: udaddy sends its 10 000 datagrams in one burst into receives
    posted beforehand. A window of 4096 recycled receives lost about a thousand in the lab."""
    from fakerdma import FakeBackend

    from rdmacli.engine.protocol import Params
    from rdmacli.engine.session import CLIENT, Test, run
    from rdmacli.engine.settings import Options, Timeouts
    from rdmacli.protocols.table import UD
    from rdmacli.rdma import constants as C

    backend = FakeBackend()
    test = Test("connect", UD, CLIENT, Params(count=10_000, size=100), host="10.0.0.1", port=7174,
                timeouts=Timeouts(overall_s=0.5), options=Options(ps=C.PS_UDP))  # fmt: skip
    run(test, backend=backend)
    assert backend.qp_attrs[0]["max_recv_wr"] == 10_000
    [cm] = [c for c in backend.ids if c.recvs]
    assert len(cm.recvs) == 10_000  # posted before the peer sends


def test_a_protocol_row_is_its_hello_kind_and_its_listen_flag():
    """A row the table never had, in a fresh interpreter (added before anything reads the
    table): rdmacli's hello knows its kind by name, and `listen` serves it by a flag of its name
    with its row's words, chosen alone among the others."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        from dataclasses import replace
        from rdmacli.protocols import table
        row = replace(table.CONNECT, name="echo", c_tool="echod", hello_kind=9,
                      serves="Serve echo clients ({c_tool} on {default_port}).")
        table.PROTOCOLS["echo"] = row
        from click.testing import CliRunner
        from rdmacli.cli import cli
        from rdmacli.protocols import hello as H
        assert H.KIND_NAMES[9] == "echo", H.KIND_NAMES
        assert "speaks echo" in H.check(H.Hello(1, 1, 8), 9)
        out = " ".join(CliRunner().invoke(cli, ["listen", "--help"], terminal_width=200).output.split())
        assert "--echo Serve echo clients (echod on 7471)." in out, out
        assert table.mode_of("echo") is row
        r = CliRunner().invoke(cli, ["listen", "--echo", "--ping"])
        assert r.exit_code == 2 and "--echo" in r.output and "different protocols" in r.output, r.output
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
