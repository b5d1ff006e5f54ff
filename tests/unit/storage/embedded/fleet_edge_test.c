/* db_fleet at its edges (background = 0: every flush explicit), each fleet window
 * compared with an exact computation over what was written.
 *
 * Covered: the argument errors of the fleet reader; several writes of one time in the
 * head (the newest counts once, in fleet and tier reads); the list of windows late
 * data recomputed (<data>/fleet/dirty): recorded by a flush, kept across reopen, read
 * from a file built to the documented layout, and ignored (logged) when damaged in
 * any of its checks; names in the fleet and tier directories the engine must skip,
 * delete (.tmp) or quarantine (a file too short, a file in the wrong resolution's
 * directory); an input of a compaction that survived a crash between the merged
 * file's rename and the unlinks (dropped as superseded at open, counted once);
 * compaction of files holding different tenants and metrics; the configured tier
 * retention of fleet files (a number of ms, or negative: forever). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/tier/db_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define MIN BDB_MS_MIN
#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define MAXW 4096

static char tmpdir[64], datadir[128];
static int64_t fake_now;
static int64_t tier_ret[3];

/* what was written, newest value per (tenant, device, metric, time) */
struct wr {
    char tn[8], dev[8], metric[8];
    int64_t ts;
    double v;
};
static struct wr w[MAXW];
static size_t nw;

static int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: every flush fsyncs */
    eu_scratch(tmpdir, sizeof tmpdir, "fedge", EU_TMPFS, datadir, sizeof datadir);
    bdb_log_set_level(BDB_LOG_ERROR);
    fake_now = T0 + 2 * DAY;
    memset(tier_ret, 0, sizeof tier_ret);
    nw = 0;
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_db(void)
{
    bdb_db_opts o;
    eu_opts(&o, datadir, eu_clock, &fake_now);
    o.late_threshold_ms = HOUR;
    memcpy(o.tier_retention_ms, tier_ret, sizeof tier_ret);
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    return eu_open(&o);
}

static void put(bdb_db *db, const char *tn, const char *dev, const char *metric, int64_t ts,
                double v)
{
    eu_put(db, tn, dev, metric, ts, v, 0);
    for (size_t i = 0; i < nw; i++)
        if (w[i].ts == ts && !strcmp(w[i].tn, tn) && !strcmp(w[i].dev, dev) &&
            !strcmp(w[i].metric, metric)) {
            w[i].v = v;
            return;
        }
    assert_true(nw < MAXW);
    struct wr *x = &w[nw++];
    snprintf(x->tn, sizeof x->tn, "%s", tn);
    snprintf(x->dev, sizeof x->dev, "%s", dev);
    snprintf(x->metric, sizeof x->metric, "%s", metric);
    x->ts = ts;
    x->v = v;
}

/* Fleet windows of (tn, metric) at res over [from, to) that differ from what was
 * written (devices, readings, min, max, mean), plus windows nothing was written in. */
static size_t fleet_diff(bdb_db *db, const char *tn, const char *metric, enum bdb_res res,
                         int64_t from, int64_t to)
{
    int64_t wd = bdb_res_width(res);
    bdb_fleet f;
    bdb_fleet_init(&f, wd);
    assert_int_equal(bdb_db_fleet_read(db, tn, metric, res, from, to, &f), BDB_OK);
    size_t bad = 0, seen = 0;
    for (int64_t s = bdb_align_down(from, wd); s < to; s += wd) {
        long double sum = 0;
        uint64_t n = 0, devs = 0;
        double mn = INFINITY, mx = -INFINITY;
        for (size_t i = 0; i < nw; i++) {
            if (w[i].ts < s || w[i].ts >= s + wd || strcmp(w[i].tn, tn) ||
                strcmp(w[i].metric, metric))
                continue;
            int first = 1;
            for (size_t k = 0; k < i && first; k++)
                first = !(w[k].ts >= s && w[k].ts < s + wd && !strcmp(w[k].tn, tn) &&
                          !strcmp(w[k].metric, metric) && !strcmp(w[k].dev, w[i].dev));
            devs += first;
            sum += w[i].v;
            n++;
            mn = fmin(mn, w[i].v);
            mx = fmax(mx, w[i].v);
        }
        const bdb_fleet_win *fw = bdb_fleet_find(&f, s);
        if (!n) {
            bad += fw != NULL;
            continue;
        }
        seen++;
        if (!fw) {
            bad++;
            continue;
        }
        bdb_fleet_row r;
        bdb_fleet_row_of(&f, fw, &r);
        double mean = (double)(sum / n);
        bad += !(r.devices == devs && r.readings == n && r.min == mn && r.max == mx &&
                 fabs(r.avg - mean) <= 1e-12 * fabs(mean) + 1e-12);
    }
    bad += f.n != seen;
    bdb_fleet_free(&f);
    return bad;
}

