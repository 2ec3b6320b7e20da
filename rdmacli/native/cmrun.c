/* The active side of rdma_cm(7) for many connections, in C: engine/client.py's ClientFlow and
 * engine/flow.py's dispatch, deadlines and settle, run by the rows of engine/lifecycle.py that
 * Python hands over in the plan (no transition is declared here: a row names the next phase and
 * one of the handlers below). cmtime's steps are stamped at the event's read, as timing.py's.
 * Python prepares the plan, calls rdmacli_cm_run slice by slice (it renders what the log holds,
 * serves signals between slices), reads the records and says them in words; cmconn.c holds a
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
_Static_assert(sizeof(((struct rdmacli_cm_conn *)0)->local) >= sizeof(struct sockaddr_storage), "sa");

#define SETTLE_TURNS 8

/* which step a phase times (lifecycle.PHASES' step); -1: none */
static const int PHASE_STEP[RDMACLI_CM_PHASES] = {
    [RDMACLI_PH_START] = -1,
    [RDMACLI_PH_RESOLVE_ADDR] = RDMACLI_ST_RESOLVE_ADDR,
    [RDMACLI_PH_RESOLVE_ROUTE] = RDMACLI_ST_RESOLVE_ROUTE,
    [RDMACLI_PH_CREATE_QP] = RDMACLI_ST_CREATE_QP,
    [RDMACLI_PH_CONNECT] = RDMACLI_ST_CONNECT,
    [RDMACLI_PH_ACCEPT] = -1,
    [RDMACLI_PH_JOIN] = -1,
    [RDMACLI_PH_WAIT_FOR_PEER] = -1,
    [RDMACLI_PH_DATA] = -1,
    [RDMACLI_PH_DISCONNECT] = RDMACLI_ST_DISCONNECT,
    [RDMACLI_PH_SETTLE] = -1,
};

uint64_t cm_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct rdmacli_cm_log *log_entry(struct rdmacli_cm_plan *p)
{
    if (p->log_len >= p->log_cap)
        return NULL; /* the run returns (a slice) before a turn can fill it: never reached */
    return &p->log[p->log_len++];
}

void cm_log_step(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t t0,
                 uint64_t t1, int said)
{
    struct rdmacli_cm_log *e = log_entry(p);

    if (!e)
        return;
    memset(e, 0, sizeof(*e));
    e->kind = said ? RDMACLI_LOG_STEP_SAID : RDMACLI_LOG_STEP;
    e->conn = (int32_t)c->index;
    e->what = step;
    e->t0_ns = t0;
    e->t1_ns = t1;
}

static int final(int state)
{
    return state == RDMACLI_CS_DONE || state == RDMACLI_CS_FAILED;
}

void cm_set_state(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int state)
{
    if (!final(c->state) && final(state))
        p->finished++;
    c->state = state;
}

void cm_fail(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int kind)
{
    if (c->fail_kind == RDMACLI_CF_NONE) {
        c->fail_kind = kind;
        c->fail_phase = c->phase;
    }
    cm_set_state(p, c, RDMACLI_CS_FAILED);
}

void cm_fail_call(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int call, int err)
{
    if (c->fail_kind == RDMACLI_CF_NONE) {
        c->fail_call = call;
        c->fail_err = err;
    }
    cm_fail(p, c, RDMACLI_CF_CALL);
}

/* Flow.begin: a step starts now; the handler's time since the event's read is DISPATCH */
static uint64_t begin(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step)
{
    uint64_t now = cm_now();

    c->step_t0[step] = now;
    if (c->event_read_ns) {
        cm_log_step(p, c, RDMACLI_ST_DISPATCH, c->event_read_ns, now, 0);
        c->event_read_ns = 0;
    }
    return now;
}

static void step_done(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t at,
                      int said)
{
    if (!c->step_t0[step])
        return;
    cm_log_step(p, c, step, c->step_t0[step], at ? at : cm_now(), said);
    c->step_t0[step] = 0;
}

