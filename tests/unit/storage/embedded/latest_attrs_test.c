/* latest_attrs: string attributes in the current-state index (string fields other
 * than the state, docs/API.md#mapping-rule).
 *
 * Covered: per attribute the newest report wins (an older one never replaces it, at
 * equal times the later write does); a report with attributes only is stored; the
 * per-device limit drops new names (counted) while known names still update; with a
 * reservation held the apply allocates nothing; the index after WAL replay of the
 * type 5 record (a crash copy) and after a flush (latest file version 3) equals the
 * one before, next to type 1 records of batches without attributes; a latest file of
 * version 2 (no attributes) is still read. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/state/db_latest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define TEN "t1"

static char tmpdir[64], datadir[128];

static int setup(void **st)
{
    (void)st;
    bdb_log_set_level(BDB_LOG_ERROR);
    eu_scratch(tmpdir, sizeof tmpdir, "lattr", EU_TMPFS, datadir, sizeof datadir);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_at(const char *dir)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    return eu_open(&o);
}

/* One report of dev: metric m (unless NAN-free flag off) and attributes given as
 * "name=value" strings. */
static void write_attrs(bdb_db *db, const char *dev, int64_t ts, int metric, int n, ...)
{
    bdb_batch *b = bdb_batch_new();
    assert_non_null(b);
    bdb_batch_begin(b, dev, strlen(dev), ts, 0);
    if (metric)
        bdb_batch_metric(b, "m", 1, (double)(ts - T0));
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        const char *kv = va_arg(ap, const char *);
        const char *eq = strchr(kv, '=');
        bdb_batch_attr(b, kv, (size_t)(eq - kv), eq + 1, strlen(eq + 1));
    }
    va_end(ap);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, TEN, b), BDB_OK);
    bdb_batch_free(b);
}

struct text {
    char s[16384];
    size_t n;
};

static int text_cb(void *ctx, const bdb_latest *l)
{
    struct text *t = ctx;
    t->n += (size_t)snprintf(t->s + t->n, sizeof t->s - t->n, "ev=%lld", (long long)l->event_ts);
    for (size_t i = 0; i < l->nmetrics; i++)
        t->n += (size_t)snprintf(t->s + t->n, sizeof t->s - t->n, " %s=%g", l->metrics[i].name,
                                 l->metrics[i].value);
    for (size_t i = 0; i < l->nattrs; i++)
        t->n += (size_t)snprintf(t->s + t->n, sizeof t->s - t->n, " %s='%s'@%lld", l->attrs[i].name,
                                 l->attrs[i].value, (long long)l->attrs[i].ts);
    assert_true(t->n < sizeof t->s);
    return 0;
}

static void dev_text(bdb_db *db, const char *dev, struct text *t)
{
    t->n = 0;
    t->s[0] = 0;
    assert_int_equal(bdb_db_latest(db, TEN, dev, text_cb, t), BDB_OK);
}

static void newest_wins(void **st)
{
    (void)st;
    bdb_db *db = open_at(datadir);
    struct text t;
    write_attrs(db, "a", T0 + 1000, 1, 2, "fw=1.2", "site=berlin");
    write_attrs(db, "a", T0 + 500, 1, 2, "fw=1.1", "mode=eco"); /* older: fw kept */
    dev_text(db, "a", &t);
    assert_string_equal(t.s, "ev=1699920001000 m=1000 fw='1.2'@1699920001000 "
                             "mode='eco'@1699920000500 site='berlin'@1699920001000");
    write_attrs(db, "a", T0 + 1000, 0, 1, "fw=1.3"); /* same time: the later write wins */
    write_attrs(db, "a", T0 + 2000, 0, 1, "site=");  /* attributes only; an empty value */
    dev_text(db, "a", &t);
    assert_string_equal(t.s, "ev=1699920002000 m=1000 fw='1.3'@1699920001000 "
                             "mode='eco'@1699920000500 site=''@1699920002000");
    bdb_db_close(db);
}

