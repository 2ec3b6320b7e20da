"""A misbehaving rping client, for tests only: `python evil_rping.py MODE SERVER SOURCE`.

Modes: short (12-byte message), long (32-byte message), huge (advertises 1 MiB), zeroaddr
(advertises address 0), badrkey (a valid buffer with a wrong rkey), silent (connects, says
nothing). It waits until the server ends the connection, and exits 0 when it did (by a
disconnect, or by an error on the QP).
"""

from __future__ import annotations

import sys

from rdmacli.engine.client import ClientFlow
from rdmacli.engine.settings import Timeouts
from rdmacli.protocols import rping
from rdmacli.rdma import addr


class Evil(rping._Rping):
    def __init__(self, mode: str):
        super().__init__(64)
        self.mode = mode
        self.big = None

    def conn_param(self):
        return rping.conn_param()

    def setup(self, conn) -> None:
        super().setup(conn)
        self.big = conn.reg(64, rping.RW_ACCESS)

    def on_established(self, conn) -> None:
        mr = self.rdma_mr
        info = {
            "huge": (mr.addr, mr.rkey, 1 << 20),
            "zeroaddr": (0, mr.rkey, 64),
            "badrkey": (mr.addr, mr.rkey ^ 0x5A5A5A, 64),
        }
        if self.mode in info:
            self.send(conn, rping.pack_info(*info[self.mode]))
        elif self.mode in ("short", "long"):
            n = 12 if self.mode == "short" else 32
            self.big.write(b"x" * n)
            conn.post_send(rping.SEND, self.big, 0, n)

    def on_wc(self, conn, wc) -> None:
        pass

    def on_disconnected(self, conn) -> None:
        conn.finish()  # the server hung up on us: that is what we wanted


def main() -> int:
    mode, server, source = sys.argv[1:4]
    flow = ClientFlow(
        dst=addr.resolve(server, 7174),
        src=addr.resolve(source, 0),
        make_protocol=lambda: Evil(mode),
        timeouts=Timeouts(2000, 10, 30, 60),
    )
    try:
        flow.run()
    finally:
        flow.close()
    err = flow.first_error()
    print(f"evil {mode}: {'error ' + err.message if err else 'server disconnected us'}")
    # the server may also end us by breaking the QP (our send then completes in error);
    # only a server that never reacts (our deadline) or never let us in is a failure
    return 1 if err and "work completion failed" not in err.message else 0


if __name__ == "__main__":
    sys.exit(main())
