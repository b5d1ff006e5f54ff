/* bdb_db_drop_tenant (db_drop.c): after a drop nothing of the tenant is left in the
 * catalog, the head, the current-state index, the late-data list, the fleet files, and
 * (through retention with an expired TTL) the block and tier files, before and after a
 * reopen; other tenants keep everything; a drop cut by a power loss at any file-system
 * call either left the tenant whole or gone, and calling it again completes it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engutil.h"

#include "agg/fleet.h"
#include "common/log.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/vfs/vfs_fault.h"

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define DAY_MS (24 * HOUR)
#define T0 INT64_C(1790000000000) /* 2026-09: any fixed time */

static char tmp[256], base[300], work[300];
static int64_t now_ms;
static int dropped; /* the world after the server deleted "old": its TTLs are 1 ms */

static int64_t raw_ttl(void *ctx, const char *tenant)
{
    (void)ctx;
    return dropped && !strcmp(tenant, "old") ? 1 : 0;
}

static int64_t tier_ttl(void *ctx, const char *tenant, enum bdb_res res, int64_t dflt)
{
    (void)ctx;
    (void)res;
    return dropped && !strcmp(tenant, "old") ? 1 : dflt;
}

static bdb_db *open_at(const char *dir, bdb_vfs *vfs)
{
    bdb_db_opts o;
    eu_opts(&o, dir, eu_clock, &now_ms);
    o.vfs = vfs;
    o.tenant_retention = raw_ttl;
    o.late_threshold_ms = HOUR;
    bdb_db *db = NULL;
    int rc = bdb_db_open(&o, &db);
    if (rc != BDB_OK)
        return NULL;
    bdb_db_tier_set_retention_hook(db, tier_ttl, NULL);
    bdb_db_fleet_attach(db);
    return db;
}

static void put_state(bdb_db *db, const char *tenant, const char *dev, int64_t ts, double v,
                      const char *state)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dev, strlen(dev), ts, 1);
    bdb_batch_metric(b, "temp", 4, v);
    bdb_batch_tag(b, "site", 4, "berlin", 6);
    if (state)
        bdb_batch_state(b, state, strlen(state));
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tenant, b), BDB_OK);
    bdb_batch_free(b);
}

/* "old": two devices with states, a late event and samples both flushed (blocks, tier
 * and fleet files) and in the head; "keep": one device. */
static void fill(bdb_db *db)
{
    for (int i = 0; i < 30; i++) {
        put_state(db, "old", "old-dev-1", T0 - 3 * HOUR + i * MIN, i, i < 20 ? "idle" : "busy");
        put_state(db, "old", "old-dev-2", T0 - 3 * HOUR + i * MIN, 100 + i, "idle");
        put_state(db, "keep", "keep-dev", T0 - 3 * HOUR + i * MIN, 50 + i, "on");
    }
    put_state(db, "old", "old-dev-1", T0 - 5 * HOUR, 7, NULL); /* late: 2 h behind */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    put_state(db, "old", "old-dev-1", T0 - HOUR, 99, "busy"); /* head only */
    put_state(db, "keep", "keep-dev", T0 - HOUR, 80, "on");
}

static int count_dev(void *ctx, const bdb_device_info *d)
{
    (void)d;
    ++*(int *)ctx;
    return 0;
}

static int count_state(void *ctx, const char *state, uint64_t devices)
{
    (void)state;
    *(uint64_t *)ctx += devices;
    return 0;
}

static int count_late(void *ctx, const bdb_late_event *e)
{
    (void)e;
    ++*(int *)ctx;
    return 0;
}

static int latest_ts(void *ctx, const bdb_latest *l)
{
    *(int64_t *)ctx = l->event_ts;
    return 0;
}

static size_t fleet_windows(bdb_db *db, const char *tenant)
{
    bdb_fleet f;
    bdb_fleet_init(&f, bdb_res_width(BDB_RES_1H));
    assert_int_equal(bdb_db_fleet_read(db, tenant, "temp", BDB_RES_1H, T0 - DAY_MS, T0 + HOUR, &f),
                     BDB_OK);
    size_t n = f.n;
    bdb_fleet_free(&f);
    return n;
}

/* Fleet windows late data recomputed (the fleet's dirty list) of the tenant. */
static size_t dirty_windows(bdb_db *db, const char *tenant)
{
    size_t n = 0;
    for (int r = 0; r < 2; r++) {
        int64_t *starts = NULL;
        size_t k = 0;
        assert_int_equal(bdb_db_fleet_dirty(db, tenant, "temp", r ? BDB_RES_1D : BDB_RES_1H,
                                            T0 - 30 * DAY_MS, T0 + HOUR, &starts, &k),
                         BDB_OK);
        free(starts);
        n += k;
    }
    return n;
}

