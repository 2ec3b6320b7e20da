/* One connection of the native active side (cmrun.c runs its lifecycle): the CQ it shares with the
 * other connections on its device, its QP and memory, the exchange's posts and completions
 * (protocols/cmatose.py's client and bare.py's, counted as they count), and its teardown. The
 * queues follow engine/conn.py: a window of work requests recycled, sends in chains whose last
 * is signaled and whose completion counts the chain (a wr_id is the connection's index, then
 * the chain's length: 0 for a receive). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cmrun.h"

#define CHAIN 64 /* work requests a post, at most */

static struct cm_priv *priv_of(struct rdmacli_cm_plan *p)
{
    return p->priv;
}

static struct cm_device *device_of(struct rdmacli_cm_plan *p, struct ibv_context *verbs)
{
    struct cm_priv *v = priv_of(p);
    struct cm_device *d;

    for (int i = 0; i < v->ndev; i++)
        if (v->devs[i].verbs == verbs)
            return &v->devs[i];
    if (v->ndev == CM_MAX_DEVICES)
        return NULL;
    d = &v->devs[v->ndev];
    memset(d, 0, sizeof(*d));
    d->verbs = verbs;
    d->comp = ibv_create_comp_channel(verbs);
    if (!d->comp)
        return NULL;
    /* read until it has nothing more (a turn never blocks in ibv_get_cq_event) */
    fcntl(d->comp->fd, F_SETFL, fcntl(d->comp->fd, F_GETFL) | O_NONBLOCK);
    v->ndev++;
    v->new_device = 1;
    return d;
}

struct cm_cq *cm_cq_of(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    return c->cq;
}

/* A CQ of c's device with `n` entries free: a shared one, or a new one (engine/cqpool.py) */
static struct cm_cq *acquire(struct rdmacli_cm_plan *p, struct cm_device *d, uint32_t n, int *err)
{
    struct cm_cq *q;
    uint32_t cap;

    for (int i = 0; i < d->ncq; i++)
        if (d->cqs[i].cq && d->cqs[i].cap - d->cqs[i].used >= n) {
            d->cqs[i].used += n;
            return &d->cqs[i];
        }
    if (d->ncq == CM_MAX_CQS) {
        *err = ENOSPC;
        return NULL;
    }
    /* cqpool.CAPACITY, or what the run's connections can want of it (events' 64 connections
     * want 128 entries: a CQ of 4096 was most of the first connection's "create qp") */
    cap = n * (p->connections ? p->connections : 1);
    cap = cap < 4096 ? cap : 4096;
    cap = n > cap ? n : cap;
    if (cap > (uint32_t)d->attr.max_cqe)
        cap = n > (uint32_t)d->attr.max_cqe ? n : (uint32_t)d->attr.max_cqe;
    q = &d->cqs[d->ncq];
    memset(q, 0, sizeof(*q));
    q->cq = ibv_create_cq(d->verbs, (int)cap, NULL, d->comp, 0);
    if (!q->cq) {
        *err = errno ? errno : ENOMEM;
        return NULL;
    }
    if (ibv_req_notify_cq(q->cq, 0)) {
        *err = errno ? errno : EIO;
        ibv_destroy_cq(q->cq);
        q->cq = NULL;
        return NULL;
    }
    d->ncq++;
    q->cap = cap;
    q->used = n;
    return q;
}

static int post_recvs(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    struct ibv_recv_wr wr[CHAIN], *bad;
    struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = c->size,
                          .lkey = ((struct ibv_mr *)c->mr)->lkey};
    uint32_t due = c->count - c->recvs_posted, room = c->window - (c->recvs_posted - c->received);
    uint32_t n = due < room ? due : room;

    while (n > 0) {
        uint32_t k = n < CHAIN ? n : CHAIN;

        for (uint32_t i = 0; i < k; i++) {
            wr[i] = (struct ibv_recv_wr){.wr_id = (uint64_t)c->index << 32, .sg_list = &sge,
                                         .num_sge = 1, .next = i + 1 < k ? &wr[i + 1] : NULL};
        }
        int rc = ibv_post_recv(((struct rdma_cm_id *)c->id)->qp, wr, &bad);
        if (rc) {
            cm_fail_call(p, c, RDMACLI_CALL_POST_RECV, rc);
            return -1;
        }
        c->recvs_posted += k;
        n -= k;
    }
    return 0;
}

