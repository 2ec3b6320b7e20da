/* What rdmacli's native loops share (lat.c; not cffi's): the cycle clock and its conversions,
 * and a CQ's poll and sleep. Static inline, so each loop's polls are inlined as they were when
 * all of it was one file. */
#ifndef RDMACLI_LOOP_H
#define RDMACLI_LOOP_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "datapath.h"

#define MIN_CALIBRATION_NS 1000000ull /* a shorter interval says little about the cycle rate */

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

static inline void refine(struct rdmacli_lat *s)
{
    uint64_t c = cycles(), t = rdmacli_now_ns();

    if (t - s->cal_ns >= MIN_CALIBRATION_NS && c > s->cal_cycles)
        s->ns_per_cycle = (double)(t - s->cal_ns) / (double)(c - s->cal_cycles);
}

static inline uint64_t to_cycles(const struct rdmacli_lat *s, uint64_t ns)
{
    double c = (double)ns / s->ns_per_cycle;

    return c >= 1.8e19 ? UINT64_MAX : (uint64_t)c;
}

static inline uint64_t to_ns(const struct rdmacli_lat *s, uint64_t c)
{
    double ns = (double)c * s->ns_per_cycle;

    return ns >= 1.8e19 ? UINT64_MAX : (uint64_t)ns;
}

/* A poll of an ibv_cq_ex: up to POLL_BATCH completions into wc (what the loops read of them:
 * wr_id, status, opcode, qp_num) and their timestamps into ts (NULL: not kept). One completion
 * per ibv_start_poll/ibv_end_poll, never ibv_next_poll: rxe before rdma-core 55 (Debian 12 has
 * 44) moves its consumer index past the producer when ibv_next_poll says ENOENT and
 * ibv_end_poll follows (rdma-core b78b414e0), and then reads completions never written: the
 * lab saw all-zero ones. A pair per completion is right on every provider. */
static inline int poll_ex(struct ibv_cq_ex *cq, const struct rdmacli_lat *s, struct ibv_wc *wc, uint64_t *ts)
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
static inline int poll_batch(struct ibv_cq *cq, struct rdmacli_lat *s, struct ibv_wc *wc, uint64_t *ts, uint64_t *c)
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

/* A loop past its spin sleeps on its CQ's completion channel. `armed`: the CQ is armed, or its
 * event waits in the channel for whoever reads it (Python's loop arms it before every sleep of
 * its own, so a loop starts with 1). Once this loop has read the event, the CQ is armed again
 * and polled once more before the next sleep (what came before the arming raises no event).
 * Returns 0: poll the CQ again; 1: a signal came (Python's loop serves it); -1: a call failed. */
static inline int nap(struct ibv_cq *cq, struct rdmacli_lat *s, int *armed, uint64_t wake_ns)
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

#endif
