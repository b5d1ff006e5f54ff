/* engine_cov: engine behaviour at edges the feature tests do not reach (issue 8).
 *
 * - Reads (db_read.c): snapshots and partition listings of unknown devices, of a
 *   device without events and with open or closed ends; listings stopped by their
 *   callback; more than 64 devices in name order; every allocation failure of a
 *   snapshot, a device lookup, a listing and a read answers BDB_ERR_NOMEM and nothing
 *   partial.
 * - Flush (db_flush.c): every allocation failure of a flush in turn, with a rewrite of
 *   the same timestamp after each failed one: the flush fails as a whole, the storage
 *   usage still counts the unflushed samples, and the final flush keeps every sample
 *   once with the newest value (also after a reopen).
 * - Blocks written under another block_window_ms, and a block renamed below its own
 *   sequence number: both read, newest write wins, the next flush does not reuse a
 *   sequence number; foreign and unfinished (.tmp) files in blocks/.
 * - Regrouping after a TTL change with two tenants whose names have the same length
 *   in one file (db_compact.c): the expired tenant goes, the other is kept whole; the
 *   file's bytes were split between the two (db_usage.c).
 * - The background thread flushes by itself. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)
#define T0 INT64_C(1790000000000)

static char tmpdir[64], datadir[128], blocksdir[160];

static struct world {
    int64_t now;
    int64_t ttl_ta, ttl_tb;
} W;

static int64_t world_clock(void *ctx)
{
    return ((struct world *)ctx)->now;
}

static int64_t world_ttl(void *ctx, const char *tenant)
{
    struct world *w = ctx;
    return !strcmp(tenant, "ta") ? w->ttl_ta : !strcmp(tenant, "tb") ? w->ttl_tb : 0;
}

static bdb_db *open_win(int64_t window_ms, int background)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.background = background;
    o.clock = (bdb_clock){world_clock, &W};
    o.tenant_retention = world_ttl;
    o.tenant_retention_ctx = &W;
    if (window_ms)
        o.block_window_ms = window_ms;
    /* what is durable when is the WAL tests' job: no fsync per write here (close and
     * flush still sync), so the sweeps stay fast */
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    if (background)
        o.flush_interval_ms = 50;
    return eu_open(&o);
}

static bdb_db *open_db(void)
{
    return open_win(0, 0);
}

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "engcov", EU_TMPFS, datadir, sizeof datadir);
    snprintf(blocksdir, sizeof blocksdir, "%s/blocks", datadir);
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1));
    W.now = T0 + DAY;
    W.ttl_ta = W.ttl_tb = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static void put(bdb_db *db, const char *tenant, const char *dev, int64_t ts, double v)
{
    eu_put(db, tenant, dev, "m", ts, v, 1);
}

/* Reads metric m of dev over [lo, hi): samples into *s (caller frees). */
static int read_m(bdb_db *db, const char *tenant, const char *dev, int64_t lo, int64_t hi,
                  bdb_samples *s)
{
    const char *metrics[] = {"m"};
    memset(s, 0, sizeof *s);
    uint64_t chunks = 0;
    return bdb_db_read(db, tenant, dev, metrics, 1, lo, hi, s, &chunks);
}

static size_t count_m(bdb_db *db, const char *tenant, const char *dev)
{
    bdb_samples s;
    assert_int_equal(read_m(db, tenant, dev, INT64_MIN, INT64_MAX, &s), BDB_OK);
    size_t n = s.n;
    bdb_samples_free(&s);
    return n;
}

/* ---------------------------------------------------------------- reads */

struct plist {
    int n;
    int64_t first, last;
};

static int part_cb(void *ctx, int64_t start, int64_t end)
{
    struct plist *p = ctx;
    assert_true(start < end);
    if (p->n++ == 0)
        p->first = start;
    p->last = end;
    return 0;
}

struct dlist {
    int n, stop_after;
    char names[128][16];
};

