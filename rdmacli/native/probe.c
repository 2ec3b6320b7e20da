/* rdmacli's native data path: the mesh's connectionless probe (rdmacli/probe), in C.
 *
 * Python keeps the phase: the UD QP, its CQ and buffer, SIDR for each partner's QP number and
 * its address handle, the pacing of each partner's probes (a step and the next due time), and
 * the figures. Here, once per turn of its loop: every completion in the CQ (a partner's probe
 * answered at once with both stamps, a reply to one of ours counted against the probe it
 * answers, a send's slot freed, receives posted again) and every probe that is due.
 *
 * In Python each datagram cost tens of microseconds of the interpreter (a poll, a parse, a
 * reply built and posted): on 32 emulated NICs of the lab that was both CPUs, and the round
 * trips measured the scheduler. Here a datagram costs what the verbs cost.
 *
 * Bounds: what comes from the wire is checked before it is used (magic, kind, the tag under
 * the key, run, the NICs named, the partner's QP and where it is, a sequence number among the
 * probes sent, a length that holds a datagram); every buffer touched is a slot of the one
 * registered buffer, found from our own wr_id; a turn polls at most MAX_BATCHES batches, so
 * the CM events of SIDR are never kept waiting.
 *
 * rdmacli_probe_wait is the phase's sleep as well: Python calls it once per thing of its own
 * (a SIDR event, an ask due, the stop flag's 0.2 s), and it sleeps on the CQ's completion
 * channel and the CM's fd between turns. In the lab, a Python wake per datagram (about 350 a
 * NIC a window of `rdmacli watch`) was most of the agent's CPU; here a wake costs its syscalls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "datapath.h"

#define BATCH 16
#define MAX_BATCHES 64
#define MAX_WAKES 100000            /* rdmacli_probe_wait's turns a call, at most */


static unsigned char *slot_at(const struct rdmacli_probe *s, uint32_t slot)
{
    return (unsigned char *)(uintptr_t)(s->buf + (uint64_t)slot * RDMACLI_PROBE_SLOT);
}

/* A datagram out of a send slot; returns 0 when posted (the slot is the send's until its
 * completion), else the slot goes back to the free list. `posted_ns` (unless NULL): the clock
 * once it is packed and tagged, as it is posted (a probe's round trip is timed from there: its
 * tag is the host's time, not the wire's). */
static int send_datagram(struct ibv_qp *qp, struct rdmacli_probe *s, const struct rdmacli_datagram *d,
                         struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, uint64_t *posted_ns)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    uint32_t slot;
    int rc;

    if (s->nfree == 0)
        return -1;
    slot = s->free_sends[--s->nfree];
    rdmacli_datagram_pack(slot_at(s, slot), s->key, d);
    sge.addr = (uintptr_t)slot_at(s, slot);
    sge.length = RDMACLI_PROBE_PAYLOAD;
    sge.lkey = s->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = qkey;
    if (posted_ns != NULL)
        *posted_ns = rdmacli_now_ns();
    rc = ibv_post_send(qp, &wr, &bad);
    if (rc) {
        s->free_sends[s->nfree++] = slot;
        s->post_errors++;
    }
    return rc;
}

/* Whether a completion is from partner p's QP: its number and where it is (a QP number is one
 * device's: another node's QP may have the same; in the lab a forger's did, and took the
 * partner's replies). `src`: the datagram's source (rdmacli_source). */
static int from_partner(const struct rdmacli_probe_peer *p, const struct ibv_wc *wc, const unsigned char *src)
{
    return p->qpn != 0 && wc->src_qp == p->qpn && rdmacli_same_source(p->source, src);
}

/* A partner's probe: its reply at once, the probe's fields back with our two stamps. The
 * reply's address handle is made from the probe's own completion, one a partner NIC and QP (its
 * tag shows it holds the key): the QP SIDR named has its own, never displaced by another QP
 * claiming the partner (a restarted agent's, or a key holder's), which shares the second. An AH
 * replaced is retired, not destroyed: a UD send's AH must outlive the send (rxe looks it up
 * as it sends), and a reply may still be in flight. */
