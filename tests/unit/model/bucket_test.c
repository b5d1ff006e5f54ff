/* bucket: size names, partition ranges (negative times too), bucket changes aligned to
 * both sizes and never inside a written bucket, pending-change replacement, a property
 * test that enumeration tiles any range exactly across random histories and that the
 * arithmetic count agrees with it, and the rate learner's hysteresis. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "model/bucket.h"

#include <stdlib.h>
#include <string.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
/* 2023-11-14T00:00:00Z, a day boundary (1700000000000 is 22:13:20 that day). */
#define T0 INT64_C(1699920000000)

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t rng_range(int64_t lo, int64_t hi) /* [lo, hi) */
{
    return lo + (int64_t)(rng() % (uint64_t)(hi - lo));
}

static const int64_t all_sizes[] = {10 * MIN, 15 * MIN, HOUR, 6 * HOUR, DAY};
#define NSIZES (sizeof all_sizes / sizeof all_sizes[0])

/* ------------------------------------------------------------ names and sizes */

static void test_names_and_sizes(void **state)
{
    (void)state;
    assert_string_equal(bdb_freq_name(BDB_FREQ_LOW), "low");
    assert_string_equal(bdb_freq_name(BDB_FREQ_MEDIUM), "medium");
    assert_string_equal(bdb_freq_name(BDB_FREQ_HIGH), "high");
    assert_string_equal(bdb_freq_name(BDB_FREQ_UNKNOWN), "unknown");
    assert_string_equal(bdb_freq_name((enum bdb_freq_class)42), "unknown");

    assert_int_equal(bdb_bucket_for_class(BDB_FREQ_HIGH), 15 * MIN);
    assert_int_equal(bdb_bucket_for_class(BDB_FREQ_MEDIUM), HOUR);
    assert_int_equal(bdb_bucket_for_class(BDB_FREQ_LOW), 6 * HOUR);
    assert_int_equal(bdb_bucket_for_class(BDB_FREQ_UNKNOWN), HOUR);

    static const char *names[] = {"10m", "15m", "1h", "6h", "1d"};
    for (size_t i = 0; i < NSIZES; i++) {
        assert_int_equal(bdb_bucket_parse(names[i]), all_sizes[i]);
        assert_string_equal(bdb_bucket_name(all_sizes[i]), names[i]);
    }
    static const char *bad[] = {"", "1m", "30m", "2h", "1H", "15M", "1 h", "15m ", "1d1", "60m"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(bdb_bucket_parse(bad[i]), 0);
    assert_string_equal(bdb_bucket_name(0), "?");
    assert_string_equal(bdb_bucket_name(30 * MIN), "?");
    assert_string_equal(bdb_bucket_name(-HOUR), "?");
}

/* ------------------------------------------------------------ ranges */

static void test_range_single_size(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    assert_int_equal(h.n, 1);
    assert_int_equal(bdb_bucket_size_at(&h, 0), HOUR);
    assert_int_equal(bdb_bucket_size_at(&h, INT64_MIN), HOUR);
    assert_int_equal(bdb_bucket_size_at(&h, -5 * DAY), HOUR);

    int64_t s, e;
    struct {
        int64_t ts, start;
    } cases[] = {
        {0, 0},
        {1, 0},
        {HOUR - 1, 0},
        {HOUR, HOUR},
        {-1, -HOUR},
        {-HOUR, -HOUR},
        {-HOUR - 1, -2 * HOUR},
        {-HOUR + 1, -HOUR},
        {T0 + 30 * MIN, T0},
        {T0 - 1, T0 - HOUR},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bdb_bucket_range(&h, cases[i].ts, &s, &e);
        assert_int_equal(s, cases[i].start);
        assert_int_equal(e, cases[i].start + HOUR);
        assert_true(s <= cases[i].ts && cases[i].ts < e);
    }
    bdb_bucket_history_free(&h);
    assert_null(h.e);
    assert_int_equal(h.n, 0);
}

static void test_range_each_size_negative(void **state)
{
    (void)state;
    for (size_t k = 0; k < NSIZES; k++) {
        int64_t sz = all_sizes[k];
        bdb_bucket_history h;
        bdb_bucket_history_init(&h, sz);
        int64_t probes[] = {-sz - 1, -sz, -sz + 1, -1,           0,     1,
                            sz - 1,  sz,  sz + 1,  -7 * DAY - 3, T0 + 7};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            int64_t s, e, t = probes[i];
            bdb_bucket_range(&h, t, &s, &e);
            assert_true(s <= t);
            assert_true(t < e);
            assert_int_equal(e - s, sz);
            assert_int_equal(((s % sz) + sz) % sz, 0);
        }
        bdb_bucket_history_free(&h);
    }
}

