/* The connection manager's plan and records (cm.c, cmrun.c, cmflow.c, cmconn.c, cmserve.c),
 * declared once for C and for Python: _build.cdef() reads what lies between the markers, as it
 * does datapath.h's. */
#ifndef RDMACLI_CMPLAN_H
#define RDMACLI_CMPLAN_H

#include <stdint.h>

/* cdef-begin */
/* A CM event as rdmacli_cm_get copies it (cm.c): the fields rdma_get_cm_event(3) documents. */
struct rdmacli_cm_event {
    uint64_t t_ns;         /* CLOCK_MONOTONIC when it was read (Python's time.monotonic's clock) */
    int event;
    int status;
    uint64_t id;           /* the struct rdma_cm_id * and the listening one, as numbers */
    uint64_t listen_id;
    int ud;                /* the id is of a datagram port space: qkey and ah_attr are set */
    uint8_t private_data_len;
    uint8_t private_data[255];
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint32_t qp_num;
    uint32_t qkey;
    uint8_t ah_attr[64];   /* RDMACLI_AH_ATTR_BYTES: a struct ibv_ah_attr's bytes */
};
int rdmacli_cm_get(void *channel, struct rdmacli_cm_event *out); /* 0, or the errno */

/* The active side of rdma_cm(7) in C (cmrun.c, cmconn.c): many connections of one exchange,
 * run by the engine's lifecycle rows (engine/lifecycle.py), which Python hands over in the plan:
 * the rows stay the one place a transition is declared. Phases are lifecycle.Phase's, in its
 * order (a unit test holds the numbers to it); a row's action is one of the handlers below. */
#define RDMACLI_PH_START 0
#define RDMACLI_PH_RESOLVE_ADDR 1
#define RDMACLI_PH_RESOLVE_ROUTE 2
#define RDMACLI_PH_CREATE_QP 3
#define RDMACLI_PH_CONNECT 4
#define RDMACLI_PH_ACCEPT 5
#define RDMACLI_PH_JOIN 6
#define RDMACLI_PH_WAIT_FOR_PEER 7
#define RDMACLI_PH_DATA 8
#define RDMACLI_PH_DISCONNECT 9
#define RDMACLI_PH_SETTLE 10
#define RDMACLI_CM_PHASES 11
#define RDMACLI_PH_NONE -1       /* a row's next: the connection ends there */

#define RDMACLI_ACT_ADDR_RESOLVED 1 /* the rows' actions C has handlers for (on_<action>) */
#define RDMACLI_ACT_ROUTE_RESOLVED 2
#define RDMACLI_ACT_ESTABLISHED 3
#define RDMACLI_ACT_DISCONNECTED 4

/* cmtime's steps as C stamps them (timing.STEP_ORDER's names; DISPATCH: rdmacli's own time from
 * an event's read to its next call of the CM) */
#define RDMACLI_ST_CREATE_ID 0
#define RDMACLI_ST_RESOLVE_ADDR 1
#define RDMACLI_ST_RESOLVE_ROUTE 2
#define RDMACLI_ST_CREATE_QP 3
#define RDMACLI_ST_CONNECT 4
#define RDMACLI_ST_DISCONNECT 5
#define RDMACLI_ST_DESTROY_QP 6
#define RDMACLI_ST_DESTROY_ID 7
#define RDMACLI_ST_DISPATCH 8
#define RDMACLI_ST_BIND_ADDR 9   /* lockstep with a source address: cmtime's bind step */
#define RDMACLI_ST_ACCEPT 10      /* the server: from its accept to the ESTABLISHED */
#define RDMACLI_CM_STEPS 11

/* how a connection failed (its record's fail_kind) */
#define RDMACLI_CF_NONE 0
#define RDMACLI_CF_EVENT 1       /* an error event: fail_event, fail_status */
#define RDMACLI_CF_CALL 2        /* a call failed: fail_call, fail_err */
#define RDMACLI_CF_REFUSED 3     /* rdma_connect said ECONNREFUSED at once (iWARP: nobody listens) */
#define RDMACLI_CF_WC 4          /* a completion failed: wc_status, wc_opcode */
#define RDMACLI_CF_DEADLINE 5    /* its phase's deadline passed */
#define RDMACLI_CF_UNEXPECTED 6  /* an event its phase has no row for: fail_event */
#define RDMACLI_CF_PEER_ENDED 7  /* the peer disconnected before the exchange was complete */

