/* db_fleet: the pre-computed fleet aggregates of the engine (background = 0, every
 * flush explicit), against exact computation over everything written.
 *
 * Covered: fleet windows (1h, 1d) equal the data from the head alone, after flushes in
 * which the same devices reach the same hours again, after compaction (9 flushes into
 * one file window) and after reopen; a flush that did not commit (fleet files past the
 * catalog's wal_upto, what a crash between the fleet write and the catalog save leaves)
 * is discarded at open and its samples come back once from the WAL; a flush that
 * published its fleet files and then failed (the tier write) is retried without
 * counting them twice; a damaged fleet file is quarantined. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/fleet.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "model/bucket.h"
#include "storage/embedded/core/db.h"
#include "query/fleetq.h"
#include "storage/embedded/fleet/db_fleet.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define NDEV 50
#define MAXS 20000

static char tmpdir[64], datadir[128];
static uint64_t rng_state;

struct samp {
    int dev;
    int64_t ts;
    double v;
};
static struct samp written[MAXS];
static size_t nwritten;
static int via_tables; /* read through bdb_query_fleet_tables (late-data aware) */

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return T0 + 3 * DAY;
}

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "fleet", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR);
    rng_state = 88172645463325252ull;
    nwritten = 0;
    via_tables = 0;
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
    eu_opts(&o, dir, clock_fn, NULL);
    return eu_open(&o);
}

/* n reports per device at fresh random times of the first two days (one per
 * (device, second) at most, so no rewrites). */
static void write_round(bdb_db *db, int n)
{
    bdb_batch *b = bdb_batch_new();
    char name[32];
    for (int d = 0; d < NDEV; d++)
        for (int k = 0; k < n; k++) {
            int64_t ts;
            int dup;
            do {
                ts = T0 + (int64_t)(rng() % (2 * DAY / 1000)) * 1000;
                dup = 0;
                for (size_t i = 0; i < nwritten && !dup; i++)
                    dup = written[i].dev == d && written[i].ts == ts;
            } while (dup);
            double v = (double)(rng() % 100000) / 100 - 300;
            assert_true(nwritten < MAXS);
            written[nwritten++] = (struct samp){d, ts, v};
            snprintf(name, sizeof name, "dev-%03d", d);
            bdb_batch_begin(b, name, strlen(name), ts, 0);
            bdb_batch_metric(b, "temp", 4, v);
            assert_int_equal(bdb_batch_end(b), 1);
        }
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_OK);
    bdb_batch_free(b);
}

static void check_exact(bdb_db *db)
{
    for (int res = BDB_RES_1H; res <= BDB_RES_1D; res++) {
        int64_t w = bdb_res_width((enum bdb_res)res);
        bdb_fleet f;
        bdb_fleet_init(&f, w);
        if (via_tables)
            assert_int_equal(bdb_query_fleet_tables(db, NULL, "t1", "temp", (enum bdb_res)res, T0,
                                                    T0 + 3 * DAY, &f, NULL),
                             BDB_OK);
        else
            assert_int_equal(
                bdb_db_fleet_read(db, "t1", "temp", (enum bdb_res)res, T0, T0 + 3 * DAY, &f),
                BDB_OK);
        size_t seen_windows = 0;
        for (int64_t s = T0; s < T0 + 3 * DAY; s += w) {
            long double sum = 0;
            uint64_t n = 0, devs = 0;
            double mn = INFINITY, mx = -INFINITY;
            char seen[NDEV] = {0};
            for (size_t i = 0; i < nwritten; i++)
                if (written[i].ts >= s && written[i].ts < s + w) {
                    sum += written[i].v;
                    n++;
                    mn = fmin(mn, written[i].v);
                    mx = fmax(mx, written[i].v);
                    devs += !seen[written[i].dev]++;
                }
            const bdb_fleet_win *fw = bdb_fleet_find(&f, s);
            if (!n) {
                assert_null(fw);
                continue;
            }
            assert_non_null(fw);
            seen_windows++;
            bdb_fleet_row r;
            bdb_fleet_row_of(&f, fw, &r);
            assert_int_equal(r.devices, devs);
            assert_int_equal(r.readings, n);
            assert_true(r.min == mn && r.max == mx);
            double mean = (double)(sum / n);
            assert_true(fabs(r.avg - mean) <= 1e-12 * fabs(mean) + 1e-12);
        }
        assert_int_equal(f.n, seen_windows);
        bdb_fleet_free(&f);
        /* other tenants and metrics see nothing */
        bdb_fleet_init(&f, w);
        assert_int_equal(
            bdb_db_fleet_read(db, "t2", "temp", (enum bdb_res)res, T0, T0 + 3 * DAY, &f), BDB_OK);
        assert_int_equal(f.n, 0);
        bdb_fleet_free(&f);
    }
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strstr(de->d_name, ".fleet") != NULL;
    closedir(d);
    return n;
}

