/* The CM's events as the loop reads them (cmrun.c's read_events): straight from the channel, or,
 * in cmtime's order (lockstep), from a thread of their own that reads each as it comes, stamps it
 * and queues it, as cmtime's event thread does: while the loop sends a step's requests for
 * every connection, their answers are read (and their step ends) at once, not after the last
 * request. The thread takes no signal (Python's are the loop's) and ends before any id goes. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cmrun.h"

struct cm_reader {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t room;
    int wake;                  /* eventfd: events queued (the loop polls it instead of the channel) */
    int quit;                  /* eventfd: the thread is to end */
    int err;                   /* rdma_get_cm_event's failure (0: none) */
    struct rdmacli_cm_event *queue;
    uint32_t head, len, cap;
};

static void *read_all(void *arg)
{
    struct rdmacli_cm_plan *p = arg;
    struct cm_reader *r = ((struct cm_priv *)p->priv)->reader;
    struct pollfd fds[2] = {{.fd = ((struct rdma_event_channel *)p->channel)->fd, .events = POLLIN},
                            {.fd = r->quit, .events = POLLIN}};
    const uint64_t one = 1;

    /* a poll and a read an event (a read more to learn there is none, and a wake for every
     * event, cost a connection ~20 µs of "resolve addr" under TCG: the loop is woken only when
     * its queue was empty, and drains it all) */
    for (;;) {
        struct rdmacli_cm_event ev;
        int err, was_empty;

        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents)
            return NULL;
        if (!fds[0].revents)
            continue;
        pthread_mutex_lock(&r->mu);
        while (r->len == r->cap) /* the loop is behind: the kernel holds the rest */
            pthread_cond_wait(&r->room, &r->mu);
        pthread_mutex_unlock(&r->mu);
        err = rdmacli_cm_get(p->channel, &ev);
        if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
            continue;
        pthread_mutex_lock(&r->mu);
        was_empty = r->len == 0;
        if (err)
            r->err = err;
        else
            r->queue[(r->head + r->len++) % r->cap] = ev;
        pthread_mutex_unlock(&r->mu);
        if ((was_empty || err) && write(r->wake, &one, sizeof(one)) < 0)
            return NULL;
        if (err)
            return NULL;
    }
    return NULL;
}

/* The thread started (no signal of the process reaches it); 0, or the errno */
int cm_reader_start(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;
    struct cm_reader *r = calloc(1, sizeof(*r));
    sigset_t all, old;
    int err;

    if (!r)
        return ENOMEM;
    r->cap = 8 * (p->connections ? p->connections : 1) + 64; /* a connection's events, and more */
    r->queue = calloc(r->cap, sizeof(*r->queue));
    r->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->quit = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->room, NULL);
    v->reader = r;
    if (!r->queue || r->wake < 0 || r->quit < 0) {
        cm_reader_stop(p);
        return ENOMEM;
    }
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&r->thread, NULL, read_all, p);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        r->thread = 0;
        cm_reader_stop(p);
    }
    return err;
}

/* The thread ended and joined; what it queued and nobody read goes with it (acknowledged) */
void cm_reader_stop(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;
    struct cm_reader *r = v ? v->reader : NULL;
    const uint64_t one = 1;

    if (!r)
        return;
    if (r->thread) {
        pthread_mutex_lock(&r->mu);
        r->len = 0; /* room: a thread waiting for it wakes, then sees quit */
        pthread_cond_signal(&r->room);
        pthread_mutex_unlock(&r->mu);
        if (write(r->quit, &one, sizeof(one)) == sizeof(one))
            pthread_join(r->thread, NULL);
    }
    if (r->wake >= 0)
        close(r->wake);
    if (r->quit >= 0)
        close(r->quit);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->room);
    free(r->queue);
    free(r);
    v->reader = NULL;
}

/* The fd the loop waits on for the CM's events */
int cm_events_fd(struct rdmacli_cm_plan *p)
{
    struct cm_priv *v = p->priv;

    if (v && v->reader)
        return v->reader->wake;
    return p->channel ? ((struct rdma_event_channel *)p->channel)->fd : -1;
}

/* The next event: 0, EAGAIN (none now), or rdma_get_cm_event's errno */
int cm_next_event(struct rdmacli_cm_plan *p, struct rdmacli_cm_event *ev)
{
    struct cm_priv *v = p->priv;
    struct cm_reader *r = v ? v->reader : NULL;
    uint64_t count;
    int err = EAGAIN;

    if (!r)
        return rdmacli_cm_get(p->channel, ev);
    pthread_mutex_lock(&r->mu);
    if (r->len) {
        *ev = r->queue[r->head];
        r->head = (r->head + 1) % r->cap;
        r->len--;
        pthread_cond_signal(&r->room);
        err = 0;
    } else if (r->err) {
        err = r->err;
    } else if (read(r->wake, &count, sizeof(count)) < 0) { /* all read: the next wakes it again */
        err = EAGAIN;
    }
    pthread_mutex_unlock(&r->mu);
    return err;
}
