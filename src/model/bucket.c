#include "model/bucket.h"
#include "common/alloc.h"
#include "bucketdb/bdb.h"

#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    int64_t ms;
} sizes[] = {
    {"10m", 10 * BDB_MS_MIN}, {"15m", 15 * BDB_MS_MIN}, {"1h", BDB_MS_HOUR},
    {"6h", 6 * BDB_MS_HOUR},  {"1d", BDB_MS_DAY},
};

const char *bdb_freq_name(enum bdb_freq_class c)
{
    switch (c) {
    case BDB_FREQ_LOW:
        return "low";
    case BDB_FREQ_MEDIUM:
        return "medium";
    case BDB_FREQ_HIGH:
        return "high";
    default:
        return "unknown";
    }
}

int64_t bdb_bucket_for_class(enum bdb_freq_class c)
{
    switch (c) {
    case BDB_FREQ_HIGH:
        return 15 * BDB_MS_MIN;
    case BDB_FREQ_LOW:
        return 6 * BDB_MS_HOUR;
    default:
        return BDB_MS_HOUR;
    }
}

int64_t bdb_bucket_parse(const char *s)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(s, sizes[i].name) == 0)
            return sizes[i].ms;
    return 0;
}

const char *bdb_bucket_name(int64_t size_ms)
{
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].ms == size_ms)
            return sizes[i].name;
    return "?";
}

static int reserve(bdb_bucket_history *h, uint32_t n)
{
    if (n <= h->cap)
        return BDB_OK;
    uint32_t cap = h->cap ? h->cap * 2 : 2;
    while (cap < n)
        cap *= 2;
    bdb_bucket_entry *e = bdb_realloc(h->e, cap * sizeof *e);
    if (!e)
        return BDB_ERR_NOMEM; /* the history as it was */
    h->e = e;
    h->cap = cap;
    return BDB_OK;
}

int bdb_bucket_history_init(bdb_bucket_history *h, int64_t size_ms)
{
    h->e = NULL;
    h->n = h->cap = 0;
    return bdb_bucket_history_push(h, INT64_MIN, size_ms);
}

void bdb_bucket_history_free(bdb_bucket_history *h)
{
    free(h->e);
    h->e = NULL;
    h->n = h->cap = 0;
}

int bdb_bucket_history_copy(bdb_bucket_history *dst, const bdb_bucket_history *src)
{
    dst->e = NULL;
    dst->n = dst->cap = 0;
    if (reserve(dst, src->n) != BDB_OK)
        return BDB_ERR_NOMEM;
    memcpy(dst->e, src->e, src->n * sizeof *src->e);
    dst->n = src->n;
    return BDB_OK;
}

int bdb_bucket_history_next_ok(const bdb_bucket_history *h, int64_t from_ms, int64_t size_ms)
{
    if (!strcmp(bdb_bucket_name(size_ms), "?"))
        return 0;
    return h->n == 0 || from_ms > h->e[h->n - 1].from_ms;
}

int bdb_bucket_history_push(bdb_bucket_history *h, int64_t from_ms, int64_t size_ms)
{
    if (reserve(h, h->n + 1) != BDB_OK)
        return BDB_ERR_NOMEM;
    /* Read n before incrementing it: the first entry always starts at INT64_MIN. */
    int64_t from = h->n == 0 ? INT64_MIN : from_ms;
    h->e[h->n++] = (bdb_bucket_entry){from, size_ms};
    return BDB_OK;
}

/* Index of the entry in force at ts: the last with from_ms <= ts (entry 0 covers all
 * earlier times because its from_ms is INT64_MIN). */
