/* powerloss: simulated power loss at every I/O step of one write / flush / compaction /
 * retention cycle of the embedded engine, in every crash mode of the fault VFS.
 *
 * A base image (blocks of two tenants, a catalog, tier files, the latest file and an
 * unflushed WAL tail) is built once. Each run copies it, opens it through the fault
 * VFS with the power going off just before counted call n (write, sync, rename, unlink,
 * truncate, create, directory sync), runs the whole cycle to its end (every call after
 * the cut fails), then lets the crash decide the fate of every write not yet fsynced:
 * drop it, tear it to 512 B or 4 KiB sectors, or keep a random subset (reorder). The
 * image is reopened on the real file system and must
 *   - open (a state that fails to open is a failure);
 *   - hold every sample of every acknowledged write with its exact value, each other
 *     write all or nothing, nothing that was never written;
 *   - not resurrect expired data: once maintenance returned OK, the expired tenant has
 *     no row in any block file, and reads never show it;
 *   - agree between the 1 h tier and the raw samples (counted once, never twice);
 *   - name the newest acknowledged event as the device's latest;
 *   - accept a write, a flush and maintenance afterwards.
 * n runs from 1 to one past the last call of the cycle, so every call is a crash point.
 * Figures are printed as "powerloss figures: ..." for docs/RELIABILITY.md.
 * POWERLOSS_STRIDE=k (default 1) tests every k-th point only, for quick local runs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sweeputil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBATCH 8 /* batch 0 is the base image's WAL tail, 1.. the cycle's */

static sw_dirs dirs = {.name = "powerloss"};
static int64_t now_ms;

static bdb_db *open_on(const char *dir, bdb_vfs *vfs, int *rc)
{
    bdb_db_opts o;
    sw_cycle_opts(&o, dir, vfs, &now_ms);
    bdb_db *db = NULL;
    *rc = bdb_db_open(&o, &db);
    return *rc == BDB_OK ? db : NULL;
}

enum step { S_WRITE, S_SUB, S_FLUSH, S_MAINTAIN, S_CLOSE };
static const struct {
    int kind, k;
} CYCLE[] = {
    {S_WRITE, 1}, {S_WRITE, 2},    {S_SUB, 4},   {S_FLUSH, 0},    {S_WRITE, 3},
    {S_WRITE, 4}, {S_FLUSH, 0},    {S_WRITE, 5}, {S_MAINTAIN, 0}, {S_WRITE, 6},
    {S_WRITE, 7}, {S_MAINTAIN, 0}, {S_CLOSE, 0},
};
#define NSTEPS (sizeof CYCLE / sizeof CYCLE[0])

typedef struct outcome {
    int opened;
    int acked[NBATCH + 1];
    int maintained; /* a maintenance run returned OK */
    int sub_ok;
} outcome;

/* Runs the cycle on dir through vfs; every step runs even after failures, as a server
 * would keep trying until it notices. */
static void run_cycle(const char *dir, bdb_vfs *vfs, outcome *out)
{
    memset(out, 0, sizeof *out);
    out->acked[NBATCH] = 1;
    now_ms = SW_T1;
    int rc;
    bdb_db *db = open_on(dir, vfs, &rc);
    if (!db)
        return;
    out->opened = 1;
    out->acked[0] = 1; /* fsynced in the base image */
    for (size_t s = 0; s < NSTEPS; s++) {
        switch (CYCLE[s].kind) {
        case S_WRITE:
            out->acked[CYCLE[s].k] = sw_write_batch(db, CYCLE[s].k) == BDB_OK;
            break;
        case S_SUB:
            out->sub_ok = bdb_db_set_subbuckets(db, "t", "d1", (uint32_t)CYCLE[s].k) == BDB_OK;
            break;
        case S_FLUSH:
            bdb_db_flush(db);
            break;
        case S_MAINTAIN:
            if (bdb_db_maintain(db) == BDB_OK)
                out->maintained = 1;
            break;
        case S_CLOSE:
            bdb_db_close(db);
            db = NULL;
            break;
        }
    }
}

