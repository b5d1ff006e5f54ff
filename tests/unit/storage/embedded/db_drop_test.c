/* db_drop (bdb_db_drop_tenant, WAL record type 4) where drop_tenant_test.c does not
 * go: a sink that deletes rows (the devices, bucket histories, metric names and
 * sub-bucket counts it is handed, its failure and the engine's allocation failures
 * while collecting them), the refusals of a read-only engine and of one whose flush
 * is failing, the name limit, and drop records replayed from the WAL: damaged ones
 * skipped and counted, one for a tenant nobody knows harmless. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/fakesink.h"

#include "common/buf.h"
#include "common/log.h"
#include "storage/embedded/core/wal.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/vfs/vfs_fault.h"

#include <errno.h>

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define T0 INT64_C(1790000000000)

static char tmp[256], data[300];
static int64_t now_ms;

/* ---------------------------------------------------------------- a sink that drops */

static bdb_sink_ops drop_ops;
static int drop_fail_rc;   /* the next drops answer this (BDB_OK: they succeed) */
static int drop_calls;     /* drop_tenant calls that reached the sink */
static size_t drop_last_n; /* devices handed over by the last one */
static char drop_text[4096];

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "<device> <first>..<last> hist=<from>+<size>,... metrics=<sorted> nsub=<n>" */
static void describe(char *out, size_t cap, const char *dev, int64_t first, int64_t last,
                     const int64_t *from, const int64_t *size, size_t nhist,
                     const char *const *metrics, size_t nmetrics, uint32_t nsub)
{
    size_t off =
        (size_t)snprintf(out, cap, "%s %lld..%lld hist=", dev, (long long)first, (long long)last);
    for (size_t i = 0; i < nhist; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s%lld+%lld", i ? "," : "",
                                (long long)from[i], (long long)size[i]);
    const char *m[16];
    assert_true(nmetrics <= 16);
    memcpy(m, metrics, nmetrics * sizeof *m);
    qsort(m, nmetrics, sizeof *m, cmp_str);
    off += (size_t)snprintf(out + off, cap - off, " metrics=");
    for (size_t i = 0; i < nmetrics; i++)
        off += (size_t)snprintf(out + off, cap - off, "%s%s", i ? "," : "", m[i]);
    snprintf(out + off, cap - off, " nsub=%u", nsub);
}

/* Lines sorted and joined: the sink gets the devices in the catalog's hash order. */
static void join_sorted(char *out, size_t cap, char lines[][512], size_t n)
{
    const char *p[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++)
        p[i] = lines[i];
    qsort(p, n, sizeof *p, cmp_str);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strncat(out, p[i], cap - strlen(out) - 2);
        strcat(out, "\n");
    }
}

/* Deletes the tenant's device and state rows, which the engine's device listing and
 * current state read from the sink (the other tables are not read by these tests). */
static void forget_rows(fakesink *f, const char *tenant)
{
    size_t keep = 0;
    for (size_t k = 0; k < f->ndev; k++) {
        if (strcmp(f->dev[k].tenant, tenant)) {
            f->dev[keep++] = f->dev[k];
            continue;
        }
        free(f->dev[k].tenant);
        free(f->dev[k].device);
        free(f->dev[k].rest);
    }
    f->ndev = keep;
    keep = 0;
    for (size_t k = 0; k < f->nst; k++) {
        if (strcmp(f->st[k].tenant, tenant)) {
            f->st[keep++] = f->st[k];
            continue;
        }
        free(f->st[k].tenant);
        free(f->st[k].device);
        free(f->st[k].state);
        for (size_t j = 0; j < f->st[k].nm; j++)
            free((char *)f->st[k].m[j].name);
        free(f->st[k].m);
    }
    f->nst = keep;
}

static int rec_drop(bdb_sink *s, const char *tenant, const bdb_sink_device *devs,
                    const uint32_t *nsub, size_t n)
{
    drop_calls++;
    if (drop_fail_rc != BDB_OK)
        return drop_fail_rc;
    pthread_mutex_lock(&((fakesink *)s)->mu);
    forget_rows((fakesink *)s, tenant);
    pthread_mutex_unlock(&((fakesink *)s)->mu);
    drop_last_n = n;
    char lines[8][512];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(devs[i].tenant, tenant);
        describe(lines[i], sizeof lines[i], devs[i].device, devs[i].first_ts, devs[i].last_ts,
                 devs[i].hist_from, devs[i].hist_size, devs[i].nhist, devs[i].metrics,
                 devs[i].nmetrics, nsub[i]);
    }
    join_sorted(drop_text, sizeof drop_text, lines, n);
    return BDB_OK;
}