static void answer(struct ibv_qp *qp, struct rdmacli_probe *s, const struct rdmacli_datagram *in,
                   struct ibv_wc *wc, uint32_t slot, const unsigned char *src, uint64_t t2)
{
    struct rdmacli_probe_peer *p;
    struct rdmacli_datagram out;
    struct ibv_ah *ah;
    uint32_t k;
    int32_t i;

    if (in->dst != s->nic || in->src >= s->nics || (i = s->peer_of_nic[in->src]) < 0 ||
        (uint32_t)i >= s->npeers || s->nfree == 0)
        return;
    p = &s->peers[i];
    k = 2 * (uint32_t)i + (from_partner(p, wc, src) ? 0 : 1);
    if (p->replies[k & 1] >= s->max_replies) {
        if (k & 1)
            s->foreign++; /* more probes than a partner sends, from a QP SIDR did not name */
        return;
    }
    ah = (struct ibv_ah *)(uintptr_t)s->reply_ah[k];
    if (ah == NULL || s->reply_qpn[k] != wc->src_qp ||
        ((k & 1) && memcmp(p->other_source, src, RDMACLI_SOURCE_BYTES) != 0)) {
        struct ibv_ah *made;

        if (ah != NULL && s->nretired >= s->maxretired) {
            s->foreign++; /* a window's churn of QPs claiming partners is bounded */
            return;
        }
        made = ibv_create_ah_from_wc(s->pd, wc, (struct ibv_grh *)slot_at(s, slot), (uint8_t)s->port_num);
        if (made == NULL)
            return;
        if (ah != NULL)
            s->retired_ah[s->nretired++] = (uintptr_t)ah;
        ah = made;
        s->reply_ah[k] = (uintptr_t)made;
        s->reply_qpn[k] = wc->src_qp;
        if (k & 1)
            memcpy(p->other_source, src, RDMACLI_SOURCE_BYTES);
    }
    out = *in;
    out.kind = RDMACLI_REPLY;
    out.t2 = t2;
    out.t3 = rdmacli_now_ns();
    if (send_datagram(qp, s, &out, ah, wc->src_qp, RDMACLI_UDP_QKEY, NULL) == 0) {
        s->replies++;
        p->replies[k & 1]++;
    }
}

/* A reply to one of our probes: from the QP the partner's SIDR named, where SIDR found it, for
 * a probe we sent and have not counted yet. The responder's hold is taken out only when less
 * than the whole. */
static void counted(struct rdmacli_probe *s, const struct rdmacli_datagram *d, const struct ibv_wc *wc,
                    const unsigned char *src, uint64_t t4)
{
    struct rdmacli_probe_peer *p;
    uint64_t t1, host, hold;
    int32_t i;

    if (d->src != s->nic || d->dst >= s->nics || (i = s->peer_of_nic[d->dst]) < 0 ||
        (uint32_t)i >= s->npeers)
        return;
    p = &s->peers[i];
    if (!from_partner(p, wc, src)) {
        s->foreign++; /* a reply from a QP we never probed */
        return;
    }
    if (d->seq < 1 || d->seq > p->sent || p->answered >= p->sent)
        return;
    t1 = p->t1_ns[d->seq - 1];
    if (t1 == 0 || t4 < t1)
        return;
    p->t1_ns[d->seq - 1] = 0; /* counted once */
    host = t4 - t1 > RDMACLI_FLOOR_NS ? t4 - t1 : RDMACLI_FLOOR_NS;
    p->host_ns[p->answered] = host;
    if (d->t3 >= d->t2 && (hold = d->t3 - d->t2) < host && host - hold >= RDMACLI_FLOOR_NS)
        p->net_ns[p->answered] = host - hold;
    else
        p->net_ns[p->answered] = host;
    p->answered++;
}

static int usable(const void *qp, const void *cq, const struct rdmacli_probe *s)
{
    return qp && cq && s && s->buf && s->peers && s->peer_of_nic && s->reply_ah && s->reply_qpn &&
           s->retired_ah &&
           s->free_sends && s->recvs > 0 && s->sends > 0 && s->nfree <= s->sends && s->count > 0 &&
           s->pd;
}

