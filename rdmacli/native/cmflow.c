/* The native client's lifecycle (cmrun.c runs it): what a phase times and bounds, the rows'
 * handlers (engine/client.py's on_<action>, flow.py's on_disconnected and judge_disconnect) and
 * the dispatch of an event by the rows Python handed over (flow.py's _dispatch). Each function
 * says which of the Python engine's it is: test_cm_parity.py holds the two to the same records. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cmrun.h"

/* which step a phase times (lifecycle.PHASES' step); -1: none */
static const int PHASE_STEP[RDMACLI_CM_PHASES] = {
    [RDMACLI_PH_START] = -1,
    [RDMACLI_PH_RESOLVE_ADDR] = RDMACLI_ST_RESOLVE_ADDR,
    [RDMACLI_PH_RESOLVE_ROUTE] = RDMACLI_ST_RESOLVE_ROUTE,
    [RDMACLI_PH_CREATE_QP] = RDMACLI_ST_CREATE_QP,
    [RDMACLI_PH_CONNECT] = RDMACLI_ST_CONNECT,
    [RDMACLI_PH_ACCEPT] = RDMACLI_ST_ACCEPT,
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

struct rdmacli_cm_log *cm_log_entry(struct rdmacli_cm_plan *p)
{
    if (p->log_len >= p->log_cap)
        return NULL; /* the run returns (a slice) before a turn can fill it: never reached */
    return &p->log[p->log_len++];
}

/* A step's span into its figures (StepTimer.add's), and into the log only when it is to be said
 * (an observer shows each step: --json-lines, the live table) */
void cm_log_step(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t t0,
                 uint64_t t1, int said)
{
    struct rdmacli_cm_stepstat *s = &p->steps[step];
    int64_t d = (int64_t)(t1 - t0);
    struct rdmacli_cm_log *e;

    if (!s->count || t0 < s->first_ns)
        s->first_ns = t0;
    if (!s->count || t1 > s->last_ns)
        s->last_ns = t1;
    if (!s->count || d < s->least_ns)
        s->least_ns = d;
    if (!s->count || d > s->most_ns)
        s->most_ns = d;
    s->total_ns += d;
    s->count++;
    if (!said || !p->log_events || !(e = cm_log_entry(p)))
        return;
    memset(e, 0, sizeof(*e));
    e->kind = RDMACLI_LOG_STEP_SAID;
    e->conn = (int32_t)c->index;
    e->what = step;
    e->t0_ns = t0;
    e->t1_ns = t1;
}

int cm_final(int state)
{
    return state == RDMACLI_CS_DONE || state == RDMACLI_CS_FAILED || state == RDMACLI_CS_REJECTED;
}

/* A connection that ends is counted; a server's is listed for Python to read (cmserve.c), unless
 * its setup is on trial (a device with no room turns it back to Python undecided) */
void cm_set_state(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int state)
{
    struct cm_priv *v = p->priv;

    if (!cm_final(c->state) && cm_final(state) && !(v && v->trial)) {
        p->finished++;
        if (p->ended) {
            p->ended[p->nended++] = c->index;
            p->look = 1;
        }
    }
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

void cm_step_done(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t at,
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
void cm_enter(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int phase)
{
    int step = PHASE_STEP[phase];

    expect(p, c, phase, step >= 0 ? begin(p, c, step) : 0);
}

/* Flow.leave: the phase's step ends where the event that ended it was read */
static void leave(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, uint64_t ev_t)
{
    int step = PHASE_STEP[c->phase];
    struct cm_priv *v = p->priv;

    if (step >= 0)
        cm_step_done(p, c, step, ev_t, 1);
    /* a held event's handler (lockstep) is dispatched from its gate's opening */
    c->event_read_ns = v && v->gate_opened_ns ? v->gate_opened_ns : ev_t;
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
    cm_enter(p, c, RDMACLI_PH_DISCONNECT);
    rdma_disconnect(c->id); /* a failure is the teardown's (engine: teardown_errors) */
}

/* The protocol's on_disconnected (cmatose.py's client and server, bare.py's): complete, confirmed by the
 * server's disconnect (it disconnects only once it has every message), or the peer's early end */
static void protocol_disconnected(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    uint32_t count = p->exchange == RDMACLI_EX_CMATOSE ? c->count : 0;

    if (c->received == count && c->sent == count) {
        cm_set_state(p, c, RDMACLI_CS_DONE);
    } else if (!p->listen_id && c->received == count && c->sends_posted == count) {
        c->unconfirmed = count - c->sent;
        c->sent = count;
        c->bytes_sent = (uint64_t)count * c->size;
        cm_set_state(p, c, RDMACLI_CS_DONE);
    } else {
        cm_fail(p, c, RDMACLI_CF_PEER_ENDED);
    }
}

/* Flow.judge_disconnect: answer the peer's DREQ (it flushes our QP), then judge the exchange */
void cm_judge_disconnect(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, uint64_t ev_t)
{
    if (c->disconnect_sent) {
        cm_step_done(p, c, RDMACLI_ST_DISCONNECT, ev_t, 1);
    } else {
        disconnect(p, c);
        cm_step_done(p, c, RDMACLI_ST_DISCONNECT, 0, 0);
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
    cm_enter(p, c, next);
    if (rdma_resolve_route(id, p->resolve_ms))
        cm_fail_call(p, c, RDMACLI_CALL_RESOLVE_ROUTE, errno ? errno : EIO);
}

/* Flow.setup_qp: the QP made as "create qp", a step inside the connection's phase (a failure
 * is said as that step: the phase stays CREATE_QP). 0, or it failed. */
int cm_setup_qp(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    int phase = c->phase;

    begin(p, c, RDMACLI_ST_CREATE_QP);
    c->phase = RDMACLI_PH_CREATE_QP;
    if (cm_setup(p, c))
        return -1;
    cm_step_done(p, c, RDMACLI_ST_CREATE_QP, 0, 0);
    c->phase = phase;
    return 0;
}

/* ClientFlow.make_qp: the route's step ends, the QP is made */
static void make_qp(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct rdmacli_cm_event *ev)
{
    leave(p, c, ev->t_ns);
    cm_setup_qp(p, c);
}

/* ClientFlow.request: rdma_connect */
static void request(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int next)
{
    struct rdma_conn_param param;

    memset(&param, 0, sizeof(param));
    param.private_data = p->private_data;
    param.private_data_len = (uint8_t)p->private_data_len;
    param.responder_resources = p->responder_resources;
    param.initiator_depth = p->initiator_depth;
    param.retry_count = p->retry_count;
    param.rnr_retry_count = c->window < c->count ? p->rnr_retry_windowed : p->rnr_retry_plain;
    cm_enter(p, c, next);
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

static void on_route_resolved(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                              const struct rdmacli_cm_event *ev, int next)
{
    make_qp(p, c, ev);
    if (!cm_final(c->state))
        request(p, c, next);
}

static void on_established(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                           const struct rdmacli_cm_event *ev, int next)
{
    leave(p, c, ev->t_ns);
    c->connected = 1; /* Flow.start_data */
    if (!cm_final(c->state))
        c->state = RDMACLI_CS_ESTABLISHED;
    cm_enter(p, c, next);
    if (p->exchange == RDMACLI_EX_BARE)
        disconnect(p, c); /* bare.py: connected is all it wanted */
    else if (p->listen_id && cm_post_sends(p, c) == 0)
        cm_served(p, c); /* cmatose's server sends first (CmatoseServer.on_established) */
}

/* CmatoseServer._maybe_done: every message sent and received, the server ends the test */
void cm_served(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c)
{
    if (c->received == c->count && c->sent == c->count && !cm_final(c->state))
        disconnect(p, c);
}

static void on_disconnected(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c,
                            const struct rdmacli_cm_event *ev, int next)
{
    struct cm_cq *q = cm_cq_of(p, c);

    if (q) /* completions waiting while the CM's fd was served first count before the verdict */
        cm_drain(p, q, 1 << 30);
    if (cm_final(c->state))
        return;
    if (next != RDMACLI_PH_NONE && !c->disconnect_sent && cm_outstanding(p, c) > 0) {
        cm_enter(p, c, next); /* the peer's DREQ overtook our last sends' ACKs: wait for them */
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

/* -- lockstep: cmtime's order (client.py's hold, open_gates and release) ---------------------- */
static void hold(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct rdmacli_cm_event *ev,
                 int row)
{
    struct cm_priv *v = p->priv;
    struct cm_hold *h = &v->held[c->index];

    if (!h->on)
        v->nheld++;
    h->on = 1;
    h->row = row;
    h->ev = *ev;
    c->deadline_ns = 0; /* its step is over: the slowest connection's deadline is not its own */
}

static void release(struct rdmacli_cm_plan *p, int phase)
{
    struct cm_priv *v = p->priv;
    int route = 0;

    for (uint32_t i = 0; i < p->started; i++) /* every QP first, then every request */
        if (v->held[i].on && p->conns[i].phase == phase) {
            route = p->rows[v->held[i].row].action == RDMACLI_ACT_ROUTE_RESOLVED;
            break;
        }
    for (uint32_t i = 0; i < p->started; i++) {
        struct cm_hold *h = &v->held[i];
        struct rdmacli_cm_conn *c = &p->conns[i];

        if (!h->on || c->phase != phase)
            continue;
        if (route) {
            make_qp(p, c, &h->ev);
        } else {
            h->on = 0;
            v->nheld--;
            HANDLERS[p->rows[h->row].action](p, c, &h->ev, p->rows[h->row].next);
        }
        c->event_read_ns = 0;
    }
    if (!route)
        return;
    for (uint32_t i = 0; i < p->started; i++) {
        struct cm_hold *h = &v->held[i];
        struct rdmacli_cm_conn *c = &p->conns[i];

        if (!h->on || c->phase != phase)
            continue;
        h->on = 0;
        v->nheld--;
        if (!cm_final(c->state))
            request(p, c, p->rows[h->row].next);
    }
}

/* Once every live connection has its event held, the held ones of the earliest phase go on,
 * their handlers run in the connections' order (client.py's open_gates) */
void cm_open_gates(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;

    while (v && v->nheld) {
        int first = -1;

        if (v->nheld + p->finished < p->started)
            return; /* O(1): called at every event */
        for (uint32_t i = 0; i < p->started; i++)
            if (v->held[i].on && cm_final(p->conns[i].state)) {
                v->held[i].on = 0;
                v->nheld--;
            }
        if (v->nheld + p->finished < p->started)
            return; /* somebody's event is still to come */
        for (uint32_t i = 0; i < p->started; i++)
            if (v->held[i].on && (first < 0 || p->conns[i].phase < first))
                first = p->conns[i].phase;
        if (first < 0)
            return;
        v->gate_opened_ns = cm_now();
        release(p, first);
        v->gate_opened_ns = 0;
    }
}

static int listed(const int *list, uint32_t n, int event)
{
    for (uint32_t i = 0; i < n; i++)
        if (list[i] == event)
            return 1;
    return 0;
}

/* Flow._dispatch: error events end their connection in any phase, informational ones change
 * nothing, the rest go by the rows; an event no row has fails its connection */
void cm_dispatch(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct rdmacli_cm_event *ev)
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
    if (cm_final(c->state) || listed(p->informational, p->ninfo, ev->event))
        return;
    for (uint32_t i = 0; i < p->nrows; i++) {
        const struct rdmacli_cm_row *r = &p->rows[i];

        if (r->phase == c->phase && r->event == ev->event) {
            if (p->lockstep) {
                hold(p, c, ev, (int)i);
                return;
            }
            HANDLERS[r->action](p, c, ev, r->next);
            c->event_read_ns = 0;
            return;
        }
    }
    c->fail_event = ev->event;
    cm_fail(p, c, RDMACLI_CF_UNEXPECTED);
}

