/* pql_func + pql_eval: rate/increase extrapolation against the cases of Prometheus'
 * own test data and documentation (counter resets, extrapolation to the window's
 * edges or by half an interval, the zero clamp), quantile_over_time's interpolation,
 * the *_over_time functions; and the evaluator over an in-memory source: the 5 minute
 * lookback of instant selectors (and staleness after it), closed [t - r, t] windows,
 * offset, steps of a range query, aggregations by/without, arithmetic dropping the
 * metric name, regular expression matchers, and the sample and point limits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "query/promql/pql_eval.h"
#include "query/promql/pql_func.h"
#include "query/promql/pql_parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S 1000
#define M (60 * S)

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-12 * fmax(1, fabs(want))))
        fail_msg("got %.17g, want %.17g", got, want);
}

static void test_rate_prometheus_cases(void **state)
{
    (void)state;
    /* promql/testdata/functions.test: load 5m http_requests{path="/foo"} 0+10x10 and
     * {path="/bar"} 0+10x5 0+10x5; at 50m increase([50m]) is 100 and 90 */
    int64_t ts[11];
    double foo[11], bar[11];
    for (int i = 0; i < 11; i++) {
        ts[i] = (int64_t)i * 5 * M;
        foo[i] = 10.0 * i;
        bar[i] = 10.0 * (i < 6 ? i : i - 6);
    }
    near(pql_extrapolated_rate(ts, foo, 11, 0, 50 * M, 0), 100);
    near(pql_extrapolated_rate(ts, bar, 11, 0, 50 * M, 0), 90);
    near(pql_extrapolated_rate(ts, foo, 11, 0, 50 * M, 1), 100.0 / 3000);
    near(pql_extrapolated_rate(ts, bar, 11, 0, 50 * M, 1), 90.0 / 3000);

    /* samples 10 s apart at 10..40 s in a window [0, 60 s]: the start is within 1.1
     * intervals (extrapolated fully, 10 s), the end is not (half an interval, 5 s):
     * 3 * 45 / 30 */
    int64_t t4[] = {10 * S, 20 * S, 30 * S, 40 * S};
    double c1[] = {1, 2, 3, 4};
    near(pql_extrapolated_rate(t4, c1, 4, 0, 60 * S, 0), 4.5);
    near(pql_extrapolated_rate(t4, c1, 4, 0, 60 * S, 1), 4.5 / 60);
    /* the zero clamp: a counter at 0.5 rising 1 per 10 s was 0 at 5 s, so the start
     * extrapolates 5 s, not 10: 3 * 40 / 30 */
    double c2[] = {0.5, 1.5, 2.5, 3.5};
    near(pql_extrapolated_rate(t4, c2, 4, 0, 60 * S, 0), 4);
    /* a reset (10 -> 2) adds the value before it: -1 + 10 = 9, times 45 / 30 */
    double c3[] = {5, 10, 2, 4};
    near(pql_extrapolated_rate(t4, c3, 4, 0, 60 * S, 0), 13.5);
    /* both edges far: half an interval on each side, 3 * 40 / 30 */
    double c5[] = {10, 11, 12, 13};
    near(pql_extrapolated_rate(t4, c5, 4, -100 * S, 150 * S, 0), 4);
    /* ... unless the counter's zero is nearer than the start: 1 at 10 s rising 1 per
     * 10 s was 0 at 0 s, 10 s before the first sample, within 1.1 intervals: 3 * 45 / 30 */
    near(pql_extrapolated_rate(t4, c1, 4, -100 * S, 150 * S, 0), 4.5);
    /* a falling gauge-like series is a chain of resets, never negative */
    double c4[] = {4, 3, 2, 1};
    assert_true(pql_extrapolated_rate(t4, c4, 4, 0, 60 * S, 0) > 0);
}

