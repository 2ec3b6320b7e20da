/* The script probe_twin.c's verbs follow, and what they recorded (cffi reads this whole file). */
#define TWIN_WCS 512
#define TWIN_SENDS 1024
#define TWIN_AHS 256
#define TWIN_AH_BASE 4096

struct twin_wc {
    uint64_t wr_id;
    uint32_t status;
    uint32_t opcode;
    uint32_t byte_len;
    uint32_t src_qp;
    uint32_t wc_flags;         /* IBV_WC_GRH: the slot starts with the sender's GRH */
    uint32_t slid;
};

struct twin_send {
    uint64_t wr_id;
    uint64_t ah;
    uint32_t qpn;
    uint32_t qkey;
    uint32_t length;
    unsigned char payload[64];
};

struct twin {
    struct twin_wc wc[512];    /* what the polls return, in order */
    uint32_t nwc;
    uint32_t polled;
    int poll_error;
    int send_fails;            /* the next sends refused (a full send queue) */
    uint64_t now_ns;           /* the clock */
    struct twin_send sent[1024];
    uint32_t nsent;
    uint32_t ah_qpn[256];      /* AH k (at TWIN_AH_BASE + 16 k) was made for this QP */
    uint32_t nahs;
    uint64_t destroyed[256];
    uint32_t ndestroyed;
    uint64_t reposted[512];    /* receive slots posted again */
    uint32_t nreposted;
};

extern struct twin twin;
