/* Tier files (docs/formats/tier.md) rebuilt field by field, every CRC right, so that
 * each check of the loader is what rejects them.
 *
 * Versions 1 and 2 (read only to be rewritten as version 5 at open): a version 1 file
 * of two series, made here with the version 1 window encoding, re-encoded with one
 * change at a time: header fields (version 2 with its flags byte: the known flag,
 * none, an unknown one; an empty tenant or one with a NUL; a resolution or file window
 * that does not fit), a file cut after its header, index counts and offsets that do
 * not describe the records, a series twice, a record naming another series than its
 * index entry, holding a byte after its windows or one byte too few, index names
 * with a NUL. Documented outcome: a file without a change (v1, and v2 with the known
 * flag, and a file of one record) is rewritten as version 5 and served with the same
 * windows; any other is quarantined at open, never read, and the engine
 * serves the rest.
 *
 * Versions 3 and 5: the flushed file (version 5) re-encoded with one change at a time:
 * as version 3 with its sketches in form C1 (served), version 4 (refused), an unknown flag,
 * a metric table unsorted or with a NUL in a name, devices unsorted, twice or with a
 * NUL in a name (empty names are accepted, as in version 1), a series
 * whose metric id is past the table or not increasing, of length 0 or past its
 * record, a record length that does not reach its neighbour or holds only the CRC,
 * metric or device counts past what the index holds, a byte after the index. The same outcome: the
 * unchanged file is served, every other one quarantined. A record that changes on disk after open
 * (cut short, or a byte flipped) makes the tier read fail with BDB_ERR_CORRUPT instead of answering
 * wrong numbers. */
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
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static char tmpdir[64], datadir[128], tierpath[1024];
static uint8_t *orig; /* a version 1 file of the same windows (make_v1) */
static size_t norig;
static uint8_t *cur; /* the version 5 file the flush wrote */
static size_t ncur;

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

/* A fresh directory with 1h tier windows of d1 and d2 (temp) in one flush; tierpath
 * is its 1h tier file (the 1m tier is derived from raw data, not stored by a flush). */
