/* db: the embedded engine end to end through its public API, with background=0 so
 * every flush and maintenance run is explicit.
 *
 * Covered: write/read (whole range and partition by partition), tenant isolation,
 * out-of-order and duplicate times resolved to the later write in the head, across
 * flushes, across compaction and across close/reopen and crash (WAL replay) — also as
 * a random property test against a reference model; chunk_max_samples continuation
 * chunks; tags and state (an older event never replaces the state); bucket changes
 * through bdb_db_set_device_bucket with data readable across the change; read-only
 * after a failed fsync; ENOSPC on a WAL write loses nothing acknowledged; damaged
 * blocks quarantined at reopen; a torn WAL tail cut at reopen; retention dropping whole
 * old windows only (per-tenant TTLs: retention_test.c); the directory lock; the data
 * directory's length limit; a failure to delete flushed WAL segments after the commit
 * (not a failed flush, nothing replayed twice). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/path.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "storage/embedded/core/db.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <unistd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64];
static char datadir[128];

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

struct names {
    char v[64][256];
    size_t n;
};

static int name_cmp(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Sorted regular-file names in dir with the given suffix ("" = all). */
static void list_dir(const char *dir, const char *suffix, struct names *out)
{
    out->n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL && out->n < 64) {
        size_t l = strlen(de->d_name);
        if (de->d_name[0] == '.' || l < sl || strcmp(de->d_name + l - sl, suffix) != 0)
            continue;
        snprintf(out->v[out->n++], 256, "%s", de->d_name);
    }
    closedir(d);
    qsort(out->v, out->n, sizeof out->v[0], name_cmp);
}

static long file_size(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    return (long)st.st_size;
}

static void flip_bytes(const char *path, long off, int n)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    for (int i = 0; i < n; i++) {
        unsigned char c;
        assert_int_equal(pread(fd, &c, 1, off + i), 1);
        c ^= 0x5a;
        assert_int_equal(pwrite(fd, &c, 1, off + i), 1);
    }
    close(fd);
}

/* ------------------------------------------------------------ db helpers */

static bdb_db_opts base_opts(const char *dir)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    return o;
}

static bdb_db *open_opts(const bdb_db_opts *o)
{
    bdb_db *db = NULL;
    int rc = bdb_db_open(o, &db);
    if (rc != BDB_OK)
        fail_msg("bdb_db_open(%s): %s", o->data_dir, bdb_strerror(rc));
    return db;
}

static bdb_db *open_dir(const char *dir)
{
    bdb_db_opts o = base_opts(dir);
    return open_opts(&o);
}

static int write1(bdb_db *db, const char *tenant, const char *dev, int64_t ts, const char *metric,
                  double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 1);
    bdb_batch_metric(b, metric, strlen(metric), v);
    bdb_batch_end(b);
    int rc = bdb_db_write(db, tenant, b);
    bdb_batch_free(b);
    return rc;
}

/* n samples of one metric at ts0 + i*step with value base + i, in one batch. */
static void write_run(bdb_db *db, const char *tenant, const char *dev, const char *metric,
                      int64_t ts0, int64_t step, int n, double base)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), ts0 + i * step, (size_t)i + 1);
        bdb_batch_metric(b, metric, strlen(metric), base + i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
    bdb_batch_free(b);
}

/* Reads one metric over [lo, hi) in one call. */
static int read1(bdb_db *db, const char *tenant, const char *dev, const char *metric, int64_t lo,
                 int64_t hi, bdb_samples *out, uint64_t *chunks)
{
    const char *m[1] = {metric};
    memset(out, 0, sizeof *out);
    return bdb_db_read(db, tenant, dev, m, 1, lo, hi, out, chunks);
}

struct parts {
    int64_t s[20000], e[20000];
    size_t n;
};

static int parts_cb(void *ctx, int64_t s, int64_t e)
{
    struct parts *p = ctx;
    if (p->n >= 20000)
        return 1;
    p->s[p->n] = s;
    p->e[p->n] = e;
    p->n++;
    return 0;
}

/* Reads one metric partition by partition through the device's bucket history and
 * concatenates; must equal the single read. */
static void read_by_partitions(bdb_db *db, const char *tenant, const char *dev, const char *metric,
                               int64_t lo, int64_t hi, bdb_samples *all)
{
    static struct parts p;
    p.n = 0;
    assert_int_equal(bdb_db_device_partitions(db, tenant, dev, lo, hi, parts_cb, &p), BDB_OK);
    memset(all, 0, sizeof *all);
    size_t cap = 0;
    for (size_t i = 0; i < p.n; i++) {
        if (i > 0)
            assert_int_equal(p.s[i], p.e[i - 1]);
        int64_t a = p.s[i] > lo ? p.s[i] : lo, z = p.e[i] < hi ? p.e[i] : hi;
        bdb_samples one;
        assert_int_equal(read1(db, tenant, dev, metric, a, z, &one, NULL), BDB_OK);
        for (size_t k = 0; k < one.n; k++) {
            assert_true(one.ts[k] >= p.s[i] && one.ts[k] < p.e[i]);
            if (all->n == cap) {
                cap = cap ? cap * 2 : 256;
                all->ts = realloc(all->ts, cap * sizeof *all->ts);
                all->v = realloc(all->v, cap * sizeof *all->v);
                assert_non_null(all->ts);
                assert_non_null(all->v);
            }
            all->ts[all->n] = one.ts[k];
            all->v[all->n] = one.v[k];
            all->n++;
        }
        bdb_samples_free(&one);
    }
}

/* Expects exactly the samples (ts0 + i*step, base + i) for i in [0, n). */
static void expect_run(bdb_db *db, const char *tenant, const char *dev, const char *metric,
                       int64_t ts0, int64_t step, int n, double base)
{
    bdb_samples s;
    assert_int_equal(read1(db, tenant, dev, metric, ts0 - DAY, ts0 + n * step + DAY, &s, NULL),
                     BDB_OK);
    assert_int_equal(s.n, (size_t)n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(s.ts[i], ts0 + i * step);
        assert_true(s.v[i] == base + i);
    }
    bdb_samples_free(&s);
}

struct devinfo {
    int called;
    char tags[512];
    char state[64];
    int has_state;
    int64_t state_ts, first_ts, last_ts, bucket_ms;
    uint64_t samples;
    int pinned;
    size_t nmetrics, nchanges;
    char metrics[512];
};

static int info_cb(void *ctx, const bdb_device_info *d)
{
    struct devinfo *i = ctx;
    i->called++;
    i->tags[0] = '\0';
    for (size_t k = 0; k < d->ntags; k++) {
        size_t l = strlen(i->tags);
        snprintf(i->tags + l, sizeof i->tags - l, "%s%.*s=%.*s", k ? "," : "", (int)d->tags[k].klen,
                 d->tags[k].key, (int)d->tags[k].vlen, d->tags[k].val);
    }
    i->has_state = d->state != NULL;
    snprintf(i->state, sizeof i->state, "%s", d->state ? d->state : "");
    i->state_ts = d->state_ts;
    i->first_ts = d->first_ts;
    i->last_ts = d->last_ts;
    i->bucket_ms = d->bucket_ms;
    i->samples = d->samples;
    i->pinned = d->pinned;
    i->nmetrics = d->nmetrics;
    i->nchanges = d->nbucket_changes;
    i->metrics[0] = '\0';
    for (size_t k = 0; k < d->nmetrics; k++) {
        size_t l = strlen(i->metrics);
        snprintf(i->metrics + l, sizeof i->metrics - l, "%s%s", k ? "," : "", d->metrics[k]);
    }
    return 0;
}

static struct devinfo get_info(bdb_db *db, const char *tenant, const char *dev)
{
    struct devinfo i;
    memset(&i, 0, sizeof i);
    assert_int_equal(bdb_db_get_device(db, tenant, dev, info_cb, &i), BDB_OK);
    assert_int_equal(i.called, 1);
    return i;
}

