/* The latency loops of `rdmacli lat` (and the mesh's ping): the requester's ping-pong and the
 * responder, each called once per slice by protocols/lat.py through rdmacli.native. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "loop.h"

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
