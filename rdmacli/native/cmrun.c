/* The active side of rdma_cm(7) for many connections, in C: engine/client.py's ClientFlow and
 * engine/flow.py's loop, deadlines and settle, run by the rows of engine/lifecycle.py that Python
 * hands over in the plan (no transition is declared in C: a row names the next phase and one of
 * cmflow.c's handlers). cmtime's steps are stamped at the event's read, as timing.py's. Python
 * prepares the plan, calls rdmacli_cm_run slice by slice (it renders what the log holds, serves
 * signals between slices), reads the records and says them in words; cmconn.c holds a
 * connection's queues and exchange. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmrun.h"

_Static_assert(sizeof(((struct rdmacli_cm_conn *)0)->step_t0) == RDMACLI_CM_STEPS * 8, "steps");
_Static_assert(sizeof(((struct rdmacli_cm_plan *)0)->limit_ns) == RDMACLI_CM_PHASES * 8, "phases");
_Static_assert(sizeof(((struct rdmacli_cm_plan *)0)->steps) / sizeof(struct rdmacli_cm_stepstat) ==
               RDMACLI_CM_STEPS, "step figures");
_Static_assert(sizeof(((struct rdmacli_cm_conn *)0)->local) >= sizeof(struct sockaddr_storage), "sa");

#define SETTLE_TURNS 8

static struct rdmacli_cm_conn *conn_of(struct rdmacli_cm_plan *p, uint64_t id)
{
    struct rdma_cm_id *cm = (struct rdma_cm_id *)(uintptr_t)id;
    uintptr_t index;

    if (!cm)
        return NULL;
    index = (uintptr_t)cm->context;
    if (index == 0 || index > p->connections || p->conns[index - 1].id != cm)
        return NULL;
    return &p->conns[index - 1];
}

static void log_event(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                      const struct rdmacli_cm_event *ev)
{
    struct rdmacli_cm_log *e;

    if (!p->log_events || !(e = cm_log_entry(p)))
        return;
    memset(e, 0, sizeof(*e));
    e->kind = RDMACLI_LOG_EVENT;
    e->conn = c ? (int32_t)c->index : -1;
    e->what = ev->event;
    e->status = ev->status;
    e->t0_ns = ev->t_ns;
    e->qp_num = ev->qp_num;
    e->private_data_len = ev->private_data_len;
    e->responder_resources = ev->responder_resources;
    e->initiator_depth = ev->initiator_depth;
    e->flow_control = ev->flow_control;
    e->retry_count = ev->retry_count;
    e->rnr_retry_count = ev->rnr_retry_count;
    e->srq = ev->srq;
}

static int read_events(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;
    struct rdmacli_cm_event ev;
    int n = 0;

    for (;;) {
        int err;

        if (p->listen_id && p->started >= p->connections) {
            p->look = 1; /* a server's slots are all taken: Python makes room before more are read */
            return n;
        }
        err = rdmacli_cm_get(p->channel, &ev);

        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
            return n;
        if (err) {
            p->run_call = RDMACLI_CALL_GET_CM_EVENT;
            p->run_err = err;
            return -1;
        }
        struct rdmacli_cm_conn *c = conn_of(p, ev.id);

        log_event(p, c, &ev);
        n++;
        if (p->listen_id && ev.event == RDMA_CM_EVENT_CONNECT_REQUEST && v->on_request)
            v->on_request(p, &ev); /* a slot of its own, for Python to decide */
        else if (c)
            cm_dispatch(p, c, &ev);
        else if (p->listen_id && ev.id == (uintptr_t)p->listen_id &&
                 ev.event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            p->listener_event = ev.event; /* the listener's device is gone: Python says so */
            p->look = 1;
        }
        cm_open_gates(p); /* lockstep: this one's event may be the last a gate waited for */
    }
}

/* One turn: wait until something is ready or `timeout_ns`, then the CM's events, then each CQ
 * (CM_FAIR_BATCHES polls each; one left with completions is served again at once). Returns how
 * many fds were ready, -1 for a signal (EINTR), -2 for a failure the run cannot go on from. */
