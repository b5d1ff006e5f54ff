/* block_mapped: block files whose damage the CRCs cannot see.
 *
 *  - Hand-built files (docs/formats/block.md) with valid CRCs and one structural lie
 *    each (an overlong varint, a record cut short, more buckets than chunks, a bucket
 *    step past INT64_MAX, a sparse table too short or too long, unindexed data bytes,
 *    string bytes without strings, an index offset inside the header, a name ending
 *    before it starts, a group claiming more data than the region holds): open
 *    refuses each with BDB_ERR_CORRUPT, and the builder's valid file opens and reads
 *    back, so each refusal is about its lie.
 *  - A file changed under the reader's mapping after open (the mapping is shared, and
 *    block.c's accessors check what they decode for this reason): lookups, seeks,
 *    series and partition iteration and cursors return BDB_ERR_CORRUPT, never a chunk
 *    that was not written, nothing crashes (ASan), and once the bytes are restored
 *    everything reads as before. */
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
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "storage/embedded/engutil.h"

#define HDR 36
#define FTR 128
#define W0 INT64_C(1700000000000)
#define WLEN INT64_C(3600000)

/* ---- hand-built files ---- */

struct bb {
    uint8_t p[512];
    size_t n;
};

static void bb_put(struct bb *b, const void *d, size_t n)
{
    assert_true(b->n + n <= sizeof b->p);
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void bb_uv(struct bb *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            c |= 0x80;
        bb_put(b, &c, 1);
    } while (v);
}

static void bb_zz(struct bb *b, int64_t v)
{
    bb_uv(b, ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63)));
}

static void bb_u32(struct bb *b, uint32_t v)
{
    uint8_t x[4];
    eu_put32(x, v);
    bb_put(b, x, 4);
}

static void bb_u64(struct bb *b, uint64_t v)
{
    uint8_t x[8];
    eu_put64(x, v);
    bb_put(b, x, 8);
}

/* The regions of a block and its footer totals, assembled with valid CRCs. */
struct spec {
    struct bb data, groups, sparse, stroffs, strs;
    uint64_t ngroups, nseries, nchunks, nsamples;
    int64_t min_ts, max_ts;
    uint32_t stride;
    int index_off_override; /* write index_off = 0 instead of the real one */
};

static const uint8_t CHUNK[4] = {'C', 'H', 'N', 'K'};

/* A group of one series (metric id 0) with nch chunks of CHUNK, chunk i at
 * W0 + 10 + 100 i .. + 10, 3 samples, in bucket min(i, nb - 1); nb buckets, the later
 * ones bucket_gap + 1 after the one before. Adds the run to the data region. */
static void spec_group(struct spec *s, uint64_t tid, const char *dev, uint64_t nb,
                       uint64_t bucket_gap, uint64_t nch)
{
    struct bb body = {.n = 0};
    bb_uv(&body, 1);
    bb_uv(&body, nb);
    for (uint64_t i = 0; i < nb; i++) {
        if (i == 0)
            bb_zz(&body, 0);
        else
            bb_uv(&body, bucket_gap);
    }
    bb_uv(&body, 0); /* metric id 0 */
    bb_uv(&body, nch);
    uint32_t crc = 0;
    for (uint64_t i = 0; i < nch; i++) {
        if (nb > 1)
            bb_uv(&body, i < nb ? i : nb - 1);
        if (i == 0) {
            bb_zz(&body, 10); /* min_ts - window_start */
            bb_zz(&body, 10); /* span */
            bb_zz(&body, 3);  /* count */
        } else {
            bb_uv(&body, 99); /* min_ts - previous min_ts - 1 */
            bb_zz(&body, 0);
            bb_zz(&body, 0);
        }
        bb_uv(&body, sizeof CHUNK);
        bb_put(&s->data, CHUNK, sizeof CHUNK);
        crc = (uint32_t)crc32(crc, CHUNK, sizeof CHUNK);
    }
    bb_uv(&s->groups, tid);
    bb_uv(&s->groups, strlen(dev));
    bb_put(&s->groups, dev, strlen(dev));
    bb_uv(&s->groups, body.n);
    bb_uv(&s->groups, nch * sizeof CHUNK + 4);
    bb_put(&s->groups, body.p, body.n);
    bb_u32(&s->data, crc);
    s->ngroups++;
    s->nseries++;
    s->nchunks += nch;
    s->nsamples += 3 * nch;
    s->min_ts = W0 + 10;
    s->max_ts = W0 + 20 + 100 * (int64_t)(nch - 1);
}