static void copy_file(const char *a, const char *b)
{
    int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t k;
    while ((k = read(in, buf, sizeof buf)) > 0)
        assert_int_equal(write(out, buf, (size_t)k), k);
    close(in);
    close(out);
}

static void copy_tree(const char *from, const char *to, int only_new)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "LOCK"))
            continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat sb;
        assert_int_equal(stat(a, &sb), 0);
        if (S_ISDIR(sb.st_mode))
            copy_tree(a, b, only_new);
        else if (!only_new || access(b, F_OK) != 0)
            copy_file(a, b);
    }
    closedir(d);
}

static void test_equal_exact(void **st)
{
    (void)st;
    bdb_db *db = open_db(datadir);
    write_round(db, 20);
    check_exact(db); /* head only */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    write_round(db, 10); /* the same devices into the same hours */
    check_exact(db);     /* files + head */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    /* 9 more flushes: the windows reach FLEET_COMPACT_AT committed files and merge */
    for (int i = 0; i < 9; i++) {
        write_round(db, 2);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_true(fs.compacted >= 2);
    assert_true(fs.files[0] <= 8 && fs.files[1] <= 8);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    check_exact(db);
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.discarded, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_uncommitted_flush_discarded(void **st)
{
    (void)st;
    bdb_db *db = open_db(datadir);
    write_round(db, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    write_round(db, 5);
    char crash[256], fl[300], cfl[300];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    copy_tree(datadir, crash, 0); /* catalog at the first flush; the WAL has the rest */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    /* the live flush's new fleet files next to the old catalog: a crash after the
     * fleet write and before the catalog save */
    snprintf(fl, sizeof fl, "%s/fleet", datadir);
    snprintf(cfl, sizeof cfl, "%s/fleet", crash);
    copy_tree(fl, cfl, 1);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    check_exact(db); /* from the WAL, once */
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.discarded, 2); /* one file per resolution */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(crash);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_failed_flush_retried(void **st)
{
    (void)st;
    bdb_db *db = open_db(datadir);
    write_round(db, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    write_round(db, 5);
    /* the tier write fails after the fleet files of this flush are published: its 1h
     * directory is replaced by a file */
    char tdir[256];
    snprintf(tdir, sizeof tdir, "%s/tiers/1h", datadir);
    tu_rm_rf(tdir);
    int fd = open(tdir, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_not_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db); /* published fleet files, frozen chunks skipped */
    write_round(db, 3);
    check_exact(db);
    unlink(tdir);
    assert_int_equal(mkdir(tdir, 0755), 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK); /* the retry withdraws the first attempt */
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.withdrawn, 2);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_damaged_file_quarantined(void **st)
{
    (void)st;
    bdb_db *db = open_db(datadir);
    write_round(db, 5);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char dir[256], path[600];
    snprintf(dir, sizeof dir, "%s/fleet/1h", datadir);
    assert_int_equal(count_files(dir), 1);
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".fleet"))
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(d);
    int fd = open(path, O_RDWR);
    char c;
    assert_int_equal(pread(fd, &c, 1, 40), 1);
    c ^= 0x10;
    assert_int_equal(pwrite(fd, &c, 1, 40), 1);
    close(fd);
    db = open_db(datadir);
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.quarantined, 1);
    assert_int_equal(count_files(dir), 0);
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR);
    assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f), BDB_OK);
    assert_int_equal(f.n, 0); /* never read wrong figures */
    bdb_fleet_free(&f);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Rewrites of readings an earlier flush already aggregated: the late path recomputes
 * the devices' windows and tells the fleet, whose tables then answer those windows
 * from the device tiers: equal to raw (newest value wins), also after reopen. Without
 * the hook the tables would count the rewritten readings twice. */
