/* native/cmrun.c, cmflow.c, cmconn.c and cmserve.c with librdmacm, the verbs, ppoll and the clock replaced by a scripted
 * peer (test_cm_parity.py): the native client, built as it ships, facing the peer that fakerdma's
 * FakeBackend plays for the Python engine; the two must come to the same records. As the other
 * twins: the headers first, then the names the sources call redefined, then the sources included. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "datapath.h"
#include "cm_run_twin.h"

struct crt_script crt;
struct crt_state crs;

#define CRT_QUEUE 4096

struct crt_event {
    struct rdma_cm_id *id;
    int event, status;
};

#define LISTENER ((uintptr_t)1) /* the listener's id as C knows it (the test's plan says so) */

static struct crt_event events[CRT_QUEUE];
static unsigned int nevents;
static struct ibv_wc wcs[CRT_QUEUE];
static unsigned int nwcs;
static int cq_armed, cq_event_due;
static struct ibv_context fake_ctx;
static struct ibv_device fake_dev;
static struct ibv_pd fake_pd;
static struct ibv_cq fake_cq;
static struct ibv_comp_channel fake_comp;
static struct sockaddr_in local_sa, peer_sa;
static unsigned int next_qpn = 1;
static struct rdma_cm_id *gone[CRT_QUEUE]; /* ids whose peer disconnected first */
static unsigned int ngone;

static int peer_gone(struct rdma_cm_id *id)
{
    for (unsigned int i = 0; i < ngone; i++)
        if (gone[i] == id)
            return 1;
    return 0;
}

void crt_reset(void)
{
    memset(&crt, 0, sizeof(crt));
    memset(&crs, 0, sizeof(crs));
    nevents = nwcs = ngone = 0;
    next_qpn = 1;
    cq_armed = cq_event_due = 0;
    crs.now_ns = 1000000000ull;
    crt.late_event = -1;
    crt.odd_conn = -1;
    crt.answer_disconnect = 1;
    fake_ctx.device = &fake_dev;
    strcpy(fake_dev.name, "fake0");
    local_sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(4242),
                                    .sin_addr.s_addr = htonl(0x0a000002)};
    peer_sa = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(7471),
                                   .sin_addr.s_addr = htonl(0x0a000001)};
}

static void queue(struct rdma_cm_id *id, int event, int status)
{
    if (event >= 0 && nevents < CRT_QUEUE)
        events[nevents++] = (struct crt_event){id, event, status};
}

static void complete(uint64_t wr_id, int status, int opcode, uint32_t len, uint32_t qpn)
{
    if (nwcs >= CRT_QUEUE)
        return;
    memset(&wcs[nwcs], 0, sizeof(wcs[0]));
    wcs[nwcs].wr_id = wr_id;
    wcs[nwcs].status = (enum ibv_wc_status)status;
    wcs[nwcs].opcode = (enum ibv_wc_opcode)opcode;
    wcs[nwcs].byte_len = len;
    wcs[nwcs].qp_num = qpn;
    nwcs++;
    if (cq_armed) {
        cq_event_due = 1;
        cq_armed = 0;
    }
}

/* -- the clock and the wait -------------------------------------------------------------------- */
static int twin_clock_gettime(clockid_t clk, struct timespec *ts)
{
    ts->tv_sec = (time_t)(crs.now_ns / 1000000000ull);
    ts->tv_nsec = (long)(crs.now_ns % 1000000000ull);
    return 0;
}

static int twin_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask)
{
    int ready = 0;

    for (nfds_t i = 0; i < n; i++) {
        fds[i].revents = 0;
        if ((i == 0 && nevents) || (i > 0 && cq_event_due)) {
            fds[i].revents = POLLIN;
            ready++;
        }
    }
    if (!ready && ts)
        crs.now_ns += (uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec;
    return ready;
}

/* -- the CM ------------------------------------------------------------------------------------ */
static int twin_cm_get(void *channel, struct rdmacli_cm_event *out)
{
    struct crt_event e;

    if (!nevents)
        return EAGAIN;
    e = events[0];
    memmove(&events[0], &events[1], --nevents * sizeof(events[0]));
    memset(out, 0, sizeof(*out));
    out->t_ns = crs.now_ns;
    out->event = e.event;
    out->status = e.status;
    out->id = (uintptr_t)e.id;
    if (e.event == RDMA_CM_EVENT_REJECTED && crt.connect_data_len) {
        out->private_data_len = (uint8_t)crt.connect_data_len;
        memcpy(out->private_data, crt.connect_data, crt.connect_data_len);
    }
    if (e.event == RDMA_CM_EVENT_ESTABLISHED) {
        out->responder_resources = out->initiator_depth = 1;
        out->qp_num = 77;
    }
    if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        out->listen_id = LISTENER;
        out->private_data_len = (uint8_t)crt.request_data_len;
        memcpy(out->private_data, crt.request_data, crt.request_data_len);
    }
    return 0;
}