/* ------------------------------------------------------------ fixtures */

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* quiet: the tests provoke errors on purpose */
    eu_scratch(tmpdir, sizeof tmpdir, "db", EU_TMPFS, datadir, sizeof datadir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

/* ------------------------------------------------------------ tests */

static void test_write_read_basic(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    /* one batch: two devices, several metrics per report, tags and state */
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 120; i++) {
        bdb_batch_begin(b, "d1", 2, T0 + i * 30000, (size_t)i);
        bdb_batch_tag(b, "site", 4, "berlin", 6);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        bdb_batch_metric(b, "hum", 3, 50.0 - i);
        bdb_batch_end(b);
        bdb_batch_begin(b, "d2", 2, T0 + i * 30000 + 7, (size_t)i);
        bdb_batch_metric(b, "temp", 4, -i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    /* the same device name in another tenant is another device */
    bdb_batch_reset(b);
    bdb_batch_begin(b, "d1", 2, T0, 1);
    bdb_batch_metric(b, "temp", 4, 999.0);
    bdb_batch_end(b);
    assert_int_equal(bdb_db_write(db, "other", b), BDB_OK);
    /* empty tenant rejected; empty batch accepted and a no-op */
    assert_int_equal(bdb_db_write(db, "", b), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_write(db, NULL, b), BDB_ERR_INVALID);
    bdb_batch_reset(b);
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_free(b);

    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.samples_written, 120 * 3 + 1);
    assert_int_equal(st.reports_written, 241);
    assert_int_equal(st.write_batches, 2);
    assert_int_equal(st.devices, 3);
    assert_int_equal(st.tenants, 2);
    assert_int_equal(st.series, 4);
    assert_int_equal(st.head_samples, 361);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.readonly, 0);

    /* both metrics at once */
    const char *ms[3] = {"hum", "temp", "nope"};
    bdb_samples out[3];
    memset(out, 0, sizeof out);
    uint64_t chunks = 0;
    assert_int_equal(bdb_db_read(db, "acme", "d1", ms, 3, T0, T0 + DAY, out, &chunks), BDB_OK);
    assert_true(chunks >= 2);
    assert_int_equal(out[0].n, 120);
    assert_int_equal(out[1].n, 120);
    assert_int_equal(out[2].n, 0); /* unknown metric: empty, not an error */
    for (int i = 0; i < 120; i++) {
        assert_int_equal(out[0].ts[i], T0 + i * 30000);
        assert_true(out[0].v[i] == 50.0 - i);
        assert_true(out[1].v[i] == 20.0 + i);
    }
    /* a sub-range is half-open */
    assert_int_equal(bdb_db_read(db, "acme", "d1", ms, 1, T0 + 30000, T0 + 90000, out, NULL),
                     BDB_OK);
    assert_int_equal(out[0].n, 2);
    assert_int_equal(out[0].ts[0], T0 + 30000);
    assert_int_equal(out[0].ts[1], T0 + 60000);
    for (int i = 0; i < 3; i++)
        bdb_samples_free(&out[i]);

    expect_run(db, "other", "d1", "temp", T0, 1, 1, 999.0);
    bdb_samples s;
    assert_int_equal(read1(db, "acme", "nobody", "temp", T0, T0 + DAY, &s, NULL), BDB_ERR_NOTFOUND);
    assert_int_equal(read1(db, "nobody", "d1", "temp", T0, T0 + DAY, &s, NULL), BDB_ERR_NOTFOUND);

    /* partition by partition equals the single read */
    bdb_samples whole, byp;
    assert_int_equal(read1(db, "acme", "d2", "temp", T0 - HOUR, T0 + 2 * DAY, &whole, NULL),
                     BDB_OK);
    read_by_partitions(db, "acme", "d2", "temp", T0 - HOUR, T0 + 2 * DAY, &byp);
    assert_int_equal(whole.n, 120);
    assert_int_equal(byp.n, whole.n);
    assert_memory_equal(byp.ts, whole.ts, whole.n * sizeof *whole.ts);
    assert_memory_equal(byp.v, whole.v, whole.n * sizeof *whole.v);
    bdb_samples_free(&whole);
    bdb_samples_free(&byp);

    struct devinfo i = get_info(db, "acme", "d1");
    assert_string_equal(i.tags, "site=berlin");
    assert_int_equal(i.has_state, 0);
    assert_int_equal(i.first_ts, T0);
    assert_int_equal(i.last_ts, T0 + 119 * 30000);
    assert_int_equal(i.samples, 240);
    assert_string_equal(i.metrics, "hum,temp");
    assert_int_equal(bdb_db_get_device(db, "acme", "zz", info_cb, &i), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    assert_int_equal(bdb_db_close(NULL), BDB_OK);
}

static int count_cb(void *ctx, const bdb_device_info *d)
{
    (void)d;
    (*(int *)ctx)++;
    return 0;
}

static int names_cb(void *ctx, const bdb_device_info *d)
{
    char *s = ctx;
    size_t l = strlen(s);
    snprintf(s + l, 256 - l, "%s/%s;", d->tenant, d->device);
    return 0;
}

static void test_list_devices_and_lock(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    assert_int_equal(write1(db, "t2", "b", T0, "m", 1), BDB_OK);
    assert_int_equal(write1(db, "t1", "z", T0, "m", 1), BDB_OK);
    assert_int_equal(write1(db, "t1", "a", T0, "m", 1), BDB_OK);
    char names[256] = "";
    assert_int_equal(bdb_db_list_devices(db, NULL, names_cb, names), BDB_OK);
    assert_string_equal(names, "t1/a;t1/z;t2/b;");
    int n = 0;
    assert_int_equal(bdb_db_list_devices(db, "t1", count_cb, &n), BDB_OK);
    assert_int_equal(n, 2);
    n = 0;
    assert_int_equal(bdb_db_list_devices(db, "none", count_cb, &n), BDB_OK);
    assert_int_equal(n, 0);

    /* a second open of the same directory is refused while the first holds it */
    bdb_db_opts o = base_opts(datadir);
    bdb_db *db2 = NULL;
    assert_int_equal(bdb_db_open(&o, &db2), BDB_ERR_EXISTS);
    assert_null(db2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(datadir);
    n = 0;
    assert_int_equal(bdb_db_list_devices(db, NULL, count_cb, &n), BDB_OK);
    assert_int_equal(n, 3);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Out-of-order and duplicate times: the later write wins in the head, after a flush,
 * with head over block, after compaction and after reopen. */
static void test_ooo_and_duplicates(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    /* in order: slots 0..59 every minute, value i */
    write_run(db, "t", "d", "m", T0, MIN, 60, 0.0);
    /* out of order: slot 10 rewritten, an older time, and a duplicate within one
     * batch where the second report must win */
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d", 1, T0 + 10 * MIN, 1);
    bdb_batch_metric(b, "m", 1, 1010.0);
    bdb_batch_end(b);
    bdb_batch_begin(b, "d", 1, T0 - 5 * MIN, 2);
    bdb_batch_metric(b, "m", 1, -5.0);
    bdb_batch_end(b);
    bdb_batch_begin(b, "d", 1, T0 + 20 * MIN, 3);
    bdb_batch_metric(b, "m", 1, 2020.0);
    bdb_batch_end(b);
    bdb_batch_begin(b, "d", 1, T0 + 20 * MIN, 4);
    bdb_batch_metric(b, "m", 1, 2021.0);
    bdb_batch_end(b);
    bdb_batch_begin(b, "d", 1, T0 + 59 * MIN, 5); /* rewrite of the newest */
    bdb_batch_metric(b, "m", 1, 5959.0);
    bdb_batch_end(b);
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    /* a rewrite of slot 10 again, in its own batch: the newest of three writes */
    assert_int_equal(write1(db, "t", "d", T0 + 10 * MIN, "m", 1011.0), BDB_OK);

    double want[61];
    int64_t wts[61];
    wts[0] = T0 - 5 * MIN;
    want[0] = -5.0;
    for (int i = 0; i < 60; i++) {
        wts[i + 1] = T0 + i * MIN;
        want[i + 1] = i;
    }
    want[11] = 1011.0;
    want[21] = 2021.0;
    want[60] = 5959.0;

    for (int stage = 0; stage < 6; stage++) {
        if (stage == 1)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        if (stage == 2) {
            /* rewrites in the head over samples already in a block */
            assert_int_equal(write1(db, "t", "d", T0 + 30 * MIN, "m", 3030.0), BDB_OK);
            assert_int_equal(write1(db, "t", "d", T0 - 5 * MIN, "m", -55.0), BDB_OK);
            want[31] = 3030.0;
            want[0] = -55.0;
        }
        if (stage == 3) {
            /* a second block for the same window, then compaction merges them */
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            bdb_db_stats st;
            bdb_db_get_stats(db, &st);
            /* windows T0 - 2h (the sample at T0 - 5 min) and T0, twice each */
            assert_int_equal(st.blocks, 4);
            assert_int_equal(st.pending_compactions, 2);
            assert_int_equal(bdb_db_maintain(db), BDB_OK);
            bdb_db_get_stats(db, &st);
            assert_int_equal(st.blocks, 2);
            assert_int_equal(st.compactions, 2);
            assert_int_equal(st.pending_compactions, 0);
            assert_int_equal(st.block_samples, 61);
        }
        if (stage == 4) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(datadir);
        }
        if (stage == 5) {
            /* a rewrite only in the WAL, then a crash image */
            assert_int_equal(write1(db, "t", "d", T0 + 40 * MIN, "m", 4040.0), BDB_OK);
            want[41] = 4040.0;
            char crash[128];
            snprintf(crash, sizeof crash, "%s/crash", tmpdir);
            eu_copy_tree(datadir, crash, EU_WITH_LOCK);
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(crash);
            bdb_db_stats st;
            bdb_db_get_stats(db, &st);
            assert_true(st.wal_replayed_records >= 1);
        }
        bdb_samples s;
        assert_int_equal(read1(db, "t", "d", "m", T0 - HOUR, T0 + 2 * HOUR, &s, NULL), BDB_OK);
        if (s.n != 61)
            fail_msg("stage %d: %zu samples", stage, s.n);
        for (int i = 0; i < 61; i++) {
            if (s.ts[i] != wts[i] || s.v[i] != want[i])
                fail_msg("stage %d slot %d: (%lld, %g) want (%lld, %g)", stage, i,
                         (long long)s.ts[i], s.v[i], (long long)wts[i], want[i]);
        }
        bdb_samples_free(&s);
    }
    bdb_batch_free(b);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A series keeps its metric name's length in 16 bits (db_int.h): the longest name is
 * stored and read back, one byte more is refused for the whole batch. */
#define NAME_MAX_BYTES 65535 /* DB_MAX_METRIC_LEN */
static void test_metric_name_limit(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    char *name = malloc(NAME_MAX_BYTES + 2);
    assert_non_null(name);
    memset(name, 'm', NAME_MAX_BYTES + 1);
    name[NAME_MAX_BYTES + 1] = '\0';
    assert_int_equal(write1(db, "t", "d", T0, name, 1.5), BDB_ERR_LIMIT);
    name[NAME_MAX_BYTES] = '\0';
    assert_int_equal(write1(db, "t", "d", T0, name, 2.5), BDB_OK);
    bdb_samples s;
    assert_int_equal(read1(db, "t", "d", name, T0, T0 + HOUR, &s, NULL), BDB_OK);
    assert_int_equal(s.n, 1);
    assert_true(s.v[0] == 2.5);
    bdb_samples_free(&s);
    free(name);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Many late and rewritten samples in one chunk: the head merges its side list into the
 * chunk's stream as it grows (head.c), and every read, the flush and the block keep
 * exactly the model: each time once, the last write of it. */
static void test_ooo_merged_into_stream(void **state)
{
    (void)state;
    enum { SLOTS = 360, WRITES = 1500 };
    static double model[SLOTS];
    static unsigned char have[SLOTS];
    memset(have, 0, sizeof have);
    bdb_db *db = open_dir(datadir);
    rng_state = 42;
    int newest = -1;
    for (int w = 0; w < WRITES; w++) {
        /* a step forward now and then, else a time at or before the newest */
        int slot;
        if (newest < 0 || (newest + 1 < SLOTS && rng() % 4 == 0))
            slot = ++newest;
        else
            slot = (int)(rng() % (uint64_t)(newest + 1));
        double v = (double)(int64_t)(rng() % 100000) / 100;
        assert_int_equal(write1(db, "t", "d", T0 + slot * 10000, "m", v), BDB_OK);
        model[slot] = v;
        have[slot] = 1;
        if (w % 250 == 249 || w == WRITES - 1) {
            bdb_samples s;
            assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, NULL), BDB_OK);
            size_t k = 0;
            for (int i = 0; i < SLOTS; i++) {
                if (!have[i])
                    continue;
                if (k >= s.n || s.ts[k] != T0 + i * 10000 || s.v[k] != model[i])
                    fail_msg("write %d slot %d: got %zu samples", w, i, s.n);
                k++;
            }
            assert_int_equal(k, s.n);
            bdb_samples_free(&s);
        }
    }
    /* Without the merge the side list alone would hold ~1,100 samples of 16 bytes. */
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_true(st.head_bytes < 4096);
    size_t n = 0;
    for (int i = 0; i < SLOTS; i++)
        n += have[i];
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.head_bytes, 0);
    assert_int_equal(st.head_samples, 0);
    assert_int_equal(st.block_samples, n);
    bdb_samples s;
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, NULL), BDB_OK);
    assert_int_equal(s.n, n);
    for (size_t k = 0, i = 0; i < SLOTS; i++) {
        if (have[i]) {
            assert_true(s.ts[k] == T0 + (int64_t)i * 10000 && s.v[k] == model[i]);
            k++;
        }
    }
    bdb_samples_free(&s);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_chunk_max_samples(void **state)
{
    (void)state;
    bdb_db_opts o = base_opts(datadir);
    o.chunk_max_samples = 16;
    bdb_db *db = open_opts(&o);
    /* 100 samples inside one partition and one window: 7 chunks of at most 16 */
    write_run(db, "t", "d", "m", T0, 30000, 100, 0.0);
    bdb_samples s;
    uint64_t chunks = 0;
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, &chunks), BDB_OK);
    assert_int_equal(s.n, 100);
    assert_int_equal(chunks, 7);
    bdb_samples_free(&s);
    /* rewrite a time held by the oldest (full) chunk: the newest write wins */
    assert_int_equal(write1(db, "t", "d", T0 + 3 * 30000, "m", 333.0), BDB_OK);
    assert_int_equal(write1(db, "t", "d", T0 + 99 * 30000, "m", 999.0), BDB_OK);
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        if (pass == 2) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_opts(&o);
        }
        chunks = 0;
        assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, &chunks), BDB_OK);
        assert_int_equal(s.n, 100);
        for (int i = 0; i < 100; i++) {
            assert_int_equal(s.ts[i], T0 + i * 30000);
            double w = i == 3 ? 333.0 : i == 99 ? 999.0 : i;
            assert_true(s.v[i] == w);
        }
        if (pass > 0)
            assert_int_equal(chunks, 7); /* blocks cut at 16 samples too */
        bdb_samples_free(&s);
    }
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.block_samples, 100);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int64_t write_report(bdb_db *db, const char *dev, int64_t ts, const char *tagval,
                            const char *state_s, int with_metric)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 1);
    if (tagval) {
        bdb_batch_tag(b, "site", 4, tagval, strlen(tagval));
        bdb_batch_tag(b, "kind", 4, "pump", 4);
    }
    if (with_metric)
        bdb_batch_metric(b, "rpm", 3, 1.0);
    if (state_s)
        bdb_batch_state(b, state_s, strlen(state_s));
    bdb_batch_end(b);
    int rc = bdb_db_write(db, "t", b);
    bdb_batch_free(b);
    return rc;
}

