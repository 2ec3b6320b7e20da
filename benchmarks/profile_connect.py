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
    profiled apart, so their C and system-call time is there, which ucmatose pays too),
    rdmacli's other Python (the engine, the protocol, the records, with the built-ins they call),
    the libraries' Python (stdlib, click, rich), and start-up (imports: once a run). The bound on
    connect's ratio: what ucmatose cannot avoid is at most the first two."""
    parts: dict[str, list] = {name: [0.0, []] for name in PARTS}
    for (file, line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        if name == "<method 'poll' of 'select.epoll' objects>":
            part = "wait (epoll)"
        elif "/rdmacli/rdma/" in file:
            part = "rdma/ (C calls, wrappers)"
        elif "/rdmacli/" in file or (file == "~" and not any(w in name for w in STARTUP)):
            part = "rdmacli's Python"
        elif file == "~" or "<frozen" in file:
            part = "start-up (imports)"
        else:
            part = "libraries' Python"
        parts[part][0] += tt
        parts[part][1].append((tt, f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{line}({name})"))
    print(f"own time by part, ms per connection of {n} (cProfile inflates the Python parts):")
    for name, (tt, entries) in parts.items():
        top = ", ".join(f"{e} {t * 1e3:.0f} ms" for t, e in sorted(entries, reverse=True)[:3])
        print(f"  {name:28} {tt * 1e3 / n:7.2f}   ({top})")


PARTS = ("wait (epoll)", "rdma/ (C calls, wrappers)", "rdmacli's Python", "libraries' Python",
         "start-up (imports)")  # fmt: skip


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 128, sys.argv[2] if len(sys.argv) > 2 else "tottime")
