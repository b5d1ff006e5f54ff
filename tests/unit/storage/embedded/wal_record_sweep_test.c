/* wal_record_sweep: WAL records whose frame checksum is right but whose content is not.
 *
 * The WAL's CRC catches damage on disk (wal_test.c, corrupt_test.c). A record that
 * passes it but does not decode (a bug in the writer, or damage before the CRC was
 * computed) is, as db.c documents, skipped loudly at replay and counted in
 * wal_corruptions, and the engine starts. Here the unflushed WAL of a live directory
 * (batches for four devices with tags, states and metrics, a sub-bucket setting and
 * a pinned bucket size) has every payload byte of every record changed in turn (+1,
 * and all bits set), the fragment CRC recomputed, and the directory opened:
 *   - it opens (never BDB_ERR_CORRUPT for one bad record, never a crash or a read
 *     past the record under ASan);
 *   - every sample of every other record is there with its value: one bad record
 *     never takes its neighbours down;
 *   - the engine reads, flushes and closes.
 * Figures: "wal record sweep figures: ...". */
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

#define NDEV 4
#define PER 3
#define WAL_PAGE (32 * 1024)
#define HDR 7

static sw_dirs dirs = {.name = "walsweep"};

static double val(int d, int i)
{
    return d * 100.0 + i + 0.5;
}

static void build_base(void)
{
    char live[128];
    snprintf(live, sizeof live, "%s/live", dirs.root);
    bdb_db *db;
    assert_int_equal(sw_open_fixed(live, &db), BDB_OK);
    for (int d = 0; d < NDEV; d++) {
        char dev[16];
        snprintf(dev, sizeof dev, "w%d", d);
        bdb_batch *b = bdb_batch_new();
        for (int i = 0; i < PER; i++) {
            bdb_batch_begin(b, dev, strlen(dev), SW_T0 + i * 1000, (size_t)i + 1);
            bdb_batch_tag(b, "site", 4, "berlin", 6);
            bdb_batch_metric(b, "m", 1, val(d, i));
            if (i == PER - 1)
                bdb_batch_state(b, "on", 2);
            bdb_batch_end(b);
        }
        assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
        bdb_batch_free(b);
    }
    assert_int_equal(bdb_db_set_subbuckets(db, "t", "w1", 4), BDB_OK);
    assert_int_equal(bdb_db_set_device_bucket(db, "t", "w2", 3600000), BDB_OK);
    /* what a crash now would leave: every record in the WAL, nothing flushed */
    assert_int_equal(cu_copy_tree(live, dirs.base), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    tu_rm_rf(live);
}

typedef struct frag {
    size_t pos, len;
} frag;

/* The single WAL segment of dir and its FULL fragments. */
static uint8_t *load_wal(const char *dir, char *path, size_t pathlen, size_t *len, frag *fr,
                         size_t *nfr)
{
    char wdir[256];
    snprintf(wdir, sizeof wdir, "%s/wal", dir);
    size_t n;
    char **files = cu_list_files(wdir, "", &n);
    assert_int_equal(n, 1);
    snprintf(path, pathlen, "%s", files[0]);
    cu_free_list(files, n);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    static uint8_t buf[1 << 20];
    *len = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    *nfr = 0;
    size_t pos = 0;
    while (pos + HDR <= *len && *nfr < 64) {
        size_t room = WAL_PAGE - pos % WAL_PAGE;
        if (room < HDR) {
            pos += room;
            continue;
        }
        if (buf[pos] == 0)
            break;
        assert_int_equal(buf[pos], 1); /* small records: FULL fragments only */
        size_t l = (size_t)buf[pos + 1] | (size_t)buf[pos + 2] << 8;
        fr[(*nfr)++] = (frag){pos, l};
        pos += HDR + l;
    }
    return buf;
}

static void put_wal(const char *path, const uint8_t *buf, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(buf, 1, len, fp), len);
    fclose(fp);
}

static void fix_crc(uint8_t *buf, const frag *f)
{
    uint8_t type = buf[f->pos];
    uint32_t c = (uint32_t)crc32(crc32(0L, &type, 1), buf + f->pos + HDR, (uInt)f->len);
    for (int k = 0; k < 4; k++)
        buf[f->pos + 3 + k] = (uint8_t)(c >> (8 * k));
}