static void test_history_push_and_copy(void **state)
{
    (void)state;
    bdb_bucket_history h = {NULL, 0, 0};
    /* The first entry always covers all earlier times, whatever from is given. */
    bdb_bucket_history_push(&h, T0, HOUR);
    assert_int_equal(h.e[0].from_ms, INT64_MIN);
    for (int i = 1; i <= 40; i++)
        bdb_bucket_history_push(&h, T0 + i * DAY, i % 2 ? 15 * MIN : HOUR);
    assert_int_equal(h.n, 41);
    assert_int_equal(bdb_bucket_size_at(&h, T0 + DAY - 1), HOUR);
    assert_int_equal(bdb_bucket_size_at(&h, T0 + DAY), 15 * MIN);
    assert_int_equal(bdb_bucket_size_at(&h, T0 + 2 * DAY), HOUR);
    assert_int_equal(bdb_bucket_size_at(&h, T0 + 40 * DAY + 5 * DAY), HOUR);

    bdb_bucket_history c;
    bdb_bucket_history_copy(&c, &h);
    assert_int_equal(c.n, h.n);
    assert_ptr_not_equal(c.e, h.e);
    assert_memory_equal(c.e, h.e, h.n * sizeof *h.e);
    bdb_bucket_history_free(&h); /* the copy is independent */
    assert_int_equal(bdb_bucket_size_at(&c, T0 + DAY), 15 * MIN);
    bdb_bucket_history_free(&c);
}

/* A hand-made history whose boundary is not aligned to the sizes: the clamp keeps
 * buckets from straddling the boundary. */
static void test_range_clamped_at_unaligned_boundary(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    bdb_bucket_history_push(&h, T0 + 20 * MIN, 15 * MIN);
    int64_t s, e;
    bdb_bucket_range(&h, T0 + 10 * MIN, &s, &e);
    assert_int_equal(s, T0);
    assert_int_equal(e, T0 + 20 * MIN);
    bdb_bucket_range(&h, T0 + 20 * MIN, &s, &e);
    assert_int_equal(s, T0 + 20 * MIN);
    assert_int_equal(e, T0 + 30 * MIN);
    bdb_bucket_history_free(&h);
}

/* ------------------------------------------------------------ changes */

/* Changes from `old` to `neu` with the newest event at `newest` and checks the
 * effective time against the expected one and the general rules. */
static void check_change(int64_t old, int64_t neu, int64_t newest, int64_t want_from)
{
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, old);
    int64_t s0, e0;
    bdb_bucket_range(&h, newest, &s0, &e0);
    int64_t from = 0;
    assert_int_equal(bdb_bucket_change(&h, newest, neu, &from), 1);
    assert_int_equal(from, want_from);
    assert_int_equal(h.n, 2);
    assert_int_equal(h.e[1].from_ms, from);
    assert_int_equal(h.e[1].size_ms, neu);
    /* aligned to both sizes, not before the end of the newest event's old bucket */
    assert_int_equal(((from % old) + old) % old, 0);
    assert_int_equal(((from % neu) + neu) % neu, 0);
    assert_true(from >= e0);
    /* the bucket holding the newest event is unchanged */
    int64_t s1, e1;
    bdb_bucket_range(&h, newest, &s1, &e1);
    assert_int_equal(s1, s0);
    assert_int_equal(e1, e0);
    /* the first bucket of the new size starts exactly at from */
    bdb_bucket_range(&h, from, &s1, &e1);
    assert_int_equal(s1, from);
    assert_int_equal(e1, from + neu);
    bdb_bucket_range(&h, from - 1, &s1, &e1);
    assert_int_equal(e1, from);
    assert_int_equal(e1 - s1, old);
    bdb_bucket_history_free(&h);
}

static void test_change_examples(void **state)
{
    (void)state;
    /* 15m -> 1h: newest 00:20 is in [00:15, 00:30); next hour boundary 01:00 */
    check_change(15 * MIN, HOUR, T0 + 20 * MIN, T0 + HOUR);
    /* newest in the last quarter: the old bucket ends exactly at 01:00 */
    check_change(15 * MIN, HOUR, T0 + 50 * MIN, T0 + HOUR);
    /* newest exactly at an hour start */
    check_change(15 * MIN, HOUR, T0, T0 + HOUR);
    /* 1h -> 15m: the old bucket [00:00, 01:00) must finish */
    check_change(HOUR, 15 * MIN, T0 + 20 * MIN, T0 + HOUR);
    check_change(HOUR, 15 * MIN, T0 + HOUR - 1, T0 + HOUR);
    /* 10m -> 15m: lcm 30m */
    check_change(10 * MIN, 15 * MIN, T0 + 5 * MIN, T0 + 30 * MIN);
    check_change(10 * MIN, 15 * MIN, T0 + 25 * MIN, T0 + 30 * MIN);
    check_change(10 * MIN, 15 * MIN, T0 + 30 * MIN, T0 + 60 * MIN);
    /* 15m -> 10m: lcm 30m as well */
    check_change(15 * MIN, 10 * MIN, T0 + 31 * MIN, T0 + 60 * MIN);
    check_change(15 * MIN, 10 * MIN, T0 + 14 * MIN, T0 + 30 * MIN);
    /* 6h -> 1d: newest 07:00 in [06:00, 12:00); next midnight */
    check_change(6 * HOUR, DAY, T0 + 7 * HOUR, T0 + DAY);
    check_change(6 * HOUR, DAY, T0 + 23 * HOUR, T0 + DAY);
    /* 1d -> 6h: the day bucket finishes first */
    check_change(DAY, 6 * HOUR, T0 + HOUR, T0 + DAY);
    /* 1h -> 6h */
    check_change(HOUR, 6 * HOUR, T0 + 6 * HOUR + 5 * MIN, T0 + 12 * HOUR);
    /* negative times: just before the epoch */
    check_change(HOUR, 15 * MIN, -1, 0);
    check_change(15 * MIN, HOUR, -HOUR - 20 * MIN, -HOUR);
    check_change(10 * MIN, 15 * MIN, -25 * MIN, 0);
    check_change(10 * MIN, 15 * MIN, -35 * MIN, -30 * MIN);
    check_change(6 * HOUR, DAY, -DAY + 1, 0);
}

