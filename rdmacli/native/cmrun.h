/* What cmrun.c (the lifecycle) and cmconn.c (a connection's queues and exchange) share; not
 * cffi's: Python sees datapath.h's records only. */
#ifndef RDMACLI_CMRUN_H
#define RDMACLI_CMRUN_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "datapath.h"

#define CM_MAX_DEVICES 16
#define CM_MAX_CQS 64       /* CQs of one device at most (each up to its max_cqe) */
#define CM_FAIR_BATCHES 64  /* polls of one CQ per turn before the others get theirs */
#define CM_POLL_BATCH 32

struct cm_cq {
    struct ibv_cq *cq;
    uint32_t cap, used;
    int backlog;            /* a fair turn left completions in it */
};

struct cm_device {
    struct ibv_context *verbs;
    struct ibv_comp_channel *comp;
    struct ibv_device_attr attr;
    int queried;
    struct cm_cq cqs[CM_MAX_CQS];
    int ncq;
};

/* lockstep: an event a row expects, held until the gate opens (cmflow.c cm_open_gates) */
struct cm_hold {
    int on;
    int row;                /* its row in the plan */
    struct rdmacli_cm_event ev;
};

struct cm_priv {
    struct cm_device devs[CM_MAX_DEVICES];
    int ndev;
    int new_device;         /* a device first seen this slice (Python reads its counters) */
    struct cm_hold *held;   /* lockstep: one per connection */
    uint32_t nheld;         /* how many are on */
    uint64_t gate_opened_ns; /* while a gate's handlers run: when it opened */
    int trial;              /* a server's setup on trial: its failure ends nothing yet (cmserve.c) */
    /* the server's: a CONNECT_REQUEST on its listener into a slot (cmserve.c sets it: the loop
     * calls down into the side that runs it, never up) */
    void (*on_request)(struct rdmacli_cm_plan *p, const struct rdmacli_cm_event *ev);
};

/* cmflow.c */
uint64_t cm_now(void);
struct rdmacli_cm_log *cm_log_entry(struct rdmacli_cm_plan *p); /* NULL: full (never reached) */
int cm_final(int state);
void cm_step_done(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t at, int said);
void cm_enter(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int phase);
void cm_dispatch(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, const struct rdmacli_cm_event *ev);
void cm_log_step(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int step, uint64_t t0,
                 uint64_t t1, int said);
void cm_set_state(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int state);
void cm_fail(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int kind);
void cm_fail_call(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int call, int err);
void cm_progress(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c);
void cm_judge_disconnect(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, uint64_t ev_t);
void cm_open_gates(struct rdmacli_cm_plan *p);
void cm_served(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c);
int cm_setup_qp(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c); /* 0, or it failed */

/* cmrun.c: what rdmacli_cm_run and rdmacli_cm_serve share of the loop */
void cm_settle(struct rdmacli_cm_plan *p);
int cm_pass(struct rdmacli_cm_plan *p, uint64_t slice_end_ns);

/* cmconn.c */
int cm_setup(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c); /* 0, or it failed */
int cm_post_sends(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c);
uint32_t cm_outstanding(const struct rdmacli_cm_plan *p, const struct rdmacli_cm_conn *c);
int cm_drain(struct rdmacli_cm_plan *p, struct cm_cq *q, int batches); /* 1: emptied */
struct cm_cq *cm_cq_of(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c);
void cm_teardown(struct rdmacli_cm_plan *p, struct rdmacli_cm_conn *c, int id_too);
void cm_release_devices(struct rdmacli_cm_plan *p);

#endif
