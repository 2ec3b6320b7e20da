"""Starting the agents through what clusters already run: ClusterShell (ssh, exec) or srun.

Each launcher runs one agent per node and hands every line an agent prints to `on_line(node,
line)`, and its exit status to `on_exit(node, rc)`. Nothing here talks to an agent otherwise:
the schedule needs no controller. The run ends when every agent has exited or at `end_at()`
(monotonic; the coordinator's schedule end plus grace, which moves with the go line): then, as
on `stop()`, the agents left are asked to end (SIGTERM: they tear down and exit) and what is
still there after a grace period is killed; `cut` says that it happened. A launcher whose loop
still does not end (a process the kernel holds past SIGKILL, a worker that never closes) is given
up at a hard deadline (run_bounded): `abandoned` says so, and the run ends on time regardless.
"""

from __future__ import annotations

import os
import re
import selectors
import shlex
import signal
import subprocess
import threading
import time
from typing import Any

from rdmacli.errors import EnvironmentProblem
from rdmacli.mesh.inputs import clustershell_command
from rdmacli.mesh.lines import LineSplitter, bounded

LAUNCHERS = ("ssh", "srun", "exec")
GRACE_S = 5.0


class Gate:
    """The launcher's callbacks pass through until the run is given up; after that, nothing a
    worker still says reaches the coordinator (which is judging by then)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open = True

    def wrap(self, fn):
        def call(*args):
            with self.lock:
                if self.open:
                    return fn(*args)
            return None

        return call

    def close(self) -> None:
        with self.lock:
            self.open = False


def run_bounded(target, hard_end, gate: Gate) -> bool:
    """Run a launcher's loop (`target`) in a thread and return by `hard_end()` (monotonic, may
    move) whatever it does: ClusterShell's abort waits for each killed process, and an agent
    held in the kernel (rdma_destroy_id waiting out its DREQ's retries on a cut link) outlives
    SIGKILL for minutes. True when it was given up (its thread is left behind, a daemon)."""
    failure: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=body, name="launcher", daemon=True)
    thread.start()
    while thread.is_alive() and time.monotonic() < hard_end():
        thread.join(min(0.2, max(hard_end() - time.monotonic(), 0.01)))
    gate.close()
    if failure:
        raise failure[0]
    return thread.is_alive()


def _clustershell():
    try:
        from ClusterShell.Event import EventHandler
        from ClusterShell.Task import task_self
        from ClusterShell.Worker.Exec import ExecClient, ExecWorker
        from ClusterShell.Worker.Ssh import SshClient, WorkerSsh
    except ImportError as exc:
        raise EnvironmentProblem(
            f"cannot import ClusterShell: {exc}", hint="pip install ClusterShell (a dependency of rdmacli)"
        ) from exc

    # an agent that exited before a line written to its stdin (the go line) makes ClusterShell
    # log "<...Bounded instance at 0x...>: [Errno 32] Broken pipe" to stderr through logging's
    # last resort: that agent's exit is said by the run itself, in words
    import logging

    quiet = logging.getLogger("ClusterShell.Worker.EngineClient")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False

    class BoundedExec(ExecWorker):
        SHELL_CLASS = bounded(ExecClient)

    class BoundedSsh(WorkerSsh):
        SHELL_CLASS = bounded(SshClient)

    return EventHandler, task_self, BoundedExec, BoundedSsh


class ClusterShellLauncher:
    """ClusterShell's ssh worker (remote nodes) or exec worker (agents on this machine), one
    worker per node (each agent is told its own rank), all at once: agents are long-lived, so
    the fanout is raised to the node count (ClusterShell would otherwise start them in waves).
    `waves`: short commands (`watch show`), at most `fanout` at once, as ClusterShell runs them."""

    def __init__(self, kind: str, *, connect_timeout: float = 10, ssh_options: str | None = None, fanout=None,
                 topology: str | None = None, line_limit: int | None = None,
                 waves: bool = False):  # fmt: skip
        self.kind, self.waves = kind, waves
        self.line_limit = line_limit  # the longest line taken from a node (lines.bounded); None: MAX_LINE
        self.topology = topology  # a topology file's path (tree mode: agents through gateways)
        self.connect_timeout, self.ssh_options, self.fanout = connect_timeout, ssh_options, fanout
        self.task: Any = None  # ClusterShell's Task (imported when a run starts)
        self.workers: list[Any] = []
        self.cut = False  # agents were still running at end_at() and were stopped
        self.abandoned = False  # the launcher's loop did not end: given up, agents left behind
        self._term_at: float | None = None
        self._gate = Gate()

    def hard_end(self, backstop: float) -> float:
        """When the run is given up whatever the workers do: SIGTERM's and SIGKILL's graces
        after the agents were told to end, or the backstop."""
        if self._term_at is not None:
            return min(backstop, self._term_at + 3 * GRACE_S)
        return backstop

    def run(self, commands: dict[str, list[str]], spec_line: bytes, on_line, on_exit, timeout: float,
            end_at=None, tick=None) -> None:  # fmt: skip
        """Every node's command, the spec written first to each one's stdin; `tick()` every
        half second (the run loop's decisions), `end_at()` when to stop waiting."""
        parts = _clustershell()
        backstop = time.monotonic() + timeout + 3 * GRACE_S
        on_line, on_exit = self._gate.wrap(on_line), self._gate.wrap(on_exit)
        tick = self._gate.wrap(tick or (lambda: None))
        target = lambda: self._run_task(parts, commands, spec_line, on_line, on_exit, timeout, end_at, tick)  # noqa: E731
        self.abandoned = run_bounded(target, lambda: self.hard_end(backstop), self._gate)
        self.cut = self.cut or self.abandoned

    def _run_task(self, parts, commands, spec_line, on_line, on_exit, timeout: float, end_at, tick) -> None:
        EventHandler: Any
        EventHandler, task_self, ExecWorker, WorkerSsh = parts

        class Handler(EventHandler):
            def ev_read(self, worker, node, sname, msg):
                text = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
                on_line(str(node), text, sname == "stderr")

            def ev_hup(self, worker, node, rc):
                on_exit(str(node), rc)

            def ev_close(self, worker, timedout):
                for node in worker.iter_keys_timeout() if timedout else ():
                    on_exit(str(node), None)

            def ev_timer(self, timer):
                tick()
                launcher.check_end(end_at)

        launcher = self
        self.task = task = task_self()
        fanout = self.fanout or 64  # ClusterShell's own default
        task.set_info("fanout", fanout if self.waves else max(fanout, len(commands)))
        # every line goes to on_line and nowhere else: ClusterShell would also keep each node's
        # whole output in its message trees, and that grows with pairs, not with nodes
        task.set_default("stdout_msgtree", False)
        task.set_default("stderr_msgtree", False)
        task.set_info("connect_timeout", self.connect_timeout)
        if self.ssh_options:
            task.set_info("ssh_options", self.ssh_options)
        cls = ExecWorker if self.kind == "exec" else WorkerSsh
        if self.topology is not None:  # tree mode: ssh to the gateways, each starts its nodes' agents
            from ClusterShell.NodeSet import NodeSet
            from ClusterShell.Worker.Tree import TreeWorker

            task.load_topology(self.topology)
            cls = lambda node, handler, command, timeout, stderr: TreeWorker(  # noqa: E731
                NodeSet(node), handler, timeout, command=command, stderr=stderr
            )
        handler = Handler()
        for node, cmd in commands.items():
            # `exec`: the agent replaces the shell, so a signal to the process reaches the agent
            w = cls(node, handler=handler, command=clustershell_command(cmd), timeout=timeout, stderr=True)
            if self.line_limit is not None:
                w.rdmacli_line_limit = self.line_limit
            self.workers.append(w)
            w.write(spec_line)  # buffered until the agent's stdin is open; never in argv
            task.schedule(w)
        if end_at is not None:  # does not keep the task alive once every agent has exited
            task.timer(0.5, handler, interval=0.5, autoclose=True)
        task.run(timeout=timeout + GRACE_S)

    def _running(self) -> list:
        """The agent processes (ssh: their ssh clients) still running."""
        return [
            popen
            for w in self.workers
            for client in getattr(w, "_clients", [])
            if (popen := getattr(client, "popen", None)) is not None and popen.poll() is None
        ]

    def _terminate(self) -> None:
        """SIGTERM to every agent still running: they tear down and exit."""
        for popen in self._running():
            try:
                popen.send_signal(signal.SIGTERM)
            except OSError:
                pass

    def check_end(self, end_at) -> None:
        """In ClusterShell's loop (its timer runs only while a worker is open): past end_at,
        SIGTERM what still runs; GRACE_S later, abort the task (its workers kill what is left)."""
        now = time.monotonic()
        if self._term_at is None:
            if now < end_at():
                return
            # a worker still open past the end: an agent still running, or pipes that another
            # process holds open after the agent exited (both end here)
            self.cut, self._term_at = True, now
            self._terminate()
        elif now >= self._term_at + GRACE_S or not self._running():
            self.task.abort()

    def go(self, text: str) -> None:
        """One line to every agent's stdin (ClusterShell keeps it open)."""
        for w in self.workers:
            w.write(text.encode())

    def stop(self) -> None:
        """SIGTERM to every agent (ssh: to its ssh client; the agent sees its stdin close),
        then, after the grace period, SIGKILL to what is left. Called from the caller's thread
        (a signal): ClusterShell's loop is asked to abort by message, never waited for."""
        if self._term_at is None:
            self._term_at = time.monotonic()
        self._terminate()
        end = time.monotonic() + GRACE_S
        while time.monotonic() < end and self._running():
            time.sleep(0.1)
        for popen in self._running():
            try:
                popen.kill()
            except OSError:
                pass
        self._gate.close()
        if self.task is not None:
            try:
                self.task._abort(kill=False)  # ClusterShell's thread-safe abort: a message to its loop
            except (OSError, KeyError, AttributeError):
                # its loop ended between ClusterShell's check of the port and the write to it
                # (EnginePort.msg: the queue gone, the stream deleted, the fd closed): nothing
                # is left to abort
                pass


LABEL = re.compile(r"\s*(\d+): ?(.*)", re.S)


class SrunLauncher:
    """One srun step, one task per node: each agent takes its rank from SLURM_PROCID. srun's
    stdout interleaves whole lines of all tasks, each labelled with its task (--label): that
    label, not what a line claims, says whose it is."""

    def __init__(self, *, srun_args: str | None = None):
        self.srun_args = srun_args
        self.proc: subprocess.Popen[bytes] | None = None
        self._writes: Any = None  # what goes to srun's stdin, in order (go): a SimpleQueue
        self.cut = False
        self.abandoned = False

    def command(self, nodes: str, n: int, agent_cmd: list[str]) -> list[str]:
        placement = (
            shlex.split(self.srun_args)
            if self.srun_args is not None
            else [f"--nodelist={nodes}", f"--nodes={n}", "--ntasks-per-node=1"]
        )
        fixed = ["srun", f"--ntasks={n}", "--kill-on-bad-exit=0", "--unbuffered", "--input=all", "--label"]
        return [*fixed, *placement, *agent_cmd]

    def run(self, cmd: list[str], names: list[str], spec_line: bytes, on_line, on_exit, timeout: float,
            end_at=None, tick=None) -> None:  # fmt: skip
        try:
            self.proc = proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.PIPE,  # the go line (srun --input=all)
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise EnvironmentProblem(
                "srun is not installed here", hint="run inside a Slurm allocation, or use --launcher ssh"
            ) from exc
        self.go(spec_line)  # srun --input=all: every task's stdin, first
        sel = selectors.DefaultSelector()
        for stream, is_err in ((proc.stdout, False), (proc.stderr, True)):
            assert stream is not None  # PIPE
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, is_err)
        splitters = {False: LineSplitter(), True: LineSplitter()}
        backstop = time.monotonic() + timeout + GRACE_S
        end = lambda: min(backstop, end_at() if end_at is not None else backstop)  # noqa: E731
        open_streams = 2
        while open_streams and time.monotonic() < end():
            if tick is not None:
                tick()
            for key, _ in sel.select(min(0.5, max(end() - time.monotonic(), 0))):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                splitter = splitters[key.data]
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                lines = splitter.feed(data) if data else splitter.flush()
                for line in lines:
                    on_line(*self.sender(line.decode(errors="replace"), names), key.data)
        sel.close()
        if proc.poll() is None:
            self.cut = True
            self.stop()
        rc: int | None
        try:
            rc = proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:  # srun outlived SIGKILL: left behind, said so
            self.abandoned = self.cut = True
            rc = None
        for node in names:
            on_exit(node, rc)

    @staticmethod
    def sender(line: str, names: list[str]) -> tuple[str | None, str]:
        """(the node of the task that printed a line, the line without its label)."""
        m = LABEL.match(line)
        if m is None or int(m.group(1)) >= len(names):
            return None, line  # srun's own words: nobody's record
        return names[int(m.group(1))], m.group(2)

    def go(self, text) -> None:
        """srun --input=all copies its stdin to every task. Written by a thread of its own, in
        order: a spec of megabytes fills the pipe until srun reads, and nothing here may wait
        on srun."""
        if self.proc is None or self.proc.stdin is None:
            return
        if self._writes is None:
            import queue

            self._writes = queue.SimpleQueue()
            threading.Thread(target=self._writer, name="srun-stdin", daemon=True).start()
        self._writes.put(text.encode() if isinstance(text, str) else text)

    def _writer(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None  # go() starts it only then
        stdin = self.proc.stdin
        while True:
            data = self._writes.get()
            try:
                stdin.write(data)
                stdin.flush()
            except (OSError, ValueError):  # srun already gone: its agents start at --start-at
                return

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)  # srun forwards it to every task
            self.proc.wait(timeout=GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
