/* rdmacli's native data path: declarations shared by its C (datapath.c, lat.c, bw.c, probe.c) and the cffi build (_build.py).
 * Keep this file plain: cffi's cdef parses the part between the markers. */
#ifndef RDMACLI_DATAPATH_H
#define RDMACLI_DATAPATH_H

#include <stdint.h>
#include <stddef.h>

/* cdef-begin */
#define RDMACLI_OP_SEND 0
#define RDMACLI_OP_WRITE 1
#define RDMACLI_OP_WRITE_POLL 2 /* perftest's ib_write_lat: an RDMA WRITE whose last byte counts,
                                   seen by the peer polling its memory (no completion there) */

#define RDMACLI_OK 0         /* the cap or the slice's end came between two exchanges */
#define RDMACLI_DEADLINE 1   /* the hard deadline passed with an exchange in flight */
#define RDMACLI_POST_ERROR 2 /* ibv_post_send/recv failed: err is its return value */
#define RDMACLI_WC_ERROR 3   /* a completion with an error: err is its ibv_wc_status */
#define RDMACLI_POLL_ERROR 4 /* ibv_poll_cq failed */
#define RDMACLI_FOREIGN 5    /* a completion of another QP: the CQ was not this QP's alone */
#define RDMACLI_BAD_ARGS 6   /* a size, cap or buffer that the loop refuses */
#define RDMACLI_SIGNAL 7     /* a signal came while it slept: Python serves it (an exchange in
                                flight is handed over, as at RDMACLI_DEADLINE) */

struct rdmacli_lat {
    /* set once by Python: the QP's buffers, as registered */
    int op;                /* RDMACLI_OP_SEND, RDMACLI_OP_WRITE (RDMA WRITE with immediate) or
                              RDMACLI_OP_WRITE_POLL */
    int carries_hold;      /* the answer's first 8 bytes are the responder's hold (rdmacli's
                              own exchange; perftest's answers carry nothing) */
    uint32_t size;         /* bytes of each message, both ways */
    uint64_t send_addr;    /* the message leaves from here (size bytes, send_lkey) */
    uint32_t send_lkey;
    uint64_t recv_addr;    /* receives land here (size bytes, recv_lkey) */
    uint32_t recv_lkey;
    uint32_t recv_size;    /* bytes a receive is posted for (0: size): a size sweep's largest,
                              so that a receive posted before the next size takes its message */
    uint64_t remote_addr;  /* RDMACLI_OP_WRITE: the peer's receive buffer */
    uint32_t rkey;
    uint32_t max_inline;   /* a message of at most this many bytes is posted inline */
    uint64_t send_wr_id;   /* wr_ids as Python's handler knows them */
    uint64_t recv_wr_id;
    uint32_t max_sends;    /* sends in flight at most (the send queue's room for this loop) */
    uint64_t spin_ns;      /* polls this long without a completion, then sleeps on the CQ's
                              completion channel (UINT64_MAX: spins, as perftest does) */
    int nic_clock;         /* the CQ is an ibv_cq_ex (rdmacli_create_cq_ex), polled as one:
                              RDMACLI_CLOCK_NIC with completion timestamps, RDMACLI_CLOCK_EX
                              without (the lab's test of that poll path), else 0 */
    uint64_t nic_mask;     /* RDMACLI_CLOCK_NIC: completion_timestamp_mask (the counter's bits) */
    uint64_t nic_khz;      /* and hca_core_clock, the counter's rate */
    uint64_t nic_last;     /* the last answer's completion timestamp in this call (0: none) */
    /* kept across calls */
    uint64_t cal_cycles;   /* the clock's calibration: a cycle count and CLOCK_MONOTONIC (ns) */
    uint64_t cal_ns;       /* taken together (rdmacli_lat_calibrate), refined at each call's end */
    double ns_per_cycle;
    uint64_t t_post;       /* the exchange in flight: its post time (ns, CLOCK_MONOTONIC) */
    int awaiting;          /* client: an answer is awaited */
    uint32_t sends_out;    /* sends posted here whose completion has not been polled */
    uint64_t tx_seq;       /* RDMACLI_OP_WRITE_POLL: messages written, and seen arrive */
    uint64_t rx_seq;
    uint64_t sends_posted; /* every send these loops posted, and every send completion of this */
    uint64_t sends_done;   /* QP they polled (a side that then disconnects waits for its last) */
    /* the last call's end */
    uint32_t timed;        /* rdmacli_lat_server: round trips written to rtt_ns */
    int status;            /* RDMACLI_* */
    int err;
    int wc_opcode;         /* RDMACLI_WC_ERROR: the failed completion's opcode and wr_id */
    uint64_t wc_wr_id;
    uint64_t polls;        /* ibv_poll_cq calls of the last call (for the profile) */
    uint64_t sleeps;       /* sleeps on the completion channel of the last call */
};

#define RDMACLI_CLOCK_HOST 0 /* the host's cycle counter */
#define RDMACLI_CLOCK_NIC 1
#define RDMACLI_CLOCK_EX 2