static size_t fleet_diff_all(bdb_db *db, const char *tn, const char *metric)
{
    return fleet_diff(db, tn, metric, BDB_RES_1H, T0, T0 + 3 * DAY) +
           fleet_diff(db, tn, metric, BDB_RES_1D, T0, T0 + 3 * DAY);
}

static void write_base(bdb_db *db)
{
    for (int64_t t = T0; t < T0 + 2 * DAY; t += 7 * MIN) {
        put(db, "t1", "a", "temp", t, (double)((t / MIN) % 41));
        put(db, "t1", "b", "temp", t + 1000, (double)((t / MIN) % 13) - 4);
    }
}

static void test_invalid_and_head_rewrites(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR);
    assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1M, T0, T0 + DAY, &f),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1H, T0, T0, &f), BDB_ERR_INVALID);
    assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1D, T0, T0 + DAY, &f),
                     BDB_ERR_INVALID); /* out has the 1h width */
    bdb_fleet_free(&f);
    /* one time written three times in the head: the newest counts, once */
    for (int k = 0; k < 3; k++) {
        put(db, "t1", "a", "temp", T0 + 5000, 10.0 * k);
        put(db, "t1", "a", "temp", T0 + 9000 + k, 1.0 * k);
    }
    put(db, "t1", "a", "temp", T0 + 5000 - MIN, -1); /* older: a side list */
    put(db, "t1", "a", "temp", T0 + 5000, 99);
    assert_int_equal(fleet_diff_all(db, "t1", "temp"), 0);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "a", m, 1, BDB_RES_1M, T0 - HOUR, T0 + HOUR, &r),
                     BDB_OK);
    assert_int_equal(r.n, 2);
    assert_int_equal(bdb_stats_count(&r.w[1].st), 4);
    assert_true(bdb_stats_max(&r.w[1].st) == 99);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(fleet_diff_all(db, "t1", "temp"), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void path_of(char *out, size_t n, const char *rel)
{
    snprintf(out, n, "%s/%s", datadir, rel);
}

static void write_bytes(const char *rel, const void *p, size_t n)
{
    char path[512];
    path_of(path, sizeof path, rel);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static int exists(const char *rel)
{
    char path[512];
    struct stat sb;
    path_of(path, sizeof path, rel);
    return stat(path, &sb) == 0;
}

/* The recorded windows of t1/temp at res in [T0, T0 + 3 days). */
static size_t recorded(bdb_db *db, enum bdb_res res, int64_t **v)
{
    size_t n = 0;
    assert_int_equal(bdb_db_fleet_dirty(db, "t1", "temp", res, T0, T0 + 3 * DAY, v, &n), BDB_OK);
    return n;
}

/* <data>/fleet/dirty as docs/AGGREGATION.md lays it out; bad selects a damage. */
static void dirty_file(int bad)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, bad == 1 ? "BDBFLD02" : "BDBFLD01", 8);
    bdb_buf_put_uvarint(&b, bad == 2 ? 1000 : 2);
    bdb_buf_put_str(&b, "t1", 2);
    bdb_buf_put_str(&b, "temp", 4);
    bdb_buf_putc(&b, bad == 3 ? 1 : 2); /* 1 = 1m: not a fleet resolution */
    bdb_buf_put_varint(&b, T0 + 3 * HOUR);
    bdb_buf_put_str(&b, "t1", 2);
    bdb_buf_put_str(&b, "temp", 4);
    if (bad != 4) { /* 4: the second entry ends early */
        bdb_buf_putc(&b, 3);
        bdb_buf_put_varint(&b, T0 + DAY);
    }
    uint32_t crc = (uint32_t)crc32(0L, b.data, (uInt)b.len);
    bdb_buf_put_u32le(&b, bad == 5 ? crc ^ 1 : crc);
    write_bytes("fleet/dirty", b.data, bad == 6 ? 7 : b.len);
    bdb_buf_free(&b);
}

