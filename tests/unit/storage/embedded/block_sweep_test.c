/* block_sweep: block files whose checksums are right but whose content is not.
 *
 * A block (block.c, docs/formats/block.md) has a CRC over the header, one per series
 * run of chunk bytes, one over the index region and one over the footer. The base
 * directory holds one block of one series (so one run: its CRC sits just before
 * index_off), several chunks long. Every byte of it is changed in turn (+1 on even
 * offsets, all bits flipped on odd ones), the CRC of the part holding it is recomputed
 * (index changes also refresh the footer CRC, which covers the index CRC; the CRC
 * fields themselves are changed alone), and a copy of the directory is opened and the
 * series read. Documented outcome (db.h): the engine opens; a block that fails a check
 * is quarantined, never read; a read returns BDB_ERR_CORRUPT rather than wrong values.
 * Checked:
 *   - header, index and footer bytes: the read returns exactly the original samples,
 *     or BDB_ERR_CORRUPT, or the block is quarantined and the read returns none of its
 *     samples, or (a changed name or key in the index, which points the lookup
 *     elsewhere) some of the samples; never a sample that was not written;
 *   - chunk payload bytes: a changed value or time with a valid run CRC is data the
 *     format cannot tell from real (that is what the CRC is for), so here the check
 *     is OK or BDB_ERR_CORRUPT, samples in time order inside the block's window, no
 *     crash and nothing out of bounds (ASan).
 * Figures: "block sweep figures: ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/crashutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/vfs/vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define HOUR BDB_MS_HOUR
#define T0 INT64_C(1790000000000)
#define NS 120

static char root[64], basedir[128];

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return T0 + 2 * HOUR;
}

static int open_dir(const char *dir, bdb_db **db)
{
    bdb_db_opts o;
    eu_opts(&o, dir, clock_fn, NULL);
    /* POSIX without fsync: each trial opens a copy; durability is powerloss_test.c's */
    o.vfs = eu_nosync_vfs();
    o.block_window_ms = HOUR;
    o.chunk_max_samples = 16;
    *db = NULL;
    return bdb_db_open(&o, db);
}

static int64_t ts_of(int i)
{
    return T0 + 1000 * (int64_t)i + (i % 7) * 13;
}

static double v_of(int i)
{
    return i * 0.5 - 3 + (i % 5) * 1e-3;
}

