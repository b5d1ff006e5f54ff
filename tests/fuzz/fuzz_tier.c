/* libFuzzer harness for the tier file format (docs/formats/tier.md): tf_parse,
 * tf_read_rec and tf_iter (version 5, what the engine writes, and version 3, which it
 * reads; the seed corpus holds version 3 images) and tf_upgrade (versions 1 and 2,
 * rewritten as version 5 at open). Two modes chosen by the first
 * byte:
 *  - even: the rest of the input is a file image; a version 1 or 2 image is upgraded
 *    first (an upgraded image must parse); if it parses, read every series back
 *    through a real file (bounds, CRC and window decoding), by lookup and by iterator;
 *  - odd: the rest of the input describes series and samples; the harness builds a
 *    (version 5) file with tf_begin/tf_add/tf_finish, requires it to parse and every record to
 *    read back with the same windows (count, min and max bit for bit), then flips one
 *    byte chosen by the input and requires the damaged image to be refused
 *    (every byte of a tier file is covered by a CRC or a bounds check). */
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "fuzz_util.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/embedded/tier/db_tier_int.h"

#include <math.h>

#define MAX_SERIES 8
#define MAX_SAMPLES 256

static void read_all(const uint8_t *img, size_t n, const tfile *t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tier", fz_scratch());
    fz_write_file(path, img, n);
    bdb_file *f;
    FZ_CHECK(bdb_vfs_open(bdb_vfs_posix(), path, BDB_O_RDONLY, &f) == BDB_OK);
    tfile tt = *t;
    tt.f = f;
    for (size_t i = 0; i < t->ndev; i++) {
        for (uint32_t m = 0; m < t->nmet; m++) {
            tloc loc = {i, m};
            bdb_rollup r;
            bdb_rollup_init(&r, bdb_res_width(t->res));
            int rc = tf_read_rec(&tt, &loc, INT64_MIN, INT64_MAX, &r);
            FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
            for (size_t w = 0; rc == BDB_OK && w < r.n; w++)
                FZ_CHECK(r.w[w].start >= t->start && r.w[w].start < t->end);
            bdb_rollup_free(&r);
            /* a query of the middle third: windows before it stepped over, the rest unread */
            int64_t third = (t->end - t->start) / 3;
            bdb_rollup_init(&r, bdb_res_width(t->res));
            rc = tf_read_rec(&tt, &loc, t->start + third, t->end - third, &r);
            FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
            for (size_t w = 0; rc == BDB_OK && w < r.n; w++)
                FZ_CHECK(r.w[w].start >= t->start + third && r.w[w].start < t->end - third);
            bdb_rollup_free(&r);
            tloc found;
            FZ_CHECK(tf_find(t, t->names + t->devs[i].name, t->names + t->mets[m], &found));
            FZ_CHECK(found.dev == i && found.met == m);
        }
    }
    /* the iterator: every series once, in (device, metric) order */
    titer it;
    tf_iter_init(&it, &tt);
    int k;
    size_t seen = 0;
    while ((k = tf_iter_next(&it)) == 1) {
        bdb_rollup r;
        bdb_rollup_init(&r, bdb_res_width(t->res));
        int rc = tf_iter_read(&it, &r);
        FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
        bdb_rollup_free(&r);
        FZ_CHECK(++seen <= t->ndev * t->nmet);
    }
    FZ_CHECK(k == 0);
    tf_iter_free(&it);
    bdb_file_close(f);
}

static void parse_raw(const uint8_t *p, size_t n)
{
    tfile t;
    const char *why = NULL;
    uint32_t ver = tf_version(p, n);
    if (ver == TIER_VERSION || ver == TIER_VERSION_FLAGS) {
        bdb_buf up;
        bdb_buf_init_checked(&up);
        int urc = tf_upgrade(p, n, &up, &why);
        FZ_CHECK(urc == BDB_OK || urc == BDB_ERR_CORRUPT);
        if (urc != BDB_OK) {
            FZ_CHECK(why && *why);
        } else {
            FZ_CHECK(tf_parse(up.data, up.len, &t, &why) == BDB_OK);
            read_all(up.data, up.len, &t);
            tf_free(&t);
        }
        bdb_buf_free(&up);
        return;
    }
    int rc = tf_parse(p, n, &t, &why);
    FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
    if (rc != BDB_OK) {
        FZ_CHECK(why && *why);
        return;
    }
    FZ_CHECK(t.res >= BDB_RES_1M && t.res <= BDB_RES_1D && t.start < t.end);
    read_all(p, n, &t);
    tf_free(&t);
}

typedef struct {
    const uint8_t *p;
    size_t n;
} src;

static unsigned take(src *s)
{
    if (!s->n)
        return 0;
    s->n--;
    return *s->p++;
}

