/* Edge cases of the bounded gzip inflate that gzip_test.c leaves out (issue 8):
 * a limit of 0, the limit counting only what a call appends to a buffer that already
 * holds bytes, input too large for zlib's counters, streams zlib cannot finish on its
 * own (preset dictionary, raw deflate, padding or a cut second member after a good
 * one), growth refused before the first byte, and allocation failure: every
 * allocation in turn (zlib's state and window, the output buffer's growth) answers
 * BDB_ERR_NOMEM, never "damaged" (which the server would answer with a 400 for a
 * valid body) and never a short output presented as the whole.
 * Figure: "alloc sweep gzip inflate: ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gzip_testutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "ingest/gzip.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#if defined(__SANITIZE_ADDRESS__)
#define LEAKS "0 leaks"
#else
#define LEAKS "leaks unchecked (release build; the ASan build checks them)"
#endif

static uint8_t *gz(const void *p, size_t n, size_t *out_n)
{
    return gzt_deflate(p, n, 31, NULL, out_n);
}

/* Text that compresses but not to nothing: lines with a counter. */
static uint8_t *lines(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    char line[48];
    size_t o = 0;
    for (unsigned i = 0; o < n; i++) {
        int k = snprintf(line, sizeof line, "m,device=d%u v=%ui %u\n", i % 97, i * 7919u, i);
        size_t take = (size_t)k < n - o ? (size_t)k : n - o;
        memcpy(p + o, line, take);
        o += take;
    }
    return p;
}

/* max = 0: an empty member passes, one byte out is one too many. */
static void limit_zero(void **state)
{
    (void)state;
    size_t n;
    uint8_t *empty = gz("", 0, &n);
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_gzip_inflate(empty, n, 0, &out, NULL, NULL), 0);
    assert_int_equal(out.len, 0);
    free(empty);
    uint8_t *one = gz("x", 1, &n);
    assert_int_equal(bdb_gzip_inflate(one, n, 0, &out, NULL, NULL), BDB_ERR_LIMIT);
    assert_int_equal(out.len, 1);
    bdb_buf_free(&out);
    free(one);
}

/* The limit counts what this call appends: bytes already in the buffer are kept and
 * do not count, at the limit and one past it, across members and growth steps. */
static void limit_counts_appended_bytes(void **state)
{
    (void)state;
    const size_t max = 150000;
    static const char prefix[] = "already here\n";
    const size_t pn = sizeof prefix - 1;
    for (size_t n = max; n <= max + 1; n++) {
        uint8_t *plain = lines(n);
        size_t gz_n;
        uint8_t *z = gz(plain, n, &gz_n);
        bdb_buf out;
        bdb_buf_init(&out);
        bdb_buf_append(&out, prefix, pn);
        int rc = bdb_gzip_inflate(z, gz_n, max, &out, NULL, NULL);
        if (n == max) {
            assert_int_equal(rc, 0);
            assert_int_equal(out.len, pn + n);
            assert_memory_equal(out.data + pn, plain, n);
        } else {
            assert_int_equal(rc, BDB_ERR_LIMIT);
            assert_int_equal(out.len, pn + max + 1); /* max + 1 new bytes, no more */
        }
        assert_memory_equal(out.data, prefix, pn);
        bdb_buf_free(&out);
        free(z);
        free(plain);
    }
}

/* zlib's counters are 32-bit: a longer input is refused as too large before a byte
 * of it is read (the pointer below stands for an input that long). */
static void input_longer_than_zlib_counts(void **state)
{
    (void)state;
#if SIZE_MAX > UINT_MAX
    static const uint8_t first[1] = {0x1f};
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_gzip_inflate(first, (size_t)UINT_MAX + 1, SIZE_MAX / 2, &out, NULL, NULL),
                     BDB_ERR_LIMIT);
    assert_int_equal(out.len, 0);
    assert_int_equal(out.cap, 0);
    bdb_buf_free(&out);
#else
    skip();
#endif
}

/* Streams that are well-formed for some other reader but not a gzip/zlib body of
 * their own are damage, not success and not a hang. */
