"""C declarations of the rdma_cma.h and verbs.h subset rdmacli uses.

Layouts are hand-written for cffi's ABI mode (no compiler at install time), so every struct and
field here is checked against the installed headers by tests/unit/test_layout.py. Structs marked
PREFIX declare only their leading fields: rdmacli reads them through pointers and never allocates
them, so only the offsets matter. librdmacm's declarations are in _cdef_cm.py (they follow these).
"""

from rdmacli.rdma._cdef_cm import CMA_CDEF

# (struct name, fields to check, check the size too?) -- read by the layout conformance test.
CHECKED = {
    "struct ibv_context_ops": (["poll_cq", "req_notify_cq", "post_send", "post_recv"], True),
    "struct ibv_context": (["device", "ops", "cmd_fd", "async_fd"], False),  # PREFIX
    "struct ibv_pd": (["context", "handle"], True),
    "struct ibv_comp_channel": (["context", "fd", "refcnt"], True),
    "struct ibv_cq": (["context", "channel", "cq_context", "handle", "cqe"], False),  # PREFIX
    "struct ibv_qp": (
        ["context", "qp_context", "pd", "send_cq", "recv_cq", "srq", "handle", "qp_num", "state", "qp_type"],
        False,
    ),  # PREFIX
    "struct ibv_mr": (["context", "pd", "addr", "length", "handle", "lkey", "rkey"], True),
    "struct ibv_ah": (["context", "pd", "handle"], True),
    "struct ibv_sge": (["addr", "length", "lkey"], True),
    "struct ibv_send_wr": (
        ["wr_id", "next", "sg_list", "num_sge", "opcode", "send_flags", "imm_data", "wr"],
        True,
    ),
    "struct ibv_recv_wr": (["wr_id", "next", "sg_list", "num_sge"], True),
    "struct ibv_wc": (
        [
            "wr_id",
            "status",
            "opcode",
            "vendor_err",
            "byte_len",
            "imm_data",
            "qp_num",
            "src_qp",
            "wc_flags",
            "pkey_index",
            "slid",
            "sl",
            "dlid_path_bits",
        ],
        True,
    ),
    "struct ibv_qp_cap": (
        ["max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"],
        True,
    ),
    "struct ibv_qp_init_attr": (
        ["qp_context", "send_cq", "recv_cq", "srq", "cap", "qp_type", "sq_sig_all"],
        True,
    ),
    "struct ibv_global_route": (["dgid", "flow_label", "sgid_index", "hop_limit", "traffic_class"], True),
    "struct ibv_ah_attr": (
        ["grh", "dlid", "sl", "src_path_bits", "static_rate", "is_global", "port_num"],
        True,
    ),
    "struct ibv_grh": (["version_tclass_flow", "paylen", "next_hdr", "hop_limit", "sgid", "dgid"], True),
    "struct ibv_device": (["name", "dev_name", "dev_path", "ibdev_path"], False),  # PREFIX
    "struct ibv_port_attr": (["state", "max_mtu", "active_mtu", "gid_tbl_len"], False),  # PREFIX
    "struct ibv_device_attr": (
        [
            "fw_ver",
            "node_guid",
            "max_mr_size",
            "max_qp",
            "max_qp_wr",
            "max_sge",
            "max_cq",
            "max_cqe",
            "max_mr",
        ],
        False,
    ),  # PREFIX
    "struct ibv_rx_hash_conf": (
        ["rx_hash_function", "rx_hash_key_len", "rx_hash_key", "rx_hash_fields_mask"],
        True,
    ),
    "struct ibv_qp_init_attr_ex": (
        [
            "qp_context",
            "send_cq",
            "recv_cq",
            "srq",
            "cap",
            "qp_type",
            "sq_sig_all",
            "comp_mask",
            "pd",
            "xrcd",
            "create_flags",
            "max_tso_header",
            "rwq_ind_tbl",
            "rx_hash_conf",
            "source_qpn",
            "send_ops_flags",
        ],
        True,
    ),
    "struct rdma_event_channel": (["fd"], True),
    "struct rdma_ib_addr": (["sgid", "dgid", "pkey"], True),
    "struct rdma_addr": (["src_addr", "dst_addr", "addr"], True),
    "struct rdma_route": (["addr", "path_rec", "num_paths"], True),
    "struct rdma_cm_id": (
        [
            "verbs",
            "channel",
            "context",
            "qp",
            "route",
            "ps",
            "port_num",
            "event",
            "send_cq_channel",
            "send_cq",
            "recv_cq_channel",
            "recv_cq",
            "srq",
            "pd",
            "qp_type",
        ],
        True,
    ),
    "struct rdma_conn_param": (
        [
            "private_data",
            "private_data_len",
            "responder_resources",
            "initiator_depth",
            "flow_control",
            "retry_count",
            "rnr_retry_count",
            "srq",
            "qp_num",
        ],
        True,
    ),
    "struct rdma_ud_param": (["private_data", "private_data_len", "ah_attr", "qp_num", "qkey"], True),
    "struct rdma_cm_event": (["id", "listen_id", "event", "status", "param"], True),
    "struct rdma_cm_join_mc_attr_ex": (["comp_mask", "join_flags", "addr"], True),
}

