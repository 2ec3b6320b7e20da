"""1000 pings of 64 bytes against `rping -s`: rping -c, rdmacli ping, rdmacli ping --busy-poll.

Per-ping wall time = client wall time / 1000 (start-up included, as a user sees it); for rdmacli
also the in-engine time per ping (first ping to last, from its JSON summary). Run: make bench
"""

from __future__ import annotations

import json

from _lab import (
    CLIENT,
    PING_PORT,
    RDMACLI,
    SERVER,
    fmt,
    ratio,
    server,
    stop,
    timed,
    wait_listener,
    wait_no_listener,
)

COUNT = 1000


def one(client: list[str]) -> tuple[float | None, str]:
    srv = server(["rping", "-s", "-a", SERVER])
    wait_listener(PING_PORT)
    wall, out = timed(client)
    stop(srv)
    wait_no_listener(PING_PORT)
    return wall, out


def main() -> None:
    c_wall, _ = one(["rping", "-c", "-a", SERVER, "-I", CLIENT, "-C", str(COUNT)])
    rows = [("rping -c", c_wall, None)]
    for label, extra in (("rdmacli ping", []), ("rdmacli ping --busy-poll", ["--busy-poll"])):
        wall, out = one([*RDMACLI, "ping", SERVER, "-I", CLIENT, "-C", str(COUNT), "--json", *extra])
        engine = json.loads(out)["connections"][0]["time_ms"] / 1e3 if wall else None
        rows.append((label, wall, engine))
    print(f"ping: {COUNT} pings of 64 bytes against rping -s; time per ping (µs)")
    print(f"{'client':<26} {'wall/ping':>10} {'engine/ping':>12} {'wall ratio':>11} {'engine ratio':>13}")
    per = 1e6 / COUNT
    for label, wall, engine in rows:
        print(
            f"{label:<26} {fmt(wall, per)} {fmt(engine, per, '-'):>12} {ratio(wall, c_wall):>11} "
            f"{ratio(engine, c_wall):>13}"
        )


if __name__ == "__main__":
    main()
