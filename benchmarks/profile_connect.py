"""Profile `rdmacli connect -c N` (cProfile) against `ucmatose -c N` in the lab.

Run: make profile   (or, in the lab: python profile_connect.py [N] [sort]: the top entries;
python profile_connect.py parts: where a connection's time goes, marginal from 8 to 128
connections, as bench.py's connect section prints it beside the ratio)
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import resource
import statistics
import subprocess
import sys
import threading
import time

from _lab import CLIENT, CONNECT_PORT, SERVER, ratio, server, stop, wait_listener, wait_no_listener

PARTS = ("wait (epoll)", "rdma/ (C calls, wrappers)", "rdmacli's Python", "libraries' Python",
         "start-up (imports)")  # fmt: skip
STARTUP = ("marshal", "exec", "__build_class__", "dlopen", "create_dynamic", "open_code", "posix.stat",
           "_io.", "posix.listdir", "posix.getcwd", "__import__")  # fmt: skip


def sched(pid: int | str = "self") -> tuple[float, float]:
    """A task's time on a CPU and time runnable but waiting for one (/proc/PID/schedstat), s."""
    with open(f"/proc/{pid}/schedstat") as f:
        on_cpu, waiting, _ = f.read().split()
    return int(on_cpu) / 1e9, int(waiting) / 1e9


# what one run of a client used: user and system CPU, minor page faults, wall, and how the wall
# splits: on a CPU, runnable but waiting for one (the server's and the kernel's work on the
# lab's two CPUs), and the rest asleep (waiting for the peer)
USED = ("user", "system", "faults", "wall", "on_cpu", "runnable", "asleep")


def _used(r0, r1, s0, s1, wall) -> dict[str, float]:
    on_cpu, runnable = s1[0] - s0[0], s1[1] - s0[1]
    return dict(zip(USED, (r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt,
                           wall, on_cpu, runnable, wall - on_cpu - runnable)))  # fmt: skip


@contextlib.contextmanager
def ucmatose_server(n: int):
    """ucmatose's server for n connections of 10 messages, listening, and gone again after."""
    srv = server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"])
    wait_listener(CONNECT_PORT)
    try:
        yield
    finally:
        stop(srv)
        wait_no_listener(CONNECT_PORT)


def in_process(fn) -> dict[str, float]:
    """What fn() used, run in this process (USED)."""
    r0, s0, t0 = resource.getrusage(resource.RUSAGE_SELF), sched(), time.monotonic()
    try:
        fn()
    finally:
        r1, s1, t1 = resource.getrusage(resource.RUSAGE_SELF), sched(), time.monotonic()
    return _used(r0, r1, s0, s1, t1 - t0)