/* Names "m" (id 0) and "t" (id 1); no groups yet. */
static void spec_init(struct spec *s)
{
    memset(s, 0, sizeof *s);
    s->stride = 16;
    s->min_ts = INT64_MAX;
    s->max_ts = INT64_MIN;
    bb_u32(&s->stroffs, 0);
    bb_u32(&s->stroffs, 1);
    bb_put(&s->strs, "mt", 2);
}

static size_t spec_assemble(const struct spec *s, uint8_t *out)
{
    size_t n = 0;
    memcpy(out, "BDBBLK", 6);
    out[6] = 2;
    out[7] = 0;
    eu_put64(out + 8, (uint64_t)W0);
    eu_put64(out + 16, (uint64_t)(W0 + WLEN));
    eu_put64(out + 24, 5);
    eu_put32(out + 32, (uint32_t)crc32(0, out, 32));
    n = HDR;
    uint64_t index_off = n + s->data.n;
    memcpy(out + n, s->data.p, s->data.n), n += s->data.n;
    const struct bb *idx[] = {&s->groups, &s->sparse, &s->stroffs, &s->strs};
    for (int i = 0; i < 4; i++)
        memcpy(out + n, idx[i]->p, idx[i]->n), n += idx[i]->n;
    uint8_t *ft = out + n;
    uint64_t f[] = {s->index_off_override ? 0 : index_off,
                    s->groups.n,
                    s->sparse.n / 16,
                    s->stroffs.n / 4,
                    s->ngroups,
                    s->nseries,
                    s->nchunks,
                    s->nsamples,
                    (uint64_t)W0,
                    (uint64_t)(W0 + WLEN),
                    (uint64_t)s->min_ts,
                    (uint64_t)s->max_ts,
                    5};
    for (int i = 0; i < 13; i++)
        eu_put64(ft + 8 * i, f[i]);
    eu_put32(ft + 104, 2);
    eu_put32(ft + 108, s->stride);
    eu_put32(ft + 112, (uint32_t)crc32(0, out + f[0], (uInt)(n - f[0]))); /* as claimed */
    eu_put32(ft + 116, (uint32_t)crc32(0, ft, 116));
    memcpy(ft + 120, "BDBBLKFT", 8);
    return n + FTR;
}

static int spec_open(const struct spec *s, const char *path, bdb_block **out)
{
    static uint8_t img[4096];
    eu_write_file(path, img, spec_assemble(s, img));
    return bdb_block_open(bdb_vfs_posix(), path, out);
}

