"""1000 datagrams of 100 bytes each way against `udaddy -C 1000`: udaddy -s versus rdmacli --ud.

Client wall time (start-up included) and, for rdmacli, the engine's own time from its JSON
summary; median of 3 runs. Run: make bench
"""

from __future__ import annotations

import json

from _lab import CLIENT, RDMACLI, SERVER, fmt, median, ratio, server, stop, timed

COUNT = 1000


def one(client: list[str]) -> tuple[float | None, str]:
    import time

    srv = server(["udaddy", "-b", SERVER, "-C", str(COUNT)])
    time.sleep(1.5)  # a UD listener shows no LISTEN cm_id state to wait for; udaddy starts fast
    wall, out = timed(client, timeout=120)
    stop(srv)
    return wall, out


def main(runs: int = 3) -> None:
    c_runs, r_runs, e_runs = [], [], []
    for _ in range(runs):
        c_runs.append(one(["udaddy", "-s", SERVER, "-b", CLIENT, "-C", str(COUNT)])[0])
        wall, out = one([*RDMACLI, "connect", SERVER, "--ud", "-b", CLIENT, "-C", str(COUNT), "--json"])
        r_runs.append(wall)
        e_runs.append(json.loads(out)["elapsed_ms"] / 1e3 if wall else None)
    c, r, e = median(c_runs), median(r_runs), median(e_runs)
    print(f"ud: {COUNT} datagrams of 100 bytes each way against udaddy, client time (ms), median of {runs}")
    print(f"{'client':<22} {'wall':>10} {'engine':>10} {'wall ratio':>11} {'engine ratio':>13}")
    print(f"{'udaddy -s':<22} {fmt(c)} {fmt(None, missing='-')} {ratio(c, c):>11} {'-':>13}")
    print(f"{'rdmacli connect --ud':<22} {fmt(r)} {fmt(e)} {ratio(r, c):>11} {ratio(e, c):>13}")


if __name__ == "__main__":
    main()