static void test_late_rewrites(void **st)
{
    (void)st;
    via_tables = 1;
    bdb_db *db = open_db(datadir);
    bdb_db_fleet_attach(db);
    write_round(db, 10);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    char name[32];
    for (size_t i = 0; i < nwritten; i += 37) {
        written[i].v += 1000; /* the new maximum of its hour */
        snprintf(name, sizeof name, "dev-%03d", written[i].dev);
        bdb_batch_begin(b, name, strlen(name), written[i].ts, 0);
        bdb_batch_metric(b, "temp", 4, written[i].v);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_OK);
    bdb_batch_free(b);
    check_exact(db); /* head: the newest write wins in the device tiers' reads */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR);
    size_t rec = 0;
    assert_int_equal(
        bdb_query_fleet_tables(db, NULL, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f, &rec),
        BDB_OK);
    assert_true(rec > 0);
    bdb_fleet_free(&f);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    bdb_db_fleet_attach(db);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A rewrite of a flushed time less than late_threshold behind its device's newest
 * reading, in a window no late data had touched before (in-order writes only, so the
 * tables hold no recomputed window): the fleet file counts the old reading and the head
 * the new one. The tables must answer that window from the device tiers while the
 * rewrite is in the head (one window recomputed, not the clean ones), and after the
 * flush that recomputes it, and after reopen. */
static void test_head_rewrite_near_newest(void **st)
{
    (void)st;
    via_tables = 1;
    bdb_db *db = open_db(datadir);
    bdb_db_fleet_attach(db);
    bdb_batch *b = bdb_batch_new();
    char name[32];
    for (int d = 0; d < NDEV; d++) /* every device in time order: no mark */
        for (int k = 0; k < 40; k++) {
            int64_t ts = T0 + DAY + (int64_t)k * 5 * BDB_MS_MIN + d * 1000;
            double v = (double)(rng() % 100000) / 100 - 300;
            written[nwritten++] = (struct samp){d, ts, v};
            snprintf(name, sizeof name, "dev-%03d", d);
            bdb_batch_begin(b, name, strlen(name), ts, 0);
            bdb_batch_metric(b, "temp", 4, v);
            assert_int_equal(bdb_batch_end(b), 1);
        }
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR);
    size_t rec = 1;
    assert_int_equal(
        bdb_query_fleet_tables(db, NULL, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f, &rec),
        BDB_OK);
    assert_int_equal(rec, 0); /* nothing late so far */
    /* device 7's reading 20 minutes before its newest gets a new value */
    size_t i = 7 * 40 + 35;
    assert_true(written[i].dev == 7 && written[i - 35 + 39].ts - written[i].ts < HOUR);
    written[i].v += 0.5;
    b = bdb_batch_new();
    bdb_batch_begin(b, "dev-007", 7, written[i].ts, 0);
    bdb_batch_metric(b, "temp", 4, written[i].v);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_OK);
    bdb_batch_free(b);
    check_exact(db); /* from the head: one reading, the new value */
    assert_int_equal(
        bdb_query_fleet_tables(db, NULL, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f, &rec),
        BDB_OK);
    assert_int_equal(rec, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    check_exact(db);
    assert_int_equal(
        bdb_query_fleet_tables(db, NULL, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f, &rec),
        BDB_OK);
    assert_int_equal(rec, 1);
    bdb_fleet_free(&f);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db(datadir);
    bdb_db_fleet_attach(db);
    check_exact(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_equal_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_flush_discarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_flush_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_file_quarantined, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_rewrites, setup, teardown),
        cmocka_unit_test_setup_teardown(test_head_rewrite_near_newest, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