static void test_hand_built_files(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-mapped");
    char path[512];
    snprintf(path, sizeof path, "%s/h", dir);
    bdb_block *b;
    struct spec s;

    /* The builder's valid file opens and reads back, so each refusal below is about
     * its one lie. */
    spec_init(&s);
    bb_u64(&s.sparse, 0), bb_u64(&s.sparse, HDR);
    spec_group(&s, 1, "d", 1, 0, 1);
    assert_int_equal(spec_open(&s, path, &b), BDB_OK);
    bdb_series_key k = {"t", 1, "d", 1, "m", 1};
    bdb_block_cursor cur;
    bdb_chunk_ref c;
    assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
    assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
    assert_int_equal(c.min_ts, W0 + 10);
    assert_int_equal(c.max_ts, W0 + 20);
    assert_int_equal(c.count, 3);
    assert_memory_equal(c.data, CHUNK, sizeof CHUNK);
    bdb_block_close(b);

    static const char *why[] = {
        "bad group record",
        "bad group record",
        "group lists more buckets than chunks",
        "bad group header",
        "sparse table too short",
        "group count disagrees with the footer",
        "data region has unindexed bytes",
        "string bytes without strings",
        "index offset out of range",
        "bad string table entry",
        "bad group header",
    };
    char logpath[600];
    snprintf(logpath, sizeof logpath, "%s/log", dir);
    for (int t = 0; t < 11; t++) {
        spec_init(&s);
        bb_u64(&s.sparse, 0), bb_u64(&s.sparse, HDR);
        switch (t) {
        case 0: /* a varint of 11 bytes where the tenant id should be */
            for (int i = 0; i < 10; i++)
                bb_put(&s.groups, "\x80", 1);
            bb_put(&s.groups, "\x01", 1);
            s.ngroups = 1;
            break;
        case 1: /* the group table ends inside the first record's device name */
            bb_uv(&s.groups, 1);
            s.ngroups = 1;
            break;
        case 2: /* two buckets for one chunk */
            spec_group(&s, 1, "d", 2, 5, 1);
            break;
        case 3: /* a bucket step that would pass INT64_MAX (two chunks, one in each) */
            spec_group(&s, 1, "d", 2, (uint64_t)INT64_MAX, 2);
            break;
        case 4: /* two groups at stride 1, but one sparse entry */
            s.stride = 1;
            spec_group(&s, 1, "d1", 1, 0, 1);
            spec_group(&s, 1, "d2", 1, 0, 1);
            break;
        case 5: /* one group, two sparse entries */
            spec_group(&s, 1, "d", 1, 0, 1);
            bb_u64(&s.sparse, 0), bb_u64(&s.sparse, HDR);
            break;
        case 6: /* data bytes that no group accounts for */
            spec_group(&s, 1, "d", 1, 0, 1);
            bb_put(&s.data, "xxxx", 4);
            break;
        case 7: /* string bytes without strings (and no groups) */
            s.sparse.n = s.stroffs.n = 0;
            break;
        case 8: /* index offset inside the header */
            spec_group(&s, 1, "d", 1, 0, 1);
            s.index_off_override = 1;
            break;
        case 9: /* a name that ends before it starts: offsets 0, 2, 1 over "abt" */
            s.stroffs.n = s.strs.n = 0;
            bb_u32(&s.stroffs, 0), bb_u32(&s.stroffs, 2), bb_u32(&s.stroffs, 1);
            bb_put(&s.strs, "abt", 3);
            spec_group(&s, 2, "d", 1, 0, 1);
            break;
        case 10: /* a group claiming more data than the region holds */
            spec_group(&s, 1, "d", 1, 0, 1);
            s.groups.p[4] = 0x7f; /* data_len: tid 1, "d", body_len, data_len */
            break;
        }
        /* Refused, with a warning naming the lie. */
        int saved = eu_stderr_to(logpath);
        bdb_log_set_level(BDB_LOG_WARN);
        int rc = spec_open(&s, path, &b);
        bdb_log_set_level(BDB_LOG_ERROR);
        eu_stderr_restore(saved);
        if (rc != BDB_ERR_CORRUPT)
            fail_msg("hand-built case %d was not refused", t);
        size_t n;
        char *log = (char *)eu_read_file(logpath, &n);
        log[n] = 0;
        if (!strstr(log, why[t]))
            fail_msg("hand-built case %d: expected \"%s\" in: %s", t, why[t], log);
        free(log);
    }
    eu_remove_flat_dir(dir);
}

/* ---- a file changed under the mapping ---- */

#define MG 40 /* device groups: three sparse entries at stride 16 */

struct mfile {
    char *dir;
    char path[512];
    uint8_t *orig;
    size_t len;
    uint64_t index_off, groups_len, sparse, stroffs, nstrings;
    size_t grp[MG]; /* file offset of each group record */
    int fd;
};

static void mfile_make(struct mfile *m)
{
    m->dir = eu_make_flat_dir("/tmp/bdb-block-mapped");
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(bdb_vfs_posix(), m->dir, "m", W0, W0 + WLEN, 1, &w),
                     BDB_OK);
    for (unsigned d = 0; d < MG; d++) {
        for (unsigned i = 0; i < 2; i++) {
            char dev[16];
            snprintf(dev, sizeof dev, "d%02u", d);
            bdb_series_key k = {"t", 1, dev, 3, i ? "b" : "a", 1};
            uint8_t buf[10];
            eu_fill(buf, sizeof buf, d, i);
            bdb_chunk_ref c = {.bucket_start = W0,
                               .min_ts = W0 + 100,
                               .max_ts = W0 + 200,
                               .count = 5,
                               .data = buf,
                               .len = sizeof buf};
            assert_int_equal(bdb_block_writer_add(w, &k, &c), BDB_OK);
        }
    }
    assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_OK);
    snprintf(m->path, sizeof m->path, "%s/m", m->dir);
    m->orig = eu_read_file(m->path, &m->len);
    const uint8_t *ft = m->orig + m->len - FTR;
    m->index_off = eu_get64(ft);
    m->groups_len = eu_get64(ft + 8);
    assert_int_equal(eu_get64(ft + 16), 3);
    m->nstrings = eu_get64(ft + 24);
    assert_int_equal(m->nstrings, 3); /* "a", "b", "t" */
    m->sparse = m->index_off + m->groups_len;
    m->stroffs = m->sparse + 3 * 16;
    const uint8_t *p = m->orig + m->index_off;
    for (unsigned g = 0; g < MG; g++) {
        m->grp[g] = (size_t)(p - m->orig);
        eu_uvarint(&p);
        p += eu_uvarint(&p);
        uint64_t blen = eu_uvarint(&p);
        eu_uvarint(&p);
        p += blen;
    }
    m->fd = open(m->path, O_WRONLY);
    assert_true(m->fd >= 0);
}

