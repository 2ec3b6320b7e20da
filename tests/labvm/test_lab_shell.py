"""`rdmacli lab shell` as a person meets it: driven through a pty (pexpect), it must give a real
terminal inside the VM: tty and isatty, the window size and its changes, job control, Ctrl-C and
Ctrl-Z to the foreground job, and rdmacli's progress bar. Boots its own VM from the host.

Every wait is for output (a prompt, a line), never for a fixed time: under TCG a bash or Python
start takes seconds, and more when the machine is busy.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pexpect
import pytest

pytestmark = pytest.mark.labvm

ROOT = pathlib.Path(__file__).parents[2]
PROMPT = "LAB42> "  # PS1='LAB$((6*7))> ': the echoed command line cannot match it
SLOW = 300  # seconds: a deadline for what TCG makes slow, never a pause


@pytest.fixture
def shell():
    env = dict(os.environ, TERM="xterm-256color")
    env.pop("NO_COLOR", None)  # a person's terminal, with rich's live output
    child = pexpect.spawn(
        sys.executable,
        ["-m", "rdmacli", "lab", "shell"],
        cwd=str(ROOT),
        env=env,
        dimensions=(40, 120),
        encoding="utf-8",
        codec_errors="replace",
        timeout=SLOW,
    )
    child.logfile_read = open(os.environ.get("RDMACLI_LABVM_LOG", os.devnull), "w")  # noqa: SIM115
    child.expect("ready in")
    # the shell's own first prompt before any key: what its rc files run may read the terminal (a
    # host's ~/.bashrc with `pyenv init` ate a line typed ahead, in a fresh clone's run)
    child.expect(r"[#$] ")
    # the line is said again while no prompt answers it (it sets the same prompt twice at worst):
    # a fresh machine's CI once sat its whole deadline here with not even the line's echo back
    # (keys lost on their way in, under load); the deadline over all tries is still SLOW
    end, tries = time.monotonic() + SLOW, 0
    while True:
        child.sendline("bind 'set enable-bracketed-paste off'; PS1='LAB$((6*7))> '")
        tries += 1
        left = end - time.monotonic()
        if child.expect_exact([PROMPT, pexpect.TIMEOUT], timeout=max(1.0, min(60.0, left))) == 0:
            break
        if left <= 60:
            raise AssertionError(f"no {PROMPT!r} in {SLOW} s; the terminal showed {child.before[-200:]!r}")
    if tries > 1:  # a line said twice may answer twice: past its prompts, to a line of our own
        child.sendline("echo SYNC$((40+2))")
        child.expect_exact("SYNC42")
        child.expect_exact(PROMPT)
    yield child
    if child.isalive():
        child.sendcontrol("]")  # the host-side escape: ends the VM
        child.expect(pexpect.EOF)


def run(child, line: str, *expect: str) -> None:
    child.sendline(line)
    for pattern in expect:
        child.expect(pattern)
    child.expect_exact(PROMPT)


def test_lab_shell_is_a_real_terminal(shell):
    run(
        shell,
        "tty; stty size; python3 -c 'import sys; print(\"isatty\", sys.stdin.isatty(), sys.stdout.isatty())'",
        r"/dev/pts/\d+",
        r"40 120",
        r"isatty True True",
    )
    # the host window changes: the guest's terminal follows (poll its answer, with a deadline)
    shell.setwinsize(30, 100)
    for _ in range(60):
        shell.sendline("stty size")
        if shell.expect([r"[\r\n]30 100\r\n", r"[\r\n]40 120\r\n"]) == 0:
            shell.expect_exact(PROMPT)
            break
        shell.expect_exact(PROMPT)
    else:
        pytest.fail("the window size change never reached the guest")
    # job control: a job in the background, Ctrl-C and Ctrl-Z to the foreground one
    run(shell, "sleep 300 &")
    run(shell, "jobs", r"\[1\]\+\s+Running\s+sleep 300")
    shell.sendline("sh -c 'echo STARTED; exec sleep 200'")  # one job, known to be running
    shell.expect(r"[\r\n]STARTED\r\n")
    shell.sendcontrol("c")
    shell.expect_exact(PROMPT)
    run(shell, "echo rc=$?", r"rc=130")
    shell.sendline("sh -c 'echo STARTED; exec sleep 100'")
    shell.expect(r"[\r\n]STARTED\r\n")
    shell.sendcontrol("z")
    shell.expect(r"Stopped\s+sh -c")
    shell.expect_exact(PROMPT)
    run(shell, "kill %1 %2")
    # rdmacli's progress bar is drawn (a terminal, so rich draws it), then the statistics
    run(
        shell,
        "rdmacli listen --ping -b 10.77.0.1 --persistent -q --json-lines > /tmp/srv.json 2>&1 & "
        "until grep -q ready /tmp/srv.json; do sleep 0.2; done; echo SERVER-UP",
        r"[\r\n]SERVER-UP",
    )
    shell.sendline("rdmacli ping 10.77.0.1 -I 10.77.0.2 -C 300 -V")
    shell.expect(r"ping 10\.77\.0\.1 .*━.* +\d+/300")
    shell.expect("rdma ping statistics")
    shell.expect("300 pings sent, 300 completed, 300 validated, 0 failed")
    shell.expect_exact(PROMPT)
    shell.sendline("exit 0")  # the server left in the background is hung up, as on a real host
    shell.expect(r"VM exited with status 0")
    shell.expect(pexpect.EOF)
