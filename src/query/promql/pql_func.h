/* pql_func: the arithmetic of PromQL's range functions over one window of samples,
 * with Prometheus 2.x semantics (docs/PROMQL.md#semantics). Pure functions, so that
 * unit tests can hold them to Prometheus' documented results. */
#ifndef BDB_PQL_FUNC_H
#define BDB_PQL_FUNC_H

#include "query/promql/pql_parse.h"

#include <stddef.h>
#include <stdint.h>

/* rate() (is_rate) or increase() over the samples ts[i], v[i] (time order, n >= 2)
 * of the window [range_start, range_end] (ms): the counter's increase with resets
 * added back, extrapolated towards the window's edges as Prometheus does: to an
 * edge when the first/last sample lies within 1.1 average sample intervals of it,
 * else by half an interval, and never below the counter's zero. rate() divides by
 * the window's length. */
double pql_extrapolated_rate(const int64_t *ts, const double *v, size_t n, int64_t range_start,
                             int64_t range_end, int is_rate);
/* The phi-quantile of v[0..n) (n >= 1; v is sorted in place) by linear interpolation
 * between the closest ranks, as quantile_over_time: -Inf below 0, +Inf above 1, NaN
 * for NaN. */
double pql_quantile(double phi, double *v, size_t n);
/* Applies one *_over_time function (not rate/increase/quantile) to v[0..n), n >= 1. */
double pql_over_time(enum pql_func f, const double *v, size_t n);

#endif
