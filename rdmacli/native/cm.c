/* A CM event read, copied and acknowledged in one call (rdmacli/rdma/cm.py's EventChannel.get):
 * through cffi's ABI mode the same took a call each for the read and the ack and a crossing for
 * every field read, per event, a few events per connection. The copy outlives the C event, so
 * no unacknowledged event can make rdma_destroy_id block (rdma_get_cm_event(3)). */
#include <errno.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "datapath.h"

_Static_assert(sizeof(struct ibv_ah_attr) <= RDMACLI_AH_ATTR_BYTES, "ibv_ah_attr outgrew its copy");

int rdmacli_cm_get(void *channel, struct rdmacli_cm_event *out)
{
    struct rdma_cm_event *ev;
    struct timespec ts;
    const struct rdma_conn_param *conn;

    if (rdma_get_cm_event(channel, &ev))
        return errno ? errno : EIO;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    memset(out, 0, sizeof(*out));
    out->t_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    out->event = ev->event;
    out->status = ev->status;
    out->id = (uintptr_t)ev->id;
    out->listen_id = (uintptr_t)ev->listen_id;
    out->ud = ev->id && (ev->id->ps == RDMA_PS_UDP || ev->id->ps == RDMA_PS_IPOIB);
    if (out->ud) {
        const struct rdma_ud_param *ud = &ev->param.ud;

        if (ud->private_data && ud->private_data_len) {
            out->private_data_len = ud->private_data_len;
            memcpy(out->private_data, ud->private_data, ud->private_data_len);
        }
        out->qp_num = ud->qp_num;
        out->qkey = ud->qkey;
        memcpy(out->ah_attr, &ud->ah_attr, sizeof(ud->ah_attr));
    } else {
        conn = &ev->param.conn;
        if (conn->private_data && conn->private_data_len) {
            out->private_data_len = conn->private_data_len;
            memcpy(out->private_data, conn->private_data, conn->private_data_len);
        }
        out->responder_resources = conn->responder_resources;
        out->initiator_depth = conn->initiator_depth;
        out->flow_control = conn->flow_control;
        out->retry_count = conn->retry_count;
        out->rnr_retry_count = conn->rnr_retry_count;
        out->srq = conn->srq;
        out->qp_num = conn->qp_num;
    }
    rdma_ack_cm_event(ev);
    return 0;
}
