/* db_tier: the rollup tiers of the embedded engine through the public API
 * (background = 0, so every flush and maintenance run is explicit).
 *
 * Covered: every tier equals raw (count, min, max exactly, sum to 1e-12, p50/p95/p99
 * within 1%) from the head alone, after flushes, with out-of-order samples in already
 * flushed minutes and rewrites inside one flush interval, after compaction and after
 * reopen; a flush that did not commit (tier files past the catalog's wal_upto, the
 * state a crash between the tier write and the catalog save leaves) is discarded at
 * open and its samples come back once from the WAL; a crash image taken with unflushed
 * writes; a damaged tier file is quarantined at open; retention drops whole files by
 * tier with an injected clock; the per-tenant retention hook. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define BOUND (0.01 * (1 + 1e-9))

static char tmpdir[64], datadir[128];
static uint64_t rng_state;
static int64_t fake_now;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "tier", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR);
    rng_state = 88172645463325252ull;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_db(const char *dir)
{
    bdb_db_opts o;
    eu_opts(&o, dir, eu_clock, &fake_now);
    return eu_open(&o);
}

/* One report per sample: device d, metrics "temp" and "load". */
static void put(bdb_db *db, const char *tn, const char *dev, int64_t ts, double temp, double load)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 0);
    bdb_batch_metric(b, "temp", 4, temp);
    bdb_batch_metric(b, "load", 4, load);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tn, b), BDB_OK);
    bdb_batch_free(b);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Every tier of (tn, dev, metric) over [from, to) agrees with the raw samples.
 * Returns the number of raw samples seen. */
static size_t check_equal_raw(bdb_db *db, const char *tn, const char *dev, const char *metric,
                              int64_t from, int64_t to)
{
    size_t total = 0;
    for (int res = BDB_RES_1M; res <= BDB_RES_1D; res++) {
        int64_t w = bdb_res_width((enum bdb_res)res);
        int64_t lo = bdb_align_down(from, w), hi = bdb_align_down(to - 1, w) + w;
        bdb_samples s[1];
        memset(s, 0, sizeof s);
        const char *m[1] = {metric};
        assert_int_equal(bdb_db_read(db, tn, dev, m, 1, lo, hi, s, NULL), BDB_OK);
        bdb_rollup r;
        bdb_rollup_init(&r, w);
        assert_int_equal(bdb_db_tier_read(db, tn, dev, m, 1, (enum bdb_res)res, from, to, &r),
                         BDB_OK);
        size_t i = 0, nw = 0;
        double *vals = malloc((s->n + 1) * sizeof *vals);
        while (i < s->n) {
            int64_t ws = bdb_align_down(s->ts[i], w);
            size_t j = i;
            long double sum = 0;
            double mn = s->v[i], mx = s->v[i];
            while (j < s->n && s->ts[j] < ws + w) {
                sum += s->v[j];
                mn = s->v[j] < mn ? s->v[j] : mn;
                mx = s->v[j] > mx ? s->v[j] : mx;
                vals[j - i] = s->v[j];
                j++;
            }
            size_t n = j - i;
            const bdb_window *tw = bdb_rollup_find(&r, ws);
            assert_non_null(tw);
            assert_int_equal(bdb_stats_count(&tw->st), n);
            assert_true(bdb_stats_min(&tw->st) == mn);
            assert_true(bdb_stats_max(&tw->st) == mx);
            assert_true(fabsl(bdb_stats_sum(&tw->st) - sum) <= 1e-12L * fabsl(sum) + 1e-12L);
            qsort(vals, n, sizeof *vals, cmp_d);
            const double qs[] = {0.5, 0.95, 0.99};
            for (int k = 0; k < 3; k++) {
                double x = vals[(size_t)floor(qs[k] * (double)(n - 1))];
                assert_true(fabs(bdb_sketch_quantile(&tw->sk, qs[k]) - x) <= BOUND * fabs(x));
            }
            nw++;
            i = j;
        }
        assert_int_equal(r.n, nw); /* no window without raw samples */
        total = s->n;
        free(vals);
        bdb_rollup_free(&r);
        bdb_samples_free(s);
    }
    return total;
}