/* Writes bytes into the file in place (no truncation: the mapping stays valid). */
static void poke(struct mfile *m, size_t off, const void *p, size_t n)
{
    assert_int_equal(pwrite(m->fd, p, n, (off_t)off), (ssize_t)n);
}

static void restore(struct mfile *m)
{
    poke(m, 0, m->orig, m->len);
}

/* Offset of the first series' header (metric delta, nchunks) in group g's body. */
static size_t first_series(const struct mfile *m, unsigned g)
{
    const uint8_t *p = m->orig + m->grp[g];
    eu_uvarint(&p);
    p += eu_uvarint(&p);
    eu_uvarint(&p);
    eu_uvarint(&p);
    eu_uvarint(&p); /* nseries */
    uint64_t nb = eu_uvarint(&p);
    for (uint64_t i = 0; i < nb; i++)
        eu_uvarint(&p);
    return (size_t)(p - m->orig);
}

static void key_of(unsigned d, const char *metric, char *dev, bdb_series_key *k)
{
    snprintf(dev, 16, "d%02u", d);
    *k = (bdb_series_key){"t", 1, dev, 3, metric, 1};
}

static int find_rc(const bdb_block *b, unsigned d, const char *metric)
{
    char dev[16];
    bdb_series_key k;
    bdb_block_cursor cur;
    key_of(d, metric, dev, &k);
    return bdb_block_find(b, &k, &cur);
}

/* Iterates every series; returns BDB_ERR_CORRUPT if seen, else the series count. */
static int iter_all(const bdb_block *b)
{
    bdb_block_iter it;
    bdb_series_key k;
    bdb_block_cursor cur;
    bdb_block_iter_init(b, &it);
    int n = 0, rc;
    while ((rc = bdb_block_iter_next(&it, &k, &cur)) == 1 && n <= 2 * MG)
        n++;
    return rc < 0 ? rc : n;
}

static int parts_all(const bdb_block *b)
{
    bdb_block_part_iter it;
    bdb_partition_stat st;
    bdb_block_part_iter_init(b, &it);
    int n = 0, rc;
    while ((rc = bdb_block_partition_next(&it, &st)) == 1 && n <= 2 * MG)
        n++;
    return rc < 0 ? rc : n;
}

static int seek_rc(const bdb_block *b, unsigned d)
{
    char dev[16];
    snprintf(dev, sizeof dev, "d%02u", d);
    bdb_block_iter it;
    return bdb_block_iter_seek(b, &it, "t", 1, dev, 3);
}

