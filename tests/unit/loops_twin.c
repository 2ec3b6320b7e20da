/* lat.c and bw.c with their verbs and clocks replaced by a scripted peer (test_loop_parity.py):
 * the native loops, built as they ship, facing a peer whose answers land when the test says; the
 * Python loops (protocols/lat.py, protocols/bw.py) face the same peer in Python, and the two must
 * come to the same figures. As probe_twin.c does for probe.c: the verbs header first, then the
 * names the loops call redefined, then the loops themselves included. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <string.h>

#include "datapath.h"
#include "loops_twin.h"

struct loops_twin lt;

static void lt_schedule(uint64_t at, uint64_t wr_id, uint32_t opcode, uint64_t hold)
{
    struct lt_event *e;

    if (lt.nev >= LT_EVENTS)
        return;
    e = &lt.ev[lt.nev++];
    e->at = at;
    e->wr_id = wr_id;
    e->opcode = opcode;
    e->status = 0;
    e->hold = hold;
}

static void lt_put_be64(uint64_t addr, uint64_t v)
{
    unsigned char *b = (unsigned char *)(uintptr_t)addr;
    int i;

    for (i = 7; i >= 0; i--, v >>= 8)
        b[i] = (unsigned char)(v & 0xff);
}

/* The earliest due event first (ties: as scheduled), at most n; the clock jumps to the next
 * event when none is due, or moves idle_step_ns when none is scheduled. */
static int lt_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int k = 0;
    uint32_t i, best;

    lt.polls++;
    for (;;) {
        uint64_t next = UINT64_MAX;

        for (i = 0; i < lt.nev; i++)
            if (lt.ev[i].at < next)
                next = lt.ev[i].at;
        if (next == UINT64_MAX) {
            if (k == 0)
                lt.now_ns += lt.idle_step_ns;
            return k;
        }
        if (next > lt.now_ns) {
            if (k > 0)
                return k;
            lt.now_ns = next;
        }
        if (k >= n)
            return k;
        best = lt.nev;
        for (i = 0; i < lt.nev; i++)
            if (lt.ev[i].at == next) {
                best = i;
                break;
            }
        memset(&wc[k], 0, sizeof(wc[k]));
        wc[k].wr_id = lt.ev[best].wr_id;
        wc[k].opcode = (enum ibv_wc_opcode)lt.ev[best].opcode;
        wc[k].status = (enum ibv_wc_status)lt.ev[best].status;
        wc[k].qp_num = 1;
        if (lt.ev[best].opcode == IBV_WC_RECV)
            lt_put_be64(lt.recv_addr, lt.ev[best].hold);
        k++;
        memmove(&lt.ev[best], &lt.ev[best + 1], (lt.nev - best - 1) * sizeof(lt.ev[0]));
        lt.nev--;
    }
}

static int lt_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct lt_post *p;
    uint32_t i;

    if (lt.nposts >= LT_POSTS)
        return 12;
    i = lt.nposts;
    p = &lt.posts[lt.nposts++];
    memset(p, 0, sizeof(*p));
    p->at = lt.now_ns;
    p->opcode = wr->opcode;
    p->length = wr->sg_list[0].length;
    p->remote_addr = wr->wr.rdma.remote_addr;
    p->rkey = wr->wr.rdma.rkey;
    for (; wr != NULL; wr = wr->next) {
        p->n++;
        p->wr_id = wr->wr_id;
        if (wr->send_flags & IBV_SEND_SIGNALED)
            p->signaled++;
    }
    if (i < 1024) {
        lt_schedule(lt.now_ns + lt.send_done[i], p->wr_id,
                    p->opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE, 0);
        if (lt.mode == 1)
            lt_schedule(lt.now_ns + lt.rtt[i], lt.recv_wr_id, IBV_WC_RECV, lt.hold[i]);
    }
    return 0;
}

static int lt_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    for (; wr != NULL; wr = wr->next)
        lt.recvs_posted++;
    return 0;
}

/* A QP and a CQ as the loops read them: the QP's number (the completions name it), no channel. */
void *lt_qp(void)
{
    static struct ibv_qp qp;

    qp.qp_num = 1;
    return &qp;
}

void *lt_cq(void)
{
    static struct ibv_cq cq;

    return &cq;
}

static uint64_t lt_now_ns(void)
{
    if (lt.calibrating) /* rdmacli_lat_calibrate spins on the clock: let it pass */
        lt.now_ns += 1000000;
    return lt.now_ns;
}

#define ibv_poll_cq lt_poll_cq
#define ibv_post_send lt_post_send
#define ibv_post_recv lt_post_recv
#define rdmacli_now_ns lt_now_ns
#define __builtin_ia32_rdtsc() lt_now_ns() /* the cycle counter: the same clock, one cycle a ns */
#include "lat.c"
#include "bw.c"