static void test_dirty_list(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    bdb_db_fleet_attach(db);
    write_base(db);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    int64_t *v = NULL;
    assert_int_equal(recorded(db, BDB_RES_1H, &v), 0);
    free(v);
    /* rewrites of flushed times in hours 2 and 30: recomputed, recorded by the flush */
    put(db, "t1", "a", "temp", T0 + 2 * HOUR + 7 * MIN, 500);
    put(db, "t1", "b", "temp", T0 + 30 * HOUR + 1000, -500);
    assert_int_equal(recorded(db, BDB_RES_1H, &v), 2); /* marked, not recomputed yet */
    free(v);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_true(exists("fleet/dirty"));
    assert_int_equal(recorded(db, BDB_RES_1H, &v), 2);
    assert_true(v[0] == T0 + 2 * HOUR && v[1] == T0 + 30 * HOUR);
    free(v);
    assert_int_equal(recorded(db, BDB_RES_1D, &v), 2);
    free(v);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_db();
    assert_int_equal(recorded(db, BDB_RES_1H, &v), 2); /* kept across reopen */
    free(v);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    /* a list written to the documented layout */
    dirty_file(0);
    db = open_db();
    assert_int_equal(recorded(db, BDB_RES_1H, &v), 1);
    assert_true(v[0] == T0 + 3 * HOUR);
    free(v);
    assert_int_equal(recorded(db, BDB_RES_1D, &v), 1);
    assert_true(v[0] == T0 + DAY);
    free(v);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    /* damaged: the engine opens, fleet reads work, and no window is taken from it */
    for (int bad = 1; bad <= 6; bad++) {
        dirty_file(bad);
        db = open_db();
        size_t n1 = recorded(db, BDB_RES_1H, &v);
        free(v);
        size_t n2 = recorded(db, BDB_RES_1D, &v);
        free(v);
        /* a damaged entry ends the list: the entries before it are kept */
        assert_int_equal(n1 + n2, bad == 4 ? 1 : 0);
        bdb_fleet f;
        bdb_fleet_init(&f, HOUR);
        assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1H, T0, T0 + DAY, &f), BDB_OK);
        assert_true(f.n > 0);
        bdb_fleet_free(&f);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

static int count_in(const char *rel, const char *suffix)
{
    char path[512];
    path_of(path, sizeof path, rel);
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        n += l >= sl && !strcmp(de->d_name + l - sl, suffix);
    }
    closedir(d);
    return n;
}

/* The name of the first file in rel ending in suffix, into out. */
static void first_in(const char *rel, const char *suffix, char *out, size_t n)
{
    char path[512];
    path_of(path, sizeof path, rel);
    DIR *d = opendir(path);
    assert_non_null(d);
    struct dirent *de;
    out[0] = 0;
    size_t sl = strlen(suffix);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > sl && !strcmp(de->d_name + l - sl, suffix) &&
            (!out[0] || strcmp(de->d_name, out) < 0))
            snprintf(out, n, "%s", de->d_name);
    }
    closedir(d);
    assert_true(out[0] != 0);
}

static void copy_rel(const char *from, const char *to)
{
    char a[512], b[512];
    path_of(a, sizeof a, from);
    path_of(b, sizeof b, to);
    eu_copy_file(a, b);
}

/* Names the loaders skip, delete or quarantine, in the fleet and tier directories. */
static void test_directory_names(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    write_base(db);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char name[256], from[300], to[300];
    first_in("fleet/1h", ".fleet", name, sizeof name);
    snprintf(from, sizeof from, "fleet/1h/%s", name);
    snprintf(to, sizeof to, "fleet/1d/%s", "0000000000000099.fleet");
    copy_rel(from, to); /* a 1h file in the 1d directory */
    first_in("tiers/1h", ".tier", name, sizeof name);
    snprintf(from, sizeof from, "tiers/1h/%s", name);
    copy_rel(from, "tiers/1d/0000000000000099.tier"); /* a 1h file in the 1d directory */
    const char *dirs[2] = {"fleet/1h", "tiers/1h"};
    for (int i = 0; i < 2; i++) {
        char rel[300];
        snprintf(rel, sizeof rel, "%s/0000000000000098.tmp", dirs[i]);
        write_bytes(rel, "partial", 7);
        snprintf(rel, sizeof rel, "%s/notes.txt", dirs[i]);
        write_bytes(rel, "hello", 5);
        snprintf(rel, sizeof rel, "%s/.fleet", dirs[i]);
        write_bytes(rel, "x", 1);
        snprintf(rel, sizeof rel, "%s/.tier", dirs[i]);
        write_bytes(rel, "x", 1);
    }
    write_bytes("fleet/1h/0000000000000097.fleet", "BDBFLT", 6); /* too short */
    db = open_db();
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(fs.quarantined, 2);
    assert_int_equal(ts.quarantined, 1);
    assert_true(exists("quarantine/fleet-0000000000000099.fleet"));
    assert_true(exists("quarantine/fleet-0000000000000097.fleet"));
    assert_true(exists("quarantine/tier-0000000000000099.tier"));
    for (int i = 0; i < 2; i++) {
        char rel[300];
        snprintf(rel, sizeof rel, "%s/0000000000000098.tmp", dirs[i]);
        assert_false(exists(rel)); /* never published: deleted */
        snprintf(rel, sizeof rel, "%s/notes.txt", dirs[i]);
        assert_true(exists(rel)); /* not ours: left alone */
    }
    assert_int_equal(fleet_diff_all(db, "t1", "temp"), 0);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, HOUR);
    assert_int_equal(bdb_db_tier_read(db, "t1", "a", m, 1, BDB_RES_1H, T0, T0 + 2 * DAY, &r),
                     BDB_OK);
    assert_int_equal(r.n, 48);
    bdb_rollup_free(&r);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Rewrites the fleet file at rel (version 2, as the engine writes it) as version 1,
 * the records uncompressed; with damage set, keeps version 2 but cuts the end of the
 * zstd frame and recomputes the CRC, so only the frame is wrong (a damaged disk fails
 * the CRC first). */
