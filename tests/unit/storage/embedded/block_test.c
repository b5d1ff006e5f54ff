/* Block file tests (format version 3): round trip over 1000+ series, lookups through
 * cursors, iteration, seeks, partition statistics, names and values at the edges of
 * the encoding, writer rule enforcement, failure cleanup, the size of the compact
 * index, and corruption handling (bit flips in every region, structural damage under
 * valid CRCs, other format versions, truncation). */
#include "storage/embedded/block/block.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "storage/embedded/blockfix.h"
#include "storage/embedded/engutil.h"

/* Format constants from docs/formats/block.md, used to aim damage at regions. */
#define HDR 36
#define FTR 128
#define SPARSE_ENTRY 16
#define FT_VERSION 104
#define FT_STRIDE 108
#define FT_INDEX_CRC 112
#define FT_FOOTER_CRC 116
enum {
    FT_INDEX_OFF,
    FT_GROUPS_LEN,
    FT_NSPARSE,
    FT_NSTRINGS,
    FT_NGROUPS,
    FT_NSERIES,
    FT_NCHUNKS,
    FT_NSAMPLES,
    FT_WINDOW_START,
    FT_WINDOW_END,
    FT_MIN_TS,
    FT_MAX_TS,
    FT_SEQ
};

#define W0 1700000000000LL
#define BUCKET (15 * 60 * 1000LL)
#define WINDOW (8 * BUCKET)
#define MAXCH 4

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t footer_field(const uint8_t *file, size_t len, int i)
{
    return eu_get64(file + len - FTR + 8 * i);
}

static void set_footer_field(uint8_t *file, size_t len, int i, uint64_t v)
{
    eu_put64(file + len - FTR + 8 * i, v);
}

/* Recomputes the header, index and footer CRCs, so damage reaches the structural
 * checks. */
static void reseal(uint8_t *file, size_t len)
{
    eu_put32(file + 32, (uint32_t)crc32(0, file, 32));
    uint8_t *ft = file + len - FTR;
    uint64_t index_off = eu_get64(ft);
    if (index_off <= len - FTR)
        eu_put32(ft + FT_INDEX_CRC,
                 (uint32_t)crc32(0, file + index_off, (uInt)(len - FTR - index_off)));
    eu_put32(ft + FT_FOOTER_CRC, (uint32_t)crc32(0, ft, FT_FOOTER_CRC));
}

/* Offsets of the fields of the group record at rec. */
struct grec {
    size_t tid, dev, body_len, data_len, body;
};

static struct grec group_fields(const uint8_t *file, size_t rec)
{
    struct grec g;
    const uint8_t *p = file + rec;
    g.tid = rec;
    eu_uvarint(&p);
    g.dev = (size_t)(p - file);
    uint64_t dlen = eu_uvarint(&p);
    p += dlen;
    g.body_len = (size_t)(p - file);
    eu_uvarint(&p);
    g.data_len = (size_t)(p - file);
    eu_uvarint(&p);
    g.body = (size_t)(p - file);
    return g;
}

/* ---- the model: series sorted in file order, deterministic chunk content ---- */

struct ser {
    char t[16], d[16], m[16];
    int nch;
};

static const char *tenants[] = {"acme", "acme-eu", "b", "zeta"};
static const char *metrics[] = {"temp", "temp_c", "rpm",  "v",   "humidity", "pressure",
                                "co2",  "lux",    "volt", "amp", "x"};

static void to_key(const struct ser *s, bdb_series_key *k)
{
    *k = (bdb_series_key){s->t, strlen(s->t), s->d, strlen(s->d), s->m, strlen(s->m)};
}

static int ser_cmp(const void *a, const void *b)
{
    bdb_series_key ka, kb;
    to_key(a, &ka);
    to_key(b, &kb);
    return bdb_series_key_cmp(&ka, &kb);
}

static struct ser *build_model(int nt, int nd, int nm, size_t *n)
{
    struct ser *v = calloc((size_t)(nt * nd * nm), sizeof *v);
    assert_non_null(v);
    size_t k = 0;
    for (int t = 0; t < nt; t++)
        for (int d = 0; d < nd; d++)
            for (int m = 0; m < nm; m++, k++) {
                snprintf(v[k].t, sizeof v[k].t, "%s", tenants[t]);
                snprintf(v[k].d, sizeof v[k].d, "d%d", d); /* "d10" < "d2": not numeric */
                snprintf(v[k].m, sizeof v[k].m, "%s", metrics[m]);
            }
    qsort(v, k, sizeof *v, ser_cmp);
    for (size_t i = 0; i < k; i++)
        v[i].nch = 1 + (int)((i * 7 + i / 3) % MAXCH);
    *n = k;
    return v;
}

/* Chunk j of series s lies in bucket j (some series skip bucket 1, so devices differ
 * in their bucket lists); bytes come from a seeded generator. */
static void gen_chunk(size_t s, int j, bdb_chunk_ref *c, uint8_t *buf)
{
    int bucket = j + (j > 0 && s % 5 == 0);
    c->bucket_start = W0 + bucket * BUCKET;
    c->count = 1 + (uint32_t)((s * 7 + (size_t)j) % 50);
    c->min_ts = c->bucket_start + (int64_t)(s % 100);
    c->max_ts = c->min_ts + (int64_t)c->count * 1000;
    c->len = 1 + (s * 31 + (size_t)j * 17) % 300;
    uint64_t seed = s * 1000003 + (uint64_t)j;
    for (size_t i = 0; i < c->len; i++)
        buf[i] = (uint8_t)rng_next(&seed);
    buf[0] &= 0x7f; /* opaque bytes, not a PACKED chunk (stored bare) */
    c->data = buf;
}

static void write_model(bdb_vfs *vfs, const char *dir, const char *name, const struct ser *v,
                        size_t n, bdb_block_meta *meta)
{
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, name, W0, W0 + WINDOW, 42, &w), BDB_OK);
    uint8_t buf[512];
    for (size_t s = 0; s < n; s++) {
        bdb_series_key k;
        to_key(&v[s], &k);
        for (int j = 0; j < v[s].nch; j++) {
            bdb_chunk_ref c;
            gen_chunk(s, j, &c, buf);
            assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_OK);
        }
    }
    assert_int_equal(bdb_block_writer_finish(w, meta), BDB_OK);
}

/* Returns 1 if got equals what gen_chunk made for (s, j). */
static int chunk_matches(const bdb_chunk_ref *got, size_t s, int j)
{
    uint8_t buf[512];
    bdb_chunk_ref want;
    gen_chunk(s, j, &want, buf);
    return got->bucket_start == want.bucket_start && got->min_ts == want.min_ts &&
           got->max_ts == want.max_ts && got->count == want.count && got->len == want.len &&
           memcmp(got->data, want.data, want.len) == 0;
}

/* Asserts the cursor yields exactly series s's chunks, then stays at the end. */
static void expect_series(bdb_block_cursor *cur, size_t s, int nch)
{
    assert_int_equal(cur->nchunks, (uint64_t)nch);
    bdb_chunk_ref c;
    for (int j = 0; j < nch; j++) {
        assert_int_equal(bdb_block_cursor_next(cur, &c), 1);
        assert_true(chunk_matches(&c, s, j));
    }
    assert_int_equal(bdb_block_cursor_next(cur, &c), 0);
    assert_int_equal(bdb_block_cursor_next(cur, &c), 0);
}

static size_t seek_expect(const struct ser *v, size_t n, const char *t, const char *d)
{
    struct ser probe = {0};
    snprintf(probe.t, sizeof probe.t, "%s", t);
    snprintf(probe.d, sizeof probe.d, "%s", d ? d : "");
    size_t i = 0;
    while (i < n && ser_cmp(&v[i], &probe) < 0)
        i++;
    return i;
}

static bdb_block *open_ok(bdb_vfs *vfs, const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    return b;
}

/* ---- tests ---- */