static void device_limit(void **st)
{
    (void)st;
    bdb_db *db = open_at(datadir);
    char kv[32];
    for (int i = 0; i < BDB_MAX_DEVICE_ATTRS + 3; i++) {
        snprintf(kv, sizeof kv, "a%03d=x", i);
        write_attrs(db, "d", T0 + i, 0, 1, kv);
    }
    assert_int_equal(bdb_db_attrs_dropped(db), 3);
    write_attrs(db, "d", T0 + 1000, 0, 1, "a000=y"); /* a known name still updates */
    struct text t;
    dev_text(db, "d", &t);
    assert_non_null(strstr(t.s, "a000='y'@1699920001000"));
    snprintf(kv, sizeof kv, " a%03d=", BDB_MAX_DEVICE_ATTRS - 1);
    assert_non_null(strstr(t.s, kv));
    snprintf(kv, sizeof kv, " a%03d=", BDB_MAX_DEVICE_ATTRS);
    assert_null(strstr(t.s, kv));
    /* the limit holds in replay too: the same names dropped again */
    bdb_db_close(db);
    db = open_at(datadir);
    struct text t2;
    dev_text(db, "d", &t2);
    assert_string_equal(t.s, t2.s);
    bdb_db_close(db);
}

/* With the reservation held, applying the report allocates nothing: new names, a
 * replaced value, and an older value that is not taken. */
static void apply_allocates_nothing(void **st)
{
    (void)st;
    bdb_db *db = open_at(datadir);
    write_attrs(db, "r", T0 + 100, 1, 1, "fw=1");
    device *d = db_get_device(db, TEN, strlen(TEN), "r", 1);
    assert_non_null(d);
    bdb_kv kv[3] = {{"fw", 2, "2", 1}, {"new", 3, "n", 1}, {"zz", 2, "z", 1}};
    db_latest_resv r;
    pthread_mutex_lock(dev_lock(db, d));
    assert_int_equal(db_latest_reserve(db, d, NULL, 0, NULL, 0, kv, 3, &r), BDB_OK);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    int rc = db_latest_apply(db, d, &r, T0 + 200, NULL, 0, NULL, NULL, 0, kv, 3);
    uint64_t injected = bdb_alloc_fail_injected();
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(injected, 0);
    /* an older report under a reservation: its copy is not taken, release frees it */
    bdb_kv old = {"fw", 2, "0", 1};
    db_latest_release(db, &r);
    assert_int_equal(db_latest_reserve(db, d, NULL, 0, NULL, 0, &old, 1, &r), BDB_OK);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    rc = db_latest_apply(db, d, &r, T0 + 50, NULL, 0, NULL, NULL, 0, &old, 1);
    injected = bdb_alloc_fail_injected();
    bdb_alloc_fail_disarm();
    db_latest_release(db, &r);
    pthread_mutex_unlock(dev_lock(db, d));
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(injected, 0);
    struct text t;
    dev_text(db, "r", &t);
    assert_string_equal(t.s, "ev=1699920000200 m=100 fw='2'@1699920000200 "
                             "new='n'@1699920000200 zz='z'@1699920000200");
    bdb_db_close(db);
}

static void copy_dir(const char *from, const char *to)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "LOCK"))
            continue;
        char a[512], b[512];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat sb;
        assert_int_equal(stat(a, &sb), 0);
        if (S_ISDIR(sb.st_mode)) {
            copy_dir(a, b);
            continue;
        }
        FILE *in = fopen(a, "rb"), *out = fopen(b, "wb");
        assert_true(in && out);
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            assert_int_equal(fwrite(buf, 1, n, out), n);
        fclose(in);
        fclose(out);
    }
    closedir(d);
}

static uint32_t file_version(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/latest", dir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t h[12];
    assert_int_equal(fread(h, 1, 12, f), 12);
    fclose(f);
    return bdb_get_u32le(h + 8);
}

