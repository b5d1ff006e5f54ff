/* tier_file_sweep: tier and fleet files whose checksums are right but whose content
 * is not.
 *
 * A tier file (db_tier_file.c, docs/formats/tier.md) has a CRC per part: header, each
 * record, index. Here every byte of a real 1-hour tier file is changed in turn (+1,
 * and all bits set), the CRC of the part holding it is recomputed (footer bytes have
 * none), and the directory is opened. Documented outcome (db_tier.h, db_tier.c): the
 * engine opens; a file that fails a check is quarantined, never read; a tier read of
 * the device returns OK or BDB_ERR_CORRUPT, never a crash or a read out of bounds
 * (ASan), and the engine flushes and closes. A fleet file (db_fleet_file.c: one CRC
 * over the whole file) gets the same: every byte changed, CRC recomputed, and the
 * fleet read of its tenant and metric returns OK or BDB_ERR_CORRUPT.
 * Figures: "tier file sweep figures: ..." and "fleet file sweep figures: ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sweeputil.h"

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/tier/db_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static sw_dirs dirs = {.name = "tiersweep"};
static enum bdb_res sweep_res = BDB_RES_1M; /* the tier of the swept file: its reads */

static void build_base(void)
{
    bdb_db *db;
    assert_int_equal(sw_open_fixed(dirs.base, &db), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 8; i++) {
        const char *dev = i % 2 ? "d1" : "d2";
        bdb_batch_begin(b, dev, 2, SW_T0 + i * 60000, (size_t)i + 1);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        bdb_batch_metric(b, "rpm", 3, 900.0 + i);
        bdb_batch_end(b);
    }
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static size_t uvarint(const uint8_t *p, size_t *pos)
{
    size_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        uint8_t c = p[(*pos)++];
        v |= (size_t)(c & 0x7f) << s;
        if (!(c & 0x80))
            break;
    }
    return v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* The parts of a tier file: [start, end) covered by the CRC stored at end. */
typedef struct part {
    size_t start, end;
} part;

static size_t parts_of(const uint8_t *p, size_t n, part *v, size_t cap)
{
    size_t pos = 8 + 4 + 1 + 8 + 8 + 8 + 8, np = 0;
    uint32_t ver = get32(p + 8);
    pos += uvarint(p, &pos); /* tenant */
    size_t ninputs = uvarint(p, &pos);
    for (size_t i = 0; i < ninputs; i++)
        uvarint(p, &pos);
    assert_int_equal(ver, 5); /* the version the engine writes (records per device) */
    pos++;                    /* flags */
    assert_int_equal(get32(p + pos), (uint32_t)crc32(0, p, (uInt)pos));
    v[np++] = (part){0, pos};
    size_t ioff = (size_t)get64(p + n - 24), ilen = (size_t)get64(p + n - 16);
    size_t ip = ioff, off = pos + 4;
    size_t nmet = uvarint(p, &ip);
    for (size_t m = 0; m < nmet; m++)
        ip += uvarint(p, &ip); /* metric names */
    size_t ndev = uvarint(p, &ip);
    for (size_t r = 0; r < ndev && np + 1 < cap; r++) {
        ip += uvarint(p, &ip); /* device */
        size_t len = uvarint(p, &ip);
        v[np++] = (part){off, off + len - 4};
        off += len;
    }
    v[np++] = (part){ioff, ioff + ilen}; /* its CRC sits in the footer */
    return np;
}

static void fix_crcs(uint8_t *p, size_t n, const part *v, size_t np)
{
    for (size_t i = 0; i < np; i++) {
        uint32_t c = (uint32_t)crc32(0, p + v[i].start, (uInt)(v[i].end - v[i].start));
        put32(i + 1 == np ? p + n - 8 : p + v[i].end, c);
    }
}

typedef struct tally {
    uint64_t runs, quarantined, read_corrupt, bad, fleet_quarantined, fleet_corrupt;
    uint64_t runs_read, windows;
} tally;

static void check(tally *t, const char *what)
{
    bdb_db *db;
    int rc = sw_open_fixed(dirs.work, &db);
    t->runs++;
    if (rc != BDB_OK) {
        t->bad++;
        print_error("%s: open: %s\n", what, bdb_strerror(rc));
        return;
    }
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    t->quarantined += ts.quarantined;
    const char *m[2] = {"temp", "rpm"};
    for (int d = 0; d < 2; d++) {
        bdb_rollup r[2];
        bdb_rollup_init(&r[0], bdb_res_width(sweep_res));
        bdb_rollup_init(&r[1], bdb_res_width(sweep_res));
        rc = bdb_db_tier_read(db, "acme", d ? "d1" : "d2", m, 2, sweep_res, SW_T0 - 86400000,
                              SW_T0 + 86400000, r);
        if (rc == BDB_OK && !t->runs_read) /* the undamaged file: what a read finds */
            t->windows = r[0].n + r[1].n;
        if (rc == BDB_ERR_CORRUPT)
            t->read_corrupt++;
        else if (rc != BDB_OK) {
            t->bad++;
            print_error("%s: tier read: %s\n", what, bdb_strerror(rc));
        }
        bdb_rollup_free(&r[0]);
        bdb_rollup_free(&r[1]);
    }
    t->runs_read++;
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    t->fleet_quarantined += fs.quarantined;
    for (int res = BDB_RES_1H; res <= BDB_RES_1D; res++) {
        bdb_fleet fl;
        bdb_fleet_init(&fl, bdb_res_width((enum bdb_res)res));
        rc = bdb_db_fleet_read(db, "acme", "temp", (enum bdb_res)res, SW_T0 - 86400000,
                               SW_T0 + 86400000, &fl);
        if (rc == BDB_ERR_CORRUPT)
            t->fleet_corrupt++;
        else if (rc != BDB_OK) {
            t->bad++;
            print_error("%s: fleet read: %s\n", what, bdb_strerror(rc));
        }
        bdb_fleet_free(&fl);
    }
    int f = bdb_db_flush(db), c = bdb_db_close(db);
    if (f != BDB_OK || c != BDB_OK) {
        t->bad++;
        print_error("%s: flush %s, close %s\n", what, bdb_strerror(f), bdb_strerror(c));
    }
}

/* The first file in name order under dirs.base/sub, as a path relative to dirs.base. */
static void pick_file(const char *sub, char *rel, size_t cap)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/%s", dirs.base, sub);
    size_t nf;
    char **files = cu_list_files(dir, "", &nf);
    assert_true(nf >= 1);
    size_t pick = 0;
    for (size_t i = 1; i < nf; i++)
        if (strcmp(files[i], files[pick]) < 0)
            pick = i;
    assert_true(strlen(files[pick] + strlen(dirs.base)) < cap);
    snprintf(rel, cap, "%s", files[pick] + strlen(dirs.base));
    cu_free_list(files, nf);
}

