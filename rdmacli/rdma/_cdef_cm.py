"""C declarations of the rdma_cma.h subset rdmacli uses, after verbs.h's (_cdef.py, whose CHECKED
lists their fields for the layout test): they name verbs' structs, so they are appended to its CDEF.
"""

CMA_CDEF = r"""
/* librdmacm */
struct rdma_event_channel { int fd; };

struct rdma_ib_addr { union ibv_gid sgid; union ibv_gid dgid; __be16 pkey; };

struct rdma_addr {
    union { struct sockaddr src_addr; struct sockaddr_storage src_storage; };
    union { struct sockaddr dst_addr; struct sockaddr_storage dst_storage; };
    union { struct rdma_ib_addr ibaddr; } addr;
};

struct rdma_route {
    struct rdma_addr addr;
    struct ibv_sa_path_rec *path_rec;
    int num_paths;
};

struct rdma_cm_event;

struct rdma_cm_id {
    struct ibv_context *verbs;
    struct rdma_event_channel *channel;
    void *context;
    struct ibv_qp *qp;
    struct rdma_route route;
    int ps;
    uint8_t port_num;
    struct rdma_cm_event *event;
    struct ibv_comp_channel *send_cq_channel;
    struct ibv_cq *send_cq;
    struct ibv_comp_channel *recv_cq_channel;
    struct ibv_cq *recv_cq;
    struct ibv_srq *srq;
    struct ibv_pd *pd;
    int qp_type;
};

struct rdma_conn_param {
    const void *private_data;
    uint8_t private_data_len;
    uint8_t responder_resources;
    uint8_t initiator_depth;
    uint8_t flow_control;
    uint8_t retry_count;
    uint8_t rnr_retry_count;
    uint8_t srq;
    uint32_t qp_num;
};

struct rdma_ud_param {
    const void *private_data;
    uint8_t private_data_len;
    struct ibv_ah_attr ah_attr;
    uint32_t qp_num;
    uint32_t qkey;
};

struct rdma_cm_event {
    struct rdma_cm_id *id;
    struct rdma_cm_id *listen_id;
    int event;
    int status;
    union { struct rdma_conn_param conn; struct rdma_ud_param ud; } param;
};

struct rdma_cm_join_mc_attr_ex { uint32_t comp_mask; uint32_t join_flags; struct sockaddr *addr; };

struct rdma_event_channel *rdma_create_event_channel(void);
struct ibv_context **rdma_get_devices(int *num_devices);
void rdma_free_devices(struct ibv_context **list);
void rdma_destroy_event_channel(struct rdma_event_channel *channel);
int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context, int ps);
int rdma_destroy_id(struct rdma_cm_id *id);
int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr);
int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
                      int timeout_ms);
int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms);
int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr);
int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *qp_init_attr);
void rdma_destroy_qp(struct rdma_cm_id *id);
int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param);
int rdma_establish(struct rdma_cm_id *id);
int rdma_listen(struct rdma_cm_id *id, int backlog);
int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param);
int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len);
int rdma_notify(struct rdma_cm_id *id, int event);
int rdma_disconnect(struct rdma_cm_id *id);
int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context);
int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
                           void *context);
int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr);
int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event);
int rdma_ack_cm_event(struct rdma_cm_event *event);
const char *rdma_event_str(int event);
int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen);
uint16_t rdma_get_src_port(struct rdma_cm_id *id);
uint16_t rdma_get_dst_port(struct rdma_cm_id *id);
"""