static void build(void)
{
    tu_rm_rf(datadir);
    bdb_db *db = open_db();
    bdb_batch *b = bdb_batch_new();
    for (int i = 0; i < 6; i++) {
        const char *dev = i % 2 ? "d1" : "d2";
        bdb_batch_begin(b, dev, 2, T0 + i * HOUR, 0);
        bdb_batch_metric(b, "temp", 4, 20.0 + i);
        assert_int_equal(bdb_batch_end(b), 1);
    }
    assert_int_equal(bdb_db_write(db, "acme", b), BDB_OK);
    bdb_batch_free(b);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tiers/1h", datadir);
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

static void read_cur(void)
{
    FILE *f = fopen(tierpath, "rb");
    assert_non_null(f);
    ncur = fread(cur, 1, 1 << 20, f);
    fclose(f);
    assert_true(ncur > 45 && ncur < (1 << 20));
}

static void make_v1(void);

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmpdir, sizeof tmpdir, "tfedge", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* quarantines are expected */
    build();
    orig = malloc(1 << 20);
    cur = malloc(1 << 20);
    read_cur();
    make_v1();
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    free(orig);
    free(cur);
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

/* The windows build() writes, as a version 1 file of the same header fields (read from
 * the flushed file): two records, d1/temp and d2/temp, of three one-reading minutes. */
static void make_v1(void)
{
    size_t pos = 8 + 4;
    uint8_t res = cur[pos++];
    uint64_t start = u64at(cur + pos), end = u64at(cur + pos + 8);
    uint64_t seq = u64at(cur + pos + 16), upto = u64at(cur + pos + 24);
    bdb_buf b, idx;
    bdb_buf_init(&b);
    bdb_buf_init(&idx);
    bdb_buf_append(&b, "BDBTIER1", 8);
    bdb_buf_put_u32le(&b, 1);
    bdb_buf_putc(&b, res);
    bdb_buf_put_u64le(&b, start);
    bdb_buf_put_u64le(&b, end);
    bdb_buf_put_u64le(&b, seq);
    bdb_buf_put_u64le(&b, upto);
    bdb_buf_put_str(&b, "acme", 4);
    bdb_buf_put_uvarint(&b, 0);
    bdb_buf_put_u32le(&b, (uint32_t)crc32(0L, b.data, (uInt)b.len));
    bdb_buf_put_uvarint(&idx, 2);
    for (int d = 1; d <= 2; d++) {
        const char *dev = d == 1 ? "d1" : "d2";
        bdb_rollup r;
        bdb_rollup_init(&r, HOUR);
        for (int i = d == 1 ? 1 : 0; i < 6; i += 2)
            assert_int_equal(bdb_rollup_add(&r, T0 + i * HOUR, 20.0 + i), BDB_OK);
        size_t off = b.len;
        bdb_buf_put_str(&b, dev, 2);
        bdb_buf_put_str(&b, "temp", 4);
        assert_int_equal(bdb_rollup_write(&r, (int64_t)start, (int64_t)end, &b), 3);
        bdb_buf_put_u32le(&b, (uint32_t)crc32(0L, b.data + off, (uInt)(b.len - off)));
        bdb_buf_put_str(&idx, dev, 2);
        bdb_buf_put_str(&idx, "temp", 4);
        bdb_buf_put_uvarint(&idx, off);
        bdb_buf_put_uvarint(&idx, b.len - off);
        bdb_rollup_free(&r);
    }
    uint64_t ioff = b.len;
    bdb_buf_append(&b, idx.data, idx.len);
    bdb_buf_put_u64le(&b, ioff);
    bdb_buf_put_u64le(&b, idx.len);
    bdb_buf_put_u32le(&b, (uint32_t)crc32(0L, idx.data, (uInt)idx.len));
    bdb_buf_append(&b, "BDTE", 4);
    memcpy(orig, b.data, b.len);
    norig = b.len;
    bdb_buf_free(&b);
    bdb_buf_free(&idx);
}

enum change {
    SAME,         /* re-encoded unchanged: served */
    V2_REPLACES,  /* version 2, flags = TF_REPLACES: served */
    V2_NOFLAG,    /* version 2, flags 0 (not canonical) */
    V2_UNKNOWN,   /* version 2, an unknown flag */
    VERSION6,     /* an unknown version */
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
    ONE_REC,      /* a file of d1's record alone: served */
    NINPUTS_HUGE, /* more inputs than the header has bytes */
    REC_NAME,     /* d1's record names device "dX" (the index says d1) */
    REC_TRAILING, /* a byte after d1's windows, inside its CRC */
    REC_WIN_CUT,  /* d1's windows one byte short */
    REC_SHORT,    /* an index length of 3 for d1's record */
    IDX_DEV_NUL,  /* a NUL in a device name of the index */
    IDX_MET_NUL,  /* a NUL in a metric name of the index */
    NCHANGES
};

/* Record k of the original, changed by c, appended to out with a new CRC. */
static void put_record(const uint8_t *r, uint64_t len, int k, enum change c, bdb_buf *out)
{
    size_t pos = 0, at = out->len;
    uint64_t dl = uvar(r, &pos);
    const uint8_t *dn = r + pos;
    pos += dl;
    uint64_t ml = uvar(r, &pos);
    const uint8_t *mn = r + pos;
    pos += ml;
    if (c == REC_NAME && k == 0)
        bdb_buf_put_str(out, "dX", 2);
    else
        bdb_buf_put_str(out, (const char *)dn, dl);
    bdb_buf_put_str(out, (const char *)mn, ml);
    size_t wl = len - 4 - pos;
    bdb_buf_append(out, r + pos, c == REC_WIN_CUT && k == 0 ? wl - 1 : wl);
    if (c == REC_TRAILING && k == 0)
        bdb_buf_putc(out, 0);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data + at, (uInt)(out->len - at)));
}

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
    bdb_buf_put_u32le(out, c == VERSION6 ? 6 : v2 ? 2 : 1);
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
    bdb_buf_put_uvarint(out, c == NINPUTS_HUGE ? 1000000 : 0);
    if (v2)
        bdb_buf_putc(out, c == V2_REPLACES ? 1 : c == V2_NOFLAG ? 0 : 4);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data, (uInt)out->len));
    if (c == CUT)
        return out->len;
    if (c == OFF_GAP)
        bdb_buf_putc(out, 0);
    uint64_t noff[3], nlen[3];
    for (int k = 0; k < (c == ONE_REC ? 1 : 2); k++) {
        noff[k] = out->len;
        put_record(orig + e[k].off, e[k].len, k, c, out);
        nlen[k] = out->len - noff[k];
    }
    noff[2] = out->len;
    nlen[2] = e[0].len;
    if (c == TWICE)
        bdb_buf_append(out, orig + e[0].off, e[0].len);
    /* index */
    bdb_buf idx;
    bdb_buf_init(&idx);
    uint64_t n = c == NREC_HUGE ? 1000000 : c == NREC_LESS || c == ONE_REC ? 1 : c == TWICE ? 3 : 2;
    bdb_buf_put_uvarint(&idx, n);
    for (uint64_t i = 0; i < (c == TWICE ? 3u : c == NREC_LESS || c == ONE_REC ? 1u : 2u); i++) {
        int k = i == 2 ? 0 : (int)i;
        uint64_t off = noff[i];
        if (c == OFF_GAP && i == 0)
            off = noff[0] - 1; /* claims the gap byte */
        if (c == IDX_DEV_NUL && i == 0)
            bdb_buf_put_str(&idx, "d\0", 2);
        else
            bdb_buf_put_str(&idx, (const char *)e[k].d, e[k].dl);
        if (c == IDX_MET_NUL && i == 0)
            bdb_buf_put_str(&idx, "te\0p", 4);
        else
            bdb_buf_put_str(&idx, (const char *)e[k].m, e[k].ml);
        bdb_buf_put_uvarint(&idx, off);
        bdb_buf_put_uvarint(&idx, c == REC_SHORT && i == 0 ? 3 : nlen[i]);
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

/* The 1h windows of dev/temp the engine serves. */
static size_t windows(bdb_db *db, const char *dev, int *rc)
{
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, HOUR);
    *rc = bdb_db_tier_read(db, "acme", dev, m, 1, BDB_RES_1H, T0, T0 + BDB_MS_DAY, &r);
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
        if (c == SAME || c == V2_REPLACES || c == ONE_REC) {
            assert_int_equal(ts.quarantined, 0);
            assert_true(n1 == 3 && n2 == (c == ONE_REC ? 0 : 3));
            read_cur(); /* rewritten in place as version 5 */
            assert_int_equal(cur[8], 5);
        } else {
            if (ts.quarantined != 1)
                fail_msg("change %d: not quarantined", c);
            assert_true(n1 == 0 && n2 == 0); /* never read */
        }
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
    bdb_buf_free(&b);
}