static void test_tags_and_state(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    assert_int_equal(write_report(db, "p1", T0 + 10 * MIN, "a", "on", 1), BDB_OK);
    struct devinfo i = get_info(db, "t", "p1");
    assert_string_equal(i.tags, "site=a,kind=pump");
    assert_string_equal(i.state, "on");
    assert_int_equal(i.state_ts, T0 + 10 * MIN);

    /* an older event with another state does not replace it; its tags do apply */
    assert_int_equal(write_report(db, "p1", T0 + 5 * MIN, "b", "off", 1), BDB_OK);
    i = get_info(db, "t", "p1");
    assert_string_equal(i.state, "on");
    assert_int_equal(i.state_ts, T0 + 10 * MIN);
    assert_string_equal(i.tags, "site=b,kind=pump");
    assert_int_equal(i.first_ts, T0 + 5 * MIN);
    assert_int_equal(i.last_ts, T0 + 10 * MIN);

    /* a report without tags keeps the tags; a state-only report (no metric) counts */
    assert_int_equal(write_report(db, "p1", T0 + 20 * MIN, NULL, "fault", 0), BDB_OK);
    i = get_info(db, "t", "p1");
    assert_string_equal(i.state, "fault");
    assert_int_equal(i.state_ts, T0 + 20 * MIN);
    assert_string_equal(i.tags, "site=b,kind=pump");
    assert_int_equal(i.last_ts, T0 + 20 * MIN);
    assert_int_equal(i.samples, 2);

    /* same time: the later write wins */
    assert_int_equal(write_report(db, "p1", T0 + 20 * MIN, NULL, "off", 0), BDB_OK);
    /* a device that only ever sent state has no metric */
    assert_int_equal(write_report(db, "p2", T0, "x", "idle", 0), BDB_OK);

    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) { /* catalog */
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(datadir);
            /* an older state arriving after the restart is ignored as well */
            assert_int_equal(write_report(db, "p1", T0 + 15 * MIN, NULL, "on", 1), BDB_OK);
        }
        if (pass == 2) { /* crash: catalog + WAL replay */
            char crash[128];
            snprintf(crash, sizeof crash, "%s/crash", tmpdir);
            eu_copy_tree(datadir, crash, EU_WITH_LOCK);
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(crash);
        }
        i = get_info(db, "t", "p1");
        assert_string_equal(i.state, "off");
        assert_int_equal(i.state_ts, T0 + 20 * MIN);
        assert_string_equal(i.tags, "site=b,kind=pump");
        assert_int_equal(i.first_ts, T0 + 5 * MIN);
        assert_int_equal(i.last_ts, T0 + 20 * MIN);
        assert_string_equal(i.metrics, "rpm");
        i = get_info(db, "t", "p2");
        assert_string_equal(i.state, "idle");
        assert_string_equal(i.tags, "site=x,kind=pump");
        assert_int_equal(i.nmetrics, 0);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_set_device_bucket(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    /* 3 hours every 30 s: a MEDIUM device, 1 h buckets */
    write_run(db, "t", "d", "m", T0, 30000, 360, 0.0);
    struct devinfo i = get_info(db, "t", "d");
    assert_int_equal(i.bucket_ms, HOUR);
    assert_int_equal(i.nchanges, 0);
    assert_int_equal(i.pinned, 0);

    assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", 30 * MIN), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", -HOUR), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", 15 * MIN), BDB_OK);
    i = get_info(db, "t", "d");
    assert_int_equal(i.bucket_ms, 15 * MIN);
    assert_int_equal(i.pinned, 1);
    assert_int_equal(i.nchanges, 1);

    /* two more hours after the change, and a late sample inside the old buckets */
    write_run(db, "t", "d", "m", T0 + 3 * HOUR, 30000, 240, 360.0);
    assert_int_equal(write1(db, "t", "d", T0 + 15, "m", -1.0), BDB_OK);

    static struct parts p;
    for (int pass = 0; pass < 4; pass++) {
        if (pass == 1)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        if (pass == 2) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(datadir);
        }
        if (pass == 3) {
            /* the history also survives a crash through the WAL */
            assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", 0), BDB_OK);
            char crash[128];
            snprintf(crash, sizeof crash, "%s/crash", tmpdir);
            eu_copy_tree(datadir, crash, EU_WITH_LOCK);
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(crash);
            i = get_info(db, "t", "d");
            assert_int_equal(i.pinned, 0);
        }
        p.n = 0;
        assert_int_equal(bdb_db_device_partitions(db, "t", "d", T0, T0 + 5 * HOUR, parts_cb, &p),
                         BDB_OK);
        assert_true(p.n >= 3 + 8);
        assert_int_equal(p.s[0], T0);
        assert_int_equal(p.e[2] - p.s[2], HOUR);
        assert_int_equal(p.s[3], T0 + 3 * HOUR);
        assert_int_equal(p.e[3] - p.s[3], 15 * MIN);
        assert_int_equal(p.e[10], T0 + 5 * HOUR);

        bdb_samples s, byp;
        assert_int_equal(read1(db, "t", "d", "m", T0 - DAY, T0 + DAY, &s, NULL), BDB_OK);
        read_by_partitions(db, "t", "d", "m", T0 - DAY, T0 + DAY, &byp);
        assert_int_equal(s.n, 601);
        assert_int_equal(byp.n, 601);
        assert_memory_equal(s.ts, byp.ts, s.n * sizeof *s.ts);
        assert_memory_equal(s.v, byp.v, s.n * sizeof *s.v);
        assert_int_equal(s.ts[0], T0);
        assert_int_equal(s.ts[1], T0 + 15);
        assert_true(s.v[1] == -1.0);
        for (size_t k = 2; k < s.n; k++) {
            assert_int_equal(s.ts[k], T0 + (int64_t)(k - 1) * 30000);
            assert_true(s.v[k] == (double)(k - 1));
        }
        bdb_samples_free(&s);
        bdb_samples_free(&byp);
        i = get_info(db, "t", "d");
        if (pass < 3) {
            assert_int_equal(i.pinned, 1);
            assert_int_equal(i.bucket_ms, 15 * MIN);
        }
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_fsync_failure_readonly(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_db_opts o = base_opts(datadir);
    o.vfs = fv;
    bdb_db *db = open_opts(&o);
    assert_int_equal(write1(db, "t", "d", T0, "m", 1.0), BDB_OK);
    uint64_t c0 = bdb_vfs_fault_calls(fv);
    assert_int_equal(write1(db, "t", "d", T0 + MIN, "m", 2.0), BDB_OK);
    uint64_t per_write = bdb_vfs_fault_calls(fv) - c0;
    assert_true(per_write >= 2); /* at least the WAL write and its fsync */
    /* the last counted call of the next write is its fsync: fail it once */
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + per_write, EIO, 0);
    assert_int_equal(write1(db, "t", "d", T0 + 2 * MIN, "m", 3.0), BDB_ERR_READONLY);
    /* never retried: every later write is refused although the fault was one-shot */
    assert_int_equal(write1(db, "t", "d", T0 + 3 * MIN, "m", 4.0), BDB_ERR_READONLY);
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "d", 15 * MIN), BDB_ERR_READONLY);
    assert_int_equal(bdb_db_flush(db), BDB_ERR_READONLY);
    assert_int_equal(bdb_db_maintain(db), BDB_ERR_READONLY);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 1);
    assert_true(strlen(st.readonly_reason) > 0);
    assert_non_null(strstr(st.readonly_reason, "fsync"));
    assert_int_equal(st.write_batches, 2);
    /* reads still work */
    bdb_samples s;
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, NULL), BDB_OK);
    assert_true(s.n >= 2);
    assert_int_equal(s.ts[0], T0);
    assert_int_equal(s.ts[1], T0 + MIN);
    bdb_samples_free(&s);
    bdb_db_close(db);
    bdb_vfs_fault_free(fv);

    /* a restart on a healthy disk has both acknowledged writes and accepts writes */
    db = open_dir(datadir);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 0);
    assert_int_equal(st.readonly_reason[0], '\0');
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + 2 * MIN, &s, NULL), BDB_OK);
    assert_int_equal(s.n, 2);
    assert_true(s.v[0] == 1.0 && s.v[1] == 2.0);
    bdb_samples_free(&s);
    assert_int_equal(write1(db, "t", "d", T0 + 5 * MIN, "m", 5.0), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_nospace_on_wal_write(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 2);
    bdb_db_opts o = base_opts(datadir);
    o.vfs = fv;
    bdb_db *db = open_opts(&o);
    assert_int_equal(write1(db, "t", "d", T0, "m", 1.0), BDB_OK);
    /* the next counted call is the WAL write of the next batch: ENOSPC once */
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 1, ENOSPC, 0);
    assert_int_equal(write1(db, "t", "d", T0 + MIN, "m", 2.0), BDB_ERR_NOSPACE);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 0);
    /* the refused batch is not visible; the next one is accepted */
    assert_int_equal(write1(db, "t", "d", T0 + 2 * MIN, "m", 3.0), BDB_OK);
    bdb_samples s;
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, NULL), BDB_OK);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ts[1], T0 + 2 * MIN);
    bdb_samples_free(&s);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    bdb_vfs_fault_free(fv);

    db = open_dir(datadir);
    assert_int_equal(read1(db, "t", "d", "m", T0, T0 + HOUR, &s, NULL), BDB_OK);
    assert_int_equal(s.n, 2);
    assert_true(s.v[0] == 1.0 && s.v[1] == 3.0);
    bdb_samples_free(&s);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Writes two windows (T0 and T0 + 4h) into separate blocks and returns after close. */