static void test_roundtrip(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    size_t n;
    struct ser *v = build_model(4, 25, 11, &n);
    assert_true(n >= 1000);

    bdb_block_meta wm;
    write_model(vfs, dir, "b1", v, n, &wm);
    assert_int_equal(eu_count_entries(dir), 1); /* no .tmp left behind */

    uint64_t nchunks = 0, nsamples = 0;
    for (size_t s = 0; s < n; s++)
        for (int j = 0; j < v[s].nch; j++) {
            bdb_chunk_ref c;
            uint8_t buf[512];
            gen_chunk(s, j, &c, buf);
            nchunks++;
            nsamples += c.count;
        }
    char path[512];
    snprintf(path, sizeof path, "%s/b1", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(wm.version, 3);
    assert_int_equal(wm.nseries, n);
    assert_int_equal(wm.nchunks, nchunks);
    assert_int_equal(wm.nsamples, nsamples);
    assert_int_equal(wm.file_bytes, (uint64_t)st.st_size);
    assert_true(wm.index_bytes > 0 && wm.index_bytes < wm.file_bytes);

    bdb_block *b = open_ok(vfs, dir, "b1");
    const bdb_block_meta *m = bdb_block_get_meta(b);
    assert_int_equal(m->version, 3);
    assert_int_equal(m->window_start, W0);
    assert_int_equal(m->window_end, W0 + WINDOW);
    assert_int_equal(m->seq, 42);
    assert_int_equal(m->nseries, n);
    assert_int_equal(m->nchunks, nchunks);
    assert_int_equal(m->nsamples, nsamples);
    assert_int_equal(m->file_bytes, wm.file_bytes);
    assert_int_equal(m->index_bytes, wm.index_bytes);
    assert_int_equal(m->min_ts, wm.min_ts);
    assert_int_equal(m->max_ts, wm.max_ts);
    assert_int_equal(m->min_ts, W0); /* series 0, chunk 0 */

    /* Every series by lookup, every chunk byte for byte. */
    for (size_t s = 0; s < n; s++) {
        bdb_series_key k;
        to_key(&v[s], &k);
        bdb_block_cursor cur;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        expect_series(&cur, s, v[s].nch);
    }
    /* A cursor is a value: a copy replays the same chunks. */
    {
        bdb_series_key k;
        to_key(&v[77], &k);
        bdb_block_cursor cur, copy;
        bdb_chunk_ref c;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        copy = cur;
        assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
        expect_series(&copy, 77, v[77].nch);
    }

    /* Missing keys: prefixes, neighbours, beyond both ends, and names that exist but
     * not together. */
    const char *missing[][3] = {{"acme", "d1", "tem"},  {"acme", "d1", "temp_"},
                                {"acm", "d1", "temp"},  {"acme", "d", "temp"},
                                {"", "", ""},           {"zzz", "d1", "v"},
                                {"acme-", "d1", "v"},   {"acme", "d99", "v"},
                                {"b", "d1", "zz"},      {"temp", "d1", "v"},
                                {"acme", "d1", "acme"}, {"zeta", "d24", "0"},
                                {"zeta", "d99", "x"},   {"zeta", "e", "amp"},
                                {"acme", "", "temp"}};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        bdb_series_key k = {missing[i][0],         strlen(missing[i][0]), missing[i][1],
                            strlen(missing[i][1]), missing[i][2],         strlen(missing[i][2])};
        bdb_block_cursor cur;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_ERR_NOTFOUND);
    }
    bdb_series_key k0;
    to_key(&v[0], &k0);
    bdb_block_cursor cur0;
    assert_int_equal(bdb_block_find(NULL, &k0, &cur0), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_find(b, &k0, NULL), BDB_ERR_INVALID);

    /* Iteration returns the model order, with a cursor per series; cursors stay valid
     * after the iterator moves on (compaction holds one per input block). */
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    size_t s = 0;
    bdb_series_key k;
    bdb_block_cursor cur, held[3];
    int r;
    while ((r = bdb_block_iter_next(&it, &k, &cur)) == 1) {
        assert_true(s < n);
        bdb_series_key want;
        to_key(&v[s], &want);
        assert_int_equal(bdb_series_key_cmp(&k, &want), 0);
        if (s < 3)
            held[s] = cur;
        else
            expect_series(&cur, s, v[s].nch);
        s++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(s, n);
    assert_int_equal(bdb_block_iter_next(&it, &k, NULL), 0);
    for (size_t i = 0; i < 3; i++)
        expect_series(&held[i], i, v[i].nch);

    /* Seeks by tenant, by tenant+device, and between keys. */
    const char *seeks[][2] = {{"acme", NULL}, {"acme-eu", NULL}, {"b", NULL},  {"zeta", NULL},
                              {"", NULL},     {"acme-", NULL},   {"c", NULL},  {"zz", NULL},
                              {"acme", "d1"}, {"acme", "d10"},   {"b", "d24"}, {"b", "d3x"},
                              {"zeta", "d9"}, {"zeta", "e"},     {"acme", ""}, {"temp", NULL},
                              {"a", "d1"},    {"zeta", "d99"},   {"b", "d"},   {"c", "d1"}};
    for (size_t i = 0; i < sizeof seeks / sizeof *seeks; i++) {
        const char *t = seeks[i][0], *d = seeks[i][1];
        assert_int_equal(bdb_block_iter_seek(b, &it, t, strlen(t), d, d ? strlen(d) : 0), BDB_OK);
        size_t want = seek_expect(v, n, t, d);
        r = bdb_block_iter_next(&it, &k, &cur);
        if (want == n) {
            assert_int_equal(r, 0);
            continue;
        }
        assert_int_equal(r, 1);
        bdb_series_key wk;
        to_key(&v[want], &wk);
        assert_int_equal(bdb_series_key_cmp(&k, &wk), 0);
        expect_series(&cur, want, v[want].nch);
    }
    /* Listing one tenant's devices from a seek stops at the next tenant. */
    assert_int_equal(bdb_block_iter_seek(b, &it, "b", 1, NULL, 0), BDB_OK);
    size_t listed = 0;
    while (bdb_block_iter_next(&it, &k, NULL) == 1 && k.tenant_len == 1 && k.tenant[0] == 'b')
        listed++;
    assert_int_equal(listed, 25 * 11);

    /* Partition stats equal the model's sums over each device's metrics. */
    bdb_block_part_iter pit;
    bdb_block_part_iter_init(b, &pit);
    size_t nparts = 0;
    bdb_partition_stat ps;
    for (size_t d0 = 0; d0 < n;) {
        size_t d1 = d0;
        while (d1 < n && !strcmp(v[d1].t, v[d0].t) && !strcmp(v[d1].d, v[d0].d))
            d1++;
        for (int bk = 0; bk <= MAXCH; bk++) {
            uint64_t rows = 0, bytes = 0;
            for (size_t i = d0; i < d1; i++)
                for (int j = 0; j < v[i].nch; j++) {
                    uint8_t buf[512];
                    bdb_chunk_ref c;
                    gen_chunk(i, j, &c, buf);
                    if (c.bucket_start != W0 + bk * BUCKET)
                        continue;
                    rows += c.count;
                    bytes += c.len;
                }
            if (!rows)
                continue;
            assert_int_equal(bdb_block_partition_next(&pit, &ps), 1);
            assert_int_equal(ps.key.tenant_len, strlen(v[d0].t));
            assert_memory_equal(ps.key.tenant, v[d0].t, ps.key.tenant_len);
            assert_int_equal(ps.key.device_len, strlen(v[d0].d));
            assert_memory_equal(ps.key.device, v[d0].d, ps.key.device_len);
            assert_int_equal(ps.key.metric_len, 0);
            assert_int_equal(ps.bucket_start, W0 + bk * BUCKET);
            assert_int_equal(ps.rows, rows);
            assert_int_equal(ps.bytes, bytes);
            nparts++;
        }
        d0 = d1;
    }
    assert_int_equal(bdb_block_partition_next(&pit, &ps), 0);
    assert_int_equal(bdb_block_partition_next(&pit, &ps), 0);
    assert_true(nparts > 100 * MAXCH / 2);

    bdb_block_close(b);
    free(v);
    eu_remove_flat_dir(dir);
}

