/* The peer and fabric cm_run_twin.c plays for native/cmrun.c (cffi reads this whole file): what it
 * answers to each call, as tests/unit/fakerdma.py's FakeBackend is scripted for the Python engine
 * in test_cm_parity.py. An event of -1: no answer at all. */
struct crt_script {
    int addr_event;         /* to rdma_resolve_addr: ADDR_RESOLVED, ADDR_ERROR ... */
    int addr_status;
    int route_event;        /* to rdma_resolve_route */
    int route_status;
    int connect_event;      /* to rdma_connect: ESTABLISHED, REJECTED, UNREACHABLE ... */
    int connect_status;
    unsigned char connect_data[64]; /* its private data (a REJECTED's reason) */
    unsigned int connect_data_len;
    unsigned int peer_sends;       /* once connected, the peer's messages (receives completed) */
    unsigned int size;             /* their bytes */
    int recv_status;               /* their messages' receives complete with this status (a
                                      message bigger than the receive: IBV_WC_LOC_LEN_ERR) */
    int late_event;                /* then one more event on the connection (-1: none) */
    unsigned int disconnect_after; /* the peer disconnects once it has this many of our sends
                                      (0: never on its own) */
    int send_status;               /* our sends complete with this status */
    int answer_disconnect;         /* our DREQ is answered (DISCONNECTED) */
    int connect_fails_errno;       /* rdma_connect itself fails with this errno (0: it does not) */
    int odd_conn;                  /* this connection's request is answered otherwise (-1: none) */
    int odd_event;                 /* with this event (-1: no answer) */
    int odd_status;
    /* the passive side (cmserve.c): the clients' requests (crt_requests queues them), each with
     * this private data (a hello, or none: a C client); connect_event answers rdma_accept */
    unsigned char request_data[64];
    unsigned int request_data_len;
    int echo;                      /* the client echoes each of our sends (ucmatose's client) */
};

struct crt_state {
    uint64_t now_ns;              /* the twin's clock: moved by a wait with nothing to hand out */
    unsigned int ids;             /* made and not destroyed */
    unsigned int qps;
    unsigned int mrs;
    unsigned int cqs;
    unsigned int comps;
    unsigned int sends;           /* our sends the peer received */
    char trace[4096];             /* the CM calls in order: a letter and the connection, "I0 A0 ..." */
    unsigned int rejects;         /* rdma_reject's calls, the last one's reason */
    unsigned char reason[160];
    unsigned int accepted_with_param; /* rdma_accept's calls with parameters (not NULL) */
};

extern struct crt_script crt;
extern struct crt_state crs;
void crt_reset(void);
void crt_requests(unsigned int n); /* n clients ask (CONNECT_REQUEST on the listener, id 1) */