static fakesink *drop_sink(void)
{
    fakesink *f = fakesink_new(1);
    drop_ops = *f->base.ops;
    drop_ops.drop_tenant = rec_drop;
    f->base.ops = &drop_ops;
    drop_fail_rc = BDB_OK;
    drop_calls = 0;
    drop_last_n = 0;
    drop_text[0] = '\0';
    return f;
}

static bdb_db *open_with(const char *dir, fakesink *f, bdb_vfs *vfs)
{
    bdb_db_opts o;
    eu_opts(&o, dir, eu_clock, &now_ms);
    o.vfs = vfs ? vfs : eu_nosync_vfs();
    o.sink = f ? &f->base : NULL;
    return eu_open(&o);
}

static int count_dev(void *ctx, const bdb_device_info *d)
{
    (void)d;
    ++*(int *)ctx;
    return 0;
}

static int devices(bdb_db *db, const char *tenant)
{
    int n = 0;
    assert_int_equal(bdb_db_list_devices(db, tenant, count_dev, &n), BDB_OK);
    return n;
}

/* "old": device a (two metrics, a bucket change, sub-buckets 4 then 2) and b; "keep":
 * device k. */
static void fill(bdb_db *db)
{
    for (int i = 0; i < 20; i++) {
        eu_put(db, "old", "a", "temp", T0 - 3 * HOUR + i * MIN, i, (size_t)i);
        eu_put(db, "old", "a", "hum", T0 - 3 * HOUR + i * MIN, 50 + i, (size_t)i);
        eu_put(db, "old", "b", "temp", T0 - 2 * HOUR + i * MIN, 100 + i, (size_t)i);
        eu_put(db, "keep", "k", "temp", T0 - 2 * HOUR + i * MIN, 200 + i, (size_t)i);
    }
    assert_int_equal(bdb_db_set_device_bucket(db, "old", "a", HOUR), BDB_OK);
    assert_int_equal(bdb_db_set_subbuckets(db, "old", "a", 4), BDB_OK);
    eu_put(db, "old", "a", "temp", T0 - HOUR, 1, 0);
    assert_int_equal(bdb_db_set_subbuckets(db, "old", "a", 2), BDB_OK);
    eu_put(db, "old", "a", "temp", T0 - HOUR + MIN, 2, 0);
}

/* What the catalog says of tenant's devices, in the words of rec_drop. */
static void expected(bdb_db *db, const char *const *devs, const uint32_t *nsub, size_t n, char *out,
                     size_t cap)
{
    char lines[8][512];
    for (size_t i = 0; i < n; i++) {
        bdb_device_snapshot s;
        assert_int_equal(bdb_db_device_snapshot(db, "old", devs[i], &s), BDB_OK);
        int64_t from[8], size[8];
        assert_true(s.hist.n <= 8);
        for (uint32_t j = 0; j < s.hist.n; j++) {
            from[j] = s.hist.e[j].from_ms;
            size[j] = s.hist.e[j].size_ms;
        }
        describe(lines[i], sizeof lines[i], devs[i], s.first_ts, s.last_ts, from, size, s.hist.n,
                 (const char *const *)s.metrics, s.nmetrics, nsub[i]);
        bdb_device_snapshot_free(&s);
    }
    join_sorted(out, cap, lines, n);
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_OFF); /* the failures below log on purpose */
    eu_scratch(tmp, sizeof tmp, "dropcov", EU_TMPFS, data, sizeof data);
    now_ms = T0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    return eu_cleanup(tmp);
}

/* The sink is handed every device of the tenant with its whole bucket history, its
 * metric names and the most sub-buckets it ever had; a second drop hands it none. */
