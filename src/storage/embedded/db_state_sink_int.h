/* db_state_sink_int: what db_state_sink.c and db_state_read.c share (private to
 * them): allocation that aborts on failure, owned copies of registry rows and counts. */
#ifndef BDB_DB_STATE_SINK_INT_H
#define BDB_DB_STATE_SINK_INT_H

#include "common/alloc.h"
#include "storage/sink.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline void *xcalloc(size_t n, size_t size)
{
    void *p = bdb_calloc(n ? n : 1, size);
    if (!p)
        abort();
    return p;
}

static inline void *xrealloc(void *p, size_t n)
{
    void *q = bdb_realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static inline char *xstrndup(const char *s, size_t n)
{
    char *p = xcalloc(n + 1, 1);
    memcpy(p, s, n);
    return p;
}

static inline char *xstrdup(const char *s)
{
    return s ? xstrndup(s, strlen(s)) : NULL;
}

#define GROW(v, n, cap)                                                                            \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? (cap)*2 : 16;                                                          \
            (v) = xrealloc((v), (cap) * sizeof *(v));                                              \
        }                                                                                          \
    } while (0)

typedef struct ss_count {
    char *tenant, *device;
    int64_t s, e;
    uint64_t ev;
    uint32_t subs;
} ss_count;

typedef struct ss_dev {
    char **tk, **tv;
    size_t ntags;
    int64_t first_ts, last_ts, bucket_ms;
    uint64_t samples;
    int pinned, cls;
    int64_t *hf, *hs;
    size_t nhist;
    char **metrics;
    size_t nmetrics;
} ss_dev;

static inline void dev_free(ss_dev *r)
{
    for (size_t i = 0; i < r->ntags; i++) {
        free(r->tk[i]);
        free(r->tv[i]);
    }
    for (size_t i = 0; i < r->nmetrics; i++)
        free(r->metrics[i]);
    free(r->tk);
    free(r->tv);
    free(r->hf);
    free(r->hs);
    free(r->metrics);
}

typedef struct ss_member {
    char *dev, *state;
    int64_t ts; /* state time */
    int src;    /* 1 local, 2 sink, 3 both */
} ss_member;

/* bdb_sink_state_fn: the state and state time into the ss_member ud. */
void ss_sink_state_cb(void *ud, const bdb_sink_state *s);

#endif
