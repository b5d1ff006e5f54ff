/* Tier files (docs/formats/tier.md) rebuilt field by field from a real one, every
 * CRC right, so that each check of the loader is what rejects them.
 *
 * The test re-encodes a flushed 1-minute tier file with one change at a time: header
 * fields (version 2 with its flags byte: the known flag, none, an unknown one; an
 * empty tenant or one with a NUL; a resolution or file window that does not fit),
 * a file cut after its header, index counts and offsets that do not describe the
 * records, a series twice. Documented outcome: a rebuilt file without a change (v1,
 * and v2 with the known flag) is served exactly as the original; any other is
 * quarantined at open, never read, and the engine serves the rest. A record that
 * changes on disk after open (cut short, or a byte flipped) makes the tier read fail
 * with BDB_ERR_CORRUPT instead of answering wrong numbers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/db.h"
#include "storage/embedded/db_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MIN BDB_MS_MIN
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], datadir[128], tierpath[1024];
static uint8_t *orig;
static size_t norig;

static int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return T0 + BDB_MS_DAY;
}

static bdb_db *open_db(void)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_fn, NULL);
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

/* A fresh directory with 1m tier windows of d1 and d2 (temp) in one flush; tierpath
 * is its 1m tier file. */
static void build(void)
{
    tu_rm_rf(datadir);
    bdb_db *db = open_db();
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 6; i++) {
        const char *dev = i % 2 ? "d1" : "d2";
        bdb_batch_begin(b, dev, 2, T0 + i * MIN, 0);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tiers/1m", datadir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    tierpath[0] = 0;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".tier"))
            snprintf(tierpath, sizeof tierpath, "%s/%s", dir, de->d_name);
    closedir(d);
    assert_true(tierpath[0] != 0);
}

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "tfedge", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* quarantines are expected */
    build();
    FILE *f = fopen(tierpath, "rb");
    assert_non_null(f);
    orig = malloc(1 << 20);
    norig = fread(orig, 1, 1 << 20, f);
    fclose(f);
    assert_true(norig > 45 && norig < (1 << 20));
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    free(orig);
    tu_rm_rf(tmpdir);
    return 0;
}

static uint64_t uvar(const uint8_t *p, size_t *pos)
{
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        uint8_t c = p[(*pos)++];
        v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80))
            break;
    }
    return v;
}

static uint64_t u64at(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

enum change {
    SAME,         /* re-encoded unchanged: served */
    V2_REPLACES,  /* version 2, flags = TF_REPLACES: served */
    V2_NOFLAG,    /* version 2, flags 0 (not canonical) */
    V2_UNKNOWN,   /* version 2, an unknown flag */
    VERSION3,     /* an unknown version */
    EMPTY_TENANT, /* tenant "" */
    NUL_TENANT,   /* a NUL inside the tenant */
    BAD_RES,      /* resolution 4 */
    BAD_SPAN,     /* a file window of one hour */
    CUT,          /* nothing after the header */
    NREC_HUGE,    /* an index count far above what the index can hold */
    NREC_LESS,    /* an index listing one record less than the file has */
    OFF_GAP,      /* the first record does not start right after the header */
    TRAILING,     /* a byte after the last index entry */
    TWICE,        /* one series twice (its record repeated) */
    NCHANGES
};

/* The original file re-encoded with change c into out (its length returned). */
static size_t rebuild(enum change c, bdb_buf *out)
{
    /* parse the original */
    size_t pos = 8 + 4;
    uint8_t res = orig[pos++];
    uint64_t start = u64at(orig + pos), end = u64at(orig + pos + 8);
    uint64_t seq = u64at(orig + pos + 16), upto = u64at(orig + pos + 24);
    pos += 32;
    uint64_t tl = uvar(orig, &pos);
    char tenant[64];
    assert_true(tl < sizeof tenant);
    memcpy(tenant, orig + pos, tl);
    pos += tl;
    assert_int_equal(uvar(orig, &pos), 0); /* no inputs */
    size_t hlen = pos + 4;
    uint64_t ioff = u64at(orig + norig - 24), ilen = u64at(orig + norig - 16);
    size_t ip = ioff;
    uint64_t nrec = uvar(orig, &ip);
    assert_true(nrec == 2);
    struct {
        const uint8_t *d, *m;
        uint64_t dl, ml, off, len;
    } e[2];
    for (uint64_t i = 0; i < nrec; i++) {
        e[i].dl = uvar(orig, &ip);
        e[i].d = orig + ip;
        ip += e[i].dl;
        e[i].ml = uvar(orig, &ip);
        e[i].m = orig + ip;
        ip += e[i].ml;
        e[i].off = uvar(orig, &ip);
        e[i].len = uvar(orig, &ip);
    }
    assert_int_equal(ip, ioff + ilen);
    /* header */
    bdb_buf_reset(out);
    bdb_buf_append(out, "BDBTIER1", 8);
    int v2 = c == V2_REPLACES || c == V2_NOFLAG || c == V2_UNKNOWN;
    bdb_buf_put_u32le(out, c == VERSION3 ? 3 : v2 ? 2 : 1);
    bdb_buf_putc(out, c == BAD_RES ? 4 : res);
    bdb_buf_put_u64le(out, start);
    bdb_buf_put_u64le(out, c == BAD_SPAN ? start + 3600000 : end);
    bdb_buf_put_u64le(out, seq);
    bdb_buf_put_u64le(out, upto);
    if (c == EMPTY_TENANT)
        bdb_buf_put_str(out, "", 0);
    else if (c == NUL_TENANT)
        bdb_buf_put_str(out, "ac\0me", 5);
    else
        bdb_buf_put_str(out, tenant, tl);
    bdb_buf_put_uvarint(out, 0);
    if (v2)
        bdb_buf_putc(out, c == V2_REPLACES ? 1 : c == V2_NOFLAG ? 0 : 4);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data, (uInt)out->len));
    if (c == CUT)
        return out->len;
    if (c == OFF_GAP)
        bdb_buf_putc(out, 0);
    size_t shift = out->len - hlen;
    bdb_buf_append(out, orig + hlen, ioff - hlen);
    if (c == TWICE)
        bdb_buf_append(out, orig + e[0].off, e[0].len);
    /* index */
    bdb_buf idx;
    bdb_buf_init(&idx);
    uint64_t n = c == NREC_HUGE ? 1000000 : c == NREC_LESS ? 1 : c == TWICE ? 3 : 2;
    bdb_buf_put_uvarint(&idx, n);
    for (uint64_t i = 0; i < (c == TWICE ? 3u : c == NREC_LESS ? 1u : 2u); i++) {
        int k = i == 2 ? 0 : (int)i;
        uint64_t off = i == 2 ? ioff + shift : e[k].off + shift;
        if (c == OFF_GAP && i == 0)
            off = e[k].off + shift - 1; /* claims the gap byte */
        bdb_buf_put_str(&idx, (const char *)e[k].d, e[k].dl);
        bdb_buf_put_str(&idx, (const char *)e[k].m, e[k].ml);
        bdb_buf_put_uvarint(&idx, off);
        bdb_buf_put_uvarint(&idx, e[k].len);
    }
    if (c == TRAILING)
        bdb_buf_putc(&idx, 0);
    uint64_t nioff = out->len;
    bdb_buf_append(out, idx.data, idx.len);
    bdb_buf_put_u64le(out, nioff);
    bdb_buf_put_u64le(out, idx.len);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, idx.data, (uInt)idx.len));
    bdb_buf_append(out, "BDTE", 4);
    bdb_buf_free(&idx);
    return out->len;
}

