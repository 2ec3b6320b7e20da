"""Set up, exchange 10 messages and tear down N connections: rdmacli connect against ucmatose.

Both clients face the same C server (`ucmatose -c N -C 10`) in one lab run. "wall" includes
process start-up (large for Python under TCG); "engine" is rdmacli's own time from its JSON summary.
Run: make bench
"""

from __future__ import annotations

import json

from _lab import (
    CLIENT,
    CONNECT_PORT,
    RDMACLI,
    SERVER,
    fmt,
    median,
    ratio,
    server,
    stop,
    timed,
    wait_listener,
    wait_no_listener,
)


def one(n: int, client: list[str]) -> tuple[float | None, str]:
    srv = server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"])
    wait_listener(CONNECT_PORT)
    wall, out = timed(client)
    stop(srv)
    wait_no_listener(CONNECT_PORT)
    return wall, out


def main(runs: int = 3) -> None:
    one(1, ["ucmatose", "-s", SERVER, "-b", CLIENT, "-C", "10"])  # warm-up: ARP, caches
    rows = []
    for n in (1, 8, 32):
        c_runs, r_runs, e_runs = [], [], []
        for _ in range(runs):
            c_runs.append(one(n, ["ucmatose", "-s", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10"])[0])
            wall, out = one(
                n, [*RDMACLI, "connect", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10", "--json"]
            )
            r_runs.append(wall)
            e_runs.append(json.loads(out)["elapsed_ms"] / 1e3 if wall else None)
        rows.append((n, median(c_runs), median(r_runs), median(e_runs)))
    print(f"connect: N connections x 10 messages each way, client time (ms), median of {runs}")
    print(f"{'N':>4} {'ucmatose':>10} {'rdmacli':>10} {'engine':>10} {'wall ratio':>11} {'engine ratio':>13}")
    for n, c, r, e in rows:
        print(f"{n:>4} {fmt(c)} {fmt(r)} {fmt(e)} {ratio(r, c):>11} {ratio(e, c):>13}")


if __name__ == "__main__":
    main()
