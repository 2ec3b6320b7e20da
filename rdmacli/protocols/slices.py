"""What the protocols share about native slices (rdmacli.native): a loop in C runs for a slice,
then the engine's loop turns (CM events, deadlines, signals) before the next one."""

from __future__ import annotations

from rdmacli import native as N
from rdmacli.errors import Cause, RdmacliError
from rdmacli.rdma import constants as C
from rdmacli.rdma.cm import RdmaCallError
from rdmacli.rdma.verbs import WorkCompletion


def later(conn, fn) -> None:
    """fn(conn) on the engine loop's next turn, guarded as a completion handler is, and only
    while the connection lives: a disconnect handled in between may have ended it and destroyed
    its QP and CQ, which a native loop must never touch (the lab saw a responder crash so)."""

    def turn() -> None:
        if conn.finished or conn.torn_down or not conn.cm.has_qp:
            return
        conn.flow.guarded(conn, fn)

    conn.flow.loop.call_later(0, turn)


def go_on(conn, sl: N.Slice) -> bool:
    """A slice's end said to the engine: a failed completion as the engine judges one (a flush:
    the QP's own reason comes as a CM event), a failed call as an error. True: go on."""
    if sl.status == N.WC_ERROR:
        wc = WorkCompletion(sl.wc_wr_id, sl.err, sl.wc_opcode, 0, None, conn.cm.qp_num, 0)
        conn.flow.on_wc(conn, wc)
        return False
    if sl.status == N.POST_ERROR:
        raise RdmaCallError("ibv_post_send/ibv_post_recv (native)", sl.err)
    if sl.status == N.FOREIGN and sl.wc_opcode & C.WC_RECV and sl.err in (conn.cm.qp_num, 0):
        raise RdmacliError(  # a receive on this QP that no exchange asked for: the peer sent it
            f"the peer sent a message nobody asked for (a receive completion, opcode {sl.wc_opcode}, "
            f"outside the exchange) [{conn.flow.where(conn)}]",
            hint="the peer does not keep the protocol's turns (another tool, or another version)",
            cause=Cause.PEER_PROTOCOL,
        )
    if sl.status not in (N.OK, *N.HANDED_BACK):
        which = (
            f" (QP {sl.err:#x}, this one's {conn.cm.qp_num:#x}; opcode {sl.wc_opcode}, wr_id {sl.wc_wr_id})"
            if sl.status == N.FOREIGN
            else ""
        )
        raise RdmacliError(
            f"the native data path stopped: {N.STATUS_WORDS.get(sl.status, sl.status)}{which} "
            f"[{conn.flow.where(conn)}]",
            hint=f"a bug in rdmacli: {N.ENV}=python measures with the Python loop meanwhile",
            cause=Cause.INTERNAL,
        )
    return True