static void test_sink_gets_every_device(void **state)
{
    (void)state;
    fakesink *f = drop_sink();
    bdb_db *db = open_with(data, f, NULL);
    fill(db);
    static const char *const devs[] = {"a", "b"};
    static const uint32_t nsub[] = {4, 1};
    char want[4096];
    expected(db, devs, nsub, 2, want, sizeof want);
    assert_non_null(strstr(want, "metrics=hum,temp nsub=4"));

    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
    assert_int_equal(drop_calls, 1);
    assert_int_equal(drop_last_n, 2);
    assert_string_equal(drop_text, want);
    assert_int_equal(devices(db, "old"), 0);
    assert_int_equal(devices(db, "keep"), 1);
    /* again: the catalog knows nothing more, the sink is still asked (its own
     * registry may list devices) and gets no device */
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
    assert_int_equal(drop_calls, 2);
    assert_int_equal(drop_last_n, 0);
    assert_string_equal(drop_text, "");
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_with(data, f, NULL);
    assert_int_equal(devices(db, "old"), 0);
    assert_int_equal(devices(db, "keep"), 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    fakesink_free(f);
}

/* A sink that fails the delete: the error is returned, nothing local is forgotten
 * (no drop record reaches the WAL: a reopen has the tenant whole), and a retry once
 * the sink works completes the drop. */
static void test_sink_failure_keeps_the_tenant(void **state)
{
    (void)state;
    fakesink *f = drop_sink();
    bdb_db *db = open_with(data, f, NULL);
    fill(db);
    drop_fail_rc = BDB_ERR_IO;
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_ERR_IO);
    assert_int_equal(drop_calls, 1);
    assert_int_equal(devices(db, "old"), 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_with(data, f, NULL);
    assert_int_equal(devices(db, "old"), 2);
    drop_fail_rc = BDB_OK;
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
    assert_int_equal(drop_last_n, 2);
    assert_int_equal(devices(db, "old"), 0);
    assert_int_equal(devices(db, "keep"), 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    fakesink_free(f);
}

/* Allocation n of a drop with a sink fails, for every n in turn: BDB_OK or
 * BDB_ERR_NOMEM; a failure before the sink was called leaves the tenant whole and the
 * sink not asked; a retry with memory back completes the drop. */
static void test_sink_drop_out_of_memory(void **state)
{
    (void)state;
    uint64_t runs = 0, nomem = 0, before_sink = 0;
    for (uint64_t nth = 1; nth < 10000; nth++) {
        tu_rm_rf(data);
        fakesink *f = drop_sink();
        bdb_db *db = open_with(data, f, NULL);
        fill(db);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        eu_arm(nth);
        int rc = bdb_db_drop_tenant(db, "old");
        int hit = eu_disarm();
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc != BDB_OK) {
            if (drop_calls == 0) {
                before_sink++;
                assert_int_equal(devices(db, "old"), 2);
            }
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
        }
        assert_int_equal(devices(db, "old"), 0);
        assert_int_equal(devices(db, "keep"), 1);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        fakesink_free(f);
        if (!eu_swept(&runs, &nomem, hit, rc))
            break;
    }
    print_message("drop with a sink: %llu allocations failed in turn, %llu NOMEM (%llu before "
                  "the sink was asked), " EU_LEAKS "\n",
                  (unsigned long long)runs, (unsigned long long)nomem,
                  (unsigned long long)before_sink);
    assert_true(before_sink >= 4); /* the four arrays of the sink's view among them */
}

/* A read-only engine refuses; so does one whose flush is failing, even for a tenant
 * it does not know (nothing to flush for it, but a failed flush left frozen chunks):
 * BDB_ERR_AGAIN, and the drop goes through once a flush succeeds. */
static int full_writes;
static struct bdb_vfs_ops full_ops;
static bdb_vfs full_vfs = {&full_ops};

static int full_pwrite(bdb_file *fl, const void *buf, size_t n, uint64_t off)
{
    if (full_writes) {
        errno = ENOSPC;
        return BDB_ERR_NOSPACE;
    }
    return bdb_vfs_posix()->ops->pwrite(fl, buf, n, off);
}

static int full_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    (void)v;
    int rc = bdb_vfs_posix()->ops->open(bdb_vfs_posix(), path, flags, out);
    if (rc == BDB_OK)
        (*out)->vfs = &full_vfs;
    return rc;
}