static void check_all(bdb_db *db, int64_t from, int64_t to, size_t expect)
{
    assert_int_equal(check_equal_raw(db, "t1", "dev", "temp", from, to), expect);
    assert_int_equal(check_equal_raw(db, "t1", "dev", "load", from, to), expect);
}

/* Three days of a sample every 20 s with a skewed "temp" and a constant "load". */
static size_t write_days(bdb_db *db, int64_t start, int days)
{
    size_t n = 0;
    for (int64_t t = start; t < start + days * DAY; t += 20000) {
        double u = ((double)(rng() >> 11) + 0.5) / 9007199254740992.0;
        put(db, "t1", "dev", t, exp(3 * u) - 1, 7.25);
        n++;
    }
    return n;
}

static void test_tiers_equal_raw(void **st)
{
    (void)st;
    fake_now = T0 + 3 * DAY;
    bdb_db *db = open_db(datadir);
    size_t n = write_days(db, T0, 3);
    check_all(db, T0, T0 + 3 * DAY, n); /* head only */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_all(db, T0, T0 + 3 * DAY, n); /* tier files only */
    /* out of order into flushed minutes (new times), and a rewrite of an unflushed
     * time inside one flush interval: raw keeps the later value, so must the tiers */
    for (int i = 0; i < 50; i++)
        put(db, "t1", "dev", T0 + (int64_t)(rng() % (3 * DAY / 1000)) * 1000 + 7, 1000.0 + i, 1);
    put(db, "t1", "dev", T0 + 3 * DAY + 1000, 5, 5);
    put(db, "t1", "dev", T0 + 3 * DAY + 1000, 6, 6); /* rewrite: newest wins */
    n += 51;
    check_all(db, T0, T0 + 4 * DAY, n); /* files + head */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_all(db, T0, T0 + 4 * DAY, n);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    /* the 1m tier is derived from raw data while it exists: no 1m files (docs/AGGREGATION.md) */
    assert_int_equal(ts.files[0], 0);
    assert_true(ts.files[1] > 1); /* several partial 1h files in the one 30-day window */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 0);
    assert_int_equal(ts.files[1], 1);
    assert_int_equal(ts.files[2], 0); /* the 1d tier is derived from the 1h tier */
    check_all(db, T0, T0 + 4 * DAY, n);
    /* a sub-range and windows cut by it */
    check_equal_raw(db, "t1", "dev", "temp", T0 + DAY + 17 * MIN + 5, T0 + DAY + 5 * HOUR);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    check_all(db, T0, T0 + 4 * DAY, n);
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.discarded, 0);
    /* unknown device; a metric the device does not have gives no windows */
    bdb_rollup r;
    bdb_rollup_init(&r, HOUR);
    const char *m[1] = {"nope"};
    assert_int_equal(bdb_db_tier_read(db, "t1", "ghost", m, 1, BDB_RES_1H, T0, T0 + DAY, &r),
                     BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0, T0 + DAY, &r), BDB_OK);
    assert_int_equal(r.n, 0);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1D, T0, T0 + DAY, &r),
                     BDB_ERR_INVALID); /* width mismatch */
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name), sl = strlen(suffix);
        n += l > sl && !strcmp(de->d_name + l - sl, suffix);
    }
    closedir(d);
    return n;
}

/* The tier files of a flush whose catalog save never happened are dropped at open, and
 * the WAL brings their samples back exactly once. */
