/* rollup: windows of one series, merged into coarser tiers (see rollup.h). */
#include "agg/rollup.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MS_MIN INT64_C(60000)
#define MS_HOUR (60 * MS_MIN)
#define MS_DAY (24 * MS_HOUR)

int64_t bdb_res_width(enum bdb_res r)
{
    switch (r) {
    case BDB_RES_1M:
        return MS_MIN;
    case BDB_RES_1H:
        return MS_HOUR;
    case BDB_RES_1D:
        return MS_DAY;
    default:
        return 0;
    }
}

const char *bdb_res_name(enum bdb_res r)
{
    static const char *const names[] = {"raw", "1m", "1h", "1d"};
    return (unsigned)r < 4 ? names[r] : "?";
}

int bdb_res_parse(const char *s)
{
    for (int r = BDB_RES_RAW; r <= BDB_RES_1D; r++)
        if (!strcmp(s, bdb_res_name((enum bdb_res)r)))
            return r;
    return -1;
}

enum bdb_res bdb_rollup_route(int64_t range_ms)
{
    if (range_ms > 90 * MS_DAY)
        return BDB_RES_1D;
    if (range_ms > 7 * MS_DAY)
        return BDB_RES_1H;
    if (range_ms > 6 * MS_HOUR)
        return BDB_RES_1M;
    return BDB_RES_RAW;
}

void bdb_rollup_init(bdb_rollup *r, int64_t width)
{
    memset(r, 0, sizeof *r);
    r->width = width;
}

/* A new window's sketch: a stats-only rollup's stay zeroed and never take memory
 * (every operation below leaves them alone), so they cost neither an init nor a free. */
static void sk_init(const bdb_rollup *r, bdb_sketch *s)
{
    if (r->stats_only)
        memset(s, 0, sizeof *s);
    else
        bdb_sketch_init_default(s);
}

void bdb_rollup_reset(bdb_rollup *r)
{
    for (size_t i = 0; i < r->n && !r->stats_only; i++)
        bdb_sketch_free(&r->w[i].sk);
    r->n = 0;
    r->skipped = 0;
}

void bdb_rollup_free(bdb_rollup *r)
{
    bdb_rollup_reset(r);
    free(r->w);
    r->w = NULL;
    r->cap = 0;
}

/* Position of the first window with start >= key. Appends in time order are the common
 * case (a flush walks a series in time order), so the last slot is tried first. */