static void two_blocks(void)
{
    bdb_db *db = open_dir(datadir);
    write_run(db, "t", "d", "m", T0, MIN, 60, 0.0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    write_run(db, "t", "d", "m", T0 + 4 * HOUR, MIN, 60, 100.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static size_t count_in(bdb_db *db, int64_t lo, int64_t hi, int *rc)
{
    bdb_samples s;
    *rc = read1(db, "t", "d", "m", lo, hi, &s, NULL);
    size_t n = s.n;
    bdb_samples_free(&s);
    return n;
}

static void test_damaged_block_quarantined(void **state)
{
    (void)state;
    char blocks[160], quar[160], path[512];
    snprintf(blocks, sizeof blocks, "%s/blocks", datadir);
    snprintf(quar, sizeof quar, "%s/quarantine", datadir);
    for (int where = 0; where < 2; where++) {
        tu_rm_rf(datadir);
        two_blocks();
        struct names nb;
        list_dir(blocks, ".blk", &nb);
        assert_int_equal(nb.n, 2);
        snprintf(path, sizeof path, "%s/%s", blocks, nb.v[0]);
        long sz = file_size(path);
        assert_true(sz > 200);
        if (where == 0)
            flip_bytes(path, sz - 20, 8); /* footer */
        else
            flip_bytes(path, 2, 4); /* header */

        bdb_db *db = open_dir(datadir); /* still opens */
        bdb_db_stats st;
        bdb_db_get_stats(db, &st);
        assert_int_equal(st.quarantined, 1);
        assert_int_equal(st.blocks, 1);
        struct names nq, nb2;
        list_dir(quar, "", &nq);
        list_dir(blocks, ".blk", &nb2);
        assert_int_equal(nq.n, 1);
        assert_string_equal(nq.v[0], nb.v[0]);
        assert_int_equal(nb2.n, 1);
        assert_string_equal(nb2.v[0], nb.v[1]);
        /* one window is gone, the other is whole; reading never fails */
        int rc1, rc2;
        size_t a = count_in(db, T0, T0 + HOUR, &rc1);
        size_t b = count_in(db, T0 + 4 * HOUR, T0 + 5 * HOUR, &rc2);
        assert_int_equal(rc1, BDB_OK);
        assert_int_equal(rc2, BDB_OK);
        assert_true((a == 0 && b == 60) || (a == 60 && b == 0));
        /* writes go on and the next restart finds nothing new to quarantine */
        assert_int_equal(write1(db, "t", "d", T0 + 8 * HOUR, "m", 1.0), BDB_OK);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_dir(datadir);
        bdb_db_get_stats(db, &st);
        assert_int_equal(st.quarantined, 0);
        assert_int_equal(count_in(db, T0 + 8 * HOUR, T0 + 9 * HOUR, &rc1), 1);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

/* Damage inside chunk data is found when the chunk is read: an error, never wrong
 * values. */
static void test_damaged_chunk_data_is_an_error(void **state)
{
    (void)state;
    two_blocks();
    char blocks[160], path[512];
    snprintf(blocks, sizeof blocks, "%s/blocks", datadir);
    struct names nb;
    list_dir(blocks, ".blk", &nb);
    assert_int_equal(nb.n, 2);
    for (size_t i = 0; i < nb.n; i++) {
        snprintf(path, sizeof path, "%s/%s", blocks, nb.v[i]);
        flip_bytes(path, 36 + 4, 2); /* just past the 36-byte header: first chunk */
    }
    bdb_db *db = open_dir(datadir);
    int rc;
    count_in(db, T0, T0 + HOUR, &rc);
    assert_int_equal(rc, BDB_ERR_CORRUPT);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_torn_wal_tail(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    for (int k = 0; k < 5; k++)
        write_run(db, "t", "d", "m", T0 + k * 10 * MIN, MIN, 10, k * 10.0);
    char crash[128], wal[160], path[512];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    eu_copy_tree(datadir, crash, EU_WITH_LOCK);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    snprintf(wal, sizeof wal, "%s/wal", crash);
    struct names nw;
    list_dir(wal, "", &nw);
    assert_true(nw.n >= 1);
    snprintf(path, sizeof path, "%s/%s", wal, nw.v[nw.n - 1]);
    long sz = file_size(path);
    assert_true(sz > 100);
    assert_int_equal(truncate(path, sz - 9), 0); /* tear the last record */

    db = open_dir(crash);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_true(st.wal_corruptions >= 1);
    assert_true(st.wal_corrupt_bytes > 0);
    assert_int_equal(st.wal_replayed_records, 4);
    /* the first four batches survive, the torn fifth is gone */
    expect_run(db, "t", "d", "m", T0, MIN, 40, 0.0);
    /* the log keeps working: write, crash again, all there */
    write_run(db, "t", "d", "m", T0 + 40 * MIN, MIN, 10, 40.0);
    char crash2[128];
    snprintf(crash2, sizeof crash2, "%s/crash2", tmpdir);
    eu_copy_tree(crash, crash2, EU_WITH_LOCK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(crash2);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.wal_corruptions, 0);
    expect_run(db, "t", "d", "m", T0, MIN, 50, 0.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int64_t fixed_clock(void *ctx)
{
    return *(const int64_t *)ctx;
}

static void test_retention_drops_whole_windows(void **state)
{
    (void)state;
    int64_t now = bdb_now_ms();
    int64_t w0 = bdb_align_down(now, 2 * HOUR) - 10 * DAY; /* a window start */
    bdb_db_opts o = base_opts(datadir);
    o.clock = (bdb_clock){fixed_clock, &now};
    o.retention_ms = now - (w0 + HOUR); /* the cutoff falls in the middle of window w0 */
    bdb_db *db = open_opts(&o);
    int64_t old = w0 - DAY;
    assert_int_equal(write1(db, "t", "d", old, "m", 1.0), BDB_OK);
    assert_int_equal(write1(db, "t", "d", old + 3 * HOUR, "m", 2.0), BDB_OK);
    assert_int_equal(write1(db, "t", "d", w0 + 10 * MIN, "m", 3.0), BDB_OK);  /* < cutoff */
    assert_int_equal(write1(db, "t", "d", w0 + 100 * MIN, "m", 4.0), BDB_OK); /* > cutoff */
    assert_int_equal(write1(db, "t", "d", now - HOUR, "m", 5.0), BDB_OK);
    /* Reads stop at the cutoff at once, before any file is deleted (head included). */
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    int rc;
    assert_int_equal(count_in(db, old - DAY, now + HOUR, &rc), 2);
    assert_int_equal(bdb_db_retention_cutoff(db, "t"), w0 + HOUR);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.blocks, 4);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.retention_drops, 2);
    assert_int_equal(st.blocks, 2);
    assert_int_equal(st.compactions, 0); /* one tenant, one class: nothing rewritten */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_opts(&o);
        }
        assert_int_equal(count_in(db, old - DAY, w0, &rc), 0);
        assert_int_equal(rc, BDB_OK);
        /* the file of the window holding the cutoff is kept whole, but its sample
         * before the cutoff is no longer returned */
        bdb_samples s;
        assert_int_equal(read1(db, "t", "d", "m", w0, w0 + 2 * HOUR, &s, NULL), BDB_OK);
        assert_int_equal(s.n, 1);
        assert_true(s.v[0] == 4.0);
        bdb_samples_free(&s);
        assert_int_equal(count_in(db, now - 2 * HOUR, now, &rc), 1);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Random writes (out of order, duplicates in and across batches, several devices and
 * metrics) with flushes, compactions, clean restarts and crash restarts in between,
 * checked against a reference after every step. */
#define PSLOTS 480
#define PDEV 3
#define PMET 2

static double pref[PDEV][PMET][PSLOTS];
static unsigned char ppresent[PDEV][PMET][PSLOTS];

static void check_model(bdb_db *db, int step)
{
    static const char *dn[PDEV] = {"dev-a", "dev-b", "dev-c"};
    static const char *mn[PMET] = {"m.x", "m.y"};
    for (int d = 0; d < PDEV; d++) {
        const char *ms[PMET] = {mn[0], mn[1]};
        bdb_samples out[PMET];
        memset(out, 0, sizeof out);
        int rc = bdb_db_read(db, "prop", dn[d], ms, PMET, T0 - DAY, T0 + 2 * DAY, out, NULL);
        if (rc == BDB_ERR_NOTFOUND)
            continue;
        assert_int_equal(rc, BDB_OK);
        for (int m = 0; m < PMET; m++) {
            size_t k = 0;
            for (int i = 0; i < PSLOTS; i++) {
                if (!ppresent[d][m][i])
                    continue;
                if (k >= out[m].n)
                    fail_msg("step %d dev %d metric %d: slot %d missing", step, d, m, i);
                int64_t ts = T0 + (int64_t)i * MIN;
                if (out[m].ts[k] != ts || out[m].v[k] != pref[d][m][i])
                    fail_msg("step %d dev %d metric %d: got (%lld, %g) want (%lld, %g)", step, d, m,
                             (long long)out[m].ts[k], out[m].v[k], (long long)ts, pref[d][m][i]);
                k++;
            }
            if (k != out[m].n)
                fail_msg("step %d dev %d metric %d: %zu extra samples", step, d, m, out[m].n - k);
            bdb_samples_free(&out[m]);
        }
        /* partition by partition gives the same */
        bdb_samples byp;
        read_by_partitions(db, "prop", dn[d], mn[0], T0 - DAY, T0 + 2 * DAY, &byp);
        size_t want = 0;
        for (int i = 0; i < PSLOTS; i++)
            want += ppresent[d][0][i];
        assert_int_equal(byp.n, want);
        bdb_samples_free(&byp);
    }
}

static void test_property_random_history(void **state)
{
    (void)state;
    static const char *dn[PDEV] = {"dev-a", "dev-b", "dev-c"};
    static const char *mn[PMET] = {"m.x", "m.y"};
    memset(ppresent, 0, sizeof ppresent);
    rng_state = 0x1234abcd5678ULL;
    bdb_db_opts o = base_opts(datadir);
    o.chunk_max_samples = 8;
    char cur[160];
    snprintf(cur, sizeof cur, "%s", datadir);
    o.data_dir = cur;
    bdb_db *db = open_opts(&o);
    double val = 0;
    int crashes = 0;
    for (int step = 0; step < 120; step++) {
        bdb_batch *b = bdb_batch_new();
        int nrep = 1 + (int)(rng() % 40);
        /* mostly a moving front with a tail of late and rewritten samples */
        int front = (step * 4) % PSLOTS;
        for (int r = 0; r < nrep; r++) {
            int d = (int)(rng() % PDEV);
            int i = rng() % 3 ? (front + (int)(rng() % 30)) % PSLOTS : (int)(rng() % PSLOTS);
            bdb_batch_begin(b, dn[d], strlen(dn[d]), T0 + (int64_t)i * MIN, (size_t)r);
            int mask = 1 + (int)(rng() % 3);
            for (int m = 0; m < PMET; m++) {
                if (!(mask & (1 << m)))
                    continue;
                val += 1;
                bdb_batch_metric(b, mn[m], strlen(mn[m]), val);
                pref[d][m][i] = val;
                ppresent[d][m][i] = 1;
            }
            bdb_batch_end(b);
        }
        assert_int_equal(bdb_db_write(db, "prop", b), BDB_OK);
        bdb_batch_free(b);
        unsigned what = (unsigned)(rng() % 16);
        if (what < 3) {
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        } else if (what < 5) {
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            assert_int_equal(bdb_db_maintain(db), BDB_OK);
        } else if (what == 5) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_opts(&o);
        } else if (what == 6) {
            char next[160];
            snprintf(next, sizeof next, "%s/crash%d", tmpdir, crashes++);
            eu_copy_tree(cur, next, EU_WITH_LOCK);
            assert_int_equal(bdb_db_close(db), BDB_OK);
            snprintf(cur, sizeof cur, "%s", next);
            db = open_opts(&o);
        } else if (what == 7) {
            /* pin or unpin a bucket size: a history record in the WAL */
            static const int64_t sizes[] = {0, 10 * MIN, 15 * MIN, HOUR, 6 * HOUR, DAY};
            int d = (int)(rng() % PDEV);
            assert_int_equal(bdb_db_set_device_bucket(db, "prop", dn[d], sizes[rng() % 6]), BDB_OK);
        }
        check_model(db, step);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A batch in which the rate learner changes a device's bucket size and that goes on
 * past the change: after a crash, WAL replay must place the samples exactly as the
 * live write did, so that a later rewrite of one of them still wins. */
static void test_bucket_change_inside_batch_then_crash(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    bdb_batch *b = bdb_batch_new();
    size_t ln = 0;
    /* 20 minutes at 1/30 s: MEDIUM (1 h, no change) */
    for (int i = 0; i < 40; i++) {
        bdb_batch_begin(b, "d", 1, T0 + i * 30000, ++ln);
        bdb_batch_metric(b, "m", 1, i);
        bdb_batch_end(b);
    }
    /* then one report every 2 hours: two LOW windows switch to 6 h from T0 + 6h */
    int64_t sparse[] = {T0 + 2 * HOUR, T0 + 4 * HOUR, T0 + 7 * HOUR + 20 * MIN};
    for (int i = 0; i < 3; i++) {
        bdb_batch_begin(b, "d", 1, sparse[i], ++ln);
        bdb_batch_metric(b, "m", 1, 100.0 + i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
    bdb_batch_free(b);
    struct devinfo i = get_info(db, "t", "d");
    assert_int_equal(i.bucket_ms, 6 * HOUR);
    char crash[128];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    eu_copy_tree(datadir, crash, EU_WITH_LOCK);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    db = open_dir(crash);
    assert_int_equal(write1(db, "t", "d", T0 + 7 * HOUR + 20 * MIN, "m", 999.0), BDB_OK);
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1)
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        if (pass == 2) {
            assert_int_equal(bdb_db_close(db), BDB_OK);
            db = open_dir(crash);
        }
        bdb_samples s;
        assert_int_equal(read1(db, "t", "d", "m", T0 + 7 * HOUR, T0 + 8 * HOUR, &s, NULL), BDB_OK);
        assert_int_equal(s.n, 1);
        if (s.v[0] != 999.0)
            fail_msg("pass %d: the rewrite lost to the replayed older value %g", pass, s.v[0]);
        bdb_samples_free(&s);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The catalog is written compressed (version 2); a damaged catalog stops the open
 * with BDB_ERR_CORRUPT instead of starting with a wrong device registry, and a
 * report over the metric limit is refused whole. */
static void test_catalog_compressed_and_checked(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    for (int d = 0; d < 200; d++) {
        char dev[32];
        snprintf(dev, sizeof dev, "sensor-%04d", d);
        assert_int_equal(write1(db, "acme", dev, T0 + d, "temperature", d), BDB_OK);
    }
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "wide", 4, T0, 1);
    for (int i = 0; i <= BDB_MAX_REPORT_METRICS; i++) {
        char m[16];
        snprintf(m, sizeof m, "m%d", i);
        bdb_batch_metric(b, m, strlen(m), i);
    }
    bdb_batch_end(b);
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_ERR_LIMIT);
    bdb_batch_free(b);
    /* a time outside the stored range: refused whole, the good report with it too */
    b = bdb_batch_new();
    bdb_batch_begin(b, "good", 4, T0, 1);
    bdb_batch_metric(b, "v", 1, 1);
    bdb_batch_end(b);
    bdb_batch_begin(b, "early", 5, BDB_TS_MIN_MS - 1, 2);
    bdb_batch_metric(b, "v", 1, 1);
    bdb_batch_end(b);
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_ERR_INVALID);
    bdb_batch_free(b);
    bdb_device_snapshot snap;
    assert_int_equal(bdb_db_device_snapshot(db, "acme", "good", &snap), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    char cat[256];
    snprintf(cat, sizeof cat, "%s/catalog", datadir);
    FILE *f = fopen(cat, "rb");
    assert_non_null(f);
    char magic[8];
    assert_int_equal(fread(magic, 1, 8, f), 8);
    fclose(f);
    assert_memory_equal(magic, "BDBCAT02", 8);
    /* 200 devices x ~40 bytes of names compress well below their raw size */
    assert_true(file_size(cat) < 200 * 40);

    db = open_dir(datadir);
    assert_int_equal(get_info(db, "acme", "sensor-0199").called, 1);
    struct devinfo none;
    memset(&none, 0, sizeof none);
    assert_int_equal(bdb_db_get_device(db, "acme", "wide", info_cb, &none), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    flip_bytes(cat, file_size(cat) / 2, 1);
    bdb_db_opts o = base_opts(datadir);
    bdb_db *bad = NULL;
    assert_int_equal(bdb_db_open(&o, &bad), BDB_ERR_CORRUPT);
    assert_null(bad);
}

/* The data directory's length limit (common/path.h): a directory of exactly
 * BDB_DATA_DIR_MAX bytes holds a full cycle (write, flush, maintenance, reopen with
 * WAL replay), so every name the engine builds under it fits; one byte more is refused
 * before anything is created. */
static void test_data_dir_length_limit(void **state)
{
    (void)state;
    char dir[BDB_DATA_DIR_MAX + 2];
    size_t n = (size_t)snprintf(dir, sizeof dir, "%s", tmpdir);
    while (n + 1 + 200 < BDB_DATA_DIR_MAX) { /* parents of 200-byte names, made here */
        dir[n++] = '/';
        memset(dir + n, 'p', 200);
        n += 200;
        dir[n] = 0;
        assert_int_equal(mkdir(dir, 0755), 0);
    }
    dir[n++] = '/';
    memset(dir + n, 'd', BDB_DATA_DIR_MAX + 1 - n);
    dir[BDB_DATA_DIR_MAX + 1] = 0;

    bdb_db_opts o = base_opts(dir); /* one byte over */
    bdb_db *db = NULL;
    assert_int_equal(bdb_db_open(&o, &db), BDB_ERR_INVALID);
    assert_null(db);
    assert_int_equal(access(dir, F_OK), -1);

    dir[BDB_DATA_DIR_MAX] = 0; /* at the limit */
    assert_int_equal(strlen(dir), BDB_DATA_DIR_MAX);
    db = open_dir(dir);
    write_run(db, "acme", "d1", "temp", T0, 60000, 30, 1.0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK);
    write_run(db, "acme", "d1", "temp", T0 + 30 * 60000, 60000, 30, 31.0);
    assert_int_equal(bdb_db_close(db), BDB_OK); /* the second run only in the WAL */
    db = open_dir(dir);
    expect_run(db, "acme", "d1", "temp", T0, 60000, 60, 1.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Removing the flushed WAL segments fails (EIO on unlink) after the flush has
 * committed: the flush still succeeds, the engine stays writable, the next flush
 * removes the leftovers, and neither a reopen nor a crash image taken while they were
 * there replays them over the blocks (every sample once). */
static int wal_unlink_armed, wal_unlinks_failed;

static int unlink_fails_in_wal(bdb_vfs *v, const char *path)
{
    if (wal_unlink_armed && strstr(path, "/wal/")) {
        wal_unlinks_failed++;
        errno = EIO;
        return BDB_ERR_IO;
    }
    return bdb_vfs_posix()->ops->unlink(v, path);
}

static void test_wal_trim_failure_is_not_a_failed_flush(void **state)
{
    (void)state;
    static struct bdb_vfs_ops ops;
    static bdb_vfs vfs = {&ops};
    ops = *bdb_vfs_posix()->ops;
    ops.unlink = unlink_fails_in_wal;
    bdb_db_opts o = base_opts(datadir);
    o.vfs = &vfs;
    bdb_db *db = open_opts(&o);
    char wal[256], crash[256];
    snprintf(wal, sizeof wal, "%s/wal", datadir);
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);

    write_run(db, "acme", "d1", "temp", T0, 60000, 30, 1.0);
    wal_unlink_armed = 1;
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    wal_unlink_armed = 0;
    assert_true(wal_unlinks_failed > 0);
    int left = eu_count_entries(wal);
    assert_true(left >= 2); /* the flushed segment beside the current one */
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_false(st.readonly);

    write_run(db, "acme", "d1", "temp", T0 + 30 * 60000, 60000, 30, 31.0);
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK); /* kill -9 with the leftover there */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_true(eu_count_entries(wal) < left);
    expect_run(db, "acme", "d1", "temp", T0, 60000, 60, 1.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    db = open_dir(datadir);
    expect_run(db, "acme", "d1", "temp", T0, 60000, 60, 1.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(crash);
    expect_run(db, "acme", "d1", "temp", T0, 60000, 60, 1.0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A WAL bucket-history record (CRC valid) that rewrites a device's sizes under samples
 * already in the head: a sample at 10:55 went into the 1 h partition [10:00, 11:00),
 * then the record made the device 15 min, so a sample at 10:20 went into
 * [10:15, 10:30). The two ranges overlap; the flush emitted them by range start, the
 * earlier range holding the later sample, the block writer refused the order and
 * every flush failed (found by fuzz_dbfiles). Now the overlapping ranges are merged:
 * the flush succeeds and both samples read back, before and after a reopen. */
/* Appends a bucket-history WAL record of acme/d1: n (from, size) pairs. */
static void put_history(bdb_wal *w, int n, const int64_t *pairs)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, 2); /* type, tenant, device, pinned, n, (from, size)* */
    bdb_buf_put_str(&b, "acme", 4);
    bdb_buf_put_str(&b, "d1", 2);
    bdb_buf_put_varint(&b, 0);
    bdb_buf_put_uvarint(&b, (uint64_t)n);
    for (int i = 0; i < 2 * n; i++)
        bdb_buf_put_varint(&b, pairs[i]);
    assert_int_equal(bdb_wal_append(w, b.data, b.len, NULL), BDB_OK);
    bdb_buf_free(&b);
}

static void test_history_record_overlapping_ranges_flush(void **state)
{
    (void)state;
    char crash[256], waldir[300];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    snprintf(waldir, sizeof waldir, "%s/wal", crash);
    const int64_t late = T0 + 10 * HOUR + 55 * MIN, early = T0 + 10 * HOUR + 20 * MIN;
    bdb_db *db = open_dir(datadir);
    assert_int_equal(write1(db, "acme", "d1", late, "m", 1.0), BDB_OK);
    eu_copy_tree(datadir, crash, EU_SKIP_LOCK); /* the WAL holds the sample */
    assert_int_equal(bdb_db_close(db), BDB_OK);

    bdb_wal_opts wo = {.dir = waldir};
    bdb_wal *w = NULL;
    assert_int_equal(bdb_wal_open(&wo, &w), BDB_OK);
    /* Histories bdb_bucket_change never writes are undecodable (skipped, counted):
     * a size that is no bucket, changes out of time order. */
    put_history(w, 1, (int64_t[]){INT64_MIN, 7 * MIN});
    put_history(w, 3, (int64_t[]){INT64_MIN, HOUR, T0, 15 * MIN, T0, HOUR});
    put_history(w, 1, (int64_t[]){INT64_MIN, 15 * MIN}); /* valid */
    bdb_wal_close(w);

    db = open_dir(crash);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.wal_corruptions, 2);
    assert_int_equal(write1(db, "acme", "d1", early, "m", 2.0), BDB_OK);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int round = 0; round < 2; round++) {
        bdb_samples s;
        assert_int_equal(read1(db, "acme", "d1", "m", T0, T0 + DAY, &s, NULL), BDB_OK);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.ts[0], early);
        assert_true(s.v[0] == 2.0);
        assert_int_equal(s.ts[1], late);
        assert_true(s.v[1] == 1.0);
        bdb_samples_free(&s);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = round == 0 ? open_dir(crash) : NULL;
    }
}

/* A catalog image as cat_encode writes it (uncompressed BDBCAT01, still read) of image
 * version ver (2 to 4) with one device whose bucket history is the n (from, size)
 * pairs; version 3 adds the rate learner with class cls, version 4 a horizon. */
static void put_catalog_v(const char *dir, uint32_t ver, uint8_t cls, int n, const int64_t *pairs)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, "BDBCAT01", 8);
    bdb_buf_put_u32le(&b, ver); /* version */
    bdb_buf_put_u64le(&b, 0);   /* WAL upto */
    bdb_buf_put_u64le(&b, 1);   /* next block sequence */
    bdb_buf_put_uvarint(&b, 1); /* devices */
    bdb_buf_put_str(&b, "acme", 4);
    bdb_buf_put_str(&b, "d1", 2);
    bdb_buf_put_varint(&b, T0); /* first, last, samples, no state, no tags, not pinned */
    bdb_buf_put_varint(&b, T0);
    bdb_buf_put_uvarint(&b, 1);
    bdb_buf_putc(&b, 0);
    bdb_buf_put_uvarint(&b, 0);
    bdb_buf_put_varint(&b, 0);
    bdb_buf_put_uvarint(&b, (uint64_t)n);
    for (int i = 0; i < 2 * n; i++)
        bdb_buf_put_varint(&b, pairs[i]);
    bdb_buf_put_uvarint(&b, 1);
    bdb_buf_put_str(&b, "m", 1);
    bdb_buf_put_varint(&b, 0); /* hot: no promotion cap, no sub-buckets, no counts */
    bdb_buf_put_uvarint(&b, 0);
    bdb_buf_put_uvarint(&b, 0);
    if (ver >= 3) { /* learner: class, no pending change, window start, count */
        bdb_buf_putc(&b, cls);
        bdb_buf_putc(&b, 0);
        bdb_buf_putc(&b, 0);
        bdb_buf_put_varint(&b, T0);
        bdb_buf_put_uvarint(&b, 1);
    }
    if (ver >= 4) { /* one inherited horizon (db_cat_sink.h) */
        bdb_buf_put_uvarint(&b, 1);
        bdb_buf_put_str(&b, "acme", 4);
        bdb_buf_put_str(&b, "d1", 2);
        bdb_buf_put_varint(&b, T0);
    }
    bdb_buf_put_u32le(&b, (uint32_t)crc32(0, b.data, (uInt)b.len));
    char path[400];
    snprintf(path, sizeof path, "%s/catalog", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
    assert_int_equal(fclose(f), 0);
    bdb_buf_free(&b);
}

static void put_catalog(const char *dir, int n, const int64_t *pairs)
{
    put_catalog_v(dir, 2, 0, n, pairs);
}

static int class_cb(void *ctx, const bdb_device_info *d)
{
    *(int *)ctx = d->freq_class;
    return 0;
}

static int device_class(bdb_db *db, const char *tenant, const char *dev)
{
    int cls = -1;
    assert_int_equal(bdb_db_get_device(db, tenant, dev, class_cb, &cls), BDB_OK);
    return cls;
}

/* A device's learned reporting class survives a restart (issue 18: it came back
 * "unknown"); the catalog keeps the rate learner since image version 3. */
static void test_class_survives_restart(void **state)
{
    (void)state;
    bdb_db *db = open_dir(datadir);
    /* one report every 5 minutes: below 1/60 per second, class low */
    for (int i = 0; i < 36; i++)
        assert_int_equal(write1(db, "acme", "slow", T0 + i * 5 * MIN, "m", i), BDB_OK);
    assert_int_equal(device_class(db, "acme", "slow"), BDB_FREQ_LOW);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(datadir);
    assert_int_equal(device_class(db, "acme", "slow"), BDB_FREQ_LOW);
    /* and once more, with nothing written in between */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_dir(datadir);
    assert_int_equal(device_class(db, "acme", "slow"), BDB_FREQ_LOW);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Image versions 2 (no learner: class unknown), 3 and 4 (inherited horizons) load; a
 * version 3 learner with a class outside the enum is a malformed catalog, version 5 an
 * unknown one. */
static void test_catalog_old_version_loads(void **state)
{
    (void)state;
    const int64_t pairs[2] = {INT64_MIN, HOUR};
    const struct {
        uint32_t ver;
        uint8_t cls;
        int rc, want;
    } cases[] = {
        {2, 0, BDB_OK, BDB_FREQ_UNKNOWN},
        {3, BDB_FREQ_LOW, BDB_OK, BDB_FREQ_LOW},
        {3, BDB_FREQ_HIGH, BDB_OK, BDB_FREQ_HIGH},
        {3, BDB_FREQ_HIGH + 1, BDB_ERR_CORRUPT, 0},
        {4, BDB_FREQ_MEDIUM, BDB_OK, BDB_FREQ_MEDIUM},
        {5, 0, BDB_ERR_CORRUPT, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/catv%zu", tmpdir, i);
        assert_int_equal(mkdir(dir, 0755), 0);
        put_catalog_v(dir, cases[i].ver, cases[i].cls, 1, pairs);
        bdb_db_opts o = base_opts(dir);
        bdb_db *db = NULL;
        int rc = bdb_db_open(&o, &db);
        if (rc != cases[i].rc)
            fail_msg("case %zu: open %s, want %s", i, bdb_strerror(rc), bdb_strerror(cases[i].rc));
        if (rc != BDB_OK)
            continue;
        assert_int_equal(device_class(db, "acme", "d1"), cases[i].want);
        /* written back as the current version, and read again */
        assert_int_equal(write1(db, "acme", "d1", T0 + MIN, "m", 1), BDB_OK);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_dir(dir);
        assert_int_equal(device_class(db, "acme", "d1"), cases[i].want);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

static void test_catalog_history_validated(void **state)
{
    (void)state;
    /* The catalog takes the histories bdb_bucket_change makes (as the WAL decoder
     * does): a 1 ms or 7 min size, or changes out of time order, are refused whole. */
    const struct {
        int n;
        int64_t pairs[6];
        int rc;
    } cases[] = {
        {1, {INT64_MIN, HOUR}, BDB_OK},
        {2, {INT64_MIN, HOUR, T0 + DAY, 15 * MIN}, BDB_OK},
        {1, {INT64_MIN, 1}, BDB_ERR_CORRUPT},
        {1, {INT64_MIN, 7 * MIN}, BDB_ERR_CORRUPT},
        {1, {INT64_MIN, 0}, BDB_ERR_CORRUPT},
        {2, {INT64_MIN, HOUR, T0, -HOUR}, BDB_ERR_CORRUPT},
        {3, {INT64_MIN, HOUR, T0, 15 * MIN, T0, HOUR}, BDB_ERR_CORRUPT},
        {3, {INT64_MIN, HOUR, T0, 15 * MIN, T0 - HOUR, HOUR}, BDB_ERR_CORRUPT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[300];
        snprintf(dir, sizeof dir, "%s/cat%zu", tmpdir, i);
        assert_int_equal(mkdir(dir, 0755), 0);
        put_catalog(dir, cases[i].n, cases[i].pairs);
        bdb_db_opts o = base_opts(dir);
        bdb_db *db = NULL;
        int rc = bdb_db_open(&o, &db);
        if (rc != cases[i].rc)
            fail_msg("case %zu: open %s, want %s", i, bdb_strerror(rc), bdb_strerror(cases[i].rc));
        if (rc != BDB_OK)
            continue;
        bdb_device_snapshot snap;
        assert_int_equal(bdb_db_device_snapshot(db, "acme", "d1", &snap), BDB_OK);
        assert_int_equal(snap.hist.n, cases[i].n);
        assert_int_equal(bdb_bucket_size_at(&snap.hist, T0), HOUR);
        assert_int_equal(snap.hist.e[snap.hist.n - 1].size_ms, cases[i].pairs[2 * cases[i].n - 1]);
        bdb_device_snapshot_free(&snap);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_read_basic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_catalog_compressed_and_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_class_survives_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_catalog_old_version_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list_devices_and_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ooo_and_duplicates, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metric_name_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ooo_merged_into_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_max_samples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tags_and_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_set_device_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_failure_readonly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nospace_on_wal_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_block_quarantined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_chunk_data_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_wal_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retention_drops_whole_windows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_property_random_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bucket_change_inside_batch_then_crash, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_data_dir_length_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_trim_failure_is_not_a_failed_flush, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_history_record_overlapping_ranges_flush, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_catalog_history_validated, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
