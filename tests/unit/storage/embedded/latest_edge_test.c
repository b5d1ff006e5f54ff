/* latest_edge: the current-state index's file loader and readers at their edges.
 *
 * Covered: <data>/latest files with a valid checksum but content the loader must
 * refuse (unsupported version, image length that disagrees with the frame or the
 * device count, a frame that does not decompress, an empty tenant name, a metric
 * count past the image, bytes after the last device) make the open fail with
 * BDB_ERR_CORRUPT, and one that cannot be read (a directory) with the read's error;
 * a file listing a metric twice keeps the newer value; the readers stop when their
 * callback asks and answer BDB_ERR_NOMEM (no callback, nothing partial) when an
 * allocation fails; a rebuild from the catalog (file moved away) leaves out a device
 * a refused write put in the catalog. */
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define TEN "t1"

static char tmpdir[64], datadir[128], latest_path[192];

static int setup(void **st)
{
    (void)st;
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1)); /* the refused files are expected */
    eu_scratch(tmpdir, sizeof tmpdir, "ledge", EU_TMPFS, datadir, sizeof datadir);
    snprintf(latest_path, sizeof latest_path, "%s/latest", datadir);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static int open_db(bdb_db **db)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.background = 0;
    *db = NULL;
    return bdb_db_open(&o, db);
}

/* ---------------------------------------------------------------- crafted files */

/* The image layout img_dev writes: version 1 (value bits, absolute times) or 2. */
static uint32_t img_version = 1;

/* One device of an image: tenant, device, event time, optional state, metrics. */
static void img_dev(bdb_buf *b, const char *tn, const char *dn, int64_t ets, const char *state,
                    int nm, const char *const *mn, const int64_t *mts, const double *mv)
{
    bdb_buf_put_str(b, tn, strlen(tn));
    bdb_buf_put_str(b, dn, strlen(dn));
    bdb_buf_put_varint(b, ets);
    bdb_buf_putc(b, state != NULL);
    if (state) {
        bdb_buf_put_str(b, state, strlen(state));
        bdb_buf_put_varint(b, ets);
    }
    bdb_buf_put_uvarint(b, (uint64_t)nm);
    for (int k = 0; k < nm; k++) {
        bdb_buf_put_str(b, mn[k], strlen(mn[k]));
        if (img_version == 1) {
            bdb_buf_put_varint(b, mts[k]);
            bdb_buf_put_f64(b, mv[k]);
        } else {
            bdb_buf_put_varint(b, ets - mts[k]);
            bdb_buf_put_num(b, mv[k]);
        }
    }
}

enum flaw { F_NONE, F_VERSION, F_RAWLEN, F_NDEV, F_FRAME };

/* A latest file around image img holding ndev devices, with one flaw, and a correct
 * checksum over whatever was written, into a fresh data directory. */
static void put_latest(const bdb_buf *img, uint64_t ndev, enum flaw flaw)
{
    tu_rm_rf(datadir);
    assert_int_equal(mkdir(datadir, 0755), 0);
    size_t bound = ZSTD_compressBound(img->len);
    uint8_t *z = malloc(bound);
    assert_non_null(z);
    size_t zl = ZSTD_compress(z, bound, img->data, img->len, 1);
    assert_false(ZSTD_isError(zl));
    if (flaw == F_FRAME)
        memset(z + zl / 2, 0xff, zl - zl / 2); /* the frame's header intact, its blocks not */
    bdb_buf f;
    bdb_buf_init(&f);
    bdb_buf_append(&f, "BDBLAT01", 8);
    bdb_buf_put_u32le(&f, flaw == F_VERSION ? 3 : img_version);
    bdb_buf_put_u64le(&f, 0);
    bdb_buf_put_u64le(&f, flaw == F_NDEV ? img->len + 1 : ndev);
    bdb_buf_put_u64le(&f, flaw == F_RAWLEN ? img->len + 1 : img->len);
    bdb_buf_append(&f, z, zl);
    bdb_buf_put_u32le(&f, (uint32_t)crc32(0, f.data, (uInt)f.len));
    FILE *fp = fopen(latest_path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(f.data, 1, f.len, fp), f.len);
    fclose(fp);
    bdb_buf_free(&f);
    free(z);
}