static void test_uncommitted_flush_discarded(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db *db = open_db(datadir);
    size_t n = write_days(db, T0, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* more writes, then a crash image (catalog at the first flush, WAL holds these) */
    for (int i = 0; i < 300; i++)
        put(db, "t1", "dev", T0 + DAY + i * 1000, i, 2);
    n += 300;
    char crash[256], tiers[256], from[1024], to[512];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK);
    /* the live db flushes: its new tier files are what a crash after the tier write
     * but before the catalog save would leave next to the old catalog */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int r = 1; r <= 3; r++) {
        snprintf(tiers, sizeof tiers, "%s/tiers/%s", datadir, bdb_res_name((enum bdb_res)r));
        snprintf(to, sizeof to, "%s/tiers/%s", crash, bdb_res_name((enum bdb_res)r));
        DIR *d = opendir(tiers);
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(from, sizeof from, "%s/%s", to, de->d_name);
            if (access(from, F_OK) == 0)
                continue; /* present in the image already */
            char src[1024];
            snprintf(src, sizeof src, "%s/%s", tiers, de->d_name);
            int in = open(src, O_RDONLY), out = open(from, O_WRONLY | O_CREAT, 0644);
            char buf[65536];
            ssize_t k;
            while ((k = read(in, buf, sizeof buf)) > 0)
                assert_int_equal(write(out, buf, (size_t)k), k);
            close(in);
            close(out);
        }
        closedir(d);
    }
    check_all(db, T0, T0 + 2 * DAY, n);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.discarded, 1);  /* the 1h file for the day of the 300 */
    check_all(db, T0, T0 + 2 * DAY, n); /* from the WAL, once */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_all(db, T0, T0 + 2 * DAY, n);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    check_all(db, T0, T0 + 2 * DAY, n);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_damaged_file_quarantined(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db *db = open_db(datadir);
    write_days(db, T0, 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char dir[256], path[600];
    snprintf(dir, sizeof dir, "%s/tiers/1h", datadir);
    DIR *d = opendir(dir);
    struct dirent *de;
    path[0] = 0;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".tier"))
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(d);
    assert_true(path[0]);
    int fd = open(path, O_RDWR);
    char c;
    assert_int_equal(pread(fd, &c, 1, 80), 1);
    c ^= 0x10;
    assert_int_equal(pwrite(fd, &c, 1, 80), 1);
    close(fd);
    db = open_db(datadir);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.quarantined, 1);
    assert_int_equal(ts.files[1], 0);
    assert_int_equal(ts.files[0], 0);
    char q[256];
    snprintf(q, sizeof q, "%s/quarantine", datadir);
    assert_int_equal(count_files(q, ".tier"), 1);
    assert_int_equal(count_files(dir, ".tier"), 0);
    /* the 1m tier still answers; the 1h tier has lost the damaged file's windows (the
     * data is still in raw and in the 1m tier, and is never read wrong) */
    bdb_rollup r;
    const char *m[1] = {"temp"};
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, T0 + HOUR, &r),
                     BDB_OK);
    assert_int_equal(r.n, 60);
    bdb_rollup_free(&r);
    bdb_rollup_init(&r, HOUR);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0, T0 + DAY, &r), BDB_OK);
    assert_int_equal(r.n, 0);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int64_t short_1m(void *ctx, const char *tn, enum bdb_res res, int64_t dflt)
{
    (void)ctx;
    if (!strcmp(tn, "short") && res == BDB_RES_1M)
        return 2 * DAY;
    return dflt;
}

