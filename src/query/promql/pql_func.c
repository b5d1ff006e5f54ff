/* pql_func: range functions' arithmetic (see pql_func.h). */
#include "query/promql/pql_func.h"

#include <math.h>
#include <stdlib.h>

double pql_extrapolated_rate(const int64_t *ts, const double *v, size_t n, int64_t range_start,
                             int64_t range_end, int is_rate)
{
    double result = v[n - 1] - v[0];
    double last = 0;
    /* a drop is a counter reset: the value before it was lost, add it back */
    for (size_t i = 0; i < n; i++) {
        if (v[i] < last)
            result += last;
        last = v[i];
    }
    double to_start = (double)(ts[0] - range_start) / 1000.0;
    double to_end = (double)(range_end - ts[n - 1]) / 1000.0;
    double sampled = (double)(ts[n - 1] - ts[0]) / 1000.0;
    double avg_gap = sampled / (double)(n - 1);
    /* a counter cannot have been below zero: do not extrapolate past the time it
     * would have been 0 */
    if (result > 0 && v[0] >= 0) {
        double to_zero = sampled * (v[0] / result);
        if (to_zero < to_start)
            to_start = to_zero;
    }
    double threshold = avg_gap * 1.1;
    double interval = sampled;
    interval += to_start < threshold ? to_start : avg_gap / 2;
    interval += to_end < threshold ? to_end : avg_gap / 2;
    result *= interval / sampled;
    if (is_rate)
        result /= (double)(range_end - range_start) / 1000.0;
    return result;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) /* NaN first, as Go's sort.Float64s orders them */
        return isnan(x) ? (isnan(y) ? 0 : -1) : 1;
    return x < y ? -1 : x > y;
}

double pql_quantile(double phi, double *v, size_t n)
{
    if (isnan(phi))
        return NAN;
    if (phi < 0)
        return -INFINITY;
    if (phi > 1)
        return INFINITY;
    qsort(v, n, sizeof *v, cmp_double);
    double rank = phi * (double)(n - 1);
    double lo = floor(rank);
    size_t l = (size_t)lo, u = l + 1 < n ? l + 1 : n - 1;
    double w = rank - lo;
    return v[l] * (1 - w) + v[u] * w;
}

double pql_over_time(enum pql_func f, const double *v, size_t n)
{
    double r = v[0];
    switch (f) {
    case PQL_F_COUNT_OT:
        return (double)n;
    case PQL_F_LAST_OT:
        return v[n - 1];
    case PQL_F_MIN_OT:
        for (size_t i = 1; i < n; i++)
            if (v[i] < r || isnan(r))
                r = v[i];
        return r;
    case PQL_F_MAX_OT:
        for (size_t i = 1; i < n; i++)
            if (v[i] > r || isnan(r))
                r = v[i];
        return r;
    case PQL_F_SUM_OT:
    case PQL_F_AVG_OT: {
        /* Kahan summation: a long window of similar values keeps its precision */
        double sum = 0, c = 0;
        for (size_t i = 0; i < n; i++) {
            double y = v[i] - c, t = sum + y;
            c = (t - sum) - y;
            sum = t;
        }
        return f == PQL_F_SUM_OT ? sum : sum / (double)n;
    }
    default:
        return NAN;
    }
}