static void test_empty_block(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "e", 0, 10, 1, &w), BDB_OK);
    bdb_block_meta wm;
    assert_int_equal(bdb_block_writer_finish(w, &wm), BDB_OK);
    assert_int_equal(wm.nchunks, 0);
    assert_true(wm.min_ts > wm.max_ts); /* overlaps no query range */

    bdb_block *b = open_ok(vfs, dir, "e");
    assert_int_equal(bdb_block_get_meta(b)->nseries, 0);
    bdb_series_key k = {"a", 1, "b", 1, "c", 1}, kk;
    bdb_block_cursor cur;
    assert_int_equal(bdb_block_find(b, &k, &cur), BDB_ERR_NOTFOUND);
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    assert_int_equal(bdb_block_iter_next(&it, &kk, &cur), 0);
    assert_int_equal(bdb_block_iter_seek(b, &it, "a", 1, NULL, 0), BDB_OK);
    assert_int_equal(bdb_block_iter_next(&it, &kk, &cur), 0);
    bdb_block_part_iter pit;
    bdb_block_part_iter_init(b, &pit);
    bdb_partition_stat ps;
    assert_int_equal(bdb_block_partition_next(&pit, &ps), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

/* Names the encoding must not trip over: empty, with NUL bytes, longer than one
 * varint byte, a name used both as tenant and as metric (one string-table entry),
 * many distinct metrics in one device (multi-byte ids), and many devices of one
 * tenant with one metric (groups of one series). */
static void test_names(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    char longname[300];
    memset(longname, 'z', sizeof longname);
    enum { NK = 700 };
    static char store[NK][320];
    static bdb_series_key keys[NK];
    size_t nk = 0;
#define ADD(t, tl, d, dl, m, ml)                                                                   \
    do {                                                                                           \
        memcpy(store[nk], t, tl);                                                                  \
        memcpy(store[nk] + 8, d, dl);                                                              \
        keys[nk] = (bdb_series_key){store[nk], tl, store[nk] + 8, dl, m, ml};                      \
        nk++;                                                                                      \
    } while (0)
    ADD("", 0, "", 0, "", 0);
    ADD("", 0, "", 0, "m", 1);
    ADD("", 0, "dev", 3, "", 0);
    ADD("a\0b", 3, "d\0", 2, "m\0x", 3);
    ADD("a\0b", 3, "d\0", 2, "m\0y", 3);
    ADD("a\0b", 3, "d\0\0", 3, "a\0b", 3); /* tenant name reused as a metric name */
    ADD("m", 1, "x", 1, "a\0b", 3);        /* and a metric name as a tenant */
    ADD("m", 1, "x", 1, longname, sizeof longname);
    ADD("m", 1, "y", 1, "m", 1);
    static char mnames[300][16];
    for (int i = 0; i < 300; i++) {
        snprintf(mnames[i], sizeof mnames[i], "k%03d", i);
        ADD("many", 4, "one", 3, mnames[i], strlen(mnames[i]));
    }
    static char dnames[300][16];
    for (int i = 0; i < 300; i++) {
        snprintf(dnames[i], sizeof dnames[i], "q%03d", i);
        ADD("solo", 4, dnames[i], strlen(dnames[i]), "only", 4);
    }
#undef ADD
    for (size_t i = 1; i < nk; i++)
        assert_true(bdb_series_key_cmp(&keys[i - 1], &keys[i]) < 0);

    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "n", W0, W0 + WINDOW, 3, &w), BDB_OK);
    uint8_t buf[512];
    for (size_t i = 0; i < nk; i++) {
        bdb_chunk_ref c;
        gen_chunk(i, 0, &c, buf);
        assert_int_equal(bdb_block_writer_add(w, &keys[i], &c), BDB_OK);
    }
    assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_OK);

    bdb_block *b = open_ok(vfs, dir, "n");
    for (size_t i = 0; i < nk; i++) {
        bdb_block_cursor cur;
        assert_int_equal(bdb_block_find(b, &keys[i], &cur), BDB_OK);
        expect_series(&cur, i, 1);
    }
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    bdb_series_key k;
    size_t i = 0;
    while (bdb_block_iter_next(&it, &k, NULL) == 1) {
        assert_true(i < nk);
        assert_int_equal(bdb_series_key_cmp(&k, &keys[i]), 0);
        i++;
    }
    assert_int_equal(i, nk);
    /* A metric or tenant that exists elsewhere, in the wrong role or place. */
    bdb_series_key miss[] = {{"m", 1, "x", 1, "m", 1},
                             {"many", 4, "one", 3, "only", 4},
                             {"solo", 4, "q000", 4, "k000", 4},
                             {"a", 1, "d", 1, "m", 1},
                             {"only", 4, "q000", 4, "only", 4}};
    for (size_t j = 0; j < sizeof miss / sizeof *miss; j++) {
        bdb_block_cursor cur;
        assert_int_equal(bdb_block_find(b, &miss[j], &cur), BDB_ERR_NOTFOUND);
    }
    /* Seeks into the tenant with the NUL byte and past the solo devices. */
    assert_int_equal(bdb_block_iter_seek(b, &it, "a\0b", 3, "d\0\0", 3), BDB_OK);
    assert_int_equal(bdb_block_iter_next(&it, &k, NULL), 1);
    assert_int_equal(bdb_series_key_cmp(&k, &keys[5]), 0);
    assert_int_equal(bdb_block_iter_seek(b, &it, "solo", 4, "q2", 2), BDB_OK);
    assert_int_equal(bdb_block_iter_next(&it, &k, NULL), 1);
    assert_int_equal(bdb_series_key_cmp(&k, &keys[nk - 100]), 0);
    assert_int_equal(bdb_block_iter_seek(b, &it, "solo", 4, "r", 1), BDB_OK);
    assert_int_equal(bdb_block_iter_next(&it, &k, NULL), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

/* Values at the edges of the delta coding: the widest window, timestamps at both ends,
 * buckets anywhere (also outside the window, and far apart), the largest count, and
 * chunks of length 0. */
static void test_extreme_values(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "x", INT64_MIN, INT64_MAX, UINT64_MAX, &w),
                     BDB_OK);
    uint8_t data[3] = {1, 2, 3};
    struct {
        const char *d, *m;
        bdb_chunk_ref c;
    } in[] = {
        {"a", "m", {INT64_MIN, INT64_MIN, INT64_MAX - 1, UINT32_MAX, data, 3}},
        {"a", "n", {INT64_MAX, INT64_MIN, INT64_MIN, 0, NULL, 0}},
        {"a", "n", {0, INT64_MIN + 1, INT64_MIN + 1, 1, data, 1}},
        {"a", "n", {INT64_MIN, INT64_MAX - 1, INT64_MAX - 1, UINT32_MAX, data + 1, 2}},
        {"b", "m", {-5, -1, 0, 0, data, 0}},
        {"b", "m", {-5, 0, INT64_MAX - 1, 7, data, 3}},
        {"c", "m", {INT64_MAX, 5, 5, 1, data, 1}},
    };
    size_t nin = sizeof in / sizeof *in;
    for (size_t i = 0; i < nin; i++) {
        bdb_series_key k = {"t", 1, in[i].d, 1, in[i].m, 1};
        assert_int_equal(bdb_block_writer_add(w, &k, &in[i].c), BDB_OK);
    }
    bdb_block_meta wm;
    assert_int_equal(bdb_block_writer_finish(w, &wm), BDB_OK);
    assert_int_equal(wm.min_ts, INT64_MIN);
    assert_int_equal(wm.max_ts, INT64_MAX - 1);
    assert_int_equal(wm.nsamples, 2 * (uint64_t)UINT32_MAX + 9);

    bdb_block *b = open_ok(vfs, dir, "x");
    assert_int_equal(bdb_block_get_meta(b)->seq, UINT64_MAX);
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    bdb_series_key k;
    bdb_block_cursor cur;
    size_t i = 0;
    while (bdb_block_iter_next(&it, &k, &cur) == 1) {
        bdb_chunk_ref c;
        while (bdb_block_cursor_next(&cur, &c) == 1) {
            assert_true(i < nin);
            assert_int_equal(k.device[0], in[i].d[0]);
            assert_int_equal(k.metric[0], in[i].m[0]);
            assert_true(c.bucket_start == in[i].c.bucket_start);
            assert_true(c.min_ts == in[i].c.min_ts);
            assert_true(c.max_ts == in[i].c.max_ts);
            assert_int_equal(c.count, in[i].c.count);
            assert_int_equal(c.len, in[i].c.len);
            if (c.len)
                assert_memory_equal(c.data, in[i].c.data, c.len);
            i++;
        }
    }
    assert_int_equal(i, nin);
    /* Device a has three buckets, each its own partition. */
    bdb_block_part_iter pit;
    bdb_block_part_iter_init(b, &pit);
    bdb_partition_stat ps;
    int64_t want_b[] = {INT64_MIN, 0, INT64_MAX, -5, INT64_MAX};
    uint64_t want_rows[] = {2 * (uint64_t)UINT32_MAX, 1, 0, 7, 1};
    for (size_t j = 0; j < 5; j++) {
        assert_int_equal(bdb_block_partition_next(&pit, &ps), 1);
        assert_true(ps.bucket_start == want_b[j]);
        assert_int_equal(ps.rows, want_rows[j]);
    }
    assert_int_equal(bdb_block_partition_next(&pit, &ps), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

static void test_order_violations(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "o", 0, 1000, 1, &w), BDB_OK);
    uint8_t data[4] = {1, 2, 3, 4};
    bdb_series_key a = {"t", 1, "d", 1, "m1", 2}, b2 = {"t", 1, "d", 1, "m2", 2};
    bdb_series_key before = {"t", 1, "d", 1, "m", 1}, t0 = {"s", 1, "z", 1, "z", 1};
    bdb_chunk_ref c = {.bucket_start = 0,
                       .min_ts = 100,
                       .max_ts = 200,
                       .count = 2,
                       .data = data,
                       .len = sizeof data};
    assert_int_equal(bdb_block_writer_add(w, &a, &c), BDB_OK);
    /* Same series: min_ts must increase strictly. */
    assert_int_equal(bdb_block_writer_add(w, &a, &c), BDB_ERR_INVALID);
    c.min_ts = 50;
    assert_int_equal(bdb_block_writer_add(w, &a, &c), BDB_ERR_INVALID);
    c.min_ts = 150;
    assert_int_equal(bdb_block_writer_add(w, &a, &c), BDB_OK);
    assert_int_equal(bdb_block_writer_add(w, &b2, &c), BDB_OK);
    /* Going back in key order, by metric or by tenant. */
    assert_int_equal(bdb_block_writer_add(w, &a, &c), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, &before, &c), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, &t0, &c), BDB_ERR_INVALID);
    /* Bad arguments. */
    bdb_chunk_ref nodata = c;
    nodata.data = NULL;
    nodata.min_ts = 300;
    nodata.max_ts = 300;
    assert_int_equal(bdb_block_writer_add(w, &b2, &nodata), BDB_ERR_INVALID);
    bdb_series_key nullname = {NULL, 1, "d", 1, "m3", 2};
    assert_int_equal(bdb_block_writer_add(w, &nullname, &c), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, NULL, &c), BDB_ERR_INVALID);
    /* The rejected calls left the writer usable. */
    c.min_ts = 300;
    c.max_ts = 300;
    assert_int_equal(bdb_block_writer_add(w, &b2, &c), BDB_OK);
    bdb_block_meta m;
    assert_int_equal(bdb_block_writer_finish(w, &m), BDB_OK);
    assert_int_equal(m.nseries, 2);
    assert_int_equal(m.nchunks, 4);

    bdb_block *b = open_ok(vfs, dir, "o");
    bdb_block_cursor cur;
    bdb_chunk_ref got;
    assert_int_equal(bdb_block_find(b, &a, &cur), BDB_OK);
    assert_int_equal(cur.nchunks, 2);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
    assert_int_equal(got.min_ts, 100);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
    assert_int_equal(got.min_ts, 150);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 0);
    assert_int_equal(bdb_block_find(b, &b2, &cur), BDB_OK);
    assert_int_equal(cur.nchunks, 2);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
    assert_int_equal(got.min_ts, 150);
    assert_int_equal(got.max_ts, 200);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
    assert_int_equal(got.min_ts, 300);
    assert_memory_equal(got.data, data, sizeof data);
    assert_int_equal(bdb_block_cursor_next(&cur, &got), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

static void test_window_violations(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "w", 1000, 1000, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(vfs, dir, "w", 1000, 999, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(eu_count_entries(dir), 0);
    assert_int_equal(bdb_block_writer_open(vfs, dir, "w", 1000, 2000, 1, &w), BDB_OK);
    uint8_t data[1] = {7};
    bdb_series_key k = {"t", 1, "d", 1, "m", 1};
    struct {
        int64_t min, max;
        int ok;
    } cases[] = {
        {999, 1500, 0},                                              /* starts before the window */
        {1500, 2000, 0},                                             /* window end is exclusive */
        {1600, 1500, 0},                                             /* min after max */
        {-5, 5, 0},      {INT64_MIN, INT64_MAX, 0}, {1000, 1000, 1}, /* first ms of the window */
        {1999, 1999, 1},                                             /* last ms of the window */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bdb_chunk_ref c = {.bucket_start = 0,
                           .min_ts = cases[i].min,
                           .max_ts = cases[i].max,
                           .count = 1,
                           .data = data,
                           .len = 1};
        assert_int_equal(bdb_block_writer_add(w, &k, &c), cases[i].ok ? BDB_OK : BDB_ERR_INVALID);
    }
    bdb_block_meta m;
    assert_int_equal(bdb_block_writer_finish(w, &m), BDB_OK);
    assert_int_equal(m.nchunks, 2);
    assert_int_equal(m.min_ts, 1000);
    assert_int_equal(m.max_ts, 1999);
    eu_remove_flat_dir(dir);
}

static void test_abort_leaves_nothing(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "a", 0, 1 << 30, 1, &w), BDB_OK);
    assert_int_equal(eu_count_entries(dir), 1);
    bdb_block_writer_abort(w);
    assert_int_equal(eu_count_entries(dir), 0);

    /* After enough data that staged bytes have reached the file. */
    assert_int_equal(bdb_block_writer_open(vfs, dir, "a", 0, 1 << 30, 1, &w), BDB_OK);
    static uint8_t data[64 * 1024];
    bdb_series_key k = {"t", 1, "d", 1, "m", 1};
    for (int i = 0; i < 40; i++) {
        bdb_chunk_ref c = {.min_ts = i, .max_ts = i, .count = 1, .data = data, .len = sizeof data};
        assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_OK);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/a.tmp", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 0);
    bdb_block_writer_abort(w);
    assert_int_equal(eu_count_entries(dir), 0);
    eu_remove_flat_dir(dir);
}