static void rewrite_fleet_file(const char *rel, int damage)
{
    char path[512];
    path_of(path, sizeof path, rel);
    size_t len;
    uint8_t *p = eu_read_file(path, &len);
    assert_non_null(p);
    bdb_dec d;
    bdb_dec_init(&d, p + 8, len - 8 - 4);
    assert_int_equal(bdb_dec_u32le(&d), 2);
    bdb_dec_u8(&d);
    bdb_dec_varint(&d);
    bdb_dec_varint(&d);
    bdb_dec_u64le(&d);
    bdb_dec_u64le(&d);
    uint64_t nin = bdb_dec_uvarint(&d);
    for (uint64_t i = 0; i < nin; i++)
        bdb_dec_uvarint(&d);
    bdb_dec_uvarint(&d); /* nrec */
    size_t head = (size_t)(d.p - p);
    uint64_t raw = bdb_dec_uvarint(&d);
    size_t zoff = (size_t)(d.p - p), zlen = len - 4 - zoff;
    assert_false(d.err);
    bdb_buf out;
    bdb_buf_init(&out);
    if (damage) {
        bdb_buf_append(&out, p, len - 4 - 3);
    } else {
        uint8_t *body = malloc(raw ? raw : 1);
        assert_non_null(body);
        assert_int_equal(ZSTD_decompress(body, raw, p + zoff, zlen), raw);
        bdb_buf_append(&out, p, head);
        bdb_put_u32le(out.data + 8, 1);
        bdb_buf_append(&out, body, raw);
        free(body);
    }
    bdb_buf_put_u32le(&out, (uint32_t)crc32(0L, out.data, (uInt)out.len));
    write_bytes(rel, out.data, out.len);
    bdb_buf_free(&out);
    free(p);
}

/* Fleet files of version 1 (records not compressed) still answer; a version 2 file
 * whose frame is cut short under a valid CRC is quarantined, not half read. */
static void test_version1_files_read(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    write_base(db);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    const char *dirs[2] = {"fleet/1h", "fleet/1d"};
    for (int i = 0; i < 2; i++) {
        DIR *dp;
        char dir[512];
        path_of(dir, sizeof dir, dirs[i]);
        assert_non_null(dp = opendir(dir));
        struct dirent *de;
        while ((de = readdir(dp)) != NULL) {
            if (!strstr(de->d_name, ".fleet"))
                continue;
            char rel[300];
            snprintf(rel, sizeof rel, "%s/%s", dirs[i], de->d_name);
            rewrite_fleet_file(rel, 0);
        }
        closedir(dp);
    }
    db = open_db();
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.quarantined, 0);
    assert_int_equal(fleet_diff_all(db, "t1", "temp"), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    /* now damage one file of the next flush's */
    db = open_db();
    write_base(db);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    char name[256], rel[300];
    DIR *dp;
    char dir[512];
    path_of(dir, sizeof dir, "fleet/1h");
    assert_non_null(dp = opendir(dir));
    struct dirent *de;
    name[0] = 0;
    while ((de = readdir(dp)) != NULL) { /* the newest: version 2 */
        if (strstr(de->d_name, ".fleet") && strcmp(de->d_name, name) > 0)
            snprintf(name, sizeof name, "%s", de->d_name);
    }
    closedir(dp);
    snprintf(rel, sizeof rel, "fleet/1h/%s", name);
    rewrite_fleet_file(rel, 1);
    db = open_db();
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.quarantined, 1);
    char q[320];
    snprintf(q, sizeof q, "quarantine/fleet-%s", name);
    assert_true(exists(q));
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A crash between a compaction's rename and the unlink of its inputs leaves both: at
 * open the inputs are dropped as superseded (fleet and tier files), counted once. */
