/* block_open: opening a block file (format versions 2 and 3, docs/formats/block.md).
 *
 * The file is mapped and the block keeps nothing but pointers into the mapping, so a
 * block with a million series costs O(1) heap. Open checks every CRC and walks the
 * whole index once to prove its structure (ordering, offsets, counts, sums, the sparse
 * table); the accessors (block.c) still bounds-check what they decode, because a
 * mapping is only as trustworthy as the file under it. */
#include "storage/embedded/block/block_int.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

static const char BLK_BAD_VERSION[] = "unsupported format version";

/* Proves the string table: every slot in range, names strictly increasing. */
static const char *check_strings(const bdb_block *b)
{
    if (b->nstrings == 0)
        return b->strs_len == 0 ? NULL : "string bytes without strings";
    if (bdb_get_u32le(b->stroffs) != 0)
        return "string table does not start at 0";
    const char *prev = NULL;
    size_t plen = 0;
    for (uint64_t i = 0; i < b->nstrings; i++) {
        size_t len;
        const char *s = blk_str_at(b, i, &len);
        if (!s)
            return "bad string table entry";
        if (prev && bytes_cmp(prev, plen, s, len) >= 0)
            return "string table out of order";
        prev = s;
        plen = len;
    }
    return NULL;
}

/* Walks every group: records decode exactly, groups and metrics strictly increase,
 * chunk entries lie in the window and tile the data region, the sparse table points
 * at every stride-th group, and the totals equal the footer's. */
static const char *check_groups(const bdb_block *b)
{
    uint64_t off = 0, data = BLK_HEADER_SIZE, gi = 0, nseries = 0;
    struct acc tot = {.bucket = UINT64_MAX, .min_ts = INT64_MAX, .max_ts = INT64_MIN};
    struct ghead prev = {0};
    while (off < b->groups_len) {
        if (gi % b->stride == 0) {
            uint64_t k = gi / b->stride;
            if (k >= b->nsparse)
                return "sparse table too short";
            const uint8_t *e = b->sparse + BLK_SPARSE_ENTRY * k;
            if (bdb_get_u64le(e) != off || bdb_get_u64le(e + 8) != data)
                return "sparse table disagrees with the groups";
        }
        struct ghead h;
        if (blk_ghead_read(b, off, &h) != 0)
            return "bad group record";
        if (gi > 0 && blk_ghead_cmp(&prev, h.tid, h.dev, h.dev_len) >= 0)
            return "groups out of order";
        bdb_block_gpos_ g;
        uint64_t ns, next_mid = 0, chunks0 = tot.chunks;
        if (blk_gpos_open(b, &h, data, &g, &ns) != 0)
            return "bad group header";
        for (uint64_t s = 0; s < ns; s++, nseries++) {
            uint64_t mid, n;
            if (blk_ser_head(&g, &next_mid, &mid, &n) != 0 || blk_ser_walk(&g, n, NULL, &tot) != 0)
                return "bad series record";
        }
        if (g.p != g.end)
            return "group record has trailing bytes";
        if (g.data_off - data != h.data_len)
            return "group data length disagrees with its chunks";
        if (g.nbuckets > tot.chunks - chunks0)
            return "group lists more buckets than chunks";
        prev = h;
        off = h.next;
        data += h.data_len;
        gi++;
    }
    if (gi != b->ngroups || b->nsparse != (gi + b->stride - 1) / b->stride)
        return "group count disagrees with the footer";
    if (data != b->data_end)
        return "data region has unindexed bytes";
    if (nseries != b->meta.nseries || tot.chunks != b->meta.nchunks ||
        tot.rows != b->meta.nsamples || tot.min_ts != b->meta.min_ts ||
        tot.max_ts != b->meta.max_ts)
        return "footer totals disagree with the index";
    return NULL;
}

/* Checks the footer's region arithmetic against the file size, overflow-safely.
 * Returns NULL or the reason. */
