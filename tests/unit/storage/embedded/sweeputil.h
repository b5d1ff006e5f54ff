/* sweeputil: what the sweep tests of the embedded engine share (powerloss_test.c,
 * iofault_sweep_test.c, catalog_sweep_test.c, tier_file_sweep_test.c,
 * wal_record_sweep_test.c): their scratch directories, the fixed-clock engine the
 * file-damage sweeps open, and the world the two whole-cycle sweeps write. Header-only
 * (static inline) like testutil.h, since each test is its own binary; include it after
 * cmocka.h (it asserts). */
#ifndef BDB_SWEEPUTIL_H
#define BDB_SWEEPUTIL_H

#include "testutil.h"
#include "storage/crashutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/vfs/vfs.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- directories */

/* A sweep's scratch tree: root holds the base image, built once, and the work copy
 * each run damages. name ("powerloss") makes root unique to the test and process. */
typedef struct sw_dirs {
    const char *name;
    char root[64], base[128], work[128];
} sw_dirs;

/* A cmocka setup for tests registered with cmocka_unit_test_prestate_setup_teardown
 * and a sw_dirs as their state: an empty root, and logging off. */
static inline int sw_setup(void **state)
{
    sw_dirs *d = *state;
    /* tmpfs when there is one: the sweeps fsync thousands of times, and what they test
     * is the engine's answer to what the file system does, not the disk */
    struct stat st;
    const char *parent = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(d->root, sizeof d->root, "%s/bdb-%s-%d", parent, d->name, (int)getpid());
    snprintf(d->base, sizeof d->base, "%s/base", d->root);
    snprintf(d->work, sizeof d->work, "%s/work", d->root);
    tu_rm_rf(d->root);
    mkdir(d->root, 0755);
    /* above every level: thousands of injected faults would each log an error */
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1));
    return 0;
}

static inline int sw_teardown(void **state)
{
    const sw_dirs *d = *state;
    tu_rm_rf(d->root);
    return 0;
}

/* work := a fresh copy of the base image. */
static inline void sw_fresh_work(const sw_dirs *d)
{
    tu_rm_rf(d->work);
    assert_int_equal(cu_copy_tree(d->base, d->work), 0);
}

/* ---------------------------------------------------------------- fixed clock */

#define SW_T0 INT64_C(1790000000000) /* base image time */

static inline int64_t sw_clock_fixed(void *ctx)
{
    (void)ctx;
    return SW_T0 + 3600000;
}

/* The engine of the file-damage sweeps: one-hour windows, the clock an hour past
 * SW_T0, no background threads. */
static inline int sw_open_fixed(const char *dir, bdb_db **db)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    o.block_window_ms = 3600000;
    o.clock = (bdb_clock){sw_clock_fixed, NULL};
    *db = NULL;
    return bdb_db_open(&o, db);
}

/* ---------------------------------------------------------------- the cycle's world */

/* powerloss and iofault_sweep run one write / flush / maintenance cycle at SW_T1 over a
 * base image built at SW_T0: tenant "old" (TTL 2 d) has expired by then, tenant "t"
 * gets numbered batches of SW_PER samples per device and metric. */
#define SW_MIN INT64_C(60000)
#define SW_HOUR (60 * SW_MIN)
#define SW_DAY (24 * SW_HOUR)
#define SW_T1 (SW_T0 + 3 * SW_DAY) /* cycle time */

enum { SW_NDEV = 2, SW_NMET = 2, SW_PER = 4, SW_NSTATES = 3 };
static const char *const SW_DEVS[SW_NDEV] = {"d1", "d2"};
static const char *const SW_METS[SW_NMET] = {"m1", "m2"};
static const char *const SW_STATES[SW_NSTATES] = {"idle", "run", "fault"};

/* The clock of an engine opened with ctx = &the test's current time. */
static inline int64_t sw_clock(void *ctx)
{
    return *(const int64_t *)ctx;
}

static inline int64_t sw_ttl(void *ctx, const char *tenant)
{
    (void)ctx;
    return !strcmp(tenant, "old") ? 2 * SW_DAY : 0;
}

/* First sample time of batch k: the cycle writes into a fresh window (k odd), into
 * the window the base image already has a block for (k even: compaction work), and
 * batch 0 lies in the base window too. */
static inline int64_t sw_batch_t0(int k)
{
    return (k % 2) ? SW_T1 - 50 * SW_MIN + k * 5 * SW_MIN : SW_T0 - 90 * SW_MIN + k * 5 * SW_MIN;
}

static inline int64_t sw_sample_ts(int k, int i)
{
    return sw_batch_t0(k) + i * 1000 + 7;
}

/* Every value says where it came from, so a misplaced or mixed sample is caught. */
static inline double sw_sample_v(int k, int d, int m, int i)
{
    return k * 1000.0 + d * 100.0 + m * 10.0 + i + 0.25;
}

/* Batch k of tenant "t": every device and metric, a state change at its end. */
static inline int sw_write_batch(bdb_db *db, int k)
{
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < SW_PER; i++) {
        for (int d = 0; d < SW_NDEV; d++) {
            bdb_batch_begin(b, SW_DEVS[d], strlen(SW_DEVS[d]), sw_sample_ts(k, i), (size_t)i + 1);
            for (int m = 0; m < SW_NMET; m++)
                bdb_batch_metric(b, SW_METS[m], strlen(SW_METS[m]), sw_sample_v(k, d, m, i));
            if (i == SW_PER - 1)
                bdb_batch_state(b, SW_STATES[k % SW_NSTATES], strlen(SW_STATES[k % SW_NSTATES]));
            bdb_batch_end(b);
        }
    }
    int rc = bdb_db_write(db, "t", b);
    bdb_batch_free(b);
    return rc;
}

/* The options both cycles open with (each test adds its own): dir through vfs (NULL:
 * the real file system), the clock reading *now, tenant "old"'s TTL. */
static inline void sw_cycle_opts(bdb_db_opts *o, const char *dir, bdb_vfs *vfs, int64_t *now)
{
    bdb_db_opts_default(o);
    o->data_dir = dir;
    o->vfs = vfs;
    o->background = 0;
    o->block_window_ms = SW_HOUR;
    o->retention_ms = 30 * SW_DAY;
    o->tenant_retention = sw_ttl;
    o->clock = (bdb_clock){sw_clock, now};
}

typedef bdb_db *(*sw_open_fn)(const char *dir, bdb_vfs *vfs, int *rc);

/* The base image in d->base: tenant "old" and batch `last` of "t" in blocks (one
 * window shared), then batch 0 only in the WAL; copied while open, as a crash would
 * leave it. Sets *now to SW_T0. */
static inline void sw_build_base(const sw_dirs *d, int64_t *now, int last, sw_open_fn open_on)
{
    *now = SW_T0;
    char live[128];
    snprintf(live, sizeof live, "%s/live", d->root);
    int rc;
    bdb_db *db = open_on(live, NULL, &rc);
    assert_int_equal(rc, BDB_OK);
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 30; i++) {
        bdb_batch_begin(b, "x", 1, SW_T0 - 90 * SW_MIN + i * SW_MIN, (size_t)i + 1);
        bdb_batch_metric(b, "m1", 2, i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "old", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(sw_write_batch(db, last), BDB_OK); /* the "base" batch, always kept */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(sw_write_batch(db, 0), BDB_OK);
    assert_int_equal(cu_copy_tree(live, d->base), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    tu_rm_rf(live);
}

#endif
