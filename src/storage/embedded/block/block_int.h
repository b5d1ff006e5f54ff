/* block_int.h: what the block files share (block.c reads, block_open.c maps and
 * validates, block_write.c writes): the format's constants, the footer layout, the
 * bounds-checked varint reader, the mapped block and the group-record decoders that
 * both the open-time validation and the accessors use. Private to those three files;
 * the public interface is block.h. Layout: docs/formats/block.md. */
#ifndef BDB_BLOCK_INT_H
#define BDB_BLOCK_INT_H

#include "storage/embedded/block/block.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define BLK_MAGIC "BDBBLK"
#define BLK_MAGIC_LEN 6
#define BLK_FOOTER_MAGIC "BDBBLKFT"
#define BLK_FOOTER_MAGIC_LEN 8
/* Written: 3 (PACKED chunks bare). Read: 2 and 3; 2 differs only in keeping every
 * chunk whole. */
#define BLK_VERSION 3
#define BLK_VERSION_OLDEST 2
#define BLK_HEADER_SIZE 36
#define BLK_FOOTER_SIZE 128
#define BLK_SPARSE_ENTRY 16 /* u64 group record offset, u64 data offset */
#define BLK_STROFF_SIZE 4
#define BLK_CRC_SIZE 4
#define BLK_STRIDE 16       /* groups per sparse-table entry, as written */
#define BLK_MAX_STRIDE 4096 /* as accepted */

/* Footer field offsets; the u64/i64 fields come first, in this order. */
enum {
    F_INDEX_OFF,
    F_GROUPS_LEN,
    F_NSPARSE,
    F_NSTRINGS,
    F_NGROUPS,
    F_NSERIES,
    F_NCHUNKS,
    F_NSAMPLES,
    F_WINDOW_START,
    F_WINDOW_END,
    F_MIN_TS,
    F_MAX_TS,
    F_SEQ,
    F_NFIELDS
};
#define F_VERSION_AT (F_NFIELDS * 8)
#define F_STRIDE_AT (F_VERSION_AT + 4)
#define F_INDEX_CRC_AT (F_STRIDE_AT + 4)
#define F_FOOTER_CRC_AT (F_INDEX_CRC_AT + 4)
#define F_MAGIC_AT (F_FOOTER_CRC_AT + 4)
_Static_assert(F_MAGIC_AT + BLK_FOOTER_MAGIC_LEN == BLK_FOOTER_SIZE, "footer layout");

static inline uint32_t crc_update(uint32_t crc, const void *p, size_t n)
{
    /* zlib returns the initial value, not crc, for a NULL buffer. */
    if (n == 0)
        return crc;
    return (uint32_t)crc32_z(crc, p, n);
}

static inline int bytes_cmp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t n = an < bn ? an : bn;
    int c = n ? memcmp(a, b, n) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn;
}

/* Zigzag over two's complement bits: differences are computed modulo 2^64 and the
 * reader adds them back modulo 2^64, so every int64 pair round-trips. */
static inline uint64_t zz_enc(uint64_t v)
{
    return (v << 1) ^ (0 - (v >> 63));
}

static inline uint64_t zz_dec(uint64_t u)
{
    return (u >> 1) ^ (0 - (u & 1));
}

/* A bounds-checked LEB128 reader. A failed read sets err, moves to the end, and
 * returns 0, so every later read fails too; check err once after a group of reads. */
typedef struct rd {
    const uint8_t *p, *end;
    int err;
} rd;

static inline uint64_t rd_uv(rd *r)
{
    if (r->p < r->end && *r->p < 0x80)
        return *r->p++;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64 && r->p < r->end; shift += 7) {
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            return v;
    }
    r->err = 1;
    r->p = r->end;
    return 0;
}

static inline uint64_t rd_zz(rd *r)
{
    return zz_dec(rd_uv(r));
}

static inline const char *rd_str(rd *r, size_t *n)
{
    uint64_t len = rd_uv(r);
    if (r->err || len > (uint64_t)(r->end - r->p)) {
        r->err = 1;
        r->p = r->end;
        *n = 0;
        return "";
    }
    const char *s = (const char *)r->p;
    r->p += len;
    *n = (size_t)len;
    return s;
}

static inline int key_valid(const bdb_series_key *k)
{
    return (k->tenant || !k->tenant_len) && (k->device || !k->device_len) &&
           (k->metric || !k->metric_len);
}

struct bdb_block {
    bdb_file *f;
    const uint8_t *map;
    size_t map_len;
    uint64_t data_end; /* = start of the index region */
    const uint8_t *groups;
    uint64_t groups_len, ngroups;
    const uint8_t *sparse;
    uint64_t nsparse, stride;
    const uint8_t *stroffs;
    uint64_t nstrings;
    const uint8_t *strs;
    uint64_t strs_len;
    bdb_block_meta meta;
};

/* Name i of the string table, or NULL if its slot is out of range. */
const char *blk_str_at(const bdb_block *b, uint64_t i, size_t *n);

/* A group record's header: who it is, where its body and data are. */
struct ghead {
    uint64_t tid;
    const char *dev;
    size_t dev_len;
    uint64_t data_len;
    const uint8_t *body, *end;
    uint64_t next; /* offset of the next record in the group table */
};

/* Reads the group record header at offset off of the group table. 0 or -1. */
int blk_ghead_read(const bdb_block *b, uint64_t off, struct ghead *h);

static inline int blk_ghead_cmp(const struct ghead *h, uint64_t tid, const char *dev, size_t dlen)
{
    if (h->tid != tid)
        return h->tid < tid ? -1 : 1;
    return bytes_cmp(h->dev, h->dev_len, dev, dlen);
}

/* Starts decoding a group body whose data begins at file offset data: reads the
 * series count and proves the bucket list (strictly increasing, no overflow). 0 or -1. */
int blk_gpos_open(const bdb_block *b, const struct ghead *h, uint64_t data, bdb_block_gpos_ *g,
                  uint64_t *nseries);

/* Reads a series header: metric id (delta from the group's previous one) and chunk
 * count. 0 or -1. */
int blk_ser_head(bdb_block_gpos_ *g, uint64_t *next_mid, uint64_t *mid, uint64_t *nchunks);

/* Sums over chunk entries: all of them (bucket == UINT64_MAX) or one bucket's. */
struct acc {
    uint64_t bucket;
    uint64_t chunks, rows, bytes;
    int64_t min_ts, max_ts;
};

/* Walks the entries of a series whose header was just read, leaving g after its run
 * CRC. Fills cur (if not NULL) to iterate the series and adds to a (if not NULL).
 * 0 or -1. */
int blk_ser_walk(bdb_block_gpos_ *g, uint64_t nchunks, bdb_block_cursor *cur, struct acc *a);

#endif