static void test_retention_whole_files(void **st)
{
    (void)st;
    fake_now = T0 + 400 * DAY;
    bdb_db *db = open_db(datadir);
    /* samples on day 0, day 300 and day 399, in two tenants */
    int64_t days[3] = {0, 300, 399};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 10; i++) {
            put(db, "t1", "dev", T0 + days[k] * DAY + i * MIN, i, 1);
            put(db, "short", "dev", T0 + days[k] * DAY + i * MIN, i, 1);
        }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 0); /* derived from raw: nothing stored */
    bdb_db_tier_set_retention_hook(db, short_1m, NULL);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_tier_get_stats(db, &ts);
    /* 1m (90 d): day 0 and day 300 go for t1 (raw is kept forever here, but the 1m tier
     * answers within its retention only); for "short" (2 d) day 399 stays only */
    assert_int_equal(ts.files[0], 0);
    /* 1h (365 d, 30-day files): the file of day 0 goes (ends long before day 35) */
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    const char *m[1] = {"temp"};
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, T0 + 400 * DAY, &r),
                     BDB_OK);
    assert_int_equal(r.n, 10); /* day 399 only */
    bdb_rollup_free(&r);
    bdb_rollup_init(&r, HOUR);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1H, T0, T0 + 400 * DAY, &r),
                     BDB_OK);
    assert_int_equal(r.n, 2); /* days 300 and 399 */
    bdb_rollup_free(&r);
    bdb_rollup_init(&r, DAY);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1D, T0, T0 + 400 * DAY, &r),
                     BDB_OK);
    assert_int_equal(r.n, 3); /* days are kept forever */
    bdb_rollup_free(&r);
    assert_true(ts.dropped >= 2); /* the 1h files of day 0 of both tenants */
    /* day 0's hours went past the 1h retention: its day was kept in a 1d file first
     * (one per tenant); days 300 and 399 are still folded from their hours */
    assert_int_equal(ts.files[2], 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A reader running while samples are written and flushed never sees a sample twice
 * (frozen chunks and the tier files of the same flush) nor misses an acknowledged one
 * (between the tier publish and the free of the frozen chunks). */
static struct {
    bdb_db *db;
    _Atomic uint64_t started, acked;
    atomic_int stop;
    uint64_t reads, bad;
} race;

static void *race_reader(void *arg)
{
    (void)arg;
    const char *m[1] = {"temp"};
    while (!atomic_load(&race.stop)) {
        for (int res = BDB_RES_1M; res <= BDB_RES_1D; res++) {
            uint64_t lo = atomic_load(&race.acked);
            bdb_rollup r;
            bdb_rollup_init(&r, bdb_res_width((enum bdb_res)res));
            int rc = bdb_db_tier_read(race.db, "t1", "dev", m, 1, (enum bdb_res)res, T0,
                                      T0 + 2 * DAY, &r);
            uint64_t hi = atomic_load(&race.started), n = 0;
            for (size_t i = 0; i < r.n; i++)
                n += r.w[i].st.count;
            bdb_rollup_free(&r);
            if (rc == BDB_OK && (n < lo || n > hi))
                race.bad++;
            race.reads++;
        }
    }
    return NULL;
}

static void test_reads_during_flushes(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    race.db = open_db(datadir);
    put(race.db, "t1", "dev", T0, 1, 1); /* the device exists before the reader starts */
    atomic_store(&race.started, 1);
    atomic_store(&race.acked, 1);
    atomic_store(&race.stop, 0);
    race.reads = race.bad = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, race_reader, NULL), 0);
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < 25; i++) {
            atomic_fetch_add(&race.started, 1);
            /* some in order, some into flushed minutes */
            int64_t t =
                i % 5 ? T0 + (round * 25 + i + 1) * 1000 : T0 + (int64_t)(rng() % 86400) * 1000 + 1;
            put(race.db, "t1", "dev", t, i, 1);
            atomic_fetch_add(&race.acked, 1);
        }
        assert_int_equal(bdb_db_flush(race.db), BDB_OK);
        if (round % 10 == 9)
            assert_int_equal(bdb_db_maintain(race.db), BDB_OK);
    }
    atomic_store(&race.stop, 1);
    pthread_join(th, NULL);
    assert_true(race.reads > 0);
    assert_int_equal(race.bad, 0);
    check_equal_raw(race.db, "t1", "dev", "temp", T0, T0 + 2 * DAY);
    assert_int_equal(bdb_db_close(race.db), BDB_OK);
}

/* A read whose `to` falls inside a window returns that window whole, from the head
 * as from the files (a head window cut at `to` would disagree with its flushed self). */