enum change3 {
    V3_SAME,         /* re-encoded unchanged: served */
    V3_FLAG,         /* an unknown flag */
    V3_MET_UNSORTED, /* metric table "temp", "aaa" */
    V3_MET_NUL,      /* a metric name with a NUL in it */
    V3_DEV_UNSORTED, /* records and index d2 before d1 */
    V3_DEV_TWICE,    /* d1's record twice */
    V3_DEV_NUL,      /* a device name with a NUL in it */
    V3_BAD_ID,       /* a series' metric id past the table */
    V3_ID_TWICE,     /* one series twice in a record */
    V3_NO_SERIES,    /* a record of nothing but its CRC */
    V3_TRAILING,     /* a byte after the last index entry */
    V3_CUT,          /* nothing after the header */
    V3_NMET_HUGE,    /* a metric count far above what the index can hold */
    V3_NDEV_HUGE,    /* a device count far above what the index can hold */
    V3_REC_LEN4,     /* an index length of 4 for d1's record (its CRC alone) */
    V3_SERIES_EMPTY, /* a series of length 0 */
    V3_SERIES_LONG,  /* a series longer than its record */
    V3_FORM_C1,      /* version 3 with its windows' sketches in form C1: served */
    V3_VERSION4,     /* version 4 (an unreleased experiment): unknown */
    NCHANGES3
};