static int dev_cb(void *ctx, const bdb_device_info *d)
{
    struct dlist *l = ctx;
    if (l->n < 128)
        snprintf(l->names[l->n], sizeof l->names[0], "%s", d->device);
    l->n++;
    return l->stop_after && l->n >= l->stop_after;
}

static int size_cb(void *ctx, const char *t, const char *d, int64_t bs, uint64_t rows,
                   uint64_t bytes)
{
    (void)t;
    (void)d;
    (void)bs;
    (void)bytes;
    assert_true(rows > 0);
    return ++*(int *)ctx >= 1;
}

static void test_read_edges(void **state)
{
    (void)state;
    bdb_db *db = open_db();
    bdb_device_snapshot snap;
    struct plist pl = {0};
    assert_int_equal(bdb_db_device_snapshot(db, "t", "nobody", &snap), BDB_ERR_NOTFOUND);
    assert_null(snap.metrics);
    assert_int_equal(
        bdb_db_device_partitions(db, "t", "nobody", INT64_MIN, INT64_MAX, part_cb, &pl),
        BDB_ERR_NOTFOUND);
    /* a device the sub-bucket setting created has no events: no partitions at all */
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "empty", 2), BDB_OK);
    assert_int_equal(bdb_db_device_partitions(db, "t", "empty", INT64_MIN, INT64_MAX, part_cb, &pl),
                     BDB_OK);
    assert_int_equal(pl.n, 0);
    /* 70 devices (the listing grows past 64), one of them with two events an hour apart */
    char dn[16];
    for (int i = 69; i >= 0; i--) {
        snprintf(dn, sizeof dn, "d%02d", i);
        put(db, "t", dn, T0 + i, 1.0);
    }
    put(db, "t", "d00", T0 + HOUR, 2.0);
    memset(&pl, 0, sizeof pl);
    assert_int_equal(bdb_db_device_partitions(db, "t", "d00", INT64_MIN, INT64_MAX, part_cb, &pl),
                     BDB_OK);
    assert_true(pl.n >= 1);
    assert_true(pl.first <= T0 && pl.last > T0 + HOUR);
    struct plist closed = {0};
    assert_int_equal(
        bdb_db_device_partitions(db, "t", "d00", T0 + HOUR, T0 + HOUR + 1, part_cb, &closed),
        BDB_OK);
    assert_int_equal(closed.n, 1);
    assert_true(closed.first <= T0 + HOUR && closed.last > T0 + HOUR);

    struct dlist *dl = calloc(1, sizeof *dl);
    assert_int_equal(bdb_db_list_devices(db, "t", dev_cb, dl), BDB_OK);
    assert_int_equal(dl->n, 71); /* with "empty" */
    assert_string_equal(dl->names[0], "d00");
    assert_string_equal(dl->names[69], "d69");
    assert_string_equal(dl->names[70], "empty");
    memset(dl, 0, sizeof *dl);
    assert_int_equal(bdb_db_list_devices(db, NULL, dev_cb, dl), BDB_OK);
    assert_int_equal(dl->n, 71);
    /* a callback returning non-zero ends the listing, which is not an error */
    memset(dl, 0, sizeof *dl);
    dl->stop_after = 3;
    assert_int_equal(bdb_db_list_devices(db, NULL, dev_cb, dl), BDB_OK);
    assert_int_equal(dl->n, 3);
    assert_string_equal(dl->names[2], "d02");
    /* partition sizes: the callback stops the walk after the first */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    int seen = 0;
    assert_int_equal(bdb_db_partition_sizes(db, size_cb, &seen), BDB_OK);
    assert_int_equal(seen, 1);
    free(dl);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int info_cb(void *ctx, const bdb_device_info *d)
{
    *(size_t *)ctx = d->nmetrics;
    return 0;
}

/* Runs op with allocation k failing for k = 1, 2, ... until one run sees no failure:
 * each failed run must answer BDB_ERR_NOMEM. Returns the number of failed runs. */
