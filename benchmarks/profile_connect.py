"""Profile `rdmacli connect -c N` (cProfile) against `ucmatose -c N` in the lab; print the top entries.

Run: make profile   (or, in the lab: python profile_connect.py [N] [sort])
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys

from _lab import CLIENT, CONNECT_PORT, SERVER, server, stop, wait_listener, wait_no_listener


def main(n: int = 128, sort: str = "tottime") -> None:
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
    stats = pstats.Stats(prof)
    print(f"profile of rdmacli connect -c {n} -C 10 against ucmatose (sorted by {sort})")
    print(out.getvalue()[:300])
    split(stats, n)
    stats.sort_stats(sort).print_stats(r"rdmacli|built-in|method", 45)
    stats.sort_stats("cumulative").print_stats(r"rdmacli/(engine|rdma|protocols)", 40)


STARTUP = ("marshal", "exec", "__build_class__", "dlopen", "create_dynamic", "open_code", "posix.stat",
           "_io.", "posix.listdir", "posix.getcwd", "__import__")  # fmt: skip


def split(stats: pstats.Stats, n: int) -> None:
    """Where each connection's time went, by own time (tottime): waiting in epoll (the kernel and
    the peer), in rdmacli/rdma/ (the wrappers of librdmacm and libibverbs: cffi calls are not
    profiled apart, so their C and system-call time is there, which ucmatose pays too), and the
    rest of rdmacli's Python (the engine, the protocol, the records). The bound on connect's
    ratio: what ucmatose cannot avoid is at most the first two."""
    groups = {"wait (epoll)": 0.0, "rdma/ (C calls and wrappers)": 0.0, "engine, protocols, rest": 0.0,
              "start-up (imports)": 0.0}  # fmt: skip
    for (file, _line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        if name == "<method 'poll' of 'select.epoll' objects>":
            groups["wait (epoll)"] += tt
        elif "/rdmacli/rdma/" in file:
            groups["rdma/ (C calls and wrappers)"] += tt
        elif "/rdmacli/" in file or (file == "~" and not any(w in name for w in STARTUP)):
            groups["engine, protocols, rest"] += tt  # (with the built-ins they call)
        else:
            groups["start-up (imports)"] += tt  # imports, marshal, dlopen: once, not per connection
    print("own time by part, ms per connection (cProfile's overhead inflates the Python parts):")
    for name, tt in groups.items():
        print(f"  {name:32} {tt * 1e3 / n:8.2f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 128, sys.argv[2] if len(sys.argv) > 2 else "tottime")