/* The flushed version 5 file (two devices, one metric) re-encoded with change c. */
static void rebuild3(enum change3 c, bdb_buf *out)
{
    size_t pos = 8 + 4 + 1 + 32;
    uint64_t tl = uvar(cur, &pos);
    pos += tl;
    assert_int_equal(uvar(cur, &pos), 0); /* no inputs */
    assert_int_equal(cur[pos], 0);        /* no flags */
    size_t hlen = pos + 1 + 4;
    uint64_t ioff = u64at(cur + ncur - 24), ilen = u64at(cur + ncur - 16);
    size_t ip = ioff;
    assert_int_equal(uvar(cur, &ip), 1);
    assert_int_equal(uvar(cur, &ip), 4);
    assert_memory_equal(cur + ip, "temp", 4);
    ip += 4;
    assert_int_equal(uvar(cur, &ip), 2);
    const uint8_t *rec[2];
    uint64_t rlen[2];
    size_t off = hlen;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(uvar(cur, &ip), 2);
        assert_memory_equal(cur + ip, i ? "d2" : "d1", 2);
        ip += 2;
        rlen[i] = uvar(cur, &ip);
        rec[i] = cur + off;
        off += rlen[i];
    }
    assert_int_equal(ip, ioff + ilen);
    assert_int_equal(off, ioff);
    bdb_buf_reset(out);
    bdb_buf_append(out, cur, hlen - 5);
    assert_int_equal(out->data[8], 5); /* the version the engine writes */
    if (c == V3_FORM_C1 || c == V3_VERSION4)
        out->data[8] = c == V3_FORM_C1 ? 3 : 4;
    bdb_buf_putc(out, c == V3_FLAG ? 4 : 0); /* bits 0 and 1 are REPLACES and KEPT */
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data, (uInt)out->len));
    if (c == V3_CUT)
        return;
    /* records: each one's series bytes (without the CRC), changed, then a new CRC */
    int order[3] = {0, 1, -1};
    if (c == V3_DEV_UNSORTED)
        order[0] = 1, order[1] = 0;
    if (c == V3_DEV_TWICE)
        order[1] = 0, order[2] = 1;
    uint64_t nlen[3];
    int n = order[2] >= 0 ? 3 : 2;
    for (int k = 0; k < n; k++) {
        const uint8_t *r = rec[order[k]];
        size_t len = rlen[order[k]] - 4, at = out->len;
        assert_int_equal(r[0], 0); /* the series of metric id 0 */
        int own = k == 0 && (c == V3_NO_SERIES || c == V3_SERIES_EMPTY || c == V3_SERIES_LONG);
        if (c == V3_BAD_ID && k == 0)
            bdb_buf_putc(out, 1);
        else if (!(c == V3_NO_SERIES && k == 0))
            bdb_buf_putc(out, 0);
        if (c == V3_FORM_C1) { /* the same windows, their sketches in form C1 */
            size_t wp = 1;
            uint64_t wl = uvar(r, &wp);
            int64_t base = bdb_floor_div((int64_t)u64at(cur + 13), HOUR);
            bdb_rollup w;
            bdb_rollup_init(&w, HOUR);
            bdb_dec d;
            bdb_dec_init(&d, r + wp, wl);
            assert_int_equal(
                bdb_rollup_read_c(&w, &d, BDB_C2, base, INT64_MIN / 2, INT64_MAX / 2, 0, NULL),
                BDB_OK);
            bdb_buf wb;
            bdb_buf_init(&wb);
            assert_int_equal(
                bdb_rollup_write_c(&w, INT64_MIN / 2, INT64_MAX / 2, base, BDB_C1, &wb), 3);
            assert_true(wb.len > wl); /* C1 spends a byte more on each one-reading sketch */
            bdb_buf_put_uvarint(out, wb.len);
            bdb_buf_append(out, wb.data, wb.len);
            bdb_buf_free(&wb);
            bdb_rollup_free(&w);
        } else if (!own) {
            bdb_buf_append(out, r + 1, len - 1);
        }
        if (c == V3_SERIES_EMPTY && k == 0)
            bdb_buf_putc(out, 0);
        if (c == V3_SERIES_LONG && k == 0) {
            bdb_buf_put_uvarint(out, 1000);
            bdb_buf_append(out, "xxxx", 4);
        }
        if (c == V3_ID_TWICE && k == 0)
            bdb_buf_append(out, r, len);
        bdb_buf_put_u32le(out, (uint32_t)crc32(0L, out->data + at, (uInt)(out->len - at)));
        nlen[k] = out->len - at;
    }
    bdb_buf idx;
    bdb_buf_init(&idx);
    if (c == V3_MET_UNSORTED) {
        bdb_buf_put_uvarint(&idx, 2);
        bdb_buf_put_str(&idx, "temp", 4);
        bdb_buf_put_str(&idx, "aaa", 3);
    } else if (c == V3_MET_NUL) {
        bdb_buf_put_uvarint(&idx, 1);
        bdb_buf_put_str(&idx, "te\0p", 4);
    } else {
        bdb_buf_put_uvarint(&idx, c == V3_NMET_HUGE ? 1000000 : 1);
        bdb_buf_put_str(&idx, "temp", 4);
    }
    bdb_buf_put_uvarint(&idx, c == V3_NDEV_HUGE ? 1000000 : (uint64_t)n);
    for (int k = 0; k < n; k++) {
        if (c == V3_DEV_NUL && k == 0)
            bdb_buf_put_str(&idx, "d\0", 2);
        else
            bdb_buf_put_str(&idx, order[k] ? "d2" : "d1", 2);
        bdb_buf_put_uvarint(&idx, c == V3_REC_LEN4 && k == 0 ? 4 : nlen[k]);
    }
    if (c == V3_TRAILING)
        bdb_buf_putc(&idx, 0);
    uint64_t nioff = out->len;
    bdb_buf_append(out, idx.data, idx.len);
    bdb_buf_put_u64le(out, nioff);
    bdb_buf_put_u64le(out, idx.len);
    bdb_buf_put_u32le(out, (uint32_t)crc32(0L, idx.data, (uInt)idx.len));
    bdb_buf_append(out, "BDTE", 4);
    bdb_buf_free(&idx);
}