static void test_change_same_size_noop(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    int64_t from = 12345;
    assert_int_equal(bdb_bucket_change(&h, T0, HOUR, &from), 0);
    assert_int_equal(from, 12345);
    assert_int_equal(h.n, 1);
    /* NULL from_ms is allowed */
    assert_int_equal(bdb_bucket_change(&h, T0, 15 * MIN, NULL), 1);
    assert_int_equal(h.n, 2);
    assert_int_equal(h.e[1].from_ms, T0 + HOUR);
    /* asking again for the size already pending is nothing to do */
    assert_int_equal(bdb_bucket_change(&h, T0 + 5 * MIN, 15 * MIN, &from), 0);
    assert_int_equal(h.n, 2);
    /* once in force, asking again is still nothing to do */
    assert_int_equal(bdb_bucket_change(&h, T0 + 2 * HOUR, 15 * MIN, &from), 0);
    assert_int_equal(h.n, 2);
    bdb_bucket_history_free(&h);
}

static void test_change_pending_replaced_and_dropped(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, 15 * MIN);
    int64_t newest = T0 + 20 * MIN, from;
    assert_int_equal(bdb_bucket_change(&h, newest, HOUR, &from), 1);
    assert_int_equal(from, T0 + HOUR);
    assert_int_equal(h.n, 2);

    /* Still pending (no event at or after 01:00): replaced, computed from 15m. */
    assert_int_equal(bdb_bucket_change(&h, newest, 6 * HOUR, &from), 1);
    assert_int_equal(h.n, 2);
    assert_int_equal(from, T0 + 6 * HOUR);
    assert_int_equal(h.e[1].from_ms, T0 + 6 * HOUR);
    assert_int_equal(h.e[1].size_ms, 6 * HOUR);

    /* The device got newer events but still before the pending start: replace again. */
    newest = T0 + 2 * HOUR + 5 * MIN;
    assert_int_equal(bdb_bucket_change(&h, newest, 10 * MIN, &from), 1);
    assert_int_equal(h.n, 2);
    assert_int_equal(from, T0 + 2 * HOUR + 30 * MIN);
    assert_int_equal(h.e[1].size_ms, 10 * MIN);
    int64_t s, e;
    bdb_bucket_range(&h, newest, &s, &e);
    assert_int_equal(s, T0 + 2 * HOUR);
    assert_int_equal(e, T0 + 2 * HOUR + 15 * MIN);

    /* Back to the size in force: the pending change is dropped. */
    assert_int_equal(bdb_bucket_change(&h, newest, 15 * MIN, &from), 1);
    assert_int_equal(h.n, 1);
    assert_int_equal(from, INT64_MIN);
    assert_int_equal(bdb_bucket_size_at(&h, T0 + 5 * DAY), 15 * MIN);
    assert_int_equal(bdb_bucket_change(&h, newest, 15 * MIN, &from), 0);

    /* A change that took effect (an event at/after its start) is never replaced. */
    assert_int_equal(bdb_bucket_change(&h, newest, HOUR, &from), 1);
    assert_int_equal(from, T0 + 3 * HOUR);
    newest = T0 + 3 * HOUR + 10 * MIN;
    assert_int_equal(bdb_bucket_change(&h, newest, 15 * MIN, &from), 1);
    assert_int_equal(h.n, 3);
    assert_int_equal(h.e[1].from_ms, T0 + 3 * HOUR);
    assert_int_equal(h.e[1].size_ms, HOUR);
    assert_int_equal(h.e[2].from_ms, T0 + 4 * HOUR);
    assert_int_equal(h.e[2].size_ms, 15 * MIN);
    /* dropping the new pending change keeps the one in force */
    assert_int_equal(bdb_bucket_change(&h, newest, HOUR, &from), 1);
    assert_int_equal(h.n, 2);
    assert_int_equal(from, T0 + 3 * HOUR);
    bdb_bucket_history_free(&h);
}

/* The pending change becomes in force exactly when an event lands at its start. */
static void test_change_pending_boundary(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    int64_t from;
    assert_int_equal(bdb_bucket_change(&h, T0 + 10 * MIN, 15 * MIN, &from), 1);
    assert_int_equal(from, T0 + HOUR);
    /* newest == from: the 15m bucket [01:00, 01:15) is written; keep it */
    assert_int_equal(bdb_bucket_change(&h, T0 + HOUR, HOUR, &from), 1);
    assert_int_equal(h.n, 3);
    assert_int_equal(from, T0 + 2 * HOUR);
    int64_t s, e;
    bdb_bucket_range(&h, T0 + HOUR, &s, &e);
    assert_int_equal(s, T0 + HOUR);
    assert_int_equal(e, T0 + HOUR + 15 * MIN);
    bdb_bucket_history_free(&h);
}