static void test_refused_while_flush_fails_or_readonly(void **state)
{
    (void)state;
    full_ops = *bdb_vfs_posix()->ops;
    full_ops.open = full_open;
    full_ops.pwrite = full_pwrite;
    full_writes = 0;
    bdb_db *db = open_with(data, NULL, &full_vfs);
    fill(db);
    full_writes = 1; /* the disk is full: the flush fails, the engine stays writable */
    assert_int_equal(bdb_db_flush(db), BDB_ERR_NOSPACE);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 0);
    assert_true(st.flush_fail_streak >= 1);
    assert_int_equal(bdb_db_drop_tenant(db, "nobody"), BDB_ERR_AGAIN);
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_ERR_NOSPACE); /* its own flush */
    assert_int_equal(devices(db, "old"), 2);
    full_writes = 0;
    assert_int_equal(bdb_db_drop_tenant(db, "old"), BDB_OK);
    assert_int_equal(devices(db, "old"), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* a WAL write fails: read-only, and the drop says so before anything else */
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    db = open_with(data, NULL, fv);
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 1, EIO, 1);
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "k", 1, T0, 1);
    bdb_batch_metric(b, "temp", 4, 1);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_not_equal(bdb_db_write(db, "keep", b), BDB_OK);
    bdb_batch_free(b);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.readonly, 1);
    assert_int_equal(bdb_db_drop_tenant(db, "keep"), BDB_ERR_READONLY);
    assert_int_equal(devices(db, "keep"), 1);
    bdb_db_close(db);
    bdb_vfs_fault_free(fv);
}

/* Names: 1 to BDB_DROP_NAME_MAX bytes. */
static void test_name_limit(void **state)
{
    (void)state;
    bdb_db *db = open_with(data, NULL, NULL);
    char *name = malloc(BDB_DROP_NAME_MAX + 2);
    memset(name, 'n', BDB_DROP_NAME_MAX + 1);
    name[BDB_DROP_NAME_MAX + 1] = '\0';
    assert_int_equal(bdb_db_drop_tenant(db, name), BDB_ERR_INVALID);
    name[BDB_DROP_NAME_MAX] = '\0';
    assert_int_equal(bdb_db_drop_tenant(db, name), BDB_OK); /* unknown: nothing to do */
    free(name);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* ---------------------------------------------------------------- replayed records */

static void put_drop(bdb_wal *w, const char *name, size_t len, const char *mark, size_t mlen)
{
    bdb_buf r;
    bdb_buf_init(&r);
    bdb_buf_putc(&r, 4);
    bdb_buf_put_str(&r, name, len);
    bdb_buf_append(&r, mark, mlen);
    uint64_t lsn;
    assert_int_equal(bdb_wal_append(w, r.data, r.len, &lsn), BDB_OK);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
    bdb_buf_free(&r);
}

/* Drop records with valid frames but a wrong body are skipped and counted (a damaged
 * record must never forget a tenant); a valid one for an unknown tenant changes
 * nothing; a valid one for "old" forgets it. */
static void test_replayed_drop_records(void **state)
{
    (void)state;
    bdb_db *db = open_with(data, NULL, NULL);
    fill(db);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    char waldir[400];
    snprintf(waldir, sizeof waldir, "%s/wal", data);
    bdb_wal_opts wo = {.dir = waldir};
    bdb_wal *w = NULL;
    assert_int_equal(bdb_wal_open(&wo, &w), BDB_OK);
    put_drop(w, "", 0, "bdbdrop1", 8);     /* empty name */
    put_drop(w, "o\0d", 3, "bdbdrop1", 8); /* a NUL in the name */
    put_drop(w, "old", 3, "bdbdrop2", 8);  /* another mark */
    put_drop(w, "old", 3, "bdbdrop1x", 9); /* bytes after the mark */
    put_drop(w, "old", 3, "", 0);          /* no mark */
    static const uint8_t cut[] = {4, 0x7f, 'o', 'l', 'd'};
    uint64_t lsn; /* a name length past the record's end */
    assert_int_equal(bdb_wal_append(w, cut, sizeof cut, &lsn), BDB_OK);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
    put_drop(w, "ghost", 5, "bdbdrop1", 8); /* valid, nobody */
    bdb_wal_close(w);

    db = open_with(data, NULL, NULL);
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.wal_corruptions, 6);
    assert_int_equal(devices(db, "old"), 2);
    assert_int_equal(devices(db, "keep"), 1);
    assert_int_equal(st.tenants, 2);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    assert_int_equal(bdb_wal_open(&wo, &w), BDB_OK);
    put_drop(w, "old", 3, "bdbdrop1", 8);
    bdb_wal_close(w);
    db = open_with(data, NULL, NULL);
    bdb_db_get_stats(db, &st);
    assert_int_equal(st.wal_corruptions, 0);
    assert_int_equal(devices(db, "old"), 0);
    assert_int_equal(devices(db, "keep"), 1);
    assert_int_equal(st.tenants, 1);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sink_gets_every_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_failure_keeps_the_tenant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sink_drop_out_of_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_while_flush_fails_or_readonly, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_name_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replayed_drop_records, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
