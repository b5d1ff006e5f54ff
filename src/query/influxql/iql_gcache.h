/* iql_gcache: the settled windows of a statement over groups of devices, kept between
 * statements (docs/INFLUX.md#group-cache).
 *
 * A Grafana panel over a tag group (the mean of a site's devices over 30 days at 1 h)
 * asks the same windows every refresh, and every device's tier windows are read and
 * merged again each time. Once the windows are settled (they end more than
 * BDB_SETTLED_MS behind now), the merged result of each group is kept in ctx->groups
 * and later statements read only their edges from the devices: the partial window at
 * the start and the windows from the settled horizon on.
 *
 * A kept result is never stale. Its key names everything it is a function of: the
 * tenant, the catalog's version (its devices, tags, metrics; which devices the
 * statement matched and how they group, as device indexes of that catalog), the
 * engine's settled version of the tenant's samples (db.h: a late or backfilled write,
 * a retention pass), the tier, the interval, offset and the windows [a, b) kept. Both
 * versions are read before any sample. A result is built (the middle read apart from
 * the edges, then merged) only from the second time its key misses
 * (bdb_rcache_admit), so a statement asked once reads as without the cache. The
 * windows merged from a kept result are the same sums in the same order as read from
 * the devices: the answer is the same to the last bit. */
#ifndef BDB_IQL_GCACHE_H
#define BDB_IQL_GCACHE_H

#include "query/influxql/iql_int.h"
#include "query/influxql/iql_tier.h"

typedef struct iql_gc {
    int64_t a, b; /* the whole output windows from the cache (hit) or to keep (build) */
    int hit;      /* merged into ta already: devices read [from, a) and [b, to) */
    int build;    /* devices read [a, b) into mid, which iql_gc_finish keeps */
    tier_acc mid;
    uint64_t reads; /* windows the middle took to read (a build adds them up) */
    char *key;
    size_t klen;
} iql_gc;

/* Whether statement windows [from, to) of measurement m over devices md (grouped by
 * dg into ng groups) use the cache, read with the fields' metrics from tier tier into
 * ta: 1 with *g set (a hit merged into ta, or a build to read into g->mid), 0 when
 * devices read the whole range as without a cache, -1 when a hit passes the limits (the
 * windows the kept result took to read, added to *read, pass x->max_points, or ta its
 * cells' bound): the statement is over them, as it would be without the cache. */
int iql_gc_plan(const iql_ctx *x, const cat *c, const meas *m, const strv *fields, const size_t *md,
                size_t nmd, const size_t *dg, size_t ng, int tier, int64_t from, int64_t to,
                tier_acc *ta, uint64_t *read, iql_gc *g);
/* After the devices' reads: a build's middle is merged into ta and kept unless ok is 0
 * (the statement failed: nothing kept). -1 when ta passes its bound. Frees g. */
int iql_gc_finish(const iql_ctx *x, iql_gc *g, tier_acc *ta, int ok);

#endif
