/* cm.c with librdmacm's rdma_get_cm_event and rdma_ack_cm_event replaced by a script
 * (test_cm_event_copy.py): the event the test built is handed out, or the errno it chose, and
 * every acknowledgement is counted. The header is read first, then the two names are redefined,
 * then cm.c itself is included, so only its calls are the twin's. */
#include <errno.h>
#include <rdma/rdma_cma.h>

#include "datapath.h"
#include "cm_twin.h"

static struct rdma_cm_event *twin_event;
static int twin_err, twin_acks;

void twin_cm_next(void *event, int err)
{
    twin_event = event;
    twin_err = err;
}

int twin_cm_acked(void)
{
    return twin_acks;
}

static int twin_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    if (twin_err || !twin_event) {
        errno = twin_err ? twin_err : EAGAIN;
        return -1;
    }
    *event = twin_event;
    twin_event = NULL;
    return 0;
}

static int twin_ack_cm_event(struct rdma_cm_event *event)
{
    twin_acks++;
    return 0;
}

#define rdma_get_cm_event twin_get_cm_event
#define rdma_ack_cm_event twin_ack_cm_event
#include "cm.c"
