/* The peer loops_twin.c's verbs play, and what they recorded (cffi reads this whole file). */
#define LT_EVENTS 4096
#define LT_POSTS 4096

struct lt_event {
    uint64_t at;      /* ns of the twin's clock */
    uint64_t wr_id;
    uint32_t opcode;  /* IBV_WC_SEND, IBV_WC_RDMA_WRITE, IBV_WC_RECV ... */
    uint32_t status;
    uint64_t hold;    /* a receive: the answer's first 8 bytes (big-endian), written as it lands */
};

struct lt_post {
    uint64_t at;
    uint64_t wr_id;   /* the chain's last (signaled) request's */
    uint32_t n;       /* requests in the chain */
    uint32_t signaled;/* how many of them asked for a completion */
    uint32_t opcode;
    uint32_t length;
    uint64_t remote_addr;
    uint32_t rkey;
};

struct loops_twin {
    uint64_t now_ns;               /* the clock: moved only by a poll that finds nothing due */
    uint64_t idle_step_ns;
    int calibrating;               /* the clock moves a ms a reading (the calibration's spin) */         /* a poll with nothing scheduled moves the clock this much */
    /* the peer: what each post (by its index) brings back */
    uint32_t mode;                 /* 1: a ping-pong's responder; 2: a stream's completions */
    uint64_t rtt[1024];            /* 1: the answer to post i lands this long after it */
    uint64_t hold[1024];           /* 1: ... carrying this hold */
    uint64_t send_done[1024];      /* 1 and 2: post i's (signaled) completion this long after it */
    uint64_t recv_addr;            /* 1: where the answers land */
    uint32_t recv_wr_id;
    struct lt_event ev[4096];      /* scheduled, in no order */
    uint32_t nev;
    struct lt_post posts[4096];
    uint32_t nposts;
    uint32_t recvs_posted;
    uint32_t polls;
};

extern struct loops_twin lt;
void *lt_qp(void);
void *lt_cq(void);