/* The fleet shape of bench/: 10,000 devices x 10 metrics, one chunk of 30 samples
 * (10 s apart, each device at its own phase) per series and ~45 bytes of chunk data.
 * Version 1 spent ~88 B of index per series here (44 B chunk entry, ~33 B series
 * record with tenant and device repeated, 8 B offset, ~3 B partition record). */
static void test_compact_index(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    const int64_t ws = 1800000000000LL, we = ws + 2 * 3600 * 1000LL;
    enum { NDEV = 10000, NMET = 10, NSAMP = 30 };
    char mnames[NMET][24];
    for (int m = 0; m < NMET; m++)
        snprintf(mnames[m], sizeof mnames[m], "sensor.f%d", m);
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "f", ws, we, 9, &w), BDB_OK);
    uint8_t buf[64];
    uint64_t seed = 99, payload = 0;
    for (int d = 0; d < NDEV; d++) {
        char dev[24];
        snprintf(dev, sizeof dev, "dev%07d", d);
        int64_t t0 = ws + 600000 + (int64_t)(rng_next(&seed) % 10000);
        for (int m = 0; m < NMET; m++) {
            size_t len = 38 + rng_next(&seed) % 15; /* ~45 bytes */
            for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)rng_next(&seed);
            buf[0] &= 0x7f; /* opaque bytes, kept whole */
            bdb_series_key k = {"default", 7, dev, strlen(dev), mnames[m], strlen(mnames[m])};
            bdb_chunk_ref c = {.bucket_start = ws,
                               .min_ts = t0,
                               .max_ts = t0 + (NSAMP - 1) * 10000,
                               .count = NSAMP,
                               .data = buf,
                               .len = len};
            assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_OK);
            payload += len;
        }
    }
    bdb_block_meta meta;
    assert_int_equal(bdb_block_writer_finish(w, &meta), BDB_OK);
    uint64_t nseries = (uint64_t)NDEV * NMET;
    assert_int_equal(meta.nseries, nseries);
    double index_per_series = (double)meta.index_bytes / (double)nseries;
    /* Everything that is not chunk payload: index, run CRCs, header, footer. */
    double overhead_per_series = (double)(meta.file_bytes - payload) / (double)nseries;
    print_message("compact index: %.2f B/series index, %.2f B/series overhead, %.3f B/sample\n",
                  index_per_series, overhead_per_series,
                  (double)meta.file_bytes / (double)(nseries * NSAMP));
    /* What the encoding needs for this shape: per series a metric id, a chunk count and
     * four one-byte entry fields (min_ts and span predicted from the previous series of
     * the device, count, len) = 6 B, and the device's first series 4 B more (its min_ts
     * and span are predicted from the window start and 0: 3 bytes each); per device
     * 1 (tenant id) + 11 (name) + 1 (body length) + 2 (data length) + 3 (series count,
     * bucket count, bucket) = 18 B; one 16-byte sparse entry per 16 devices. That is
     * 8.3 B per series. The bound leaves 17 bytes per device for longer varints and
     * is still under an eighth of version 1's ~88. */
    assert_true(index_per_series < 10.0);
    assert_true(overhead_per_series < 14.0); /* + the 4-byte CRC of each series' run */

    /* Still a working block: every 997th series found and read back. */
    bdb_block *b = open_ok(vfs, dir, "f");
    for (int d = 0; d < NDEV; d += 997) {
        char dev[24];
        snprintf(dev, sizeof dev, "dev%07d", d);
        bdb_series_key k = {
            "default", 7, dev, strlen(dev), mnames[d % NMET], strlen(mnames[d % NMET])};
        bdb_block_cursor cur;
        bdb_chunk_ref c;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
        assert_int_equal(c.count, NSAMP);
        assert_int_equal(c.max_ts - c.min_ts, (NSAMP - 1) * 10000);
        assert_int_equal(bdb_block_cursor_next(&cur, &c), 0);
    }
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

