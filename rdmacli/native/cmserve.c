/* The passive side of rdma_cm(7) in C: engine/server.py's ServerFlow for cmatose's exchange,
 * its connections run by the same rows (lifecycle.PASSIVE), handlers and loop as the client's
 * (cmflow.c, cmrun.c). The listener stays Python's, and so does every decision a request needs
 * (the server's policy, the client's hello, the words of a refusal): a CONNECT_REQUEST takes the
 * next slot and ends the slice; Python decides each slot between slices and C carries the
 * decisions out, in order, at its next call; a slot that ends is listed (plan.ended) for Python
 * to read before it is retired (rdmacli_cm_retire). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmrun.h"

/* ServerFlow.on_listen_event up to its decision: the request's id, addresses and device, kept
 * in the next slot (read_events never reads one without a slot free) */
static void on_request(struct rdmacli_cm_plan *p, const struct rdmacli_cm_event *ev)
{
    struct rdma_cm_id *id = (struct rdma_cm_id *)(uintptr_t)ev->id;
    struct rdmacli_cm_conn *c = &p->conns[p->started];
    struct sockaddr *sa;

    memset(c, 0, sizeof(*c));
    c->index = p->started;
    c->id = id;
    c->phase = RDMACLI_PH_ACCEPT; /* no deadline until it is accepted (Python decides first) */
    c->request_ns = ev->t_ns;
    c->request_data_len = ev->private_data_len < sizeof(c->request_data) ? ev->private_data_len
                                                                         : sizeof(c->request_data);
    memcpy(c->request_data, ev->private_data, c->request_data_len);
    id->context = (void *)(uintptr_t)(c->index + 1); /* its events find their slot (conn_of) */
    if ((sa = rdma_get_local_addr(id)))
        memcpy(c->local, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    if ((sa = rdma_get_peer_addr(id)))
        memcpy(c->remote, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    if (id->verbs) {
        snprintf(c->device, sizeof(c->device), "%s", ibv_get_device_name(id->verbs->device));
        c->port_num = id->port_num;
    }
    p->started++;
    p->look = 1;
}

/* what ServerFlow._accept turns away as the device's bound, not the client's doing (OUT_OF_ROOM);
 * a registration's ENOMEM is the memlock limit's, said as a failure (conn.reg) */
static int out_of_room(const struct rdmacli_cm_conn *c)
{
    return c->fail_kind == RDMACLI_CF_CALL && c->fail_call != RDMACLI_CALL_REG_MR &&
           (c->fail_err == ENOMEM || c->fail_err == ENOSPC || c->fail_err == EAGAIN);
}

/* ServerFlow._accept: the QP ("create qp", a step inside ACCEPT), then rdma_accept with
 * CmatoseServer.accept_param's parameters (NULL within the window, as ucmatose). 1: the slot
 * went back to Python undecided (no room). */
static int accept_one(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    struct rdma_conn_param param = {.responder_resources = 1, .initiator_depth = 1,
                                    .retry_count = 7, .rnr_retry_count = 7};
    struct cm_priv *v = p->priv;
    int failed;

    cm_enter(p, c, RDMACLI_PH_ACCEPT);
    v->trial = 1;
    failed = cm_setup_qp(p, c) != 0;
    v->trial = 0;
    if (failed && out_of_room(c)) {
        c->no_room = 1;
        c->no_room_call = c->fail_call;
        c->no_room_err = c->fail_err;
        c->fail_kind = c->fail_call = c->fail_err = 0;
        c->state = RDMACLI_CS_PENDING;
        c->decision = RDMACLI_DECIDE_NONE;
        c->step_t0[RDMACLI_ST_CREATE_QP] = 0;
        cm_teardown(p, c, 0);
        c->torn_down = 0;
        c->phase = RDMACLI_PH_ACCEPT;
        c->deadline_ns = 0;
        p->look = 1;
        return 1;
    }
    if (failed) {
        c->state = RDMACLI_CS_PENDING;
        cm_set_state(p, c, RDMACLI_CS_FAILED); /* counted and listed now the trial is over */
        return 0;
    }
    if (rdma_accept(c->id, c->window < c->count ? &param : NULL))
        cm_fail_call(p, c, RDMACLI_CALL_ACCEPT, errno ? errno : EIO);
    return 0;
}

/* ServerFlow.reject: the reason said to the client; the request's id goes (its own timeout may
 * have taken the request already: nothing to say then) */
static void reject_one(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    uint64_t t;

    rdma_reject(c->id, c->reason, (uint8_t)(c->reason_len < sizeof(c->reason) ? c->reason_len : sizeof(c->reason)));
    t = cm_now();
    rdma_destroy_id(c->id);
    cm_log_step(p, c, RDMACLI_ST_DESTROY_ID, t, cm_now(), 0);
    c->id = NULL;
    c->state = RDMACLI_CS_REJECTED;
    p->finished++; /* Python has its record already: not listed */
}

/* Python's decisions since the last call, in the requests' order, until one it has not made */
static void act(struct rdmacli_cm_plan *p)
{
    while (p->acted < p->started) {
        struct rdmacli_cm_conn *c = &p->conns[p->acted];
        int d = __atomic_load_n(&c->decision, __ATOMIC_ACQUIRE);

        if (d == RDMACLI_DECIDE_ACCEPT) {
            if (accept_one(p, c))
                return;
        } else if (d == RDMACLI_DECIDE_REJECT) {
            reject_one(p, c);
        } else {
            return;
        }
        p->acted++;
    }
}

/* rdmacli_cm_run's loop for the passive side: it returns whenever Python has to look (a request
 * to decide, a connection ended, the slots full, the listener's device gone) as well as at the
 * slice's end, a stop, a signal or the deadline Python set (the first client's wait, --timeout) */
int rdmacli_cm_serve(struct rdmacli_cm_plan *p, uint64_t slice_end_ns, int settle_only)
{
    int rc;

    if (!p->priv && !(p->priv = calloc(1, sizeof(struct cm_priv))))
        return RDMACLI_BAD_ARGS;
    if (!p->listen_id || !p->ended)
        return RDMACLI_BAD_ARGS;
    ((struct cm_priv *)p->priv)->on_request = on_request;
    p->look = 0;
    act(p);
    if (settle_only) {
        cm_settle(p);
        return RDMACLI_OK;
    }
    for (;;) {
        if (p->look || p->listener_event)
            return RDMACLI_SLICE;
        if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED))
            return RDMACLI_SIGNAL;
        if ((rc = cm_pass(p, slice_end_ns)) >= 0)
            return rc;
    }
}

/* Python has read the slot's record: its QP, memory and id go now (a persistent server's
 * resources do not wait for its end) */
void rdmacli_cm_retire(struct rdmacli_cm_plan *p, uint32_t slot)
{
    if (slot < p->started)
        cm_teardown(p, &p->conns[slot], 1);
}