#define ALLOC_SWEEP(call, on_fail)                                                                 \
    do {                                                                                           \
        for (uint64_t k_ = 1; k_ < 10000; k_++) {                                                  \
            eu_arm(k_);                                                                            \
            int rc_ = (call);                                                                      \
            uint64_t inj_ = bdb_alloc_fail_injected();                                             \
            bdb_alloc_fail_disarm();                                                               \
            if (!inj_) {                                                                           \
                assert_int_equal(rc_, BDB_OK);                                                     \
                break;                                                                             \
            }                                                                                      \
            assert_int_equal(rc_, BDB_ERR_NOMEM);                                                  \
            on_fail;                                                                               \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

static void test_read_out_of_memory(void **state)
{
    (void)state;
    bdb_db *db = open_db();
    for (int i = 0; i < 300; i++)
        put(db, "t", "d", T0 + i * 1000, i);
    put(db, "t", "e", T0, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int i = 300; i < 400; i++) /* head and blocks */
        put(db, "t", "d", T0 + i * 1000, i);
    int fails = 0;
    bdb_device_snapshot snap;
    ALLOC_SWEEP(bdb_db_device_snapshot(db, "t", "d", &snap),
                assert_true(snap.metrics == NULL && snap.nmetrics == 0));
    assert_int_equal(snap.nmetrics, 1);
    bdb_device_snapshot_free(&snap);
    size_t nm = 0;
    ALLOC_SWEEP(bdb_db_get_device(db, "t", "d", info_cb, &nm), (void)0);
    assert_int_equal(nm, 1);
    struct dlist dl;
    ALLOC_SWEEP((memset(&dl, 0, sizeof dl), bdb_db_list_devices(db, "t", dev_cb, &dl)), (void)0);
    assert_int_equal(dl.n, 2);
    ALLOC_SWEEP((memset(&dl, 0, sizeof dl), bdb_db_list_devices(db, NULL, dev_cb, &dl)), (void)0);
    assert_int_equal(dl.n, 2);
    bdb_samples s;
    memset(&s, 0, sizeof s);
    ALLOC_SWEEP((bdb_samples_free(&s), read_m(db, "t", "d", INT64_MIN, INT64_MAX, &s)), (void)0);
    assert_int_equal(s.n, 400);
    for (size_t i = 0; i < s.n; i++)
        assert_true(s.ts[i] == T0 + (int64_t)i * 1000 && s.v[i] == (double)i);
    bdb_samples_free(&s);
    assert_true(fails >= 6);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- flush */

static void test_flush_out_of_memory(void **state)
{
    (void)state;
    bdb_db *db = open_db();
    bdb_usage_opts uo = {.partition_warn_bytes = 0, .manual = 1};
    bdb_db_usage_start(db, &uo);
    /* several series, two devices, two windows */
    for (int i = 0; i < 50; i++) {
        put(db, "t", "a", T0 + i * MIN, i);
        put(db, "t", "b", T0 + 3 * HOUR + i * MIN, i);
    }
    uint64_t written = 100, rounds = 0, last_k = 0;
    int fails = 0, absorbed = 0;
    /* the engine's own allocations of a flush come first (WAL cut, freeze, merge,
     * block writers, publication); the tier and fleet hooks after them have their own
     * sweeps (alloc_fail_test.c), so the first 60 are enough here */
    for (uint64_t k = 1; k <= 60; k++) {
        /* the same time again each round: the newest value must win */
        put(db, "t", "a", T0, 1000.0 + (double)k);
        put(db, "t", "a", T0 + 2 * HOUR + (int64_t)k * 1000, (double)k);
        written += 2; /* the head holds the rewrite until a flush merges it */
        rounds++;
        last_k = k;
        eu_arm(k);
        int rc = bdb_db_flush(db);
        int inj = eu_disarm();
        if (!inj) {
            assert_int_equal(rc, BDB_OK);
            break;
        }
        if (rc == BDB_OK) { /* a failure the flush absorbs (it still wrote everything) */
            absorbed++;
            written = 0;
            continue;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        fails++;
        /* the failed flush published nothing: its samples still count as unflushed */
        bdb_storage_usage su;
        assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
        assert_int_equal(bdb_db_tenant_storage(db, "t", &su), BDB_OK);
        assert_int_equal(su.unflushed_samples, written);
        bdb_db_stats st;
        bdb_db_get_stats(db, &st);
        assert_false(st.readonly);
        /* blocks a failed flush published hold copies of what the head still has:
         * a read sees every sample once, the newest value winning */
        bdb_samples s;
        assert_int_equal(read_m(db, "t", "a", INT64_MIN, INT64_MAX, &s), BDB_OK);
        assert_int_equal(s.n, 50 + rounds);
        assert_true(s.ts[0] == T0 && s.v[0] == 1000.0 + (double)k);
        bdb_samples_free(&s);
    }
    assert_true(fails >= 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int pass = 0; pass < 2; pass++) {
        bdb_samples s;
        assert_int_equal(read_m(db, "t", "a", INT64_MIN, INT64_MAX, &s), BDB_OK);
        assert_int_equal(s.n, 50 + rounds);
        assert_int_equal(s.ts[0], T0);
        assert_true(s.v[0] == 1000.0 + (double)last_k);
        for (size_t i = 1; i < s.n; i++)
            assert_true(s.ts[i] > s.ts[i - 1]);
        bdb_samples_free(&s);
        assert_int_equal(count_m(db, "t", "b"), 50);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_db();
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int count_blk(const char *dir, char *one, size_t cap)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".blk")) {
            n++;
            if (one)
                snprintf(one, cap, "%s", de->d_name);
        }
    }
    closedir(d);
    return n;
}

static void test_window_change_and_block_names(void **state)
{
    (void)state;
    bdb_db *db = open_win(2 * HOUR, 0);
    for (int i = 0; i < 30; i++)
        put(db, "t", "d", T0 + i * MIN, 1.0);
    assert_int_equal(bdb_db_close(db), BDB_OK); /* flushes */
    /* the one block, renamed below its own sequence number */
    char name[64], from[256], to[256];
    assert_int_equal(count_blk(blocksdir, name, sizeof name), 1);
    assert_string_not_equal(name, "0000000000000000.blk");
    snprintf(from, sizeof from, "%s/%s", blocksdir, name);
    snprintf(to, sizeof to, "%s/0000000000000000.blk", blocksdir);
    assert_int_equal(rename(from, to), 0);
    /* foreign names stay, an unfinished write goes */
    const char *junk[] = {"abc", "notes.txt", "x.tmp"};
    for (int i = 0; i < 3; i++) {
        snprintf(from, sizeof from, "%s/%s", blocksdir, junk[i]);
        FILE *f = fopen(from, "w");
        assert_non_null(f);
        fputs("junk", f);
        fclose(f);
    }
    /* a smaller window now: the same times again with new values, in a block whose
     * window starts where the old one does but ends earlier */
    db = open_win(HOUR, 0);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.quarantined, 0);
    for (int i = 0; i < 30; i += 2)
        put(db, "t", "d", T0 + i * MIN, 2.0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(count_blk(blocksdir, NULL, 0), 2);
    for (int pass = 0; pass < 3; pass++) {
        bdb_samples s;
        assert_int_equal(read_m(db, "t", "d", INT64_MIN, INT64_MAX, &s), BDB_OK);
        assert_int_equal(s.n, 30);
        for (size_t i = 0; i < s.n; i++)
            assert_true(s.v[i] == (i % 2 ? 1.0 : 2.0)); /* the newer block wins */
        bdb_samples_free(&s);
        if (pass == 0)
            assert_int_equal(bdb_db_maintain(db), BDB_OK);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_win(HOUR, 0);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
    snprintf(from, sizeof from, "%s/x.tmp", blocksdir);
    assert_int_equal(access(from, F_OK), -1);
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", blocksdir, junk[i]);
        assert_int_equal(access(from, F_OK), 0);
    }
}

/* ---------------------------------------------------------------- retention */

static void test_regroup_equal_length_tenants(void **state)
{
    (void)state;
    W.ttl_ta = W.ttl_tb = 10 * DAY;
    bdb_db *db = open_db();
    for (int i = 0; i < 40; i++) {
        put(db, "ta", "d", T0 + i * MIN, i);
        put(db, "tb", "d", T0 + i * MIN, i);
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.blocks, 1); /* same TTL: one file */
    /* the file's bytes are split between the two tenants */
    bdb_usage_opts uo = {.manual = 1};
    bdb_db_usage_start(db, &uo);
    assert_int_equal(bdb_db_usage_refresh(db), BDB_OK);
    bdb_storage_usage ua, ub;
    assert_int_equal(bdb_db_tenant_storage(db, "ta", &ua), BDB_OK);
    assert_int_equal(bdb_db_tenant_storage(db, "tb", &ub), BDB_OK);
    assert_true(ua.block_bytes > 0 && ub.block_bytes > 0);
    assert_int_equal(ua.block_bytes + ub.block_bytes, st.block_bytes);
    /* ta's TTL shrinks to a day: two days later its samples are past it, tb's are not */
    W.ttl_ta = DAY;
    W.now = T0 + 2 * DAY;
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(st.block_samples, 40); /* only tb's are left in the file */
    assert_int_equal(count_m(db, "ta", "d"), 0);
    assert_int_equal(count_m(db, "tb", "d"), 40);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db();
    assert_int_equal(count_m(db, "tb", "d"), 40);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The same regroup with each of its first allocations failing in turn: maintenance
 * answers BDB_ERR_NOMEM or does the whole job, and tb never loses a sample. */
static void test_regroup_out_of_memory(void **state)
{
    (void)state;
    W.ttl_ta = W.ttl_tb = 10 * DAY;
    bdb_db *db = open_db();
    for (int i = 0; i < 40; i++) {
        put(db, "ta", "d", T0 + i * MIN, i);
        put(db, "tb", "d", T0 + i * MIN, i);
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    W.ttl_ta = DAY;
    W.now = T0 + 2 * DAY;
    /* until the regroup is done (maintenance may also log a failure and go on) */
    int failed = 0;
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    for (uint64_t k = 1; k <= 40 && st.block_samples != 40; k++) {
        eu_arm(k);
        int rc = bdb_db_maintain(db);
        int inj = eu_disarm();
        assert_true(rc == BDB_OK || (inj && rc == BDB_ERR_NOMEM));
        bdb_db_get_stats(db, &st);
        failed += inj && st.block_samples != 40;
        assert_int_equal(count_m(db, "tb", "d"), 40);
        assert_int_equal(count_m(db, "ta", "d"), 0);
        assert_true(st.block_samples == 40 || st.block_samples == 80); /* whole or as was */
    }
    assert_true(failed >= 3);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.block_samples, 40);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db();
    assert_int_equal(count_m(db, "tb", "d"), 40);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A clock so far in the past that now - TTL would overflow: no cutoff at all. */
static void test_cutoff_near_time_origin(void **state)
{
    (void)state;
    W.ttl_ta = DAY;
    W.now = INT64_MIN + HOUR;
    bdb_db *db = open_db();
    assert_int_equal(bdb_db_retention_ms(db, "ta"), DAY);
    assert_int_equal(bdb_db_retention_cutoff(db, "ta"), INT64_MIN);
    W.now = INT64_MIN + 2 * DAY;
    assert_int_equal(bdb_db_retention_cutoff(db, "ta"), INT64_MIN + DAY);
    assert_int_equal(bdb_db_retention_cutoff(db, "tb"), INT64_MIN); /* kept forever */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- background */

static void test_background_flushes(void **state)
{
    (void)state;
    W.now = T0;
    bdb_db *db = open_win(0, 1);
    put(db, "t", "d", T0, 1.0);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    for (int i = 0; i < 500 && st.flushes == 0; i++) { /* up to 5 s */
        usleep(10000);
        bdb_db_get_stats(db, &st);
    }
    assert_int_equal(st.blocks, 1);
    assert_true(st.flushes >= 1);
    assert_int_equal(count_m(db, "t", "d"), 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_change_and_block_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regroup_equal_length_tenants, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regroup_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cutoff_near_time_origin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_flushes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