/* ------------------------------------------------------------ enumerate / count */

struct collect {
    int64_t s[4096], e[4096];
    size_t n;
    size_t stop_after; /* 0 = never */
};

static int collect_cb(void *ctx, int64_t start, int64_t end)
{
    struct collect *c = ctx;
    if (c->n >= 4096)
        return -1;
    c->s[c->n] = start;
    c->e[c->n] = end;
    c->n++;
    if (c->stop_after && c->n == c->stop_after)
        return 7;
    return 0;
}

static void check_tiling(const bdb_bucket_history *h, int64_t from, int64_t to)
{
    static struct collect c;
    memset(&c, 0, sizeof c);
    int rc = bdb_bucket_enumerate(h, from, to, collect_cb, &c);
    assert_int_equal(rc, 0);
    assert_true(c.n > 0);
    assert_true(c.s[0] <= from);
    assert_true(from < c.e[0]);
    assert_true(c.s[c.n - 1] < to);
    assert_true(to <= c.e[c.n - 1]);
    for (size_t i = 0; i < c.n; i++) {
        assert_true(c.s[i] < c.e[i]);
        if (i > 0)
            assert_int_equal(c.s[i], c.e[i - 1]); /* no gap, no overlap */
        /* each partition is exactly the bucket holding any of its times */
        int64_t s, e;
        bdb_bucket_range(h, c.s[i], &s, &e);
        assert_int_equal(s, c.s[i]);
        assert_int_equal(e, c.e[i]);
        bdb_bucket_range(h, c.e[i] - 1, &s, &e);
        assert_int_equal(s, c.s[i]);
        assert_int_equal(e, c.e[i]);
        int64_t sz = bdb_bucket_size_at(h, c.s[i]);
        assert_int_equal(c.e[i] - c.s[i], sz);
        assert_int_equal(((c.s[i] % sz) + sz) % sz, 0);
    }
    assert_int_equal(bdb_bucket_count(h, from, to, UINT64_MAX - 1), c.n);
    assert_int_equal(bdb_bucket_count(h, from, to, c.n), c.n);
    if (c.n > 1)
        assert_int_equal(bdb_bucket_count(h, from, to, c.n - 2), c.n - 1); /* saturates */
}

static void test_enumerate_basic(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    static struct collect c;
    memset(&c, 0, sizeof c);
    /* empty and inverted ranges enumerate nothing */
    assert_int_equal(bdb_bucket_enumerate(&h, T0, T0, collect_cb, &c), 0);
    assert_int_equal(bdb_bucket_enumerate(&h, T0 + 1, T0, collect_cb, &c), 0);
    assert_int_equal(c.n, 0);
    assert_int_equal(bdb_bucket_count(&h, T0, T0, 100), 0);
    assert_int_equal(bdb_bucket_count(&h, T0 + 1, T0, 100), 0);

    /* [00:30, 03:00) -> three hours */
    assert_int_equal(bdb_bucket_enumerate(&h, T0 + 30 * MIN, T0 + 3 * HOUR, collect_cb, &c), 0);
    assert_int_equal(c.n, 3);
    assert_int_equal(c.s[0], T0);
    assert_int_equal(c.e[2], T0 + 3 * HOUR);
    assert_int_equal(bdb_bucket_count(&h, T0 + 30 * MIN, T0 + 3 * HOUR, 100), 3);
    /* one ms inside one bucket */
    assert_int_equal(bdb_bucket_count(&h, T0 + 5, T0 + 6, 100), 1);
    /* one ms across a boundary */
    assert_int_equal(bdb_bucket_count(&h, T0 - 1, T0 + 1, 100), 2);
    /* across zero */
    check_tiling(&h, -3 * HOUR - 7, 2 * HOUR + 9);

    /* the callback's non-zero return stops enumeration and is returned */
    memset(&c, 0, sizeof c);
    c.stop_after = 2;
    assert_int_equal(bdb_bucket_enumerate(&h, T0, T0 + 10 * HOUR, collect_cb, &c), 7);
    assert_int_equal(c.n, 2);

    /* huge ranges are counted arithmetically and saturate at limit + 1 */
    assert_int_equal(bdb_bucket_count(&h, T0 - 1000 * DAY, T0 + 1000 * DAY, 100000), 48000);
    assert_int_equal(bdb_bucket_count(&h, T0 - 1000 * DAY, T0 + 1000 * DAY, 10), 11);
    bdb_bucket_history_free(&h);
}

