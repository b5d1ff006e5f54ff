/* engutil: the set-up the embedded engine's unit tests share: scratch directories
 * and their cleanup, opening a db with a fixed or test-driven clock, one-sample and
 * run writes, crash images (directory copies), a POSIX VFS without fsync, tier windows
 * checked against raw, allocation-sweep bookkeeping, stderr capture, and the file and
 * byte helpers of the tests that hand-build or damage WAL segments and block files.
 * Header-only (static inline) like testutil.h and sweeputil.h, since each test is its
 * own binary; include it after cmocka.h (it asserts). Each test keeps its own
 * particular options and data; only what several tests wrote alike is here. */
#ifndef BDB_ENGUTIL_H
#define BDB_ENGUTIL_H

#include "testutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- directories */

/* Where eu_scratch makes its directory: tmpfs when there is one, or always /tmp. The
 * engine tests use tmpfs: what a disk does on a crash is the fault VFS's job here, and
 * on a loaded disk the thousands of fsyncs of tier_test took 90 s instead of 2. */
enum eu_where { EU_TMP, EU_TMPFS };

/* The body of a cmocka teardown: no allocation failure left armed (a failed assertion
 * can leave a sweep armed), and the scratch tree tmp gone. */
static inline int eu_cleanup(const char *tmp)
{
    bdb_alloc_fail_disarm();
    tu_rm_rf(tmp);
    return 0;
}

/* Makes a fresh directory <parent>/bdb-<tag>-XXXXXX into tmp (ntmp bytes); when data is
 * not NULL, data := tmp/data (the engine's directory, created by the open). */
static inline void eu_scratch(char *tmp, size_t ntmp, const char *tag, enum eu_where where,
                              char *data, size_t ndata)
{
    const char *parent = where == EU_TMPFS && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    int n = snprintf(tmp, ntmp, "%s/bdb-%s-XXXXXX", parent, tag);
    assert_true(n > 0 && (size_t)n < ntmp);
    assert_non_null(mkdtemp(tmp));
    if (data) {
        n = snprintf(data, ndata, "%s/data", tmp);
        assert_true(n > 0 && (size_t)n < ndata);
    }
}

/* A flat temporary directory named after prefix ("/tmp/bdb-block-test"), malloc'd;
 * eu_remove_flat_dir removes it, its files and the name. */
static inline char *eu_make_flat_dir(const char *prefix)
{
    char *d = malloc(strlen(prefix) + 8);
    assert_non_null(d);
    strcpy(d, prefix);
    strcat(d, "-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static inline void eu_remove_flat_dir(char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
    free(dir);
}

/* Entries of dir other than . and .. */
static inline int eu_count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Copies the file a to b (made or truncated). */
static inline void eu_copy_file(const char *a, const char *b)
{
    int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    close(in);
    close(out);
}

/* Copies a directory tree, asserting every step (crashutil.h's cu_copy_tree reports
 * instead). Taken while a db is open it is what kill -9 leaves, since the WAL has
 * every acknowledged write. EU_SKIP_LOCK leaves the LOCK file out; EU_WITH_LOCK
 * copies it too, as a crash leaves it. */
enum eu_lock { EU_WITH_LOCK, EU_SKIP_LOCK };

static inline void eu_copy_tree(const char *from, const char *to, enum eu_lock lock)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (lock == EU_SKIP_LOCK && !strcmp(de->d_name, "LOCK"))
            continue;
        char a[1024], b[1024];
        int na = snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        int nb = snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        assert_true(na > 0 && (size_t)na < sizeof a && nb > 0 && (size_t)nb < sizeof b);
        struct stat st;
        assert_int_equal(stat(a, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            eu_copy_tree(a, b, lock);
            continue;
        }
        eu_copy_file(a, b);
    }
    closedir(d);
}

/* ---------------------------------------------------------------- whole files */

/* The whole file, malloc'd with one spare byte; *len its size. */
static inline uint8_t *eu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static inline void eu_write_file(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

/* The size of the file at path, which must exist. */
static inline uint64_t eu_file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

/* The path of WAL segment num in waldir (the WAL's file naming, 20 digits); the
 * buffer is reused by the next call. */
static inline const char *eu_wal_seg(const char *waldir, uint64_t num)
{
    static char p[256];
    int n = snprintf(p, sizeof p, "%s/%020llu", waldir, (unsigned long long)num);
    assert_true(n > 0 && (size_t)n < sizeof p);
    return p;
}

/* Little-endian fields, as every engine file format stores them. */
static inline uint64_t eu_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static inline void eu_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void eu_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* An unsigned LEB128 varint at *p, which it passes. */
static inline uint64_t eu_uvarint(const uint8_t **p)
{
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
        uint8_t c = *(*p)++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
}

/* Deterministic chunk bytes of series s, chunk j (hand-built block files). The first
 * byte never has bit 7 set: opaque bytes, not a PACKED chunk (which a block stores
 * bare, so it must be a real one). */
static inline void eu_fill(uint8_t *p, size_t n, unsigned s, unsigned j)
{
    uint32_t x = 2166136261u ^ (s * 131u + j);
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
    if (n)
        p[0] &= 0x7f;
}

/* Sends stderr (where the log writes) to the file path, made afresh, until
 * eu_stderr_restore(the returned descriptor): for tests that check a warning's text. */
static inline int eu_stderr_to(const char *path)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static inline void eu_stderr_restore(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* ---------------------------------------------------------------- the engine */

/* A test's clock: the time in the int64_t ctx points to, which the test moves. */
static inline int64_t eu_clock(void *ctx)
{
    return *(const int64_t *)ctx;
}

/* Default options with data_dir, no background threads, the clock now_fn(ctx);
 * the caller adds its own before eu_open. */
static inline void eu_opts(bdb_db_opts *o, const char *dir, int64_t (*now_fn)(void *ctx), void *ctx)
{
    bdb_db_opts_default(o);
    o->data_dir = dir;
    o->background = 0;
    o->clock = (bdb_clock){now_fn, ctx};
}

/* Opens with o, which must succeed. */
static inline bdb_db *eu_open(const bdb_db_opts *o)
{
    bdb_db *db = NULL;
    assert_int_equal(bdb_db_open(o, &db), BDB_OK);
    assert_non_null(db);
    return db;
}

/* One report of one metric: (dev, ts) metric=v into tenant, which must be accepted.
 * lineno is the report's line number, as a parser would give it. */
static inline void eu_put(bdb_db *db, const char *tenant, const char *dev, const char *metric,
                          int64_t ts, double v, size_t lineno)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, lineno);
    bdb_batch_metric(b, metric, strlen(metric), v);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
    bdb_batch_free(b);
}

