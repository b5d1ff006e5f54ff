/* Block file tests: round trip over 1000+ series, lookups, iteration, seeks, partition
 * statistics, writer rule enforcement, failure cleanup, and corruption handling
 * (bit flips in every region, structural damage under valid CRCs, truncation). */
#include "storage/embedded/block.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
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

/* Format constants from docs/formats/block.md, used to aim damage at regions. */
#define HDR 36
#define FTR 140
#define CHUNK_ENTRY 44

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

static char *make_tmpdir(void)
{
    char *d = strdup("/tmp/bdb-block-test-XXXXXX");
    assert_non_null(d);
    assert_non_null(mkdtemp(d));
    return d;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static void remove_tmpdir(char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
    free(dir);
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_file(const char *path, const uint8_t *b, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (len) assert_int_equal(fwrite(b, 1, len, f), len);
    fclose(f);
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Footer fields: index_off, series_len, offsets_off, chunks_off, parts_off, ... */
static uint64_t footer_field(const uint8_t *file, size_t len, int i)
{
    return get64(file + len - FTR + 8 * i);
}

/* Recomputes the index and footer CRCs, so damage reaches the structural checks. */
static void reseal(uint8_t *file, size_t len)
{
    uint8_t *ft = file + len - FTR;
    uint64_t index_off = get64(ft);
    if (index_off <= len - FTR)
        put32(ft + 124, (uint32_t)crc32(0, file + index_off, (uInt)(len - FTR - index_off)));
    put32(ft + 128, (uint32_t)crc32(0, ft, 128));
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

/* Chunk j of series s lies in bucket j; bytes come from a seeded generator. */
static void gen_chunk(size_t s, int j, bdb_chunk_ref *c, uint8_t *buf)
{
    c->bucket_start = W0 + j * BUCKET;
    c->count = 1 + (uint32_t)((s * 7 + (size_t)j) % 50);
    c->min_ts = c->bucket_start + (int64_t)(s % 100);
    c->max_ts = c->min_ts + (int64_t)c->count * 1000;
    c->len = 1 + (s * 31 + (size_t)j * 17) % 300;
    uint64_t seed = s * 1000003 + (uint64_t)j;
    for (size_t i = 0; i < c->len; i++)
        buf[i] = (uint8_t)rng_next(&seed);
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

/* Returns 1 if chunk i equals what gen_chunk made for (s, j). */
static int chunk_matches(const bdb_chunk_ref *got, size_t s, int j)
{
    uint8_t buf[512];
    bdb_chunk_ref want;
    gen_chunk(s, j, &want, buf);
    return got->bucket_start == want.bucket_start && got->min_ts == want.min_ts &&
           got->max_ts == want.max_ts && got->count == want.count && got->len == want.len &&
           memcmp(got->data, want.data, want.len) == 0;
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

/* ---- tests ---- */

static void test_roundtrip(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    bdb_vfs *vfs = bdb_vfs_posix();
    size_t n;
    struct ser *v = build_model(4, 25, 11, &n);
    assert_true(n >= 1000);

    bdb_block_meta wm;
    write_model(vfs, dir, "b1", v, n, &wm);
    assert_int_equal(count_entries(dir), 1); /* no .tmp left behind */

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
    assert_int_equal(wm.nseries, n);
    assert_int_equal(wm.nchunks, nchunks);
    assert_int_equal(wm.nsamples, nsamples);
    assert_int_equal(wm.file_bytes, (uint64_t)st.st_size);

    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    const bdb_block_meta *m = bdb_block_get_meta(b);
    assert_int_equal(m->version, 1);
    assert_int_equal(m->window_start, W0);
    assert_int_equal(m->window_end, W0 + WINDOW);
    assert_int_equal(m->seq, 42);
    assert_int_equal(m->nseries, n);
    assert_int_equal(m->nchunks, nchunks);
    assert_int_equal(m->nsamples, nsamples);
    assert_int_equal(m->file_bytes, wm.file_bytes);
    assert_int_equal(m->min_ts, wm.min_ts);
    assert_int_equal(m->max_ts, wm.max_ts);
    assert_int_equal(m->min_ts, W0); /* series 0, chunk 0 */

    /* Every series by lookup, every chunk byte for byte. */
    size_t next_first = 0;
    for (size_t s = 0; s < n; s++) {
        bdb_series_key k;
        to_key(&v[s], &k);
        size_t first = 99, cnt = 99;
        assert_int_equal(bdb_block_find(b, &k, &first, &cnt), BDB_OK);
        assert_int_equal(first, next_first);
        assert_int_equal(cnt, (size_t)v[s].nch);
        for (int j = 0; j < v[s].nch; j++) {
            bdb_chunk_ref c;
            assert_int_equal(bdb_block_chunk(b, first + (size_t)j, &c), BDB_OK);
            assert_true(chunk_matches(&c, s, j));
        }
        next_first += cnt;
    }
    bdb_chunk_ref c;
    assert_int_equal(bdb_block_chunk(b, (size_t)nchunks, &c), BDB_ERR_INVALID);

    /* Missing keys: prefixes, neighbours, and beyond both ends. */
    const char *missing[][3] = {{"acme", "d1", "tem"}, {"acme", "d1", "temp_"},
                                {"acm", "d1", "temp"}, {"acme", "d", "temp"},
                                {"", "", ""},          {"zzz", "d1", "v"},
                                {"acme-", "d1", "v"},  {"acme", "d99", "v"},
                                {"b", "d1", "zz"}};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        bdb_series_key k = {missing[i][0],         strlen(missing[i][0]), missing[i][1],
                            strlen(missing[i][1]), missing[i][2],         strlen(missing[i][2])};
        size_t first, cnt;
        assert_int_equal(bdb_block_find(b, &k, &first, &cnt), BDB_ERR_NOTFOUND);
    }

    /* Iteration returns the model order. */
    size_t pos = 0, s = 0, first, cnt;
    bdb_series_key k;
    next_first = 0;
    while (bdb_block_series_next(b, &pos, &k, &first, &cnt)) {
        assert_true(s < n);
        bdb_series_key want;
        to_key(&v[s], &want);
        assert_int_equal(bdb_series_key_cmp(&k, &want), 0);
        assert_int_equal(first, next_first);
        next_first += cnt;
        s++;
    }
    assert_int_equal(s, n);
    assert_int_equal(pos, n);

    /* Seeks by tenant, by tenant+device, and between keys. */
    const char *seeks[][2] = {{"acme", NULL}, {"acme-eu", NULL}, {"b", NULL},  {"zeta", NULL},
                              {"", NULL},     {"acme-", NULL},   {"c", NULL},  {"zz", NULL},
                              {"acme", "d1"}, {"acme", "d10"},   {"b", "d24"}, {"b", "d3x"},
                              {"zeta", "d9"}, {"zeta", "e"},     {"acme", ""}};
    for (size_t i = 0; i < sizeof seeks / sizeof *seeks; i++) {
        const char *t = seeks[i][0], *d = seeks[i][1];
        size_t got = bdb_block_seek(b, t, strlen(t), d, d ? strlen(d) : 0);
        assert_int_equal(got, seek_expect(v, n, t, d));
    }
    /* Listing one tenant's devices from a seek stops at the next tenant. */
    pos = bdb_block_seek(b, "b", 1, NULL, 0);
    size_t listed = 0;
    while (bdb_block_series_next(b, &pos, &k, &first, &cnt) && k.tenant_len == 1 &&
           k.tenant[0] == 'b')
        listed++;
    assert_int_equal(listed, 25 * 11);

    /* Partition stats equal the model's sums over each device's metrics. */
    size_t ppos = 0, nparts = 0;
    bdb_partition_stat ps;
    for (size_t d0 = 0; d0 < n;) {
        size_t d1 = d0;
        while (d1 < n && !strcmp(v[d1].t, v[d0].t) && !strcmp(v[d1].d, v[d0].d))
            d1++;
        for (int j = 0; j < MAXCH; j++) {
            uint64_t rows = 0, bytes = 0;
            for (size_t i = d0; i < d1; i++)
                if (j < v[i].nch) {
                    uint8_t buf[512];
                    gen_chunk(i, j, &c, buf);
                    rows += c.count;
                    bytes += c.len;
                }
            if (!rows) continue;
            assert_int_equal(bdb_block_partition_next(b, &ppos, &ps), 1);
            assert_int_equal(ps.key.tenant_len, strlen(v[d0].t));
            assert_memory_equal(ps.key.tenant, v[d0].t, ps.key.tenant_len);
            assert_int_equal(ps.key.device_len, strlen(v[d0].d));
            assert_memory_equal(ps.key.device, v[d0].d, ps.key.device_len);
            assert_int_equal(ps.key.metric_len, 0);
            assert_int_equal(ps.bucket_start, W0 + j * BUCKET);
            assert_int_equal(ps.rows, rows);
            assert_int_equal(ps.bytes, bytes);
            nparts++;
        }
        d0 = d1;
    }
    assert_int_equal(bdb_block_partition_next(b, &ppos, &ps), 0);
    assert_true(nparts > 100 * MAXCH / 2);

    bdb_block_close(b);
    free(v);
    remove_tmpdir(dir);
}

static void test_empty_block(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "e", 0, 10, 1, &w), BDB_OK);
    bdb_block_meta wm;
    assert_int_equal(bdb_block_writer_finish(w, &wm), BDB_OK);
    assert_int_equal(wm.nchunks, 0);
    assert_true(wm.min_ts > wm.max_ts); /* overlaps no query range */

    char path[512];
    snprintf(path, sizeof path, "%s/e", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    assert_int_equal(bdb_block_get_meta(b)->nseries, 0);
    bdb_series_key k = {"a", 1, "b", 1, "c", 1}, kk;
    size_t first, cnt, pos = 0;
    assert_int_equal(bdb_block_find(b, &k, &first, &cnt), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_block_series_next(b, &pos, &kk, &first, &cnt), 0);
    assert_int_equal(bdb_block_seek(b, "a", 1, NULL, 0), 0);
    bdb_partition_stat ps;
    assert_int_equal(bdb_block_partition_next(b, &pos, &ps), 0);
    bdb_block_close(b);
    remove_tmpdir(dir);
}

static void test_order_violations(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
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
    /* The rejected calls left the writer usable. */
    c.min_ts = 300;
    c.max_ts = 300;
    assert_int_equal(bdb_block_writer_add(w, &b2, &c), BDB_OK);
    bdb_block_meta m;
    assert_int_equal(bdb_block_writer_finish(w, &m), BDB_OK);
    assert_int_equal(m.nseries, 2);
    assert_int_equal(m.nchunks, 4);

    char path[512];
    snprintf(path, sizeof path, "%s/o", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    size_t first, cnt;
    assert_int_equal(bdb_block_find(b, &a, &first, &cnt), BDB_OK);
    assert_int_equal(first, 0);
    assert_int_equal(cnt, 2);
    assert_int_equal(bdb_block_find(b, &b2, &first, &cnt), BDB_OK);
    assert_int_equal(first, 2);
    assert_int_equal(cnt, 2);
    bdb_block_close(b);
    remove_tmpdir(dir);
}

static void test_window_violations(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "w", 1000, 1000, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(vfs, dir, "w", 1000, 999, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(count_entries(dir), 0);
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
    remove_tmpdir(dir);
}

static void test_abort_leaves_nothing(void **state)
{
    (void)state;
    char *dir = make_tmpdir();
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "a", 0, 1 << 30, 1, &w), BDB_OK);
    assert_int_equal(count_entries(dir), 1);
    bdb_block_writer_abort(w);
    assert_int_equal(count_entries(dir), 0);

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
    assert_int_equal(count_entries(dir), 0);
    remove_tmpdir(dir);
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
    char *dir = make_tmpdir();
    struct tvfs v = {.base = {&t_ops}, .under = bdb_vfs_posix()};
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(&v.base, dir, "p", 0, 1 << 30, 1, &w), BDB_OK);
    /* 4 MiB in 1 KiB chunks, then one 3 MiB chunk that bypasses the staging buffer. */
    static uint8_t data[3 << 20];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 131 + 7);
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
    bdb_chunk_ref c;
    assert_int_equal(bdb_block_chunk(b, 4096, &c), BDB_OK);
    assert_int_equal(c.len, sizeof data);
    assert_int_equal(c.count, 9);
    assert_memory_equal(c.data, data, sizeof data);
    assert_int_equal(bdb_block_chunk(b, 17, &c), BDB_OK);
    assert_memory_equal(c.data, data + 17, 1024);
    bdb_block_close(b);
    remove_tmpdir(dir);
}

static void test_io_failures_leave_nothing(void **state)
{
    (void)state;
    int modes[] = {FAIL_PWRITE, FAIL_SYNC, FAIL_RENAME, FAIL_SYNC_DIR};
    static uint8_t data[256 * 1024];
    bdb_series_key k = {"t", 1, "d", 1, "m", 1};
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
        char *dir = make_tmpdir();
        struct tvfs v = {
            .base = {&t_ops}, .under = bdb_vfs_posix(), .fail = modes[mi], .fail_after = 1};
        bdb_block_writer *w;
        assert_int_equal(bdb_block_writer_open(&v.base, dir, "f", 0, 1 << 30, 1, &w), BDB_OK);
        int rc = BDB_OK;
        for (int i = 0; i < 12 && rc == BDB_OK; i++) {
            bdb_chunk_ref c = {
                .min_ts = i, .max_ts = i, .count = 1, .data = data, .len = sizeof data};
            rc = bdb_block_writer_add(w, &k, &c);
        }
        if (modes[mi] == FAIL_PWRITE) {
            /* The second flush fails, and the error sticks. */
            assert_int_equal(rc, BDB_ERR_IO);
            bdb_chunk_ref c = {.min_ts = 100, .max_ts = 100, .count = 1, .data = data, .len = 1};
            assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_ERR_IO);
        } else {
            assert_int_equal(rc, BDB_OK);
        }
        assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_ERR_IO);
        assert_int_equal(count_entries(dir), 0);
        remove_tmpdir(dir);
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

static void corpus_make(struct corpus *cp)
{
    cp->dir = make_tmpdir();
    cp->v = build_model(2, 4, 5, &cp->n);
    write_model(bdb_vfs_posix(), cp->dir, "c", cp->v, cp->n, NULL);
    snprintf(cp->path, sizeof cp->path, "%s/c", cp->dir);
    cp->file = read_file(cp->path, &cp->len);
}

static void corpus_free(struct corpus *cp)
{
    free(cp->file);
    free(cp->v);
    remove_tmpdir(cp->dir);
}

/* Opens the damaged file and walks everything. Returns 1 if damage was reported.
 * Asserts that nothing returned differs from what was written, unless `trusted` is
 * 0 (CRCs were resealed, so only memory safety and sanity are at stake). */
static int probe(struct corpus *cp, const uint8_t *img, size_t len, int trusted)
{
    write_file(cp->path, img, len);
    bdb_block *b;
    int rc = bdb_block_open(bdb_vfs_posix(), cp->path, &b);
    if (rc == BDB_ERR_CORRUPT) return 1;
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
        size_t first, cnt;
        rc = bdb_block_find(b, &k, &first, &cnt);
        if (trusted) assert_int_equal(rc, BDB_OK);
        if (rc != BDB_OK) continue;
        assert_true(first < m->nchunks && cnt <= m->nchunks - first);
        for (size_t j = 0; j < cnt; j++) {
            bdb_chunk_ref c;
            rc = bdb_block_chunk(b, first + j, &c);
            if (rc == BDB_ERR_CORRUPT) {
                detected = 1;
                continue;
            }
            assert_int_equal(rc, BDB_OK);
            if (trusted) {
                assert_true(chunk_matches(&c, s, (int)j));
            } else {
                /* Touch every byte: an out-of-bounds range would fault here. */
                volatile uint8_t sink = 0;
                assert_true(c.len < len);
                for (size_t x = 0; x < c.len; x++)
                    sink ^= c.data[x];
                (void)sink;
            }
        }
    }
    size_t pos = 0, first, cnt, iterated = 0;
    bdb_series_key k;
    while (bdb_block_series_next(b, &pos, &k, &first, &cnt) && iterated <= m->nseries)
        iterated++;
    assert_int_equal(iterated, m->nseries);
    bdb_partition_stat ps;
    pos = 0;
    size_t parts = 0;
    while (bdb_block_partition_next(b, &pos, &ps) && parts < len)
        parts++;
    assert_true(parts < len);
    bdb_block_close(b);
    return detected;
}

