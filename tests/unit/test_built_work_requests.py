"""verbs.post_send/post_recv build a work request chain once and repost it when the same post
comes again: what reaches the provider is checked through a stand-in for its function pointer
(no RDMA: the WRs are real cffi memory, read back as the provider would)."""

from __future__ import annotations

from types import SimpleNamespace

from rdmacli.rdma import constants as C
from rdmacli.rdma import verbs


class Buffer:
    addr, lkey, length = 0x10000, 0x55, 4096

    def _bounds(self, offset, length):
        assert offset + length <= self.length


def provider(seen: list):
    f = verbs.ffi()

    def post(qp, wrs, bad):
        chain, wr = [], f.cast(f.typeof(wrs).item.cname + " *", wrs)
        while wr != f.NULL:
            sge = wr.sg_list[0] if wr.num_sge else None
            where = int(f.cast("uintptr_t", wr))
            if hasattr(wr, "opcode"):
                rdma = wr.wr.rdma
                chain.append((wr.wr_id, wr.opcode, wr.send_flags, rdma.remote_addr, rdma.rkey,
                              (sge.addr, sge.length, sge.lkey) if sge else None, where))  # fmt: skip
            else:
                chain.append((wr.wr_id, None, None, None, None, (sge.addr, sge.length, sge.lkey), where))
            wr = wr.next
        seen.append(chain)
        return 0

    return SimpleNamespace(context=SimpleNamespace(ops=SimpleNamespace(post_send=post, post_recv=post)))


def test_an_identical_post_reposts_the_same_chain_and_a_different_one_does_not():
    seen: list = []
    qp, mr = provider(seen), Buffer()
    for _ in range(2):
        verbs.post_send(qp, 7, mr, 64, 512, n=3, opcode=C.WR_RDMA_WRITE, remote_addr=0xAB00, rkey=9)
    verbs.post_send(qp, 7, mr, 64, 512, n=3, opcode=C.WR_RDMA_WRITE, remote_addr=0xCD00, rkey=9)
    first, again, other = seen
    assert first == again  # the same memory, the same contents
    assert [w[:6] for w in first] == [
        (7, C.WR_RDMA_WRITE, 0, 0xAB00, 9, (0x10000 + 64, 512, 0x55)),
        (7, C.WR_RDMA_WRITE, 0, 0xAB00, 9, (0x10000 + 64, 512, 0x55)),
        (7, C.WR_RDMA_WRITE, C.SEND_SIGNALED, 0xAB00, 9, (0x10000 + 64, 512, 0x55)),  # the last signals
    ]
    assert [w[3] for w in other] == [0xCD00] * 3 and other[0][6] != first[0][6]


def test_receives_are_reposted_alike_and_the_cache_stays_bounded():
    seen: list = []
    qp, mr = provider(seen), Buffer()
    verbs.post_recv(qp, 1, mr, 0, 256)
    verbs.post_recv(qp, 1, mr, 0, 256)
    assert seen[0] == seen[1] and seen[0][0][5] == (0x10000, 256, 0x55)
    for k in range(verbs.MAX_BUILT + 10):
        verbs.post_recv(qp, k, mr, 0, 8)
    assert len(verbs._PER_THREAD.built) <= verbs.MAX_BUILT


def test_slots_are_posted_in_one_chain_each_its_own_buffer_and_none_outside():
    import pytest

    seen: list = []
    qp, mr = provider(seen), Buffer()
    verbs.post_recv_slots(qp, mr, [3, 0, 31], 128)
    assert len(seen) == 1 and [(w[0], w[5]) for w in seen[0]] == [
        (3, (0x10000 + 3 * 128, 128, 0x55)),
        (0, (0x10000, 128, 0x55)),
        (31, (0x10000 + 31 * 128, 128, 0x55)),
    ]
    verbs.post_recv_slots(qp, mr, [], 128)  # nothing to post: no call
    assert len(seen) == 1
    with pytest.raises(AssertionError):  # slot 32 of 128 bytes lies past the 4096-byte buffer
        verbs.post_recv_slots(qp, mr, [1, 32], 128)


def test_a_chain_of_the_same_shape_on_another_buffer_is_reposted_with_that_buffer():
    """Each connection of a `connect -c N` posts its receives and sends on its own MR: the
    chain is built once for the shape, and every post carries the buffer it is for."""
    seen: list = []
    qp, mine, theirs = provider(seen), Buffer(), Buffer()
    theirs.addr, theirs.lkey = 0x90000, 0x77
    verbs.post_recv(qp, 0, mine, 0, 100, n=4)
    verbs.post_recv(qp, 0, theirs, 0, 100, n=4)
    verbs.post_send(qp, 5, mine, 0, 100, n=2)
    verbs.post_send(qp, 5, theirs, 0, 100, n=2)
    recv_a, recv_b, send_a, send_b = seen
    assert [w[5] for w in recv_a] == [(0x10000, 100, 0x55)] * 4
    assert [w[5] for w in recv_b] == [(0x90000, 100, 0x77)] * 4
    assert [w[5] for w in send_a] == [(0x10000, 100, 0x55)] * 2
    assert [w[5] for w in send_b] == [(0x90000, 100, 0x77)] * 2
    assert recv_a[0][6] == recv_b[0][6] and send_a[0][6] == send_b[0][6]  # one chain per shape


def test_a_post_in_one_thread_keeps_its_buffer_while_another_thread_posts_the_same_shape():
    """The probe runs a thread per rail, and the post runs outside the GIL: a chain's SGE written
    by one thread must not be what another thread's post is reading. Thread A's provider stops
    in the middle of its post while thread B posts the same shape on another buffer; A's provider
    then reads its chain, which must still carry A's buffer."""
    import threading

    inside, b_done = threading.Event(), threading.Event()
    seen_a: list = []
    read_a = provider(seen_a).context.ops.post_recv

    def slow(qp, wrs, bad):
        inside.set()
        assert b_done.wait(10)
        return read_a(qp, wrs, bad)

    qp_a = SimpleNamespace(context=SimpleNamespace(ops=SimpleNamespace(post_recv=slow)))
    qp_b, mine, theirs = provider([]), Buffer(), Buffer()
    theirs.addr, theirs.lkey = 0x90000, 0x77

    def b():
        assert inside.wait(10)
        verbs.post_recv(qp_b, 0, theirs, 0, 100, n=4)
        b_done.set()

    other = threading.Thread(target=b)
    other.start()
    verbs.post_recv(qp_a, 0, mine, 0, 100, n=4)
    other.join(10)
    assert [w[5] for w in seen_a[0]] == [(0x10000, 100, 0x55)] * 4