static void expect(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int phase, uint64_t now)
{
    uint64_t limit = p->limit_ns[phase];

    c->phase = phase;
    c->deadline_ns = limit ? (now ? now : cm_now()) + limit : 0;
}

/* Flow.enter: the phase's step is timed and its timeout bounds it */
static void enter(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int phase)
{
    int step = PHASE_STEP[phase];

    expect(p, c, phase, step >= 0 ? begin(p, c, step) : 0);
}

/* Flow.leave: the phase's step ends where the event that ended it was read */
static void leave(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, uint64_t ev_t)
{
    int step = PHASE_STEP[c->phase];

    if (step >= 0)
        step_done(p, c, step, ev_t, 1);
    c->event_read_ns = ev_t;
}

void cm_progress(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    if (c->phase == RDMACLI_PH_DATA && c->deadline_ns)
        c->deadline_ns = p->now_ns + p->limit_ns[RDMACLI_PH_DATA];
    else if (c->phase == RDMACLI_PH_DATA || c->phase == RDMACLI_PH_WAIT_FOR_PEER)
        expect(p, c, RDMACLI_PH_DATA, p->now_ns);
}

/* Connection.disconnect: an exchange that ended awaits the peer's answer, with its deadline */
static void disconnect(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    if (!c->connected || c->disconnect_sent)
        return;
    c->disconnect_sent = 1;
    enter(p, c, RDMACLI_PH_DISCONNECT);
    rdma_disconnect(c->id); /* a failure is the teardown's (engine: teardown_errors) */
}

/* The protocol's on_disconnected (cmatose.py's client, bare.py's): complete, confirmed by the
 * server's disconnect (it disconnects only once it has every message), or the peer's early end */
static void protocol_disconnected(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    uint32_t count = p->exchange == RDMACLI_EX_CMATOSE ? p->count : 0;

    if (c->received == count && c->sent == count) {
        cm_set_state(p, c, RDMACLI_CS_DONE);
    } else if (c->received == count && c->sends_posted == count) {
        c->unconfirmed = count - c->sent;
        c->sent = count;
        c->bytes_sent = (uint64_t)count * p->size;
        cm_set_state(p, c, RDMACLI_CS_DONE);
    } else {
        cm_fail(p, c, RDMACLI_CF_PEER_ENDED);
    }
}

/* Flow.judge_disconnect: answer the peer's DREQ (it flushes our QP), then judge the exchange */
void cm_judge_disconnect(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, uint64_t ev_t)
{
    if (c->disconnect_sent) {
        step_done(p, c, RDMACLI_ST_DISCONNECT, ev_t, 1);
    } else {
        disconnect(p, c);
        step_done(p, c, RDMACLI_ST_DISCONNECT, 0, 0);
    }
    c->connected = 0;
    protocol_disconnected(p, c);
}