static void write_work(const char *rel, const uint8_t *m, size_t n)
{
    sw_fresh_work(&dirs);
    char wpath[512]; /* dirs.work (128) + rel (256) */
    snprintf(wpath, sizeof wpath, "%s%s", dirs.work, rel);
    FILE *fp = fopen(wpath, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(m, 1, n, fp), n);
    fclose(fp);
}

static void test_every_byte_of_a_tier_file(void **state)
{
    (void)state;
    build_base();
    char rel[256];
    pick_file("tiers/1h", rel, sizeof rel); /* 1m is derived from raw, not stored */
    sweep_res = BDB_RES_1H;
    char path[512];
    snprintf(path, sizeof path, "%s%s", dirs.base, rel);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t orig[1 << 16];
    size_t n = fread(orig, 1, sizeof orig, fp);
    fclose(fp);
    assert_true(n > 64 && n < sizeof orig);
    part parts[256];
    size_t np = parts_of(orig, n, parts, 256);
    assert_true(np >= 3);
    uint8_t *m = malloc(n);
    tally t;
    memset(&t, 0, sizeof t);
    sw_fresh_work(&dirs);
    check(&t, "undamaged");
    assert_int_equal(t.quarantined + t.read_corrupt + t.bad, 0);
    assert_int_equal(t.windows, 2); /* one hour of 2 metrics for each device read */
    char what[320];
    for (size_t i = 0; i < n; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(m, orig, n);
            m[i] = k ? 0xff : (uint8_t)(m[i] + 1);
            if (m[i] == orig[i])
                continue;
            fix_crcs(m, n, parts, np);
            write_work(rel, m, n);
            snprintf(what, sizeof what, "%s byte %zu %s", rel, i, k ? "0xff" : "+1");
            check(&t, what);
        }
    }
    printf("tier file sweep figures: file %zu bytes in %zu checksummed parts, damaged files "
           "%llu, quarantined %llu, tier reads refused as corrupt %llu, other outcome %llu\n",
           n, np, (unsigned long long)t.runs - 1, (unsigned long long)t.quarantined,
           (unsigned long long)t.read_corrupt, (unsigned long long)t.bad);
    fflush(stdout);
    free(m);
    assert_int_equal(t.bad, 0);
    assert_true(t.quarantined > 0);
}

static void test_every_byte_of_a_fleet_file(void **state)
{
    (void)state;
    build_base();
    char rel[256];
    pick_file("fleet", rel, sizeof rel);
    char path[512];
    snprintf(path, sizeof path, "%s%s", dirs.base, rel);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t orig[1 << 16];
    size_t n = fread(orig, 1, sizeof orig, fp);
    fclose(fp);
    assert_true(n > 16 && n < sizeof orig);
    assert_int_equal(get32(orig + n - 4), (uint32_t)crc32(0, orig, (uInt)(n - 4)));
    uint8_t *m = malloc(n);
    tally t;
    memset(&t, 0, sizeof t);
    sw_fresh_work(&dirs);
    check(&t, "undamaged");
    assert_int_equal(t.fleet_quarantined + t.fleet_corrupt + t.bad, 0);
    char what[320];
    for (size_t i = 0; i + 4 < n; i++) {
        for (int k = 0; k < 2; k++) {
            memcpy(m, orig, n);
            m[i] = k ? 0xff : (uint8_t)(m[i] + 1);
            if (m[i] == orig[i])
                continue;
            put32(m + n - 4, (uint32_t)crc32(0, m, (uInt)(n - 4)));
            write_work(rel, m, n);
            snprintf(what, sizeof what, "%s byte %zu %s", rel, i, k ? "0xff" : "+1");
            check(&t, what);
        }
    }
    printf("fleet file sweep figures: file %zu bytes, damaged files %llu, quarantined %llu, "
           "fleet reads refused as corrupt %llu, other outcome %llu\n",
           n, (unsigned long long)t.runs - 1, (unsigned long long)t.fleet_quarantined,
           (unsigned long long)t.fleet_corrupt, (unsigned long long)t.bad);
    fflush(stdout);
    free(m);
    assert_int_equal(t.bad, 0);
    assert_true(t.fleet_quarantined > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_every_byte_of_a_tier_file, sw_setup,
                                                 sw_teardown, &dirs),
        cmocka_unit_test_prestate_setup_teardown(test_every_byte_of_a_fleet_file, sw_setup,
                                                 sw_teardown, &dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
