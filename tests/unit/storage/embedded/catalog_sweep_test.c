/* catalog_sweep: a catalog (and a current-state file) whose checksum is right but whose
 * content is wrong.
 *
 * corrupt_test.c flips bits in the files as stored, which the CRC catches before any
 * field is decoded. A catalog written by a buggy build, or damaged before its CRC was
 * computed, passes the CRC, and then every field's own check is all that stands
 * between the damage and the engine. So: a real catalog (devices with tags, state,
 * metrics, bucket histories, sub-buckets, event counts) is unwrapped to its image,
 * every byte in turn is changed (+1, and all bits set), and every length is cut, each
 * time with a fresh valid CRC, written as a version 1 catalog (which the engine still
 * reads), and the directory is opened. Documented outcome (db.h): the open succeeds or
 * fails with BDB_ERR_CORRUPT; it never crashes, never reads past the image (ASan),
 * and a successful open gives an engine that lists its devices and closes.
 * The current-state file <data>/latest gets the same treatment: its image is changed
 * byte by byte and cut, recompressed, given a fresh header and CRC; db_latest.c
 * documents that a file failing any check is refused with BDB_ERR_CORRUPT.
 * Figures: "catalog sweep figures: ..." and "latest sweep figures: ...". */
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static sw_dirs dirs = {.name = "catsweep"};

static void build_base(void)
{
    bdb_db *db;
    assert_int_equal(sw_open_fixed(dirs.base, &db), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 6; i++) {
        char dev[16];
        snprintf(dev, sizeof dev, "dev-%d", i % 3);
        bdb_batch_begin(b, dev, strlen(dev), SW_T0 + i * 60000, (size_t)i + 1);
        bdb_batch_tag(b, "site", 4, i % 2 ? "berlin" : "paris", i % 2 ? 6 : 5);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        bdb_batch_metric(b, "rpm", 3, 900.0 + i);
        if (i % 2)
            bdb_batch_state(b, "run", 3);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_set_subbuckets(db, "acme", "dev-1", 4), BDB_OK);
    assert_int_equal(bdb_db_set_device_bucket(db, "acme", "dev-2", 3600000), BDB_OK);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The catalog's image: the version 2 file unwrapped (see db_catalog.c). */
static uint8_t *read_image(size_t *len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/catalog", dirs.base);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t file[1 << 16];
    size_t n = fread(file, 1, sizeof file, fp);
    fclose(fp);
    assert_true(n > 24 && n < sizeof file);
    assert_memory_equal(file, "BDBCAT02", 8);
    uint64_t raw = 0;
    for (int i = 7; i >= 0; i--)
        raw = raw << 8 | file[12 + i];
    assert_true(raw > 40 && raw < (1 << 20));
    uint8_t *img = malloc(raw);
    assert_int_equal(ZSTD_decompress(img, raw, file + 20, n - 24), raw);
    assert_memory_equal(img, "BDBCAT01", 8);
    *len = raw;
    return img;
}

static void write_v1(const uint8_t *img, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/catalog", dirs.work);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint32_t crc = (uint32_t)crc32(0, img, (uInt)len);
    uint8_t c[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24)};
    assert_int_equal(fwrite(img, 1, len, fp), len);
    assert_int_equal(fwrite(c, 1, 4, fp), 4);
    fclose(fp);
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* <data>/latest: header (magic, version, wal_upto, ndevices, image length), zstd frame
 * of the image, CRC (db_latest.c). */
#define LT_HEADER 36
static uint8_t lt_header[LT_HEADER];

static uint8_t *read_latest_image(size_t *len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/latest", dirs.base);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t file[1 << 16];
    size_t n = fread(file, 1, sizeof file, fp);
    fclose(fp);
    assert_true(n > LT_HEADER + 4 && n < sizeof file);
    assert_memory_equal(file, "BDBLAT01", 8);
    memcpy(lt_header, file, LT_HEADER);
    uint64_t raw = get_le(file + 28, 8);
    assert_true(raw > 10 && raw < (1 << 20));
    uint8_t *img = malloc(raw);
    assert_int_equal(ZSTD_decompress(img, raw, file + LT_HEADER, n - LT_HEADER - 4), raw);
    *len = raw;
    return img;
}

static void write_latest(const uint8_t *img, size_t len, int64_t ndev_delta)
{
    size_t cap = ZSTD_compressBound(len) + LT_HEADER + 4;
    uint8_t *f = malloc(cap);
    memcpy(f, lt_header, LT_HEADER);
    put_le(f + 20, get_le(lt_header + 20, 8) + (uint64_t)ndev_delta, 8);
    put_le(f + 28, len, 8);
    size_t z = ZSTD_compress(f + LT_HEADER, cap - LT_HEADER - 4, img, len, 1);
    assert_false(ZSTD_isError(z));
    put_le(f + LT_HEADER + z, (uint32_t)crc32(0, f, (uInt)(LT_HEADER + z)), 4);
    char path[256];
    snprintf(path, sizeof path, "%s/latest", dirs.work);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(f, 1, LT_HEADER + z + 4, fp), LT_HEADER + z + 4);
    fclose(fp);
    free(f);
}

static int dev_cb(void *ctx, const bdb_device_info *d)
{
    (void)d;
    ++*(uint64_t *)ctx;
    return 0;
}