/* Every due probe: each peer's next is due a step after the one before was due (a loop that
 * woke late catches up), none after send_end_ns, none beyond count. */
static void send_due(struct ibv_qp *qp, struct rdmacli_probe *s, uint64_t now)
{
    uint64_t next = 0;
    uint32_t k;

    for (k = 0; k < s->npeers; k++) {
        struct rdmacli_probe_peer *p = &s->peers[k];
        struct rdmacli_datagram d;

        while (p->ah && p->sent < s->count && p->next_due_ns <= now && now < s->send_end_ns) {
            uint64_t posted;

            memset(&d, 0, sizeof(d));
            d.kind = RDMACLI_PROBE;
            memcpy(d.run, s->run, 8);
            d.seq = p->sent + 1;
            d.src = s->nic;
            d.dst = p->nic;
            d.t1 = rdmacli_now_ns();
            if (send_datagram(qp, s, &d, (struct ibv_ah *)(uintptr_t)p->ah, p->qpn, p->qkey, &posted))
                break; /* no slot or the queue is full: due still, the next turn tries */
            p->t1_ns[p->sent++] = posted; /* timed from its post: its tag is not the wire's */
            p->next_due_ns += p->step_ns;
        }
        if (p->ah && p->sent < s->count && p->next_due_ns < s->send_end_ns &&
            (next == 0 || p->next_due_ns < next))
            next = p->next_due_ns;
    }
    s->next_due_ns = next;
}

int rdmacli_probe_turn(void *qp_, void *cq_, struct rdmacli_probe *s)
{
    struct ibv_qp *qp = qp_;
    struct ibv_wc wc[BATCH];
    struct ibv_sge sges[BATCH];
    struct ibv_recv_wr rws[BATCH], *bad;
    struct rdmacli_datagram d;
    uint64_t t_in;
    int got, k, batches, n;

    if (!usable(qp_, cq_, s)) {
        if (s)
            s->status = RDMACLI_BAD_ARGS;
        return 0;
    }
    s->status = RDMACLI_OK;
    s->err = 0;
    for (batches = 0; batches < MAX_BATCHES; batches++) {
        got = ibv_poll_cq((struct ibv_cq *)cq_, BATCH, wc);
        t_in = rdmacli_now_ns(); /* the batch as it came out of the CQ */
        if (got < 0) {
            s->status = RDMACLI_POLL_ERROR;
            s->err = got;
            return 0;
        }
        if (got == 0)
            break;
        n = 0;
        for (k = 0; k < got; k++) {
            uint64_t slot = wc[k].wr_id;

            if (slot >= (uint64_t)s->recvs + s->sends)
                continue; /* not a wr_id of ours */
            if (slot >= s->recvs) { /* a send's completion: its slot is free again */
                if (s->nfree < s->sends)
                    s->free_sends[s->nfree++] = (uint32_t)slot;
                continue;
            }
            if (wc[k].status == IBV_WC_SUCCESS && (wc[k].opcode & IBV_WC_RECV) &&
                wc[k].byte_len >= RDMACLI_GRH_BYTES + RDMACLI_DG_SIZE) {
                int got = rdmacli_datagram_parse(slot_at(s, (uint32_t)slot) + RDMACLI_GRH_BYTES, s->key, &d);
                unsigned char src[RDMACLI_SOURCE_BYTES];

                if (got < 0)
                    s->forged++; /* never answered, counted or let re-target a partner's replies */
                else if (got > 0 && memcmp(d.run, s->run, 8) == 0) {
                    rdmacli_source(slot_at(s, (uint32_t)slot), (wc[k].wc_flags & IBV_WC_GRH) != 0,
                                   wc[k].slid, src);
                    if (d.kind == RDMACLI_PROBE)
                        answer(qp, s, &d, &wc[k], (uint32_t)slot, src, t_in);
                    else
                        counted(s, &d, &wc[k], src, t_in);
                }
            }
            if (wc[k].status == IBV_WC_WR_FLUSH_ERR)
                continue;
            sges[n].addr = (uintptr_t)slot_at(s, (uint32_t)slot);
            sges[n].length = RDMACLI_PROBE_SLOT;
            sges[n].lkey = s->lkey;
            memset(&rws[n], 0, sizeof(rws[n]));
            rws[n].wr_id = slot;
            rws[n].sg_list = &sges[n];
            rws[n].num_sge = 1;
            if (n > 0)
                rws[n - 1].next = &rws[n];
            n++;
        }
        if (n > 0) {
            bad = NULL;
            if (ibv_post_recv(qp, rws, &bad))
                s->post_errors++; /* receives fewer: the queue is deep */
        }
    }
    send_due(qp, s, rdmacli_now_ns());
    return batches;
}

