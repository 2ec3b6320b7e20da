"""How long this host kept a probe thread from running: the wire, not the host.

A probe phase's round trips and answers are the fabric's only while the threads that send,
answer and resolve get the CPU when they wake. When the host is too busy for that (a job's
processes on every core, a VM's stolen time, the lab's sixteen nodes on two emulated CPUs
beside eight Python starts at once), the replies wait in the receive queue and partners' SIDR
asks go unanswered: the window reads as dead or slow partners that are healthy. The kernel
counts it per thread: the time the thread was runnable and waiting for a CPU
(/proc/thread-self/schedstat's second field, CONFIG_SCHED_INFO, in Debian's kernels)."""

from __future__ import annotations

import time


def run_delay_s() -> float | None:
    """The calling thread's time spent waiting on a run queue so far (s); None where the kernel
    does not say (no schedstat)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class Waited:
    """A span's run-queue wait in the thread that made it (begin at construction, `end()`), and
    the span's own wall time: (waited s, wall s), or None where the kernel does not say."""

    def __init__(self) -> None:
        self.t0, self.w0 = time.monotonic(), run_delay_s()

    def end(self) -> tuple[float, float] | None:
        w1 = run_delay_s()
        if self.w0 is None or w1 is None:
            return None
        return max(w1 - self.w0, 0.0), max(time.monotonic() - self.t0, 1e-9)