static void build_and_damage(const uint8_t *p, size_t n)
{
    src s = {p, n};
    enum bdb_res res = (enum bdb_res)(1 + take(&s) % 3);
    int64_t width = bdb_res_width(res);
    int64_t span = bdb_tier_file_span(res);             /* a file covers exactly one span */
    int64_t start = ((int64_t)(int8_t)take(&s)) * span; /* negative times too */
    int64_t end = start + span;
    unsigned nseries = 1 + take(&s) % MAX_SERIES;
    bdb_rollup built[MAX_SERIES];
    char dev[MAX_SERIES][8], met[MAX_SERIES][8];
    /* series in (device, metric) order, as the builder requires; its metric table */
    const char *mets[MAX_SERIES];
    for (unsigned i = 0; i < nseries; i++) {
        snprintf(dev[i], sizeof dev[i], "d%u", i / 2);
        snprintf(met[i], sizeof met[i], "m%u", i % 2 + 2 * (i / 4));
        mets[i] = met[i];
    }
    size_t nmet = nseries;
    tf_names_sort_unique(mets, &nmet);
    tbuilder tb;
    tf_begin(&tb, NULL, NULL, res, "tenant", start, end, 7, 3, NULL, 0, 0, mets, nmet);
    for (unsigned i = 0; i < nseries; i++) {
        bdb_rollup_init(&built[i], width);
        unsigned ns = take(&s) % MAX_SAMPLES;
        for (unsigned k = 0; k < ns; k++) {
            /* near both ends of the file window, and some outside it */
            int64_t base = take(&s) & 1 ? end - 33 * width : start - width;
            int64_t ts = base + (int64_t)(take(&s) % 34) * width + take(&s);
            double v = (double)(int8_t)take(&s) * 0.25;
            if (take(&s) == 255)
                v = NAN;
            FZ_CHECK(bdb_rollup_add(&built[i], ts, v) == BDB_OK);
        }
        tf_add(&tb, dev[i], strlen(dev[i]), met[i], strlen(met[i]), &built[i]);
    }
    FZ_CHECK(tf_finish(&tb, NULL) == BDB_OK);
    const uint8_t *img = tb.b.data;
    size_t len = tb.b.len;

    tfile t;
    const char *why = NULL;
    FZ_CHECK(tf_parse(img, len, &t, &why) == BDB_OK);
    FZ_CHECK(t.start == start && t.end == end && t.res == res);
    char path[512];
    snprintf(path, sizeof path, "%s/tier", fz_scratch());
    fz_write_file(path, img, len);
    FZ_CHECK(bdb_vfs_open(bdb_vfs_posix(), path, BDB_O_RDONLY, &t.f) == BDB_OK);
    for (unsigned i = 0; i < nseries; i++) {
        tloc loc;
        int found = tf_find(&t, dev[i], met[i], &loc);
        size_t inside = 0;
        for (size_t w = 0; w < built[i].n; w++)
            inside += built[i].w[w].start >= start && built[i].w[w].start < end;
        FZ_CHECK(found || inside == 0);
        if (!found)
            continue;
        bdb_rollup r;
        bdb_rollup_init(&r, width);
        FZ_CHECK(tf_read_rec(&t, &loc, INT64_MIN, INT64_MAX, &r) == BDB_OK);
        FZ_CHECK(r.n == inside);
        for (size_t w = 0; w < r.n; w++) {
            const bdb_window *b = bdb_rollup_find(&built[i], r.w[w].start);
            FZ_CHECK(b && b->st.count == r.w[w].st.count);
            FZ_CHECK(!b->st.count || (memcmp(&b->st.min, &r.w[w].st.min, sizeof(double)) == 0 &&
                                      memcmp(&b->st.max, &r.w[w].st.max, sizeof(double)) == 0));
            /* the compact encoding is exact: every statistic and bucket bit for bit */
            FZ_CHECK(b->st.count == r.w[w].st.count && b->st.sum_lo == r.w[w].st.sum_lo &&
                     memcmp(&b->st.sum_hi, &r.w[w].st.sum_hi, sizeof(double)) == 0 &&
                     memcmp(&b->st.m2, &r.w[w].st.m2, sizeof(double)) == 0);
            FZ_CHECK(b->sk.n == r.w[w].sk.n && b->sk.count == r.w[w].sk.count);
            for (uint32_t k = 0; k < b->sk.n; k++)
                FZ_CHECK(b->sk.b[k].key == r.w[w].sk.b[k].key &&
                         b->sk.b[k].count == r.w[w].sk.b[k].count);
        }
        bdb_rollup_free(&r);
    }
    bdb_file_close(t.f);
    t.f = NULL;
    tf_free(&t);

    /* One flipped byte anywhere must be refused. */
    uint8_t *bad = malloc(len);
    FZ_CHECK(bad);
    memcpy(bad, img, len);
    size_t at = ((size_t)take(&s) << 16 | (size_t)take(&s) << 8 | take(&s)) % len;
    bad[at] ^= (uint8_t)(1u << (take(&s) % 8));
    tfile t2;
    int rc = tf_parse(bad, len, &t2, &why);
    if (rc == BDB_OK) {
        fprintf(stderr, "flipped byte %zu of %zu accepted\n", at, len);
        FZ_CHECK(rc == BDB_ERR_CORRUPT);
    }
    free(bad);
    for (unsigned i = 0; i < nseries; i++)
        bdb_rollup_free(&built[i]);
    tf_builder_free(&tb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        build_and_damage(data + 1, size - 1);
    else
        parse_raw(data + 1, size - 1);
    return 0;
}
