/* gzip: bounded multi-member inflate (see gzip.h). */
#include "ingest/gzip.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Output grows in steps of this many bytes; each step is offered to grow() first. */
#define GZ_STEP 65536

/* zlib's state and window come from bdb_calloc like every parser allocation, so the
 * allocation-failure tests reach them and a failure is answered BDB_ERR_NOMEM (zlib
 * says Z_MEM_ERROR), never taken for damaged input. */
static voidpf gz_alloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return bdb_calloc(items, size);
}

static void gz_free(voidpf opaque, voidpf p)
{
    (void)opaque;
    free(p);
}

int bdb_gzip_inflate(const void *in, size_t n, size_t max, bdb_buf *out, bdb_gzip_grow_fn grow,
                     void *ctx)
{
    if (n > UINT_MAX) /* z_stream counts in uInt; no body limit comes near this */
        return BDB_ERR_LIMIT;
    z_stream z;
    memset(&z, 0, sizeof z);
    z.zalloc = gz_alloc;
    z.zfree = gz_free;
    /* 15 + 32: the largest window, and zlib detects gzip or zlib framing itself */
    int rc = inflateInit2(&z, 15 + 32);
    if (rc != Z_OK)
        return rc == Z_MEM_ERROR ? BDB_ERR_NOMEM : BDB_ERR_CORRUPT;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    /* the limit counts what this call appends, not what out held before */
    size_t base = out->len, got = 0;
    int ret = 0;
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
        if (bdb_buf_reserve(out, GZ_STEP) != BDB_OK) { /* a checked buffer ran out */
            ret = BDB_ERR_NOMEM;
            break;
        }
        size_t room = out->cap - out->len;
        /* one byte past max is enough to know the body is too large; room >= 1, since
         * got <= max here, so inflate can always make progress while input remains */
        if (room > max + 1 - got)
            room = max + 1 - got;
        if (room > UINT_MAX)
            room = UINT_MAX;
        z.next_out = out->data + out->len;
        z.avail_out = (uInt)room;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len += room - z.avail_out;
        got = out->len - base;
        if (got > max) {
            ret = BDB_ERR_LIMIT;
            break;
        }
        /* another member follows; bytes that are not one fail on the next round. Any
         * other rc ends the loop: Z_STREAM_END (done), Z_BUF_ERROR (input ran out
         * before the end of a member: truncated), Z_DATA_ERROR, Z_NEED_DICT,
         * Z_MEM_ERROR. */
        if (rc == Z_STREAM_END && z.avail_in > 0)
            rc = inflateReset(&z);
    } while (rc == Z_OK);
    inflateEnd(&z);
    if (ret)
        return ret;
    if (rc == Z_MEM_ERROR)
        return BDB_ERR_NOMEM;
    return rc == Z_STREAM_END ? 0 : BDB_ERR_CORRUPT;
}
