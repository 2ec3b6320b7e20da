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
from noise import LEAST, LEVEL, MOST, alternate, alternate_each, crossed

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
CONNECT_GOAL = 1.5  # rdmacli's marginal connection at most this many times ucmatose's


def connect() -> list[str]:
    """The cost of one more connection, each client against `ucmatose -c N`: a run of 1 and a
    run of 128 connections back to back give one figure, (work(128) - work(1)) / 127. Rounds of
    ucmatose, rdmacli and the floor (bare_client.py in a process of its own: the same exchange in
    Python over rdmacli's bindings, no engine) alternate (noise.alternate_each) until both
    ratios' intervals are narrower than the goal's margin (1.5x: 0.5). rdmacli runs as users run
    it (--json) and is timed by its own elapsed_ms, the floor likewise (its Python start outside
    the clock); ucmatose from its first line to its exit. The floor's ratio says how much of the
    goal a Python client has before it does anything rdmacli's engine does."""
    small, big = CONNECT_SIZES
    here = os.path.dirname(os.path.abspath(__file__))
    bare = [sys.executable, os.path.join(here, "bare_client.py"), SERVER, CLIENT, str(CONNECT_PORT)]
    clients = {  # each client's command for {n} connections, and its clock
        "ucmatose": ([*C_LINES, "ucmatose", "-s", SERVER, "-b", CLIENT, "-c", "{n}", "-C", "10"], timed_work),
        "rdmacli": (
            [*RDMACLI, "connect", SERVER, "-b", CLIENT, "-c", "{n}", "-C", "10", "--json"],
            timed_own,
        ),
        # the same client with its connections run in C (native/cmrun.c; issue 74's goal: 1.1x)
        "native": (
            [
                "env",
                "RDMACLI_CM_PATH=native",
                *RDMACLI,
                "connect",
                SERVER,
                "-b",
                CLIENT,
                "-c",
                "{n}",
                "-C",
                "10",
                "--json",
            ],
            timed_own,
        ),  # fmt: skip
        "floor": ([*bare, "{n}"], timed_own),
    }

    def client(name):
        cmd, clock = clients[name]
        return lambda n: with_server(["ucmatose", "-b", SERVER, "-c", str(n), "-C", "10"], CONNECT_PORT,
                                     [a.replace("{n}", str(n)) for a in cmd], clock=clock)  # fmt: skip

    walls: dict[str, list[float]] = {name: [] for name in clients}

    def per_connection(name):
        run = client(name)

        def one() -> float | None:
            a, b = run(small), run(big)
            if a[1] is None or b[1] is None:
                return None
            walls[name].append(a[0])
            return (b[1] - a[1]) / (big - small) * 1e3  # ms

        return one

    payload = lambda _: (small + big) * 10 * 100  # noqa: E731 - the client's echoes of both runs
    name = f"connection, marginal {small}->{big}"
    native_name = f"native (RDMACLI_CM_PATH=native), marginal {small}->{big}"
    floor_name = f"floor (Python, no engine), marginal {small}->{big}"
    figs = alternate_each({name: on_wire(per_connection("rdmacli"), payload),
                           native_name: on_wire(per_connection("native"), payload),
                           floor_name: on_wire(per_connection("floor"), payload)},
                          on_wire(per_connection("ucmatose"), payload), CONNECT_GOAL, False,
                          unit="ms")  # fmt: skip
    lines = [f"connect: the marginal connection ({small} to {big}, 10 messages each way) against "
             f"`ucmatose -c N`, rdmacli --json (its elapsed_ms), goal <= {CONNECT_GOAL:g}x; beside it "
             f"the floor, bare_client.py (its elapsed_ms), in the same rounds"]  # fmt: skip
    if figs is None:
        lines.append("  a run failed or did not cross the wire (said above)")
    else:
        fig, nat, floor = figs[name], figs[native_name], figs[floor_name]
        FIGURES["connect"] = [fig.to_dict(), nat.to_dict(), floor.to_dict()]
        lines += [fig.line(), nat.line(), floor.line()]
        engine = fig.ours.median - floor.ours.median
        room = CONNECT_GOAL * fig.theirs.median - floor.ours.median
        lines.append(f"  the engine's own (rdmacli - floor, medians): {engine:.2f} ms per connection; "
                     f"the goal leaves it {f'{room:.2f} ms' if room > 0 else 'nothing'}")  # fmt: skip
        c, r, n, f = (median(walls[k]) for k in ("ucmatose", "rdmacli", "native", "floor"))
        lines.append(f"  one connection, the whole process (start-up included): ucmatose {ms(c)}, rdmacli "
                     f"{ms(r)}, native {ms(n)}, floor {ms(f)} (median of {len(walls['floor'])})")  # fmt: skip
    # what stands between the ratio and 1: the profile of the marginal connection, same boot
    got = subprocess.run([sys.executable, os.path.join(here, "profile_connect.py"), "parts"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    return lines + (got.stdout.rstrip().splitlines() or [f"  (the profile failed: {got.stderr[-300:]})"])


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
    def run(cmd):
        # a UD listener has no LISTEN cm_id state to wait for: udaddy starts in well under 1 s
        return lambda n: with_server(["udaddy", "-b", SERVER, "-C", str(n)], None, cmd(n), settle=1.5)

    t = sweep(
        (10, 1010),
        run(lambda n: [*C_LINES, "udaddy", "-s", SERVER, "-b", CLIENT, "-C", str(n)]),
        run(lambda n: [*RDMACLI, "connect", "--ud", SERVER, "-b", CLIENT, "-C", str(n), "--json-lines"]),
    )
    return report(
        f"ud: N datagrams of 100 bytes each way against `udaddy -C N` (median of {RUNS})",
        "datagram",
        "udaddy",
        t,
        [(10, 1010)],
    )


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


def steps(n: int = 32) -> list[str]:
    """cmtime (v44) runs each step for all connections in lockstep and prints phase wall time per
    connection; so does `rdmacli events` (bare.py's lockstep), beside each connection's own (avg)."""
    srv = server(["cmtime", "-b", SERVER])
    wait_listener(CONNECT_PORT)
    c_wall, c_out = timed(["cmtime", "-s", SERVER, "-b", CLIENT, "-c", str(n)])
    r_wall, r_out = timed([*RDMACLI, "events", SERVER, "-b", CLIENT, "-c", str(n), "--json"])
    n_wall, n_out = timed(["env", "RDMACLI_CM_PATH=native", *RDMACLI, "events", SERVER, "-b", CLIENT, "-c",
                           str(n), "--json"])  # fmt: skip
    srv.kill()
    srv.wait()
    wait_no_listener(CONNECT_PORT)
    c_steps = {}  # step -> (phase wall us per connection, -)
    for line in c_out.splitlines():
        m = CMTIME_ROW.match(line.strip())
        if m:
            c_steps[STEP_NAMES.get(m.group(1).strip(), m.group(1).strip())] = float(m.group(5))
    r_steps, n_steps = {}, {}  # step -> (span of the step over all connections / n, average per connection)
    for out, into in ((r_out, r_steps), (n_out, n_steps)):
        for row in (json.loads(out).get("steps_us") or []) if out else []:
            into[row["step"]] = (row["total_us"] / max(row["count"], 1), row["avg_us"])
    lines = [
        f"steps: {n} connections set up and torn down, `cmtime -c {n}` vs `rdmacli events -c {n}`",
        "  us/conn = the step's span over all connections / connections (cmtime's column);",
        "  avg = one connection's own time in the step (each step runs for every connection, as cmtime)",
        "  native: the same with RDMACLI_CM_PATH=native (native/cmrun.c), right after it",
        f"  {'step':<16} {'cmtime us/conn':>15} {'rdmacli us/conn':>16} {'ratio':>7} {'rdmacli avg':>12}"
        f" {'native us/conn':>15} {'ratio':>7}",
    ]
    for name in dict.fromkeys([*c_steps, *r_steps, *n_steps]):
        c = c_steps.get(name)
        r, avg = r_steps.get(name, (None, None))
        nat = n_steps.get(name, (None, None))[0]
        lines.append(
            f"  {name:<16} {'-' if c is None else f'{c:.0f}':>15} {'-' if r is None else f'{r:.0f}':>16}"
            f" {ratio(r, c):>7} {'-' if avg is None else f'{avg:.0f}':>12}"
            f" {'-' if nat is None else f'{nat:.0f}':>15} {ratio(nat, c):>7}"
        )
    lines.append(f"  {'whole run (wall)':<16} {ms(c_wall):>15} {ms(r_wall):>16} {ratio(r_wall, c_wall):>7}"
                 f" {'':>12} {ms(n_wall):>15} {ratio(n_wall, c_wall):>7}")  # fmt: skip
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
        before = tx_bytes(CLIENT)
        got = run()
        after = tx_bytes(CLIENT)
        moved = after - before if before is not None and after is not None else None
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
    only = sys.argv[1:] or ["startup", "connect", "ping", "ud", "mcast", "steps", "bw", "lat"]
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
