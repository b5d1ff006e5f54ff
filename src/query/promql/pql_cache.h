/* pql_cache: the settled steps of a PromQL range query, kept between queries
 * (docs/PROMQL.md#query-cache).
 *
 * A Grafana panel refreshed every few seconds asks the same range again, and every
 * step but the newest few reads the same samples. A step is settled when its time is
 * more than BDB_SETTLED_MS behind now: what a step reads lies at or before its time
 * (selectors with a negative offset are never kept). The answer of the settled steps
 * is kept in the server's rcache under everything it is a function of: the tenant,
 * the engine's catalog version (the series the selectors match) and settled version
 * (a late or backfilled sample, a retention pass), the query's text, start, step,
 * the number of settled steps, the limits, and per selector which tiers cover its
 * first window (what chooses between a tier and raw samples); both versions are read
 * before any sample. Raw reads end at the tenant's retention cutoff, which moves with
 * the clock: an answer is kept, and used, only while its earliest raw read is at or
 * after the cutoff (tier windows are not cut). A later query with the same key
 * evaluates only the steps after them and merges the two answers series by series.
 *
 * The rest is evaluated as part of the whole range (pql_eval_opts.part: the same tier
 * choice and coverage), and a step's value depends only on its own time, so the
 * merged answer is the whole range's. The rest's reads count against max_samples on
 * from what the whole range read beyond the rest when it was kept (the two add up to
 * the whole's). A kept answer is built from the whole range's (and the rest evaluated
 * alone, for that count) only from the second time its key misses (bdb_rcache_admit):
 * a query asked once evaluates as without the cache. */
#ifndef BDB_PQL_CACHE_H
#define BDB_PQL_CACHE_H

#include "query/promql/pql_eval.h"
#include "query/promql/pql_parse.h"

struct bdb_db;
struct bdb_rcache;

typedef struct pql_cache_ctx {
    struct bdb_rcache *cache; /* NULL: evaluate as pql_eval does */
    struct bdb_db *db;
    const char *tenant;
    const char *query; /* the query's text, as sent */
    int64_t now_ms;
    /* the oldest time the 1m, 1h and 1d tiers cover for the tenant (pql_db_source's) */
    const int64_t *tier_oldest;
} pql_cache_ctx;

/* pql_eval of expr over o, with the settled steps from (or into) cc->cache. */
int pql_eval_cached(const pql_node *expr, const pql_source *src, const pql_eval_opts *o,
                    const pql_cache_ctx *cc, pql_result *res, char *err, size_t errlen);

#endif
