/* rdmacli's native data path: the per-message loops of `rdmacli lat`, in C.
 *
 * Python does everything else (the CM, the QP, the CQ, the buffers, the exchange of buffer
 * addresses, the figures) and calls these once per slice of a run. In Python every message cost
 * a poll, a dispatch, a repost and a post through the interpreter: tens of microseconds under
 * emulation, more than a hardware round trip. Here a message costs what it costs perftest.
 *
 * Bounds: each loop ends at its iteration cap, at its slice's end (between two exchanges, so
 * that nothing is in flight when Python takes the CQ back) and at a hard deadline (an exchange
 * that never completes); it touches only the buffers it was given, within `size` bytes.
 *
 * Waiting: with --busy-poll (lat's default, perftest's way) a loop spins on its CQ. Otherwise
 * (the mesh's pairs, --no-busy-poll) it spins for spin_ns, long enough for a hardware round
 * trip, then sleeps on the CQ's completion channel: a spinning loop on a host whose CPUs are
 * shared (eight rails' tests at once, the lab's emulated nodes on two CPUs) takes the CPU its
 * partner needs to answer, and then measures the scheduler.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "datapath.h"

#define POLL_BATCH 8
#define MIN_CALIBRATION_NS 1000000ull /* a shorter interval says little about the cycle rate */

uint64_t rdmacli_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Timestamps as perftest takes them: the CPU's cycle counter (a few ns; clock_gettime is a
 * system call and a device read where the clocksource is not the TSC: 4.5 us under the lab's
 * TCG with HPET), converted to ns by a calibration against CLOCK_MONOTONIC over the whole run
 * instead of perftest's /proc/cpuinfo MHz. Elsewhere: CLOCK_MONOTONIC itself. */
