/* pql_source_db: bucketdb's data as Prometheus series (docs/PROMQL.md#mapping).
 * One series per device and metric: __name__ is the metric name with every
 * character outside [A-Za-z0-9_:] ('.' above all) turned into '_' (and '_' put
 * before a leading digit), `device` is the device, and each device tag is a label
 * (key sanitised the same way; a key that would clash with __name__, device,
 * bdb_metric or a reserved "__" name gets "tag_" in front). When two metrics of one
 * device map to the same name, both series also carry bdb_metric="<original name>". */
#ifndef BDB_PQL_SOURCE_DB_H
#define BDB_PQL_SOURCE_DB_H

#include "query/pool.h"
#include "query/promql/pql_eval.h"
#include "storage/embedded/core/db.h"

typedef struct pql_db_source {
    bdb_db *db;
    bdb_pool *pool;
    const char *tenant;
    int64_t lateness_ms; /* agg_allowed_lateness, for the windows' final flag */
    /* The oldest time the 1m, 1h and 1d tiers still cover for the tenant (now minus
     * its tier retention; INT64_MIN when kept forever): an older range reads raw. */
    int64_t tier_oldest[3];
} pql_db_source;

/* A pql_source reading ctx (a pql_db_source) through bdb_db_list_devices and
 * bdb_query_range, and the rollup tiers through bdb_query_windows. */
void pql_db_source_init(pql_source *src, pql_db_source *ctx);

/* Calls cb with the labels of every series of the tenant whose device has data in
 * [from, to] (ms) and which passes m (NULL: all); cb returning non-zero stops.
 * BDB_OK or BDB_ERR_NOMEM. */
int pql_db_each_series(const pql_db_source *s, const pql_matchset *m, int64_t from, int64_t to,
                       int (*cb)(void *ctx, const pql_label *l, size_t n), void *ctx);

/* The Prometheus name for a bucketdb metric or tag key: out gets strlen(in) + 2
 * bytes at most. */
void pql_db_prom_name(const char *in, size_t len, char *out);

#endif