/* ---- a VFS that counts pwrites and fails a chosen operation ---- */

enum { FAIL_NONE, FAIL_PWRITE, FAIL_SYNC, FAIL_RENAME, FAIL_SYNC_DIR };

struct tvfs {
    bdb_vfs base;
    bdb_vfs *under;
    int fail;
    int fail_after; /* pwrites allowed before FAIL_PWRITE strikes */
    int pwrites;
};

struct tfile {
    bdb_file base;
    bdb_file *in;
};

static struct tvfs *tv(bdb_vfs *v)
{
    return (struct tvfs *)v;
}
static bdb_file *in(bdb_file *f)
{
    return ((struct tfile *)f)->in;
}

static int t_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    struct tfile *f = calloc(1, sizeof *f);
    assert_non_null(f);
    int rc = bdb_vfs_open(tv(v)->under, path, flags, &f->in);
    if (rc != BDB_OK) {
        free(f);
        return rc;
    }
    f->base.vfs = v;
    *out = &f->base;
    return BDB_OK;
}
static int t_close(bdb_file *f)
{
    int rc = bdb_file_close(in(f));
    free(f);
    return rc;
}
static int t_pread(bdb_file *f, void *buf, size_t n, uint64_t off, size_t *nread)
{
    return bdb_file_pread(in(f), buf, n, off, nread);
}
static int t_pwrite(bdb_file *f, const void *buf, size_t n, uint64_t off)
{
    struct tvfs *v = tv(f->vfs);
    if (v->fail == FAIL_PWRITE && v->pwrites >= v->fail_after) {
        errno = EIO;
        return BDB_ERR_IO;
    }
    v->pwrites++;
    return bdb_file_pwrite(in(f), buf, n, off);
}
static int t_sync(bdb_file *f)
{
    if (tv(f->vfs)->fail == FAIL_SYNC) {
        errno = EIO;
        return BDB_ERR_IO;
    }
    return bdb_file_sync(in(f));
}
static int t_size(bdb_file *f, uint64_t *out)
{
    return bdb_file_size(in(f), out);
}
static int t_truncate(bdb_file *f, uint64_t size)
{
    return bdb_file_truncate(in(f), size);
}
static int t_map(bdb_file *f, const void **p, size_t *len)
{
    return bdb_file_map(in(f), p, len);
}
static int t_unmap(bdb_file *f, const void *p, size_t len)
{
    return bdb_file_unmap(in(f), p, len);
}
static int t_rename(bdb_vfs *v, const char *from, const char *to)
{
    if (tv(v)->fail == FAIL_RENAME) {
        errno = EIO;
        return BDB_ERR_IO;
    }
    return bdb_vfs_rename(tv(v)->under, from, to);
}
static int t_unlink(bdb_vfs *v, const char *path)
{
    return bdb_vfs_unlink(tv(v)->under, path);
}
static int t_mkdir(bdb_vfs *v, const char *path)
{
    return bdb_vfs_mkdir(tv(v)->under, path);
}
static int t_sync_dir(bdb_vfs *v, const char *path)
{
    if (tv(v)->fail == FAIL_SYNC_DIR) {
        errno = EIO;
        return BDB_ERR_IO;
    }
    return bdb_vfs_sync_dir(tv(v)->under, path);
}
static int t_list(bdb_vfs *v, const char *dir, int (*cb)(void *, const char *), void *ctx)
{
    return bdb_vfs_list(tv(v)->under, dir, cb, ctx);
}
static int t_exists(bdb_vfs *v, const char *path)
{
    return bdb_vfs_exists(tv(v)->under, path);
}

static const struct bdb_vfs_ops t_ops = {
    t_open,  t_close,  t_pread,  t_pwrite, t_sync,     t_size, t_truncate, t_map,
    t_unmap, t_rename, t_unlink, t_mkdir,  t_sync_dir, t_list, t_exists,
};