/* Replay of type 5 records between type 1 ones (a crash copy), then the file. */
static void replay_and_file(void **st)
{
    (void)st;
    bdb_db *db = open_at(datadir);
    write_attrs(db, "a", T0 + 1, 1, 0); /* no attributes: a type 1 record */
    write_attrs(db, "a", T0 + 2, 1, 2, "fw=1.0", "loc=hall");
    write_attrs(db, "b", T0 + 3, 0, 1, "fw=2.0");
    write_attrs(db, "a", T0 + 1, 1, 1, "fw=0.9"); /* older */
    write_attrs(db, "a", T0 + 4, 1, 0);
    struct text ta, tb, t;
    dev_text(db, "a", &ta);
    dev_text(db, "b", &tb);
    assert_non_null(strstr(ta.s, "fw='1.0'@1699920000002 loc='hall'@1699920000002"));
    char crash[200];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    copy_dir(datadir, crash);
    /* the crash copy: no latest file saved yet, everything from the WAL */
    bdb_db *c = open_at(crash);
    dev_text(c, "a", &t);
    assert_string_equal(t.s, ta.s);
    dev_text(c, "b", &t);
    assert_string_equal(t.s, tb.s);
    bdb_db_close(c);
    /* a flush saves version 3; the WAL it covers is gone after it */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_close(db);
    assert_int_equal(file_version(datadir), 3);
    db = open_at(datadir);
    dev_text(db, "a", &t);
    assert_string_equal(t.s, ta.s);
    dev_text(db, "b", &t);
    assert_string_equal(t.s, tb.s);
    bdb_db_close(db);
}

/* A version 2 file written by hand (the layout of docs/formats/latest.md): read, and
 * saved again as version 3 with the attributes added since. */
static void old_file_version_read(void **st)
{
    (void)st;
    bdb_db *db = open_at(datadir);
    write_attrs(db, "a", T0 + 1, 1, 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_close(db);
    bdb_buf img, out;
    bdb_buf_init(&img);
    bdb_buf_init(&out);
    bdb_buf_put_str(&img, TEN, strlen(TEN));
    bdb_buf_put_str(&img, "a", 1);
    bdb_buf_put_varint(&img, T0 + 7);
    bdb_buf_putc(&img, 1);
    bdb_buf_put_str(&img, "on", 2);
    bdb_buf_put_varint(&img, T0 + 7);
    bdb_buf_put_uvarint(&img, 1);
    bdb_buf_put_str(&img, "m", 1);
    bdb_buf_put_varint(&img, 0);
    bdb_buf_put_num(&img, 42);
    char path[256];
    snprintf(path, sizeof path, "%s/latest", datadir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t hdr[36];
    assert_int_equal(fread(hdr, 1, sizeof hdr, f), sizeof hdr);
    fclose(f);
    bdb_buf_append(&out, "BDBLAT01", 8);
    bdb_buf_put_u32le(&out, 2);
    bdb_buf_append(&out, hdr + 12, 8); /* the flush's wal_upto */
    bdb_buf_put_u64le(&out, 1);
    bdb_buf_put_u64le(&out, img.len);
    size_t bound = ZSTD_compressBound(img.len);
    assert_int_equal(bdb_buf_reserve(&out, bound + 4), BDB_OK);
    size_t z = ZSTD_compress(out.data + out.len, bound, img.data, img.len, 1);
    assert_false(ZSTD_isError(z));
    out.len += z;
    bdb_buf_put_u32le(&out, (uint32_t)crc32(0, out.data, (uInt)out.len));
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(out.data, 1, out.len, f), out.len);
    fclose(f);
    bdb_buf_free(&img);
    bdb_buf_free(&out);
    db = open_at(datadir);
    struct text t;
    dev_text(db, "a", &t);
    assert_string_equal(t.s, "ev=1699920000007 m=42");
    write_attrs(db, "a", T0 + 8, 0, 1, "fw=3");
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_close(db);
    assert_int_equal(file_version(datadir), 3);
    db = open_at(datadir);
    dev_text(db, "a", &t);
    assert_string_equal(t.s, "ev=1699920000008 m=42 fw='3'@1699920000008");
    bdb_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(newest_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(device_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(apply_allocates_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(replay_and_file, setup, teardown),
        cmocka_unit_test_setup_teardown(old_file_version_read, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
