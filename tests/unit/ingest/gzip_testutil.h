/* gzip_testutil: the compressor gzip_test.c and gzip_edge_test.c build their inputs
 * with (zlib's own deflate, so what the inflate under test reads comes from an
 * independent writer). Header-only like tests/unit/testutil.h; include it after
 * cmocka.h (it asserts). */
#ifndef BDB_GZIP_TESTUTIL_H
#define BDB_GZIP_TESTUTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Compresses p with the given window bits (31 gzip, 15 zlib, -15 raw deflate),
 * optionally with a preset dictionary (NULL: none), into a new buffer of *out_n
 * bytes. */
static inline uint8_t *gzt_deflate(const void *p, size_t n, int wbits, const char *dict,
                                   size_t *out_n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, wbits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    if (dict)
        assert_int_equal(deflateSetDictionary(&z, (const Bytef *)dict, (uInt)strlen(dict)), Z_OK);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    uint8_t *o = malloc(cap);
    assert_non_null(o);
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = o;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_n = cap - z.avail_out;
    deflateEnd(&z);
    return o;
}

#endif