static void test_window_cut_by_to_is_whole(void **st)
{
    (void)st;
    bdb_db *db = open_db(datadir);
    int64_t t0 = bdb_align_down(fake_now - 2 * BDB_MS_HOUR, BDB_MS_HOUR);
    for (int i = 0; i < 60; i++)
        put(db, "t", "d", t0 + i * 1000, i, 1);
    const char *m[1] = {"temp"};
    for (int pass = 0; pass < 2; pass++) {
        for (int res = BDB_RES_1M; res <= BDB_RES_1D; res++) {
            bdb_rollup r;
            bdb_rollup_init(&r, bdb_res_width((enum bdb_res)res));
            assert_int_equal(
                bdb_db_tier_read(db, "t", "d", m, 1, (enum bdb_res)res, t0, t0 + 1, &r), BDB_OK);
            const bdb_window *w = bdb_rollup_find(&r, bdb_align_down(t0, bdb_res_width(res)));
            assert_non_null(w);
            assert_int_equal(w->st.count, 60);
            bdb_rollup_free(&r);
        }
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The 1m windows of t1/dev/temp in [T0, T0 + DAY): every one must hold 3 samples (one
 * each 20 s) with the sum of the values put_day wrote. Returns the windows read. */
static size_t day_minutes_ok(bdb_db *db)
{
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "dev", m, 1, BDB_RES_1M, T0, T0 + DAY, &r), BDB_OK);
    for (size_t i = 0; i < r.n; i++) {
        int64_t k = (r.w[i].start - T0) / 20000; /* the first sample's index */
        assert_int_equal(bdb_stats_count(&r.w[i].st), 3);
        assert_true(bdb_stats_sum(&r.w[i].st) == (double)(3 * k + 3));
    }
    size_t n = r.n;
    bdb_rollup_free(&r);
    return n;
}

/* The 1m tier is derived from raw data while the raw data exists; maintenance writes a
 * tenant's minutes to 1m files before it drops their raw data, so they outlive it for
 * the 1m tier's retention. A crash after those files are written and before the blocks
 * are unlinked leaves both: the minutes are still counted once (raw is read only from
 * the oldest block on, files only before it), and the next pass finishes the job. */
static void test_minutes_outlive_raw(void **st)
{
    (void)st;
    fake_now = T0 + DAY;
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &fake_now);
    o.retention_ms = DAY;
    bdb_db *db = eu_open(&o);
    for (int64_t i = 0; i < DAY / 20000; i++) /* temp = 0, 1, 2, ...: sums are exact */
        put(db, "t1", "dev", T0 + i * 20000, (double)i, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 0); /* nothing stored for the 1m tier yet */
    assert_int_equal(day_minutes_ok(db), 1440);
    /* a day and an hour later every block window of day 0 is past the raw retention:
     * raw reads stop at the cutoff, the 1m tier still has the blocks until maintenance */
    fake_now = T0 + 2 * DAY + HOUR;
    assert_int_equal(day_minutes_ok(db), 1440);
    char blocks[256], keep[256];
    snprintf(blocks, sizeof blocks, "%s/blocks", datadir);
    snprintf(keep, sizeof keep, "%s/blocks-before", tmpdir);
    eu_copy_tree(blocks, keep, EU_WITH_LOCK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_stats ds;
    bdb_db_get_stats(db, &ds);
    assert_int_equal(ds.blocks, 0);
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 1);
    assert_int_equal(day_minutes_ok(db), 1440); /* from the 1m file */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    /* the state of a crash between the 1m files and the unlinks: both are there */
    eu_copy_tree(keep, blocks, EU_WITH_LOCK);
    db = eu_open(&o);
    bdb_db_get_stats(db, &ds);
    assert_true(ds.blocks > 0);
    assert_int_equal(day_minutes_ok(db), 1440); /* once, from raw */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_get_stats(db, &ds);
    assert_int_equal(ds.blocks, 0);
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.files[0], 1); /* the second pass's file replaced, then merged */
    assert_int_equal(day_minutes_ok(db), 1440);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = eu_open(&o);
    assert_int_equal(day_minutes_ok(db), 1440);
    /* past the 1m tier's 90 days the files go too */
    fake_now = T0 + 92 * DAY;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    assert_int_equal(day_minutes_ok(db), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tiers_equal_raw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_flush_discarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_file_quarantined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_whole_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_minutes_outlive_raw, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reads_during_flushes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_cut_by_to_is_whole, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
