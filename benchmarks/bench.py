"""rdmacli against the C tools, like for like, in one lab boot (`make bench`).

Both tools run as client processes against the same C server, median of RUNS runs (the tools
alternate, so drift hits both), timed two ways: wall (the whole process) and work (from the
first line the tool prints to its exit; see _lab.timed_work). The marginal cost of one unit of
work (a connection, a ping, a datagram) is (work(big) - work(small)) / (big - small): start-up
and one-time setup cancel out, and the start of a Python process, whose variation under TCG is
larger than 31 connections' work, is outside the clock. Start-up and setup are their own row
("fixed": wall(small) - small x marginal). Ratios are rdmacli / C; below 1.0 rdmacli is faster.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

from _lab import (
    C_LINES,
    CLIENT,
    CONNECT_PORT,
    PING_PORT,
    RDMACLI,
    SERVER,
    gid_index,
    median,
    ratio,
    server,
    stop,
    timed,
    timed_own,
    timed_work,
    tx_bytes,
    wait_listener,
    wait_no_listener,
    wait_tcp_listener,
)
from noise import LEAST, LEVEL, MOST, Figure, Spread, alternate, alternate_each, crossed

from rdmacli.native import CM_ENV

RUNS = int(os.environ.get("BENCH_RUNS", "3"))
FIGURES: dict[str, list[dict]] = {}  # each section's figures as data (noise.Figure.to_dict)
UD_PORT = 7174
GROUP = "239.77.0.9"


def ms(x: float | None) -> str:
    if x is None:
        return "failed"
    if math.isnan(x):
        return "noise"
    return f"{x * 1e3:.1f} ms" if x >= 0.01 else f"{x * 1e6:.0f} µs"


def with_server(
    srv_cmd: list[str], port: int | None, client: list[str], settle: float = 0.0, clock=timed_work
):
    srv = server(srv_cmd)
    if port is not None:
        wait_listener(port)
    else:
        time.sleep(settle)
    times = clock(client)
    stop(srv, timeout=30)
    if port is not None:
        wait_no_listener(port)
    return times


def sweep(sizes, c_run, r_run) -> dict[int, tuple[float | None, float | None]]:
    """Median work time per size for the C tool and rdmacli, alternating runs (each run gives
    (wall, work)). Kept beside it: the median walls (WALL) and the fastest work (FASTEST:
    interference under TCG only ever adds time, so the minimum is a steadier estimate)."""
    out = {}
    for n in sizes:
        cs, rs = [], []
        for _ in range(RUNS):
            cs.append(c_run(n))
            rs.append(r_run(n))
        out[n] = (median([w for _, w in cs]), median([w for _, w in rs]))
        WALL[n] = (median([w for w, _ in cs]), median([w for w, _ in rs]))
        FASTEST[n] = (least([w for _, w in cs]), least([w for _, w in rs]))
    return out


WALL: dict[int, tuple[float | None, float | None]] = {}
FASTEST: dict[int, tuple[float | None, float | None]] = {}


def least(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else min(values)


NOISE = float("nan")  # a marginal cost the runs cannot give: the bigger run took less time


def marginal(t: dict, small: int, big: int, i: int) -> float | None:
    """Per unit of work from `small` to `big` units; NOISE where the big run was the faster
    (under TCG a run's jitter can exceed 7 connections' work: a negative cost is no figure)."""
    a, b = t[small][i], t[big][i]
    if a is None or b is None:
        return None
    return (b - a) / (big - small) if b >= a else NOISE


def report(title: str, unit: str, c_name: str, t: dict, pairs: list[tuple[int, int]]) -> list[str]:
    lines = [title, f"  {'':<28} {c_name:>12} {'rdmacli':>12} {'ratio':>8}"]
    for n in t:
        c, r = WALL[n]
        lines.append(f"  {f'T({n}) wall':<28} {ms(c):>12} {ms(r):>12} {ratio(r, c):>8}")
    for n, (c, r) in t.items():
        lines.append(f"  {f'T({n}) work':<28} {ms(c):>12} {ms(r):>12} {ratio(r, c):>8}")
    for small, big in pairs:
        mc, mr = marginal(t, small, big, 0), marginal(t, small, big, 1)
        fc, fr = marginal(FASTEST, small, big, 0), marginal(FASTEST, small, big, 1)
        lines.append(
            f"  {f'marginal per {unit} {small}->{big}':<28} {ms(mc):>12} {ms(mr):>12} {ratio(mr, mc):>8}"
            f"   (fastest runs: {ms(fc)} vs {ms(fr)}, {ratio(fr, fc)})"
        )
    small, big = pairs[0]
    fixed = []
    for i in (0, 1):
        m = marginal(t, small, big, i)
        fixed.append(None if m is None or WALL[small][i] is None else WALL[small][i] - small * m)
    label = "fixed (start-up + setup)"
    lines.append(f"  {label:<28} {ms(fixed[0]):>12} {ms(fixed[1]):>12} {ratio(fixed[1], fixed[0]):>8}")
    return lines


# -- the four protocols ---------------------------------------------------------------------------
CONNECT_SIZES = (1, 128)  # the marginal connection: from one connection to 128
CONNECT_GOAL = 1.1  # the marginal connection at most this many times ucmatose's (issue 74)
NATIVE = ["env", f"{CM_ENV}=native"]  # connections run in C (native/cmrun.c)
PYTHON = ["env", f"{CM_ENV}=python"]  # the Python engine: the reference and the fallback


def marginal_per(run, small: int, big: int, scale: float = 1e3):
    """One figure's run: (work(big) - work(small)) / (big - small), in ms (scale 1e3; 1e6: µs),
    from two runs back to back (start-up and one-time setup cancel out)."""

    def one() -> float | None:
        a, b = run(small), run(big)
        if a[1] is None or b[1] is None:
            return None
        return (b[1] - a[1]) / (big - small) * scale

    return one


def said(section: str, lines: list[str], figs: dict[str, Figure] | None) -> list[str]:
    """A section's figures kept (FIGURES) and its lines: its title, then a figure a line, or
    that a run failed (which one: said on stderr as it failed)."""
    if figs is None:
        return [*lines, "  a run failed or did not cross the wire (said above)"]
    FIGURES[section] = [f.to_dict() for f in figs.values()]
    return lines + [f.line() for f in figs.values()]


def connect() -> list[str]:
    """The cost of one more connection, each client against `ucmatose -c N`: a run of 1 and a
    run of 128 connections back to back give one figure, (work(128) - work(1)) / 127. Rounds of
    ucmatose, rdmacli's native path and its Python engine alternate (noise.alternate_each)
    until both intervals are narrower than the goal's margin or 12 rounds. rdmacli runs as
    users run it (--json) and is timed by its own elapsed_ms (its Python start outside the
    clock); ucmatose from its first line to its exit."""
    small, big = CONNECT_SIZES
    args = ["connect", SERVER, "-b", CLIENT, "-c", "{n}", "-C", "10", "--json"]
    clients = {  # each client's command for {n} connections, and its clock
        "ucmatose": ([*C_LINES, "ucmatose", "-s", SERVER, "-b", CLIENT, "-c", "{n}", "-C", "10"], timed_work),
        "native": ([*NATIVE, *RDMACLI, *args], timed_own),
        "python": ([*PYTHON, *RDMACLI, *args], timed_own),
    }

    def client(name):
        cmd, clock = clients[name]
        return lambda n: with_server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"], CONNECT_PORT,
                                     [a.replace("{n}", str(n)) for a in cmd], clock=clock)  # fmt: skip

    payload = lambda _: (small + big) * 10 * 100  # noqa: E731 - the client's echoes of both runs
    names = {
        "native": f"native, marginal {small}->{big}",
        "python": f"Python engine, marginal {small}->{big}",
    }
    figs = alternate_each({names[k]: on_wire(marginal_per(client(k), small, big), payload) for k in names},
                          on_wire(marginal_per(client("ucmatose"), small, big), payload), CONNECT_GOAL, False,
                          unit="ms")  # fmt: skip
    lines = [f"connect: the marginal connection ({small} to {big}, 10 messages each way) against "
             f"`ucmatose -c N`, rdmacli --json (its elapsed_ms), native and the Python engine in the "
             f"same rounds, goal <= {CONNECT_GOAL:g}x"]  # fmt: skip
    return said("connect", lines, figs)


def serve() -> list[str]:
    """The server side: `ucmatose -c N` as the client, served by rdmacli listen and by ucmatose's
    own server in turn, the client's work (first line to exit) the clock for both; marginal 1 to
    128 as connect. The server is up (its LISTEN cm_id seen) before the client starts."""
    small, big = CONNECT_SIZES
    servers = {
        "ucmatose": lambda n: ["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"],
        "rdmacli": lambda n: [*RDMACLI, "listen", "-b", SERVER, "-c", str(n), "-C", "10", "--json"],
    }

    def served_by(name):
        client = [*C_LINES, "ucmatose", "-s", SERVER, "-b", CLIENT, "-C", "10", "-c"]
        return lambda n: with_server(servers[name](n), CONNECT_PORT, [*client, str(n)])

    payload = lambda _: (small + big) * 10 * 100  # noqa: E731
    name = f"listen, marginal {small}->{big}"
    ours, theirs = (on_wire(marginal_per(served_by(k), small, big), payload) for k in ("rdmacli", "ucmatose"))
    figs = alternate_each({name: ours}, theirs, CONNECT_GOAL, False, unit="ms")
    lines = [f"serve: the marginal connection ({small} to {big}) of a `ucmatose -c N` client, served by "
             f"`rdmacli listen -c N` against `ucmatose -c N`'s server, the client's work the clock, "
             f"goal <= {CONNECT_GOAL:g}x"]  # fmt: skip
    return said("serve", lines, figs)


def ping() -> list[str]:
    def run(cmd):
        return lambda n: with_server(["rping", "-s", "-a", SERVER], PING_PORT, cmd(n))

    t = sweep(
        (10, 1010),
        run(lambda n: [*C_LINES, "rping", "-c", "-v", "-a", SERVER, "-I", CLIENT, "-C", str(n)]),
        run(lambda n: [*RDMACLI, "ping", SERVER, "-I", CLIENT, "-C", str(n), "--json-lines"]),
    )
    return report(
        f"ping: N pings of 64 bytes against `rping -s` (median of {RUNS})", "ping", "rping", t, [(10, 1010)]
    )


def ud() -> list[str]:
    """The cost of one more datagram each way, `connect --ud` against `udaddy -C N`'s client, each
    against udaddy's server: (work(1010) - work(10)) / 1000 in µs, rounds alternating as connect.
    rdmacli is timed by its own elapsed_ms (--json), udaddy from its first line to its exit."""
    small, big = 10, 1010

    def client(cmd, clock):
        # a UD listener has no LISTEN cm_id state to wait for: udaddy starts in well under 1 s
        def run(n):
            srv = ["udaddy", "-b", SERVER, "-C", str(n)]
            return with_server(srv, None, [a.replace("{n}", str(n)) for a in cmd], settle=1.5, clock=clock)

        return run

    ours = client([*RDMACLI, "connect", "--ud", SERVER, "-b", CLIENT, "-C", "{n}", "--json"], timed_own)
    theirs = client([*C_LINES, "udaddy", "-s", SERVER, "-b", CLIENT, "-C", "{n}"], timed_work)
    payload = lambda _: (small + big) * 100  # noqa: E731 - the client's datagrams of both runs
    name = f"connect --ud, marginal {small}->{big}"
    fig = alternate(name, on_wire(marginal_per(ours, small, big, 1e6), payload),
                    on_wire(marginal_per(theirs, small, big, 1e6), payload), CONNECT_GOAL, False,
                    unit="µs")  # fmt: skip
    lines = [f"ud: the marginal datagram ({small} to {big} of 100 bytes each way) against `udaddy -C N`, "
             f"rdmacli --json (its elapsed_ms), goal <= {CONNECT_GOAL:g}x"]  # fmt: skip
    return said("ud", lines, None if fig is None else {name: fig})


def mcast() -> list[str]:
    """Senders only (UD multicast has no flow control: a sender never waits for receivers); one
    rdmacli receiver joined throughout so the group has a member. mckey's sender sleeps 3 s after
    joining, a constant that cancels in the marginal cost."""
    rx = subprocess.Popen(
        [*RDMACLI, "mcast", GROUP, "-b", SERVER, "-C", "1000000", "--timeout", "900", "--json-lines"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in rx.stdout:
        if '"joined"' in line:
            break
    try:
        t = sweep(
            (10, 5010),
            lambda n: timed_work([*C_LINES, "mckey", "-m", GROUP, "-s", "-b", CLIENT, "-C", str(n)]),
            lambda n: timed_work(
                [*RDMACLI, "mcast", GROUP, "--send", "-b", CLIENT, "-C", str(n), "--json-lines"]
            ),
        )
    finally:
        rx.terminate()
        rx.wait(timeout=60)
    return report(
        f"mcast: a sender of N datagrams of 100 bytes, `mckey -s` (median of {RUNS})",
        "datagram",
        "mckey",
        t,
        [(10, 5010)],
    )


# -- step timings against cmtime -------------------------------------------------------------------
CMTIME_ROW = re.compile(r"^(\w[\w ]*?)\s*:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
STEP_NAMES = {"connect": "cm connect", "destroy": "destroy id"}
STEPS_N = 64  # connections a run: cmtime's table is the step's span over them


def cmtime_steps(out: str) -> dict[str, float]:
    """cmtime's table: each step's wall time over all connections, µs per connection."""
    got = {}
    for line in out.splitlines():
        m = CMTIME_ROW.match(line.strip())
        if m:
            got[STEP_NAMES.get(m.group(1).strip(), m.group(1).strip())] = float(m.group(5))
    return got


def events_steps(out: str) -> dict[str, float]:
    """rdmacli events --json's steps_us: each step's span over all connections / connections."""
    try:
        rows = json.loads(out).get("steps_us") or []
    except ValueError:
        return {}
    return {row["step"]: row["total_us"] / max(row["count"], 1) for row in rows}


CM_MAD = 256  # bytes of one CM message (a REQ, REP or DREQ MAD): what a connection sends at least


def wire(run):
    """run()'s result and the bytes the client's netdev sent meanwhile (None: no counter)."""
    before = tx_bytes(CLIENT)
    got = run()
    after = tx_bytes(CLIENT)
    return got, (after - before if before is not None and after is not None else None)


def steps(n: int = STEPS_N) -> list[str]:
    """cmtime (v44) runs each step for all connections in lockstep and prints each step's wall
    time per connection; so does `rdmacli events` (bare.py's lockstep, both runners). Rounds of
    cmtime and native events alternate against one cmtime server until every step's interval is
    narrower than the goal's margin or 12 rounds: one figure a step. The Python engine's table,
    one run in the same boot, beside it."""
    srv = server(["cmtime", "-b", SERVER])
    wait_listener(CONNECT_PORT)
    theirs: dict[str, list[float]] = {}
    ours: dict[str, list[float]] = {}
    walls: dict[str, list[float]] = {"cmtime": [], "native": []}
    failed = ""
    events = [*RDMACLI, "events", SERVER, "-b", CLIENT, "-c", str(n), "--json"]

    def figs() -> dict[str, Figure]:
        return {s: Figure(s, Spread(tuple(ours[s])), Spread(tuple(theirs[s])), CONNECT_GOAL, False, "µs")
                for s in theirs if ours.get(s) and len(ours[s]) == len(theirs[s])}  # fmt: skip

    while len(walls["cmtime"]) < MOST:
        (c_wall, c_out), c_moved = wire(lambda: timed(["cmtime", "-s", SERVER, "-b", CLIENT, "-c", str(n)]))
        (n_wall, n_out), n_moved = wire(lambda: timed([*NATIVE, *events]))
        c, r = cmtime_steps(c_out), events_steps(n_out)
        if c_wall is None or n_wall is None or not c or not r:
            failed = f"  a run failed: cmtime {ms(c_wall)}, native {ms(n_wall)}"
            break
        if not (crossed(c_moved, n * CM_MAD) and crossed(n_moved, n * CM_MAD)):
            failed = f"  a run did not cross the wire: cmtime moved {c_moved} bytes, native {n_moved}"
            break
        walls["cmtime"].append(c_wall)
        walls["native"].append(n_wall)
        for name, v in c.items():
            theirs.setdefault(name, []).append(v)
        for name, v in r.items():
            ours.setdefault(name, []).append(v)
        if len(walls["cmtime"]) >= LEAST and all(f.narrow for f in figs().values()):
            break
    p_wall, p_out = timed([*PYTHON, *events])
    srv.kill()
    srv.wait()
    wait_no_listener(CONNECT_PORT)
    lines = [f"steps: {n} connections set up and torn down, `cmtime -c {n}` against `rdmacli events -c {n}` "
             f"natively, rounds alternating; µs per connection = the step's span over all connections / "
             f"{n} (cmtime's column), goal <= {CONNECT_GOAL:g}x a step"]  # fmt: skip
    if failed:
        return [*lines, failed]
    got = figs()
    FIGURES["steps"] = [f.to_dict() for f in got.values()]
    lines += [f.line() for f in got.values()]
    python = events_steps(p_out)
    lines.append("  the Python engine, one run after them (µs per connection): "
                 + ", ".join(f"{s} {v:.0f}" for s, v in python.items()) if python else
                 f"  the Python engine's run failed ({ms(p_wall)})")  # fmt: skip
    c, m = median(walls["cmtime"]), median(walls["native"])
    lines.append(f"  whole process (start-up included), median: cmtime {ms(c)}, native {ms(m)}, "
                 f"Python engine {ms(p_wall)}")  # fmt: skip
    return lines


def startup() -> list[str]:
    walls = {}
    for label, cmd in (
        ("rdmacli --version", [*RDMACLI, "--version"]),
        ("rdmacli --help", [*RDMACLI, "--help"]),
        ("rdmacli --version, no .pyc", ["env", "PYTHONPYCACHEPREFIX=/nonexistent", *RDMACLI, "--version"]),
        ("connect --help", [*RDMACLI, "connect", "--help"]),
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("ucmatose -h (C)", ["sh", "-c", "ucmatose -h >/dev/null 2>&1; true"]),
    ):
        walls[label] = median([timed(cmd)[0] for _ in range(RUNS)])
    return [f"start-up: one process, wall (median of {RUNS})"] + [
        f"  {k:<28} {ms(v):>12}" for k, v in walls.items()
    ]


PERF_PORT = 18515  # perftest's and rdmacli bw/lat's default port
WIRE = ["-F", "-p", str(PERF_PORT)]  # perftest's own exchange (TCP), each end on a GID of its own


def against(server_cmd: list[str], client_cmd: list[str], ready, gone=lambda: None) -> str | None:
    """A perftest server, a client once `ready()` returns, the server stopped and `gone()`
    awaited: the client's output (None if it failed)."""
    srv = server(server_cmd)
    try:
        ready()
        r = subprocess.run(client_cmd, capture_output=True, text=True, timeout=300)
    finally:
        stop(srv, timeout=30)
        gone()
    return r.stdout if r.returncode == 0 else None


def perftest_wire(tool: str, args: list[str]) -> str | None:
    """perftest to perftest across the lab's wire (rxe1, veth1, veth0, rxe0), each end on its
    device and GID (-d, -x), connected by perftest's own exchange: the client's output.

    Not -R: Debian's perftest 4.5-0.17 does not bind an -R client to its --source_ip; librdmacm
    resolves the server's address, local to the lab's VM, to the server's own device, and the
    run is rxe0 answering itself (rxe's loopback: no packet on rxe1, its QPs and cm_ids on rxe0,
    as `rdma resource show` and the port counters showed). Compared with rdmacli across the
    wire, such a baseline measured the two paths' difference, not the tools'."""
    return against([tool, *WIRE, "-d", "rxe0", "-x", str(gid_index("rxe0", SERVER)), *args],
                   [tool, *WIRE, "-d", "rxe1", "-x", str(gid_index("rxe1", CLIENT)), *args, SERVER],
                   lambda: wait_tcp_listener(PERF_PORT))  # fmt: skip


def perftest_row(out: str | None, size: int) -> list[str] | None:
    """The results row of a perftest report: the line that starts with the size."""
    for line in (out or "").splitlines():
        cols = line.split()
        if cols and cols[0] == str(size) and len(cols) >= 4:
            return cols
    return None


def rdmacli_perf(mode: str, args: list[str], data_path: str = "native") -> dict | None:
    """One rdmacli run, both ends on one data path (RDMACLI_DATA_PATH; "native" falls back to
    Python where the extension is not built, and the summary says so)."""
    env = {**os.environ, "RDMACLI_DATA_PATH": data_path}
    # a latency server spins on its CQ, as perftest's does (a wake-up per message is not the wire)
    spin = ["--busy-poll"] if mode == "lat" else []
    srv = server([*RDMACLI, "listen", f"--{mode}", "-b", SERVER, *spin], env=env)
    try:
        wait_listener(PERF_PORT)
        r = subprocess.run([*RDMACLI, mode, SERVER, "-I", CLIENT, *args, "--json"],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    finally:
        stop(srv, timeout=30)
        wait_no_listener(PERF_PORT)
    if r.returncode != 0:  # said, so that a failed row can be read
        print(f"  ({mode} {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-300:]})", file=sys.stderr)
        return None
    return json.loads(r.stdout)


def on_wire(run, claim):
    """A run as noise.alternate takes it: its figure, or None when it failed or did not cross
    the wire (the client's netdev sent less than claim(figure), the payload the run says it sent:
    rxe answering itself on one device moves nothing there)."""

    def one() -> float | None:
        got, moved = wire(run)
        if got is None or not crossed(moved, claim(got)):
            print(f"  (a run of {got} moved {moved} bytes on the wire: not counted)", file=sys.stderr)
            return None
        return got

    return one


def sent_in(seconds: float):
    """What a bandwidth run claims to have sent: 90 % of its Gb/s for its duration."""
    return lambda gbps: 0.9 * gbps * 1e9 / 8 * seconds


def bw() -> list[str]:
    """Gb/s of RDMA WRITE for 3 s across the lab's wire: rdmacli bw (both ends) on its native data
    path against ib_write_bw to ib_write_bw (perftest_wire), runs alternating until the ratio's
    interval is narrower than the goal's margin (0.95: 0.05) or the most allowed (noise.py), each
    run checked to have crossed the wire."""
    lines = [
        "bandwidth, RDMA WRITE, 3 s each, rdmacli (native) / ib_write_bw, goal >= 0.95, runs "
        f"alternating ({LEAST} to {MOST} each) until the {LEVEL:.0%} interval is narrower than 0.05"
    ]
    FIGURES["bw"] = []

    def theirs(size: int):
        row = perftest_row(perftest_wire("ib_write_bw", ["-s", str(size), "-D", "3", "--report_gbits"]), size)
        return float(row[3]) if row else None  # BW average[Gb/sec]

    def ours(size: int):
        doc = rdmacli_perf("bw", ["-S", str(size), "--duration", "3"], "native")
        return doc["data"]["bw"]["gbps"] if doc else None

    for size in (4096, 65536, 1048576):
        name = f"{size} B"
        mine = on_wire(lambda s=size: ours(s), sent_in(3))
        c_tool = on_wire(lambda s=size: theirs(s), sent_in(3))
        fig = alternate(name, mine, c_tool, 0.95, True, unit="Gb/s")
        if fig is None:
            lines.append(f"  {name:<10} a run failed or did not cross the wire (said above)")
            continue
        FIGURES["bw"].append(fig.to_dict())
        lines.append(fig.line())
    # the lab's own noise where the gap was seen: perftest against itself, by the same rule
    again = on_wire(lambda: theirs(65536), sent_in(3))
    floor = alternate("65536 B, perftest / perftest", again, again, 0.95, True, most=6, unit="Gb/s")
    if floor is not None:
        FIGURES["bw"].append(floor.to_dict())
        lines.append(floor.line())
    return lines


def lat() -> list[str]:
    """t_typical at 64 B, 1000 iterations, every run across the lab's wire: rdmacli to rdmacli on
    its native data path (its own exchange, the server spinning as perftest's does) against
    perftest to perftest (its own exchange: see perftest_wire), alternating until the ratio's
    interval is narrower than the goal's margin (1.1x: 0.1). Under TCG one tool's round trip
    varies by 2x from run to run; the interval says whether that hides the goal."""
    lines = [f"latency, 64 B, 1000 iterations, t_typical, rdmacli (native, both ends) / perftest, "
             f"goal <= 1.1x, runs alternating ({LEAST} to {MOST} each)"]  # fmt: skip
    FIGURES["lat"] = []
    for tool, op in (("ib_send_lat", "send"), ("ib_write_lat", "write")):
        paths: set = set()

        def theirs(tool=tool):
            row = perftest_row(perftest_wire(tool, ["-s", "64", "-n", "1000"]), 64)
            return float(row[4]) if row else None  # t_typical[usec]

        def ours(op=op, paths=paths):
            doc = rdmacli_perf("lat", ["--op", op, "-S", "64", "-C", "1000"], "native")
            if doc:
                paths.add(doc["connections"][0].get("data_path"))
            return lat_of(doc and json.dumps(doc))

        payload = lambda _: 1000 * 64  # noqa: E731 - the client's messages, each way
        fig = alternate(f"{op} 64 B", on_wire(ours, payload), on_wire(theirs, payload), 1.1, False, unit="µs")
        if fig is None:
            lines.append(f"  {tool}: a run failed or did not cross the wire (said above)")
            continue
        FIGURES["lat"].append(fig.to_dict())
        said = "" if paths == {"native"} else f"   (rdmacli measured with: {sorted(map(str, paths))})"
        lines.append(fig.line() + said)
    return lines


def lat_of(out: str | None) -> float | None:
    """t_typical of an rdmacli lat summary (its connection that measured)."""
    if not out:
        return None
    conns = [c for c in json.loads(out).get("connections", []) if c.get("latency_us")]
    return conns[0]["latency_us"]["t_typical"] if conns else None


def main() -> None:
    only = sys.argv[1:] or ["startup", "connect", "serve", "steps", "ud", "ping", "mcast", "bw", "lat"]
    # warm-up: ARP and neighbour caches, page cache for both tools
    with_server(["ucmatose", "-b", SERVER], CONNECT_PORT, ["ucmatose", "-s", SERVER, "-b", CLIENT])
    from results import versions, write

    ran_on, sections = versions(), {}
    for name in only:
        sections[name] = globals()[name]()
        for line in sections[name]:
            print(line, flush=True)
        print(flush=True)
    write("bench", {"runs": RUNS, "sections": sections, "figures": FIGURES}, ran_on=ran_on)


if __name__ == "__main__":
    main()
