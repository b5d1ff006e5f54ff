/* vfs_zstd: a whole file written as a header, one zstd frame and a CRC, without a
 * second copy of the payload in memory (vfs.h: bdb_vfs_write_zstd). The catalog and
 * the current-state index are written this way at every flush; building the
 * compressed file in memory beside its image made each of them count twice in a
 * flush's peak. */
#include "storage/vfs/vfs.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/buf.h"

#include <stdlib.h>

#include <stdint.h>
#include <zlib.h>
#include <zstd.h>

#define PIECE (128u * 1024u)

int bdb_vfs_write_zstd(bdb_vfs *v, const char *dir, const char *name, const void *head, size_t hlen,
                       const void *src, size_t slen, int level)
{
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    uint8_t *piece = bdb_malloc(PIECE);
    if (!cc || !piece) {
        ZSTD_freeCCtx(cc);
        free(piece);
        return BDB_ERR_NOMEM;
    }
    int rc = BDB_OK;
    /* the frame header then carries the content size, which the readers check */
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, slen)))
        rc = BDB_ERR_IO;
    bdb_vfs_stream s;
    if (rc == BDB_OK)
        rc = bdb_vfs_stream_open(&s, v, dir, name);
    if (rc != BDB_OK) {
        ZSTD_freeCCtx(cc);
        free(piece);
        return rc;
    }
    uLong crc = crc32(0, Z_NULL, 0);
    if (rc == BDB_OK) {
        crc = crc32(crc, head, (uInt)hlen);
        rc = bdb_vfs_stream_write(&s, head, hlen);
    }
    ZSTD_inBuffer in = {src, slen, 0};
    for (size_t left = 1; rc == BDB_OK && left;) {
        ZSTD_outBuffer out = {piece, PIECE, 0};
        left = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
        if (ZSTD_isError(left)) {
            rc = BDB_ERR_IO;
            break;
        }
        crc = crc32(crc, piece, (uInt)out.pos);
        rc = bdb_vfs_stream_write(&s, piece, out.pos);
    }
    uint8_t tail[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                       (uint8_t)(crc >> 24)};
    if (rc == BDB_OK)
        rc = bdb_vfs_stream_write(&s, tail, sizeof tail);
    ZSTD_freeCCtx(cc);
    free(piece);
    if (rc != BDB_OK) {
        bdb_vfs_stream_abort(&s);
        return rc;
    }
    return bdb_vfs_stream_commit(&s);
}

int bdb_zstd_frame(const void *src, size_t slen, int level, bdb_buf *out)
{
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!cc)
        return BDB_ERR_NOMEM;
    int rc = BDB_OK;
    if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level)) ||
        ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, slen)))
        rc = BDB_ERR_IO;
    ZSTD_inBuffer in = {src, slen, 0};
    for (size_t left = 1; rc == BDB_OK && left;) {
        if (bdb_buf_reserve(out, PIECE) != BDB_OK) {
            rc = BDB_ERR_NOMEM;
            break;
        }
        ZSTD_outBuffer o = {out->data + out->len, out->cap - out->len, 0};
        left = ZSTD_compressStream2(cc, &o, &in, ZSTD_e_end);
        if (ZSTD_isError(left))
            rc = BDB_ERR_IO;
        else
            out->len += o.pos;
    }
    ZSTD_freeCCtx(cc);
    if (rc == BDB_OK && out->cap > out->len + 64) { /* the buffer doubled as it grew */
        uint8_t *p = realloc(out->data, out->len ? out->len : 1);
        if (p) {
            out->data = p;
            out->cap = out->len ? out->len : 1;
        }
    }
    return rc;
}

int bdb_vfs_write_framed(bdb_vfs *v, const char *dir, const char *name, const void *head,
                         size_t hlen, const void *frame, size_t flen)
{
    bdb_vfs_stream s;
    int rc = bdb_vfs_stream_open(&s, v, dir, name);
    if (rc != BDB_OK)
        return rc;
    uLong crc = crc32(0, Z_NULL, 0);
    crc = crc32(crc, head, (uInt)hlen);
    rc = bdb_vfs_stream_write(&s, head, hlen);
    for (size_t off = 0; rc == BDB_OK && off < flen;) { /* crc32 takes a uInt length */
        size_t n = flen - off < PIECE ? flen - off : PIECE;
        crc = crc32(crc, (const uint8_t *)frame + off, (uInt)n);
        rc = bdb_vfs_stream_write(&s, (const uint8_t *)frame + off, n);
        off += n;
    }
    uint8_t tail[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16),
                       (uint8_t)(crc >> 24)};
    if (rc == BDB_OK)
        rc = bdb_vfs_stream_write(&s, tail, sizeof tail);
    if (rc != BDB_OK) {
        bdb_vfs_stream_abort(&s);
        return rc;
    }
    return bdb_vfs_stream_commit(&s);
}