static void test_quantile_and_over_time(void **state)
{
    (void)state;
    double v[] = {4, 1, 3, 2};
    double w[4];
    static const double phis[] = {0, 0.5, 0.9, 1, -1, 2};
    static const double want[] = {1, 2.5, 3.7, 4, -INFINITY, INFINITY};
    for (size_t i = 0; i < 6; i++) {
        memcpy(w, v, sizeof v);
        double q = pql_quantile(phis[i], w, 4);
        if (isinf(want[i]))
            assert_true(q == want[i]);
        else
            near(q, want[i]);
    }
    memcpy(w, v, sizeof v);
    assert_true(isnan(pql_quantile(NAN, w, 4)));
    double one = 7;
    near(pql_quantile(0.3, &one, 1), 7);

    near(pql_over_time(PQL_F_AVG_OT, v, 4), 2.5);
    near(pql_over_time(PQL_F_SUM_OT, v, 4), 10);
    near(pql_over_time(PQL_F_MIN_OT, v, 4), 1);
    near(pql_over_time(PQL_F_MAX_OT, v, 4), 4);
    near(pql_over_time(PQL_F_COUNT_OT, v, 4), 4);
    near(pql_over_time(PQL_F_LAST_OT, v, 4), 2);
    double nanfirst[] = {NAN, 3, 1};
    near(pql_over_time(PQL_F_MIN_OT, nanfirst, 3), 1);
    near(pql_over_time(PQL_F_MAX_OT, nanfirst, 3), 3);
}

/* ---- an in-memory source ---- */

struct fake_series {
    const char *name, *device, *site;
    int64_t ts[8];
    double v[8];
    size_t n;
};

static const struct fake_series fake[] = {
    {"temp", "d1", "a", {0, 60 * S, 120 * S, 180 * S}, {10, 11, 12, 13}, 4},
    {"temp", "d2", "b", {30 * S, 90 * S}, {20, 22}, 2},
    {"cnt", "d1", "a", {0, 60 * S, 120 * S, 180 * S, 240 * S}, {0, 60, 120, 10, 70}, 5},
};
static int selects;

static int fake_select(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                       pql_series_set *out, char *err, size_t errlen)
{
    (void)ctx;
    selects++;
    for (size_t i = 0; i < sizeof fake / sizeof fake[0]; i++) {
        const struct fake_series *f = &fake[i];
        pql_label l[] = {{"__name__", (char *)f->name},
                         {"device", (char *)f->device},
                         {"site", (char *)f->site}};
        if (!pql_matchset_test(m, l, 3))
            continue;
        long idx = pql_series_add(out, l, 3);
        assert_true(idx >= 0);
        for (size_t k = 0; k < f->n; k++) {
            if (f->ts[k] < from || f->ts[k] > to)
                continue;
            int rc = pql_series_push(out, (size_t)idx, f->ts[k], f->v[k]);
            if (rc == -2) {
                snprintf(err, errlen, "too many samples");
                return PQL_E_EXECUTION;
            }
            assert_int_equal(rc, 0);
        }
    }
    return PQL_E_OK;
}

static const pql_source src = {fake_select, NULL, NULL};

/* Windows of 1 minute for every fake series: count 100 + minute, sum 1000, min -1,
 * max 99, p50 50, p95 95, p99 99 - values raw samples never give, so an answer
 * shows where it came from. no_tier: refuse as a tier past its retention does. */
static int window_calls, no_tier;
static int64_t last_width;