#define RDMACLI_CHAIN_BASE 4294967296ull /* a chain's wr_id: this plus its length (window.py) */
#define RDMACLI_MAX_CHAIN 64

struct rdmacli_bw {
    /* set once by Python */
    int opcode;            /* IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ or IBV_WR_SEND */
    uint32_t size;
    uint64_t addr;         /* every message from (or, READ, into) this buffer */
    uint32_t lkey;
    uint64_t remote_addr;  /* WRITE and READ: the peer's buffer, size bytes */
    uint32_t rkey;
    uint32_t window;       /* messages in flight at most */
    uint32_t chain;        /* messages a doorbell, at most RDMACLI_MAX_CHAIN; the last signaled */
    uint64_t limit;        /* messages to post in all (the count) */
    /* kept across calls; Python adds the completions its own loop polled between calls */
    uint64_t posted;
    uint64_t completed;
    /* the last call's end */
    int status;
    int err;
    int wc_opcode;
    uint64_t wc_wr_id;
    uint64_t polls;
};

/* The probe's datagram (probe.c; rdmacli/probe/wire.py reads these lines, so that C and Python
 * say it once): big-endian fields at these offsets, padded with zeros to the payload. */
#define RDMACLI_PROBE 1          /* its kinds */
#define RDMACLI_REPLY 2
#define RDMACLI_DG_MAGIC 1380995650 /* "RPRB" as a big-endian 32-bit word, at offset 0 */
#define RDMACLI_DG_KIND 4        /* 1 byte, then 3 zero bytes */
#define RDMACLI_DG_RUN 8         /* 8 bytes: the run (a window) it belongs to */
#define RDMACLI_DG_SEQ 16        /* 32 bits: the probe's number, from 1 */
#define RDMACLI_DG_SRC 20        /* 32 bits: the prober's NIC (rank * rails + rail) */
#define RDMACLI_DG_DST 24        /* 32 bits: the responder's NIC */
#define RDMACLI_DG_T1 28         /* 64 bits: the prober's clock at post (ns) */
#define RDMACLI_DG_T2 36         /* 64 bits: the responder's at receive */
#define RDMACLI_DG_T3 44         /* 64 bits: the responder's at its reply's post */
#define RDMACLI_DG_TAG 52        /* 64 bits: SipHash-2-4 of the bytes before it, under the key */
#define RDMACLI_DG_SIZE 60       /* the fields' end */
#define RDMACLI_KEY_BYTES 16     /* SipHash's key: the fabric's (watch) or the run's (mesh) */
#define RDMACLI_PROBE_PAYLOAD 64 /* bytes sent */
#define RDMACLI_PROBE_SLOT 128   /* a buffer slot: the 40-byte GRH and the payload */
#define RDMACLI_GRH_BYTES 40
/* Where a datagram came from, as a receive's GRH area and its completion say (a UD QP number is
 * only one device's: a QP of another node may have the same number). A source is the sender's
 * GID (RoCE v2 over IPv4: ::ffff:a.b.c.d) then its LID, big-endian; a GID of zeros where the
 * datagram had no GRH, a LID of zero where the fabric has none (RoCE) */
#define RDMACLI_GRH_SGID 8       /* the GRH's source GID (InfiniBand, RoCE over IPv6) */
#define RDMACLI_GRH_IP4 20       /* RoCE v2 over IPv4: its IPv4 header, 20 zero bytes before it */
#define RDMACLI_SOURCE_BYTES 18
#define RDMACLI_FLOOR_NS 500     /* figures.RTT_FLOOR_US: no wire's round trip is shorter */
#define RDMACLI_UDP_QKEY 19088743 /* 0x01234567, RDMA_UDP_QKEY: rdma_cm's UD QPs */

struct rdmacli_datagram {
    uint32_t kind;
    unsigned char run[8];
    uint32_t seq, src, dst;
    uint64_t t1, t2, t3;
};

/* 1 and the fields when p holds a probe or reply (magic and kind checked) whose tag is right
 * under key, -1 when its tag is wrong (forged, or another key's), else 0; and the inverse,
 * RDMACLI_PROBE_PAYLOAD bytes, tagged (Python's wire.py is held to both by a unit test) */
int rdmacli_datagram_parse(const unsigned char *p, const unsigned char *key, struct rdmacli_datagram *d);
void rdmacli_datagram_pack(unsigned char *p, const unsigned char *key, const struct rdmacli_datagram *d);
/* SipHash-2-4 (Aumasson and Bernstein's reference): a keyed MAC for short inputs, the tag */
uint64_t rdmacli_siphash24(const unsigned char *key, const unsigned char *in, size_t len);
/* A datagram's source (RDMACLI_SOURCE_BYTES into out) from its GRH area (has_grh: the
 * completion's IBV_WC_GRH) and its completion's slid; and whether a datagram's source is a
 * partner's (as SIDR's AH reaches it): by GID where both have one, else by LID, else not */
void rdmacli_source(const unsigned char *grh, int has_grh, uint32_t slid, unsigned char *out);
int rdmacli_same_source(const unsigned char *partner, const unsigned char *got);