static uint32_t entry_at(const bdb_bucket_history *h, int64_t ts)
{
    uint32_t lo = 0, hi = h->n;
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (h->e[mid].from_ms <= ts)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int64_t bdb_bucket_size_at(const bdb_bucket_history *h, int64_t ts)
{
    return h->e[entry_at(h, ts)].size_ms;
}

void bdb_bucket_range(const bdb_bucket_history *h, int64_t ts, int64_t *start, int64_t *end)
{
    uint32_t i = entry_at(h, ts);
    int64_t size = h->e[i].size_ms;
    *start = bdb_align_down(ts, size);
    *end = *start + size;
    /* Entry boundaries are aligned to both neighbours' sizes, so a bucket never
     * straddles one; the clamps only guard against a hand-edited catalog. */
    if (i > 0 && *start < h->e[i].from_ms)
        *start = h->e[i].from_ms;
    if (i + 1 < h->n && *end > h->e[i + 1].from_ms)
        *end = h->e[i + 1].from_ms;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int bdb_bucket_change(bdb_bucket_history *h, int64_t newest_ts, int64_t new_size, int64_t *from_ms)
{
    /* Room first: out of memory then changes nothing (the device keeps its size). */
    if (reserve(h, h->n + 1) != BDB_OK)
        return 0;
    bdb_bucket_entry *last = &h->e[h->n - 1];
    /* A pending change that has not taken effect yet (no event at or after its start)
     * can be replaced instead of stacking another entry. */
    if (h->n > 1 && last->from_ms > newest_ts) {
        bdb_bucket_entry *prev = &h->e[h->n - 2];
        if (prev->size_ms == new_size) {
            h->n--; /* back to the size in force: drop the pending change */
            if (from_ms)
                *from_ms = prev->from_ms;
            return 1;
        }
        if (last->size_ms == new_size)
            return 0;
        h->n--;
        last = prev;
    }
    if (last->size_ms == new_size)
        return 0;
    int64_t old = last->size_ms;
    int64_t lcm = old / gcd64(old, new_size) * new_size;
    int64_t old_end = bdb_align_down(newest_ts, old) + old;
    int64_t from = bdb_align_down(old_end, lcm);
    if (from < old_end)
        from += lcm;
    if (h->n > 1 && from <= last->from_ms)
        from = last->from_ms + lcm;
    bdb_bucket_history_push(h, from, new_size);
    if (from_ms)
        *from_ms = from;
    return 1;
}

int bdb_bucket_enumerate(const bdb_bucket_history *h, int64_t from, int64_t to,
                         int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx)
{
    if (from >= to)
        return 0;
    int64_t t = from;
    while (t < to) {
        int64_t s, e;
        bdb_bucket_range(h, t, &s, &e);
        int rc = cb(ctx, s, e);
        if (rc)
            return rc;
        if (e <= t) /* cannot happen with a valid history; never loop forever */
            break;
        t = e;
    }
    return 0;
}

uint64_t bdb_bucket_count(const bdb_bucket_history *h, int64_t from, int64_t to, uint64_t limit)
{
    uint64_t n = 0;
    if (from >= to)
        return 0;
    /* Count per history segment arithmetically so huge ranges cost O(entries). */
    for (uint32_t i = entry_at(h, from); i < h->n && n <= limit; i++) {
        int64_t seg_from = i == 0 || h->e[i].from_ms < from ? from : h->e[i].from_ms;
        int64_t seg_to = i + 1 < h->n && h->e[i + 1].from_ms < to ? h->e[i + 1].from_ms : to;
        if (seg_from >= seg_to)
            continue;
        int64_t size = h->e[i].size_ms;
        int64_t first = bdb_align_down(seg_from, size);
        int64_t last = bdb_align_down(seg_to - 1, size);
        n += (uint64_t)((last - first) / size + 1);
    }
    return n > limit ? limit + 1 : n;
}

enum bdb_freq_class bdb_rate_classify(double r, enum bdb_freq_class cur)
{
    /* Boundaries 1/s and 1/60 s; to leave a class the rate must clear the boundary
     * by 25%. */
    const double hi = 1.0, lo = 1.0 / 60.0, m = 1.25;
    switch (cur) {
    case BDB_FREQ_HIGH:
        if (r >= hi / m)
            return BDB_FREQ_HIGH;
        return r >= lo / m ? BDB_FREQ_MEDIUM : BDB_FREQ_LOW;
    case BDB_FREQ_MEDIUM:
        if (r > hi * m)
            return BDB_FREQ_HIGH;
        if (r < lo / m)
            return BDB_FREQ_LOW;
        return BDB_FREQ_MEDIUM;
    case BDB_FREQ_LOW:
        if (r <= lo * m)
            return BDB_FREQ_LOW;
        return r > hi * m ? BDB_FREQ_HIGH : BDB_FREQ_MEDIUM;
    default:
        if (r > hi)
            return BDB_FREQ_HIGH;
        return r >= lo ? BDB_FREQ_MEDIUM : BDB_FREQ_LOW;
    }
}

int bdb_rate_observe(bdb_rate_learner *l, int64_t ts)
{
    if (l->count == 0 && l->win_start == 0) {
        /* The device's first window is measured from its first report, not from the
         * window's start: a fleet that appears at once is first heard anywhere in a
         * window, and one report of a device heard 5 s before the window's end,
         * spread over the whole window, made a device of one report per 10 s "low"
         * (bench/run XL, a million devices). The window still closes at its end. */
        l->win_start = ts;
        l->count = 1;
        return 0;
    }
    if (ts < bdb_align_down(l->win_start, BDB_RATE_WINDOW_MS) + BDB_RATE_WINDOW_MS) {
        l->count++; /* late events count toward the open window */
        return 0;
    }
    /* The window closed. Spread its count over the time until this event, so a
     * device that went quiet for hours is not rated by one busy window. Past the
     * first window win_start is a window's start, so span is at least a window. */
    int64_t span = ts - l->win_start;
    double rate = (double)l->count * 1000.0 / (double)span;
    enum bdb_freq_class cand = bdb_rate_classify(rate, (enum bdb_freq_class)l->cls);
    int changed = 0;
    if (l->cls == BDB_FREQ_UNKNOWN) {
        l->cls = (uint8_t)cand;
        changed = 1;
    } else if (cand != l->cls) {
        if (l->pending == cand)
            l->pending_n++;
        else {
            l->pending = (uint8_t)cand;
            l->pending_n = 1;
        }
        if (l->pending_n >= 2) {
            l->cls = (uint8_t)cand;
            l->pending = 0;
            l->pending_n = 0;
            changed = 1;
        }
    } else {
        l->pending = 0;
        l->pending_n = 0;
    }
    l->win_start = bdb_align_down(ts, BDB_RATE_WINDOW_MS);
    l->count = 1;
    return changed;
}