CDEF = r"""
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef uint64_t __be64;

struct sockaddr { unsigned short sa_family; char sa_data[14]; };
struct sockaddr_storage { unsigned short ss_family; char __ss_padding[118]; uint64_t __ss_align; };

union ibv_gid {
    uint8_t raw[16];
    struct { __be64 subnet_prefix; __be64 interface_id; } global;
};

struct ibv_context;
struct ibv_cq;
struct ibv_qp;
struct ibv_srq;
struct ibv_mw;
struct ibv_sa_path_rec;

struct ibv_device {                     /* PREFIX */
    void *_ops[2];
    int node_type;
    int transport_type;
    char name[64];
    char dev_name[64];
    char dev_path[256];
    char ibdev_path[256];
};

struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; };

struct ibv_mw_bind_info { struct ibv_mr *mr; uint64_t addr; uint64_t length; unsigned int mw_access_flags; };

struct ibv_send_wr {
    uint64_t wr_id;
    struct ibv_send_wr *next;
    struct ibv_sge *sg_list;
    int num_sge;
    int opcode;
    unsigned int send_flags;
    union { __be32 imm_data; uint32_t invalidate_rkey; };
    union {
        struct { uint64_t remote_addr; uint32_t rkey; } rdma;
        struct { uint64_t remote_addr; uint64_t compare_add; uint64_t swap; uint32_t rkey; } atomic;
        struct { struct ibv_ah *ah; uint32_t remote_qpn; uint32_t remote_qkey; } ud;
    } wr;
    union { struct { uint32_t remote_srqn; } xrc; } qp_type;
    union {
        struct { struct ibv_mw *mw; uint32_t rkey; struct ibv_mw_bind_info bind_info; } bind_mw;
        struct { void *hdr; uint16_t hdr_sz; uint16_t mss; } tso;
    };
};

struct ibv_recv_wr { uint64_t wr_id; struct ibv_recv_wr *next; struct ibv_sge *sg_list; int num_sge; };

struct ibv_wc {
    uint64_t wr_id;
    int status;
    int opcode;
    uint32_t vendor_err;
    uint32_t byte_len;
    union { __be32 imm_data; uint32_t invalidated_rkey; };
    uint32_t qp_num;
    uint32_t src_qp;
    unsigned int wc_flags;
    uint16_t pkey_index;
    uint16_t slid;
    uint8_t sl;
    uint8_t dlid_path_bits;
};

struct ibv_context_ops {
    void *_compat_query_device;
    void *_compat_query_port;
    void *_compat_alloc_pd;
    void *_compat_dealloc_pd;
    void *_compat_reg_mr;
    void *_compat_rereg_mr;
    void *_compat_dereg_mr;
    void *alloc_mw;
    void *bind_mw;
    void *dealloc_mw;
    void *_compat_create_cq;
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    void *_compat_cq_event;
    void *_compat_resize_cq;
    void *_compat_destroy_cq;
    void *_compat_create_srq;
    void *_compat_modify_srq;
    void *_compat_query_srq;
    void *_compat_destroy_srq;
    void *post_srq_recv;
    void *_compat_create_qp;
    void *_compat_query_qp;
    void *_compat_modify_qp;
    void *_compat_destroy_qp;
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    void *_compat_create_ah;
    void *_compat_destroy_ah;
    void *_compat_attach_mcast;
    void *_compat_detach_mcast;
    void *_compat_async_event;
};

struct ibv_context {                    /* PREFIX */
    struct ibv_device *device;
    struct ibv_context_ops ops;
    int cmd_fd;
    int async_fd;
};

struct ibv_pd { struct ibv_context *context; uint32_t handle; };
struct ibv_comp_channel { struct ibv_context *context; int fd; int refcnt; };

struct ibv_cq {                         /* PREFIX */
    struct ibv_context *context;
    struct ibv_comp_channel *channel;
    void *cq_context;
    uint32_t handle;
    int cqe;
};

struct ibv_qp {                         /* PREFIX */
    struct ibv_context *context;
    void *qp_context;
    struct ibv_pd *pd;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    uint32_t handle;
    uint32_t qp_num;
    int state;
    int qp_type;
};

struct ibv_mr {
    struct ibv_context *context;
    struct ibv_pd *pd;
    void *addr;
    size_t length;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
};

struct ibv_ah { struct ibv_context *context; struct ibv_pd *pd; uint32_t handle; };

struct ibv_qp_cap {
    uint32_t max_send_wr; uint32_t max_recv_wr; uint32_t max_send_sge; uint32_t max_recv_sge;
    uint32_t max_inline_data;
};

struct ibv_qp_init_attr {
    void *qp_context;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_qp_cap cap;
    int qp_type;
    int sq_sig_all;
};

struct ibv_global_route {
    union ibv_gid dgid;
    uint32_t flow_label;
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
};

struct ibv_ah_attr {
    struct ibv_global_route grh;
    uint16_t dlid;
    uint8_t sl;
    uint8_t src_path_bits;
    uint8_t static_rate;
    uint8_t is_global;
    uint8_t port_num;
};

struct ibv_grh {
    __be32 version_tclass_flow;
    __be16 paylen;
    uint8_t next_hdr;
    uint8_t hop_limit;
    union ibv_gid sgid;
    union ibv_gid dgid;
};

struct ibv_device_attr {                /* PREFIX; ibv_query_device is given 512 bytes */
    char fw_ver[64];
    uint64_t node_guid;
    uint64_t sys_image_guid;
    uint64_t max_mr_size;
    uint64_t page_size_cap;
    uint32_t vendor_id;
    uint32_t vendor_part_id;
    uint32_t hw_ver;
    int max_qp;
    int max_qp_wr;
    unsigned int device_cap_flags;
    int max_sge;
    int max_sge_rd;
    int max_cq;
    int max_cqe;
    int max_mr;
    int max_pd;
};

struct ibv_port_attr {                  /* PREFIX; ibv_query_port is given 256 bytes */
    int state;
    int max_mtu;
    int active_mtu;
    int gid_tbl_len;
};

struct ibv_rx_hash_conf {
    uint8_t rx_hash_function;
    uint8_t rx_hash_key_len;
    uint8_t *rx_hash_key;
    uint64_t rx_hash_fields_mask;
};

struct ibv_qp_init_attr_ex {
    void *qp_context;
    struct ibv_cq *send_cq;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_qp_cap cap;
    int qp_type;
    int sq_sig_all;
    uint32_t comp_mask;
    struct ibv_pd *pd;
    void *xrcd;
    uint32_t create_flags;
    uint16_t max_tso_header;
    void *rwq_ind_tbl;
    struct ibv_rx_hash_conf rx_hash_conf;
    uint32_t source_qpn;
    uint64_t send_ops_flags;
};

int ibv_query_port(struct ibv_context *context, uint8_t port_num, void *port_attr);
int ibv_query_device(struct ibv_context *context, void *device_attr);
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context);
int ibv_destroy_comp_channel(struct ibv_comp_channel *channel);
struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector);
int ibv_destroy_cq(struct ibv_cq *cq);
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
int ibv_dereg_mr(struct ibv_mr *mr);
struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
                                     uint8_t port_num);
int ibv_destroy_ah(struct ibv_ah *ah);
int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid);
const char *ibv_wc_status_str(int status);
const char *ibv_get_device_name(struct ibv_device *device);
"""

CDEF += CMA_CDEF