static void test_superseded_inputs(void **st)
{
    (void)st;
    bdb_db *db = open_db();
    const char *metrics[3] = {"temp", "rpm", "hum"};
    const char *tns[2] = {"t1", "t2"};
    for (int i = 0; i < 8; i++) { /* eight files of one window, differing records */
        for (int k = 0; k < 5; k++)
            put(db, tns[i % 2], "a", metrics[i % 3], T0 + i * HOUR + k * MIN, i * 10 + k);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    assert_int_equal(count_in("fleet/1h", ".fleet"), 8);
    char keep[256], from[300], to[300];
    first_in("fleet/1h", ".fleet", keep, sizeof keep);
    snprintf(from, sizeof from, "fleet/1h/%s", keep);
    copy_rel(from, "keep.fleet");
    char tkeep[256];
    first_in("tiers/1h", ".tier", tkeep, sizeof tkeep);
    snprintf(from, sizeof from, "tiers/1h/%s", tkeep);
    copy_rel(from, "keep.tier");
    /* the ninth flush: the hook merges the window's eight committed files */
    put(db, "t2", "b", "temp", T0 + 20 * HOUR, 3);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* tier compaction */
    bdb_fleet_file_stats fs;
    bdb_db_fleet_get_stats(db, &fs);
    assert_true(fs.compacted >= 1);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(fleet_diff_all(db, tns[t], metrics[k]), 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    assert_int_equal(count_in("fleet/1h", ".fleet"), 2); /* merged + the ninth */
    snprintf(to, sizeof to, "fleet/1h/%s", keep);
    copy_rel("keep.fleet", to);
    snprintf(to, sizeof to, "tiers/1h/%s", tkeep);
    copy_rel("keep.tier", to);
    db = open_db();
    bdb_db_fleet_get_stats(db, &fs);
    assert_int_equal(fs.discarded, 1);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    assert_int_equal(ts.discarded, 1);
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(fleet_diff_all(db, tns[t], metrics[k]), 0);
    const char *m[1] = {"temp"};
    bdb_rollup r;
    bdb_rollup_init(&r, MIN);
    assert_int_equal(bdb_db_tier_read(db, "t1", "a", m, 1, BDB_RES_1M, T0, T0 + DAY, &r), BDB_OK);
    size_t want = 0;
    for (size_t i = 0; i < nw; i++)
        want += !strcmp(w[i].tn, "t1") && !strcmp(w[i].dev, "a") && !strcmp(w[i].metric, "temp");
    assert_int_equal(r.n, want); /* one sample a minute, each once */
    for (size_t i = 0; i < r.n; i++)
        assert_int_equal(bdb_stats_count(&r.w[i].st), 1);
    bdb_rollup_free(&r);
    assert_false(exists(to)); /* the superseded input is gone */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* The configured retention of the 1h tier applies to 1h fleet files; negative keeps
 * them forever. */
static void test_configured_retention(void **st)
{
    (void)st;
    for (int mode = 0; mode < 2; mode++) {
        tier_ret[1] = mode == 0 ? 10 * DAY : -1;
        fake_now = T0 + 2 * DAY;
        nw = 0;
        tu_rm_rf(datadir);
        bdb_db *db = open_db();
        write_base(db);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        assert_int_equal(fleet_diff_all(db, "t1", "temp"), 0);
        fake_now = T0 + 400 * DAY; /* past 10 days, and past the default 365 days */
        put(db, "t1", "a", "temp", fake_now - HOUR, 1);
        assert_int_equal(bdb_db_flush(db), BDB_OK); /* the hook runs retention */
        bdb_fleet_file_stats fs;
        bdb_db_fleet_get_stats(db, &fs);
        bdb_fleet f;
        bdb_fleet_init(&f, HOUR);
        assert_int_equal(bdb_db_fleet_read(db, "t1", "temp", BDB_RES_1H, T0, T0 + 3 * DAY, &f),
                         BDB_OK);
        if (mode == 0) {
            assert_true(fs.dropped >= 1);
            assert_int_equal(f.n, 0);
        } else {
            assert_int_equal(fs.dropped, 0);
            assert_int_equal(f.n, 48);
        }
        bdb_fleet_free(&f);
        /* the day tier keeps its default (forever) */
        assert_int_equal(fleet_diff(db, "t1", "temp", BDB_RES_1D, T0, T0 + 3 * DAY), 0);
        assert_int_equal(bdb_db_close(db), BDB_OK);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_invalid_and_head_rewrites, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dirty_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_directory_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_superseded_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_version1_files_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_configured_retention, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
