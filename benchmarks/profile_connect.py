"""Profile `rdmacli connect -c N` (cProfile) against `ucmatose -c N` in the lab.

Run: make profile   (or, in the lab: python profile_connect.py [N] [sort]: the top entries;
python profile_connect.py parts: where a connection's time goes, marginal from 8 to 128
connections, as bench.py's connect section prints it beside the ratio)
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys

from _lab import CLIENT, CONNECT_PORT, SERVER, server, stop, wait_listener, wait_no_listener

PARTS = ("wait (epoll)", "rdma/ (C calls, wrappers)", "rdmacli's Python", "libraries' Python",
         "start-up (imports)")  # fmt: skip
STARTUP = ("marshal", "exec", "__build_class__", "dlopen", "create_dynamic", "open_code", "posix.stat",
           "_io.", "posix.listdir", "posix.getcwd", "__import__")  # fmt: skip


def profiled(n: int) -> tuple[pstats.Stats, str]:
    """rdmacli connect -c n -C 10 --json against ucmatose, run in this process under cProfile:
    (its stats, what it printed)."""
    from rdmacli.__main__ import main as rdmacli_main

    srv = server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"])
    wait_listener(CONNECT_PORT)
    prof = cProfile.Profile()
    sys.argv = ["rdmacli", "connect", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10", "--json"]
    out = io.StringIO()
    real, sys.stdout = sys.stdout, out
    try:
        prof.runcall(rdmacli_main)
    except SystemExit:
        pass
    finally:
        sys.stdout = real
    stop(srv)
    wait_no_listener(CONNECT_PORT)
    return pstats.Stats(prof), out.getvalue()


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
    """Each part's own time per connection from `small` to `big` connections (start-up and the
    run's fixed work cancel out, as in bench.py's marginal), with its three largest entries."""
    a, b = own_times(profiled(small)[0]), own_times(profiled(big)[0])
    per = {key: (b.get(key, 0.0) - a.get(key, 0.0)) / (big - small) for key in set(a) | set(b)}
    lines = [f"  rdmacli's own time per connection by part, marginal {small}->{big} under cProfile "
             "(which inflates the Python parts):"]  # fmt: skip
    total = sum(v for v in per.values() if v > 0)
    for part in PARTS:
        keys = [k for k in per if part_of(k[0], k[2]) == part]
        t = sum(per[k] for k in keys)
        top = sorted(keys, key=lambda k: -per[k])[:3]
        names = ", ".join(f"{k[0].rsplit('/', 1)[-1]}:{k[1]}({k[2]}) {per[k] * 1e6:.0f}" for k in top)
        lines.append(f"    {part:28} {t * 1e6:8.0f} µs {t / total:6.1%}   largest: {names}")
    return lines


def main(n: int = 128, sort: str = "tottime") -> None:
    stats, out = profiled(n)
    print(f"profile of rdmacli connect -c {n} -C 10 against ucmatose (sorted by {sort})")
    print(out[:300])
    stats.sort_stats(sort).print_stats(r"rdmacli|built-in|method", 45)
    stats.sort_stats("cumulative").print_stats(r"rdmacli/(engine|rdma|protocols)", 40)


if __name__ == "__main__":
    if sys.argv[1:2] == ["parts"]:
        print("\n".join(marginal_parts()))
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 128, sys.argv[2] if len(sys.argv) > 2 else "tottime")