int cm_post_sends(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    struct ibv_send_wr wr[CHAIN], *bad;
    struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = c->size,
                          .lkey = ((struct ibv_mr *)c->mr)->lkey};
    uint32_t due = c->count - c->sends_posted, room = c->window - (c->sends_posted - c->sent);
    uint32_t n = due < room ? due : room;

    while (n > 0) {
        uint32_t k = n < CHAIN ? n : CHAIN;

        for (uint32_t i = 0; i < k; i++) {
            wr[i] = (struct ibv_send_wr){.wr_id = ((uint64_t)c->index << 32) | k, .sg_list = &sge,
                                         .num_sge = 1, .opcode = IBV_WR_SEND,
                                         .send_flags = i + 1 == k ? IBV_SEND_SIGNALED : 0,
                                         .next = i + 1 < k ? &wr[i + 1] : NULL};
        }
        int rc = ibv_post_send(((struct rdma_cm_id *)c->id)->qp, wr, &bad);
        if (rc) {
            cm_fail_call(p, c, RDMACLI_CALL_POST_SEND, rc);
            return -1;
        }
        c->sends_posted += k;
        n -= k;
    }
    return 0;
}

uint32_t cm_outstanding(const struct rdmacli_cm_plan *p, const struct rdmacli_cm_conn *c)
{
    return c->sends_posted == c->count ? c->sends_posted - c->sent : 0;
}

/* The protocol's setup (cmatose.py _Exchange.setup, bare.py): QP, memory, receives posted. The
 * window as Connection.window: the count, within MAX_WINDOW and the device's limits. */
int cm_setup(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    struct rdma_cm_id *id = c->id;
    struct cm_device *d = device_of(p, id->verbs);
    struct ibv_qp_init_attr attr;
    struct cm_cq *q;
    uint32_t depth;
    int err = 0;

    if (!d) {
        cm_fail_call(p, c, RDMACLI_CALL_CREATE_CQ, errno ? errno : ENOSPC);
        return -1;
    }
    if (!d->queried) {
        if (ibv_query_device(d->verbs, &d->attr)) {
            cm_fail_call(p, c, RDMACLI_CALL_QUERY_DEVICE, errno ? errno : EIO);
            return -1;
        }
        d->queried = 1;
    }
    c->max_qp_wr = (uint32_t)d->attr.max_qp_wr;
    c->max_cqe = (uint32_t)d->attr.max_cqe;
    if (p->exchange == RDMACLI_EX_CMATOSE) {
        depth = c->count < p->max_window ? c->count : p->max_window;
        depth = depth ? depth : 1;
        if (depth > c->max_qp_wr)
            depth = c->max_qp_wr;
        if (depth > (c->max_cqe / 2 ? c->max_cqe / 2 : 1))
            depth = c->max_cqe / 2 ? c->max_cqe / 2 : 1;
    } else {
        depth = 1;
    }
    c->window = depth;
    q = acquire(p, d, 2 * depth, &err);
    if (!q) {
        cm_fail_call(p, c, RDMACLI_CALL_CREATE_CQ, err);
        return -1;
    }
    c->cq = q;
    c->cq_slots = 2 * depth;
    memset(&attr, 0, sizeof(attr));
    attr.send_cq = attr.recv_cq = q->cq;
    attr.qp_type = IBV_QPT_RC;
    attr.cap.max_send_wr = attr.cap.max_recv_wr = depth;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, id->pd, &attr)) {
        cm_fail_call(p, c, RDMACLI_CALL_CREATE_QP, errno ? errno : EIO);
        return -1;
    }
    if (p->exchange != RDMACLI_EX_CMATOSE)
        return 0;
    c->buf = calloc(1, c->size ? c->size : 1);
    if (!c->buf) {
        cm_fail_call(p, c, RDMACLI_CALL_REG_MR, ENOMEM);
        return -1;
    }
    c->mr = ibv_reg_mr(id->pd, c->buf, c->size ? c->size : 1, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr) {
        cm_fail_call(p, c, RDMACLI_CALL_REG_MR, errno ? errno : ENOMEM);
        return -1;
    }
    return post_recvs(p, c);
}

/* A successful completion, counted as cmatose.py's count_wc and its client's on_wc (the echo
 * starts once every message of the server has arrived) or its server's (the end once all is
 * sent and received). */