static uint64_t raw_count(bdb_db *db, const char *tenant, const char *dev)
{
    bdb_samples s[1];
    memset(s, 0, sizeof s);
    const char *m[] = {"temp"};
    int rc = bdb_db_read(db, tenant, dev, m, 1, T0 - DAY_MS, T0 + HOUR, s, NULL);
    uint64_t n = rc == BDB_OK ? s[0].n : 0;
    bdb_samples_free(&s[0]);
    return n;
}

/* Nothing of "old" by any reader; "keep" whole. */
static void check_gone(bdb_db *db, int keep_head)
{
    int n = 0;
    assert_int_equal(bdb_db_list_devices(db, "old", count_dev, &n), BDB_OK);
    assert_int_equal(n, 0);
    int64_t ev = 0;
    assert_int_equal(bdb_db_latest(db, "old", "old-dev-1", latest_ts, &ev), BDB_ERR_NOTFOUND);
    uint64_t in_states = 0, no_state = 0;
    bdb_db_state_counts(db, "old", count_state, &in_states, &no_state);
    assert_int_equal(in_states + no_state, 0);
    n = 0;
    assert_int_equal(bdb_db_late_recent(db, "old", NULL, count_late, &n), BDB_OK);
    assert_int_equal(n, 0);
    assert_int_equal(fleet_windows(db, "old"), 0);
    assert_int_equal(dirty_windows(db, "old"), 0);
    assert_int_equal(raw_count(db, "old", "old-dev-1"), 0);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.tenants, 1);
    assert_int_equal(st.devices, 1);

    n = 0;
    assert_int_equal(bdb_db_list_devices(db, "keep", count_dev, &n), BDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(bdb_db_latest(db, "keep", "keep-dev", latest_ts, &ev), BDB_OK);
    assert_int_equal(ev, keep_head ? T0 - HOUR : T0 - 3 * HOUR + 29 * MIN);
    assert_int_equal(raw_count(db, "keep", "keep-dev"), keep_head ? 31 : 30);
    assert_true(fleet_windows(db, "keep") >= 1);
}

/* Does any regular file under dir hold needle (files that are not compressed: the
 * tier files, the latest file, a WAL)? */
static int tree_holds(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            found = tree_holds(p, needle);
            continue;
        }
        size_t len;
        uint8_t *b = eu_read_file(p, &len);
        found = memmem(b, len, needle, strlen(needle)) != NULL;
        if (found)
            print_message("%s holds %s\n", p, needle);
        free(b);
    }
    closedir(d);
    return found;
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    eu_scratch(tmp, sizeof tmp, "drop", EU_TMPFS, NULL, 0);
    snprintf(base, sizeof base, "%s/base", tmp);
    snprintf(work, sizeof work, "%s/work", tmp);
    now_ms = T0;
    dropped = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmp);
}