/* the calls a failure names (fail_call; Python says them as rdma.cm's RdmaCallError does) */
#define RDMACLI_CALL_CREATE_ID 1
#define RDMACLI_CALL_RESOLVE_ADDR 2
#define RDMACLI_CALL_RESOLVE_ROUTE 3
#define RDMACLI_CALL_CREATE_CQ 4
#define RDMACLI_CALL_CREATE_QP 5
#define RDMACLI_CALL_REG_MR 6
#define RDMACLI_CALL_POST_RECV 7
#define RDMACLI_CALL_POST_SEND 8
#define RDMACLI_CALL_CONNECT 9
#define RDMACLI_CALL_POLL_CQ 10
#define RDMACLI_CALL_SET_OPTION 11
#define RDMACLI_CALL_GET_CM_EVENT 12
#define RDMACLI_CALL_QUERY_DEVICE 13
#define RDMACLI_CALL_BIND_ADDR 14
#define RDMACLI_CALL_ACCEPT 15

/* a connection's state (outcome.State's, by name in Python) */
#define RDMACLI_CS_PENDING 0
#define RDMACLI_CS_ESTABLISHED 1
#define RDMACLI_CS_DONE 2
#define RDMACLI_CS_FAILED 3
#define RDMACLI_CS_REJECTED 4  /* the server turned its request away (Python said why) */

#define RDMACLI_EX_BARE 0        /* events (bare.py): connect, then disconnect */
#define RDMACLI_EX_CMATOSE 1     /* connect (cmatose.py): receive count, echo count, the server ends */

#define RDMACLI_SLICE 8          /* the slice ended or the log is full: Python renders, calls again */
#define RDMACLI_RUN_FAILED 9     /* a call the whole run needs failed (run_call, run_err) */
#define RDMACLI_SOCKADDR_BYTES 128

struct rdmacli_cm_row {
    int phase;
    int event;
    int next;
    int action;
};

/* what an observer is told of, in order (only when log_events asks): a CM event read, or a
 * step's span (a connection's whole run adds at most RDMACLI_CM_LOG_PER_CONN entries: a log of
 * that many per connection never fills). The steps' figures are the plan's own (steps). */
#define RDMACLI_CM_LOG_PER_CONN 24
#define RDMACLI_LOG_EVENT 0
#define RDMACLI_LOG_STEP_SAID 2  /* a step's span an observer is told of (Flow.step_done) */
struct rdmacli_cm_log {
    int kind;
    int32_t conn;          /* the connection's index (-1: none of ours) */
    int what;              /* the event (RDMA_CM_EVENT_*) or the step (RDMACLI_ST_*) */
    int status;            /* an event's */
    uint64_t t0_ns;        /* an event's read; a step's start */
    uint64_t t1_ns;        /* a step's end */
    uint32_t qp_num;       /* an event's connection parameters (CmEvent.params) */
    uint8_t private_data_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
};

struct rdmacli_cm_conn {
    uint32_t index;
    int phase;
    int state;
    int connected;
    int disconnect_sent;
    int fail_kind;
    int fail_phase;        /* where it failed */
    int fail_event;
    int fail_status;
    int fail_call;
    int fail_err;
    int wc_status;
    int wc_opcode;
    uint8_t fail_data[148]; /* a REJECTED's private data (the peer's reason) */
    uint32_t fail_data_len;
    uint32_t window;       /* work requests a queue keeps outstanding (conn.window) */
    uint32_t max_qp_wr;    /* the device's limits (RDMACLI_CF_LIMIT's words) */
    uint32_t max_cqe;
    uint32_t received;
    uint32_t sent;
    uint32_t sends_posted;
    uint32_t recvs_posted;
    uint32_t unconfirmed;  /* sends confirmed by the server's disconnect, not their completions */
    uint64_t bytes_received;
    uint64_t bytes_sent;
    uint64_t deadline_ns;  /* 0: none */
    uint64_t step_t0[11];  /* RDMACLI_CM_STEPS: a step begun, not ended (0: none) */
    int unanswered;        /* our disconnect was not answered in time: torn down without it */
    uint64_t event_read_ns;
    unsigned char local[128];  /* RDMACLI_SOCKADDR_BYTES: struct sockaddrs (family 0: unknown) */
    unsigned char remote[128];
    char device[64];
    uint32_t port_num;
    /* C's own */
    void *id;
    void *mr;
    void *buf;
    void *cq;
    uint32_t cq_slots;
    int torn_down;
    uint32_t count;        /* its exchange's messages and their size (a server's: its client's hello's) */
    uint32_t size;
    /* the server's (cmserve.c): a request that Python decides between two slices */
    int decision;          /* RDMACLI_DECIDE_* (Python's, read by C's next slice) */
    int no_room;           /* its QP found no room on the device (no_room_call, no_room_err):
                            * undecided again, for Python to turn it away in words */
    int no_room_call;
    int no_room_err;
    uint8_t request_data[64]; /* the CONNECT_REQUEST's private data, its first bytes (a hello) */
    uint32_t request_data_len;
    uint8_t reason[148];   /* a reject's reason, the REJECT's private data */
    uint32_t reason_len;
    uint64_t request_ns;   /* when its CONNECT_REQUEST was read */
};

