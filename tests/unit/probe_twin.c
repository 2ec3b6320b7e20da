/* probe.c with its verbs and its clock replaced by a script (test_probe_parity.py): the native
 * probe loop, built as it ships, given the completions, the clock and the failures a test chooses,
 * and every send, AH and receive it makes recorded. The Python loop (rdmacli/probe/datagrams.py)
 * is given the same through its own fakes, and the two must come to the same figures.
 *
 * The verbs probe.c calls are static inlines of <infiniband/verbs.h> (ibv_poll_cq, ibv_post_send,
 * ibv_post_recv) or library calls (ibv_create_ah_from_wc, ibv_destroy_ah): the header is read
 * first, then their names are redefined, then probe.c itself is included, so only its calls are
 * the twin's. */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <string.h>

#include "datapath.h"
#include "probe_twin.h"

struct twin twin;

static int twin_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int k = 0;

    if (twin.poll_error)
        return -1;
    for (; k < n && twin.polled < twin.nwc; k++, twin.polled++) {
        const struct twin_wc *w = &twin.wc[twin.polled];

        memset(&wc[k], 0, sizeof(wc[k]));
        wc[k].wr_id = w->wr_id;
        wc[k].status = (enum ibv_wc_status)w->status;
        wc[k].opcode = (enum ibv_wc_opcode)w->opcode;
        wc[k].byte_len = w->byte_len;
        wc[k].src_qp = w->src_qp;
        wc[k].wc_flags = w->wc_flags;
        wc[k].slid = (uint16_t)w->slid;
    }
    return k;
}

static int twin_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct twin_send *s;

    if (twin.send_fails > 0) {
        twin.send_fails--;
        *bad = wr;
        return 12; /* ENOMEM: the send queue is full */
    }
    if (twin.nsent >= TWIN_SENDS)
        return 12;
    s = &twin.sent[twin.nsent++];
    s->wr_id = wr->wr_id;
    s->ah = (uint64_t)(uintptr_t)wr->wr.ud.ah;
    s->qpn = wr->wr.ud.remote_qpn;
    s->qkey = wr->wr.ud.remote_qkey;
    s->length = wr->sg_list[0].length;
    memcpy(s->payload, (const void *)(uintptr_t)wr->sg_list[0].addr, RDMACLI_PROBE_PAYLOAD);
    return 0;
}

static int twin_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    for (; wr != NULL; wr = wr->next)
        if (twin.nreposted < TWIN_WCS)
            twin.reposted[twin.nreposted++] = wr->wr_id;
    return 0;
}

static struct ibv_ah *twin_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                             uint8_t port_num)
{
    if (twin.nahs >= TWIN_AHS)
        return NULL;
    twin.ah_qpn[twin.nahs] = wc->src_qp;
    return (struct ibv_ah *)(uintptr_t)(TWIN_AH_BASE + 16 * (uint64_t)twin.nahs++);
}

static int twin_destroy_ah(struct ibv_ah *ah)
{
    if (twin.ndestroyed < TWIN_AHS)
        twin.destroyed[twin.ndestroyed++] = (uint64_t)(uintptr_t)ah;
    return 0;
}

static uint64_t twin_now_ns(void)
{
    return twin.now_ns;
}

#define ibv_poll_cq twin_poll_cq
#define ibv_post_send twin_post_send
#define ibv_post_recv twin_post_recv
#define ibv_create_ah_from_wc twin_create_ah_from_wc
#define ibv_destroy_ah twin_destroy_ah
#define rdmacli_now_ns twin_now_ns
#include "probe.c"