static void test_buffered_writes(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    struct tvfs v = {.base = {&t_ops}, .under = bdb_vfs_posix()};
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(&v.base, dir, "p", 0, 1 << 30, 1, &w), BDB_OK);
    /* 4 MiB in 1 KiB chunks, then one 3 MiB chunk that bypasses the staging buffer. */
    static uint8_t data[3 << 20];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)((i * 131 + 7) & 0x7f); /* opaque, never a PACKED first byte */
    bdb_series_key k = {"t", 1, "d", 1, "m", 1};
    for (int i = 0; i < 4096; i++) {
        bdb_chunk_ref c = {.min_ts = i, .max_ts = i, .count = 1, .data = data + i, .len = 1024};
        assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_OK);
    }
    assert_true(v.pwrites <= 4);
    bdb_chunk_ref big = {
        .min_ts = 5000, .max_ts = 5000, .count = 9, .data = data, .len = sizeof data};
    assert_int_equal(bdb_block_writer_add(w, &k, &big), BDB_OK);
    assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_OK);
    /* ~7.2 MiB of data plus index and footer in ~1 MiB writes, not 4097 of them. */
    assert_true(v.pwrites <= 10);

    char path[512];
    snprintf(path, sizeof path, "%s/p", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(&v.base, path, &b), BDB_OK);
    bdb_block_cursor cur;
    bdb_chunk_ref c;
    assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
    assert_int_equal(cur.nchunks, 4097);
    for (int i = 0; i < 4096; i++) {
        assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
        assert_int_equal(c.min_ts, i);
        assert_int_equal(c.len, 1024);
        if (i == 17)
            assert_memory_equal(c.data, data + 17, 1024);
    }
    assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
    assert_int_equal(c.len, sizeof data);
    assert_int_equal(c.count, 9);
    assert_memory_equal(c.data, data, sizeof data);
    assert_int_equal(bdb_block_cursor_next(&cur, &c), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

static void test_io_failures_leave_nothing(void **state)
{
    (void)state;
    int modes[] = {FAIL_PWRITE, FAIL_SYNC, FAIL_RENAME, FAIL_SYNC_DIR};
    static uint8_t data[256 * 1024];
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
        char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
        struct tvfs v = {
            .base = {&t_ops}, .under = bdb_vfs_posix(), .fail = modes[mi], .fail_after = 1};
        bdb_block_writer *w;
        assert_int_equal(bdb_block_writer_open(&v.base, dir, "f", 0, 1 << 30, 1, &w), BDB_OK);
        int rc = BDB_OK;
        for (int i = 0; i < 12 && rc == BDB_OK; i++) {
            /* A new series every other chunk, so run CRCs are written too. */
            char m[2] = {(char)('a' + i / 2), 0};
            bdb_series_key k = {"t", 1, "d", 1, m, 1};
            bdb_chunk_ref c = {
                .min_ts = i, .max_ts = i, .count = 1, .data = data, .len = sizeof data};
            rc = bdb_block_writer_add(w, &k, &c);
        }
        if (modes[mi] == FAIL_PWRITE) {
            /* The second flush fails, and the error sticks. */
            assert_int_equal(rc, BDB_ERR_IO);
            bdb_series_key k = {"t", 1, "d", 1, "z", 1};
            bdb_chunk_ref c = {.min_ts = 100, .max_ts = 100, .count = 1, .data = data, .len = 1};
            assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_ERR_IO);
        } else {
            assert_int_equal(rc, BDB_OK);
        }
        assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_ERR_IO);
        assert_int_equal(eu_count_entries(dir), 0);
        eu_remove_flat_dir(dir);
    }
}

/* ---- corruption ---- */

struct corpus {
    char *dir;
    char path[512];
    struct ser *v;
    size_t n;
    uint8_t *file;
    size_t len;
};

/* 120 series in 40 device groups: three sparse-table entries, multi-bucket groups. */
static void corpus_make(struct corpus *cp)
{
    cp->dir = eu_make_flat_dir("/tmp/bdb-block-test");
    cp->v = build_model(2, 20, 3, &cp->n);
    write_model(bdb_vfs_posix(), cp->dir, "c", cp->v, cp->n, NULL);
    snprintf(cp->path, sizeof cp->path, "%s/c", cp->dir);
    cp->file = eu_read_file(cp->path, &cp->len);
    assert_int_equal(footer_field(cp->file, cp->len, FT_NSPARSE), 3);
}

static void corpus_free(struct corpus *cp)
{
    free(cp->file);
    free(cp->v);
    eu_remove_flat_dir(cp->dir);
}

/* Region boundaries of the corpus file, from its footer. */
struct regions {
    uint64_t groups, sparse, stroffs, strs, footer;
};

static struct regions regions_of(const uint8_t *file, size_t len)
{
    struct regions r;
    r.groups = footer_field(file, len, FT_INDEX_OFF);
    r.sparse = r.groups + footer_field(file, len, FT_GROUPS_LEN);
    r.stroffs = r.sparse + SPARSE_ENTRY * footer_field(file, len, FT_NSPARSE);
    r.strs = r.stroffs + 4 * footer_field(file, len, FT_NSTRINGS);
    r.footer = len - FTR;
    return r;
}

/* Opens the damaged file and walks everything. Returns 1 if damage was reported.
 * Asserts that nothing returned differs from what was written, unless `trusted` is
 * 0 (CRCs were resealed, so only memory safety and sanity are at stake). */
static int probe(struct corpus *cp, const uint8_t *img, size_t len, int trusted)
{
    eu_write_file(cp->path, img, len);
    bdb_block *b;
    int rc = bdb_block_open(bdb_vfs_posix(), cp->path, &b);
    if (rc == BDB_ERR_CORRUPT)
        return 1;
    assert_int_equal(rc, BDB_OK);
    const bdb_block_meta *m = bdb_block_get_meta(b);
    int detected = 0;
    if (trusted) {
        assert_int_equal(m->nseries, cp->n);
        assert_int_equal(m->seq, 42);
    }
    for (size_t s = 0; s < cp->n; s++) {
        bdb_series_key k;
        to_key(&cp->v[s], &k);
        bdb_block_cursor cur;
        rc = bdb_block_find(b, &k, &cur);
        if (trusted)
            assert_int_equal(rc, BDB_OK);
        if (rc != BDB_OK)
            continue;
        assert_true(cur.nchunks >= 1 && cur.nchunks <= m->nchunks);
        bdb_chunk_ref c;
        int j = 0;
        while ((rc = bdb_block_cursor_next(&cur, &c)) != 0) {
            if (rc == BDB_ERR_CORRUPT) {
                detected = 1;
                break;
            }
            assert_int_equal(rc, 1);
            assert_true((uint64_t)j < cur.nchunks);
            if (trusted) {
                assert_true(chunk_matches(&c, s, j));
            } else {
                /* Touch every byte: an out-of-bounds range would fault here. */
                volatile uint8_t sink = 0;
                assert_true(c.len < len);
                for (size_t x = 0; x < c.len; x++)
                    sink ^= c.data[x];
                (void)sink;
                assert_true(c.min_ts <= c.max_ts && c.min_ts >= m->window_start &&
                            c.max_ts < m->window_end);
            }
            j++;
        }
        if (rc == 0)
            assert_int_equal((uint64_t)j, cur.nchunks);
    }
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    size_t iterated = 0;
    bdb_series_key k;
    bdb_block_cursor cur;
    while ((rc = bdb_block_iter_next(&it, &k, &cur)) == 1 && iterated <= m->nseries)
        iterated++;
    assert_int_equal(rc, 0);
    assert_int_equal(iterated, m->nseries);
    bdb_block_part_iter pit;
    bdb_block_part_iter_init(b, &pit);
    bdb_partition_stat ps;
    size_t parts = 0;
    while (bdb_block_partition_next(&pit, &ps) == 1 && parts < len)
        parts++;
    assert_true(parts <= m->nchunks);
    bdb_block_close(b);
    return detected;
}

static int open_rc(struct corpus *cp, const uint8_t *img, size_t len)
{
    eu_write_file(cp->path, img, len);
    bdb_block *b;
    int rc = bdb_block_open(bdb_vfs_posix(), cp->path, &b);
    if (rc == BDB_OK)
        bdb_block_close(b);
    return rc;
}

/* Every region, 400 flips each: CRC-32 catches every burst up to 32 bits, and no
 * byte of the format is left unchecked (the chunk bytes by their series' run CRC when
 * read, everything else at open). */