/* n reports of dev from t0, step apart, metric "m" = index, line number = index,
 * written in batches of 1000. */
static inline void eu_put_run(bdb_db *db, const char *tenant, const char *dev, int64_t t0,
                              int64_t step, int n)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < n; i++) {
        bdb_batch_begin(b, dev, strlen(dev), t0 + i * step, (size_t)i);
        bdb_batch_metric(b, "m", 1, (double)i);
        assert_int_equal(bdb_batch_end(b), 1);
        if ((i + 1) % 1000 == 0 || i + 1 == n) {
            assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
            bdb_batch_reset(b);
        }
    }
    bdb_batch_free(b);
}

/* A POSIX VFS whose syncs do nothing: for tests that write or open hundreds of
 * copies, where whether a sync reaches the disk is powerloss_test.c's subject. */
static inline int eu_nosync_file(bdb_file *f)
{
    (void)f;
    return BDB_OK;
}

static inline int eu_nosync_dir(bdb_vfs *v, const char *path)
{
    (void)v;
    (void)path;
    return BDB_OK;
}

static inline bdb_vfs *eu_nosync_vfs(void)
{
    static struct bdb_vfs_ops ops;
    static bdb_vfs vfs = {&ops};
    if (!ops.open) {
        ops = *bdb_vfs_posix()->ops;
        ops.sync = eu_nosync_file;
        ops.sync_dir = eu_nosync_dir;
    }
    return &vfs;
}

/* ---------------------------------------------------------------- allocation sweeps */

/* What a sweep's figure says of leaks: the ASan build (detect_leaks=1) fails a run
 * that leaks on an error path at exit; a release build cannot tell. */
#if defined(__SANITIZE_ADDRESS__)
#define EU_LEAKS "0 leaks"
#else
#define EU_LEAKS "leaks unchecked (release build; the ASan build checks them)"
#endif

/* Allocation nth (common/alloc.h) from now on fails, until eu_disarm. */
static inline void eu_arm(uint64_t nth)
{
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, nth);
}

/* Disarms; whether an allocation failed since eu_arm. */
static inline int eu_disarm(void)
{
    int hit = bdb_alloc_fail_injected() > 0;
    bdb_alloc_fail_disarm();
    return hit;
}

/* The bookkeeping after run nth of a sweep that answered rc: 0 when no allocation
 * failed in it (the sweep has passed every allocation: stop), else 1, the run counted
 * in *n and, if rc is not BDB_OK, in *nomem. */
static inline int eu_swept(uint64_t *n, uint64_t *nomem, int hit, int rc)
{
    if (!hit)
        return 0;
    (*n)++;
    *nomem += rc != BDB_OK;
    return 1;
}

/* ---------------------------------------------------------------- tiers against raw */

/* How many tier windows of tenant/dev/metric at res, read over [from, to), differ
 * from the raw samples read over [raw_lo, raw_hi) (count, min, max, sum), plus the
 * tier windows raw has no samples for. 0: the tier is exactly what raw says. */
static inline size_t eu_tier_diff(bdb_db *db, const char *tenant, const char *dev,
                                  const char *metric, enum bdb_res res, int64_t raw_lo,
                                  int64_t raw_hi, int64_t from, int64_t to)
{
    int64_t w = bdb_res_width(res);
    const char *m[1] = {metric};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    assert_int_equal(bdb_db_read(db, tenant, dev, m, 1, raw_lo, raw_hi, &s, NULL), BDB_OK);
    bdb_rollup r;
    bdb_rollup_init(&r, w);
    assert_int_equal(bdb_db_tier_read(db, tenant, dev, m, 1, res, from, to, &r), BDB_OK);
    size_t bad = 0, nw = 0;
    for (size_t i = 0; i < s.n;) {
        int64_t ws = bdb_align_down(s.ts[i], w);
        long double sum = 0;
        double mn = s.v[i], mx = s.v[i];
        size_t j = i;
        for (; j < s.n && s.ts[j] < ws + w; j++) {
            sum += s.v[j];
            mn = fmin(mn, s.v[j]);
            mx = fmax(mx, s.v[j]);
        }
        const bdb_window *tw = bdb_rollup_find(&r, ws);
        bad += !(tw && bdb_stats_count(&tw->st) == j - i && bdb_stats_min(&tw->st) == mn &&
                 bdb_stats_max(&tw->st) == mx &&
                 fabsl(bdb_stats_sum(&tw->st) - sum) <= 1e-12L * fabsl(sum) + 1e-12L);
        nw++;
        i = j;
    }
    bad += r.n != nw;
    bdb_rollup_free(&r);
    bdb_samples_free(&s);
    return bad;
}

#endif