typedef struct tally {
    uint64_t runs, opened, corrupt, other;
} tally;

/* One damaged image: open, and use what opened. */
static int latest_cb(void *ctx, const bdb_latest *l)
{
    (void)l;
    ++*(uint64_t *)ctx;
    return 0;
}

/* Opens dirs.work as damaged and uses what opened. */
static void try_open(tally *t, const char *what)
{
    bdb_db *db;
    int rc = sw_open_fixed(dirs.work, &db);
    t->runs++;
    if (rc == BDB_ERR_CORRUPT) {
        t->corrupt++;
        return;
    }
    if (rc != BDB_OK) {
        t->other++;
        print_error("%s: open returned %s\n", what, bdb_strerror(rc));
        return;
    }
    t->opened++;
    uint64_t n = 0;
    bdb_db_list_devices(db, NULL, dev_cb, &n);
    const char *m[1] = {"temp"};
    bdb_samples s;
    memset(&s, 0, sizeof s);
    bdb_db_read(db, "acme", "dev-1", m, 1, INT64_MIN, INT64_MAX, &s, NULL);
    bdb_samples_free(&s);
    bdb_db_latest(db, "acme", "dev-1", latest_cb, &n);
    bdb_db_close(db);
}

static void try_image(const uint8_t *img, size_t len, tally *t, const char *what)
{
    sw_fresh_work(&dirs);
    write_v1(img, len);
    try_open(t, what);
}

static void try_latest(const uint8_t *img, size_t len, int64_t ndev_delta, tally *t,
                       const char *what)
{
    sw_fresh_work(&dirs);
    write_latest(img, len, ndev_delta);
    try_open(t, what);
}

static void test_every_byte_and_length(void **state)
{
    (void)state;
    build_base();
    size_t len;
    uint8_t *img = read_image(&len);
    size_t body = len - 4; /* the image without its own CRC */
    tally t;
    memset(&t, 0, sizeof t);
    /* unchanged, through the version 1 path: opens with every device */
    try_image(img, body, &t, "unchanged");
    assert_int_equal(t.opened, 1);
    uint8_t *m = malloc(len);
    char what[64];
    for (size_t i = 0; i < body; i++) {
        static const int ops[2] = {1, 0xff};
        for (int k = 0; k < 2; k++) {
            memcpy(m, img, body);
            m[i] = ops[k] == 1 ? (uint8_t)(m[i] + 1) : 0xff;
            if (m[i] == img[i])
                continue;
            snprintf(what, sizeof what, "byte %zu %s", i, k ? "0xff" : "+1");
            try_image(m, body, &t, what);
        }
    }
    for (size_t cut = 0; cut < body; cut++) {
        snprintf(what, sizeof what, "cut at %zu", cut);
        try_image(img, cut, &t, what);
    }
    printf("catalog sweep figures: image %zu bytes, damaged catalogs %llu, opened %llu, refused "
           "as corrupt %llu, other outcome %llu\n",
           len, (unsigned long long)t.runs, (unsigned long long)t.opened,
           (unsigned long long)t.corrupt, (unsigned long long)t.other);
    fflush(stdout);
    free(m);
    free(img);
    assert_int_equal(t.other, 0);
    /* both outcomes occur: the checks refuse, and harmless changes (a timestamp, a
     * sample count) still open */
    assert_true(t.corrupt > body / 2);
    assert_true(t.opened > 1);
}

static void test_latest_every_byte_and_length(void **state)
{
    (void)state;
    build_base();
    size_t len;
    uint8_t *img = read_latest_image(&len);
    tally t;
    memset(&t, 0, sizeof t);
    try_latest(img, len, 0, &t, "unchanged");
    assert_int_equal(t.opened, 1);
    uint8_t *m = malloc(len);
    char what[64];
    for (size_t i = 0; i < len; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(m, img, len);
            m[i] = k ? 0xff : (uint8_t)(m[i] + 1);
            if (m[i] == img[i])
                continue;
            snprintf(what, sizeof what, "latest byte %zu %s", i, k ? "0xff" : "+1");
            try_latest(m, len, 0, &t, what);
        }
    }
    for (size_t cut = 0; cut < len; cut++) {
        snprintf(what, sizeof what, "latest cut at %zu", cut);
        try_latest(img, cut, 0, &t, what);
    }
    /* a device count that disagrees with the image, either way */
    try_latest(img, len, 1, &t, "one device more");
    try_latest(img, len, -1, &t, "one device less");
    printf("latest sweep figures: image %zu bytes, damaged files %llu, opened %llu, refused as "
           "corrupt %llu, other outcome %llu\n",
           len, (unsigned long long)t.runs, (unsigned long long)t.opened,
           (unsigned long long)t.corrupt, (unsigned long long)t.other);
    fflush(stdout);
    free(m);
    free(img);
    assert_int_equal(t.other, 0);
    assert_true(t.corrupt > len / 2);
    assert_true(t.opened > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_every_byte_and_length, sw_setup, sw_teardown,
                                                 &dirs),
        cmocka_unit_test_prestate_setup_teardown(test_latest_every_byte_and_length, sw_setup,
                                                 sw_teardown, &dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
