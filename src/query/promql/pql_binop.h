/* pql_binop: PromQL binary operators on values and between two instant vectors,
 * with Prometheus 2.x semantics (docs/PROMQL.md#binary-operators): arithmetic,
 * comparisons (filtering, or 0/1 with bool), the set operators, and vector matching
 * (one-to-one on all labels but __name__, on/ignoring, group_left/group_right).
 * Works on whole step arrays: every step is matched on its own, as Prometheus
 * evaluates a range query step by step. */
#ifndef BDB_PQL_BINOP_H
#define BDB_PQL_BINOP_H

#include "query/promql/pql_eval.h"
#include "query/promql/pql_parse.h"

#include <stddef.h>
#include <stdint.h>

/* Pairs of series one vector matching may pair, when the query has no point limit
 * (with one, the pairs count against it). */
#define PQL_BINOP_MAX_PAIRS 10000000

/* a op b. Arithmetic: the result, *keep 1. A comparison: a, and *keep whether it
 * holds (NaN compares unequal to everything). */
double pql_binop_value(enum pql_binop op, double a, double b, int *keep);

/* n (a PQL_BINARY of two vectors) over l[0..nl) and r[0..nr), each series with
 * nsteps points: 0 with *out and *nout the result series (labels may repeat across
 * series present at different steps; the caller merges them), or a PQL_E_* with
 * err filled (Prometheus' message for a matching error). *points counts the points
 * held, against max_points (0: no limit). */
int pql_vector_binop(const pql_node *n, const pql_out_series *l, size_t nl, const pql_out_series *r,
                     size_t nr, size_t nsteps, uint64_t *points, uint64_t max_points,
                     pql_out_series **out, size_t *nout, char *err, size_t errlen);

#endif