static void streams_not_complete_on_their_own(void **state)
{
    (void)state;
    const char *text = "m,device=d v=1i 1\n";
    size_t n, a_n, b_n;
    bdb_buf out;
    bdb_buf_init(&out);
    /* zlib framing with a preset dictionary: inflate stops asking for it */
    uint8_t *dict = gzt_deflate(text, strlen(text), 15, "m,device=", &n);
    assert_int_equal(bdb_gzip_inflate(dict, n, 1000, &out, NULL, NULL), BDB_ERR_CORRUPT);
    free(dict);
    /* the same without a dictionary is fine (control) */
    uint8_t *plain = gzt_deflate(text, strlen(text), 15, NULL, &n);
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(plain, n, 1000, &out, NULL, NULL), 0);
    assert_int_equal(out.len, strlen(text));
    free(plain);
    /* raw deflate, no header: HTTP's "deflate" means zlib framing */
    uint8_t *raw = gzt_deflate(text, strlen(text), -15, NULL, &n);
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(raw, n, 1000, &out, NULL, NULL), BDB_ERR_CORRUPT);
    free(raw);
    /* a good member, then zero padding (as some tape tools write): the padding is
     * damage, never silently dropped */
    uint8_t *a = gz(text, strlen(text), &a_n);
    uint8_t *b = gz("second\n", 7, &b_n);
    uint8_t *ab = calloc(1, a_n + b_n + 16);
    assert_non_null(ab);
    memcpy(ab, a, a_n);
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + 16, 1000, &out, NULL, NULL), BDB_ERR_CORRUPT);
    /* a good member, then a second one cut at every length: refused, the first
     * member's bytes are not presented as the whole body */
    memcpy(ab + a_n, b, b_n);
    for (size_t cut = 1; cut < b_n; cut++) {
        bdb_buf_reset(&out);
        assert_int_equal(bdb_gzip_inflate(ab, a_n + cut, 1000, &out, NULL, NULL), BDB_ERR_CORRUPT);
    }
    bdb_buf_reset(&out);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + b_n, 1000, &out, NULL, NULL), 0);
    assert_int_equal(out.len, strlen(text) + 7);
    bdb_buf_free(&out);
    free(ab);
    free(a);
    free(b);
}

static int refuse_all(void *ctx, size_t extra)
{
    *(size_t *)ctx += extra;
    return -1;
}

/* A budget that refuses the first growth: nothing is allocated or inflated. */
static void growth_refused_at_once(void **state)
{
    (void)state;
    size_t n, asked = 0;
    uint8_t *z = gz("hello\n", 6, &n);
    bdb_buf out;
    bdb_buf_init(&out);
    assert_int_equal(bdb_gzip_inflate(z, n, 1000, &out, refuse_all, &asked), BDB_ERR_AGAIN);
    assert_true(asked >= 65536);
    assert_int_equal(out.cap, 0);
    assert_int_equal(out.len, 0);
    bdb_buf_free(&out);
    free(z);
}

/* Allocation n fails, for n = 1, 2, ... until a run reaches no injected failure: each
 * run returns 0 with exactly the plain bytes, or BDB_ERR_NOMEM. The body is two
 * members inflating to several growth steps of a checked buffer. */
static void alloc_failure_sweep(void **state)
{
    (void)state;
    const size_t n1 = 100000, n2 = 90000;
    uint8_t *plain = lines(n1 + n2);
    size_t a_n, b_n;
    uint8_t *a = gz(plain, n1, &a_n);
    uint8_t *b = gz(plain + n1, n2, &b_n);
    uint8_t *ab = malloc(a_n + b_n);
    assert_non_null(ab);
    memcpy(ab, a, a_n);
    memcpy(ab + a_n, b, b_n);
    int n, nomem = 0;
    for (n = 1; n <= 1000; n++) {
        bdb_buf out;
        bdb_buf_init_checked(&out);
        bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, (uint64_t)n);
        int rc = bdb_gzip_inflate(ab, a_n + b_n, 1 << 20, &out, NULL, NULL);
        bdb_alloc_fail_disarm();
        int hit = bdb_alloc_fail_injected() > 0;
        if (rc == BDB_ERR_NOMEM) {
            assert_true(hit);
            nomem++;
        } else {
            if (rc != 0)
                fail_msg("allocation %d failing: rc %d, want 0 or BDB_ERR_NOMEM", n, rc);
            assert_int_equal(out.len, n1 + n2);
            assert_memory_equal(out.data, plain, n1 + n2);
        }
        bdb_buf_free(&out);
        if (!hit)
            break;
    }
    assert_true(n <= 1000 && n > 1);
    assert_int_equal(nomem, n - 1); /* every injected failure reached the answer */
    /* and with everything failing from the first allocation on */
    bdb_buf out;
    bdb_buf_init_checked(&out);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + b_n, 1 << 20, &out, NULL, NULL), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    bdb_buf_free(&out);
    /* zlib's own memory: with room for the whole output reserved beforehand, the one
     * allocation left is zlib's state (its window is allocated only when a stream
     * takes more than one inflate call, site 2 of the sweep above) */
    bdb_buf_init_checked(&out);
    assert_int_equal(bdb_buf_reserve(&out, 1 << 20), BDB_OK);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, 1);
    assert_int_equal(bdb_gzip_inflate(ab, a_n + b_n, 1 << 20, &out, NULL, NULL), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    assert_int_equal(bdb_alloc_fail_injected(), 1);
    bdb_buf_free(&out);
    printf("alloc sweep gzip inflate: %d allocation sites failed in turn (%d answered NOMEM), "
           "0 answered corrupt, 0 crashes, %s\n",
           n - 1, nomem, LEAKS);
    free(ab);
    free(a);
    free(b);
    free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(limit_zero),
        cmocka_unit_test(limit_counts_appended_bytes),
        cmocka_unit_test(input_longer_than_zlib_counts),
        cmocka_unit_test(streams_not_complete_on_their_own),
        cmocka_unit_test(growth_refused_at_once),
        cmocka_unit_test(alloc_failure_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
