"""Every command and role as a person types it: text output, no --json, once on a pipe and once
on a pty (util-linux `script`). A traceback anywhere fails the test (tests/internal_errors.py);
exit codes and the words a person reads are checked. (The other lab tests read JSON.)"""

from __future__ import annotations

import shlex
import subprocess

import pytest
from conftest import Server, wait_for_listener

MODES = ["pipe", "pty"]


def typed(cmd: list[str], mode: str) -> list[str]:
    """`cmd` with stderr on stdout (what a person sees, in order), on a pipe or on a pty."""
    if mode == "pty":
        return ["script", "-qec", shlex.join(cmd), "/dev/null"]
    return ["sh", "-c", 'exec "$0" "$@" 2>&1', *cmd]


def run(lab, args: list[str], mode: str, timeout: float = 180) -> tuple[int, str]:
    r = subprocess.run(typed([*lab.rdmacli, *args], mode), capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def serve(lab, args: list[str], mode: str) -> Server:
    proc = subprocess.Popen(
        typed([*lab.rdmacli, *args], mode), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return Server(proc)


# (server args, its port and port space or a readiness text, client args, words the client prints)
PAIRS = {
    "connect": (
        ["listen", "-b", "{s}"],
        (7471, "tcp"),
        ["connect", "{s}", "-b", "{c}", "-C", "5"],
        "1/1 connections",
    ),
    "ping": (
        ["listen", "--ping", "-b", "{s}"],
        (7174, "tcp"),
        ["ping", "{s}", "-I", "{c}", "-C", "3", "-V"],
        "3 completed",
    ),
    "bw": (
        ["listen", "--bw", "-b", "{s}"],
        (18515, "tcp"),
        ["bw", "{s}", "-I", "{c}", "-D", "1", "--qps", "2", "--bidir", "-S", "4K"],
        "Gb/s",
    ),
    "lat": (
        ["listen", "--lat", "-b", "{s}"],
        (18515, "tcp"),
        ["lat", "{s}", "-I", "{c}", "-C", "200"],
        "t_typical",
    ),
    "ud": (
        ["listen", "--ud", "-b", "{s}"],
        (7174, "udp"),
        ["connect", "--ud", "{s}", "-b", "{c}", "-C", "5"],
        "datagrams",
    ),
    "mcast": (
        ["mcast", "239.1.9.9", "-b", "{s}", "-C", "5", "--events"],
        "MULTICAST_JOIN",
        ["mcast", "239.1.9.9", "-b", "{c}", "--send", "-C", "5"],
        "1/1 connections",
    ),
}


@pytest.mark.rdma
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PAIRS))
def test_a_server_and_its_client_as_typed(lab, name, mode):
    server, ready, client, words = PAIRS[name]
    fill = lambda args: [a.format(s=lab.server, c=lab.client) for a in args]  # noqa: E731
    srv = serve(lab, fill(server), mode)
    try:
        if isinstance(ready, str):
            srv.wait_for(ready, timeout=120)
        else:
            wait_for_listener(*ready, timeout=120)
        rc, out = run(lab, fill(client), mode)
        assert rc == 0 and words in out, out
        src, sout, serr = srv.finish(timeout=120)
        assert src == 0 and "pass" in sout + serr, sout + serr
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()


SINGLE = {
    "devices": (["devices"], 0, "rxe"),
    "doctor": (["doctor", "{s}"], None, "checks passed"),
    "events": (["events", "{s}", "-b", "{c}", "-p", "9"], 5, "nothing is listening"),
    "ping-nobody-listening": (
        ["ping", "{s}", "-I", "{c}", "-p", "9", "--timeout", "20"],
        5,
        "nothing is listening",
    ),
}


@pytest.mark.rdma
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(SINGLE))
def test_a_command_alone_as_typed(lab, name, mode):
    args, code, words = SINGLE[name]
    rc, out = run(lab, [a.format(s=lab.server, c=lab.client) for a in args], mode)
    assert (code is None or rc == code) and words.lower() in out.lower(), (rc, out)