static void test_drop_removes_everything(void **state)
{
    (void)state;
    bdb_db *db = open_at(base, NULL);
    assert_non_null(db);
    fill(db);
    assert_true(fleet_windows(db, "old") >= 1);
    assert_true(dirty_windows(db, "old") >= 1); /* the late event's recomputed windows */
    int n = 0;
    assert_int_equal(bdb_db_late_recent(db, "old", NULL, count_late, &n), BDB_OK);
    assert_true(n >= 1);

    dropped = 1; /* the server's deletion: the key's TTLs expire */
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
    check_gone(db, 1);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* blocks and tier files by retention */
    check_gone(db, 1);
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK); /* idempotent */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    assert_false(tree_holds(base, "old-dev-"));
    assert_true(tree_holds(base, "keep-dev"));

    db = open_at(base, NULL);
    assert_non_null(db);
    check_gone(db, 1);
    /* a tenant written again under the key starts empty */
    put_state(db, "old", "new-dev", T0, 1, "fresh");
    n = 0;
    assert_int_equal(bdb_db_list_devices(db, "old", count_dev, &n), BDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void test_drop_unknown_and_invalid(void **state)
{
    (void)state;
    bdb_db *db = open_at(base, NULL);
    assert_non_null(db);
    assert_int_equal(bdb_db_drop_tenant(db, ""), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_drop_tenant(db, NULL), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_drop_tenant(db, "nobody"), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Power off before each counted file-system call of the drop in turn, lose every
 * unsynced write, reopen: the tenant is whole or gone (never resurrected in part),
 * "keep" is whole, and a second drop completes it. */
static void test_drop_power_loss_every_call(void **state)
{
    (void)state;
    bdb_db *db = open_at(base, NULL);
    assert_non_null(db);
    fill(db);
    assert_int_equal(bdb_db_close(db), BDB_OK); /* the close flushes: keep's head too */
    dropped = 1;

    bdb_log_set_level(BDB_LOG_OFF); /* every cut logs its I/O errors */
    uint64_t ncalls = 0, drop_cuts = 0;
    for (uint64_t n = 1; n == 1 || n <= ncalls + 1; n++) {
        tu_rm_rf(work);
        eu_copy_tree(base, work, EU_SKIP_LOCK);
        bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), n);
        if (n > 1)
            bdb_vfs_fault_power_off_at(fv, n);
        db = open_at(work, fv);
        uint64_t at_open = bdb_vfs_fault_calls(fv);
        if (!db) { /* the power went off while opening, before the drop */
            assert_true(n > 1);
            bdb_vfs_fault_free(fv);
            continue;
        }
        int rc = bdb_db_drop_tenant(db, "old");
        if (n == 1) {
            assert_int_equal(rc, BDB_OK);
            ncalls = bdb_vfs_fault_calls(fv) + 2;
        }
        bdb_db_close(db);
        bdb_vfs_fault_crash(fv, BDB_CRASH_DROP, 512);
        bdb_vfs_fault_free(fv);
        if (n > 1 && n <= at_open)
            continue; /* the power went off while opening, before the drop */
        drop_cuts++;

        db = open_at(work, NULL);
        assert_non_null(db);
        int nd = 0;
        assert_int_equal(bdb_db_list_devices(db, "old", count_dev, &nd), BDB_OK);
        if (nd != 0) { /* the drop was not durable: all of it is still there */
            assert_int_equal(nd, 2);
            int64_t ev = 0; /* raw reads stop at the expired TTL; the index does not */
            assert_int_equal(bdb_db_latest(db, "old", "old-dev-2", latest_ts, &ev), BDB_OK);
            assert_int_equal(ev, T0 - 3 * HOUR + 29 * MIN);
        }
        assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
        assert_int_equal(bdb_db_maintain(db), BDB_OK);
        check_gone(db, 1);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (tree_holds(work, "old-dev-"))
            fail_msg("power off at call %llu of %llu: old data left", (unsigned long long)n,
                     (unsigned long long)ncalls);
    }
    bdb_log_set_level(BDB_LOG_ERROR);
    print_message("drop power-loss sweep: %llu counted calls, %llu cuts inside the drop\n",
                  (unsigned long long)ncalls, (unsigned long long)drop_cuts);
    assert_true(drop_cuts > 20); /* the sweep reached into the drop */
}

/* Allocation n of a drop fails, for every n in turn: the drop answers BDB_OK or
 * BDB_ERR_NOMEM, and once memory is back (and a flush went through, which a drop needs
 * after a failed one) a second drop completes it: nothing of the tenant, the bystander
 * whole, across a reopen. The ASan build checks that nothing leaks. */
static void test_drop_allocation_failure_sweep(void **state)
{
    (void)state;
    bdb_db *db = open_at(base, NULL);
    assert_non_null(db);
    fill(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    dropped = 1;
    bdb_log_set_level(BDB_LOG_OFF);
    uint64_t runs = 0, nomem = 0;
    for (uint64_t nth = 1; nth < 100000; nth++) {
        tu_rm_rf(work);
        eu_copy_tree(base, work, EU_SKIP_LOCK);
        db = open_at(work, eu_nosync_vfs());
        assert_non_null(db);
        eu_arm(nth);
        int rc = bdb_db_drop_tenant(db, "old");
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc != BDB_OK) {
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
        }
        assert_int_equal(bdb_db_maintain(db), BDB_OK);
        check_gone(db, 1);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        db = open_at(work, eu_nosync_vfs());
        assert_non_null(db);
        check_gone(db, 1);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&runs, &nomem, hit, rc))
            break;
    }
    bdb_log_set_level(BDB_LOG_ERROR);
    print_message("drop allocation sweep: %llu allocations failed in turn, %llu drops answered "
                  "BDB_ERR_NOMEM, " EU_LEAKS "\n",
                  (unsigned long long)runs, (unsigned long long)nomem);
    assert_true(runs > 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_drop_removes_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_unknown_and_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_power_loss_every_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop_allocation_failure_sweep, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