/* fakerdma's request(): a client's CONNECT_REQUEST, a new id on the listener's device */
void crt_requests(unsigned int n)
{
    for (unsigned int i = 0; i < n; i++) {
        struct rdma_cm_id *id = calloc(1, sizeof(*id));

        id->verbs = &fake_ctx;
        id->pd = &fake_pd;
        id->port_num = 1;
        id->ps = RDMA_PS_TCP;
        crs.ids++;
        queue(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    }
}

/* a call into the trace: I create id, A resolve addr, R resolve route, Q create qp, C connect,
 * D disconnect, q destroy qp, i destroy id, B bind addr (fakerdma.py's log, said alike by the test) */
static void trace(char call, struct rdma_cm_id *id)
{
    size_t len = strlen(crs.trace);

    if (len + 16 < sizeof(crs.trace))
        snprintf(crs.trace + len, sizeof(crs.trace) - len, "%c%lu ", call,
                 (unsigned long)((uintptr_t)id->context - 1));
}

static int twin_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context,
                          enum rdma_port_space ps)
{
    *id = calloc(1, sizeof(**id));
    (*id)->context = context;
    trace('I', *id);
    (*id)->context = context;
    (*id)->ps = ps;
    crs.ids++;
    return 0;
}

static int twin_bind_addr(struct rdma_cm_id *id, struct sockaddr *sa)
{
    trace('B', id);
    return 0;
}

static int twin_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int ms)
{
    trace('A', id);
    id->verbs = &fake_ctx;
    id->pd = &fake_pd;
    id->port_num = 1;
    queue(id, crt.addr_event, crt.addr_status);
    return 0;
}

static int twin_resolve_route(struct rdma_cm_id *id, int ms)
{
    trace('R', id);
    queue(id, crt.route_event, crt.route_status);
    return 0;
}

static struct sockaddr *twin_local_addr(struct rdma_cm_id *id)
{
    return (struct sockaddr *)&local_sa;
}

static struct sockaddr *twin_peer_addr(struct rdma_cm_id *id)
{
    return (struct sockaddr *)&peer_sa;
}

static const char *twin_device_name(struct ibv_device *dev)
{
    return dev->name;
}

static int twin_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    trace('Q', id);
    id->qp = calloc(1, sizeof(*id->qp));
    id->qp->qp_num = next_qpn++;
    id->qp->qp_context = id;
    crs.qps++;
    return 0;
}

static int twin_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    trace('C', id);
    if ((int)((uintptr_t)id->context - 1) == crt.odd_conn) {
        queue(id, crt.odd_event, crt.odd_status);
        return 0;
    }
    if (crt.connect_fails_errno) {
        errno = crt.connect_fails_errno;
        return -1;
    }
    queue(id, crt.connect_event, crt.connect_status);
    if (crt.connect_event == RDMA_CM_EVENT_ESTABLISHED) {
        uint64_t recv_wr_id = (uint64_t)((uintptr_t)id->context - 1) << 32;

        for (unsigned int i = 0; i < crt.peer_sends; i++)
            complete(recv_wr_id, crt.recv_status, IBV_WC_RECV, crt.recv_status ? 0 : crt.size,
                     id->qp->qp_num);
        queue(id, crt.late_event, 0);
    }
    return 0;
}

/* the passive side: the client's answer to our accept (fakerdma's default: ESTABLISHED), the late
 * event after it; a reject is kept (its reason) */
static int twin_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    trace('a', id);
    crs.accepted_with_param += param != NULL;
    queue(id, crt.connect_event, crt.connect_status);
    if (crt.connect_event == RDMA_CM_EVENT_ESTABLISHED)
        queue(id, crt.late_event, 0);
    return 0;
}

static int twin_reject(struct rdma_cm_id *id, const void *data, uint8_t len)
{
    trace('j', id);
    crs.rejects++;
    memset(crs.reason, 0, sizeof(crs.reason));
    memcpy(crs.reason, data, len < sizeof(crs.reason) ? len : sizeof(crs.reason));
    return 0;
}

static int twin_disconnect(struct rdma_cm_id *id)
{
    trace('D', id);
    if (crt.answer_disconnect && !peer_gone(id))
        queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
    return 0;
}

static void twin_destroy_qp(struct rdma_cm_id *id)
{
    trace('q', id);
    free(id->qp);
    id->qp = NULL;
    crs.qps--;
}

static int twin_destroy_id(struct rdma_cm_id *id)
{
    trace('i', id);
    for (unsigned int i = 0; i < nevents; i++)
        if (events[i].id == id)
            events[i].id = NULL; /* an event of a destroyed id is nobody's */
    for (unsigned int i = 0; i < ngone; i++)
        if (gone[i] == id)
            gone[i] = NULL;
    free(id);
    crs.ids--;
    return 0;
}

