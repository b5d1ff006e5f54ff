/* db_late_sink: late arrivals through the sink's optional ops (db_late_sink.h): sent
 * at flush, read back merged with the local list of recent late events. */
#include "storage/embedded/sink/db_late_sink.h"
#include "storage/embedded/sink/db_state_sink_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "storage/embedded/core/db_int.h"
#include "storage/sink.h"

#include <stdlib.h>
#include <string.h>

int db_ls_on(bdb_db *db)
{
    return db->o.sink && db->o.sink->ops->late_put && db->o.sink->ops->late_list;
}

/* An owned late event. */
typedef struct ls_ev {
    char *tenant, *device;
    int64_t ts, newest, arrived;
    uint64_t seq;
} ls_ev;

typedef struct ls_set {
    ls_ev *v;
    size_t n, cap;
    int oom; /* a copy failed: the set is incomplete, only to be freed */
} ls_set;

static void set_add(ls_set *s, const char *tn, const char *dn, int64_t ts, int64_t newest,
                    int64_t arrived, uint64_t seq)
{
    ls_ev *v = ss_grow(s->v, s->n, &s->cap, sizeof *s->v);
    if (!v) {
        s->oom = 1;
        return;
    }
    s->v = v;
    s->v[s->n++] =
        (ls_ev){ss_strdup(tn, &s->oom), ss_strdup(dn, &s->oom), ts, newest, arrived, seq};
}

static void set_free(ls_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->v[i].tenant);
        free(s->v[i].device);
    }
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- flush */

static void unsent_cb(void *ud, const bdb_late_event *e)
{
    set_add(ud, e->tenant, e->device, e->ts, e->newest, e->arrived, e->seq);
}

int db_ls_flush(bdb_db *db, int rc)
{
    if (!db_ls_on(db) || rc != BDB_OK)
        return rc;
    ls_set s = {0};
    db_late_unsent(db, unsent_cb, &s);
    bdb_sink_late *v = s.oom ? NULL : bdb_calloc(s.n + 1, sizeof *v);
    if (!v) { /* nothing put: the flush fails, the next one hands them over again */
        BDB_ERROR("flush: %zu late event(s) not sent to the sink: %s", s.n,
                  bdb_strerror(BDB_ERR_NOMEM));
        set_free(&s);
        return BDB_ERR_NOMEM;
    }
    /* Outside the list's lock: the TTL callback may take the server's locks. (A
     * handful of events a flush: no need to remember the last tenant's.) */
    for (size_t i = 0; i < s.n; i++)
        v[i] = (bdb_sink_late){s.v[i].tenant,
                               s.v[i].device,
                               s.v[i].ts,
                               s.v[i].newest,
                               s.v[i].arrived,
                               s.v[i].seq,
                               db_tenant_ttl(db, s.v[i].tenant)};
    if (s.n)
        rc = db->o.sink->ops->late_put(db->o.sink, v, s.n);
    if (rc != BDB_OK)
        BDB_ERROR("flush: %zu late event(s) not confirmed by the sink: %s", s.n, bdb_strerror(rc));
    free(v);
    set_free(&s);
    return rc;
}

void db_ls_sent(bdb_db *db)
{
    if (db_ls_on(db))
        db_late_sent(db);
}

/* ---------------------------------------------------------------- read */

static int local_cb(void *ctx, const bdb_late_event *e)
{
    ls_set *s = ctx;
    set_add(s, e->tenant, e->device, e->ts, e->newest, e->arrived, e->seq);
    return s->oom; /* stops the listing */
}

static void sink_cb(void *ud, const bdb_sink_late *e)
{
    set_add(ud, e->tenant, e->device, e->ts, e->newest, e->arrived, e->seq);
}

/* Newest arrival first, equal arrival times in reverse arrival order (the local
 * list's order); equal events (the local and the sink's copy of one) end up side by
 * side. */
static int ev_cmp(const void *a, const void *b)
{
    const ls_ev *x = a, *y = b;
    if (x->arrived != y->arrived)
        return x->arrived > y->arrived ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq > y->seq ? -1 : 1;
    if (x->ts != y->ts)
        return x->ts > y->ts ? -1 : 1;
    if (x->newest != y->newest)
        return x->newest > y->newest ? -1 : 1;
    int c = strcmp(x->tenant, y->tenant);
    return c ? c : strcmp(x->device, y->device);
}

int bdb_db_late_recent(bdb_db *db, const char *tn, const char *dn,
                       int (*cb)(void *ctx, const bdb_late_event *e), void *ctx)
{
    if (!db_ls_on(db))
        return db_late_recent_local(db, tn, dn, cb, ctx);
    ls_set s = {0};
    int rc = db->o.sink->ops->late_list(db->o.sink, tn, dn, sink_cb, &s);
    if (rc == BDB_ERR_NOMEM || s.oom) { /* never part of the events */
        set_free(&s);
        return BDB_ERR_NOMEM;
    }
    if (rc != BDB_OK) {
        BDB_WARN("late events of %s: the sink failed (%s); answering from the local list", tn,
                 bdb_strerror(rc));
        set_free(&s);
        return db_late_recent_local(db, tn, dn, cb, ctx);
    }
    rc = db_late_recent_local(db, tn, dn, local_cb, &s);
    if (s.oom)
        rc = BDB_ERR_NOMEM;
    if (rc != BDB_OK) {
        set_free(&s);
        return rc;
    }
    if (s.n > 1)
        qsort(s.v, s.n, sizeof *s.v, ev_cmp);
    for (size_t i = 0; i < s.n; i++) {
        if (i && ev_cmp(&s.v[i - 1], &s.v[i]) == 0)
            continue;
        bdb_late_event e = {s.v[i].tenant, s.v[i].device,  s.v[i].ts,
                            s.v[i].newest, s.v[i].arrived, s.v[i].seq};
        if (cb(ctx, &e))
            break;
    }
    set_free(&s);
    return BDB_OK;
}