static int open_rc(struct corpus *cp, const uint8_t *img, size_t len)
{
    write_file(cp->path, img, len);
    bdb_block *b;
    int rc = bdb_block_open(bdb_vfs_posix(), cp->path, &b);
    if (rc == BDB_OK) bdb_block_close(b);
    return rc;
}

static void test_bit_flips(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    uint64_t index_off = footer_field(cp.file, cp.len, 0);
    uint64_t offsets_off = footer_field(cp.file, cp.len, 2);
    uint64_t chunks_off = footer_field(cp.file, cp.len, 3);
    uint64_t parts_off = footer_field(cp.file, cp.len, 4);
    uint64_t regions[][2] = {
        {0, HDR},                  /* header */
        {HDR, index_off},          /* chunk data and CRCs */
        {index_off, offsets_off},  /* series table */
        {offsets_off, chunks_off}, /* offset table */
        {chunks_off, parts_off},   /* chunk table */
        {parts_off, cp.len - FTR}, /* partition table */
        {cp.len - FTR, cp.len},    /* footer */
    };
    uint8_t *img = malloc(cp.len);
    assert_non_null(img);
    uint64_t seed = 12345;
    int flips = 0, detected = 0;
    for (size_t r = 0; r < sizeof regions / sizeof *regions; r++) {
        uint64_t lo = regions[r][0], hi = regions[r][1];
        assert_true(lo < hi && hi <= cp.len);
        for (int i = 0; i < 60; i++) {
            memcpy(img, cp.file, cp.len);
            uint64_t at = lo + rng_next(&seed) % (hi - lo);
            if (i % 4 == 3) /* a burst: a whole byte overwritten */
                img[at] ^= (uint8_t)(1 + rng_next(&seed) % 255);
            else
                img[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
            flips++;
            detected += probe(&cp, img, cp.len, 1);
        }
    }
    /* CRC32 catches every burst up to 32 bits, and no byte of the format is unchecked. */
    assert_int_equal(detected, flips);
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
    uint64_t chunks_off = footer_field(cp.file, cp.len, 3);
    uint64_t offsets_off = footer_field(cp.file, cp.len, 2);
    uint8_t *ft;

    /* Targeted: each must be rejected at open. */
    for (int t = 0; t < 11; t++) {
        memcpy(img, cp.file, cp.len);
        ft = img + cp.len - FTR;
        switch (t) {
        case 0: /* chunk offset shifted */
            put64(img + chunks_off + 24, get64(img + chunks_off + 24) + 1);
            break;
        case 1: /* chunk length past the data region */
            put32(img + chunks_off + 32, 0xffffffffu);
            break;
        case 2: /* two series share one offset */
            memcpy(img + offsets_off + 8, img + offsets_off + 16, 8);
            break;
        case 10: { /* last chunk shortened: unindexed bytes before the index */
            uint8_t *e = img + chunks_off + CHUNK_ENTRY * (get64(ft + 8 * 7) - 1);
            put32(e + 32, (uint32_t)get64(e + 32) - 1);
            break;
        }
        case 9: /* first series renamed past the second: keys out of order */
            img[footer_field(img, cp.len, 0) + 1] = 'z';
            break;
        case 3: /* absurd series count */
            put64(ft + 8 * 6, UINT64_MAX / 4);
            break;
        case 4: /* absurd chunk count */
            put64(ft + 8 * 7, 1ull << 60);
            break;
        case 5: /* index offset beyond the file */
            put64(ft, UINT64_MAX - 10);
            break;
        case 6: /* chunk time outside the window */
            put64(img + chunks_off + 16, (uint64_t)(W0 + WINDOW));
            break;
        case 7: /* footer sample total disagrees */
            put64(ft + 8 * 9, get64(ft + 8 * 9) + 1);
            break;
        case 8: /* window reversed */
            put64(ft + 8 * 10, (uint64_t)(W0 + 2 * WINDOW));
            break;
        }
        reseal(img, cp.len);
        assert_int_equal(open_rc(&cp, img, cp.len), BDB_ERR_CORRUPT);
    }

    /* Random: flips anywhere in the index or footer fields, resealed. */
    uint64_t index_off = footer_field(cp.file, cp.len, 0);
    uint64_t seed = 777;
    for (int i = 0; i < 400; i++) {
        memcpy(img, cp.file, cp.len);
        uint64_t span = cp.len - 12 - index_off; /* index and footer, not its CRCs/magic */
        uint64_t at = index_off + rng_next(&seed) % span;
        img[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
        reseal(img, cp.len);
        probe(&cp, img, cp.len, 0);
    }
    free(img);
    corpus_free(&cp);
}

static void test_truncated_and_extended(void **state)
{
    (void)state;
    struct corpus cp;
    corpus_make(&cp);
    uint64_t index_off = footer_field(cp.file, cp.len, 0);
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
        cmocka_unit_test(test_order_violations),
        cmocka_unit_test(test_window_violations),
        cmocka_unit_test(test_abort_leaves_nothing),
        cmocka_unit_test(test_buffered_writes),
        cmocka_unit_test(test_io_failures_leave_nothing),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_structural_damage),
        cmocka_unit_test(test_truncated_and_extended),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