static void expect_open(int want)
{
    bdb_db *db;
    int rc = open_db(&db);
    if (rc != want)
        fail_msg("open: %s, expected %s", bdb_strerror(rc), bdb_strerror(want));
    if (db)
        assert_int_equal(bdb_db_close(db), BDB_OK);
}

static const char *const MN[] = {"temp", "hum"};
static const int64_t MTS[] = {T0, T0 - 5000};
static const double MV[] = {21.5, 1.0 / 3};

static int got_latest(void *ctx, const bdb_latest *l)
{
    bdb_latest *out = ctx;
    assert_int_equal(l->nmetrics, 2);
    /* name order: hum, temp */
    assert_true(l->metrics[0].ts == MTS[1] && l->metrics[0].value == MV[1]);
    assert_true(l->metrics[1].ts == MTS[0] && l->metrics[1].value == MV[0]);
    out->event_ts = l->event_ts;
    return 0;
}

/* A well-formed file of either version loads with its values (the control for the
 * flawed ones below): version 1, which earlier servers wrote, and version 2. */
static void crafted_good_file_loads(void **st)
{
    (void)st;
    for (uint32_t v = 1; v <= 2; v++) {
        img_version = v;
        bdb_buf img;
        bdb_buf_init(&img);
        img_dev(&img, TEN, "d1", T0, "on", 2, MN, MTS, MV);
        put_latest(&img, 1, F_NONE);
        bdb_buf_free(&img);
        bdb_db *db;
        assert_int_equal(open_db(&db), BDB_OK);
        bdb_latest l;
        memset(&l, 0, sizeof l);
        assert_int_equal(bdb_db_latest(db, TEN, "d1", got_latest, &l), BDB_OK);
        assert_true(l.event_ts == T0);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
    img_version = 1;
}

static void crafted_header_flaws_refused(void **st)
{
    (void)st;
    enum flaw flaws[] = {F_VERSION, F_RAWLEN, F_NDEV, F_FRAME};
    for (size_t i = 0; i < sizeof flaws / sizeof flaws[0]; i++) {
        bdb_buf img;
        bdb_buf_init(&img);
        /* long enough that the damaged half of the frame is data, not header */
        for (int d = 0; d < 40; d++) {
            char dn[16];
            snprintf(dn, sizeof dn, "dev-%d", d);
            img_dev(&img, TEN, dn, T0 + d, "on", 2, MN, MTS, MV);
        }
        put_latest(&img, 40, flaws[i]);
        bdb_buf_free(&img);
        expect_open(BDB_ERR_CORRUPT);
    }
}

static void crafted_image_flaws_refused(void **st)
{
    (void)st;
    bdb_buf img;
    /* an empty tenant name */
    bdb_buf_init(&img);
    img_dev(&img, "", "d1", T0, NULL, 0, NULL, NULL, NULL);
    put_latest(&img, 1, F_NONE);
    bdb_buf_free(&img);
    expect_open(BDB_ERR_CORRUPT);
    /* a metric count larger than what is left of the image */
    bdb_buf_init(&img);
    bdb_buf_put_str(&img, TEN, strlen(TEN));
    bdb_buf_put_str(&img, "d1", 2);
    bdb_buf_put_varint(&img, T0);
    bdb_buf_putc(&img, 0);
    bdb_buf_put_uvarint(&img, 1000);
    put_latest(&img, 1, F_NONE);
    bdb_buf_free(&img);
    expect_open(BDB_ERR_CORRUPT);
    /* bytes after the last device the header counts */
    bdb_buf_init(&img);
    img_dev(&img, TEN, "d1", T0, "on", 2, MN, MTS, MV);
    img_dev(&img, TEN, "d2", T0, "on", 2, MN, MTS, MV);
    put_latest(&img, 1, F_NONE);
    bdb_buf_free(&img);
    expect_open(BDB_ERR_CORRUPT);
    /* a device cut in the middle of a metric */
    bdb_buf_init(&img);
    img_dev(&img, TEN, "d1", T0, "on", 2, MN, MTS, MV);
    img.len -= 5;
    put_latest(&img, 1, F_NONE);
    bdb_buf_free(&img);
    expect_open(BDB_ERR_CORRUPT);
}

static void unreadable_file_refused(void **st)
{
    (void)st;
    tu_rm_rf(datadir);
    assert_int_equal(mkdir(datadir, 0755), 0);
    assert_int_equal(mkdir(latest_path, 0755), 0); /* exists, cannot be read as a file */
    bdb_db *db;
    int rc = open_db(&db);
    assert_null(db);
    assert_int_not_equal(rc, BDB_OK);
    assert_int_not_equal(rc, BDB_ERR_CORRUPT); /* not damage: the read's own error */
}

static int value_cb(void *ctx, const bdb_latest *l)
{
    double *v = ctx;
    for (size_t i = 0; i < l->nmetrics; i++)
        if (!strcmp(l->metrics[i].name, "temp"))
            *v = l->metrics[i].value;
    return 0;
}

/* The same metric twice in one device's list: the newer value is the one kept,
 * whichever comes first. */
static void duplicate_metric_newer_wins(void **st)
{
    (void)st;
    const char *mn[] = {"temp", "temp"};
    int64_t older_first[] = {T0, T0 + 1000}, newer_first[] = {T0 + 1000, T0};
    const double mv[] = {1.0, 2.0};
    const int64_t *orders[] = {older_first, newer_first};
    double want[] = {2.0, 1.0};
    for (int i = 0; i < 2; i++) {
        bdb_buf img;
        bdb_buf_init(&img);
        img_dev(&img, TEN, "d1", T0 + 1000, NULL, 2, mn, orders[i], mv);
        put_latest(&img, 1, F_NONE);
        bdb_buf_free(&img);
        bdb_db *db;
        assert_int_equal(open_db(&db), BDB_OK);
        double v = 0;
        assert_int_equal(bdb_db_latest(db, TEN, "d1", value_cb, &v), BDB_OK);
        assert_true(v == want[i]);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

/* ---------------------------------------------------------------- readers */

static void write_states(bdb_db *db)
{
    const char *devs[] = {"a", "b", "c", "d"};
    const char *sts[] = {"on", "on", "on", "off"};
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 4; i++) {
        bdb_batch_begin(b, devs[i], 1, T0 + i, 0);
        bdb_batch_metric(b, "temp", 4, i);
        bdb_batch_state(b, sts[i], strlen(sts[i]));
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, TEN, b), BDB_OK);
    bdb_batch_free(b);
}

struct calls {
    int n, stop_after;
    char seen[64];
};

static int dev_cb(void *ctx, const char *dev, int64_t ts)
{
    (void)ts;
    struct calls *c = ctx;
    strncat(c->seen, dev, sizeof c->seen - strlen(c->seen) - 1);
    return ++c->n == c->stop_after;
}

static int count_cb(void *ctx, const char *state, uint64_t n)
{
    struct calls *c = ctx;
    char row[32];
    snprintf(row, sizeof row, "%s:%llu ", state, (unsigned long long)n);
    strncat(c->seen, row, sizeof c->seen - strlen(c->seen) - 1);
    return ++c->n == c->stop_after;
}

static void readers_stop_when_asked(void **st)
{
    (void)st;
    tu_rm_rf(datadir);
    bdb_db *db;
    assert_int_equal(open_db(&db), BDB_OK);
    write_states(db);
    struct calls c = {0, 2, ""};
    int more = 0;
    uint64_t total = 0, none = 0;
    assert_int_equal(bdb_db_state_devices(db, TEN, "on", NULL, 10, dev_cb, &c, &more, &total),
                     BDB_OK);
    assert_string_equal(c.seen, "ab");
    assert_int_equal(total, 3);
    assert_int_equal(more, 0);
    c = (struct calls){0, 1, ""};
    assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, &c, &none), BDB_OK);
    assert_string_equal(c.seen, "off:1 ");
    assert_int_equal(none, 0);
    /* all of it when the callback does not stop */
    c = (struct calls){0, 0, ""};
    assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, &c, &none), BDB_OK);
    assert_string_equal(c.seen, "off:1 on:3 ");
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static int latest_cb(void *ctx, const bdb_latest *l)
{
    struct calls *c = ctx;
    snprintf(c->seen, sizeof c->seen, "%s %zu", l->state ? l->state : "-", l->nmetrics);
    c->n++;
    return 0;
}