static void test_enumerate_across_changes(void **state)
{
    (void)state;
    bdb_bucket_history h;
    bdb_bucket_history_init(&h, HOUR);
    int64_t from;
    /* 1h until 02:00, 15m until 03:00, 6h until next day, 10m after */
    assert_int_equal(bdb_bucket_change(&h, T0 + HOUR + 5 * MIN, 15 * MIN, &from), 1);
    assert_int_equal(from, T0 + 2 * HOUR);
    assert_int_equal(bdb_bucket_change(&h, T0 + 2 * HOUR + 50 * MIN, 6 * HOUR, &from), 1);
    assert_int_equal(from, T0 + 6 * HOUR);
    assert_int_equal(bdb_bucket_change(&h, T0 + 6 * HOUR + 1, 10 * MIN, &from), 1);
    assert_int_equal(from, T0 + 12 * HOUR);

    static struct collect c;
    memset(&c, 0, sizeof c);
    assert_int_equal(
        bdb_bucket_enumerate(&h, T0 + 90 * MIN, T0 + 12 * HOUR + 25 * MIN, collect_cb, &c), 0);
    /* [01:00,02:00) + 16 quarters [02:00,06:00) + [06:00,12:00) + 3 x 10m */
    assert_int_equal(c.n, 1 + 16 + 1 + 3);
    assert_int_equal(c.s[0], T0 + HOUR);
    assert_int_equal(c.e[0], T0 + 2 * HOUR);
    assert_int_equal(c.e[1] - c.s[1], 15 * MIN);
    assert_int_equal(c.s[17], T0 + 6 * HOUR);
    assert_int_equal(c.e[17], T0 + 12 * HOUR);
    assert_int_equal(c.e[20], T0 + 12 * HOUR + 30 * MIN);
    check_tiling(&h, T0 + 90 * MIN, T0 + 12 * HOUR + 25 * MIN);
    check_tiling(&h, T0 - DAY, T0 + 2 * DAY);
    check_tiling(&h, T0 + 2 * HOUR, T0 + 2 * HOUR + 1);
    check_tiling(&h, T0 + 12 * HOUR - 1, T0 + 12 * HOUR + 1);
    bdb_bucket_history_free(&h);
}

/* Random histories built through bdb_bucket_change (pending replacements, drops and
 * changes in force mixed), random ranges: enumerate must tile exactly and count must
 * agree; buckets that held an event never change. */
static void test_property_random_histories(void **state)
{
    (void)state;
    rng_state = 0x9e3779b97f4a7c15ULL;
    for (int round = 0; round < 300; round++) {
        int64_t start_size = all_sizes[rng() % NSIZES];
        bdb_bucket_history h;
        bdb_bucket_history_init(&h, start_size);
        int64_t newest = rng_range(-30 * DAY, 30 * DAY);
        /* events seen so far with their buckets, to check they never move */
        int64_t ev[64], evs[64], eve[64];
        size_t nev = 0;
        int nchanges = (int)(rng() % 12);
        for (int k = 0; k < nchanges; k++) {
            newest += rng_range(0, 3 * DAY);
            if (nev < 64) {
                ev[nev] = newest;
                bdb_bucket_range(&h, newest, &evs[nev], &eve[nev]);
                nev++;
            }
            int64_t neu = all_sizes[rng() % NSIZES];
            int64_t from = 0;
            uint32_t before = h.n;
            int changed = bdb_bucket_change(&h, newest, neu, &from);
            if (changed && h.n >= before) {
                /* appended or replaced: the new last entry starts at from */
                assert_int_equal(h.e[h.n - 1].from_ms, from);
                assert_int_equal(h.e[h.n - 1].size_ms, neu);
                assert_true(from > newest);
            }
            /* entries strictly increasing, aligned to both neighbours */
            for (uint32_t i = 1; i < h.n; i++) {
                assert_true(h.e[i].from_ms > h.e[i - 1].from_ms);
                int64_t a = h.e[i - 1].size_ms, b = h.e[i].size_ms, f = h.e[i].from_ms;
                assert_int_equal(((f % a) + a) % a, 0);
                assert_int_equal(((f % b) + b) % b, 0);
                assert_int_not_equal(a, b);
            }
            for (size_t i = 0; i < nev; i++) {
                int64_t s, e;
                bdb_bucket_range(&h, ev[i], &s, &e);
                assert_int_equal(s, evs[i]);
                assert_int_equal(e, eve[i]);
            }
        }
        for (int q = 0; q < 8; q++) {
            int64_t a = rng_range(-35 * DAY, 70 * DAY);
            int64_t len = rng() % 4 == 0 ? rng_range(1, 3 * HOUR) : rng_range(1, 20 * DAY);
            check_tiling(&h, a, a + len);
        }
        /* ranges starting or ending exactly on entry boundaries */
        for (uint32_t i = 1; i < h.n; i++) {
            check_tiling(&h, h.e[i].from_ms, h.e[i].from_ms + 1);
            check_tiling(&h, h.e[i].from_ms - 1, h.e[i].from_ms);
            check_tiling(&h, h.e[i].from_ms - 2 * DAY, h.e[i].from_ms + 2 * DAY);
        }
        bdb_bucket_history_free(&h);
    }
}

/* ------------------------------------------------------------ rate learner */