static int fake_windows(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                        int64_t cover_from, int64_t width, int want_q, pql_series_set *out,
                        char *err, size_t errlen)
{
    (void)ctx;
    assert_true(cover_from <= from);
    (void)err;
    (void)errlen;
    window_calls++;
    last_width = width;
    if (no_tier)
        return PQL_E_NO_TIER;
    assert_int_equal(from % width, 0);
    assert_int_equal(to % width, 0);
    for (size_t i = 0; i < sizeof fake / sizeof fake[0]; i++) {
        const struct fake_series *f = &fake[i];
        pql_label l[] = {{"__name__", (char *)f->name},
                         {"device", (char *)f->device},
                         {"site", (char *)f->site}};
        if (!pql_matchset_test(m, l, 3))
            continue;
        long idx = pql_series_add(out, l, 3);
        for (int64_t t = from; t < to; t += width) {
            pql_window w = {t, (uint64_t)(100 + t / M), 1000, -1, 99, want_q ? 50 : NAN, 95, 99};
            assert_int_equal(pql_series_push_window(out, (size_t)idx, &w), 0);
        }
    }
    return PQL_E_OK;
}

static const pql_source tsrc = {fake_select, fake_windows, NULL};

static pql_result trun(const char *q, int64_t start, int64_t end, int64_t step)
{
    pql_node *n;
    char err[400];
    if (pql_parse(q, strlen(q), &n, err, sizeof err) != 0)
        fail_msg("parse '%s': %s", q, err);
    pql_eval_opts o = {start, end, step, 0, 0, 0};
    pql_result r;
    int rc = pql_eval(n, &tsrc, &o, &r, err, sizeof err);
    pql_free(n);
    if (rc != PQL_E_OK)
        fail_msg("eval '%s': %s", q, err);
    return r;
}

/* Evaluates q; returns the result (caller frees) or fails the test. */
static pql_result run(const char *q, int64_t start, int64_t end, int64_t step)
{
    pql_node *n;
    char err[400];
    if (pql_parse(q, strlen(q), &n, err, sizeof err) != 0)
        fail_msg("parse '%s': %s", q, err);
    pql_eval_opts o = {start, end, step, 0, 0};
    pql_result r;
    int rc = pql_eval(n, &src, &o, &r, err, sizeof err);
    pql_free(n);
    if (rc != PQL_E_OK)
        fail_msg("eval '%s': %s", q, err);
    return r;
}

static const char *label(const pql_labels *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i].name, name))
            return l->v[i].value;
    return NULL;
}

static void test_lookback_and_staleness(void **state)
{
    (void)state;
    /* d1's temp ends at 180 s: present until 180 s + 5 m inclusive, stale after */
    pql_result r = run("temp{device=\"d1\"}", 180 * S + 5 * M, 180 * S + 5 * M, 1);
    assert_int_equal(r.type, PQL_VECTOR);
    assert_int_equal(r.n, 1);
    near(r.s[0].v[0], 13);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "temp");
    pql_result_free(&r);
    r = run("temp{device=\"d1\"}", 180 * S + 5 * M + 1, 180 * S + 5 * M + 1, 1);
    assert_int_equal(r.n, 0);
    pql_result_free(&r);
    /* between samples: the newest at or before t */
    r = run("temp{device=\"d1\"}", 119 * S, 119 * S, 1);
    near(r.s[0].v[0], 11);
    pql_result_free(&r);
    r = run("temp{device=\"d1\"} offset 1m", 120 * S, 120 * S, 1);
    near(r.s[0].v[0], 11);
    pql_result_free(&r);
    /* before the first sample: nothing */
    r = run("temp{device=\"d2\"}", 29 * S, 29 * S, 1);
    assert_int_equal(r.n, 0);
    pql_result_free(&r);
}