/* Allocation N of each reader failing, N = 1, 2, ...: BDB_ERR_NOMEM and no callback,
 * or the whole answer. */
static void readers_nomem(void **st)
{
    (void)st;
    tu_rm_rf(datadir);
    bdb_db *db;
    assert_int_equal(open_db(&db), BDB_OK);
    write_states(db);
    for (int r = 0; r < 3; r++) {
        int nomem = 0;
        for (uint64_t n = 1; n < 100; n++) {
            struct calls c = {0, 0, ""};
            int more = 0;
            uint64_t total = 0, none = 0;
            eu_arm(n);
            int rc = r == 0 ? bdb_db_latest(db, TEN, "d", latest_cb, &c)
                     : r == 1
                         ? bdb_db_state_devices(db, TEN, "on", NULL, 10, dev_cb, &c, &more, &total)
                         : bdb_db_state_counts(db, TEN, count_cb, &c, &none);
            int hit = eu_disarm();
            if (rc == BDB_ERR_NOMEM) {
                nomem++;
                assert_int_equal(c.n, 0);
                continue;
            }
            assert_int_equal(rc, BDB_OK);
            const char *want[] = {"off 1", "abc", "off:1 on:3 "};
            assert_string_equal(c.seen, want[r]);
            if (!hit)
                break;
        }
        assert_true(nomem > 0);
    }
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A refused write may leave its new device in the catalog (without a sample); a
 * rebuild of the index from the catalog (the file moved away) must not list or count
 * it. Every allocation of the write in turn; the last run, unhindered, is the
 * control: the device is there after the rebuild. */
static void rebuild_skips_refused_device(void **st)
{
    (void)st;
    int refused = 0;
    for (uint64_t n = 1; n < 200; n++) {
        tu_rm_rf(datadir);
        bdb_db *db;
        assert_int_equal(open_db(&db), BDB_OK);
        write_states(db);
        bdb_batch *b = bdb_batch_new();
        bdb_batch_begin(b, "ghost", 5, T0, 0);
        bdb_batch_metric(b, "temp", 4, 1);
        bdb_batch_state(b, "on", 2);
        assert_int_equal(bdb_batch_end(b), 1);
        eu_arm(n);
        int rc = bdb_db_write(db, TEN, b);
        bdb_alloc_fail_disarm();
        bdb_batch_free(b);
        int hit = bdb_alloc_fail_injected() > 0;
        assert_true(rc == BDB_ERR_NOMEM || rc == BDB_OK);
        refused += rc == BDB_ERR_NOMEM;
        assert_int_equal(bdb_db_close(db), BDB_OK); /* saves the catalog */
        assert_int_equal(unlink(latest_path), 0);
        assert_int_equal(open_db(&db), BDB_OK);
        struct calls c = {0, 0, ""};
        uint64_t none = 0;
        assert_int_equal(bdb_db_latest(db, TEN, "ghost", latest_cb, &c),
                         rc == BDB_OK ? BDB_OK : BDB_ERR_NOTFOUND);
        c = (struct calls){0, 0, ""};
        assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, &c, &none), BDB_OK);
        assert_string_equal(c.seen, rc == BDB_OK ? "off:1 on:4 " : "off:1 on:3 ");
        assert_int_equal(none, 0);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!hit)
            break;
    }
    assert_true(refused > 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crafted_good_file_loads),
        cmocka_unit_test(crafted_header_flaws_refused),
        cmocka_unit_test(crafted_image_flaws_refused),
        cmocka_unit_test(unreadable_file_refused),
        cmocka_unit_test(duplicate_metric_newer_wins),
        cmocka_unit_test(readers_stop_when_asked),
        cmocka_unit_test(readers_nomem),
        cmocka_unit_test(rebuild_skips_refused_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