static void test_classify_margins(void **state)
{
    (void)state;
    const double lo = 1.0 / 60.0;
    /* no class yet: plain boundaries */
    assert_int_equal(bdb_rate_classify(2.0, BDB_FREQ_UNKNOWN), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(1.0001, BDB_FREQ_UNKNOWN), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(1.0, BDB_FREQ_UNKNOWN), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(lo, BDB_FREQ_UNKNOWN), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(lo * 0.99, BDB_FREQ_UNKNOWN), BDB_FREQ_LOW);
    assert_int_equal(bdb_rate_classify(0.0, BDB_FREQ_UNKNOWN), BDB_FREQ_LOW);

    /* HIGH stays HIGH down to 0.8/s */
    assert_int_equal(bdb_rate_classify(1.0, BDB_FREQ_HIGH), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(0.81, BDB_FREQ_HIGH), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(0.8, BDB_FREQ_HIGH), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(0.79, BDB_FREQ_HIGH), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(lo / 1.25, BDB_FREQ_HIGH), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(lo / 1.3, BDB_FREQ_HIGH), BDB_FREQ_LOW);

    /* MEDIUM leaves only past 1.25/s or below 1/75 per s */
    assert_int_equal(bdb_rate_classify(1.2, BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.25, BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.26, BDB_FREQ_MEDIUM), BDB_FREQ_HIGH);
    assert_int_equal(bdb_rate_classify(lo, BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.0 / 74.0, BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.0 / 76.0, BDB_FREQ_MEDIUM), BDB_FREQ_LOW);

    /* LOW stays LOW up to 1/48 per s */
    assert_int_equal(bdb_rate_classify(lo, BDB_FREQ_LOW), BDB_FREQ_LOW);
    assert_int_equal(bdb_rate_classify(1.0 / 49.0, BDB_FREQ_LOW), BDB_FREQ_LOW);
    assert_int_equal(bdb_rate_classify(1.0 / 47.0, BDB_FREQ_LOW), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.0, BDB_FREQ_LOW), BDB_FREQ_MEDIUM);
    assert_int_equal(bdb_rate_classify(1.3, BDB_FREQ_LOW), BDB_FREQ_HIGH);

    /* Hysteresis: from either neighbour, the zone between the margins is sticky. */
    double sticky[] = {0.85, 0.9, 1.0, 1.1, 1.2};
    for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++) {
        assert_int_equal(bdb_rate_classify(sticky[i], BDB_FREQ_HIGH), BDB_FREQ_HIGH);
        assert_int_equal(bdb_rate_classify(sticky[i], BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
    }
    double sticky_lo[] = {lo * 0.85, lo, lo * 1.2};
    for (size_t i = 0; i < sizeof sticky_lo / sizeof sticky_lo[0]; i++) {
        assert_int_equal(bdb_rate_classify(sticky_lo[i], BDB_FREQ_MEDIUM), BDB_FREQ_MEDIUM);
        assert_int_equal(bdb_rate_classify(sticky_lo[i], BDB_FREQ_LOW), BDB_FREQ_LOW);
    }
}

/* Feeds `n` evenly spaced events into the 10-minute window starting at w (the first at
 * w itself) and returns how many observe calls reported a class change. */
static int feed_window(bdb_rate_learner *l, int64_t w, uint32_t n)
{
    int changes = 0;
    for (uint32_t i = 0; i < n; i++)
        changes += bdb_rate_observe(l, w + (int64_t)i * BDB_RATE_WINDOW_MS / n);
    return changes;
}

static void test_learner_first_window_sets_class(void **state)
{
    (void)state;
    static const struct {
        uint32_t per_window;
        enum bdb_freq_class want;
    } cases[] = {
        {1200, BDB_FREQ_HIGH},  /* 2/s */
        {600, BDB_FREQ_MEDIUM}, /* exactly 1/s is not above 1/s */
        {60, BDB_FREQ_MEDIUM},  /* 1 per 10 s */
        {10, BDB_FREQ_MEDIUM},  /* exactly 1/min */
        {5, BDB_FREQ_LOW},      /* 1 per 2 min */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bdb_rate_learner l;
        memset(&l, 0, sizeof l);
        int64_t w = T0;
        /* the first window closes with the first event of the second */
        assert_int_equal(feed_window(&l, w, cases[i].per_window), 0);
        assert_int_equal(l.cls, BDB_FREQ_UNKNOWN);
        assert_int_equal(bdb_rate_observe(&l, w + BDB_RATE_WINDOW_MS), 1);
        assert_int_equal(l.cls, cases[i].want);
    }
}

/* A device first heard late in a window is rated from its first report, not from the
 * window's start: one report per 10 s first heard 5 s before the window's end was
 * "low" (1 report over 10 minutes) until 9e3dbd2. */
static void test_learner_first_report_late_in_window(void **state)
{
    (void)state;
    static const struct {
        int64_t first, step;
        enum bdb_freq_class want;
    } cases[] = {
        {BDB_RATE_WINDOW_MS - 5000, 10000, BDB_FREQ_MEDIUM}, /* 1 per 10 s */
        {BDB_RATE_WINDOW_MS - 300, 500, BDB_FREQ_HIGH},      /* 2/s */
        {BDB_RATE_WINDOW_MS - 60000, 120000, BDB_FREQ_LOW},  /* 1 per 2 min */
        {5 * 60000, 30000, BDB_FREQ_MEDIUM},                 /* 1 per 30 s, from mid-window */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bdb_rate_learner l;
        memset(&l, 0, sizeof l);
        int changes = 0;
        int64_t t = T0 + cases[i].first;
        for (; t < T0 + BDB_RATE_WINDOW_MS; t += cases[i].step)
            changes += bdb_rate_observe(&l, t);
        assert_int_equal(changes, 0);
        assert_int_equal(l.cls, BDB_FREQ_UNKNOWN);
        assert_int_equal(bdb_rate_observe(&l, t), 1); /* the first of the next window */
        assert_int_equal(l.cls, cases[i].want);
        /* and the class holds over the following windows */
        for (t += cases[i].step; t < T0 + 2 * HOUR; t += cases[i].step)
            changes += bdb_rate_observe(&l, t);
        assert_int_equal(changes, 0);
        assert_int_equal(l.cls, cases[i].want);
    }
}

static void test_learner_no_flapping_at_one_per_second(void **state)
{
    (void)state;
    /* Starting on either side of 1/s, a rate wobbling between 0.85/s and 1.15/s never
     * changes the class once it is set. */
    for (int start_high = 0; start_high < 2; start_high++) {
        bdb_rate_learner l;
        memset(&l, 0, sizeof l);
        int changes = 0;
        int64_t w = T0;
        for (int k = 0; k < 60; k++, w += BDB_RATE_WINDOW_MS) {
            int hi = (k % 2 == 0) == (start_high == 1);
            changes += feed_window(&l, w, hi ? 690 : 510);
        }
        assert_int_equal(changes, 1); /* only the first classification */
        assert_int_equal(l.cls, start_high ? BDB_FREQ_HIGH : BDB_FREQ_MEDIUM);
    }
    /* Exactly 1/s for ten hours: one classification, no flapping. */
    bdb_rate_learner l;
    memset(&l, 0, sizeof l);
    int changes = 0;
    for (int64_t t = T0; t < T0 + 10 * HOUR; t += 1000)
        changes += bdb_rate_observe(&l, t);
    assert_int_equal(changes, 1);
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
}

static void test_learner_two_windows_to_change(void **state)
{
    (void)state;
    bdb_rate_learner l;
    memset(&l, 0, sizeof l);
    int64_t w = T0;
    assert_int_equal(feed_window(&l, w, 60), 0);
    w += BDB_RATE_WINDOW_MS;
    /* first window closes: MEDIUM */
    assert_int_equal(feed_window(&l, w, 1800), 1);
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
    w += BDB_RATE_WINDOW_MS;
    /* one fast window closed: a candidate, not a change */
    assert_int_equal(feed_window(&l, w, 1800), 0);
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
    w += BDB_RATE_WINDOW_MS;
    /* the second fast window closes with this window's first event: HIGH */
    assert_int_equal(bdb_rate_observe(&l, w), 1);
    assert_int_equal(l.cls, BDB_FREQ_HIGH);
    assert_int_equal(feed_window(&l, w, 1800), 0);
    w += BDB_RATE_WINDOW_MS;

    /* One slow window between fast ones resets the candidate. */
    assert_int_equal(feed_window(&l, w, 20), 0); /* closes a fast window */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(feed_window(&l, w, 1800), 0); /* closes the slow one: candidate */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(feed_window(&l, w, 20), 0); /* closes fast: candidate reset */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(feed_window(&l, w, 20), 0); /* closes slow: candidate 1 */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(l.cls, BDB_FREQ_HIGH);
    assert_int_equal(feed_window(&l, w, 20), 1); /* closes slow: second agreeing */
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
    w += BDB_RATE_WINDOW_MS;

    /* Two different candidates in a row (LOW then HIGH) do not add up. */
    assert_int_equal(feed_window(&l, w, 2), 0);
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(feed_window(&l, w, 1800), 0); /* closes LOW window: candidate LOW */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(feed_window(&l, w, 60), 0); /* closes HIGH window: candidate HIGH */
    w += BDB_RATE_WINDOW_MS;
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
}

static void test_learner_gaps(void **state)
{
    (void)state;
    /* A fast device that goes quiet for hours is not re-rated by one busy window. */
    bdb_rate_learner l;
    memset(&l, 0, sizeof l);
    int64_t w = T0;
    int changes = 0;
    for (int k = 0; k < 3; k++, w += BDB_RATE_WINDOW_MS)
        changes += feed_window(&l, w, 1800);
    assert_int_equal(l.cls, BDB_FREQ_HIGH);
    assert_int_equal(changes, 1);
    /* quiet for 3 hours, then fast again: the gap alone is one slow window */
    w += 3 * HOUR;
    for (int k = 0; k < 5; k++, w += BDB_RATE_WINDOW_MS)
        changes += feed_window(&l, w, 1800);
    assert_int_equal(changes, 1);
    assert_int_equal(l.cls, BDB_FREQ_HIGH);

    /* Now it really slows down to one event every 2 hours: each event closes a window
     * with one event spread over the gap, which is LOW; two such windows change. */
    int64_t t = w;
    changes = 0;
    int changed_at = -1;
    for (int k = 0; k < 6; k++, t += 2 * HOUR) {
        if (bdb_rate_observe(&l, t)) {
            changes++;
            if (changed_at < 0)
                changed_at = k;
        }
    }
    assert_int_equal(changes, 1);
    assert_int_equal(l.cls, BDB_FREQ_LOW);
    /* event 0 closes the last fast window (HIGH), 1 and 2 close two slow ones */
    assert_int_equal(changed_at, 2);

    /* Every 5 minutes (1/300 per s, below 1/48) stays LOW; every 30 s becomes MEDIUM
     * after two windows. */
    changes = 0;
    for (int k = 0; k < 12; k++, t += 5 * MIN)
        changes += bdb_rate_observe(&l, t);
    assert_int_equal(changes, 0);
    assert_int_equal(l.cls, BDB_FREQ_LOW);
    for (int k = 0; k < 80; k++, t += 30 * 1000)
        changes += bdb_rate_observe(&l, t);
    assert_int_equal(changes, 1);
    assert_int_equal(l.cls, BDB_FREQ_MEDIUM);
}

static void test_learner_late_events_and_epoch(void **state)
{
    (void)state;
    /* Late (older) events count toward the open window and never close it. */
    bdb_rate_learner l;
    memset(&l, 0, sizeof l);
    int64_t w = T0;
    bdb_rate_observe(&l, w);
    for (int i = 0; i < 1500; i++)
        assert_int_equal(bdb_rate_observe(&l, w - DAY + i), 0);
    assert_int_equal(l.count, 1501);
    assert_int_equal(l.cls, BDB_FREQ_UNKNOWN);
    assert_int_equal(bdb_rate_observe(&l, w + BDB_RATE_WINDOW_MS), 1);
    assert_int_equal(l.cls, BDB_FREQ_HIGH);

    /* A device whose first event lies in the epoch's first window, and one before the
     * epoch, are learned like any other. */
    int64_t starts[] = {0, 5, -BDB_RATE_WINDOW_MS, -7 * DAY + 3};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
        memset(&l, 0, sizeof l);
        int64_t base = starts[s] -
                       ((starts[s] % BDB_RATE_WINDOW_MS) + BDB_RATE_WINDOW_MS) % BDB_RATE_WINDOW_MS;
        int changes = 0;
        for (int k = 0; k < 3; k++)
            changes += feed_window(&l, base + k * BDB_RATE_WINDOW_MS, 1800);
        assert_int_equal(changes, 1);
        assert_int_equal(l.cls, BDB_FREQ_HIGH);
    }
}

