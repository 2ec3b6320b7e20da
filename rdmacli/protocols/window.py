"""Work requests kept in flight as a recycled window, for the message protocols (cmatose, udaddy,
mckey): any count fits any device, because a queue holds at most `window` requests at once.

Sends go out in chains (one doorbell each), only the last signaled: its completion stands for
the whole chain, whose length rides in its wr_id as SEND + n. A receive's wr_id is below SEND
(cmatose: 0, its one buffer; udaddy: the slot number).
"""

from __future__ import annotations

SEND = 1 << 32


def chain(n: int) -> int:
    """The wr_id of a chain of n sends."""
    return SEND + n


def sends_in(wr_id: int) -> int:
    """How many sends a completion stands for (0: it is a receive's)."""
    return wr_id - SEND if wr_id >= SEND else 0


class Windowed:
    """The counts of a windowed exchange; subclasses set count and window."""

    count: int = 0
    window: int = 1
    received = sent = sends_posted = recvs_posted = 0

    def sends_due(self) -> int:
        """Sends that may be posted now: what is left, within the window."""
        return min(self.count - self.sends_posted, self.window - (self.sends_posted - self.sent))

    def recvs_due(self) -> int:
        return min(self.count - self.recvs_posted, self.window - (self.recvs_posted - self.received))
