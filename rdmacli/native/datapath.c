/* rdmacli's native data path: the per-message loops of `rdmacli lat` (lat.c) and `rdmacli bw`
 * (bw.c), and the probe's (probe.c), in C; here, the clocks and the CQs they share.
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
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "datapath.h"

uint64_t rdmacli_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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