static void test_range_steps_and_windows(void **state)
{
    (void)state;
    /* windows [t - 1m, t] are closed: at 120 s, 60 s and 120 s are both in */
    pql_result r = run("count_over_time(temp{device=\"d1\"}[1m])", 0, 240 * S, 60 * S);
    assert_int_equal(r.nsteps, 5);
    assert_int_equal(r.n, 1);
    assert_null(label(&r.s[0].labels, "__name__"));
    static const double want[] = {1, 2, 2, 2, 1};
    for (int k = 0; k < 5; k++) {
        assert_true(r.s[0].has[k]);
        near(r.s[0].v[k], want[k]);
    }
    pql_result_free(&r);
    /* last_over_time keeps the metric name */
    r = run("last_over_time(temp{device=\"d1\"}[1m])", 60 * S, 60 * S, 1);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "temp");
    pql_result_free(&r);
    /* increase over the reset 120 -> 10: 70 - 0 + 120 = 190 over the full window */
    r = run("increase(cnt[4m])", 240 * S, 240 * S, 1);
    near(r.s[0].v[0], 190);
    pql_result_free(&r);
    /* one sample in the window: no rate */
    r = run("rate(cnt[30s])", 60 * S, 60 * S, 1);
    assert_int_equal(r.n, 0);
    pql_result_free(&r);
    r = run("quantile_over_time(0.5, temp[10m])", 200 * S, 200 * S, 1);
    assert_int_equal(r.n, 2);
    near(r.s[0].v[0], 11.5); /* sorted by labels: d1 first */
    near(r.s[1].v[0], 21);
    pql_result_free(&r);
    /* an instant query of a range selector returns the raw samples */
    r = run("temp[1m]", 120 * S, 120 * S, 1);
    assert_int_equal(r.type, PQL_MATRIX);
    assert_int_equal(r.raw.n, 2);
    assert_int_equal(r.raw.s[0].n, 2);
    assert_int_equal(r.raw.s[1].n, 1);
    pql_result_free(&r);
}

