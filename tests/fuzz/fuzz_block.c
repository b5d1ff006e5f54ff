/* libFuzzer harness for the block file reader (open and validation, series
 * iteration, lookups, cursors, partition statistics) and the chunks it hands out.
 * The input after its first byte becomes a block file. When the first byte is odd
 * the harness first rewrites the header CRC and, if the footer's index offset lies
 * inside the file, the index and footer CRCs (docs/formats/block.md), so mutations
 * reach the index decoder behind the checksums.
 * Contract beyond "no crash, no over-read, no leak": every error is BDB_ERR_CORRUPT;
 * iteration stays within the counts of the footer; with the file's own CRCs, keys
 * come in strictly increasing order and every key the iterator yields is found by
 * bdb_block_find (see walk() for the rewritten-CRC case); chunks handed out decode
 * or report BDB_ERR_CORRUPT. */
#include "bucketdb/bdb.h"
#include "fuzz_util.h"
#include "storage/embedded/block/block.h"
#include "storage/embedded/chunk/chunk.h"

#include <zlib.h>

#define FOOTER 128
#define MAX_STEPS 100000

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void fix_crcs(uint8_t *p, size_t n)
{
    if (n >= 36)
        put32(p + 32, (uint32_t)crc32(0, p, 32));
    if (n < 36 + FOOTER)
        return;
    uint8_t *f = p + n - FOOTER;
    uint64_t index_off = get64(f);
    if (index_off <= n - FOOTER)
        put32(f + 112, (uint32_t)crc32(0, p + index_off, (uInt)(n - FOOTER - index_off)));
    put32(f + 116, (uint32_t)crc32(0, f, 116));
}

static int key_cmp_copy(const bdb_series_key *a, const char *prev, size_t plen)
{
    /* prev holds tenant\0device\0metric of the previous key */
    char cur[3 * 4096 + 3];
    if (a->tenant_len + a->device_len + a->metric_len + 2 > sizeof cur)
        return 1;
    size_t n = 0;
    memcpy(cur + n, a->tenant, a->tenant_len), n += a->tenant_len, cur[n++] = 0;
    memcpy(cur + n, a->device, a->device_len), n += a->device_len, cur[n++] = 0;
    memcpy(cur + n, a->metric, a->metric_len), n += a->metric_len;
    size_t m = n < plen ? n : plen;
    int c = memcmp(cur, prev, m);
    return c ? c : (n > plen) - (n < plen);
}

static void remember(const bdb_series_key *a, char *prev, size_t *plen, size_t cap)
{
    size_t need = a->tenant_len + a->device_len + a->metric_len + 2;
    if (need > cap) {
        *plen = 0;
        return;
    }
    size_t n = 0;
    memcpy(prev + n, a->tenant, a->tenant_len), n += a->tenant_len, prev[n++] = 0;
    memcpy(prev + n, a->device, a->device_len), n += a->device_len, prev[n++] = 0;
    memcpy(prev + n, a->metric, a->metric_len), n += a->metric_len;
    *plen = n;
}

static void check_chunk(const bdb_block_meta *m, const bdb_chunk_ref *c)
{
    FZ_CHECK(c->min_ts <= c->max_ts || c->count == 0);
    bdb_chunk_iter it;
    if (bdb_block_chunk_iter(c, &it) != BDB_OK)
        return; /* the chunk decoder reports its own damage */
    int64_t t;
    double v;
    int rc, steps = 0;
    while ((rc = bdb_chunk_iter_next(&it, &t, &v)) == 1 && steps++ < MAX_STEPS)
        (void)m;
    FZ_CHECK(rc == 0 || rc == 1 || rc == BDB_ERR_CORRUPT);
}

/* strict: the file's CRCs are as the fuzzer left them, so anything the reader
 * accepts passed every checksum. With the CRCs rewritten (a writer bug rather than
 * disk damage) the reader trusts the index's key order, so an unsorted index is not
 * detected: then keys may come out of order and a lookup may miss a series, but
 * nothing may crash or read out of bounds. */
static void walk(const bdb_block *b, int strict)
{
    const bdb_block_meta *m = bdb_block_get_meta(b);
    FZ_CHECK(m && (m->version == 2 || m->version == 3) && m->window_start < m->window_end);
    static char prev[3 * 4096 + 3];
    size_t plen = 0;
    int have_prev = 0;
    bdb_block_iter it;
    bdb_block_iter_init(b, &it);
    bdb_series_key k;
    bdb_block_cursor cur;
    uint64_t nseries = 0, nchunks = 0;
    int rc;
    while ((rc = bdb_block_iter_next(&it, &k, &cur)) == 1 && nseries < MAX_STEPS) {
        nseries++;
        FZ_CHECK(nseries <= m->nseries);
        if (strict && have_prev && plen)
            FZ_CHECK(key_cmp_copy(&k, prev, plen) > 0);
        remember(&k, prev, &plen, sizeof prev);
        have_prev = 1;
        bdb_block_cursor found;
        int frc = bdb_block_find(b, &k, &found);
        FZ_CHECK(frc == BDB_OK || frc == BDB_ERR_CORRUPT || (!strict && frc == BDB_ERR_NOTFOUND));
        bdb_chunk_ref c;
        int crc;
        while ((crc = bdb_block_cursor_next(&cur, &c)) == 1 && nchunks < MAX_STEPS) {
            nchunks++;
            FZ_CHECK(nchunks <= m->nchunks);
            check_chunk(m, &c);
        }
        FZ_CHECK(crc == 0 || crc == 1 || crc == BDB_ERR_CORRUPT);
    }
    FZ_CHECK(rc == 0 || rc == 1 || rc == BDB_ERR_CORRUPT);

    bdb_block_iter_init(b, &it);
    FZ_CHECK(bdb_block_iter_seek(b, &it, "t", 1, "d", 1) == BDB_OK ||
             bdb_block_iter_seek(b, &it, "t", 1, "d", 1) == BDB_ERR_CORRUPT);

    bdb_block_part_iter pi;
    bdb_block_part_iter_init(b, &pi);
    bdb_partition_stat ps;
    uint64_t parts = 0;
    while ((rc = bdb_block_partition_next(&pi, &ps)) == 1 && parts++ < MAX_STEPS)
        ;
    FZ_CHECK(rc == 0 || rc == 1 || rc == BDB_ERR_CORRUPT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char path[512];
    snprintf(path, sizeof path, "%s/block", fz_scratch());
    uint8_t *img = malloc(size);
    FZ_CHECK(img);
    memcpy(img, data + 1, size - 1);
    if (data[0] & 1)
        fix_crcs(img, size - 1);
    fz_write_file(path, img, size - 1);
    free(img);
    bdb_block *b;
    int rc = bdb_block_open(bdb_vfs_posix(), path, &b);
    FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT);
    if (rc == BDB_OK) {
        walk(b, !(data[0] & 1));
        bdb_block_close(b);
    }
    return 0;
}