static void put_file(const bdb_buf *b)
{
    FILE *f = fopen(tierpath, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
    fclose(f);
}

/* The 1m windows of dev/temp the engine serves. */
static size_t windows(bdb_db *db, const char *dev, int *rc)
{
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    *rc = bdb_db_tier_read(db, "acme", dev, m, 1, BDB_RES_1M, T0, T0 + BDB_MS_HOUR, &r);
    size_t n = r.n;
    for (size_t i = 0; i < r.n; i++)
        assert_int_equal(bdb_stats_count(&r.w[i].st), 1);
    bdb_rollup_free(&r);
    return n;
}

static void test_rebuilt_files(void **st)
{
    (void)st;
    bdb_buf b;
    bdb_buf_init(&b);
    for (int c = 0; c < NCHANGES; c++) {
        build();
        rebuild((enum change)c, &b);
        if (c == SAME)
            assert_memory_equal(b.data, orig, norig); /* the test's encoder is right */
        put_file(&b);
        bdb_db *db = open_db();
        bdb_tier_stats ts;
        bdb_db_tier_get_stats(db, &ts);
        int rc;
        size_t n1 = windows(db, "d1", &rc);
        assert_int_equal(rc, BDB_OK);
        size_t n2 = windows(db, "d2", &rc);
        assert_int_equal(rc, BDB_OK);
        if (c == SAME || c == V2_REPLACES) {
            assert_int_equal(ts.quarantined, 0);
            assert_true(n1 == 3 && n2 == 3);
        } else {
            if (ts.quarantined != 1)
                fail_msg("change %d: not quarantined", c);
            assert_true(n1 == 0 && n2 == 0); /* never read */
        }
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
    bdb_buf_free(&b);
}

/* A record changed under the engine after open: the read fails, never wrong numbers. */
static void test_changed_after_open(void **st)
{
    (void)st;
    for (int mode = 0; mode < 2; mode++) {
        build();
        bdb_db *db = open_db();
        int rc;
        assert_int_equal(windows(db, "d1", &rc), 3);
        assert_int_equal(rc, BDB_OK);
        if (mode == 0) {
            assert_int_equal(truncate(tierpath, 60), 0); /* inside the first record */
        } else {
            int fd = open(tierpath, O_RDWR);
            assert_true(fd >= 0);
            uint64_t ioff = u64at(orig + norig - 24);
            uint8_t x;
            assert_int_equal(pread(fd, &x, 1, (off_t)ioff - 8), 1);
            x ^= 0x10; /* inside the last record, before its CRC */
            assert_int_equal(pwrite(fd, &x, 1, (off_t)ioff - 8), 1);
            close(fd);
        }
        int rc1, rc2;
        windows(db, "d1", &rc1);
        windows(db, "d2", &rc2);
        assert_true(rc1 == BDB_ERR_CORRUPT || rc2 == BDB_ERR_CORRUPT);
        assert_true(rc1 == BDB_OK || rc1 == BDB_ERR_CORRUPT);
        assert_true(rc2 == BDB_OK || rc2 == BDB_ERR_CORRUPT);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebuilt_files),
        cmocka_unit_test(test_changed_after_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
