"""The docs' pictures: real rdmacli screens captured in the lab and saved as SVG (`make pictures`).

Each command runs on a pseudo-terminal of a fixed size, as a person would see it (rich's live
tables included); a terminal emulator (pyte) replays what it printed, and rich writes the final
screen as SVG (Console.save_svg). Nothing is drawn by hand. Run inside `rdmacli lab --nodes 4
--rails 2` (the Makefile's target does): rxe0/rxe1 on 10.77.0.1/2, four nodes of two rails.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pyte
from rich.console import Console
from rich.style import Style
from rich.text import Text

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images"
RDMACLI = [sys.executable, "-m", "rdmacli"]
SERVER, CLIENT = "10.77.0.1", "10.77.0.2"


def run_on_pty(cmd: list[str], cols: int, rows: int, timeout: float) -> bytes:
    """What `cmd` wrote to a terminal of cols x rows, until it exited (killed at `timeout`)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    out, end = bytearray(), time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    os.close(master)
    return bytes(out)


def _color(value: str) -> str | None:
    if value == "default":
        return None
    if len(value) == 6 and all(c in "0123456789abcdefABCDEF" for c in value):
        return f"#{value}"
    return {"brown": "yellow"}.get(value, value)


def screen_text(raw: bytes, cols: int, rows: int) -> Text:
    """The final screen, as rich Text with each cell's colour and weight."""
    screen = pyte.Screen(cols, rows)
    stream = pyte.ByteStream(screen)
    stream.feed(raw.replace(b"\n", b"\r\n"))
    lines = []
    for y in range(rows):
        line = Text()
        for x in range(cols):
            ch = screen.buffer[y][x]
            line.append(ch.data, Style(color=_color(ch.fg), bgcolor=_color(ch.bg), bold=ch.bold))
        line.rstrip()
        lines.append(line)
    while lines and not lines[-1].plain.strip():
        lines.pop()
    return Text("\n").join(lines)


def save(name: str, title: str, prompt: str, raw: bytes, cols: int, rows: int) -> None:
    console = Console(
        record=True, width=cols, file=io.StringIO(), force_terminal=True, color_system="truecolor"
    )
    console.print(Text(f"$ {prompt}", style="bold"))
    console.print(screen_text(raw, cols, rows))
    OUT.mkdir(parents=True, exist_ok=True)
    console.save_svg(str(OUT / name), title=title)
    print(f"wrote docs/images/{name}", flush=True)


def start_ready(cmd: list[str], within: float = 120) -> subprocess.Popen:
    """A server started with --json-lines, returned once its `ready` record is out."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    end = time.monotonic() + within
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        if json.loads(line).get("type") == "ready":
            return proc
    proc.kill()
    raise SystemExit(f"pictures: {' '.join(cmd)} did not say it was ready")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def connect_events() -> None:
    server = start_ready([*RDMACLI, "listen", "-b", SERVER, "--persistent", "--json-lines"])
    try:
        args = ["connect", SERVER, "-b", CLIENT, "-c", "2", "-C", "10", "--events"]
        raw = run_on_pty([*RDMACLI, *args], 100, 40, 120)
        save("connect-events.svg", "rdmacli connect --events", "rdmacli " + " ".join(args), raw, 100, 40)
        args = ["events", SERVER, "-b", CLIENT, "-c", "2"]
        raw = run_on_pty([*RDMACLI, *args], 100, 50, 120)
        save("events-steps.svg", "rdmacli events", "rdmacli " + " ".join(args), raw, 100, 50)
    finally:
        stop(server)


def mesh_fault() -> None:
    nodes, rails = os.environ.get("RDMACLI_LAB_NODES"), os.environ.get("RDMACLI_LAB_RAILS_MAP")
    if not nodes or not rails:
        print("pictures: no lab nodes (run with `rdmacli lab --nodes 4 --rails 2`): mesh skipped")
        return
    subprocess.run(["ip", "link", "set", "n03r1", "down"], check=True)
    try:
        args = [
            "mesh",
            nodes,
            "--launcher",
            "exec",
            "--map",
            rails,
            "--round-time",
            "8",
            "--launch-timeout",
            "120",
        ]
        raw = run_on_pty([*RDMACLI, *args], 110, 70, 600)
        shown = ["mesh", "'" + nodes + "'", "--launcher", "exec", "--map", "rails.map", "--round-time", "8"]
        save("mesh-fault.svg", "rdmacli mesh: a NIC down", "rdmacli " + " ".join(shown), raw, 110, 70)
    finally:
        subprocess.run(["ip", "link", "set", "n03r1", "up"], check=False)


def watch_status() -> None:
    nodes, rails = os.environ.get("RDMACLI_LAB_NODES"), os.environ.get("RDMACLI_LAB_RAILS_MAP")
    if not nodes or not rails:
        return
    names = [line.split()[0] for line in Path(rails).read_text().splitlines() if line.strip()]
    d = Path(tempfile.mkdtemp(prefix="rdmacli-pictures-"))
    agents = [
        subprocess.Popen(
            [
                *RDMACLI,
                "watch",
                "run",
                "--map",
                rails,
                "--node",
                name,
                "--state-file",
                str(d / f"{name}.json"),
                "--window",
                "10",
                "--raise-after",
                "2",
                "--raise-window",
                "3",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for name in names
    ]
    try:
        subprocess.run(["ip", "link", "set", "n03r1", "down"], check=True)
        end = time.monotonic() + 240
        while time.monotonic() < end:  # readiness: every agent has judged three windows
            docs = [
                json.loads((d / f"{n}.json").read_text()) if (d / f"{n}.json").exists() else {} for n in names
            ]
            if all(doc.get("windows", 0) >= 3 for doc in docs):
                break
            time.sleep(2)
        args = ["watch", "status", nodes, "--launcher", "exec", "--map", rails, "--state-file",
                f"{d}/{{node}}.json", "--agent-command", f"{sys.executable} -m rdmacli"]  # fmt: skip
        raw = run_on_pty([*RDMACLI, *args], 110, 50, 120)
        shown = ["watch", "status", f"'{nodes}'", "--map", "rails.map"]
        save(
            "watch-status.svg", "rdmacli watch status: a NIC down", "rdmacli " + " ".join(shown), raw, 110, 50
        )
    finally:
        subprocess.run(["ip", "link", "set", "n03r1", "up"], check=False)
        for a in agents:
            stop(a)


PICTURES = {"events": connect_events, "mesh": mesh_fault, "watch": watch_status}

if __name__ == "__main__":
    for name in sys.argv[1:] or list(PICTURES):
        PICTURES[name]()