struct rdmacli_cm_stepstat { /* one step over every connection: timing.py's StepStats, in ns */
    uint64_t first_ns;     /* the earliest start */
    uint64_t last_ns;      /* the latest end */
    int64_t total_ns;      /* the spans' sum */
    int64_t least_ns;
    int64_t most_ns;
    uint32_t count;
};

struct rdmacli_cm_plan {
    /* set once by Python */
    void *channel;         /* the flow's CM event channel (non-blocking) */
    unsigned char dst[128];
    unsigned char src[128];
    int has_src;
    int ps;
    uint32_t connections;
    int resolve_ms;
    int tos;               /* -1: not set */
    int ack_timeout;       /* -1: not set */
    uint64_t limit_ns[11]; /* RDMACLI_CM_PHASES: each phase's bound (0: none) */
    uint64_t overall_end_ns; /* CLOCK_MONOTONIC: the run's own deadline (0: none) */
    struct rdmacli_cm_row rows[16];
    uint32_t nrows;
    int error_events[8];
    uint32_t nerror;
    int informational[4];
    uint32_t ninfo;
    int exchange;          /* RDMACLI_EX_* */
    uint32_t count;
    uint32_t size;
    uint32_t max_window;   /* conn.MAX_WINDOW */
    uint8_t private_data[56];
    uint32_t private_data_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t retry_count;
    uint8_t rnr_retry_windowed;  /* rnr_retry_count when the count is beyond the window */
    uint8_t rnr_retry_plain;
    int log_events;        /* 1: every CM event is logged (an observer shows them) */
    int stop;              /* set by Python's thread while C runs: end the slice at the next turn */
    int lockstep;          /* cmtime's order: each step for every connection before the next */
    struct rdmacli_cm_conn *conns;
    struct rdmacli_cm_log *log;
    uint32_t log_cap;
    /* out */
    uint32_t log_len;      /* Python empties it between calls */
    uint32_t started;
    uint32_t finished;
    int run_call;
    int run_err;
    uint64_t now_ns;       /* the last turn's clock */
    /* every step's figures, kept here rather than logged span by span (a step is logged only
     * when log_events asks for it to be said): Python merges them once, at close */
    struct rdmacli_cm_stepstat steps[11]; /* RDMACLI_CM_STEPS */
    /* the server's (cmserve.c; NULL listen_id: the client) */
    void *listen_id;       /* the listener (Python's cm_id): its requests take the slots in conns */
    uint32_t *ended;       /* out: the slots that ended since Python last looked (connections of them) */
    uint32_t nended;       /* Python empties it between calls */
    uint32_t acted;        /* out: the requests whose decision C has carried out, in order */
    int look;              /* out: a request read, a connection ended, the slots full: Python looks */
    int listener_event;    /* out: an error event of the listener's own (DEVICE_REMOVAL) */
    void *priv;            /* C's own: the devices' CQs */
};

int rdmacli_cm_run(struct rdmacli_cm_plan *p, uint64_t slice_end_ns, int settle);
void rdmacli_cm_close(struct rdmacli_cm_plan *p);

#define RDMACLI_DECIDE_NONE 0
#define RDMACLI_DECIDE_ACCEPT 1  /* count and size set: set up, accepted, served (cmatose's server) */
#define RDMACLI_DECIDE_REJECT 2  /* reason set: rejected, its id destroyed */
/* The passive side (cmserve.c): requests on the listener take slots (conns[started]); Python
 * decides each (decision) between slices, C carries the decisions out at its next call, serves
 * the accepted, and lists each slot that ended (ended) for Python to read, then retire. */
int rdmacli_cm_serve(struct rdmacli_cm_plan *p, uint64_t slice_end_ns, int settle);
void rdmacli_cm_retire(struct rdmacli_cm_plan *p, uint32_t slot);
/* cdef-end */

#endif
