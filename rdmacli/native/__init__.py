"""rdmacli's native data path: the per-message loops in C (lat.c, bw.c, probe.c, cffi's API mode).

Loaded on first use. Where the extension was not built (no compiler or libibverbs-dev when
`make venv` ran, a pure wheel) or RDMACLI_DATA_PATH=python asks for it, the Python loops run as
before; every summary says which measured (`data_path`). The protocols call `LatLoop` once per
slice: Python keeps the CM, the buffers and the figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV = "RDMACLI_DATA_PATH"  # "python": never the native loops
CLOCK_ENV = "RDMACLI_NIC_CLOCK"  # "off": never the NIC's timestamps; "ex": the lab's test (below)
CM_ENV = "RDMACLI_CM_PATH"  # "python": connect's and events' clients on the Python engine, not C
MODULE_ENV = "RDMACLI_NATIVE_MODULE"  # another build of the extension (the sanitizer test's)
NATIVE, PYTHON = "native", "python"

_state: dict = {}


def load():
    """(ffi, lib) of the extension, or None (and `why()` says why)."""
    if "lib" not in _state:
        _state["lib"], _state["why"] = None, None
        if os.environ.get(ENV, "").lower() == PYTHON:
            _state["why"] = f"{ENV}=python"
        else:
            try:
                mod = _import()
            except ImportError as exc:
                _state["why"] = f"the native data path is not built ({exc}): {build_advice()}"
            else:
                _state["lib"] = (mod.ffi, mod.lib)
    return _state["lib"]


def _import():
    path = os.environ.get(MODULE_ENV)
    if not path:
        from rdmacli.native import _datapath

        return _datapath
    import importlib.util

    spec = importlib.util.spec_from_file_location("rdmacli.native._datapath", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{MODULE_ENV}={path} is no extension module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _extension_file() -> str | None:
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_datapath" + suffix)
        if os.path.exists(path):
            return path
    return None


def build_advice() -> str:
    """What to do to get the native data path, in the words of how rdmacli was installed: a
    source checkout builds it with `make venv`, an installed pure wheel must be installed again
    where a compiler and the verbs headers are."""
    here = os.path.dirname(os.path.abspath(__file__))
    checkout = os.path.dirname(os.path.dirname(here))
    if os.path.exists(os.path.join(checkout, "pyproject.toml")) and os.path.exists(
        os.path.join(checkout, "Makefile")
    ):
        return "in this checkout `make venv` builds it (it needs gcc, python3-dev and libibverbs-dev)"
    return (
        "this install is a pure wheel: install gcc, python3-dev and libibverbs-dev (Fedora: gcc, "
        "python3-devel, rdma-core-devel), then install rdmacli again from its source"
    )


def installed() -> tuple[str, str]:
    """(NATIVE, the extension's file) or (PYTHON, why, and what to do), found without loading
    it: `--version` imports no cffi. `why()` says what loading it found."""
    if os.environ.get(ENV, "").lower() == PYTHON:
        return PYTHON, f"{ENV}=python asks for the Python loops"
    path = os.environ.get(MODULE_ENV) or _extension_file()
    if path:
        package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return NATIVE, os.path.relpath(path, package) if path.startswith(package + os.sep) else path
    return PYTHON, f"not built: {build_advice()}"


def why() -> str | None:
    load()
    return _state["why"]


def reset() -> None:
    """Forget what load() found (tests that change the environment)."""
    _state.clear()


from rdmacli.native.header import const  # noqa: E402 - datapath.h's numbers, said there once

OK, DEADLINE, POST_ERROR, WC_ERROR, POLL_ERROR, FOREIGN, BAD_ARGS, SIGNAL = (
    const(f"RDMACLI_{name}")
    for name in ("OK", "DEADLINE", "POST_ERROR", "WC_ERROR", "POLL_ERROR", "FOREIGN", "BAD_ARGS", "SIGNAL")
)
STATUS_WORDS = {
    OK: "ok",
    DEADLINE: "no answer before the deadline",
    POST_ERROR: "a post failed",
    WC_ERROR: "a work completion failed",
    POLL_ERROR: "polling the CQ failed",
    FOREIGN: "a completion of another QP on this CQ, or an answer nobody asked for",
    BAD_ARGS: "the native loop refused its arguments",
    SIGNAL: "a signal came while it slept",
}
HANDED_BACK = (DEADLINE, SIGNAL)  # a requester's exchange in flight, handed to Python's loop
NO_END = (1 << 64) - 1  # a count or time that never comes
CALIBRATION_NS = 2_000_000  # the cycle counter's first rate, from this long (then the whole run's)


CLOCK_HOST, CLOCK_NIC, CLOCK_EX = (const(f"RDMACLI_CLOCK_{mode}") for mode in ("HOST", "NIC", "EX"))


@dataclass(frozen=True)
class NicClock:
    """How a native loop times a CQ's completions. CLOCK_NIC: by the NIC's completion timestamps
    (an ibv_cq_ex made with them; `mask` and `khz` as the device says its counter); CLOCK_HOST: by
    the host's cycle counter only, and `why` says why not the NIC's. CLOCK_EX, asked by
    RDMACLI_NIC_CLOCK=ex: an ibv_cq_ex without timestamps, so that the lab (rxe has none) runs
    the loop's ibv_cq_ex poll path; it times as CLOCK_HOST."""

    mode: int = CLOCK_HOST
    mask: int = 0
    khz: int = 0
    why: str | None = None


def make_cq(verbs: int, cqe: int, channel: int, device: str) -> tuple[int | None, NicClock]:
    """A CQ for a timed native loop on device context `verbs`: (its struct ibv_cq * as an
    address, how it is timed), or (None, why not) where a plain CQ is to be made."""
    loaded = load()
    if loaded is None:
        return None, NicClock(why=why())
    want = os.environ.get(CLOCK_ENV, "").lower()
    if want == "off":
        return None, NicClock(why=f"{CLOCK_ENV}=off")
    ffi, lib = loaded
    mask, khz = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    rc = lib.rdmacli_nic_clock(ffi.cast("void *", verbs), mask, khz)
    if want == "ex":
        mode = CLOCK_EX
    elif rc:
        return None, NicClock(why=f"{device}: ibv_query_device_ex failed ({os.strerror(rc)})")
    elif not mask[0] or not khz[0]:
        return None, NicClock(why=f"{device} has no completion timestamps (completion_timestamp_mask "
                                  f"{mask[0]:#x}, hca_core_clock {khz[0]} kHz)")  # fmt: skip
    else:
        mode = CLOCK_NIC
    stamped = int(mode == CLOCK_NIC)
    ptr = lib.rdmacli_create_cq_ex(ffi.cast("void *", verbs), cqe, ffi.cast("void *", channel), stamped)
    if ptr == ffi.NULL:
        return None, NicClock(why=f"{device}: ibv_create_cq_ex with completion timestamps failed "
                                  f"({os.strerror(ffi.errno)})")  # fmt: skip
    how = (
        NicClock(CLOCK_EX, why=f"{CLOCK_ENV}=ex")
        if mode == CLOCK_EX
        else NicClock(CLOCK_NIC, mask[0], khz[0])
    )
    return int(ffi.cast("uintptr_t", ptr)), how


def ticks_ns(start: int, end: int, mask: int, khz: int) -> int:
    """ns between two completion timestamps (datapath.c's own arithmetic: wrap and rate)."""
    _, lib = load()
    return lib.rdmacli_nic_ticks_ns(start, end, mask, khz)


@dataclass(frozen=True)
class Slice:
    """What one call of a native loop did: round trips (ns) and holds (ns) for a requester,
    messages answered for a responder, and how it ended."""

    rtt_ns: tuple[int, ...]
    hold_ns: tuple[int, ...]
    answered: int
    status: int
    err: int
    wc_opcode: int
    wc_wr_id: int
    nic_ns: tuple[int, ...] = ()  # a requester's, by the NIC's clock: each answer's period from
    # the one before (0: none to measure from)


def as_address(ptr, abi_ffi) -> int:
    """A cdata pointer of rdmacli.rdma's ABI-mode ffi as an integer (the two ffis share no
    types; the extension takes the QP and CQ as void *)."""
    return int(abi_ffi.cast("uintptr_t", ptr))


class _Loop:
    """One QP's native loop: the extension, the QP and CQ as its void *, the loop's state (a
    struct of datapath.h), and how the last call ended."""

    def __init__(self, qp: int, cq: int, struct: str):
        ffi, self.lib = load()
        self.ffi = ffi
        self.qp, self.cq = ffi.cast("void *", qp), ffi.cast("void *", cq)
        self.state = ffi.new(f"struct {struct} *")

    def _slice(self, rtt=(), hold=(), answered: int = 0, nic=()) -> Slice:
        s = self.state
        return Slice(tuple(rtt), tuple(hold), answered, s.status, s.err, s.wc_opcode, s.wc_wr_id, tuple(nic))


class LatLoop(_Loop):
    """A ping-pong's native state for one QP whose CQ is its own: the buffers as registered."""

    def __init__(self, qp: int, cq: int, *, op: int, size: int, send: tuple[int, int],
                 recv: tuple[int, int], remote: tuple[int, int] | None, max_inline: int,
                 max_sends: int, send_wr_id: int, recv_wr_id: int, spin_s: float | None,
                 carries_hold: bool = True, recv_size: int = 0, clock: NicClock | None = None):  # fmt: skip
        """spin_s: how long a wait spins before it sleeps on the CQ's completion channel (None:
        it spins, perftest's way; --busy-poll). carries_hold: the answers' first 8 bytes are the
        responder's hold (rdmacli's exchange; perftest's carry nothing). recv_size: what a
        receive is posted for, if more than size (a sweep's largest size). clock: how the CQ was
        made (NicClock: an ibv_cq_ex, polled as one, with or without the NIC's timestamps)."""
        super().__init__(qp, cq, "rdmacli_lat")
        s = self.state
        if clock is not None and clock.mode != CLOCK_HOST:
            s.nic_clock, s.nic_mask, s.nic_khz = clock.mode, clock.mask, clock.khz
        s.carries_hold = 1 if carries_hold else 0
        s.spin_ns = NO_END if spin_s is None else int(spin_s * 1e9)
        s.op, s.size = op, size
        s.send_addr, s.send_lkey = send
        s.recv_addr, s.recv_lkey = recv
        s.recv_size = recv_size
        if remote is not None:
            s.remote_addr, s.rkey = remote
        s.max_inline, s.max_sends = max_inline, max_sends
        s.send_wr_id, s.recv_wr_id = send_wr_id, recv_wr_id
        self.lib.rdmacli_lat_calibrate(s, CALIBRATION_NS)
        self.capacity = 0
        self.rtt = self.hold = self.nic = None

    def resize(self, size: int) -> None:
        """The next size of a sweep (perftest's -a): its messages counted from the start again,
        as perftest counts each size's."""
        s = self.state
        s.size, s.tx_seq, s.rx_seq = size, 0, 0

    def _buffers(self, cap: int) -> None:
        if cap > self.capacity:
            self.rtt, self.hold = self.ffi.new("uint64_t[]", cap), self.ffi.new("uint64_t[]", cap)
            self.nic = self.ffi.new("uint64_t[]", cap)
            self.capacity = cap

    def client(self, cap: int, slice_s: float, deadline_s: float) -> Slice:
        """Up to cap round trips, starting none after slice_s from now, waiting for none longer
        than deadline_s from now."""
        self._buffers(cap)
        now = self.lib.rdmacli_now_ns()
        n = self.lib.rdmacli_lat_client(self.qp, self.cq, self.state, self.rtt, self.hold, self.nic, cap,
                                        now + int(slice_s * 1e9), now + int(deadline_s * 1e9))  # fmt: skip
        unpack = self.ffi.unpack
        nic = unpack(self.nic, n) if self.state.nic_clock == CLOCK_NIC else ()
        return self._slice(unpack(self.rtt, n), unpack(self.hold, n), nic=nic)

    def server(self, cap: int, slice_s: float, idle_s: float, timed: bool = False) -> Slice:
        """Answers until cap, slice_s from now, or idle_s without a message. timed: the round
        trips from each answer to the peer's next message too (a responder that measures, as
        an ib_write_lat client)."""
        rtt = self.ffi.NULL
        if timed:
            self._buffers(cap)
            rtt = self.rtt
        now = self.lib.rdmacli_now_ns()
        n = self.lib.rdmacli_lat_server(self.qp, self.cq, self.state, rtt, cap, now + int(slice_s * 1e9),
                                        int(idle_s * 1e9))  # fmt: skip
        got = self.ffi.unpack(self.rtt, self.state.timed) if timed else ()
        return self._slice(got, answered=n)


class BwLoop(_Loop):
    """A one-way bandwidth stream's native state for one QP whose CQ is its own."""

    def __init__(self, qp: int, cq: int, *, opcode: int, size: int, buf: tuple[int, int],
                 remote: tuple[int, int] | None, window: int, chain: int, limit: int | None):  # fmt: skip
        super().__init__(qp, cq, "rdmacli_bw")
        s = self.state
        s.opcode, s.size = opcode, size
        s.addr, s.lkey = buf
        if remote is not None:
            s.remote_addr, s.rkey = remote
        s.window, s.chain = window, min(chain, self.lib.RDMACLI_MAX_CHAIN)
        s.limit = limit if limit is not None else NO_END

    def stream(self, completed: int, post_until: float | None, slice_s: float,
               idle_s: float) -> tuple[bool, Slice]:  # fmt: skip
        """Post and reap until the slice's end. completed: the count as Python knows it (its
        loop polls between slices); post_until: CLOCK_MONOTONIC seconds (time.monotonic()).
        (all posted have completed and no more may be posted, how the slice ended)."""
        s = self.state
        s.completed = completed
        now = self.lib.rdmacli_now_ns()
        until = NO_END if post_until is None else max(int(post_until * 1e9), 0)
        done = self.lib.rdmacli_bw_stream(self.qp, self.cq, s, until, now + int(slice_s * 1e9),
                                          int(idle_s * 1e9))  # fmt: skip
        return bool(done), self._slice()


class ProbeLoop(_Loop):
    """A mesh probe NIC's datagrams in C (probe.c): every completion of its CQ and every probe
    due, and the sleep between them, until Python has something to do; SIDR and the pacing
    stay in Python (rdmacli/probe). Times are CLOCK_MONOTONIC ns (time.monotonic_ns())."""

    def __init__(self, qp: int, cq: int, pd: int, *, run: bytes, key: bytes, nic: int, count: int, recvs: int,
                 sends: int, buf: tuple[int, int], port_num: int, partners: list[int], replaced: int,
                 max_replies: int,
                 free: list[int] | None = None):  # fmt: skip
        super().__init__(qp, cq, "rdmacli_probe")
        ffi, s = self.ffi, self.state
        s.run, s.key = run, key
        s.nic, s.count, s.recvs, s.sends, s.max_replies = nic, count, recvs, sends, max_replies
        s.buf, s.lkey = buf
        s.port_num, s.pd = port_num, ffi.cast("void *", pd)
        n = len(partners)
        self.peers = ffi.new("struct rdmacli_probe_peer[]", max(n, 1))
        self.arrays = []  # every buffer the C side holds a pointer to lives as long as this
        for i, partner in enumerate(partners):
            p = self.peers[i]
            p.nic = partner
            for name in ("t1_ns", "host_ns", "net_ns"):
                a = ffi.new("uint64_t[]", count)
                self.arrays.append(a)
                setattr(p, name, a)
        nics = max(partners, default=0) + 1
        self.peer_of_nic = ffi.new("int32_t[]", [-1] * nics)
        for i, partner in enumerate(partners):
            self.peer_of_nic[partner] = i
        # two reply AHs a partner (probe.c answer), and room for those replaced this window
        self.reply_ah, self.reply_qpn = (
            ffi.new("uint64_t[]", 2 * max(n, 1)),
            ffi.new("uint32_t[]", 2 * max(n, 1)),
        )
        self.retired_ah = ffi.new("uint64_t[]", max(replaced, 1))
        slots = (
            list(range(recvs, recvs + sends))
            if free is None
            else [x for x in free if recvs <= x < recvs + sends]
        )
        self.free = ffi.new("uint32_t[]", max(sends, 1))
        self.free[0 : len(slots)] = slots
        s.npeers, s.peers, s.nics, s.peer_of_nic = n, self.peers, nics, self.peer_of_nic
        s.reply_ah, s.reply_qpn, s.free_sends, s.nfree = self.reply_ah, self.reply_qpn, self.free, len(slots)
        s.retired_ah, s.nretired, s.maxretired = self.retired_ah, 0, replaced  # reply AHs replaced

    def resolved(
        self, index: int, ah: int, qpn: int, qkey: int, source: bytes, step_ns: int, due_ns: int
    ) -> None:
        """Partner `index` answered SIDR (its QP `qpn` at `source`, wire.partner_source): its
        probes go from due_ns, a step apart."""
        p = self.peers[index]
        p.ah, p.qpn, p.qkey, p.step_ns, p.next_due_ns = ah, qpn, qkey, max(step_ns, 1), due_ns
        self._source(p, source)

    def expect(self, index: int, qpn: int, source: bytes) -> None:
        """Partner `index`'s QP as an earlier window knew it, before this window's begin: its
        probes are told from a QP claiming it (probe.c answer) from the start; no probe goes
        to it until `resolved`."""
        self.peers[index].qpn = qpn
        self._source(self.peers[index], source)

    def _source(self, p, source: bytes) -> None:
        raw = bytes(source[: len(p.source)]).ljust(len(p.source), b"\0")
        self.ffi.memmove(p.source, raw, len(raw))

    def wait(self, channel: int, cm_fd: int, send_end_ns: int, until_ns: int) -> bool:
        """Turns, sleeping on the completion channel and on `cm_fd` between them, until the CM
        fd is readable (True: Python's SIDR events) or until_ns (False). A signal hands back
        as the deadline does; any other stop raises in the caller through `status`."""
        self.state.send_end_ns = send_end_ns
        got = self.lib.rdmacli_probe_wait(self.qp, self.cq, self.ffi.cast("void *", channel), self.state,
                                          cm_fd, max(until_ns, 0))  # fmt: skip
        if got < 0 and self.state.status == SIGNAL:
            self.state.status = OK
            return False
        return got == 1

    def free_slots(self) -> list[int]:
        """The send slots not in flight (the next window's loop on the same QP starts from them)."""
        return self.ffi.unpack(self.free, self.state.nfree)

    def reply_qpn_of(self, index: int) -> int:
        """The last QP other than the one SIDR named that partner `index`'s probes came from
        this window, else the one SIDR named (0: none yet)."""
        return self.reply_qpn[2 * index + 1] or self.reply_qpn[2 * index]

    def forget(self, index: int) -> None:
        """Partner `index` asked again from scratch: no AH, no probe sent or counted."""
        p = self.peers[index]
        p.ah, p.sent, p.answered, p.next_due_ns = 0, 0, 0, 0

    def counts(self, index: int) -> tuple[int, int, list[int], list[int]]:
        """(sent, answered, host round trips, network round trips) of partner `index`."""
        p = self.peers[index]
        k = p.answered
        return p.sent, k, self.ffi.unpack(p.host_ns, k), self.ffi.unpack(p.net_ns, k)

    def release(self) -> None:
        """The reply AHs made in C, before the PD they were made on goes."""
        self.lib.rdmacli_probe_release(self.state)
