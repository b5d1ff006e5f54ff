/* gzip: bounded inflate of a compressed request body.
 *
 * One job: turn a gzip (or zlib) body into its plain bytes without ever producing
 * more than a caller-given maximum, so a small compressed body cannot expand past the
 * body-size limit (the limit counts decompressed bytes). Concatenated gzip members are
 * all decoded, as gzip(1) and Go's reader do; anything else after a member is an error,
 * so a body is never acknowledged after being only partly stored. */
#ifndef BDB_INGEST_GZIP_H
#define BDB_INGEST_GZIP_H

#include "common/buf.h"

#include <stddef.h>

/* Called before the output buffer grows by `extra` bytes of capacity; non-zero
 * refuses the growth (the server uses it to charge its in-flight memory budget). */
typedef int (*bdb_gzip_grow_fn)(void *ctx, size_t extra);

/* Appends the inflated form of in[0..n) to out. grow may be NULL.
 * Returns 0, BDB_ERR_LIMIT (more than max bytes would come out, counting only what
 * this call appends; out then holds max + 1 new bytes; also n > UINT_MAX),
 * BDB_ERR_CORRUPT (not valid gzip/zlib, truncated, trailing bytes that are not a
 * member, or a zlib stream that needs a preset dictionary), BDB_ERR_AGAIN (grow
 * refused) or BDB_ERR_NOMEM (zlib's memory or a checked out buffer's growth failed).
 * On error out holds whatever was inflated so far; the caller discards it. */
int bdb_gzip_inflate(const void *in, size_t n, size_t max, bdb_buf *out, bdb_gzip_grow_fn grow,
                     void *ctx);

#endif