static int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: a thousand trials of copy, open and close */
    eu_scratch(root, sizeof root, "blksweep", EU_TMPFS, NULL, 0);
    snprintf(basedir, sizeof basedir, "%s/base", root);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* quarantines log by design */
    bdb_db *db;
    assert_int_equal(open_dir(basedir, &db), BDB_OK);
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < NS; i++) {
        bdb_batch_begin(b, "dev", 3, ts_of(i), 0);
        bdb_batch_metric(b, "temp", 4, v_of(i));
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(root);
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t crc(const unsigned char *p, size_t n)
{
    return (uint32_t)crc32(0L, p, (uInt)n);
}

enum region { R_HEADER, R_HEADER_CRC, R_RUN, R_RUN_CRC, R_INDEX, R_FOOTER, R_FOOTER_CRC };

static void test_block_content_sweep(void **st)
{
    (void)st;
    size_t nf = 0;
    char **files = cu_list_files(basedir, ".blk", &nf);
    assert_int_equal(nf, 1);
    char rel[256];
    snprintf(rel, sizeof rel, "%s", files[0] + strlen(basedir));
    size_t size;
    unsigned char *orig = eu_read_file(files[0], &size);
    cu_free_list(files, nf);
    assert_true(size > 36 + 128);
    const unsigned char *ft = orig + size - 128;
    size_t index_off = (size_t)get_u64(ft);
    assert_int_equal(get_u64(ft + 32), 1);  /* one group */
    assert_int_equal(get_u64(ft + 40), 1);  /* one series: one run */
    assert_true(get_u64(ft + 48) >= 4);     /* several chunks in that run */
    assert_int_equal(get_u64(ft + 56), NS); /* every sample */
    assert_int_equal(crc(orig + 36, index_off - 40), get_u64(orig + index_off - 4) & 0xffffffffu);

    unsigned long outcome[7][5]; /* region x {intact, corrupt, quarantined, missing, changed} */
    memset(outcome, 0, sizeof outcome);
    unsigned char *buf = malloc(size);
    char work[160], path[512];
    snprintf(work, sizeof work, "%s/work", root);
    for (size_t off = 0; off < size; off++) {
        memcpy(buf, orig, size);
        buf[off] = off % 2 ? (unsigned char)(buf[off] ^ 0xff) : (unsigned char)(buf[off] + 1);
        unsigned char *fb = buf + size - 128;
        enum region r;
        if (off < 32) {
            r = R_HEADER;
            put_u32(buf + 32, crc(buf, 32));
        } else if (off < 36) {
            r = R_HEADER_CRC;
        } else if (off < index_off - 4) {
            r = R_RUN;
            put_u32(buf + index_off - 4, crc(buf + 36, index_off - 40));
        } else if (off < index_off) {
            r = R_RUN_CRC;
        } else if (off < size - 128) {
            r = R_INDEX;
            put_u32(fb + 112, crc(buf + index_off, size - 128 - index_off));
            put_u32(fb + 116, crc(fb, 116));
        } else if (off < size - 128 + 116) {
            r = R_FOOTER;
            put_u32(fb + 116, crc(fb, 116));
        } else {
            r = R_FOOTER_CRC;
        }
        assert_int_equal(cu_copy_tree(basedir, work), 0);
        snprintf(path, sizeof path, "%s%s", work, rel);
        eu_write_file(path, buf, size);
        bdb_db *db;
        assert_int_equal(open_dir(work, &db), BDB_OK);
        bdb_samples s[1];
        memset(s, 0, sizeof s);
        const char *m[1] = {"temp"};
        int rc = bdb_db_read(db, "t1", "dev", m, 1, T0 - HOUR, T0 + 2 * HOUR, s, NULL);
        bdb_db_stats dst;
        bdb_db_get_stats(db, &dst);
        int exact = rc == BDB_OK && s->n == NS;
        for (size_t i = 0; exact && i < NS; i++)
            exact = s->ts[i] == ts_of((int)i) && s->v[i] == v_of((int)i);
        /* every returned sample one that was written (a changed name in the index
         * can move the series out of reach: missing, never wrong) */
        int subset = rc == BDB_OK;
        for (size_t i = 0, j = 0; subset && i < s->n; i++) {
            while (j < NS && ts_of((int)j) < s->ts[i])
                j++;
            subset = j < NS && ts_of((int)j) == s->ts[i] && v_of((int)j) == s->v[i];
        }
        int kind;
        if (rc == BDB_ERR_CORRUPT)
            kind = 1;
        else if (exact)
            kind = 0;
        else if (dst.quarantined && rc == BDB_OK && s->n == 0)
            kind = 2;
        else if (subset)
            kind = 3;
        else
            kind = 4;
        if (rc != BDB_OK && rc != BDB_ERR_CORRUPT)
            fail_msg("offset %zu (region %d): read returned %d", off, (int)r, rc);
        if (kind == 4 && r != R_RUN)
            fail_msg("offset %zu (region %d): wrong samples returned (%zu, rc %d)", off, (int)r,
                     s->n, rc);
        for (size_t i = 0; rc == BDB_OK && i < s->n; i++) {
            /* even undetectable payload changes stay inside the block's window and
             * in time order */
            assert_true(s->ts[i] >= T0 - T0 % HOUR && s->ts[i] < T0 - T0 % HOUR + HOUR);
            if (i)
                assert_true(s->ts[i] > s->ts[i - 1]);
        }
        outcome[r][kind]++;
        bdb_samples_free(s);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        tu_rm_rf(work);
    }
    static const char *const names[7] = {"header", "header-crc", "run",       "run-crc",
                                         "index",  "footer",     "footer-crc"};
    printf("block sweep figures (%zu bytes, one change per byte; intact/corrupt/quarantined/"
           "missing/changed):",
           size);
    for (int r = 0; r < 7; r++)
        printf(" %s %lu/%lu/%lu/%lu/%lu", names[r], outcome[r][0], outcome[r][1], outcome[r][2],
               outcome[r][3], outcome[r][4]);
    printf("\n");
    /* the CRC fields changed alone are always caught */
    assert_int_equal(outcome[R_HEADER_CRC][0] + outcome[R_HEADER_CRC][3], 0);
    assert_int_equal(outcome[R_RUN_CRC][0] + outcome[R_RUN_CRC][3], 0);
    assert_int_equal(outcome[R_FOOTER_CRC][0] + outcome[R_FOOTER_CRC][3], 0);
    free(buf);
    free(orig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_block_content_sweep, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
