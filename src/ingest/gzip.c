/* gzip: bounded multi-member inflate (see gzip.h). */
#include "ingest/gzip.h"

#include "bucketdb/bdb.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>

/* Output grows in steps of this many bytes; each step is offered to grow() first. */
#define GZ_STEP 65536

int bdb_gzip_inflate(const void *in, size_t n, size_t max, bdb_buf *out, bdb_gzip_grow_fn grow,
                     void *ctx)
{
    if (n > UINT_MAX) /* z_stream counts in uInt; no body limit comes near this */
        return BDB_ERR_LIMIT;
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 + 32: the largest window, and zlib detects gzip or zlib framing itself */
    if (inflateInit2(&z, 15 + 32) != Z_OK)
        return BDB_ERR_CORRUPT;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    int rc, ret = 0;
    do {
        if (out->cap - out->len < GZ_STEP) {
            /* the growth bdb_buf_reserve is about to make, offered before it is made */
            size_t cap0 = out->cap, cap = cap0 ? cap0 : 64;
            while (cap - out->len < GZ_STEP)
                cap *= 2;
            if (grow && grow(ctx, cap - cap0) != 0) {
                ret = BDB_ERR_AGAIN;
                break;
            }
        }
        bdb_buf_reserve(out, GZ_STEP);
        size_t room = out->cap - out->len;
        /* one byte past max is enough to know the body is too large */
        if (room > max + 1 - out->len)
            room = max + 1 - out->len;
        if (room > UINT_MAX)
            room = UINT_MAX;
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)room;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len += room - z.avail_out;
        if (out->len > max) {
            ret = BDB_ERR_LIMIT;
            break;
        }
        if (rc == Z_BUF_ERROR && z.avail_in == 0)
            break; /* truncated stream: input ran out before the end of a member */
        if (rc == Z_STREAM_END && z.avail_in > 0) {
            /* another member follows; bytes that are not one fail on the next round */
            rc = inflateReset(&z) == Z_OK ? Z_OK : Z_STREAM_ERROR;
        }
    } while (rc == Z_OK);
    inflateEnd(&z);
    if (ret)
        return ret;
    return rc == Z_STREAM_END ? 0 : BDB_ERR_CORRUPT;
}
