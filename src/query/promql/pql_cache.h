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
 * the number of settled steps and the limits; both versions are read before any
 * sample. A later query with the same key evaluates only the steps after them and
 * merges the two answers series by series.
 *
 * The parts are evaluated as one range would be (pql_eval_opts.part: the same tier
 * choice), and a step's value depends only on its own time, so the merged answer is
 * the whole range's. The samples read by the kept part count against max_samples of
 * the rest. A query is split (kept part evaluated apart) only from the second time
 * its key misses (bdb_rcache_admit): a query asked once evaluates as without it. */
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
} pql_cache_ctx;

/* pql_eval of expr over o, with the settled steps from (or into) cc->cache. */
int pql_eval_cached(const pql_node *expr, const pql_source *src, const pql_eval_opts *o,
                    const pql_cache_ctx *cc, pql_result *res, char *err, size_t errlen);

#endif