static void test_bit_flips(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    struct regions rg = regions_of(cp.file, cp.len);
    uint64_t regions[][2] = {
        {0, HDR},                /* header */
        {HDR, rg.groups},        /* chunk data and run CRCs */
        {rg.groups, rg.sparse},  /* group records */
        {rg.sparse, rg.stroffs}, /* sparse group table */
        {rg.stroffs, rg.strs},   /* string offsets */
        {rg.strs, rg.footer},    /* string bytes */
        {rg.footer, cp.len},     /* footer */
    };
    uint8_t *img = malloc(cp.len);
    assert_non_null(img);
    uint64_t seed = 12345;
    for (size_t r = 0; r < sizeof regions / sizeof *regions; r++) {
        uint64_t lo = regions[r][0], hi = regions[r][1];
        assert_true(lo < hi && hi <= cp.len);
        int flips = 0, detected = 0;
        for (int i = 0; i < 400; i++) {
            memcpy(img, cp.file, cp.len);
            uint64_t at = lo + rng_next(&seed) % (hi - lo);
            if (i % 4 == 3) /* a burst: a whole byte overwritten */
                img[at] ^= (uint8_t)(1 + rng_next(&seed) % 255);
            else
                img[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
            flips++;
            detected += probe(&cp, img, cp.len, 1);
        }
        assert_int_equal(detected, flips);
    }
    free(img);
    corpus_free(&cp);
}

/* Damage with valid CRCs on top, as a buggy writer or a crafted file would produce:
 * the structural checks must reject it or the accessors must stay in bounds. */
static void test_structural_damage(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    uint8_t *img = malloc(cp.len);
    assert_non_null(img);
    struct regions rg = regions_of(cp.file, cp.len);
    struct grec g0 = group_fields(cp.file, rg.groups);
    size_t len = cp.len;

    /* Targeted: each must be rejected at open. */
    for (int t = 0; t < 22; t++) {
        memcpy(img, cp.file, len);
        switch (t) {
        case 0: /* sparse entry's data offset shifted */
            eu_put64(img + rg.sparse + SPARSE_ENTRY + 8,
                     eu_get64(img + rg.sparse + SPARSE_ENTRY + 8) + 1);
            break;
        case 1: /* sparse entry's group offset shifted */
            eu_put64(img + rg.sparse + SPARSE_ENTRY, eu_get64(img + rg.sparse + SPARSE_ENTRY) + 1);
            break;
        case 2: /* first group's data length off by one */
            img[g0.data_len] ^= 1;
            break;
        case 3: /* first group's device renamed past the second: groups out of order */
            img[g0.dev + 1] = 'z';
            break;
        case 4: /* first string renamed past the second */
            img[rg.strs] = 'z';
            break;
        case 5: /* absurd series count */
            set_footer_field(img, len, FT_NSERIES, UINT64_MAX / 4);
            break;
        case 6: /* absurd chunk count */
            set_footer_field(img, len, FT_NCHUNKS, 1ull << 60);
            break;
        case 7: /* index offset beyond the file */
            set_footer_field(img, len, FT_INDEX_OFF, UINT64_MAX - 10);
            break;
        case 8: /* window shrunk (header and footer agree) so chunks fall outside it */
            set_footer_field(img, len, FT_WINDOW_END, W0 + 1000);
            eu_put64(img + 16, W0 + 1000);
            break;
        case 9: /* footer sample total disagrees */
            set_footer_field(img, len, FT_NSAMPLES, footer_field(img, len, FT_NSAMPLES) + 1);
            break;
        case 10: /* window reversed */
            set_footer_field(img, len, FT_WINDOW_START, W0 + 2 * WINDOW);
            eu_put64(img + 8, W0 + 2 * WINDOW);
            break;
        case 11: /* group table one byte shorter: the sparse table shifts */
            set_footer_field(img, len, FT_GROUPS_LEN, footer_field(img, len, FT_GROUPS_LEN) - 1);
            break;
        case 12: /* sparse stride that does not match the table */
            eu_put32(img + len - FTR + FT_STRIDE, 1);
            break;
        case 13: /* stride 0 */
            eu_put32(img + len - FTR + FT_STRIDE, 0);
            break;
        case 14: /* one string fewer: names shift, ids run past the table */
            set_footer_field(img, len, FT_NSTRINGS, footer_field(img, len, FT_NSTRINGS) - 1);
            break;
        case 15: /* one group more than there are */
            set_footer_field(img, len, FT_NGROUPS, footer_field(img, len, FT_NGROUPS) + 1);
            break;
        case 16: /* min_ts total disagrees */
            set_footer_field(img, len, FT_MIN_TS, W0 + 1);
            break;
        case 17: /* tenant id past the string table */
            img[g0.tid] = 0x7f;
            break;
        case 18: /* group body one byte shorter than its series */
            img[g0.body_len] -= 1;
            break;
        case 19: /* first group claims zero series */
            img[g0.body] = 0;
            break;
        case 20: /* string offsets out of order */
            eu_put32(img + rg.stroffs + 4, 0xffff);
            break;
        case 21: /* data region one byte longer than the groups account for */
            set_footer_field(img, len, FT_INDEX_OFF, footer_field(img, len, FT_INDEX_OFF) + 1);
            set_footer_field(img, len, FT_GROUPS_LEN, footer_field(img, len, FT_GROUPS_LEN) - 1);
            break;
        }
        reseal(img, len);
        assert_int_equal(open_rc(&cp, img, len), BDB_ERR_CORRUPT);
    }

    /* Random: flips anywhere in the index or the footer's fields, resealed. */
    uint64_t seed = 777;
    for (int i = 0; i < 400; i++) {
        memcpy(img, cp.file, len);
        uint64_t span = len - FTR + FT_INDEX_CRC - rg.groups; /* not the CRCs or magic */
        uint64_t at = rg.groups + rng_next(&seed) % span;
        img[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
        reseal(img, len);
        probe(&cp, img, len, 0);
    }
    /* Random: whole bytes of the group records replaced, resealed. */
    for (int i = 0; i < 400; i++) {
        memcpy(img, cp.file, len);
        for (int j = 0; j < 3; j++)
            img[rg.groups + rng_next(&seed) % (rg.sparse - rg.groups)] = (uint8_t)rng_next(&seed);
        reseal(img, len);
        probe(&cp, img, len, 0);
    }
    free(img);
    corpus_free(&cp);
}

/* Reads every series of the fixture's content from b and compares it, sample for
 * sample, with blockfix.h; *bare counts the chunks handed out bare, *stored their
 * bytes as stored. */
static void check_fixture(const bdb_block *b, int *bare, uint64_t *stored)
{
    *bare = 0;
    *stored = 0;
    int64_t ts[BF_MAXN];
    double v[BF_MAXN];
    for (int s = 0; s < BF_NSERIES; s++) {
        char metric[16];
        snprintf(metric, sizeof metric, "m%d", s);
        bdb_series_key k = {"t", 1, "d", 1, metric, strlen(metric)};
        bdb_block_cursor cur;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        size_t n;
        int form, j = 0;
        bdb_chunk_ref c;
        while (bdb_block_cursor_next(&cur, &c) == 1) {
            assert_true(bf_chunk(s, j++, ts, v, &n, &form));
            assert_int_equal(c.count, n);
            assert_int_equal(c.min_ts, ts[0]);
            *bare += c.bare;
            *stored += c.len;
            bdb_chunk_iter it;
            assert_int_equal(bdb_block_chunk_iter(&c, &it), BDB_OK);
            int64_t t;
            double x;
            size_t i = 0;
            while (bdb_chunk_iter_next(&it, &t, &x) == 1) {
                assert_true(i < n);
                assert_int_equal(t, ts[i]);
                assert_true(x == v[i]);
                i++;
            }
            assert_int_equal(i, n);
        }
        assert_false(bf_chunk(s, j, ts, v, &n, &form));
    }
}

/* Version 3 keeps a PACKED chunk bare (without the count and first timestamp its
 * entry holds) and every other chunk whole; a version 2 file written by commit
 * 42dff49 (tests/fixtures/blocks) is still read, its chunks whole, to the same
 * samples. The saving is exactly the two header fields of each PACKED chunk. */
static void test_bare_chunks_and_version2(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-test");
    bdb_vfs *vfs = bdb_vfs_posix();
    assert_int_equal(bf_write(vfs, dir, "v3"), BDB_OK);
    bdb_block *b3 = open_ok(vfs, dir, "v3");
    assert_int_equal(bdb_block_get_meta(b3)->version, 3);
    int bare3;
    uint64_t stored3;
    check_fixture(b3, &bare3, &stored3);
    assert_int_equal(bare3, 6); /* all but m3's XOR chunk */

    char path[600];
    snprintf(path, sizeof path, "tests/fixtures/blocks/v2-chunks.blk");
    bdb_block *b2;
    assert_int_equal(bdb_block_open(vfs, path, &b2), BDB_OK);
    assert_int_equal(bdb_block_get_meta(b2)->version, 2);
    int bare2;
    uint64_t stored2;
    check_fixture(b2, &bare2, &stored2);
    assert_int_equal(bare2, 0);

    /* What bare saves: the count (1 byte each here) and the first timestamp (6 bytes in
     * milliseconds: m0, m2, m4; 5 in seconds: m1 and m5's two) of the six PACKED chunks. */
    uint64_t want = 0;
    int64_t ts[BF_MAXN];
    double v[BF_MAXN];
    size_t n;
    int form;
    for (int s = 0; s < BF_NSERIES; s++)
        for (int j = 0; bf_chunk(s, j, ts, v, &n, &form); j++) {
            bdb_buf c;
            bdb_buf_init_checked(&c);
            assert_int_equal(bdb_chunk_encode_as(ts, v, n, form, &c), BDB_OK);
            size_t rest;
            int r = bdb_chunk_bare_offset(c.data, c.len, ts[0], (uint32_t)n, &rest);
            assert_int_equal(r, s == 3 ? BDB_ERR_NOTFOUND : BDB_OK);
            if (r == BDB_OK)
                want += rest - 1;
            bdb_buf_free(&c);
        }
    assert_int_equal(stored2 - stored3, want);
    assert_int_equal(want, 3 * (1 + 6) + 3 * (1 + 5));
    assert_int_equal(bdb_block_get_meta(b2)->file_bytes - bdb_block_get_meta(b3)->file_bytes, want);
    bdb_block_close(b2);
    bdb_block_close(b3);

    /* The writer refuses a PACKED chunk whose header disagrees with its entry, and
     * stays usable. */
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "bad", BF_W0, BF_W0 + BF_WINDOW, 1, &w),
                     BDB_OK);
    assert_true(bf_chunk(0, 0, ts, v, &n, &form));
    bdb_buf c;
    bdb_buf_init_checked(&c);
    assert_int_equal(bdb_chunk_encode_as(ts, v, n, form, &c), BDB_OK);
    bdb_series_key k = {"t", 1, "d", 1, "m0", 2};
    bdb_chunk_ref r = {.bucket_start = BF_W0,
                       .min_ts = ts[0] + 1,
                       .max_ts = ts[n - 1],
                       .count = (uint32_t)n,
                       .data = c.data,
                       .len = c.len};
    assert_int_equal(bdb_block_writer_add(w, &k, &r), BDB_ERR_INVALID); /* first ts */
    r.min_ts = ts[0];
    r.count = (uint32_t)n - 1;
    assert_int_equal(bdb_block_writer_add(w, &k, &r), BDB_ERR_INVALID); /* count */
    r.count = (uint32_t)n;
    r.len = 3; /* cut inside the header */
    assert_int_equal(bdb_block_writer_add(w, &k, &r), BDB_ERR_INVALID);
    r.len = c.len;
    assert_int_equal(bdb_block_writer_add(w, &k, &r), BDB_OK);
    bdb_block_meta meta;
    assert_int_equal(bdb_block_writer_finish(w, &meta), BDB_OK);
    assert_int_equal(meta.nchunks, 1);
    bdb_buf_free(&c);

    /* A bare chunk read with an entry whose first timestamp its unit cannot hold (m1
     * counts whole seconds) is damage, not data. */
    assert_true(bf_chunk(1, 0, ts, v, &n, &form));
    bdb_buf_init_checked(&c);
    assert_int_equal(bdb_chunk_encode_as(ts, v, n, form, &c), BDB_OK);
    size_t rest;
    assert_int_equal(bdb_chunk_bare_offset(c.data, c.len, ts[0], (uint32_t)n, &rest), BDB_OK);
    uint8_t bare[128];
    bare[0] = c.data[0];
    memcpy(bare + 1, c.data + rest, c.len - rest);
    bdb_chunk_iter it;
    size_t blen = 1 + c.len - rest;
    assert_int_equal(bdb_chunk_iter_init_bare(&it, bare, blen, ts[0], (uint32_t)n), BDB_OK);
    assert_int_equal(bdb_chunk_iter_init_bare(&it, bare, blen, ts[0] + 500, (uint32_t)n),
                     BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_iter_init_bare(&it, bare, blen, ts[0], 0), BDB_ERR_CORRUPT);
    assert_int_equal(bdb_chunk_iter_init_bare(&it, bare, 1, ts[0], (uint32_t)n), BDB_ERR_CORRUPT);
    bdb_buf_free(&c);
    eu_remove_flat_dir(dir);
}

