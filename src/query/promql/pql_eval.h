/* pql_eval: evaluates a parsed PromQL expression (pql_parse.h) at one instant or at
 * every step of a range, against a sample source: anything that can list the series
 * a selector matches with their raw samples (pql_source_db.h reads bucketdb's
 * engine; unit tests use an array). Semantics follow Prometheus 2.x: an instant
 * selector takes the newest sample at most PQL_LOOKBACK_MS old, a range [r] the
 * samples in [t - r, t], both shifted back by offset (docs/PROMQL.md#semantics). */
#ifndef BDB_PQL_EVAL_H
#define BDB_PQL_EVAL_H

#include "query/promql/pql_parse.h"

#include <stddef.h>
#include <stdint.h>

#define PQL_LOOKBACK_MS (5 * 60 * 1000)
/* A range query's (end - start) / step is at most this, as in Prometheus (which so
 * answers up to 11,001 points per series). */
#define PQL_MAX_STEPS 11000

typedef struct pql_label {
    char *name, *value;
} pql_label;

/* A label set, sorted by name, no empty values. */
typedef struct pql_labels {
    pql_label *v;
    size_t n;
} pql_labels;

/* The statistics of one aligned window of a series (a rollup tier's window). */
typedef struct pql_window {
    int64_t start;
    uint64_t count;
    double sum, min, max;
    double p50, p95, p99; /* within the sketch's relative error; NaN when not read */
} pql_window;

/* One series from the source: its labels and samples in time order (or, from
 * select_windows, its windows in time order). */
typedef struct pql_series {
    pql_labels labels;
    int64_t *ts;
    double *v;
    size_t n, cap;
    pql_window *w;
    size_t nw, wcap;
} pql_series;

typedef struct pql_series_set {
    pql_series *s;
    size_t n, cap;
    uint64_t samples;     /* all series' samples */
    uint64_t max_samples; /* pql_series_push fails past it; 0 = no limit */
} pql_series_set;

/* Adds a series with a copy of labels (n pairs, any order): its index, or -1 out of
 * memory. */
long pql_series_add(pql_series_set *set, const pql_label *labels, size_t n);
/* Appends a sample: 0, -1 out of memory, -2 past max_samples. */
int pql_series_push(pql_series_set *set, size_t idx, int64_t ts, double v);
/* Appends a window (counted as one sample against max_samples): as pql_series_push. */
int pql_series_push_window(pql_series_set *set, size_t idx, const pql_window *w);
/* n windows appended to series idx at once, for the caller to fill (*out): as n
 * pql_series_push_window calls, with the same limit and the same results. */
int pql_series_add_windows(pql_series_set *set, size_t idx, size_t n, pql_window **out);
void pql_series_set_free(pql_series_set *set);

/* Label matchers, compiled (regular expressions are POSIX extended, anchored). */
typedef struct pql_matchset pql_matchset;
/* 0, or -1 with err filled (a bad regular expression). */
int pql_matchset_compile(const pql_node *sel, pql_matchset **out, char *err, size_t errlen);
/* 1 when the labels (n pairs, any order) satisfy every matcher; a missing label
 * counts as the empty string. */
int pql_matchset_test(const pql_matchset *m, const pql_label *labels, size_t n);
/* The value a matcher name="value" of m requires (not empty: "" matches an absent
 * label too), or NULL: a source that indexes that label reads only what has it. */
const char *pql_matchset_equal(const pql_matchset *m, const char *name);
void pql_matchset_free(pql_matchset *m);

typedef struct pql_source {
    /* Fills out with the series whose labels pass m, and their samples in
     * [from, to] (ms). 0, or an error: PQL_E_* with err filled. */
    int (*select)(void *ctx, const pql_matchset *m, int64_t from, int64_t to, pql_series_set *out,
                  char *err, size_t errlen);
    /* Optional (NULL: raw samples only). The same series with their windows of
     * width_ms (one of PQL_TIER_WIDTHS) whose start is in [from, to), from and to
     * multiples of width_ms; quantiles only when want_quantiles. PQL_E_NO_TIER
     * (out left empty) sends the query to select; it is answered when the tier no
     * longer covers cover_from (<= from: the start of the whole query these steps are
     * part of, so that every part chooses as the whole would). */
    int (*select_windows)(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                          int64_t cover_from, int64_t width_ms, int want_quantiles,
                          pql_series_set *out, char *err, size_t errlen);
    void *ctx;
} pql_source;

/* Window widths a source's select_windows serves, widest first: 1 d, 1 h, 1 m. */
#define PQL_TIER_WIDTHS                                                                            \
    {                                                                                              \
        86400000, 3600000, 60000                                                                   \
    }

/* PQL_E_NO_TIER: select_windows cannot answer (the tier no longer covers the range);
 * the evaluator then reads raw samples. pql_eval never returns it. */
/* PQL_E_UNAVAILABLE: the storage backend could not be read (the answer would hold only
 * what the head holds): the caller answers 503, never a silently partial result. */
enum pql_errtype {
    PQL_E_OK,
    PQL_E_BAD_DATA,
    PQL_E_EXECUTION,
    PQL_E_INTERNAL,
    PQL_E_NO_TIER,
    PQL_E_UNAVAILABLE
};

/* The answer: a scalar (values[step]), vector series (values[step] where has[step]),
 * or, for an instant query of a range selector, raw series (matrix). */
typedef struct pql_out_series {
    pql_labels labels;
    double *v;
    uint8_t *has;
} pql_out_series;

typedef struct pql_result {
    enum pql_type type;
    int64_t start, step; /* ms */
    size_t nsteps;
    double *scalar;    /* PQL_SCALAR: nsteps values */
    pql_out_series *s; /* PQL_VECTOR, sorted by labels */
    size_t n;
    pql_series_set raw; /* PQL_MATRIX */
    int64_t tier_ms;    /* the widest tier a range function was answered from; 0: raw */
    uint64_t samples;   /* raw samples and windows read (against max_samples) */
    int64_t raw_from;   /* the earliest raw sample time read (INT64_MAX: none, tiers only) */
} pql_result;

typedef struct pql_eval_opts {
    int64_t start, end, step; /* ms; an instant query: start = end, step 1 */
    uint64_t max_samples;     /* raw samples read, summed over selectors; 0 = no limit */
    uint64_t max_points;      /* series x steps held at once; 0 = no limit */
    int no_tiers;             /* 1: never select_windows (tests compare both ways) */
    /* 1: these steps are part of a range query starting at part_start with more than
     * one step (pql_cache.h): tiers are chosen as for that query */
    int part;
    int64_t part_start;
    uint64_t part_samples; /* read by the query's earlier part: counted against max_samples */
} pql_eval_opts;

/* 0 with *res filled (free with pql_result_free), or a PQL_E_* with err filled. */
int pql_eval(const pql_node *expr, const pql_source *src, const pql_eval_opts *o, pql_result *res,
             char *err, size_t errlen);
void pql_result_free(pql_result *r);
void pql_labels_free(pql_labels *l);
/* Label sets in Prometheus' order (by name, then value, pair by pair). */
int pql_labels_cmp(const pql_labels *a, const pql_labels *b);

#endif