void rdmacli_probe_release(struct rdmacli_probe *s)
{
    uint32_t k;

    if (!s || !s->reply_ah || !s->retired_ah)
        return;
    for (k = 0; k < 2 * s->npeers; k++) {
        if (s->reply_ah[k]) {
            ibv_destroy_ah((struct ibv_ah *)(uintptr_t)s->reply_ah[k]);
            s->reply_ah[k] = 0;
        }
    }
    for (k = 0; k < s->nretired; k++)
        ibv_destroy_ah((struct ibv_ah *)(uintptr_t)s->retired_ah[k]);
    s->nretired = 0;
}

/* Turns until Python has something to do: sleeps (ppoll) on the completion channel and on the
 * CM event channel's fd between them, wakes for the next probe due, and returns 1 when the CM
 * fd is readable (a SIDR event: Python's), 0 when until_ns (CLOCK_MONOTONIC) came, or -1 with
 * s->status set (a turn's error, a signal: RDMACLI_SIGNAL, errno in s->err). Never past
 * until_ns, never more than MAX_WAKES turns. The channel's fd is non-blocking (Python made it
 * so), and the CQ is armed again after each event, before the next turn polls it. */
int rdmacli_probe_wait(void *qp, void *cq, void *channel_, struct rdmacli_probe *s, int cm_fd,
                       uint64_t until_ns)
{
    struct ibv_comp_channel *channel = channel_;
    struct pollfd fds[2];
    struct timespec ts;
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    uint64_t now, wake;
    int wakes, rc;

    if (!channel || !s || cm_fd < 0) {
        if (s)
            s->status = RDMACLI_BAD_ARGS;
        return -1;
    }
    for (wakes = 0; wakes < MAX_WAKES; wakes++) {
        rdmacli_probe_turn(qp, cq, s);
        if (s->status != RDMACLI_OK)
            return -1;
        now = rdmacli_now_ns();
        if (now >= until_ns)
            return 0;
        wake = until_ns;
        if (s->next_due_ns && s->next_due_ns < wake)
            wake = s->next_due_ns > now ? s->next_due_ns : now;
        ts.tv_sec = (time_t)((wake - now) / 1000000000ull);
        ts.tv_nsec = (long)((wake - now) % 1000000000ull);
        fds[0].fd = channel->fd;
        fds[0].events = POLLIN;
        fds[0].revents = 0;
        fds[1].fd = cm_fd;
        fds[1].events = POLLIN;
        fds[1].revents = 0;
        rc = ppoll(fds, 2, &ts, NULL);
        if (rc < 0) {
            s->status = errno == EINTR ? RDMACLI_SIGNAL : RDMACLI_POLL_ERROR;
            s->err = errno;
            return -1;
        }
        if (fds[0].revents & POLLIN) {
            while (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == 0)
                ibv_ack_cq_events(ev_cq, 1);
            if (ibv_req_notify_cq((struct ibv_cq *)cq, 0)) {
                s->status = RDMACLI_POLL_ERROR;
                s->err = errno;
                return -1;
            }
        }
        if (fds[1].revents) {
            rdmacli_probe_turn(qp, cq, s); /* what came with it, before Python's turn */
            return s->status == RDMACLI_OK ? 1 : -1;
        }
    }
    return 0;
}