struct rdmacli_probe_peer {
    /* set by Python when the partner resolved (SIDR) and as it paces the probes */
    uint32_t nic;          /* the partner's NIC number */
    uint32_t qpn;
    uint32_t qkey;
    uint64_t ah;           /* its struct ibv_ah *, as an address (0: not resolved) */
    uint64_t next_due_ns;  /* CLOCK_MONOTONIC: its next probe */
    uint64_t step_ns;
    uint64_t *t1_ns;       /* count entries each: probe k's post time (0 once counted) */
    uint64_t *host_ns;     /* the answered probes' round trips, host and network */
    uint64_t *net_ns;
    /* counted here */
    uint32_t sent;
    uint32_t answered;
    uint32_t replies[2];   /* its probes answered: from the QP SIDR named, from any other */
    /* set by Python with qpn: where that QP is (rdmacli_source's form, from SIDR's AH); here:
     * where the other QP that claimed it last is (its reply AH's) */
    unsigned char source[RDMACLI_SOURCE_BYTES];
    unsigned char other_source[RDMACLI_SOURCE_BYTES];
};

struct rdmacli_probe {
    /* set once by Python */
    unsigned char run[8];
    unsigned char key[16]; /* the datagrams' MAC key (RDMACLI_KEY_BYTES) */
    uint32_t nic;          /* this NIC's number */
    uint32_t count;        /* probes a partner, at most */
    uint32_t max_replies;  /* a partner's probes answered a window, at most, from each of its two
                            * AHs' QPs (timing.replies_bound): a flood claiming it costs it nothing */
    uint32_t recvs;        /* receive slots are 0..recvs-1, send slots recvs..recvs+sends-1 */
    uint32_t sends;
    uint64_t buf;          /* the registered buffer: (recvs + sends) slots */
    uint32_t lkey;
    uint32_t port_num;
    void *pd;
    uint32_t npeers;
    struct rdmacli_probe_peer *peers;
    uint32_t nics;         /* entries of peer_of_nic */
    int32_t *peer_of_nic;  /* a NIC number -> its partner index, -1: not a partner */
    /* a partner index i -> two AHs its probes are answered by (made here), each with the QP it
     * is to: [2i] to the QP SIDR named (peers[i].qpn), [2i + 1] to the last other QP that
     * claimed the partner (a restarted agent, or a key holder). An AH replaced goes to retired_ah,
     * destroyed only at release (a reply in flight may still name it), at most maxretired */
    uint64_t *reply_ah;
    uint32_t *reply_qpn;
    uint64_t *retired_ah;
    uint32_t nretired;
    uint32_t maxretired;
    uint32_t *free_sends;  /* send slots free (nfree of them) */
    uint32_t nfree;
    uint64_t send_end_ns;  /* no probe leaves after this */
    /* out */
    uint64_t next_due_ns;  /* the earliest probe still due (0: none) */
    uint64_t replies;      /* partners' probes answered */
    uint64_t forged;       /* datagrams of this format whose tag is wrong: dropped */
    uint64_t foreign;      /* answers with a good tag from another QP than SIDR named (or from
                            * another node's QP of its number), and probes from such a QP past
                            * max_replies or maxretired: dropped */
    uint64_t post_errors;
    int status;
    int err;
};

int rdmacli_probe_turn(void *qp, void *cq, struct rdmacli_probe *s);
int rdmacli_probe_wait(void *qp, void *cq, void *channel, struct rdmacli_probe *s, int cm_fd,
                       uint64_t until_ns);
void rdmacli_probe_release(struct rdmacli_probe *s);
int rdmacli_bw_stream(void *qp, void *cq, struct rdmacli_bw *s, uint64_t post_until_ns,
                      uint64_t slice_end_ns, uint64_t idle_ns);
int rdmacli_lat_client(void *qp, void *cq, struct rdmacli_lat *s, uint64_t *rtt_ns,
                       uint64_t *hold_ns, uint64_t *nic_ns, uint32_t cap, uint64_t slice_end_ns,
                       uint64_t deadline_ns);
int rdmacli_lat_server(void *qp, void *cq, struct rdmacli_lat *s, uint64_t *rtt_ns,
                       uint32_t cap, uint64_t slice_end_ns, uint64_t idle_ns);
uint64_t rdmacli_now_ns(void);
int rdmacli_nic_clock(void *verbs, uint64_t *mask, uint64_t *khz);
void *rdmacli_create_cq_ex(void *verbs, int cqe, void *channel, int timestamps);
uint64_t rdmacli_nic_ticks_ns(uint64_t from, uint64_t to, uint64_t mask, uint64_t khz);
void rdmacli_lat_calibrate(struct rdmacli_lat *s, uint64_t spin_ns);

#define RDMACLI_AH_ATTR_BYTES 64 /* room for a struct ibv_ah_attr (cm.c asserts it fits) */

/* cdef-end */

#include "cmplan.h" /* the connection manager's: its own cdef section */

#define POLL_BATCH 8 /* completions a poll of lat's and bw's loops takes, at most */

#endif