static void test_rebuilt_v3_files(void **st)
{
    (void)st;
    bdb_buf b;
    bdb_buf_init(&b);
    for (int c = 0; c < NCHANGES3; c++) {
        build();
        read_cur();
        rebuild3((enum change3)c, &b);
        if (c == V3_SAME) {
            assert_int_equal(b.len, ncur);
            assert_memory_equal(b.data, cur, ncur); /* the test's encoder is right */
        }
        put_file(&b);
        bdb_db *db = open_db();
        bdb_tier_stats ts;
        bdb_db_tier_get_stats(db, &ts);
        int rc;
        size_t n1 = windows(db, "d1", &rc);
        assert_int_equal(rc, BDB_OK);
        size_t n2 = windows(db, "d2", &rc);
        assert_int_equal(rc, BDB_OK);
        if (c == V3_SAME || c == V3_FORM_C1) {
            assert_int_equal(ts.quarantined, 0);
            assert_true(n1 == 3 && n2 == 3);
        } else {
            if (ts.quarantined != 1)
                fail_msg("v3 change %d: not quarantined", c);
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
            read_cur();
            uint64_t ioff = u64at(cur + ncur - 24);
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

/* ---- the rewrite of a version 1 file fails: nothing is served from a half-loaded
 * set of tier files (the read answers an error), the old file stays as it was, and a
 * later read, with the disk or memory back, loads and rewrites it */

static int tier_full; /* writes of files under tiers/ fail with ENOSPC */
static struct bdb_vfs_ops tf_ops;
static bdb_vfs tf_vfs = {&tf_ops};

static int tf_pwrite(bdb_file *f, const void *buf, size_t n, uint64_t off)
{
    if (tier_full) {
        errno = ENOSPC;
        return BDB_ERR_NOSPACE;
    }
    return bdb_vfs_posix()->ops->pwrite(f, buf, n, off);
}

static int tf_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    (void)v;
    int rc = bdb_vfs_posix()->ops->open(bdb_vfs_posix(), path, flags, out);
    if (rc == BDB_OK && strstr(path, "/tiers/"))
        (*out)->vfs = &tf_vfs;
    else if (rc == BDB_OK)
        (*out)->vfs = bdb_vfs_posix();
    return rc;
}

static int tier_entries(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tiers/1h", datadir);
    return eu_count_entries(dir);
}

static void test_upgrade_rewrite_fails(void **st)
{
    (void)st;
    tf_ops = *bdb_vfs_posix()->ops;
    tf_ops.open = tf_open;
    tf_ops.pwrite = tf_pwrite;
    build();
    bdb_buf b;
    bdb_buf_init(&b);
    rebuild(SAME, &b);
    put_file(&b);
    bdb_db_opts o;
    eu_opts(&o, datadir, clock_fn, NULL);
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    o.vfs = &tf_vfs;
    tier_full = 1;
    bdb_db *db = eu_open(&o);
    int rc;
    assert_int_equal(windows(db, "d1", &rc), 0);
    assert_int_equal(rc, BDB_ERR_NOMEM); /* the load is retried, not served in part */
    read_cur();
    assert_int_equal(ncur, b.len);
    assert_memory_equal(cur, b.data, b.len); /* the version 1 file untouched */
    assert_int_equal(tier_entries(), 1);     /* and no temporary file left */
    tier_full = 0;
    assert_int_equal(windows(db, "d1", &rc), 3);
    assert_int_equal(rc, BDB_OK);
    read_cur();
    assert_int_equal(cur[8], 5);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    bdb_buf_free(&b);
}

/* Every allocation of the load of a version 1 file fails in turn. */
static void test_upgrade_allocation_failures(void **st)
{
    (void)st;
    bdb_buf b;
    bdb_buf_init(&b);
    uint64_t runs = 0, nomem = 0;
    for (uint64_t nth = 1; nth < 100000; nth++) {
        build();
        rebuild(SAME, &b);
        put_file(&b);
        bdb_db *db = open_db();
        int rc;
        eu_arm(nth);
        size_t n = windows(db, "d1", &rc);
        int hit = eu_disarm(), first = rc;
        assert_true(rc == BDB_OK || rc == BDB_ERR_NOMEM);
        if (rc == BDB_OK) {
            assert_int_equal(n, 3);
        } else { /* what out holds after an error is not an answer: read again */
            assert_int_equal(windows(db, "d1", &rc), 3);
            assert_int_equal(rc, BDB_OK);
        }
        bdb_tier_stats ts;
        bdb_db_tier_get_stats(db, &ts);
        assert_int_equal(ts.quarantined, 0);
        assert_int_equal(windows(db, "d2", &rc), 3);
        read_cur();
        assert_int_equal(cur[8], 5);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!eu_swept(&runs, &nomem, hit, first))
            break;
    }
    bdb_buf_free(&b);
    print_message(
        "version 1 load: %llu allocations failed in turn, %llu reads answered NOMEM, " EU_LEAKS
        "\n",
        (unsigned long long)runs, (unsigned long long)nomem);
    assert_true(nomem > 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rebuilt_files),
        cmocka_unit_test(test_rebuilt_v3_files),
        cmocka_unit_test(test_changed_after_open),
        cmocka_unit_test(test_upgrade_rewrite_fails),
        cmocka_unit_test(test_upgrade_allocation_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
