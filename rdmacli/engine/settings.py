"""What a caller sets for a flow: its deadlines (Timeouts, named in the caller's words by
DeadlineWords) and the connection options (Options). Plain records, checked as they are made: the
library refuses what the CLI refuses."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma import constants as C

# how long a disconnected connection waits for its outstanding completions (lifecycle.SETTLE):
# an ACK overtaken by the DREQ comes in milliseconds; one that does not come by then never will
# (the peer's QP is gone), and the protocol judges what is known
SETTLE_S = 3.0


@dataclass(frozen=True)
class DeadlineWords:
    """How messages name the deadlines: by what the caller calls them (a command's options, the
    mesh's slot). The engine's own are neutral; the CLI's are cli/options.CLI_WORDS."""

    overall: str = "the run's deadline"
    wait: str = "a wait of {s:g} s"
    more_time: str = "a longer deadline"  # advice: how to give the run more time
    wait_longer: str = "a longer wait"  # advice: how to wait longer for a peer a person starts
    # set: a connection still running at the overall deadline is an overrun (Cause.OVERRUN), said
    # with the step it was in and this advice (the mesh: a pair at the end of its slot)
    overrun: str | None = None


@dataclass
class Timeouts:
    resolve_ms: int = 2000  # handed to rdma_resolve_addr/route, as the C tools do
    connect_s: float = 10.0  # connect/accept until ESTABLISHED, and disconnect
    idle_s: float = 10.0  # data phase: longest time without progress
    overall_s: float | None = None  # the whole run
    wait_s: float | None = None  # a server's or receiver's wait for its first peer (a person)
    words: DeadlineWords = DeadlineWords()  # how messages name these limits: the caller's words

    def __post_init__(self) -> None:
        """The library refuses what the CLI refuses: a NaN deadline never fires, an infinite or
        negative one is no deadline (every wait has one)."""
        for name in ("resolve_ms", "connect_s", "idle_s", "overall_s", "wait_s"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
            ):
                raise RdmacliError(
                    f"timeout {name}={value!r}: not a finite number of seconds >= 0", cause=Cause.USAGE
                )

    def limit_s(self, limit: str | None) -> float | None:
        """The seconds a lifecycle phase's limit (lifecycle.Bounds.limit) stands for."""
        if limit == "idle":  # every completion's phase: first, and no table built per call
            return self.idle_s
        if limit == "connect":
            return self.connect_s
        if limit == "resolve":
            return self.resolve_ms / 1000 + 2  # rdma_resolve_*'s own timeout, and a margin
        if limit == "wait":
            return self.wait_s or 0  # a wait for a person: none unless --wait
        if limit == "settle":
            return min(self.connect_s, SETTLE_S)
        return None

    def waited(self) -> str:
        return self.words.wait.format(s=self.wait_s or 0)


@dataclass
class Options:
    ps: int = C.PS_TCP
    tos: int | None = None
    ack_timeout: int | None = None
    busy_poll: bool = False
    # a server's bounds on what its clients may take at once (None: none): connections open,
    # and memory registered (pinned) for them; a request beyond either is rejected with words
    max_open: int | None = None
    max_pinned: int | None = None
