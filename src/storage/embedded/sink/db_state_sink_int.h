/* db_state_sink_int: what db_state_sink.c, db_state_read.c and db_late_sink.c share
 * (private to them): allocation helpers that report failure instead of aborting, owned
 * copies of registry rows and counts.
 *
 * Out of memory: the sink's callbacks return void, so the copies note a failure in an
 * `oom` flag of the structure they fill and the caller checks it once the sink op
 * returned (a flush then fails with BDB_ERR_NOMEM before its first put, a read
 * answers BDB_ERR_NOMEM). Every structure stays freeable however far it was filled. */
#ifndef BDB_DB_STATE_SINK_INT_H
#define BDB_DB_STATE_SINK_INT_H

#include "common/alloc.h"
#include "storage/embedded/core/db_int.h"
#include "storage/sink.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A copy of s (NULL stays NULL); *oom set when it cannot be made. */
static inline char *ss_strdup(const char *s, int *oom)
{
    if (!s)
        return NULL;
    char *p = bdb_strdup(s);
    if (!p)
        *oom = 1;
    return p;
}

/* Room for element n of a vector of cap elements of size sz: the vector itself when
 * n < *cap, else a larger one (*cap updated), or NULL (v and *cap untouched). */
static inline void *ss_grow(void *v, size_t n, size_t *cap, size_t sz)
{
    if (n < *cap)
        return v;
    size_t c = *cap ? *cap * 2 : 16;
    void *q = bdb_realloc(v, c * sz);
    if (q)
        *cap = c;
    return q;
}

typedef struct ss_count {
    char *tenant, *device;
    int64_t s, e;
    uint64_t ev;
    uint32_t subs;
} ss_count;

/* A registry row. Its vectors are zero-filled at allocation, and ntags, nhist and
 * nmetrics are set only once their vectors exist, so dev_free frees a row that
 * stopped half-way. */
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

/* Under d's stripe lock: d's registry row into r (zeroed); 0, or -1 when out of
 * memory (r then holds what dev_free frees). */
int ss_dev_copy(const device *d, ss_dev *r);
/* r as the sink's record (strings and vectors r's: valid while r lives). */
bdb_sink_device ss_dev_record(const char *tn, const char *dn, const ss_dev *r);

typedef struct ss_member {
    char *dev, *state;
    int64_t ts; /* state time */
    int src;    /* 1 local, 2 sink, 3 both */
    int oom;    /* a copy failed: the answer is incomplete */
} ss_member;

/* bdb_sink_state_fn: the state and state time into the ss_member ud. */
void ss_sink_state_cb(void *ud, const bdb_sink_state *s);

#endif