/* Every change bdb_bucket_change makes passes bdb_bucket_history_next_ok (what the
 * decoders check), and nothing else does. */
static void test_history_next_ok(void **state)
{
    (void)state;
    bdb_bucket_history h, r;
    assert_int_equal(bdb_bucket_history_init(&h, HOUR), BDB_OK);
    assert_int_equal(bdb_bucket_history_init(&r, HOUR), BDB_OK);
    int64_t ts = 1700000000000;
    for (int i = 0; i < 200; i++) {
        int64_t from;
        ts += (int64_t)(i % 7) * 37 * MIN;
        if (bdb_bucket_change(&h, ts, all_sizes[(i * 3) % 5], &from)) {
            /* replay the whole history as a decoder would */
            r.n = 1;
            for (uint32_t k = 1; k < h.n; k++) {
                assert_true(bdb_bucket_history_next_ok(&r, h.e[k].from_ms, h.e[k].size_ms));
                assert_int_equal(bdb_bucket_history_push(&r, h.e[k].from_ms, h.e[k].size_ms),
                                 BDB_OK);
            }
        }
    }
    assert_true(h.n > 2);
    int64_t last = h.e[h.n - 1].from_ms;
    assert_false(bdb_bucket_history_next_ok(&h, last, HOUR));     /* not after the last */
    assert_false(bdb_bucket_history_next_ok(&h, last - 1, HOUR)); /* out of order */
    assert_true(bdb_bucket_history_next_ok(&h, last + 1, HOUR));
    const int64_t bad[] = {0, 1, -HOUR, 7 * MIN, 2 * HOUR, 30 * DAY, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(bdb_bucket_history_next_ok(&h, last + 1, bad[i]));
    bdb_bucket_history empty = {0};
    for (size_t i = 0; i < 5; i++)
        assert_true(bdb_bucket_history_next_ok(&empty, INT64_MIN, all_sizes[i]));
    assert_false(bdb_bucket_history_next_ok(&empty, INT64_MIN, 1));
    bdb_bucket_history_free(&h);
    bdb_bucket_history_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_range_single_size),
        cmocka_unit_test(test_range_each_size_negative),
        cmocka_unit_test(test_history_push_and_copy),
        cmocka_unit_test(test_range_clamped_at_unaligned_boundary),
        cmocka_unit_test(test_change_examples),
        cmocka_unit_test(test_change_same_size_noop),
        cmocka_unit_test(test_change_pending_replaced_and_dropped),
        cmocka_unit_test(test_change_pending_boundary),
        cmocka_unit_test(test_enumerate_basic),
        cmocka_unit_test(test_enumerate_across_changes),
        cmocka_unit_test(test_property_random_histories),
        cmocka_unit_test(test_classify_margins),
        cmocka_unit_test(test_learner_first_window_sets_class),
        cmocka_unit_test(test_learner_first_report_late_in_window),
        cmocka_unit_test(test_learner_no_flapping_at_one_per_second),
        cmocka_unit_test(test_learner_two_windows_to_change),
        cmocka_unit_test(test_learner_gaps),
        cmocka_unit_test(test_learner_late_events_and_epoch),
        cmocka_unit_test(test_history_next_ok),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