/* -- the verbs --------------------------------------------------------------------------------- */
static struct ibv_comp_channel *twin_create_comp_channel(struct ibv_context *ctx)
{
    fake_comp.fd = -1;
    crs.comps++;
    return &fake_comp;
}

static int twin_destroy_comp_channel(struct ibv_comp_channel *c)
{
    crs.comps--;
    return 0;
}

static struct ibv_cq *twin_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
                                     struct ibv_comp_channel *c, int vector)
{
    crs.cqs++;
    return &fake_cq;
}

static int twin_destroy_cq(struct ibv_cq *cq)
{
    crs.cqs--;
    return 0;
}

static int twin_req_notify_cq(struct ibv_cq *cq, int solicited)
{
    cq_armed = 1; /* as the verbs: the next completion raises an event, not those already in */
    return 0;
}

static int twin_get_cq_event(struct ibv_comp_channel *c, struct ibv_cq **cq, void **ctx)
{
    if (!cq_event_due) {
        errno = EAGAIN;
        return -1;
    }
    cq_event_due = 0;
    *cq = &fake_cq;
    *ctx = NULL;
    return 0;
}

static void twin_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
}

static int twin_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *out)
{
    int k = (int)nwcs < n ? (int)nwcs : n;

    memcpy(out, wcs, (size_t)k * sizeof(wcs[0]));
    memmove(&wcs[0], &wcs[k], (nwcs - (unsigned int)k) * sizeof(wcs[0]));
    nwcs -= (unsigned int)k;
    return k;
}

static int twin_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    memset(attr, 0, sizeof(*attr));
    attr->max_qp_wr = 16384; /* fakerdma's RXE_LIMITS */
    attr->max_cqe = 32767;
    return 0;
}

static struct ibv_mr fake_mr;

static struct ibv_mr *twin_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    crs.mrs++;
    return &fake_mr;
}

static int twin_dereg_mr(struct ibv_mr *mr)
{
    crs.mrs--;
    return 0;
}

static int twin_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return 0; /* the peer's messages are completed by rdma_connect (crt.peer_sends) */
}

/* fakerdma's post_send: each send seen by the peer (it disconnects once it has them all), then
 * the chain's one completion */
static int twin_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct rdma_cm_id *id = qp->qp_context;

    for (; wr; wr = wr->next) {
        crs.sends++;
        if (crt.disconnect_after && crs.sends == crt.disconnect_after) {
            if (ngone < CRT_QUEUE)
                gone[ngone++] = id;
            queue(id, RDMA_CM_EVENT_DISCONNECTED, 0);
        }
        if (crt.echo) /* the client's echo: one of its messages for each of ours (fakerdma's order) */
            complete(((uint64_t)((uintptr_t)id->context - 1)) << 32, 0, IBV_WC_RECV,
                     wr->sg_list->length, qp->qp_num);
        if (wr->send_flags & IBV_SEND_SIGNALED)
            complete(wr->wr_id, crt.send_status, IBV_WC_SEND, wr->sg_list->length, qp->qp_num);
    }
    return 0;
}

#define clock_gettime twin_clock_gettime
#define ppoll twin_ppoll
#define rdmacli_cm_get twin_cm_get
#define rdma_create_id twin_create_id
#define rdma_bind_addr twin_bind_addr
#define rdma_resolve_addr twin_resolve_addr
#define rdma_resolve_route twin_resolve_route
#define rdma_get_local_addr twin_local_addr
#define rdma_get_peer_addr twin_peer_addr
#define ibv_get_device_name twin_device_name
#define rdma_create_qp twin_create_qp
#define rdma_connect twin_connect
#define rdma_disconnect twin_disconnect
#define rdma_accept twin_accept
#define rdma_reject twin_reject
#define rdma_destroy_qp twin_destroy_qp
#define rdma_destroy_id twin_destroy_id
#define ibv_create_comp_channel twin_create_comp_channel
#define ibv_destroy_comp_channel twin_destroy_comp_channel
#define ibv_create_cq twin_create_cq
#define ibv_destroy_cq twin_destroy_cq
#define ibv_req_notify_cq twin_req_notify_cq
#define ibv_get_cq_event twin_get_cq_event
#define ibv_ack_cq_events twin_ack_cq_events
#define ibv_poll_cq twin_poll_cq
#define ibv_query_device twin_query_device
#undef ibv_reg_mr
#define ibv_reg_mr twin_reg_mr
#define ibv_dereg_mr twin_dereg_mr
#define ibv_post_recv twin_post_recv
#define ibv_post_send twin_post_send
#include "cmconn.c"
#include "cmflow.c"
#include "cmrun.c"
#include "cmserve.c"