static const char *check_footer(bdb_block *b, const uint8_t *ft)
{
    if (memcmp(ft + F_MAGIC_AT, BLK_FOOTER_MAGIC, BLK_FOOTER_MAGIC_LEN) != 0)
        return "bad footer magic";
    if (crc_update(0, ft, F_FOOTER_CRC_AT) != bdb_get_u32le(ft + F_FOOTER_CRC_AT))
        return "footer CRC mismatch";
    const uint32_t version = bdb_get_u32le(ft + F_VERSION_AT);
    b->meta.version = version;
    if (version < BLK_VERSION_OLDEST || version > BLK_VERSION)
        return BLK_BAD_VERSION;
    uint64_t f[F_NFIELDS];
    for (int i = 0; i < F_NFIELDS; i++)
        f[i] = bdb_get_u64le(ft + 8 * i);
    uint64_t index_end = b->map_len - BLK_FOOTER_SIZE;
    if (f[F_INDEX_OFF] < BLK_HEADER_SIZE || f[F_INDEX_OFF] > index_end)
        return "index offset out of range";
    uint64_t left = index_end - f[F_INDEX_OFF];
    if (f[F_GROUPS_LEN] > left)
        return "group table out of range";
    left -= f[F_GROUPS_LEN];
    if (f[F_NSPARSE] > left / BLK_SPARSE_ENTRY)
        return "sparse table out of range";
    left -= BLK_SPARSE_ENTRY * f[F_NSPARSE];
    if (f[F_NSTRINGS] > left / BLK_STROFF_SIZE)
        return "string table out of range";
    left -= BLK_STROFF_SIZE * f[F_NSTRINGS];
    if (left > UINT32_MAX)
        return "string bytes out of range";
    uint32_t stride = bdb_get_u32le(ft + F_STRIDE_AT);
    if (stride == 0 || stride > BLK_MAX_STRIDE)
        return "bad sparse stride";
    if ((int64_t)f[F_WINDOW_START] >= (int64_t)f[F_WINDOW_END])
        return "empty window";

    b->data_end = f[F_INDEX_OFF];
    b->groups = b->map + f[F_INDEX_OFF];
    b->groups_len = f[F_GROUPS_LEN];
    b->ngroups = f[F_NGROUPS];
    b->sparse = b->groups + f[F_GROUPS_LEN];
    b->nsparse = f[F_NSPARSE];
    b->stride = stride;
    b->stroffs = b->sparse + BLK_SPARSE_ENTRY * f[F_NSPARSE];
    b->nstrings = f[F_NSTRINGS];
    b->strs = b->stroffs + BLK_STROFF_SIZE * f[F_NSTRINGS];
    b->strs_len = left;
    b->meta = (bdb_block_meta){
        .version = version,
        .window_start = (int64_t)f[F_WINDOW_START],
        .window_end = (int64_t)f[F_WINDOW_END],
        .min_ts = (int64_t)f[F_MIN_TS],
        .max_ts = (int64_t)f[F_MAX_TS],
        .nseries = f[F_NSERIES],
        .nchunks = f[F_NCHUNKS],
        .nsamples = f[F_NSAMPLES],
        .file_bytes = b->map_len,
        .index_bytes = index_end - f[F_INDEX_OFF],
        .seq = f[F_SEQ],
    };
    if (crc_update(0, b->groups, index_end - f[F_INDEX_OFF]) != bdb_get_u32le(ft + F_INDEX_CRC_AT))
        return "index CRC mismatch";
    return NULL;
}

static const char *check_header(const bdb_block *b)
{
    const uint8_t *h = b->map;
    if (memcmp(h, BLK_MAGIC, BLK_MAGIC_LEN) != 0)
        return "bad header magic";
    if (crc_update(0, h, 32) != bdb_get_u32le(h + 32))
        return "header CRC mismatch";
    if ((uint32_t)(h[6] | h[7] << 8) != b->meta.version ||
        (int64_t)bdb_get_u64le(h + 8) != b->meta.window_start ||
        (int64_t)bdb_get_u64le(h + 16) != b->meta.window_end ||
        bdb_get_u64le(h + 24) != b->meta.seq)
        return "header disagrees with footer";
    return NULL;
}

static const char *validate(bdb_block *b)
{
    if (b->map_len < BLK_HEADER_SIZE + BLK_FOOTER_SIZE)
        return "file too short";
    const char *why = check_footer(b, b->map + b->map_len - BLK_FOOTER_SIZE);
    if (!why)
        why = check_header(b);
    if (!why)
        why = check_strings(b);
    if (!why)
        why = check_groups(b);
    return why;
}

int bdb_block_open(bdb_vfs *vfs, const char *path, bdb_block **out)
{
    if (!vfs || !path || !out)
        return BDB_ERR_INVALID;
    bdb_block *b = bdb_calloc(1, sizeof *b);
    if (!b)
        return BDB_ERR_NOMEM;
    int rc = bdb_vfs_open(vfs, path, BDB_O_RDONLY, &b->f);
    if (rc != BDB_OK) {
        free(b);
        return rc;
    }
    /* Reject short files before mapping: an empty file has no mapping to check. */
    uint64_t size = 0;
    rc = bdb_file_size(b->f, &size);
    if (rc == BDB_OK && size < BLK_HEADER_SIZE + BLK_FOOTER_SIZE) {
        BDB_WARN("block %s is corrupt: file too short (%llu bytes)", path,
                 (unsigned long long)size);
        rc = BDB_ERR_CORRUPT;
    }
    const void *p = NULL;
    size_t len = 0;
    if (rc == BDB_OK)
        rc = bdb_file_map(b->f, &p, &len);
    if (rc != BDB_OK) {
        bdb_file_close(b->f);
        free(b);
        return rc;
    }
    b->map = p;
    b->map_len = p ? len : 0;
    const char *why = validate(b);
    if (why == BLK_BAD_VERSION) {
        BDB_WARN("block %s has format version %u, which this build cannot read (it reads "
                 "versions %d to %d)",
                 path, b->meta.version, BLK_VERSION_OLDEST, BLK_VERSION);
        bdb_block_close(b);
        return BDB_ERR_CORRUPT;
    }
    if (why) {
        BDB_WARN("block %s is corrupt: %s", path, why);
        bdb_block_close(b);
        return BDB_ERR_CORRUPT;
    }
    *out = b;
    return BDB_OK;
}

void bdb_block_close(bdb_block *b)
{
    if (!b)
        return;
    if (b->map)
        bdb_file_unmap(b->f, b->map, b->map_len);
    bdb_file_close(b->f);
    free(b);
}

const bdb_block_meta *bdb_block_get_meta(const bdb_block *b)
{
    return &b->meta;
}
