/* iql_tier: answering a SELECT's GROUP BY time windows from the pyramid's tiers
 * (1m, 1h, 1d) instead of raw samples (docs/INFLUX.md#tiers).
 *
 * A tier answers when the interval and offset are multiples of its width, the range
 * has a start and holds at least one whole window of the tier, and every function is
 * one its windows hold: count, sum, mean, min, max, spread and stddev exactly (the
 * parts of the range before its first and after its last whole window are read raw,
 * each sample a window of one, and merged in); median and percentile 50, 95 or 99
 * from the sketches (1% relative error) only when the range is aligned to the tier,
 * the interval is the tier's width and each series is one device, since sketches of
 * different windows are not merged here, and only where InfluxDB's rank is the
 * sketch's (iql_tier_rows). */
#ifndef BDB_IQL_TIER_H
#define BDB_IQL_TIER_H

#include "query/influxql/iql.h"
#include "query/influxql/iql_exec.h"

#include <stddef.h>
#include <stdint.h>

/* An output column of a SELECT: a field, a tag (raw only), or a function of a field. */
typedef struct iql_col {
    enum iql_func fn;
    double param;
    const char *field; /* the field or tag */
    int is_tag;
    int fi; /* index of the field in the statement's field list */
    const char *name;
    int aliased; /* named with AS */
    int absent;  /* the measurement has no such field: null, never count's 0 */
} iql_col;

/* One output window of one field of one group: the tier windows (and raw edge
 * samples) that fall in it, merged as they are read. */
typedef struct iql_tacc {
    uint64_t count;
    double sum, min, max, mean, m2, p50, p95, p99;
} iql_tacc;

/* The output windows [lo, lo + nwin * every) of every group and field. Merging each
 * window where it belongs as it comes costs less than keeping them all and sorting
 * them by group and time. */
typedef struct tier_acc {
    const size_t *dg; /* device index -> group */
    size_t ng, nf;
    int64_t lo, every;
    size_t nwin;    /* 0: more windows than the statement may return */
    iql_tacc **g;   /* per group: nwin x nf, NULL until its first window */
    uint64_t *seen; /* per group: windows merged (or, with nwin 0, that would be) */
    int spread;     /* a column is a stddev: mean and m2 are merged too (divisions) */
    /* windows x fields of the groups with data, at most max_cells (4 x the statement's
     * point limit: the rows they become); over once a group would pass it */
    uint64_t cells, max_cells;
    int over;
    /* the output window j = [jlo, jhi) of the last window merged: edge samples come in
     * runs of one window, and finding it costs a division */
    int64_t jlo, jhi;
    size_t j;
} tier_acc;

/* Sets a up for ng groups (dg: device -> group) and nf fields, the output windows of
 * GROUP BY time(every, off) over [from, to) as iql_tier_rows shows them, at most max. */
void iql_tier_acc_init(tier_acc *a, const size_t *dg, size_t ng, size_t nf, int64_t every,
                       int64_t off, int64_t from, int64_t to, uint64_t max);
void iql_tier_acc_free(tier_acc *a);

/* Merges nwin output windows of group g, the first starting at start (on a's grid),
 * nf cells each as a holds them, into a, and adds seen to the group's windows merged.
 * -1 when a would pass its cells' bound (a->over). */
int iql_tier_acc_add(tier_acc *a, size_t g, int64_t start, const iql_tacc *cells, size_t nwin,
                     uint64_t seen);

/* The tier (BDB_RES_1M/1H/1D) that answers, or 0 (raw). single: each series is one
 * device. */
int iql_tier_choose(const iql_ctx *c, const iql_col *k, size_t nk, int64_t every, int64_t off,
                    int64_t from, int64_t to, int has_from, int has_to, int single);
const char *iql_tier_name(int tier);
/* Reads device's windows of the metrics (fis: their field indexes) in [from, to) into
 * ta, the edges outside whole tier windows as raw samples; *read counts windows and
 * samples against c->max_points (BDB_ERR_LIMIT past it). quantiles: p50/p95/p99 are
 * wanted (decoding the sketches costs more than the rest of a window). */
int iql_tier_read(const iql_ctx *c, int tier, const char *device, const char *const *metrics,
                  const uint32_t *fis, size_t nm, uint32_t dev, int64_t from, int64_t to,
                  int quantiles, tier_acc *ta, uint64_t *read);
/* Appends the rows (time, then one value per column) of group g to se. -1: more than
 * max rows; -2: a percentile or median whose rank in InfluxDB's definition is not the
 * sketch's (small or even counts): the caller answers from raw instead. */
int iql_tier_rows(const iql_stmt *st, const tier_acc *ta, size_t g, const iql_col *k, size_t nk,
                  iql_series *se);

/* The fleet tables (query/fleetq.h: every device's readings of a metric per hour or
 * day) answer a statement over many devices with no tag condition and no GROUP BY tag
 * whose interval and offset are multiples of an hour (a day): BDB_RES_1H or _1D, with
 * [*a, *b) the whole fleet windows inside [from, to) (the edges come from the
 * devices' tiers); 0 when they do not answer (sketch functions, no whole window). */
int iql_fleet_choose(const iql_ctx *c, const iql_col *k, size_t nk, int64_t every, int64_t off,
                     int64_t from, int64_t to, int64_t *a, int64_t *b);
/* Adds the fleet windows of metric (field index fi) in [from, to) to ta as device 0's
 * (the statement has one group); *read as iql_tier_read. */
int iql_fleet_read(const iql_ctx *c, int res, const char *metric, uint32_t fi, int64_t from,
                   int64_t to, tier_acc *ta, uint64_t *read);

/* Tests only (NULL otherwise): called after a device's tier windows were read with
 * the last window held, before the newest sample is checked again; a unit test writes
 * a later sample there to take the path a concurrent write takes. */
extern void (*iql_tier_test_hook)(const iql_ctx *c, const char *device);

#endif