static void test_changed_under_mapping(void **state)
{
    (void)state;
    struct mfile m;
    mfile_make(&m);
    bdb_block *b;
    assert_int_equal(bdb_block_open(bdb_vfs_posix(), m.path, &b), BDB_OK);
    /* Intact: everything is found. */
    assert_int_equal(iter_all(b), 2 * MG);
    assert_int_equal(parts_all(b), MG);
    for (unsigned d = 0; d < MG; d++)
        assert_int_equal(find_rc(b, d, "b"), BDB_OK);

    uint8_t x[8];
    /* Every sparse entry points past the group table. */
    eu_put64(x, m.groups_len + 100);
    for (int e = 0; e < 3; e++)
        poke(&m, m.sparse + 16 * e, x, 8);
    assert_int_equal(find_rc(b, 20, "a"), BDB_ERR_CORRUPT);
    assert_int_equal(seek_rc(b, 20), BDB_ERR_CORRUPT);
    restore(&m);

    /* Group 1 (not one the sparse table points at) names a tenant id past the
     * string table. */
    x[0] = 0x7f;
    poke(&m, m.grp[1], x, 1);
    assert_int_equal(find_rc(b, 0, "a"), BDB_OK);
    assert_int_equal(find_rc(b, 5, "a"), BDB_ERR_CORRUPT);
    assert_int_equal(iter_all(b), BDB_ERR_CORRUPT);
    assert_int_equal(parts_all(b), BDB_ERR_CORRUPT);
    restore(&m);

    /* The second sparse entry's data offset beyond the data region (a lookup scans
     * from that entry's group to its target), then inside the header (the group the
     * scan arrives at would start there). */
    eu_put64(x, m.index_off + 1000);
    poke(&m, m.sparse + 16 + 8, x, 8);
    assert_int_equal(find_rc(b, 16, "a"), BDB_OK); /* scanned to from entry 0 */
    assert_int_equal(find_rc(b, 20, "a"), BDB_ERR_CORRUPT);
    assert_int_equal(seek_rc(b, 20), BDB_ERR_CORRUPT);
    eu_put64(x, 0);
    poke(&m, m.sparse + 16 + 8, x, 8);
    assert_int_equal(find_rc(b, 17, "a"), BDB_ERR_CORRUPT);
    restore(&m);

    /* String offsets: name 0 ends before it starts (lookups of "a" fail, of "t"
     * work), then every name runs past the string bytes. */
    eu_put32(x, 2);
    eu_put32(x + 4, 1);
    poke(&m, m.stroffs, x, 8);
    assert_int_equal(find_rc(b, 3, "a"), BDB_ERR_CORRUPT);
    restore(&m);
    eu_put32(x, 0xffffffffu);
    poke(&m, m.stroffs + 4, x, 4);
    poke(&m, m.stroffs + 8, x, 4);
    assert_int_equal(find_rc(b, 3, "b"), BDB_ERR_CORRUPT);
    assert_int_equal(seek_rc(b, 3), BDB_ERR_CORRUPT);
    assert_int_equal(iter_all(b), BDB_ERR_CORRUPT);
    assert_int_equal(parts_all(b), BDB_ERR_CORRUPT);
    restore(&m);

    /* Group 0's first series claims zero chunks. */
    size_t sh = first_series(&m, 0);
    x[0] = 0;
    poke(&m, sh + 1, x, 1);
    assert_int_equal(find_rc(b, 0, "b"), BDB_ERR_CORRUPT);
    assert_int_equal(iter_all(b), BDB_ERR_CORRUPT);
    assert_int_equal(parts_all(b), BDB_ERR_CORRUPT);
    restore(&m);

    /* Group 0's first chunk entry starts before the window: the series is skipped
     * over on the way to "b" and the walk fails. */
    x[0] = 0x7f; /* zigzag -64 from window_start */
    poke(&m, sh + 2, x, 1);
    assert_int_equal(find_rc(b, 0, "b"), BDB_ERR_CORRUPT);
    restore(&m);

    /* A cursor taken on the intact file meets changed entries: its first chunk now
     * starts before the window, or is longer than the run it was found with. */
    for (int t = 0; t < 2; t++) {
        char dev[16];
        bdb_series_key k;
        bdb_block_cursor cur;
        bdb_chunk_ref c;
        key_of(0, "a", dev, &k);
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        const uint8_t *p = m.orig + sh + 2;
        eu_uvarint(&p); /* min */
        eu_uvarint(&p); /* span */
        eu_uvarint(&p); /* count */
        assert_true(*p < 0x40);
        x[0] = t == 0 ? 0x7f : (uint8_t)(*p + 20);
        poke(&m, t == 0 ? sh + 2 : (size_t)(p - m.orig), x, 1);
        assert_int_equal(bdb_block_cursor_next(&cur, &c), BDB_ERR_CORRUPT);
        restore(&m);
    }

    /* Restored, it reads as before. */
    assert_int_equal(iter_all(b), 2 * MG);
    assert_int_equal(parts_all(b), MG);
    bdb_block_close(b);
    close(m.fd);
    free(m.orig);
    eu_remove_flat_dir(m.dir);
}

int main(void)
{
    bdb_log_set_level(BDB_LOG_ERROR); /* corruption warnings are expected here */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_built_files),
        cmocka_unit_test(test_changed_under_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