static int turn(struct rdmacli_cm_plan *p, uint64_t timeout_ns)
{
    struct cm_priv *v = p->priv;
    struct pollfd fds[1 + CM_MAX_DEVICES];
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    int nfd = 1, ready, backlog = 0;

    for (int i = 0; i < v->ndev; i++)
        for (int k = 0; k < v->devs[i].ncq; k++)
            backlog |= v->devs[i].cqs[k].backlog;
    fds[0] = (struct pollfd){.fd = p->channel ? ((struct rdma_event_channel *)p->channel)->fd : -1,
                             .events = POLLIN};
    for (int i = 0; i < v->ndev; i++)
        fds[nfd++] = (struct pollfd){.fd = v->devs[i].comp->fd, .events = POLLIN};
    if (backlog)
        ts.tv_sec = ts.tv_nsec = 0;
    ready = ppoll(fds, (nfds_t)nfd, &ts, NULL);
    if (ready < 0)
        return errno == EINTR ? -1 : -2;
    p->now_ns = cm_now();
    if (fds[0].revents && read_events(p) < 0)
        return -2;
    for (int i = 0; i < v->ndev; i++) {
        struct cm_device *d = &v->devs[i];

        if (i + 1 < nfd && fds[i + 1].revents) {
            struct ibv_cq *cq;
            void *ctx;

            while (!ibv_get_cq_event(d->comp, &cq, &ctx)) {
                ibv_ack_cq_events(cq, 1);
                ibv_req_notify_cq(cq, 0);
                for (int k = 0; k < d->ncq; k++)
                    if (d->cqs[k].cq == cq)
                        d->cqs[k].backlog = 1;
            }
        }
        for (int k = 0; k < d->ncq; k++)
            if (d->cqs[k].backlog)
                d->cqs[k].backlog = !cm_drain(p, &d->cqs[k], CM_FAIR_BATCHES);
    }
    return ready + backlog;
}

/* ClientFlow.open: connection i's id (p->started counts the ids made) */
static int open_id(struct rdmacli_cm_plan *p, uint32_t i)
{
    struct rdmacli_cm_conn *c = &p->conns[i];
    struct rdma_cm_id *id;
    uint64_t t = cm_now();

    memset(c, 0, sizeof(*c));
    c->index = i;
    if (rdma_create_id(p->channel, &id, (void *)(uintptr_t)(i + 1), (enum rdma_port_space)p->ps)) {
        p->run_call = RDMACLI_CALL_CREATE_ID;
        p->run_err = errno ? errno : EIO;
        return -1;
    }
    c->id = id;
    c->count = p->count;
    c->size = p->size;
    p->started = i + 1;
    cm_log_step(p, c, RDMACLI_ST_CREATE_ID, t, cm_now(), 0);
    return 0;
}

