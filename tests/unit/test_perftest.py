"""perftest's exchange (protocols/perftest.py, perftest_session.py) without RDMA: the formats as
perftest 4.5-0.17 writes them, and a client's and a server's sessions walking each binary's
steps against each other through fake connections. What proves it is the lab's
tests/lab/test_perftest.py, against perftest itself both ways."""

from __future__ import annotations

import struct

import pytest

from rdmacli.errors import Cause, RdmacliError
from rdmacli.protocols import perftest as P
from rdmacli.protocols.perftest_session import Session, Setting


def test_the_dest_is_perftests_56_bytes_in_network_order():
    d = P.Dest(lid=0, out_reads=16, qpn=0x11, psn=0x22, rkey=0xABCD, vaddr=0x7F0012345678, gid=b"G" * 16,
               srqn=0, gid_index=3)  # fmt: skip
    raw = d.pack()
    assert len(raw) == 56 == P.MAX_MESSAGE
    # rdma_write_keys: htobe32 of lid, out_reads, qpn, psn, rkey; 4 bytes of padding; htobe64 vaddr
    assert (
        raw[8:12] == b"\0\0\0\x11"
        and raw[16:20] == b"\0\0\xab\xcd"
        and raw[24:32] == struct.pack(">Q", 0x7F0012345678)
    )
    assert raw[32:48] == b"G" * 16 and P.Dest.unpack(raw) == d


def test_messages_have_perftests_sizes_and_a_short_one_is_the_peers_violation():
    assert len(P.message("version", P.VERSION)) == 16 and P.read("version", b"6.06\0" + b"\0" * 11) == "6.06"
    assert P.message("cycle_buffer", 4096) == b"\0\0\x10\0" and P.message("mtu", 5) == b"5\0"
    assert [len(P.message(k, 1)) for k in P.REPORT] == [8] * 5
    assert P.read("report_bw_avg", struct.pack(">d", 1234.5)) == 1234.5
    with pytest.raises(ValueError):
        P.read("dest", b"\0" * 20)
    assert (
        P.version_ok("6.06") and P.version_ok("5.33") and not P.version_ok("5.32") and not P.version_ok("x")
    )


class FakeFlow:
    def __init__(self, on_start):
        self.on_start = on_start

    def start(self, index):
        self.on_start(index)


class FakeConn:
    def __init__(self, flow):
        self.flow, self.finished, self.disconnected = flow, False, False

    def disconnect(self):
        self.disconnected = True

    def progress(self):
        self.quieted = False

    def quiet(self):  # the engine's Connection has none now: a session must not call it
        self.quieted = True


class FakeControl:
    def __init__(self, wire: list, side: str):
        self.wire, self.side = wire, side

    def send(self, conn, data: bytes):
        self.wire.append((self.side, data))


class FakeTest:
    def __init__(self, session, log):
        self.session, self.log = session, log

    def dest(self):
        return P.Dest(qpn=7, rkey=9, vaddr=0x1000)

    def report(self):
        return P.Report(4096, 100, 10.0, 9.5, 0.25)

    def start_test(self, conn):
        self.log.append((self.session.role, "test", self.session.size))
        if self.session.role == "server":
            self.session.test_done()

    def summary(self):
        return ("figures of", self.session.size)