def profiled(n: int, profile: bool = True) -> tuple[pstats.Stats | None, str, dict[str, float]]:
    """rdmacli connect -c n -C 10 --json against ucmatose, run in this process (under cProfile
    if `profile`): (its stats, what it printed, what it used (USED))."""
    from rdmacli.__main__ import main as rdmacli_main

    prof = cProfile.Profile() if profile else None

    def run() -> None:
        try:
            prof.runcall(rdmacli_main) if prof else rdmacli_main()
        except SystemExit:
            pass

    with ucmatose_server(n):
        sys.argv = ["rdmacli", "connect", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10", "--json"]
        out = io.StringIO()
        real, sys.stdout = sys.stdout, out
        try:
            used = in_process(run)
        finally:
            sys.stdout = real
    return (pstats.Stats(prof) if prof else None), out.getvalue(), used


def bare_cpu(n: int) -> dict[str, float]:
    """bare_client.py (ucmatose's client in Python over rdmacli.rdma, no engine) against
    ucmatose's server, in this process: what it used (USED)."""
    import bare_client

    with ucmatose_server(n):
        return in_process(lambda: bare_client.run(SERVER, CLIENT, CONNECT_PORT, n))


def ucmatose_cpu(n: int, timeout_s: float = 300.0) -> dict[str, float]:
    """`ucmatose -c n -C 10`'s client against its server: what it used (USED), its schedstat
    read once it has exited, before it is reaped."""
    cmd = ["ucmatose", "-s", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10"]
    with ucmatose_server(n):
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        watchdog = threading.Timer(timeout_s, p.kill)  # a hung client is killed, never waited for
        watchdog.start()
        try:
            os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
            t1, s1 = time.monotonic(), sched(p.pid)
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            watchdog.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    return _used(_NOTHING, ru, (0.0, 0.0), s1, t1 - t0)


class _NOTHING:  # a child's rusage starts from zero
    ru_utime = ru_stime = 0.0
    ru_minflt = 0


def cpu_per_connection(small: int, big: int, runs: int = 3) -> list[str]:
    """User and system CPU per connection, marginal from small to big, both tools, no profiler
    (rdmacli in this process after a warm-up run: its start-up is outside), and where each
    one's wall time goes. System time is the kernel's work for the calls both make; user time
    is each tool's own. Beside them the floor (bare_client.py: the same exchange in Python over
    the same bindings, no engine): what rdmacli uses over it is the engine's."""
    profiled(1, profile=False)  # imports, librdmacm's first open: not a connection's cost
    bare_cpu(1)

    def per(f) -> dict[str, float]:
        a = [f(small) for _ in range(runs)]
        b = [f(big) for _ in range(runs)]
        return {k: (statistics.median(x[k] for x in b) - statistics.median(x[k] for x in a)) / (big - small)
                for k in USED}  # fmt: skip

    c = per(ucmatose_cpu)
    r = per(lambda n: profiled(n, profile=False)[2])
    b = per(bare_cpu)
    cu, cs, ru, rs = c["user"], c["system"], r["user"], r["system"]
    bu, bs = b["user"], b["system"]
    floor = (rs + cu) / (cs + cu) if cs + cu > 0 else float("nan")

    def wall(name: str, u: dict[str, float]) -> str:
        return (f"    {name:8} {u['wall'] * 1e6:6.0f} µs = on a CPU {u['on_cpu'] * 1e6:6.0f} + runnable, "
                f"waiting {u['runnable'] * 1e6:5.0f} + asleep {u['asleep'] * 1e6:5.0f}")  # fmt: skip

    return [
        f"  CPU per connection, marginal {small}->{big} (median of {runs}, no profiler), user + system:",
        f"    ucmatose {cu * 1e6:6.0f} + {cs * 1e6:6.0f} µs = {(cu + cs) * 1e6:6.0f} µs",
        f"    rdmacli  {ru * 1e6:6.0f} + {rs * 1e6:6.0f} µs = {(ru + rs) * 1e6:6.0f} µs "
        f"({ratio(ru + rs, cu + cs)}; user {ratio(ru, cu)}, system {ratio(rs, cs)})",
        f"    bare     {bu * 1e6:6.0f} + {bs * 1e6:6.0f} µs = {(bu + bs) * 1e6:6.0f} µs "
        f"({ratio(bu + bs, cu + cs)}: the same exchange in Python over rdmacli.rdma, no engine)",
        f"    the engine's own (rdmacli - bare): {(ru + rs - bu - bs) * 1e6:.0f} µs of CPU, "
        f"{(r['wall'] - b['wall']) * 1e6:.0f} µs of wall per connection",
        f"    minor page faults per connection: ucmatose {c['faults']:.0f}, rdmacli {r['faults']:.0f}, "
        f"bare {b['faults']:.0f}",
        f"    with rdmacli's user time no more than ucmatose's, the CPU ratio would be {floor:.2f}x",
        "  where a connection's wall time goes (the client's /proc/PID/schedstat, the same runs):",
        wall("ucmatose", c),
        wall("rdmacli", r),
        wall("bare", b),
    ]


def part_of(file: str, name: str) -> str:
    """Which part an entry's own time is: waiting in epoll (the kernel and the peer); rdmacli/rdma/
    (the wrappers of librdmacm and libibverbs: cffi's calls are not profiled apart, so their C
    and system-call time is there, which ucmatose pays too); rdmacli's other Python (the engine,
    the protocol, the records, with the built-ins they call); the libraries' Python (stdlib,
    click, rich); start-up (imports: once a run)."""
    if name == "<method 'poll' of 'select.epoll' objects>":
        return PARTS[0]
    if "/rdmacli/rdma/" in file:
        return PARTS[1]
    if "/rdmacli/" in file or (file == "~" and not any(w in name for w in STARTUP)):
        return PARTS[2]
    if file == "~" or "<frozen" in file:
        return PARTS[4]
    return PARTS[3]


def own_times(stats: pstats.Stats) -> dict[tuple, float]:
    return {key: tt for key, (_cc, _nc, tt, _ct, _callers) in stats.stats.items()}


def marginal_parts(small: int = 8, big: int = 128) -> list[str]:
    """The CPU per connection of both tools, then rdmacli's own time per connection by part under
    cProfile, from `small` to `big` connections (start-up and the run's fixed work cancel out,
    as in bench.py's marginal), with each part's three largest entries."""
    lines = cpu_per_connection(small, big)
    a, b = own_times(profiled(small)[0]), own_times(profiled(big)[0])
    per = {key: (b.get(key, 0.0) - a.get(key, 0.0)) / (big - small) for key in set(a) | set(b)}
    lines.append(f"  rdmacli's own time per connection by part, marginal {small}->{big} under cProfile "
                 "(which inflates the Python parts):")  # fmt: skip
    total = sum(per.values())
    for part in PARTS:
        keys = [k for k in per if part_of(k[0], k[2]) == part]
        t = sum(per[k] for k in keys)
        top = sorted(keys, key=lambda k: -per[k])[:3]
        names = ", ".join(f"{k[0].rsplit('/', 1)[-1]}:{k[1]}({k[2]}) {per[k] * 1e6:.0f}" for k in top)
        lines.append(f"    {part:28} {t * 1e6:8.0f} µs {t / total:6.1%}   largest: {names}")
    return lines


def main(n: int = 128, sort: str = "tottime") -> None:
    stats, out, _ = profiled(n)
    print(f"profile of rdmacli connect -c {n} -C 10 against ucmatose (sorted by {sort})")
    print(out[:300])
    stats.sort_stats(sort).print_stats(r"rdmacli|built-in|method", 45)
    stats.sort_stats("cumulative").print_stats(r"rdmacli/(engine|rdma|protocols)", 40)


if __name__ == "__main__":
    if sys.argv[1:2] == ["parts"]:
        print("\n".join(marginal_parts()))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 128, sys.argv[2] if len(sys.argv) > 2 else "tottime")