static size_t lower_bound(const bdb_rollup *r, int64_t key)
{
    /* samples arrive in time order: the last window, or a new one after it */
    if (r->n == 0 || r->w[r->n - 1].start < key)
        return r->n;
    if (r->w[r->n - 1].start == key)
        return r->n - 1;
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->w[mid].start < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The window starting at start, created empty if missing; NULL when out of memory. */
static bdb_window *slot(bdb_rollup *r, int64_t start)
{
    size_t i = lower_bound(r, start);
    if (i < r->n && r->w[i].start == start)
        return &r->w[i];
    if (r->n == r->cap) {
        /* most rollups of a flush hold a window or two (120 bytes each) */
        size_t cap = r->cap ? r->cap * 2 : 2;
        bdb_window *p = bdb_realloc(r->w, cap * sizeof *p);
        if (!p)
            return NULL;
        r->w = p;
        r->cap = cap;
    }
    memmove(&r->w[i + 1], &r->w[i], (r->n - i) * sizeof *r->w);
    r->n++;
    bdb_window *w = &r->w[i];
    w->start = start;
    bdb_stats_init(&w->st);
    sk_init(r, &w->sk);
    return w;
}

/* Removes the window at index i if it is empty (after a failed first add). */
static void drop_if_empty(bdb_rollup *r, bdb_window *w)
{
    if (w->st.count != 0 || bdb_sketch_count(&w->sk) != 0)
        return;
    size_t i = (size_t)(w - r->w);
    bdb_sketch_free(&w->sk);
    memmove(&r->w[i], &r->w[i + 1], (r->n - i - 1) * sizeof *r->w);
    r->n--;
}

int bdb_rollup_add(bdb_rollup *r, int64_t ts, double v)
{
    if (!isfinite(v)) {
        r->skipped++;
        return BDB_OK;
    }
    bdb_window *w = slot(r, bdb_align_down(ts, r->width));
    if (!w)
        return BDB_ERR_NOMEM;
    /* The sketch first: it is the one that can fail for memory, and the stats add
     * cannot fail once the sketch accepted the count. A reader that shows no quantile
     * has no use for it (a tier derived from raw adds every sample). */
    int rc = r->stats_only ? BDB_OK : bdb_sketch_add(&w->sk, v);
    if (rc == BDB_OK && (rc = bdb_stats_add(&w->st, v)) != BDB_OK) {
        /* Only the 2^53 limit gets here; the sketch took one value too many. Rebuilding
         * it is not worth it for a count no telemetry reaches: report the limit. */
        return rc;
    }
    if (rc != BDB_OK)
        drop_if_empty(r, w);
    return rc;
}

int bdb_rollup_add_window(bdb_rollup *r, int64_t start, const double *v, size_t n)
{
    if (n == 0)
        return BDB_OK;
    bdb_window *w = slot(r, bdb_align_down(start, r->width));
    if (!w)
        return BDB_ERR_NOMEM;
    /* as n calls of bdb_rollup_add: the readings the sketch took are in the stats too */
    size_t k = 0;
    int rc = BDB_OK;
    while (k < n && !r->stats_only && (rc = bdb_sketch_add(&w->sk, v[k])) == BDB_OK)
        k++;
    if (r->stats_only)
        k = n;
    int sr = bdb_stats_add_n(&w->st, v, k);
    if (rc == BDB_OK)
        rc = sr;
    if (rc != BDB_OK)
        drop_if_empty(r, w);
    return rc;
}

int bdb_rollup_merge_window(bdb_rollup *r, const bdb_window *src)
{
    if (src->st.count == 0 && bdb_sketch_count(&src->sk) == 0)
        return BDB_OK;
    bdb_window *w = slot(r, bdb_align_down(src->start, r->width));
    if (!w)
        return BDB_ERR_NOMEM;
    bdb_stats st = w->st;
    int rc = bdb_stats_merge(&st, &src->st);
    if (rc == BDB_OK && !r->stats_only)
        rc = bdb_sketch_merge(&w->sk, &src->sk);
    if (rc == BDB_OK)
        w->st = st;
    else
        drop_if_empty(r, w);
    return rc;
}

int bdb_rollup_append_stats(bdb_rollup *r, const bdb_stwin *v, size_t n)
{
    if (r->n + n > r->cap) { /* room for all: the empty ones are skipped below */
        size_t cap = r->cap * 2 > r->n + n ? r->cap * 2 : r->n + n;
        bdb_window *p = bdb_realloc(r->w, cap * sizeof *p);
        if (!p)
            return BDB_ERR_NOMEM;
        r->w = p;
        r->cap = cap;
    }
    /* One pass: the windows are written past r->n and become r's only if all of them
     * are in order (a refusal leaves r as it was). */
    int64_t prev = r->n ? r->w[r->n - 1].start : INT64_MIN;
    size_t k = r->n;
    for (size_t i = 0; i < n; i++) {
        if (v[i].start <= prev || bdb_align_down(v[i].start, r->width) != v[i].start)
            return BDB_ERR_INVALID;
        prev = v[i].start;
        if (!v[i].st.count)
            continue;
        bdb_window *w = &r->w[k++];
        w->start = v[i].start;
        w->st = v[i].st; /* a merge into an empty window is a copy (bdb_stats_merge) */
        sk_init(r, &w->sk);
    }
    r->n = k;
    return BDB_OK;
}

int bdb_rollup_set_window(bdb_rollup *r, const bdb_window *src)
{
    int64_t start = bdb_align_down(src->start, r->width);
    if (src->st.count == 0) { /* an empty replacement: the window has no sample left */
        size_t i = lower_bound(r, start);
        if (i < r->n && r->w[i].start == start) {
            bdb_sketch_free(&r->w[i].sk);
            memmove(&r->w[i], &r->w[i + 1], (r->n - i - 1) * sizeof *r->w);
            r->n--;
        }
        return BDB_OK;
    }
    bdb_window *w = slot(r, start);
    if (!w)
        return BDB_ERR_NOMEM;
    int rc = r->stats_only ? BDB_OK : bdb_sketch_copy(&w->sk, &src->sk);
    if (rc == BDB_OK)
        w->st = src->st;
    return rc;
}

int bdb_rollup_fold(const bdb_rollup *src, int64_t lo, int64_t hi, bdb_window *out)
{
    for (size_t i = lower_bound(src, lo); i < src->n && src->w[i].start < hi; i++) {
        const bdb_window *w = &src->w[i];
        bdb_stats st = out->st;
        int rc = bdb_stats_merge(&st, &w->st);
        if (rc == BDB_OK && !src->stats_only)
            rc = bdb_sketch_merge(&out->sk, &w->sk);
        if (rc != BDB_OK)
            return rc;
        out->st = st;
    }
    return BDB_OK;
}

int bdb_rollup_merge(bdb_rollup *dst, const bdb_rollup *src)
{
    if (src->width <= 0 || dst->width % src->width != 0)
        return BDB_ERR_INVALID;
    for (size_t i = 0; i < src->n; i++) {
        int rc = bdb_rollup_merge_window(dst, &src->w[i]);
        if (rc != BDB_OK)
            return rc;
    }
    dst->skipped += src->skipped;
    return BDB_OK;
}

const bdb_window *bdb_rollup_find(const bdb_rollup *r, int64_t start)
{
    size_t i = lower_bound(r, start);
    return i < r->n && r->w[i].start == start ? &r->w[i] : NULL;
}

size_t bdb_rollup_write(const bdb_rollup *r, int64_t lo, int64_t hi, bdb_buf *out)
{
    size_t a = lower_bound(r, lo), b = lower_bound(r, hi);
    bdb_buf_put_uvarint(out, b - a);
    int64_t prev = 0;
    for (size_t i = a; i < b; i++) {
        int64_t idx = bdb_floor_div(r->w[i].start, r->width);
        if (i == a)
            bdb_buf_put_varint(out, idx);
        else
            bdb_buf_put_uvarint(out, (uint64_t)(idx - prev - 1));
        prev = idx;
        bdb_stats_write(&r->w[i].st, out);
        bdb_sketch_write(&r->w[i].sk, out);
    }
    return b - a;
}

/* part: windows before lo are stepped over unbuilt, and reading stops at the first
 * window at or after hi (*stopped = 1, d left there). */
static int rollup_read(bdb_rollup *r, bdb_dec *d, int64_t lo, int64_t hi, int part, int *stopped,
                       const int64_t *base, int form)
{
    uint64_t n = bdb_dec_uvarint_canon(d);
    /* Every window takes at least 2 + 9 bytes (compact: 5 in C1, 4 in C2): refuse counts
     * the input cannot hold before looping over them. */
    if (d->err || n > bdb_dec_left(d) / (!base ? 11 : form == BDB_C1 ? 5 : 4) || (base && n == 0))
        return BDB_ERR_CORRUPT;
    /* An index this large would overflow start = index * width. */
    const int64_t max_idx = INT64_MAX / 2 / r->width;
    if (base && (*base > max_idx || *base < -max_idx))
        return BDB_ERR_CORRUPT; /* a file window no window index can reach */
    int64_t prev = 0;
    bdb_window w;
    bdb_stats_init(&w.st);
    bdb_sketch_init_default(&w.sk);
    int rc = BDB_OK;
    for (uint64_t i = 0; i < n && rc == BDB_OK; i++) {
        int64_t idx;
        if (i == 0 && base) {
            uint64_t off = bdb_dec_uvarint_canon(d);
            idx = off > (uint64_t)(max_idx - *base) ? INT64_MAX : *base + (int64_t)off;
        } else if (i == 0) {
            idx = bdb_dec_varint_canon(d);
        } else {
            uint64_t gap = bdb_dec_uvarint_canon(d);
            idx = gap > (uint64_t)(max_idx - prev) ? INT64_MAX : prev + 1 + (int64_t)gap;
        }
        if (d->err || idx > max_idx || idx < -max_idx) {
            rc = BDB_ERR_CORRUPT;
            break;
        }
        prev = idx;
        if (part && idx * r->width >= hi) {
            *stopped = 1;
            break;
        }
        if (base) {
            if (part && idx * r->width < lo) {
                uint64_t cnt;
                if ((rc = bdb_stats_skip_count_c(d, form, &cnt)) != BDB_OK ||
                    (rc = bdb_sketch_skip_c(d, form, cnt)) != BDB_OK)
                    break;
                continue;
            }
            if ((rc = bdb_stats_read_c(&w.st, d, form)) != BDB_OK)
                break;
            rc = r->stats_only ? bdb_sketch_skip_c(d, form, w.st.count)
                               : bdb_sketch_read_c(&w.sk, d, form, w.st.count, w.st.min, w.st.max);
            if (rc != BDB_OK)
                break;
            /* a full-form sketch must describe the same samples */
            if (!r->stats_only &&
                (w.st.count != bdb_sketch_count(&w.sk) || w.st.min != bdb_sketch_min(&w.sk) ||
                 w.st.max != bdb_sketch_max(&w.sk))) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
        } else if (part && idx * r->width < lo) {
            if ((rc = bdb_stats_skip(d)) != BDB_OK || (rc = bdb_sketch_skip(d)) != BDB_OK)
                break;
            continue;
        } else if (r->stats_only) {
            if ((rc = bdb_stats_read(&w.st, d)) != BDB_OK || (rc = bdb_sketch_skip(d)) != BDB_OK)
                break;
            if (w.st.count == 0) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
        } else {
            if ((rc = bdb_stats_read(&w.st, d)) != BDB_OK ||
                (rc = bdb_sketch_read(&w.sk, d)) != BDB_OK)
                break;
            /* Both parts describe the same samples: their counts and extremes agree. */
            if (w.st.count == 0 || w.st.count != bdb_sketch_count(&w.sk) ||
                w.st.min != bdb_sketch_min(&w.sk) || w.st.max != bdb_sketch_max(&w.sk)) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
        }
        w.start = idx * r->width;
        if (w.start >= lo && w.start < hi)
            rc = bdb_rollup_merge_window(r, &w);
    }
    bdb_sketch_free(&w.sk);
    /* A sketch of another accuracy is not something a tier file can hold. */
    if (rc == BDB_ERR_INVALID || (rc == BDB_OK && d->err))
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK)
        d->err = 1;
    return rc;
}