/* Rows of a tenant in block files. */
static int rows_cb(void *ctx, const char *tenant, const char *device, int64_t bucket, uint64_t rows,
                   uint64_t bytes)
{
    (void)device, (void)bucket, (void)bytes;
    if (!strcmp(tenant, "old"))
        *(uint64_t *)ctx += rows;
    return 0;
}

static int latest_cb(void *ctx, const bdb_latest *l)
{
    *(int64_t *)ctx = l->event_ts;
    return 0;
}

typedef struct tally {
    uint64_t runs, open_fail, lost, wrong, partial, resurrected, tier_bad, latest_bad, unusable,
        acked_samples, unacked_present;
} tally;

/* Checks a reopened image against what the cycle acknowledged; adds to t. */
static void verify(const char *dir, const outcome *oc, tally *t, const char *what)
{
    now_ms = SW_T1;
    int rc;
    bdb_db *db = open_on(dir, NULL, &rc);
    t->runs++;
    if (!db) {
        t->open_fail++;
        print_error("%s: reopen failed: %s\n", what, bdb_strerror(rc));
        return;
    }
    int seen[NBATCH + 1] = {0};
    for (int d = 0; d < SW_NDEV; d++) {
        for (int m = 0; m < SW_NMET; m++) {
            const char *mm[1] = {SW_METS[m]};
            bdb_samples s;
            memset(&s, 0, sizeof s);
            rc = bdb_db_read(db, "t", SW_DEVS[d], mm, 1, INT64_MIN, INT64_MAX, &s, NULL);
            if (rc != BDB_OK) {
                t->wrong++;
                print_error("%s: read %s/%s: %s\n", what, SW_DEVS[d], SW_METS[m], bdb_strerror(rc));
                continue;
            }
            for (size_t j = 0; j < s.n; j++) {
                int found = 0;
                for (int k = 0; k <= NBATCH && !found; k++)
                    for (int i = 0; i < SW_PER && !found; i++)
                        if (s.ts[j] == sw_sample_ts(k, i)) {
                            found = 1;
                            if (s.v[j] != sw_sample_v(k, d, m, i)) {
                                t->wrong++;
                                print_error("%s: %s/%s at %lld: %.17g, want %.17g\n", what,
                                            SW_DEVS[d], SW_METS[m], (long long)s.ts[j], s.v[j],
                                            sw_sample_v(k, d, m, i));
                            }
                            seen[k]++;
                        }
                if (!found) {
                    t->wrong++;
                    print_error("%s: never written: %s/%s at %lld\n", what, SW_DEVS[d], SW_METS[m],
                                (long long)s.ts[j]);
                }
            }
            /* the tier agrees with raw: every sample counted exactly once */
            int64_t w = bdb_res_width(BDB_RES_1H);
            bdb_rollup r;
            bdb_rollup_init(&r, w);
            rc = bdb_db_tier_read(db, "t", SW_DEVS[d], mm, 1, BDB_RES_1H, SW_T0 - SW_DAY,
                                  SW_T1 + SW_DAY, &r);
            uint64_t tier_n = 0;
            for (size_t i = 0; rc == BDB_OK && i < r.n; i++)
                tier_n += bdb_stats_count(&r.w[i].st);
            if (rc != BDB_OK || tier_n != s.n) {
                t->tier_bad++;
                print_error("%s: tier 1h of %s/%s: %s, %llu samples, raw %zu\n", what, SW_DEVS[d],
                            SW_METS[m], bdb_strerror(rc), (unsigned long long)tier_n, s.n);
            }
            bdb_rollup_free(&r);
            bdb_samples_free(&s);
        }
    }
    const int full = SW_PER * SW_NDEV * SW_NMET;
    int64_t newest_acked = INT64_MIN, newest_seen = INT64_MIN;
    for (int k = 0; k <= NBATCH; k++) {
        if (oc->acked[k]) {
            t->acked_samples += full;
            if (seen[k] != full) {
                t->lost += (uint64_t)(full - seen[k]);
                print_error("%s: acknowledged batch %d: %d of %d samples\n", what, k, seen[k],
                            full);
            }
            if (sw_sample_ts(k, SW_PER - 1) > newest_acked)
                newest_acked = sw_sample_ts(k, SW_PER - 1);
        } else if (seen[k] != 0 && seen[k] != full) {
            t->partial++;
            print_error("%s: batch %d in flight: %d of %d samples\n", what, k, seen[k], full);
        } else if (seen[k]) {
            t->unacked_present++;
        }
        if (seen[k] && sw_sample_ts(k, SW_PER - 1) > newest_seen)
            newest_seen = sw_sample_ts(k, SW_PER - 1);
    }
    /* expired data stays expired */
    uint64_t old_rows = 0;
    assert_int_equal(bdb_db_partition_sizes(db, rows_cb, &old_rows), BDB_OK);
    const char *m1[1] = {"m1"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    rc = bdb_db_read(db, "old", "x", m1, 1, INT64_MIN, INT64_MAX, &s, NULL);
    if ((oc->maintained && old_rows) || (rc == BDB_OK && s.n)) {
        t->resurrected++;
        print_error("%s: expired tenant: %llu rows in blocks, %zu readable\n", what,
                    (unsigned long long)old_rows, rc == BDB_OK ? s.n : 0);
    }
    bdb_samples_free(&s);
    /* the latest event is the newest write that survived, never older than the newest
     * acknowledged one */
    for (int d = 0; d < SW_NDEV; d++) {
        int64_t ev = INT64_MIN;
        rc = bdb_db_latest(db, "t", SW_DEVS[d], latest_cb, &ev);
        if (rc != BDB_OK || ev != newest_seen || ev < newest_acked) {
            t->latest_bad++;
            print_error("%s: latest of %s: %s, %lld (newest seen %lld, acked %lld)\n", what,
                        SW_DEVS[d], bdb_strerror(rc), (long long)ev, (long long)newest_seen,
                        (long long)newest_acked);
        }
    }
    /* and it goes on working */
    int w1 = sw_write_batch(db, 7), f1 = bdb_db_flush(db), m = bdb_db_maintain(db),
        c = bdb_db_close(db);
    if (w1 != BDB_OK || f1 != BDB_OK || m != BDB_OK || c != BDB_OK) {
        t->unusable++;
        print_error("%s: after recovery write %s, flush %s, maintain %s, close %s\n", what,
                    bdb_strerror(w1), bdb_strerror(f1), bdb_strerror(m), bdb_strerror(c));
    }
}

static const struct {
    const char *name;
    enum bdb_fault_crash_mode mode;
    int sector;
} MODES[] = {
    {"drop", BDB_CRASH_DROP, 512},     {"tear-512", BDB_CRASH_TEAR, 512},
    {"tear-4k", BDB_CRASH_TEAR, 4096}, {"reorder", BDB_CRASH_REORDER, 512},
    {"keep", BDB_CRASH_KEEP, 512},
};
#define NMODES (sizeof MODES / sizeof MODES[0])

static void test_power_loss_every_call(void **state)
{
    (void)state;
    sw_build_base(&dirs, &now_ms, NBATCH, open_on);

    /* a dry run counts the calls of the cycle and checks it passes unharmed */
    sw_fresh_work(&dirs);
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    outcome oc;
    run_cycle(dirs.work, fv, &oc);
    uint64_t ncalls = bdb_vfs_fault_calls(fv);
    bdb_vfs_fault_free(fv);
    assert_true(oc.opened && oc.maintained && oc.sub_ok);
    for (int k = 0; k <= NBATCH; k++)
        assert_true(oc.acked[k]);
    tally total;
    memset(&total, 0, sizeof total);
    verify(dirs.work, &oc, &total, "dry run");
    assert_int_equal(total.lost + total.wrong + total.open_fail + total.tier_bad, 0);
    assert_true(ncalls > 20);

    const char *env = getenv("POWERLOSS_STRIDE");
    uint64_t stride = env && atoi(env) > 0 ? (uint64_t)atoi(env) : 1;
    tally per[NMODES];
    memset(per, 0, sizeof per);
    uint64_t acked_runs = 0, maint_runs = 0;
    for (uint64_t n = 1; n <= ncalls + 1; n += stride) {
        for (size_t md = 0; md < NMODES; md++) {
            sw_fresh_work(&dirs);
            fv = bdb_vfs_fault_new(bdb_vfs_posix(), n * 31 + md + 1);
            bdb_vfs_fault_power_off_at(fv, n);
            run_cycle(dirs.work, fv, &oc);
            bdb_vfs_fault_crash(fv, MODES[md].mode, MODES[md].sector);
            bdb_vfs_fault_free(fv);
            char what[96];
            snprintf(what, sizeof what, "power off at call %llu of %llu, %s", (unsigned long long)n,
                     (unsigned long long)ncalls, MODES[md].name);
            verify(dirs.work, &oc, &per[md], what);
            acked_runs += oc.acked[NBATCH - 1];
            maint_runs += oc.maintained;
        }
    }
    memset(&total, 0, sizeof total);
    for (size_t md = 0; md < NMODES; md++) {
        const tally *p = &per[md];
        printf("powerloss %-8s: crash points %llu, fsynced-and-acknowledged samples lost %llu of "
               "%llu, wrong or unwritten values %llu, partial batches %llu, failed to open %llu, "
               "expired data resurrected %llu, tier/raw mismatches %llu, wrong latest %llu, "
               "unusable after recovery %llu, unacknowledged batches that survived %llu\n",
               MODES[md].name, (unsigned long long)p->runs, (unsigned long long)p->lost,
               (unsigned long long)p->acked_samples, (unsigned long long)p->wrong,
               (unsigned long long)p->partial, (unsigned long long)p->open_fail,
               (unsigned long long)p->resurrected, (unsigned long long)p->tier_bad,
               (unsigned long long)p->latest_bad, (unsigned long long)p->unusable,
               (unsigned long long)p->unacked_present);
        total.runs += p->runs;
        total.lost += p->lost;
        total.acked_samples += p->acked_samples;
        total.wrong += p->wrong;
        total.partial += p->partial;
        total.open_fail += p->open_fail;
        total.resurrected += p->resurrected;
        total.tier_bad += p->tier_bad;
        total.latest_bad += p->latest_bad;
        total.unusable += p->unusable;
    }
    printf("powerloss figures: counted I/O calls per cycle %llu, crash points x modes %llu, "
           "acknowledged samples lost %llu of %llu, states that failed to open %llu, expired "
           "data resurrected %llu, wrong values %llu, tier/raw mismatches %llu (runs where the "
           "last write was acknowledged %llu, where maintenance completed %llu)\n",
           (unsigned long long)ncalls, (unsigned long long)total.runs,
           (unsigned long long)total.lost, (unsigned long long)total.acked_samples,
           (unsigned long long)total.open_fail, (unsigned long long)total.resurrected,
           (unsigned long long)total.wrong, (unsigned long long)total.tier_bad,
           (unsigned long long)acked_runs, (unsigned long long)maint_runs);
    fflush(stdout);
    assert_int_equal(total.lost, 0);
    assert_int_equal(total.wrong, 0);
    assert_int_equal(total.partial, 0);
    assert_int_equal(total.open_fail, 0);
    assert_int_equal(total.resurrected, 0);
    assert_int_equal(total.tier_bad, 0);
    assert_int_equal(total.latest_bad, 0);
    assert_int_equal(total.unusable, 0);
    /* the sweep really crossed the cycle: some runs lost the tail, some kept it all */
    assert_true(acked_runs > 0 && acked_runs < total.runs);
    assert_true(maint_runs > 0 && maint_runs < total.runs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_power_loss_every_call, sw_setup, sw_teardown,
                                                 &dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