/* ClientFlow.resolve: the first step of rdma_cm(7) */
static int resolve(struct rdmacli_cm_plan *p, uint32_t i)
{
    struct rdmacli_cm_conn *c = &p->conns[i];

    cm_enter(p, c, RDMACLI_PH_RESOLVE_ADDR);
    if (rdma_resolve_addr(c->id, p->has_src ? (struct sockaddr *)p->src : NULL,
                          (struct sockaddr *)p->dst, p->resolve_ms)) {
        p->run_call = RDMACLI_CALL_RESOLVE_ADDR;
        p->run_err = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

/* ClientFlow.run's start: each connection's id and address, or (lockstep) every id, then every
 * address, as cmtime */
static int start_all(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;

    if (p->lockstep && !v->held) {
        v->held = calloc(p->connections ? p->connections : 1, sizeof(*v->held));
        if (!v->held) {
            p->run_call = RDMACLI_CALL_CREATE_ID;
            p->run_err = ENOMEM;
            return -1;
        }
    }
    if (p->lockstep) {
        while (p->started < p->connections)
            if (open_id(p, p->started))
                return -1;
        for (uint32_t i = 0; p->has_src && i < p->connections; i++) { /* cmtime's bind step */
            struct rdmacli_cm_conn *c = &p->conns[i];
            uint64_t t = cm_now();

            if (rdma_bind_addr(c->id, (struct sockaddr *)p->src)) {
                p->run_call = RDMACLI_CALL_BIND_ADDR;
                p->run_err = errno ? errno : EIO;
                return -1;
            }
            cm_log_step(p, c, RDMACLI_ST_BIND_ADDR, t, cm_now(), 0);
        }
        /* each answer read as it comes, as cmtime's event thread does: the step ends at the
         * last event's read, not after every request (client.py's run, the same). A thread of
         * C's reading them as cmtime's does measured no better (issue 74's note) */
        for (uint32_t i = 0; i < p->connections; i++) {
            if (resolve(p, i))
                return -1;
            p->now_ns = cm_now();
            if (read_events(p) < 0)
                return -1;
        }
        return 0;
    }
    while (p->started < p->connections)
        if (open_id(p, p->started) || resolve(p, p->started - 1))
            return -1;
    return 0;
}

static uint64_t nearest(struct rdmacli_cm_plan *p)
{
    uint64_t at = p->overall_end_ns;

    for (uint32_t i = 0; i < p->started; i++) {
        struct rdmacli_cm_conn *c = &p->conns[i];

        if (!cm_final(c->state) && c->deadline_ns && (!at || c->deadline_ns < at))
            at = c->deadline_ns;
    }
    return at;
}

/* Flow.on_conn_deadline: a settle judged without its evidence, a disconnect nobody answered
 * torn down (not a failure: the exchange had ended), else its phase's deadline fails it */
static int expire(struct rdmacli_cm_plan *p, uint64_t now)
{
    int n = 0;

    for (uint32_t i = 0; i < p->started; i++) {
        struct rdmacli_cm_conn *c = &p->conns[i];

        if (cm_final(c->state) || !c->deadline_ns || c->deadline_ns > now)
            continue;
        n++;
        if (c->phase == RDMACLI_PH_SETTLE) {
            cm_judge_disconnect(p, c, 0);
        } else if (c->phase == RDMACLI_PH_DISCONNECT && c->fail_kind == RDMACLI_CF_NONE) {
            c->unanswered = 1;
            cm_step_done(p, c, RDMACLI_ST_DISCONNECT, 0, 0);
            c->connected = 0;
            cm_set_state(p, c, RDMACLI_CS_DONE);
        } else {
            cm_fail(p, c, RDMACLI_CF_DEADLINE);
        }
    }
    if (n)
        cm_open_gates(p); /* the one the others waited for has ended */
    return n;
}

void cm_settle(struct rdmacli_cm_plan *p)
{
    for (int i = 0; i < SETTLE_TURNS; i++)
        if (turn(p, 0) <= 0)
            return;
}

/* One pass of a run's loop (rdmacli_cm_run's, rdmacli_cm_serve's): the deadlines that passed
 * (what has already arrived counts first), else one turn. -1: go on; else the run's return. */
int cm_pass(struct rdmacli_cm_plan *p, uint64_t slice_end_ns)
{
    struct cm_priv *v = p->priv;
    uint64_t now = p->now_ns = cm_now(), at = nearest(p);
    int got;

    if (at && at <= now) {
        cm_settle(p);
        now = cm_now();
        at = nearest(p);
        if (at > now)
            return -1;
        return expire(p, now) ? -1 : RDMACLI_DEADLINE; /* none: the run's own deadline */
    }
    if (v->new_device || p->log_len + 64 > p->log_cap || now >= slice_end_ns) {
        v->new_device = 0;
        return RDMACLI_SLICE;
    }
    got = turn(p, (at && at < slice_end_ns ? at : slice_end_ns) - now);
    if (got == -1)
        return RDMACLI_SIGNAL;
    return got == -2 ? RDMACLI_RUN_FAILED : -1;
}

int rdmacli_cm_run(struct rdmacli_cm_plan *p, uint64_t slice_end_ns, int settle_only)
{
    int rc;

    if (!p->priv) {
        p->priv = calloc(1, sizeof(struct cm_priv));
        if (!p->priv)
            return RDMACLI_BAD_ARGS;
    }
    if (!p->started && start_all(p)) /* the first call (a failed start ends the run) */
        return RDMACLI_RUN_FAILED;
    if (settle_only) {
        cm_settle(p);
        return RDMACLI_OK;
    }
    for (;;) {
        if (p->finished == p->connections)
            return RDMACLI_OK;
        if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED))
            return RDMACLI_SIGNAL; /* Python's stop, from its own thread (nativeflow._run_slice) */
        if ((rc = cm_pass(p, slice_end_ns)) >= 0)
            return rc;
    }
}

void rdmacli_cm_close(struct rdmacli_cm_plan *p)
{
    /* every id made (open_id counts them); lockstep: every QP, then every id, as cmtime */
    for (uint32_t i = 0; p->lockstep && i < p->started; i++)
        cm_teardown(p, &p->conns[i], 0);
    for (uint32_t i = 0; i < p->started; i++)
        cm_teardown(p, &p->conns[i], 1);
    cm_release_devices(p);
}