/* -- the rows' handlers (client.py's on_<action>, flow.py's on_disconnected) ----------------- */
static void on_addr_resolved(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                             const struct rdmacli_cm_event *ev, int next)
{
    struct rdma_cm_id *id = c->id;
    struct sockaddr *sa;

    leave(p, c, ev->t_ns);
    sa = rdma_get_local_addr(id);
    if (sa)
        memcpy(c->local, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    sa = rdma_get_peer_addr(id);
    if (sa)
        memcpy(c->remote, sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    if (id->verbs) {
        snprintf(c->device, sizeof(c->device), "%s", ibv_get_device_name(id->verbs->device));
        c->port_num = id->port_num;
    }
    enter(p, c, next);
    if (rdma_resolve_route(id, p->resolve_ms))
        cm_fail_call(p, c, RDMACLI_CALL_RESOLVE_ROUTE, errno ? errno : EIO);
}

static void on_route_resolved(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                              const struct rdmacli_cm_event *ev, int next)
{
    struct rdma_conn_param param;
    int phase;

    leave(p, c, ev->t_ns);
    phase = c->phase; /* Flow.setup_qp: "create qp", a step inside the phase */
    begin(p, c, RDMACLI_ST_CREATE_QP);
    c->phase = RDMACLI_PH_CREATE_QP;
    if (cm_setup(p, c))
        return;
    step_done(p, c, RDMACLI_ST_CREATE_QP, 0, 0);
    c->phase = phase;
    memset(&param, 0, sizeof(param));
    param.private_data = p->private_data;
    param.private_data_len = (uint8_t)p->private_data_len;
    param.responder_resources = p->responder_resources;
    param.initiator_depth = p->initiator_depth;
    param.retry_count = p->retry_count;
    param.rnr_retry_count = c->window < p->count ? p->rnr_retry_windowed : p->rnr_retry_plain;
    enter(p, c, next);
    if (rdma_connect(c->id, &param)) {
        int err = errno ? errno : EIO;

        if (err == ECONNREFUSED) {
            c->fail_err = err;
            cm_fail(p, c, RDMACLI_CF_REFUSED);
        } else {
            cm_fail_call(p, c, RDMACLI_CALL_CONNECT, err);
        }
    }
}

static void on_established(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                           const struct rdmacli_cm_event *ev, int next)
{
    leave(p, c, ev->t_ns);
    c->connected = 1; /* Flow.start_data */
    if (!final(c->state))
        c->state = RDMACLI_CS_ESTABLISHED;
    enter(p, c, next);
    if (p->exchange == RDMACLI_EX_BARE)
        disconnect(p, c); /* bare.py: connected is all it wanted */
}

static void on_disconnected(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                            const struct rdmacli_cm_event *ev, int next)
{
    struct cm_cq *q = cm_cq_of(p, c);

    if (q) /* completions waiting while the CM's fd was served first count before the verdict */
        cm_drain(p, q, 1 << 30);
    if (final(c->state))
        return;
    if (next != RDMACLI_PH_NONE && !c->disconnect_sent && cm_outstanding(p, c) > 0) {
        enter(p, c, next); /* the peer's DREQ overtook our last sends' ACKs: wait for them */
        return;
    }
    cm_judge_disconnect(p, c, ev->t_ns);
}

typedef void (*handler_fn)(struct rdmacli_cm_plan *, struct rdmacli_cm_conn *,
                           const struct rdmacli_cm_event *, int);

static const handler_fn HANDLERS[] = {
    [RDMACLI_ACT_ADDR_RESOLVED] = on_addr_resolved,
    [RDMACLI_ACT_ROUTE_RESOLVED] = on_route_resolved,
    [RDMACLI_ACT_ESTABLISHED] = on_established,
    [RDMACLI_ACT_DISCONNECTED] = on_disconnected,
};

static int listed(const int *list, uint32_t n, int event)
{
    for (uint32_t i = 0; i < n; i++)
        if (list[i] == event)
            return 1;
    return 0;
}

/* Flow._dispatch: error events end their connection in any phase, informational ones change
 * nothing, the rest go by the rows; an event no row has fails its connection */
static void dispatch(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct rdmacli_cm_event *ev)
{
    if (listed(p->error_events, p->nerror, ev->event)) {
        c->connected = 0;
        if (c->fail_kind == RDMACLI_CF_NONE) {
            c->fail_event = ev->event;
            c->fail_status = ev->status;
            c->fail_data_len = ev->private_data_len < sizeof(c->fail_data) ? ev->private_data_len
                                                                           : sizeof(c->fail_data);
            memcpy(c->fail_data, ev->private_data, c->fail_data_len);
        }
        cm_fail(p, c, RDMACLI_CF_EVENT);
        return;
    }
    if (final(c->state) || listed(p->informational, p->ninfo, ev->event))
        return;
    for (uint32_t i = 0; i < p->nrows; i++) {
        const struct rdmacli_cm_row *r = &p->rows[i];

        if (r->phase == c->phase && r->event == ev->event) {
            HANDLERS[r->action](p, c, ev, r->next);
            c->event_read_ns = 0;
            return;
        }
    }
    c->fail_event = ev->event;
    cm_fail(p, c, RDMACLI_CF_UNEXPECTED);
}

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

    if (!p->log_events || !(e = log_entry(p)))
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
    struct rdmacli_cm_event ev;
    int n = 0;

    for (;;) {
        int err = rdmacli_cm_get(p->channel, &ev);

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
        if (c)
            dispatch(p, c, &ev);
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

/* ClientFlow.start: an id and the first step of rdma_cm(7) */
static int start(struct rdmacli_cm_plan *p, uint32_t i)
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
    cm_log_step(p, c, RDMACLI_ST_CREATE_ID, t, cm_now(), 0);
    enter(p, c, RDMACLI_PH_RESOLVE_ADDR);
    if (rdma_resolve_addr(id, p->has_src ? (struct sockaddr *)p->src : NULL,
                          (struct sockaddr *)p->dst, p->resolve_ms)) {
        p->run_call = RDMACLI_CALL_RESOLVE_ADDR;
        p->run_err = errno ? errno : EIO;
        return -1;
    }
    p->started = i + 1;
    return 0;
}

static uint64_t nearest(struct rdmacli_cm_plan *p)
{
    uint64_t at = p->overall_end_ns;

    for (uint32_t i = 0; i < p->started; i++) {
        struct rdmacli_cm_conn *c = &p->conns[i];

        if (!final(c->state) && c->deadline_ns && (!at || c->deadline_ns < at))
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

        if (final(c->state) || !c->deadline_ns || c->deadline_ns > now)
            continue;
        n++;
        if (c->phase == RDMACLI_PH_SETTLE) {
            cm_judge_disconnect(p, c, 0);
        } else if (c->phase == RDMACLI_PH_DISCONNECT && c->fail_kind == RDMACLI_CF_NONE) {
            c->unanswered = 1;
            step_done(p, c, RDMACLI_ST_DISCONNECT, 0, 0);
            c->connected = 0;
            cm_set_state(p, c, RDMACLI_CS_DONE);
        } else {
            cm_fail(p, c, RDMACLI_CF_DEADLINE);
        }
    }
    return n;
}

static void settle(struct rdmacli_cm_plan *p)
{
    for (int i = 0; i < SETTLE_TURNS; i++)
        if (turn(p, 0) <= 0)
            return;
}

int rdmacli_cm_run(struct rdmacli_cm_plan *p, uint64_t slice_end_ns, int settle_only)
{
    struct cm_priv *v;
    uint64_t now, at;
    int got;

    if (!p->priv) {
        p->priv = calloc(1, sizeof(struct cm_priv));
        if (!p->priv)
            return RDMACLI_BAD_ARGS;
    }
    v = p->priv;
    while (p->started < p->connections)
        if (start(p, p->started))
            return RDMACLI_RUN_FAILED;
    if (settle_only) {
        settle(p);
        return RDMACLI_OK;
    }
    for (;;) {
        if (p->finished == p->connections)
            return RDMACLI_OK;
        now = p->now_ns = cm_now();
        at = nearest(p);
        if (at && at <= now) {
            /* what has already arrived counts before anybody fails for a deadline */
            settle(p);
            now = cm_now();
            at = nearest(p);
            if (at > now)
                continue;
            if (!expire(p, now))
                return RDMACLI_DEADLINE; /* the run's own deadline */
            continue;
        }
        if (v->new_device || p->log_len + 64 > p->log_cap || now >= slice_end_ns) {
            v->new_device = 0;
            return RDMACLI_SLICE;
        }
        got = turn(p, (at && at < slice_end_ns ? at : slice_end_ns) - now);
        if (got == -1)
            return RDMACLI_SIGNAL;
        if (got == -2)
            return RDMACLI_RUN_FAILED;
    }
}

void rdmacli_cm_close(struct rdmacli_cm_plan *p)
{
    for (uint32_t i = 0; i < p->started; i++)
        cm_teardown(p, &p->conns[i]);
    /* an id created but whose resolve failed (start's last) */
    if (p->started < p->connections && p->conns && p->conns[p->started].id)
        cm_teardown(p, &p->conns[p->started]);
    cm_release_devices(p);
}
