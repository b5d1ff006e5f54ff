/* conn_guard: deadlines for slow HTTP clients; see conn_guard.h. */
#include "server/http/conn_guard.h"

#include "common/log.h"
#include "common/timeutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

enum phase { P_HEADERS, P_BODY, P_ANSWERING };

struct bdb_guarded {
    struct bdb_guarded *prev, *next;
    int fd;
    enum phase phase;
    int64_t since_ms; /* monotonic: start of the phase */
    uint64_t body;    /* body bytes received in P_BODY */
    int shut;         /* shut down once already */
};

struct bdb_conn_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stopping;
    int64_t header_ms;
    uint64_t min_rate;
    struct bdb_guarded *head;
    _Atomic uint64_t closed;
};

/* The watchdog looks this often: a deadline is kept to within it. */
#define GUARD_TICK_MS 250

static int past_deadline(const bdb_conn_guard *g, const bdb_guarded *c, int64_t now)
{
    switch (c->phase) {
    case P_HEADERS:
        return now - c->since_ms > g->header_ms;
    case P_BODY:
        /* a grace of header_ms, then min_rate bytes a second on average */
        return g->min_rate &&
               now - c->since_ms > g->header_ms + (int64_t)(c->body * 1000 / g->min_rate);
    default:
        return 0;
    }
}

static void *watchdog(void *arg)
{
    bdb_conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += GUARD_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        int64_t now = bdb_monotonic_ms();
        for (bdb_guarded *c = g->head; c; c = c->next) {
            if (c->shut || !past_deadline(g, c, now))
                continue;
            /* Under the mutex, so the descriptor is still this connection's. */
            shutdown(c->fd, SHUT_RDWR);
            c->shut = 1;
            atomic_fetch_add(&g->closed, 1);
            BDB_DEBUG("http: closing a connection that missed its %s deadline",
                      c->phase == P_HEADERS ? "header" : "body rate");
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

bdb_conn_guard *bdb_conn_guard_start(int64_t header_ms, uint64_t min_rate)
{
    bdb_conn_guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->header_ms = header_ms;
    g->min_rate = min_rate;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, watchdog, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void bdb_conn_guard_stop(bdb_conn_guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stopping = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    while (g->head) { /* only if libmicrohttpd did not report every close */
        bdb_guarded *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

bdb_guarded *bdb_conn_guard_open(bdb_conn_guard *g, int fd)
{
    bdb_guarded *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->phase = P_HEADERS;
    c->since_ms = bdb_monotonic_ms();
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head)
        g->head->prev = c;
    g->head = c;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void bdb_conn_guard_close(bdb_conn_guard *g, bdb_guarded *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

static void set_phase(bdb_conn_guard *g, bdb_guarded *c, enum phase p)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->mu);
    c->phase = p;
    c->since_ms = bdb_monotonic_ms();
    c->body = 0;
    pthread_mutex_unlock(&g->mu);
}

void bdb_conn_guard_body_start(bdb_conn_guard *g, bdb_guarded *c)
{
    set_phase(g, c, P_BODY);
}

void bdb_conn_guard_answering(bdb_conn_guard *g, bdb_guarded *c)
{
    set_phase(g, c, P_ANSWERING);
}

void bdb_conn_guard_idle(bdb_conn_guard *g, bdb_guarded *c)
{
    set_phase(g, c, P_HEADERS);
}

void bdb_conn_guard_body_bytes(bdb_conn_guard *g, bdb_guarded *c, size_t n)
{
    if (!c)
        return;
    pthread_mutex_lock(&g->mu);
    c->body += n;
    pthread_mutex_unlock(&g->mu);
}

uint64_t bdb_conn_guard_closed(const bdb_conn_guard *g)
{
    return g ? atomic_load(&((bdb_conn_guard *)g)->closed) : 0;
}
