"""Agents' output to lines, never holding more than a line's limit of any one.

A liar (or a broken agent) may print without end and without a newline; the launchers' readers
would hold it whole (ClusterShell keeps a partial line in one buffer and concatenates every chunk
to it). Here a line that grows past records.MAX_LINE is said once, its head and records.OVERLONG
(the intake takes that as its sender's violation), and the rest is skipped as it arrives.
"""

from __future__ import annotations

from rdmacli.mesh.records import MAX_LINE, OVERLONG

KEEP = 24  # of a line past MAX_LINE, kept before records.OVERLONG: srun's label names the sender


class LineSplitter:
    """An agent's output to lines, never holding more than MAX_LINE of one: a line that grows
    past it is said once (its head and OVERLONG) and the rest of it skipped as it arrives, so a
    liar printing 128 MiB without a newline costs the coordinator 64 KiB, not 128 MiB."""

    def __init__(self, limit: int = MAX_LINE):
        self.limit = limit
        self.pending = b""
        self.skipping = False

    def feed(self, data: bytes) -> list[bytes]:
        *lines, tail = (self.pending + data).split(b"\n")
        out = []
        for line in lines:
            if self.skipping:  # the rest of an overlong line, said already
                self.skipping = False
                continue
            if len(line) > self.limit:  # a whole line past the limit, in one chunk: said as one
                out.append(line[:KEEP] + OVERLONG.encode())
                continue
            out.append(line[:-1] if line.endswith(b"\r") else line)
        self.pending = b""
        if self.skipping:
            pass
        elif len(tail) > self.limit:
            out.append(tail[:KEEP] + OVERLONG.encode())
            self.skipping = True
        else:
            self.pending = tail
        return out

    def flush(self) -> list[bytes]:
        """At the end of the stream: what is left without a newline."""
        rest, self.pending = self.pending, b""
        return [rest] if rest and not self.skipping else []


def bounded(client_class):
    """ClusterShell's client (one per node) with its line reader bounded (LineSplitter): its
    own keeps a partial line whole, however long. Its close path flushes `rbuf`, which mirrors
    the splitter's bounded remainder."""

    class Bounded(client_class):
        def _readlines(self, sname):
            splitters = self.__dict__.setdefault("_rdmacli_splitters", {})
            limit = getattr(self.worker, "rdmacli_line_limit", MAX_LINE)  # the launcher's, else ours
            splitter = splitters.setdefault(sname, LineSplitter(limit))
            lines = splitter.feed(self._read(sname))
            self.streams[sname].rbuf = splitter.pending if not splitter.skipping else b""
            yield from lines

    return Bounded