@pytest.mark.parametrize("sweep", [(), P.SWEEP_SIZES], ids=["one size", "-a"])
@pytest.mark.parametrize("binary", sorted(P.STEPS))
def test_a_client_and_a_server_walk_the_same_steps_to_their_end(binary, sweep):
    """Both sides of each binary, message for message as perftest's lock step has it: the client
    writes first, the server answers each; the test QP comes at CONNECT, the test at TEST (with
    -a once per size, in order, each with its hand shake where the binary has one); the server
    learns the client's report; the client disconnects both at the end."""
    kind, op = next(k for k, b in P.BINARIES.items() if b == binary)
    setting = Setting(kind, op, 4096, count=100, sweep=sweep)
    wire, log = [], []
    sessions = {}
    for role in ("client", "server"):
        s = sessions[role] = Session.of(setting, role)
        s.control = FakeControl(wire, role)

    def connect_test(index):
        assert index == 1
        for role in ("server", "client"):  # the server accepts, then the client is established
            s = sessions[role]
            s.test_up(FakeConn(None), FakeTest(s, log))

    client, server = sessions["client"], sessions["server"]
    server.control_up(FakeConn(FakeFlow(None)))
    client.control_up(FakeConn(FakeFlow(connect_test)))
    for _ in range(200):  # deliver the wire's messages in order, each to the other side
        if not wire:
            if client.step == P.TEST:  # the client's test is over: it says so
                client.test_done()
                continue
            break
        side, data = wire.pop(0)
        (server if side == "client" else client).received(data)
    assert client.step is None and server.step is None, (client.step, server.step)
    steps = P.BINARY_STEPS[binary].walk(len(sweep) or 1, sweep=bool(sweep))
    exchanges = sum(1 for s in steps if s not in (P.CONNECT, P.TEST))
    sizes = list(sweep or [4096])
    for role in ("client", "server"):
        assert [size for r, _, size in log if r == role] == sizes
        assert sessions[role].rows == [("figures of", size) for size in sizes]
    # perftest's own counts of hand shakes: before and after the test, and per size (send_bw.c
    # and send_lat.c before each, send_bw.c with -a after each too)
    base = {"write_bw": 16, "read_bw": 16, "send_bw": 10, "send_lat": 10, "write_lat": 10}[binary]
    per_size = {"send_bw": 2 if sweep else 1, "send_lat": 1}.get(binary, 0)
    assert client.buffer == max(sizes) and exchanges == base + per_size * len(sizes)
    assert client.test_conn.disconnected and client.control_conn.disconnected
    assert server.peer_version == "6.06" and client.peer_dest.rkey == 9
    if "report_size" in P.STEPS[binary]:
        assert server.peer_report == P.Report(4096, 100, 10.0, 9.5, 0.25)
    assert exchanges == len(steps) - 1 - len(sizes)


def test_an_old_perftest_or_a_short_message_ends_the_test_in_words():
    s = Session.of(Setting("bw", "write", 4096, count=10), "server")
    s.control = FakeControl([], "server")
    s.control_up(FakeConn(FakeFlow(None)))
    with pytest.raises(RdmacliError) as err:
        s.received(P.message("version", b"5.20"))
    assert err.value.cause is Cause.PEER_PROTOCOL and "5.20" in err.value.message
    s = Session.of(Setting("bw", "write", 4096, count=10), "client")
    s.control = FakeControl([], "client")
    s.control_up(FakeConn(FakeFlow(None)))
    with pytest.raises(RdmacliError):
        s.received(b"6.0")  # three bytes where perftest sends sixteen


def test_a_client_that_floods_the_control_qp_ahead_of_the_test_is_the_peers_violation():
    """A server keeps what perftest sends before its test QP is up (the lock step allows one
    message ahead), never more: `listen --perftest` kept every message (1 M, ~103 MB, forever)."""
    from rdmacli.protocols.perftest_session import MAX_EARLY

    setting = Setting("bw", "write", 4096, count=100)
    server = Session.of(setting, "server")
    server.control = FakeControl([], "server")
    server.control_up(FakeConn(FakeFlow(None)))
    while server.step not in (P.CONNECT, None):  # to the step where the test QP comes
        server.k += 1
    data = b"\0" * 16
    for _ in range(MAX_EARLY):
        server.received(data)
    with pytest.raises(RdmacliError) as got:
        server.received(data)
    assert got.value.cause is Cause.PEER_PROTOCOL and "lock step" in got.value.message
    assert len(server.early) == MAX_EARLY


class Waiting(FakeTest):
    def start_test(self, conn):  # the test runs until the test says otherwise
        pass


def test_the_control_exchange_has_the_idle_deadline_but_where_silence_is_the_protocol():
    """`listen --perftest`: a client that connects its control QP and says nothing met no idle
    deadline (only --timeout). Now it has it from the start and through every step, pushed out
    by the test's progress (quiet while the test QP connected or the test ran, a client stalled
    mid-stream held a WRITE server past 180 s in the lab)."""
    from rdmacli.protocols.perftest_session import Control

    setting = Setting("bw", "write", 4096, count=100)
    for role in ("server", "client"):
        s = Session.of(setting, role)
        assert Control(s).waits_for_peer is False  # established: the idle deadline runs
        s.control = FakeControl([], role)
        conn = FakeConn(FakeFlow(lambda index: None))
        s.control_up(conn)
        while s.step is not None:  # each step entered: never quiet (the idle deadline holds)
            assert not conn.quieted, (role, s.step)
            s.test = Waiting(s, [])
            s.advance()