typedef struct tally {
    uint64_t runs, open_failed, skipped, lost, unusable;
} tally;

/* Opens the damaged copy; rec is the damaged record's index (records 0..NDEV-1 are
 * the batches of w0..w3). */
static void check(int rec, tally *t, const char *what)
{
    bdb_db *db;
    int rc = sw_open_fixed(dirs.work, &db);
    t->runs++;
    if (rc != BDB_OK) {
        t->open_failed++;
        print_error("%s: open: %s\n", what, bdb_strerror(rc));
        return;
    }
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    t->skipped += st.wal_corruptions;
    for (int d = 0; d < NDEV; d++) {
        if (d == rec)
            continue;
        char dev[16];
        snprintf(dev, sizeof dev, "w%d", d);
        const char *m[1] = {"m"};
        bdb_samples s;
        memset(&s, 0, sizeof s);
        rc = bdb_db_read(db, "t", dev, m, 1, INT64_MIN, INT64_MAX, &s, NULL);
        int found = 0;
        for (size_t j = 0; rc == BDB_OK && j < s.n; j++)
            for (int i = 0; i < PER; i++)
                found += s.ts[j] == SW_T0 + i * 1000 && s.v[j] == val(d, i);
        if (found != PER) {
            t->lost++;
            print_error("%s: device %s has %d of its %d samples (%s)\n", what, dev, found, PER,
                        bdb_strerror(rc));
        }
        bdb_samples_free(&s);
    }
    int f = bdb_db_flush(db), c = bdb_db_close(db);
    if (f != BDB_OK || c != BDB_OK) {
        t->unusable++;
        print_error("%s: flush %s, close %s\n", what, bdb_strerror(f), bdb_strerror(c));
    }
}

static void test_every_payload_byte(void **state)
{
    (void)state;
    build_base();
    char basewal[512];
    size_t len, nfr;
    frag fr[64];
    uint8_t *orig = load_wal(dirs.base, basewal, sizeof basewal, &len, fr, &nfr);
    assert_true(nfr >= NDEV + 2); /* four batches, the two settings */
    uint8_t *base = malloc(len), *m = malloc(len);
    memcpy(base, orig, len);
    tally t;
    memset(&t, 0, sizeof t);
    /* undamaged: everything there, nothing skipped */
    sw_fresh_work(&dirs);
    check(-1, &t, "undamaged");
    assert_int_equal(t.skipped + t.lost + t.open_failed, 0);
    size_t payload = 0;
    char what[96];
    for (size_t r = 0; r < nfr; r++) {
        for (size_t i = 0; i < fr[r].len; i++) {
            for (int k = 0; k < 2; k++) {
                memcpy(m, base, len);
                uint8_t *b = m + fr[r].pos + HDR + i;
                *b = k ? 0xff : (uint8_t)(*b + 1);
                if (*b == base[fr[r].pos + HDR + i])
                    continue;
                fix_crc(m, &fr[r]);
                sw_fresh_work(&dirs);
                char wal[512];
                snprintf(wal, sizeof wal, "%s%s", dirs.work, basewal + strlen(dirs.base));
                put_wal(wal, m, len);
                snprintf(what, sizeof what, "record %zu byte %zu %s", r, i, k ? "0xff" : "+1");
                /* records past the batches are the settings: all batches must stay */
                check(r < NDEV ? (int)r : -1, &t, what);
            }
        }
        payload += fr[r].len;
    }
    printf("wal record sweep figures: records %zu, payload bytes %zu, damaged WALs %llu, "
           "records skipped as undecodable %llu, failed to open %llu, neighbours' samples "
           "lost %llu, unusable %llu\n",
           nfr, payload, (unsigned long long)t.runs - 1, (unsigned long long)t.skipped,
           (unsigned long long)t.open_failed, (unsigned long long)t.lost,
           (unsigned long long)t.unusable);
    fflush(stdout);
    free(base);
    free(m);
    assert_int_equal(t.open_failed, 0);
    assert_int_equal(t.lost, 0);
    assert_int_equal(t.unusable, 0);
    assert_true(t.skipped > 0); /* the decoder's checks did refuse records */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate_setup_teardown(test_every_payload_byte, sw_setup, sw_teardown,
                                                 &dirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