static inline uint64_t cycles(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    uint64_t v;

    __asm__ volatile("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return rdmacli_now_ns();
#endif
}

static inline uint64_t held(uint64_t since)
{
    uint64_t c = cycles();

    return c > since ? c - since : 0;
}

static void refine(struct rdmacli_lat *s)
{
    uint64_t c = cycles(), t = rdmacli_now_ns();

    if (t - s->cal_ns >= MIN_CALIBRATION_NS && c > s->cal_cycles)
        s->ns_per_cycle = (double)(t - s->cal_ns) / (double)(c - s->cal_cycles);
}

/* The calibration's start, and a first rate from spin_ns of spinning (both ends need a rate
 * from their first message on: the responder says its hold in ns). */
void rdmacli_lat_calibrate(struct rdmacli_lat *s, uint64_t spin_ns)
{
    uint64_t end;

    s->cal_cycles = cycles();
    s->cal_ns = rdmacli_now_ns();
    s->ns_per_cycle = 1.0;
    end = s->cal_ns + spin_ns;
    while (rdmacli_now_ns() < end)
        ;
    refine(s);
}

static uint64_t to_cycles(const struct rdmacli_lat *s, uint64_t ns)
{
    double c = (double)ns / s->ns_per_cycle;

    return c >= 1.8e19 ? UINT64_MAX : (uint64_t)c;
}

static uint64_t to_ns(const struct rdmacli_lat *s, uint64_t c)
{
    double ns = (double)c * s->ns_per_cycle;

    return ns >= 1.8e19 ? UINT64_MAX : (uint64_t)ns;
}

static void put_be64(uint64_t addr, uint64_t v)
{
    unsigned char b[8];
    int i;

    for (i = 7; i >= 0; i--) {
        b[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
    memcpy((void *)(uintptr_t)addr, b, sizeof(b));
}

static uint64_t get_be64(uint64_t addr)
{
    unsigned char b[8];
    uint64_t v = 0;
    int i;

    memcpy(b, (const void *)(uintptr_t)addr, sizeof(b));
    for (i = 0; i < 8; i++)
        v = (v << 8) | b[i];
    return v;
}

/* The NIC's clock: what the device says of its completion timestamps (ibv_query_device_ex is
 * inline in verbs.h, so Python's ABI-mode binding cannot call it). 0, or an errno. A device
 * without them says mask 0 (rxe, most software devices). */
int rdmacli_nic_clock(void *verbs, uint64_t *mask, uint64_t *khz)
{
    struct ibv_device_attr_ex attr;
    int rc;

    if (!verbs || !mask || !khz)
        return EINVAL;
    memset(&attr, 0, sizeof(attr));
    rc = ibv_query_device_ex(verbs, NULL, &attr);
    if (rc)
        return rc;
    *mask = attr.completion_timestamp_mask;
    *khz = attr.hca_core_clock;
    return 0;
}

/* A CQ made as an ibv_cq_ex, with completion timestamps or (timestamps 0) without: returned as
 * the struct ibv_cq * that ibv_poll_cq, ibv_req_notify_cq and ibv_destroy_cq take, as for any
 * CQ (ibv_cq_ex_to_cq); NULL with errno set. Its completions carry the QP number, which the
 * loops check. */
void *rdmacli_create_cq_ex(void *verbs, int cqe, void *channel, int timestamps)
{
    struct ibv_cq_init_attr_ex attr;
    struct ibv_cq_ex *cq;

    if (!verbs || cqe <= 0) {
        errno = EINVAL;
        return NULL;
    }
    memset(&attr, 0, sizeof(attr));
    attr.cqe = (uint32_t)cqe;
    attr.channel = channel;
    attr.wc_flags = IBV_WC_EX_WITH_QP_NUM | (timestamps ? IBV_WC_EX_WITH_COMPLETION_TIMESTAMP : 0);
    cq = ibv_create_cq_ex(verbs, &attr);
    return cq ? ibv_cq_ex_to_cq(cq) : NULL;
}

/* ns between two completion timestamps of a counter `mask` wide that counts khz thousand times a
 * second (it may have wrapped once between them); 0 where the device said no rate. */
uint64_t rdmacli_nic_ticks_ns(uint64_t from, uint64_t to, uint64_t mask, uint64_t khz)
{
    uint64_t ticks = mask ? (to - from) & mask : to - from;

    if (!khz)
        return 0;
    return (uint64_t)((double)ticks * 1e6 / (double)khz);
}

/* A poll of an ibv_cq_ex: up to POLL_BATCH completions into wc (what the loops read of them:
 * wr_id, status, opcode, qp_num) and their timestamps into ts (NULL: not kept). One completion
 * per ibv_start_poll/ibv_end_poll, never ibv_next_poll: rxe before rdma-core 55 (Debian 12 has
 * 44) moves its consumer index past the producer when ibv_next_poll says ENOENT and
 * ibv_end_poll follows (rdma-core b78b414e0), and then reads completions never written: the
 * lab saw all-zero ones. A pair per completion is right on every provider. */
static int poll_ex(struct ibv_cq_ex *cq, const struct rdmacli_lat *s, struct ibv_wc *wc, uint64_t *ts)
{
    struct ibv_poll_cq_attr attr = {0};
    int n, rc;

    for (n = 0; n < POLL_BATCH; n++) {
        rc = ibv_start_poll(cq, &attr);
        if (rc == ENOENT)
            break;
        if (rc)
            return n ? n : -rc; /* (what was read first is handled; the error comes again) */
        memset(&wc[n], 0, sizeof(wc[n]));
        wc[n].wr_id = cq->wr_id;
        wc[n].status = cq->status;
        if (cq->status == IBV_WC_SUCCESS) { /* an error's has only wr_id and status */
            wc[n].opcode = ibv_wc_read_opcode(cq);
            wc[n].qp_num = ibv_wc_read_qp_num(cq);
        }
        if (ts)
            ts[n] = s->nic_clock == RDMACLI_CLOCK_NIC ? ibv_wc_read_completion_ts(cq) : 0;
        ibv_end_poll(cq);
    }
    return n;
}

/* One poll of the CQ, stamped: the completions polled, or -1 with the status said. */
static int poll_batch(struct ibv_cq *cq, struct rdmacli_lat *s, struct ibv_wc *wc, uint64_t *ts, uint64_t *c)
{
    int got = s->nic_clock ? poll_ex((struct ibv_cq_ex *)cq, s, wc, ts) : ibv_poll_cq(cq, POLL_BATCH, wc);

    *c = cycles();
    s->polls++;
    if (got < 0) {
        s->status = RDMACLI_POLL_ERROR;
        s->err = got;
        return -1;
    }
    return got;
}

/* ns from an earlier call's moment (CLOCK_MONOTONIC ns) to cycle c of this call, which began
 * at t0 ns and cycle c0 */
static uint64_t since(const struct rdmacli_lat *s, uint64_t t0, uint64_t c0, uint64_t c, uint64_t then_ns)
{
    uint64_t now = t0 + to_ns(s, c > c0 ? c - c0 : 0);
    return now > then_ns ? now - then_ns : 0;
}

static int post_message(struct ibv_qp *qp, struct rdmacli_lat *s)
{
    int rc;
    struct ibv_sge sge = {.addr = s->send_addr, .length = s->size, .lkey = s->send_lkey};
    struct ibv_send_wr wr, *bad = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = s->send_wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (s->size <= s->max_inline)
        wr.send_flags |= IBV_SEND_INLINE;
    if (s->op == RDMACLI_OP_WRITE) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = 0;
        wr.wr.rdma.remote_addr = s->remote_addr;
        wr.wr.rdma.rkey = s->rkey;
    } else if (s->op == RDMACLI_OP_WRITE_POLL) {
        /* perftest's ib_write_lat: the message's last byte is its number, modulo 256 */
        *(volatile unsigned char *)(uintptr_t)(s->send_addr + s->size - 1) = (unsigned char)(s->tx_seq + 1);
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = s->remote_addr;
        wr.wr.rdma.rkey = s->rkey;
    } else {
        wr.opcode = IBV_WR_SEND;
    }
    rc = ibv_post_send(qp, &wr, &bad);
    if (rc == 0) {
        s->tx_seq++;
        s->sends_posted++;
    }
    return rc;
}

/* RDMACLI_OP_WRITE_POLL: the peer's next message has arrived in our memory. */
static int written(struct rdmacli_lat *s)
{
    if (*(volatile unsigned char *)(uintptr_t)(s->recv_addr + s->size - 1) != (unsigned char)(s->rx_seq + 1))
        return 0;
    s->rx_seq++;
    return 1;
}

static int post_receive(struct ibv_qp *qp, const struct rdmacli_lat *s)
{
    struct ibv_sge sge = {.addr = s->recv_addr, .length = s->recv_size ? s->recv_size : s->size,
                          .lkey = s->recv_lkey};
    struct ibv_recv_wr wr, *bad = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = s->recv_wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(qp, &wr, &bad);
}

static void failed(struct rdmacli_lat *s, const struct ibv_wc *wc)
{
    s->status = RDMACLI_WC_ERROR;
    s->err = wc->status;
    s->wc_opcode = wc->opcode;
    s->wc_wr_id = wc->wr_id;
}

/* A completion this loop cannot own (another QP's, or an answer nobody asked for): err says
 * the QP number it names, with its opcode and wr_id, for the words. */
static void foreign(struct rdmacli_lat *s, const struct ibv_wc *wc)
{
    s->status = RDMACLI_FOREIGN;
    s->err = (int)wc->qp_num;
    s->wc_opcode = wc->opcode;
    s->wc_wr_id = wc->wr_id;
}

static int usable(const void *qp, const void *cq, const struct rdmacli_lat *s, uint32_t cap)
{
    return qp && cq && s && cap > 0 && s->size > 0 && s->send_addr && s->recv_addr &&
           (s->recv_size == 0 || s->recv_size >= s->size) &&
           s->max_sends > 0 && s->ns_per_cycle > 0 &&
           (s->op == RDMACLI_OP_SEND || s->op == RDMACLI_OP_WRITE || s->op == RDMACLI_OP_WRITE_POLL);
}

static int begin(void *qp, void *cq, struct rdmacli_lat *s, uint32_t cap)
{
    if (!usable(qp, cq, s, cap)) {
        if (s)
            s->status = RDMACLI_BAD_ARGS;
        return 0;
    }
    s->status = RDMACLI_OK;
    s->err = 0;
    s->polls = 0;
    s->sleeps = 0;
    return 1;
}

/* One completion of this QP; returns 0 to go on, else the loop ends with s->status said. */
static int checked(struct ibv_qp *qp, struct rdmacli_lat *s, const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) { /* (first: an ibv_cq_ex's error says no QP number) */
        failed(s, wc);
        return 1;
    }
    if (wc->qp_num != qp->qp_num) {
        foreign(s, wc);
        return 1;
    }
    if (!(wc->opcode & IBV_WC_RECV)) {
        s->sends_done++;
        if (s->sends_out > 0)
            s->sends_out--; /* (a send posted before this loop completes unseen by it) */
    }
    return 0;
}

static int post_error(struct rdmacli_lat *s, int rc)
{
    s->status = RDMACLI_POST_ERROR;
    s->err = rc;
    return 1;
}

/* A loop past its spin sleeps on its CQ's completion channel. `armed`: the CQ is armed, or its
 * event waits in the channel for whoever reads it (Python's loop arms it before every sleep of
 * its own, so a loop starts with 1). Once this loop has read the event, the CQ is armed again
 * and polled once more before the next sleep (what came before the arming raises no event).
 * Returns 0: poll the CQ again; 1: a signal came (Python's loop serves it); -1: a call failed. */
static int nap(struct ibv_cq *cq, struct rdmacli_lat *s, int *armed, uint64_t wake_ns)
{
    struct ibv_comp_channel *ch = cq->channel;
    struct ibv_cq *ev_cq;
    struct pollfd p;
    struct timespec ts;
    uint64_t now, left;
    void *ctx;
    int rc;

    if (!ch)
        return 0; /* a CQ without a channel: only spinning */
    if (!*armed) {
        rc = ibv_req_notify_cq(cq, 0);
        if (rc) {
            s->status = RDMACLI_POLL_ERROR;
            s->err = rc;
            return -1;
        }
        *armed = 1;
        return 0;
    }
    now = rdmacli_now_ns();
    if (now >= wake_ns)
        return 0;
    left = wake_ns - now;
    ts.tv_sec = (time_t)(left / 1000000000ull);
    ts.tv_nsec = (long)(left % 1000000000ull);
    p.fd = ch->fd;
    p.events = POLLIN;
    p.revents = 0;
    s->sleeps++;
    rc = ppoll(&p, 1, &ts, NULL);
    if (rc < 0) {
        if (errno == EINTR)
            return 1;
        s->status = RDMACLI_POLL_ERROR;
        s->err = errno;
        return -1;
    }
    if (rc > 0 && ibv_get_cq_event(ch, &ev_cq, &ctx) == 0) {
        ibv_ack_cq_events(ev_cq, 1);
        *armed = 0;
    }
    return 0;
}

/* The requester's next message, if it may go: returns 1 on a failed post. */
static int ask(struct ibv_qp *qp, struct rdmacli_lat *s, uint64_t *c_post)
{
    int rc;

    *c_post = cycles();
    rc = post_message(qp, s);
    if (rc)
        return post_error(s, rc);
    s->awaiting = 1;
    s->sends_out++;
    return 0;
}

/* The requester's ping-pong: post a message, wait for the answer, note the round trip (and the
 * responder's hold, the answer's first 8 bytes, big-endian ns), post the next at once. Send
 * completions are reaped as they come (at most max_sends in flight) and all of them before the
 * loop returns, so Python gets the CQ back empty of this loop's work. Returns the round trips
 * written to rtt_ns/hold_ns (at most cap). */
int rdmacli_lat_client(void *qp_, void *cq_, struct rdmacli_lat *s, uint64_t *rtt_ns,
                       uint64_t *hold_ns, uint64_t *nic_ns, uint32_t cap, uint64_t slice_end_ns,
                       uint64_t deadline_ns)
{
    struct ibv_qp *qp = qp_;
    struct ibv_cq *cq = cq_;
    struct ibv_wc wc[POLL_BATCH];
    uint64_t ts[POLL_BATCH] = {0};
    uint32_t n = 0, i;
    uint64_t t0, c0, c, c_post = 0, slice_end, deadline, spin, quiet;
    int got, k, rc, busy, stop, armed = 1, signalled = 0;

    if (!begin(qp_, cq_, s, cap) || !rtt_ns || !hold_ns) {
        if (s)
            s->status = RDMACLI_BAD_ARGS;
        return 0;
    }
    t0 = rdmacli_now_ns();
    c = c0 = quiet = cycles();
    slice_end = c0 + (slice_end_ns > t0 ? to_cycles(s, slice_end_ns - t0) : 0);
    deadline = c0 + (deadline_ns > t0 ? to_cycles(s, deadline_ns - t0) : 0);
    /* a WRITE arrives without a completion: memory is polled, there is nothing to sleep on */
    spin = s->spin_ns == UINT64_MAX || s->op == RDMACLI_OP_WRITE_POLL ? UINT64_MAX : to_cycles(s, s->spin_ns);
    s->awaiting = 0;
    s->sends_out = 0;
    s->nic_last = 0; /* a period across the engine's turn between two calls is not the wire's */
    for (;;) {
        if (!s->awaiting && n < cap && c < slice_end && !signalled && s->sends_out < s->max_sends) {
            if (ask(qp, s, &c_post))
                break;
            quiet = c_post;
        }
        got = poll_batch(cq, s, wc, ts, &c);
        if (got < 0)
            break;
        for (k = 0; k < got; k++) {
            if (checked(qp, s, &wc[k]))
                goto out;
            if (!(wc[k].opcode & IBV_WC_RECV))
                continue;
            if (!s->awaiting || n >= cap || s->op == RDMACLI_OP_WRITE_POLL) {
                foreign(s, &wc[k]); /* an answer nobody asked for (WRITE_POLL posts no receive) */
                goto out;
            }
            rtt_ns[n] = c > c_post ? c - c_post : 0; /* cycles until the end: then ns */
            hold_ns[n] = s->carries_hold && s->size >= 8 ? get_be64(s->recv_addr) : 0;
            if (nic_ns) { /* the NIC's period from the last answer to this one (rc_pingpong --ts) */
                nic_ns[n] = s->nic_last && ts[k]
                                ? rdmacli_nic_ticks_ns(s->nic_last, ts[k], s->nic_mask, s->nic_khz)
                                : 0;
                s->nic_last = ts[k];
            }
            n++;
            s->awaiting = 0;
            /* the next message first (a second receive is posted already), then the repost */
            if (n < cap && c < slice_end && !signalled && s->sends_out < s->max_sends &&
                ask(qp, s, &c_post))
                goto out;
            rc = post_receive(qp, s);
            if (rc) {
                post_error(s, rc);
                goto out;
            }
        }
        if (s->op == RDMACLI_OP_WRITE_POLL && s->awaiting && n < cap && written(s)) {
            rtt_ns[n] = c > c_post ? c - c_post : 0;
            if (nic_ns)
                nic_ns[n] = 0; /* a write seen in memory: no completion, no NIC time */
            hold_ns[n++] = 0;
            s->awaiting = 0;
            got = 1; /* progress: the next message goes at the loop's top */
        }
        if (got > 0) {
            quiet = c;
            continue;
        }
        busy = s->awaiting || s->sends_out;
        stop = !busy && !(n < cap && c < slice_end && !signalled) ? RDMACLI_OK
               : busy && c >= deadline                           ? RDMACLI_DEADLINE
               : busy && signalled                               ? RDMACLI_SIGNAL
                                                                 : -1;
        if (stop >= 0) {
            if (armed) { /* Python's loop wakes for what comes next */
                s->status = stop;
                break;
            }
            if (nap(cq, s, &armed, 0) < 0) /* arms the CQ: then one more poll */
                break;
            continue;
        }
        if (busy && c > quiet && c - quiet >= spin) {
            rc = nap(cq, s, &armed, deadline_ns);
            if (rc < 0)
                break;
            if (rc > 0)
                signalled = 1;
        }
    }
out:
    refine(s);
    for (i = 0; i < n; i++)
        rtt_ns[i] = to_ns(s, rtt_ns[i]);
    s->t_post = t0 + to_ns(s, c_post > c0 ? c_post - c0 : 0);
    return (int)n;
}

/* The responder: each message that arrives is answered at once with one of the same size whose
 * first 8 bytes say how long it was held here (ns), then its receive is posted again. Returns
 * the messages answered; ends at cap (passed by less than a poll batch: what was polled is
 * answered), at the slice's end, or when none came for idle_ns. rtt_ns (NULL: not timed, room
 * for cap): the round trips of a responder that measures, as perftest's ib_write_lat client
 * does (the peer writes first): from each answer's post to the peer's next message, s->timed
 * of them. */
int rdmacli_lat_server(void *qp_, void *cq_, struct rdmacli_lat *s, uint64_t *rtt_ns,
                       uint32_t cap, uint64_t slice_end_ns, uint64_t idle_ns)
{
    struct ibv_qp *qp = qp_;
    struct ibv_cq *cq = cq_;
    struct ibv_wc wc[POLL_BATCH];
    uint32_t n = 0;
    uint64_t t0, c0, c, last, slice_end, idle, spin, wake, c_post = 0;
    int got, k, rc, armed = 1, signalled = 0;

    if (!begin(qp_, cq_, s, cap))
        return 0;
    t0 = rdmacli_now_ns();
    last = c0 = cycles();
    slice_end = c0 + (slice_end_ns > t0 ? to_cycles(s, slice_end_ns - t0) : 0);
    idle = to_cycles(s, idle_ns);
    spin = s->spin_ns == UINT64_MAX || s->op == RDMACLI_OP_WRITE_POLL ? UINT64_MAX : to_cycles(s, s->spin_ns);
    s->sends_out = 0; /* sends this call posted (those of earlier calls complete unseen) */
    s->timed = 0;
    for (;;) {
        /* a whole batch is always handled: a completion polled is never dropped */
        got = poll_batch(cq, s, wc, NULL, &c);
        if (got < 0)
            break;
        for (k = 0; k < got; k++) {
            if (checked(qp, s, &wc[k]))
                goto out;
            if (!(wc[k].opcode & IBV_WC_RECV))
                continue;
            if (s->op == RDMACLI_OP_WRITE_POLL) { /* no receive is posted: none may complete */
                foreign(s, &wc[k]);
                goto out;
            }
            if (s->sends_out >= s->max_sends) { /* the peer sent without waiting */
                post_error(s, ENOMEM);
                goto out;
            }
            if (s->carries_hold && s->size >= 8)
                put_be64(s->send_addr, to_ns(s, held(c)));
            rc = post_message(qp, s);
            if (!rc)
                rc = post_receive(qp, s);
            if (rc) {
                post_error(s, rc);
                goto out;
            }
            s->sends_out++;
            n++;
            last = c;
        }
        if (s->op == RDMACLI_OP_WRITE_POLL && n < cap && written(s)) { /* the peer's message: ours back */
            if (s->sends_out >= s->max_sends) {
                post_error(s, ENOMEM);
                goto out;
            }
            if (rtt_ns && s->tx_seq > 0) /* an answer of ours went before this message */
                rtt_ns[s->timed++] = c_post ? to_ns(s, c > c_post ? c - c_post : 0)
                                     : since(s, t0, c0, c, s->t_post);
            /* stamped before the post, as perftest stamps (and as `ask` does): under rxe the
             * post's doorbell can carry the message out, and the peer's answer in, before it
             * returns; a stamp after it measured nearly nothing of the round trip */
            c_post = cycles();
            rc = post_message(qp, s);
            if (rc) {
                post_error(s, rc);
                goto out;
            }
            s->sends_out++;
            n++;
            last = c;
            got = 1;
        }
        if (got > 0 && n < cap)
            continue;
        if (n >= cap || c >= slice_end || (c > last && c - last >= idle) || signalled) {
            if (armed) /* Python's loop wakes for the next message */
                break;
            if (nap(cq, s, &armed, 0) < 0) /* arms the CQ: then one more poll */
                break;
            continue;
        }
        if (c > last && c - last >= spin) {
            wake = t0 + to_ns(s, last - c0) + idle_ns;
            rc = nap(cq, s, &armed, wake < slice_end_ns ? wake : slice_end_ns);
            if (rc < 0)
                break;
            if (rc > 0)
                signalled = 1;
        }
    }
out:
    refine(s);
    if (c_post)
        s->t_post = t0 + to_ns(s, c_post - c0);
    return (int)n;
}

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
