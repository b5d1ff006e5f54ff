/* iql_exec: runs one parsed InfluxQL statement (iql.h) against the engine and returns
 * InfluxDB 1.x result series (docs/INFLUX.md).
 *
 * The mapping: a metric "m.f" is measurement m, field f (split at the first dot that
 * leaves both sides non-empty); any other metric is measurement <metric>, field value.
 * A device's tags (current, not per sample) plus the device tag are the series' tags.
 *
 * SELECT reads raw samples (bdb_query_range) unless its GROUP BY time interval is a
 * multiple of a tier's width, its range is aligned to that width and every function is
 * one the tier's windows answer (count, sum, mean, min, max, spread, stddev exactly;
 * median and percentile 50/95/99 from the sketches when the interval is the tier's
 * width and a series is one device): then it reads the tier (bdb_query_windows). */
#ifndef BDB_IQL_EXEC_H
#define BDB_IQL_EXEC_H

#include "query/influxql/iql.h"
#include "query/pool.h"
#include "storage/embedded/core/db.h"

#include <stddef.h>
#include <stdint.h>

enum iql_vtype { IQL_V_NULL, IQL_V_NUM, IQL_V_INT, IQL_V_STR, IQL_V_TIME, IQL_V_BOOL };

typedef struct iql_val {
    enum iql_vtype t;
    double num;
    int64_t i;     /* INT, BOOL; TIME: Unix ms */
    const char *s; /* STR (owned by the result) */
} iql_val;

typedef struct iql_series {
    const char *name;          /* NULL: none (SHOW SERIES, SHOW DATABASES have one) */
    const char **tagk, **tagv; /* GROUP BY tags, key order */
    size_t ntags;
    const char **cols;
    size_t ncols;
    iql_val *vals; /* nrows x ncols, row-major */
    size_t nrows, cap;
} iql_series;

typedef struct iql_result {
    char *error; /* the statement's error (InfluxDB puts it in the result), or NULL */
    iql_series *series;
    size_t nseries, cap;
    const char *tier; /* SELECT: "raw", "1m", "1h" or "1d"; NULL for others */
    void *owned;      /* private: strings the result owns */
} iql_result;

typedef struct iql_ctx {
    bdb_db *db;
    bdb_pool *pool;
    const char *tenant;
    const char *device_tag;
    int64_t now_ms;
    int64_t lateness_ms;
    uint64_t max_points; /* samples or windows one statement may read, and rows it may return */
    /* How long each tier (index enum bdb_res: 1M, 1H, 1D; 0 unused) keeps windows for
     * this tenant, 0 = forever: a tier is not asked for times it has dropped. */
    int64_t tier_keep_ms[4];
    const char *const *databases; /* SHOW DATABASES: what the caller may read */
    size_t ndatabases;
    /* Tenants' catalogs listed lately, under their catalog version (NULL: none kept):
     * a panel asked again skips the listing of every device (iql_cat.c). */
    struct bdb_rcache *catalogs;
    /* Settled windows of statements over groups of devices (NULL: none kept): a panel
     * asked again reads only its edges (iql_gcache.h). */
    struct bdb_rcache *groups;
} iql_ctx;

/* Runs st; the outcome, an error included, is in *out (free with iql_result_free).
 * Returns 0, or -1 when the error is the caller's limit (max_points: InfluxDB answers
 * such an error with the whole request failing). */
int iql_exec(const iql_ctx *c, const iql_stmt *st, iql_result *out);
void iql_result_free(iql_result *r);
/* Appends a row of s->ncols NULL values and returns it. */
iql_val *iql_series_add_row(iql_series *s);

#endif
