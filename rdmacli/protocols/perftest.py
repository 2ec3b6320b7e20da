"""perftest's own exchange (`ib_write_bw -R` and its siblings): what rdmacli says to face it.

perftest with -R (rdma_cm) connects two RC QPs through rdma_cm on one port (18515): first a
control connection, then, after a hand shake on it, the test's own QP. On the control
connection the two sides exchange small structs in lock step: each exchange is one SEND of n
bytes each way, the client's first (the server reads before it writes), and perftest posts
one receive of 56 bytes (its `struct pingpong_dest`) at a time. Nothing of the test is
exchanged: both sides are given the same -s, -n, -D, as with perftest itself.

Read in perftest 4.5-0.17 (Debian bookworm's package, which says version 6.06):
src/perftest_communication.c (establish_connection, exchange_versions, check_sys_data,
check_mtu, create_rdma_cm_connection, ctx_hand_shake with rdma_write_keys/rdma_read_keys,
xchg_bw_reports, ctx_close_connection) and the main() of write_bw.c, read_bw.c, send_bw.c,
send_lat.c and write_lat.c, whose order of exchanges is STEPS below. The formats are declared
once (FORMATS); what a message says is a typed record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

VERSION = b"6.06"  # the perftest version rdmacli speaks as: its formats follow from it (>= 5.33)
PORT = 18515  # perftest's default port (DEF_PORT), the control and the test connection alike
CYCLE_BUFFER = 4096  # our page size: perftest's cycle buffer (the peer takes the larger)
CACHE_LINE = 64
MAX_MESSAGE = 56  # perftest's receive on the control QP: sizeof(struct pingpong_dest)

# every control message, by name: its struct (network byte order, as perftest converts them)
FORMATS = {
    "version": struct.Struct("16s"),  # user_param->version, MAX_VERSION bytes
    "cycle_buffer": struct.Struct(">i"),  # check_sys_data, remote version >= 5.32
    "cache_line": struct.Struct(">i"),
    "mtu": struct.Struct("2s"),  # check_mtu: sprintf("%d", the port's MTU enum), 2 bytes from 5.31
    # struct pingpong_dest as rdma_write_keys sends it (HAVE_ENDIAN): lid, out_reads, qpn, psn,
    # rkey, 4 bytes of padding, vaddr, gid, srqn, gid_index
    "dest": struct.Struct(">iiiII4xQ16sIi"),
    # xchg_bw_reports, one exchange each: size (unsigned long), iters (uint64 from 5.33), the
    # bandwidth peak and average (MB/s: 2^20 bytes) and the message rate (Mpps), as doubles
    "report_size": struct.Struct(">Q"),
    "report_iters": struct.Struct(">Q"),
    "report_bw_peak": struct.Struct(">d"),
    "report_bw_avg": struct.Struct(">d"),
    "report_msg_rate": struct.Struct(">d"),
}
assert FORMATS["dest"].size == MAX_MESSAGE and all(f.size <= MAX_MESSAGE for f in FORMATS.values())

REPORT = ("report_size", "report_iters", "report_bw_peak", "report_bw_avg", "report_msg_rate")
CONNECT, TEST = "connect", "test"  # the steps that are not exchanges
HEAD = ("version", "cycle_buffer", "cache_line", "mtu", "dest", CONNECT, "dest")


# Each binary's steps after the control connection is up, the same on both sides (a step is a
# message name, CONNECT for the test's own connection, or TEST): the steps before the test, the
# test's own (once per size: perftest's -a runs every size on the same QPs), and those after
# it. The dest exchanges after CONNECT carry this side's QP, rkey and buffer; those before it
# carry zeros.
@dataclass(frozen=True)
class Steps:
    head: tuple[str, ...]
    per_size: tuple[str, ...]
    tail: tuple[str, ...]
    after_size: tuple[str, ...] = ()  # with -a only: after each size's test

    def walk(self, sizes: int = 1, sweep: bool = False) -> tuple[str, ...]:
        each = (*self.per_size, *self.after_size) if sweep else self.per_size
        return (*self.head, *each * sizes, *self.tail)


BINARY_STEPS: dict[str, Steps] = {
    # write_bw.c/read_bw.c main(): hand shakes per QP, again "side REMOTE", one more after RTR;
    # after the test (with -a: after every size, the server waiting) one more, the client's
    # report to the server (its last size's), and ctx_close_connection's
    "write_bw": Steps((*HEAD, "dest", "dest", "dest"), (TEST,), ("dest", *REPORT, "dest")),
    "read_bw": Steps((*HEAD, "dest", "dest", "dest"), (TEST,), ("dest", *REPORT, "dest")),
    # send_bw.c: per QP, once more, "side REMOTE"; then per size one after the receives are
    # posted and the test (with -a one more after each size's test); no reports without
    # --bidirectional, then ctx_close_connection's
    "send_bw": Steps((*HEAD, "dest", "dest", "dest"), ("dest", TEST), ("dest",), after_size=("dest",)),
    # send_lat.c: as send_bw's
    "send_lat": Steps((*HEAD, "dest", "dest", "dest"), ("dest", TEST), ("dest",)),
    # write_lat.c: one after set-up, per QP, "side REMOTE", after RTR; with -a both sides walk
    # the sizes in lock step without a hand shake; nothing after the test
    "write_lat": Steps((*HEAD, "dest", "dest", "dest", "dest"), (TEST,), ()),
}
STEPS: dict[str, tuple[str, ...]] = {b: s.walk() for b, s in BINARY_STEPS.items()}

# perftest's -a (RUN_ALL) on RC: every power of two from 2 bytes to 8 MiB (MAX_SIZE), each on
# the same QPs, the buffers allocated for the largest; not with -D (perftest refuses it)
SWEEP_SIZES = tuple(1 << i for i in range(1, 24))

BINARIES = {("bw", "write"): "write_bw", ("bw", "read"): "read_bw", ("bw", "send"): "send_bw",
            ("lat", "send"): "send_lat", ("lat", "write"): "write_lat"}  # fmt: skip


def default_iters(test: str, op: str) -> int:
    """perftest's -n when none is given (perftest_parameters.c: DEF_ITERS_WB for ib_write_bw,
    DEF_ITERS for the rest): both sides must count alike, and perftest exchanges no count."""
    return 5000 if (test, op) == ("bw", "write") else 1000


@dataclass(frozen=True)
class Dest:
    """struct pingpong_dest: what a side says of its test QP and the buffer the peer may use."""

    lid: int = 0
    out_reads: int = 0
    qpn: int = 0
    psn: int = 0
    rkey: int = 0
    vaddr: int = 0
    gid: bytes = bytes(16)
    srqn: int = 0
    gid_index: int = 0

    def pack(self) -> bytes:
        return FORMATS["dest"].pack(self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr,
                                    self.gid, self.srqn, self.gid_index)  # fmt: skip

    @classmethod
    def unpack(cls, data: bytes) -> Dest:
        return cls(*FORMATS["dest"].unpack(data[:MAX_MESSAGE]))


@dataclass(frozen=True)
class Report:
    """A bandwidth test's report (print_report_bw's bw_report_data): what the client measured,
    sent to the server, which prints it as its own line."""

    size: int = 0
    iters: int = 0
    bw_peak_mbs: float = 0.0  # MB/s of 2^20 bytes, perftest's default unit
    bw_avg_mbs: float = 0.0
    msg_rate_mpps: float = 0.0

    def values(self) -> tuple:
        return self.size, self.iters, self.bw_peak_mbs, self.bw_avg_mbs, self.msg_rate_mpps


def message(name: str, value) -> bytes:
    """A control message's bytes: `value` as its format takes it (a Dest for "dest")."""
    if name == "dest":
        return value.pack()
    if name == "version":
        return FORMATS[name].pack(value)
    if name == "mtu":
        return FORMATS[name].pack(str(value).encode()[:1] + b"\0")
    return FORMATS[name].pack(value)


def read(name: str, data: bytes):
    """A control message from the peer, as its format reads it. Anything shorter than the format
    is the peer's violation (ValueError); perftest's receive buffer holds 56 bytes, and the
    content of a message beyond its format is never looked at."""
    fmt = FORMATS[name]
    if len(data) < fmt.size:
        raise ValueError(f"perftest's {name} message is {fmt.size} bytes, {len(data)} came")
    if name == "dest":
        return Dest.unpack(data)
    (value,) = fmt.unpack(data[: fmt.size])
    if name == "version":
        return value.split(b"\0", 1)[0].decode("ascii", "replace")
    if name == "mtu":
        return value.split(b"\0", 1)[0].decode("ascii", "replace")
    return value


def version_ok(text: str) -> bool:
    """The formats here are those of a peer of 5.33 or later (64-bit iterations in the reports,
    the system data and a 2-byte MTU exchanged): older ones say other sizes."""
    try:
        return float(text) >= 5.33
    except ValueError:
        return False


def mib_s(bytes_: int, seconds: float) -> float:
    """perftest's bandwidth unit: MB/s of 2^20 bytes."""
    return bytes_ / seconds / 0x100000 if seconds > 0 else 0.0