int bdb_rollup_read(bdb_rollup *r, bdb_dec *d, int64_t lo, int64_t hi)
{
    return rollup_read(r, d, lo, hi, 0, NULL, NULL, 0);
}

int bdb_rollup_read_part(bdb_rollup *r, bdb_dec *d, int64_t lo, int64_t hi, int *stopped)
{
    *stopped = 0;
    return rollup_read(r, d, lo, hi, 1, stopped, NULL, 0);
}

size_t bdb_rollup_write_c(const bdb_rollup *r, int64_t lo, int64_t hi, int64_t base, int form,
                          bdb_buf *out)
{
    size_t a = lower_bound(r, lo), b = lower_bound(r, hi);
    if (a == b)
        return 0;
    bdb_buf_put_uvarint(out, b - a);
    int64_t prev = 0;
    for (size_t i = a; i < b; i++) {
        int64_t idx = bdb_floor_div(r->w[i].start, r->width);
        if (i == a)
            bdb_buf_put_uvarint(out, (uint64_t)(idx - base));
        else
            bdb_buf_put_uvarint(out, (uint64_t)(idx - prev - 1));
        prev = idx;
        bdb_stats_write_c(&r->w[i].st, form, out);
        bdb_sketch_write_c(&r->w[i].sk, form, out);
    }
    return b - a;
}

int bdb_rollup_read_c(bdb_rollup *r, bdb_dec *d, int form, int64_t base, int64_t lo, int64_t hi,
                      int part, int *stopped)
{
    int st = 0;
    int rc = rollup_read(r, d, lo, hi, part, &st, &base, form);
    if (stopped)
        *stopped = st;
    return rc;
}