/* A file of another format version is refused with a message that says so. */
static void test_other_versions_rejected(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    uint8_t *img = malloc(cp.len);
    assert_non_null(img);
    char logpath[600];
    snprintf(logpath, sizeof logpath, "%s/log", cp.dir);
    uint32_t versions[] = {1, 4, 0xffffffffu};
    for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
        memcpy(img, cp.file, cp.len);
        eu_put32(img + cp.len - FTR + FT_VERSION, versions[i]);
        img[6] = (uint8_t)versions[i];
        img[7] = (uint8_t)(versions[i] >> 8);
        reseal(img, cp.len);
        /* Capture the warning. */
        int saved = eu_stderr_to(logpath);
        bdb_log_set_level(BDB_LOG_WARN);
        int rc = open_rc(&cp, img, cp.len);
        bdb_log_set_level(BDB_LOG_ERROR);
        eu_stderr_restore(saved);
        assert_int_equal(rc, BDB_ERR_CORRUPT);
        size_t n;
        uint8_t *log = eu_read_file(logpath, &n);
        log[n] = 0;
        char want[64];
        snprintf(want, sizeof want, "format version %u", versions[i]);
        assert_non_null(strstr((char *)log, want));
        assert_non_null(strstr((char *)log, "reads versions 2 to 3"));
        free(log);
        unlink(logpath);
    }
    free(img);
    corpus_free(&cp);
}

static void test_truncated_and_extended(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    uint64_t index_off = footer_field(cp.file, cp.len, FT_INDEX_OFF);
    size_t cuts[] = {0,
                     1,
                     HDR - 1,
                     HDR,
                     HDR + FTR - 1,
                     HDR + FTR,
                     (size_t)index_off - 1,
                     (size_t)index_off,
                     (size_t)index_off + 9,
                     cp.len - FTR,
                     cp.len - FTR + 1,
                     cp.len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++)
        assert_int_equal(open_rc(&cp, cp.file, cuts[i]), BDB_ERR_CORRUPT);
    /* Trailing garbage after a valid footer hides the footer. */
    uint8_t *big = malloc(cp.len + 100);
    assert_non_null(big);
    memcpy(big, cp.file, cp.len);
    memset(big + cp.len, 0xab, 100);
    assert_int_equal(open_rc(&cp, big, cp.len + 1), BDB_ERR_CORRUPT);
    assert_int_equal(open_rc(&cp, big, cp.len + 100), BDB_ERR_CORRUPT);
    /* The intact image still opens, so the rejections above were about the damage. */
    assert_int_equal(probe(&cp, cp.file, cp.len, 1), 0);
    free(big);
    corpus_free(&cp);
}

int main(void)
{
    bdb_log_set_level(BDB_LOG_ERROR); /* corruption warnings are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_empty_block),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_extreme_values),
        cmocka_unit_test(test_order_violations),
        cmocka_unit_test(test_window_violations),
        cmocka_unit_test(test_abort_leaves_nothing),
        cmocka_unit_test(test_buffered_writes),
        cmocka_unit_test(test_io_failures_leave_nothing),
        cmocka_unit_test(test_compact_index),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_structural_damage),
        cmocka_unit_test(test_other_versions_rejected),
        cmocka_unit_test(test_bare_chunks_and_version2),
        cmocka_unit_test(test_truncated_and_extended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
