/* The bandwidth stream of `rdmacli bw` (and the mesh's bw): called once per slice by
 * protocols/bw.py through rdmacli.native. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>

#include "datapath.h"

/* A bandwidth stream: `window` messages kept in flight, posted in chains of one doorbell with
 * only the last signaled (its wr_id says the chain's length), until `limit` are posted or
 * post_until_ns; returns at slice_end_ns (with messages in flight: Python's loop counts their
 * completions into s->completed), when all posted have completed and no more may be posted
 * (return value 1), or when nothing completes for idle_ns with messages in flight. */
int rdmacli_bw_stream(void *qp_, void *cq_, struct rdmacli_bw *s, uint64_t post_until_ns,
                      uint64_t slice_end_ns, uint64_t idle_ns)
{
    struct ibv_qp *qp = qp_;
    struct ibv_send_wr wrs[RDMACLI_MAX_CHAIN], *bad;
    struct ibv_sge sge;
    struct ibv_wc wc[POLL_BATCH];
    uint64_t now, last_progress;
    uint32_t k, i;
    int got, j, rc, posting;

    if (!qp || !cq_ || !s || s->size == 0 || !s->addr || s->window == 0 || s->chain == 0 ||
        s->chain > RDMACLI_MAX_CHAIN || s->completed > s->posted || s->posted > s->limit ||
        (s->opcode != IBV_WR_RDMA_WRITE && s->opcode != IBV_WR_RDMA_READ &&
         s->opcode != IBV_WR_SEND)) {
        if (s)
            s->status = RDMACLI_BAD_ARGS;
        return 0;
    }
    s->status = RDMACLI_OK;
    s->err = 0;
    s->polls = 0;
    sge.addr = s->addr;
    sge.length = s->size;
    sge.lkey = s->lkey;
    memset(wrs, 0, sizeof(wrs));
    for (i = 0; i < RDMACLI_MAX_CHAIN; i++) {
        wrs[i].sg_list = &sge; /* ibv_post_send copies each request before it returns */
        wrs[i].num_sge = 1;
        wrs[i].opcode = s->opcode;
        wrs[i].wr.rdma.remote_addr = s->remote_addr;
        wrs[i].wr.rdma.rkey = s->rkey;
    }
    now = last_progress = rdmacli_now_ns();
    for (;;) {
        posting = now < post_until_ns && s->posted < s->limit;
        while (posting && s->posted - s->completed < s->window) {
            uint64_t room = s->window - (s->posted - s->completed), left = s->limit - s->posted;

            k = (uint32_t)(room < s->chain ? room : s->chain);
            if (left < k)
                k = (uint32_t)left;
            for (i = 0; i < k; i++) {
                wrs[i].next = i + 1 < k ? &wrs[i + 1] : NULL;
                wrs[i].send_flags = i + 1 < k ? 0 : IBV_SEND_SIGNALED;
                wrs[i].wr_id = i + 1 < k ? 0 : RDMACLI_CHAIN_BASE + k;
            }
            bad = NULL;
            rc = ibv_post_send(qp, wrs, &bad);
            if (rc) {
                s->status = RDMACLI_POST_ERROR;
                s->err = rc;
                return 0;
            }
            s->posted += k;
            posting = s->posted < s->limit;
        }
        if (!posting && s->posted == s->completed)
            return 1;
        got = ibv_poll_cq((struct ibv_cq *)cq_, POLL_BATCH, wc);
        s->polls++;
        if (got < 0) {
            s->status = RDMACLI_POLL_ERROR;
            s->err = got;
            return 0;
        }
        for (j = 0; j < got; j++) {
            if (wc[j].qp_num != qp->qp_num) {
                s->status = RDMACLI_FOREIGN;
                return 0;
            }
            if (wc[j].status != IBV_WC_SUCCESS || (wc[j].opcode & IBV_WC_RECV)) {
                /* a failure, or a receive (none is posted for a one-way stream): Python's */
                s->status = wc[j].status != IBV_WC_SUCCESS ? RDMACLI_WC_ERROR : RDMACLI_FOREIGN;
                s->err = wc[j].status;
                s->wc_opcode = wc[j].opcode;
                s->wc_wr_id = wc[j].wr_id;
                return 0;
            }
            if (wc[j].wr_id > RDMACLI_CHAIN_BASE &&
                wc[j].wr_id - RDMACLI_CHAIN_BASE <= s->posted - s->completed)
                s->completed += wc[j].wr_id - RDMACLI_CHAIN_BASE;
            /* else Python's own send (a heartbeat): no news here */
        }
        if (got > 0 || (s->polls & 255) == 0) {
            now = rdmacli_now_ns();
            if (got > 0)
                last_progress = now;
            if (now >= slice_end_ns)
                return 0;
            if (s->posted != s->completed && now - last_progress >= idle_ns) {
                s->status = RDMACLI_DEADLINE;
                return 0;
            }
        }
    }
}