static void test_aggregation_and_arithmetic(void **state)
{
    (void)state;
    pql_result r = run("sum(temp)", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.s[0].labels.n, 0);
    near(r.s[0].v[0], 11 + 22);
    pql_result_free(&r);
    r = run("max by (site) (temp)", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    assert_string_equal(label(&r.s[1].labels, "site"), "b");
    assert_int_equal(r.s[1].labels.n, 1);
    pql_result_free(&r);
    r = run("count without (device, site) ({__name__=~\"temp|cnt\"})", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1); /* without drops the metric name too */
    near(r.s[0].v[0], 3);
    pql_result_free(&r);
    r = run("avg(temp) by (site)", 90 * S, 90 * S, 1);
    near(r.s[0].v[0], 11);
    pql_result_free(&r);
    r = run("min(temp)", 90 * S, 90 * S, 1);
    near(r.s[0].v[0], 11);
    pql_result_free(&r);

    r = run("2 * temp{device=\"d2\"} - 1", 90 * S, 90 * S, 1);
    near(r.s[0].v[0], 43);
    assert_null(label(&r.s[0].labels, "__name__"));
    pql_result_free(&r);
    r = run("100 / -temp{device=\"d2\"}", 90 * S, 90 * S, 1);
    near(r.s[0].v[0], 100.0 / -22);
    pql_result_free(&r);
    r = run("-2 ^ 2", 0, 0, 1);
    assert_int_equal(r.type, PQL_SCALAR);
    near(r.scalar[0], -4);
    pql_result_free(&r);
    r = run("temp{site!~\"a\"}", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "device"), "d2");
    pql_result_free(&r);
    r = run("temp{site=~\"a|b\", device!=\"d2\"}", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    pql_result_free(&r);
    /* a matcher on a label nobody has: "" matches it */
    r = run("temp{nosuch=\"\"}", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    pql_result_free(&r);
}

/* eval_err: q's evaluation fails with code and a message containing want */
static void eval_err(const char *q, int64_t start, int64_t end, int64_t step, uint64_t max_points,
                     int code, const char *want)
{
    pql_node *n;
    char err[600];
    if (pql_parse(q, strlen(q), &n, err, sizeof err) != 0)
        fail_msg("parse '%s': %s", q, err);
    pql_eval_opts o = {start, end, step, 0, max_points, 0};
    pql_result r;
    int rc = pql_eval(n, &src, &o, &r, err, sizeof err);
    pql_free(n);
    if (rc == PQL_E_OK) {
        pql_result_free(&r);
        fail_msg("'%s' evaluated", q);
    }
    assert_int_equal(rc, code);
    if (!strstr(err, want))
        fail_msg("'%s': error '%s' lacks '%s'", q, err, want);
}

/* At 90 s: temp{d1,a} 11, temp{d2,b} 22, cnt{d1,a} 60. */
static void test_vector_binary_operators(void **state)
{
    (void)state;
    /* one-to-one on all labels but __name__; arithmetic drops the name */
    pql_result r = run("cnt - temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.s[0].labels.n, 2);
    assert_string_equal(label(&r.s[0].labels, "device"), "d1");
    near(r.s[0].v[0], 49);
    pql_result_free(&r);
    /* filtering comparisons keep the left side's value and name */
    r = run("cnt > temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "cnt");
    near(r.s[0].v[0], 60);
    pql_result_free(&r);
    r = run("cnt < temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 0);
    pql_result_free(&r);
    r = run("temp > 15", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "temp");
    near(r.s[0].v[0], 22);
    pql_result_free(&r);
    r = run("15 < temp", 90 * S, 90 * S, 1); /* the vector's value, not the scalar's */
    assert_int_equal(r.n, 1);
    near(r.s[0].v[0], 22);
    pql_result_free(&r);
    /* bool: 0/1 for every series, without the name */
    r = run("temp > bool 15", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    near(r.s[0].v[0], 0);
    near(r.s[1].v[0], 1);
    assert_null(label(&r.s[0].labels, "__name__"));
    pql_result_free(&r);
    r = run("cnt == bool on(site) temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.s[0].labels.n, 1); /* on() keeps only the matching labels */
    near(r.s[0].v[0], 0);
    pql_result_free(&r);
    r = run("2 >= bool 3", 0, 0, 1);
    assert_int_equal(r.type, PQL_SCALAR);
    near(r.scalar[0], 0);
    pql_result_free(&r);
    /* many-to-one: each temp with its site's sum */
    r = run("temp / on(site) group_left sum by (site) (temp)", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    near(r.s[0].v[0], 1);
    assert_string_equal(label(&r.s[1].labels, "device"), "d2");
    pql_result_free(&r);
    r = run("temp + on() group_left cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    near(r.s[0].v[0], 71);
    near(r.s[1].v[0], 82);
    pql_result_free(&r);
    /* one-to-many: the labels of the right ("many") side, the operands in order */
    r = run("cnt - on(site) group_right temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "device"), "d1");
    near(r.s[0].v[0], 49);
    pql_result_free(&r);
    /* group_left(label) copies the label from the "one" side */
    r = run("sum by (site) (temp) * on(site) group_left(device) cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "device"), "d1");
    near(r.s[0].v[0], 660);
    pql_result_free(&r);
    /* set operators keep the left side's labels and values */
    r = run("temp and cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "temp");
    near(r.s[0].v[0], 11);
    pql_result_free(&r);
    r = run("temp unless cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    assert_string_equal(label(&r.s[0].labels, "device"), "d2");
    pql_result_free(&r);
    r = run("cnt or temp", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    assert_string_equal(label(&r.s[0].labels, "__name__"), "cnt");
    assert_string_equal(label(&r.s[1].labels, "device"), "d2");
    pql_result_free(&r);
    r = run("temp and on(site) cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 1);
    pql_result_free(&r);
    r = run("temp and on() cnt", 90 * S, 90 * S, 1);
    assert_int_equal(r.n, 2);
    pql_result_free(&r);
}

static void test_vector_binary_steps_and_errors(void **state)
{
    (void)state;
    /* a range query filters step by step: cnt is 0, 60, 120, 10, 70 */
    pql_result r = run("cnt > bool 50", 0, 240 * S, 60 * S);
    static const double want[] = {0, 1, 1, 0, 1};
    for (int k = 0; k < 5; k++)
        near(r.s[0].v[k], want[k]);
    pql_result_free(&r);
    r = run("cnt > on(device) temp", 0, 240 * S, 60 * S);
    assert_int_equal(r.n, 1);
    static const uint8_t has[] = {0, 1, 1, 0, 1};
    for (int k = 0; k < 5; k++)
        assert_int_equal(r.s[0].has[k], has[k]);
    pql_result_free(&r);
    /* d1's temp 4 minutes ago, else now: one series (the same labels) */
    r = run("temp{device=\"d1\"} offset 4m or temp{device=\"d1\"}", 0, 480 * S, 60 * S);
    assert_int_equal(r.n, 1);
    static const double both[] = {10, 11, 12, 13, 10, 11, 12, 13, 13};
    for (int k = 0; k < 9; k++) {
        assert_true(r.s[0].has[k]);
        near(r.s[0].v[k], both[k]);
    }
    pql_result_free(&r);

    /* many-to-many, with Prometheus' message naming the group and both series */
    eval_err("temp + on(site) {__name__=~\"temp|cnt\"}", 90 * S, 90 * S, 1, 0, PQL_E_EXECUTION,
             "found duplicate series for the match group {site=\"a\"} on the right hand-side of "
             "the operation: [{__name__=\"temp\", device=\"d1\", site=\"a\"}, "
             "{__name__=\"cnt\", device=\"d1\", site=\"a\"}];many-to-many matching not allowed: "
             "matching labels must be unique on one side");
    eval_err("{__name__=~\"temp|cnt\"} / on(site) group_right temp", 90 * S, 90 * S, 1, 0,
             PQL_E_EXECUTION, "on the left hand-side");
    eval_err("{__name__=~\"temp|cnt\"} - on(site) sum by (site) (temp)", 90 * S, 90 * S, 1, 0,
             PQL_E_EXECUTION,
             "multiple matches for labels: many-to-one matching must be explicit "
             "(group_left/group_right)");
    eval_err("{__name__=~\"temp|cnt\"} * on(site) group_left sum by (site) (temp)", 90 * S, 90 * S,
             1, 0, PQL_E_EXECUTION,
             "multiple matches for labels: grouping labels must ensure unique matches");
    /* per step: at 0 s d2 has no sample, so nothing is matched and nothing refused */
    static const char dup2[] = "temp{device=\"d2\"} * on() temp";
    r = run(dup2, 0, 0, 1);
    assert_int_equal(r.n, 0);
    pql_result_free(&r);
    eval_err(dup2, 0, 90 * S, 30 * S, 0, PQL_E_EXECUTION, "many-to-many matching not allowed");
    /* the operands count against the point limit, and so does the result: cnt and
     * temp hold 3 x 101 points, the difference 101 more */
    eval_err("cnt - temp", 0, 100 * S, S, 303, PQL_E_EXECUTION, "more than 303 points");
    r = run("cnt - temp", 0, 100 * S, S);
    pql_result_free(&r);
    eval_err("cnt or temp", 0, 100 * S, S, 400, PQL_E_EXECUTION, "more than 400 points");
    /* and the pairs one matching may pair: 3 x 2 here, past 10 with the 5 input points */
    eval_err("{__name__=~\"temp|cnt\"} + on() group_left temp", 90 * S, 90 * S, 1, 10,
             PQL_E_EXECUTION, "pairs of series");
}

static void test_limits_and_errors(void **state)
{
    (void)state;
    pql_node *n;
    char err[400];
    pql_result r;
    assert_int_equal(pql_parse("temp", 4, &n, err, sizeof err), 0);
    pql_eval_opts o = {0, 11001 * S, S, 0, 0};
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_BAD_DATA);
    assert_non_null(strstr(err, "11,000 points"));
    o = (pql_eval_opts){0, 11000 * S, S, 0, 0}; /* 11,001 points: allowed */
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_OK);
    pql_result_free(&r);
    o = (pql_eval_opts){0, 100 * S, S, 0, 100}; /* 2 series x 101 steps > 100 points */
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_EXECUTION);
    assert_non_null(strstr(err, "more than 100 points"));
    o = (pql_eval_opts){0, 600 * S, S, 3, 0}; /* more than 3 samples read */
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_EXECUTION);
    pql_free(n);
    assert_int_equal(pql_parse("temp{a=~\"(\"}", 12, &n, err, sizeof err), 0);
    o = (pql_eval_opts){0, 0, 1, 0, 0};
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_BAD_DATA);
    assert_non_null(strstr(err, "invalid regular expression"));
    pql_free(n);
    /* patterns glibc would compile into exponential memory or match with
     * back-references are refused, as RE2 refuses them (found by fuzz_promql) */
    static const char *const bad_re[] = {
        "temp{a=~\"x++\"}",    "temp{a=~\"x*?\"}", "temp{a!~\"(a)\\\\1\"}", "temp{a=~\"x{2000}\"}",
        "temp{a=~\"x{3,1}\"}", "temp{a=~\"[ab\"}", "temp{a=~\"x{2}{2}\"}",
    };
    for (size_t i = 0; i < sizeof bad_re / sizeof bad_re[0]; i++) {
        assert_int_equal(pql_parse(bad_re[i], strlen(bad_re[i]), &n, err, sizeof err), 0);
        if (pql_eval(n, &src, &o, &r, err, sizeof err) != PQL_E_BAD_DATA)
            fail_msg("'%s' accepted", bad_re[i]);
        assert_non_null(strstr(err, "invalid regular expression"));
        pql_free(n);
    }
    /* ... while ordinary ones, brackets with quantifier characters inside, and
     * escaped operators pass */
    static const char *const good_re[] = {
        "temp{site=~\"[a+*]\"}",
        "temp{site=~\"a{1}|b{0,3}\"}",
        "temp{site=~\"\\\\++|a\"}",
        "temp{site=~\"[[:alpha:]]+\"}",
    };
    for (size_t i = 0; i < sizeof good_re / sizeof good_re[0]; i++) {
        assert_int_equal(pql_parse(good_re[i], strlen(good_re[i]), &n, err, sizeof err), 0);
        if (pql_eval(n, &src, &o, &r, err, sizeof err) != PQL_E_OK)
            fail_msg("'%s' refused: %s", good_re[i], err);
        pql_result_free(&r);
        pql_free(n);
    }
    /* temp and cnt of d1 have the same labels once the function drops __name__:
     * refused as Prometheus refuses it; a selector matching one series per label set
     * after the drop is fine */
    static const char dup[] = "count_over_time({__name__=~\"temp|cnt\", device=\"d1\"}[1m])";
    assert_int_equal(pql_parse(dup, strlen(dup), &n, err, sizeof err), 0);
    o = (pql_eval_opts){60 * S, 60 * S, 1, 0, 0};
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_EXECUTION);
    assert_string_equal(err, "vector cannot contain metrics with the same labelset");
    o = (pql_eval_opts){0, 0, 1, 0, 0};
    pql_free(n);
    static const char nodup[] = "-{__name__=~\"temp|cnt\", site=\"b\"}";
    assert_int_equal(pql_parse(nodup, strlen(nodup), &n, err, sizeof err), 0);
    o = (pql_eval_opts){90 * S, 90 * S, 1, 0, 0};
    assert_int_equal(pql_eval(n, &src, &o, &r, err, sizeof err), PQL_E_OK);
    pql_result_free(&r);
    pql_free(n);
    /* each selector reads the source once per query, however many steps */
    selects = 0;
    r = run("sum(rate(cnt[1m])) + 1", 0, 240 * S, S);
    assert_int_equal(selects, 1);
    pql_result_free(&r);
}

static void test_tier_routing(void **state)
{
    (void)state;
    /* aligned steps of whole minutes over whole minutes: the 1m tier, windows [t-r, t) */
    window_calls = 0;
    pql_result r = trun("count_over_time(temp{device=\"d1\"}[2m])", 4 * M, 6 * M, M);
    assert_int_equal(window_calls, 1);
    assert_int_equal(last_width, M);
    assert_int_equal(r.tier_ms, M);
    near(r.s[0].v[0], (100 + 2) + (100 + 3)); /* windows at 2 m and 3 m */
    near(r.s[0].v[2], (100 + 4) + (100 + 5));
    pql_result_free(&r);
    r = trun("sum_over_time(temp{device=\"d1\"}[1m])", 5 * M, 5 * M, 1);
    near(r.s[0].v[0], 1000);
    pql_result_free(&r);
    r = trun("avg_over_time(temp{device=\"d1\"}[2m] offset 1m)", 5 * M, 5 * M, 1);
    near(r.s[0].v[0], 2000.0 / ((100 + 2) + (100 + 3)));
    pql_result_free(&r);
    r = trun("min_over_time(temp{device=\"d1\"}[3m]) * 1000 + 7", 5 * M, 5 * M, 1);
    near(r.s[0].v[0], -1000 + 7);
    pql_result_free(&r);
    r = trun("max_over_time(temp{device=\"d1\"}[3m])", 5 * M, 5 * M, 1);
    near(r.s[0].v[0], 99);
    pql_result_free(&r);
    r = trun("quantile_over_time(0.95, temp{device=\"d1\"}[1m])", 5 * M, 5 * M, 1);
    near(r.s[0].v[0], 95);
    pql_result_free(&r);
    /* a wider tier when everything is a multiple of it */
    r = trun("count_over_time(temp[2h])", 4 * 3600 * S, 4 * 3600 * S, 1);
    assert_int_equal(last_width, 3600 * S);
    pql_result_free(&r);

    /* raw otherwise: a misaligned time, step or range, a quantile the windows do not
     * keep or over more than one window, a function windows cannot answer */
    static const struct {
        const char *q;
        int64_t start, end, step;
    } raw[] = {
        {"count_over_time(temp[2m])", 4 * M + 1, 4 * M + 1, 1},
        {"count_over_time(temp[2m])", 4 * M, 6 * M, 30 * S},
        {"count_over_time(temp[90s])", 4 * M, 4 * M, 1},
        {"count_over_time(temp[2m] offset 30s)", 4 * M, 4 * M, 1},
        {"quantile_over_time(0.9, temp[1m])", 4 * M, 4 * M, 1},
        {"quantile_over_time(0.5, temp[2m])", 4 * M, 4 * M, 1},
        {"last_over_time(temp[1m])", 4 * M, 4 * M, 1},
        {"rate(cnt[2m])", 4 * M, 4 * M, 1},
    };
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
        window_calls = 0;
        r = trun(raw[i].q, raw[i].start, raw[i].end, raw[i].step);
        if (window_calls || r.tier_ms)
            fail_msg("'%s' read the tier", raw[i].q);
        pql_result_free(&r);
    }
    /* a tier that no longer covers the range: raw answers */
    no_tier = 1;
    window_calls = 0;
    r = trun("count_over_time(temp{device=\"d1\"}[2m])", 4 * M, 4 * M, 1);
    assert_int_equal(window_calls, 1);
    assert_int_equal(r.tier_ms, 0);
    near(r.s[0].v[0], 2); /* raw: the samples at 120 s and 180 s */
    pql_result_free(&r);
    no_tier = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_prometheus_cases),
        cmocka_unit_test(test_quantile_and_over_time),
        cmocka_unit_test(test_lookback_and_staleness),
        cmocka_unit_test(test_range_steps_and_windows),
        cmocka_unit_test(test_aggregation_and_arithmetic),
        cmocka_unit_test(test_vector_binary_operators),
        cmocka_unit_test(test_vector_binary_steps_and_errors),
        cmocka_unit_test(test_limits_and_errors),
        cmocka_unit_test(test_tier_routing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