static void count_wc(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct ibv_wc *wc)
{
    uint32_t n = (uint32_t)(wc->wr_id & 0xffffffffu);

    if (p->exchange != RDMACLI_EX_CMATOSE)
        return;
    if (n == 0) {
        c->received++;
        c->bytes_received += wc->byte_len;
        if (c->recvs_posted < c->count && post_recvs(p, c))
            return;
        if (c->received == c->count && !p->listen_id)
            cm_post_sends(p, c); /* the client echoes once all has arrived */
    } else {
        c->sent += n;
        c->bytes_sent += (uint64_t)n * c->size;
        if (c->sends_posted < c->count && cm_post_sends(p, c))
            return;
    }
    if (p->listen_id)
        cm_served(p, c);
}

static int finished(const struct rdmacli_cm_conn *c)
{
    return c->state == RDMACLI_CS_DONE || c->state == RDMACLI_CS_FAILED;
}

/* Flow.on_wc: in a settle the evidence is counted and judged; a failed completion (a flush
 * excepted: its cause is said on its own) fails its connection */
static void on_wc(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct ibv_wc *wc)
{
    if (finished(c))
        return;
    if (c->phase == RDMACLI_PH_SETTLE) {
        if (wc->status == IBV_WC_SUCCESS)
            count_wc(p, c, wc);
        if (!finished(c) && (wc->status != IBV_WC_SUCCESS || cm_outstanding(p, c) == 0))
            cm_judge_disconnect(p, c, 0);
        return;
    }
    if (wc->status == IBV_WC_SUCCESS) {
        cm_progress(p, c);
        count_wc(p, c, wc);
    } else if (wc->status != IBV_WC_WR_FLUSH_ERR) {
        c->wc_status = wc->status;
        c->wc_opcode = wc->opcode;
        cm_fail(p, c, RDMACLI_CF_WC);
    }
}

int cm_drain(struct rdmacli_cm_plan *p, struct cm_cq *q, int batches)
{
    struct ibv_wc wc[CM_POLL_BATCH];

    while (batches-- > 0) {
        int n = ibv_poll_cq(q->cq, CM_POLL_BATCH, wc);

        if (n < 0)
            return 1; /* a CQ that cannot be polled: nothing more comes of it */
        if (n == 0)
            return 1;
        for (int i = 0; i < n; i++) {
            uint64_t index = wc[i].wr_id >> 32;

            if (index < p->connections && p->conns[index].cq == q)
                on_wc(p, &p->conns[index], &wc[i]);
        }
    }
    return 0;
}

/* Connection.teardown: disconnect, destroy the QP, its memory, give the CQ's entries back,
 * destroy the id; the QP's and the id's times are cmtime's "destroy qp" and "destroy id" */
void cm_teardown(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int id_too)
{
    struct rdma_cm_id *id = c->id;
    uint64_t t;

    if (!id)
        return;
    if (c->torn_down)
        goto destroy_id; /* its QP went in an earlier pass (lockstep) */
    c->torn_down = 1;
    if (c->connected && !c->disconnect_sent) {
        c->disconnect_sent = 1;
        rdma_disconnect(id);
    }
    if (id->qp) {
        t = cm_now();
        rdma_destroy_qp(id);
        cm_log_step(p, c, RDMACLI_ST_DESTROY_QP, t, cm_now(), 0);
    }
    if (c->mr)
        ibv_dereg_mr(c->mr);
    c->mr = NULL;
    free(c->buf);
    c->buf = NULL;
    if (c->cq) {
        struct cm_cq *q = c->cq;

        q->used -= c->cq_slots;
        c->cq = NULL;
    }
destroy_id:
    if (!id_too)
        return;
    t = cm_now();
    rdma_destroy_id(id);
    cm_log_step(p, c, RDMACLI_ST_DESTROY_ID, t, cm_now(), 0);
    c->id = NULL;
}

void cm_release_devices(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = priv_of(p);

    if (!v)
        return;
    for (int i = 0; i < v->ndev; i++) {
        struct cm_device *d = &v->devs[i];

        for (int k = 0; k < d->ncq; k++)
            if (d->cqs[k].cq)
                ibv_destroy_cq(d->cqs[k].cq);
        if (d->comp)
            ibv_destroy_comp_channel(d->comp);
    }
    free(v->held);
    free(v);
    p->priv = NULL;
}
