"""Set up, exchange 10 messages and tear down N connections: rdmacli connect against ucmatose.

Both clients face the same C server (`ucmatose -c N -C 10`) in one lab run. "wall" includes
process start-up (large for Python under TCG); "engine" is rdmacli's own time from its JSON summary.
Run: make bench
"""

from __future__ import annotations

import json

from _lab import CLIENT, RDMACLI, SERVER, fmt, ratio, server, stop, timed, wait_listener, wait_no_listener


def one(n: int, client: list[str]) -> tuple[float | None, str]:
    srv = server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"])
    wait_listener(7471)
    wall, out = timed(client)
    stop(srv)
    wait_no_listener(7471)
    return wall, out


def main() -> None:
    rows = []
    for n in (1, 8, 32):
        c_wall, _ = one(n, ["ucmatose", "-s", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10"])
        r_wall, out = one(n, [*RDMACLI, "connect", SERVER, "-b", CLIENT, "-c", str(n), "-C", "10", "--json"])
        engine = json.loads(out)["elapsed_ms"] / 1e3 if r_wall else None
        rows.append((n, c_wall, r_wall, engine))
    print("connect: N connections x 10 messages each way, client wall time (ms)")
    print(f"{'N':>4} {'ucmatose':>10} {'rdmacli':>10} {'engine':>10} {'wall ratio':>11} {'engine ratio':>13}")
    for n, c, r, e in rows:
        print(f"{n:>4} {fmt(c)} {fmt(r)} {fmt(e)} {ratio(r, c):>11} {ratio(e, c):>13}")


if __name__ == "__main__":
    main()
