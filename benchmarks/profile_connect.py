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
    stats.sort_stats(sort).print_stats(r"rdmacli|built-in|method", 45)
    stats.sort_stats("cumulative").print_stats(r"rdmacli/(engine|rdma|protocols)", 40)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 128, sys.argv[2] if len(sys.argv) > 2 else "tottime")
