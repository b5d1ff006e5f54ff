/* common: buf (fixed-width, varints and zigzag at their boundaries, strings, JSON string
 * escaping, shortest round-trip doubles, printf), the sticky-error decoder, the hash map
 * under random churn against a reference (backward-shift deletion, growth, iteration),
 * status messages, and RFC 3339 / Unix-ms time parsing and formatting. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/map.h"
#include "common/path.h"
#include "common/alloc.h"
#include "common/timeutil.h"
#include "common/utf8.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ------------------------------------------------------------ buf */

static void test_buf_basics(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    bdb_buf_append(&b, "", 0); /* nothing to do */
    assert_int_equal(b.len, 0);
    bdb_buf_puts(&b, "hello");
    bdb_buf_putc(&b, ' ');
    bdb_buf_append(&b, "world!!", 5);
    bdb_buf_printf(&b, " %d-%s-%.1f", 42, "x", 1.5);
    assert_int_equal(b.len, strlen("hello world 42-x-1.5"));
    assert_memory_equal(b.data, "hello world 42-x-1.5", b.len);
    size_t cap = b.cap;
    bdb_buf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, cap);
    /* growth across many doublings keeps the content */
    for (int i = 0; i < 10000; i++)
        bdb_buf_printf(&b, "%05d", i);
    assert_int_equal(b.len, 50000);
    char tmp[16];
    for (int i = 0; i < 10000; i += 777) {
        snprintf(tmp, sizeof tmp, "%05d", i);
        assert_memory_equal(b.data + i * 5, tmp, 5);
    }
    /* a long printf */
    bdb_buf_reset(&b);
    char *longs = malloc(5000);
    memset(longs, 'q', 4999);
    longs[4999] = '\0';
    bdb_buf_printf(&b, "<%s>", longs);
    assert_int_equal(b.len, 5001);
    assert_int_equal(b.data[0], '<');
    assert_int_equal(b.data[5000], '>');
    free(longs);
    bdb_buf_reserve(&b, 1 << 20);
    assert_true(b.cap - b.len >= (1u << 20));
    bdb_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.cap, 0);
}

static void test_fixed_width(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_put_u32le(&b, 0x04030201u);
    bdb_buf_put_u64le(&b, 0x0c0b0a0908070605ull);
    static const uint8_t want[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    assert_int_equal(b.len, 12);
    assert_memory_equal(b.data, want, 12);
    assert_int_equal(bdb_get_u32le(b.data), 0x04030201u);
    assert_int_equal(bdb_get_u64le(b.data + 4), 0x0c0b0a0908070605ull);
    uint8_t raw[8];
    bdb_put_u64le(raw, UINT64_MAX - 1);
    assert_int_equal(bdb_get_u64le(raw), UINT64_MAX - 1);
    bdb_put_u32le(raw, 0xdeadbeefu);
    assert_int_equal(raw[0], 0xef);
    assert_int_equal(raw[3], 0xde);

    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_dec_u8(&d), 1);
    assert_int_equal(bdb_dec_left(&d), 11);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_dec_u32le(&d), 0x04030201u);
    assert_int_equal(bdb_dec_u64le(&d), 0x0c0b0a0908070605ull);
    assert_int_equal(d.err, 0);
    assert_int_equal(bdb_dec_left(&d), 0);
    bdb_buf_free(&b);
}

static size_t uvarint_len(uint64_t v)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_put_uvarint(&b, v);
    size_t n = b.len;
    bdb_buf_free(&b);
    return n;
}

static void test_varints(void **state)
{
    (void)state;
    /* encoded lengths at every 7-bit boundary */
    assert_int_equal(uvarint_len(0), 1);
    for (int k = 1; k < 10; k++) {
        uint64_t edge = (uint64_t)1 << (7 * k);
        assert_int_equal(uvarint_len(edge - 1), (size_t)k);
        assert_int_equal(uvarint_len(edge), (size_t)k + 1);
    }
    assert_int_equal(uvarint_len(UINT64_MAX), 10);
    {
        /* a 10th byte above 1 would overflow 64 bits: an error, not dropped bits */
        static const uint8_t over[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
        static const uint8_t max[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
        bdb_dec d;
        bdb_dec_init(&d, over, sizeof over);
        assert_int_equal(bdb_dec_uvarint(&d), 0);
        assert_int_equal(d.err, 1);
        bdb_dec_init(&d, max, sizeof max);
        assert_true(bdb_dec_uvarint(&d) == UINT64_MAX);
        assert_int_equal(d.err, 0);
        /* canonical reads refuse a padded form the plain reader accepts */
        static const uint8_t padded[] = {0x81, 0x00};
        bdb_dec_init(&d, padded, sizeof padded);
        assert_int_equal(bdb_dec_uvarint(&d), 1);
        assert_int_equal(d.err, 0);
        bdb_dec_init(&d, padded, sizeof padded);
        assert_int_equal(bdb_dec_uvarint_canon(&d), 0);
        assert_int_equal(d.err, 1);
        static const uint8_t m1[] = {0x01};
        bdb_dec_init(&d, m1, sizeof m1);
        assert_int_equal(bdb_dec_varint_canon(&d), -1);
        assert_int_equal(d.err, 0);
    }

    /* known bytes */
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_put_uvarint(&b, 300);
    static const uint8_t v300[] = {0xac, 0x02};
    assert_memory_equal(b.data, v300, 2);
    /* zigzag: 0, -1, 1, -2, 2 -> 0, 1, 2, 3, 4 */
    bdb_buf_reset(&b);
    int64_t zz[] = {0, -1, 1, -2, 2};
    for (int i = 0; i < 5; i++)
        bdb_buf_put_varint(&b, zz[i]);
    static const uint8_t zwant[] = {0, 1, 2, 3, 4};
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, zwant, 5);
    bdb_buf_reset(&b);
    bdb_buf_put_varint(&b, INT64_MIN);
    assert_int_equal(b.len, 10);
    bdb_buf_reset(&b);
    bdb_buf_put_varint(&b, -64);
    assert_int_equal(b.len, 1);
    bdb_buf_reset(&b);
    bdb_buf_put_varint(&b, 64);
    assert_int_equal(b.len, 2);

    /* round trips: boundaries and random values of every magnitude */
    bdb_buf_reset(&b);
    uint64_t uv[2000];
    int64_t sv[2000];
    size_t n = 0;
    uint64_t fixed_u[] = {0,
                          1,
                          127,
                          128,
                          16383,
                          16384,
                          UINT32_MAX,
                          (uint64_t)UINT32_MAX + 1,
                          INT64_MAX,
                          (uint64_t)INT64_MAX + 1,
                          UINT64_MAX - 1,
                          UINT64_MAX};
    int64_t fixed_s[] = {0,   -1,        1,         63,        -64,       64,
                         -65, INT32_MIN, INT32_MAX, INT64_MIN, INT64_MAX, INT64_MIN + 1};
    for (size_t i = 0; i < sizeof fixed_u / sizeof fixed_u[0]; i++) {
        uv[n] = fixed_u[i];
        sv[n] = fixed_s[i];
        n++;
    }
    rng_state = 12345;
    while (n < 2000) {
        int shift = (int)(rng() % 64);
        uv[n] = rng() >> shift;
        sv[n] = (int64_t)(rng() >> shift) * (rng() & 1 ? -1 : 1);
        n++;
    }
    for (size_t i = 0; i < n; i++) {
        bdb_buf_put_uvarint(&b, uv[i]);
        bdb_buf_put_varint(&b, sv[i]);
    }
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(bdb_dec_uvarint(&d), uv[i]);
        assert_int_equal(bdb_dec_varint(&d), sv[i]);
    }
    assert_int_equal(d.err, 0);
    assert_int_equal(bdb_dec_left(&d), 0);
    bdb_buf_free(&b);
}

static void test_strings_and_bytes(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_put_str(&b, "abc", 3);
    bdb_buf_put_str(&b, "", 0);
    char big[300];
    memset(big, 'z', sizeof big);
    big[7] = '\0';
    bdb_buf_put_str(&b, big, sizeof big); /* 2-byte length, embedded NUL */
    bdb_buf_append(&b, "\x01\x02\x03", 3);
    assert_int_equal(b.len, 1 + 3 + 1 + 2 + 300 + 3);

    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    size_t n;
    const char *s = bdb_dec_str(&d, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(s, "abc", 3);
    assert_ptr_equal(s, (const char *)b.data + 1); /* not copied */
    s = bdb_dec_str(&d, &n);
    assert_int_equal(n, 0);
    s = bdb_dec_str(&d, &n);
    assert_int_equal(n, 300);
    assert_memory_equal(s, big, 300);
    const uint8_t *p = bdb_dec_bytes(&d, 3);
    assert_non_null(p);
    assert_int_equal(p[2], 3);
    assert_int_equal(d.err, 0);
    bdb_buf_free(&b);
}

static void test_dec_sticky_errors(void **state)
{
    (void)state;
    static const uint8_t data[] = {0x05, 'h', 'e', 'l', 'l', 'o', 0x07, 'x', 0x01, 0x02};
    bdb_dec d;
    size_t n;

    /* a string longer than what is left */
    bdb_dec_init(&d, data + 6, 2);
    const char *s = bdb_dec_str(&d, &n);
    assert_int_equal(d.err, 1);
    assert_int_equal(n, 0);
    assert_string_equal(s, "");

    /* after an error every read returns zero, even with bytes left */
    bdb_dec_init(&d, data, sizeof data);
    assert_int_equal(bdb_dec_u32le(&d), bdb_get_u32le(data));
    assert_int_equal(bdb_dec_u64le(&d), 0); /* only 6 left */
    assert_int_equal(d.err, 1);
    assert_int_equal(bdb_dec_u8(&d), 0);
    assert_int_equal(bdb_dec_uvarint(&d), 0);
    assert_int_equal(bdb_dec_varint(&d), 0);
    assert_null(bdb_dec_bytes(&d, 1));
    s = bdb_dec_str(&d, &n);
    assert_int_equal(n, 0);
    assert_int_equal(d.err, 1);

    /* reading exactly to the end is fine; one more byte is an error */
    bdb_dec_init(&d, data, 1);
    assert_int_equal(bdb_dec_u8(&d), 5);
    assert_int_equal(d.err, 0);
    assert_int_equal(bdb_dec_u8(&d), 0);
    assert_int_equal(d.err, 1);

    /* truncated varint */
    static const uint8_t trunc[] = {0x80, 0x80};
    bdb_dec_init(&d, trunc, sizeof trunc);
    assert_int_equal(bdb_dec_uvarint(&d), 0);
    assert_int_equal(d.err, 1);

    /* over-long varint: 11 continuation bytes */
    uint8_t over[12];
    memset(over, 0x80, 11);
    over[11] = 0x01;
    bdb_dec_init(&d, over, sizeof over);
    assert_int_equal(bdb_dec_uvarint(&d), 0);
    assert_int_equal(d.err, 1);

    /* empty input: bytes(0) is fine, anything more is an error */
    bdb_dec_init(&d, data, 0);
    assert_int_equal(bdb_dec_left(&d), 0);
    assert_non_null(bdb_dec_bytes(&d, 0));
    assert_int_equal(d.err, 0);
    assert_int_equal(bdb_dec_u32le(&d), 0);
    assert_int_equal(d.err, 1);
}

static char *json_of(const char *s, size_t n)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_json_str(&b, s, n);
    bdb_buf_putc(&b, '\0');
    return (char *)b.data;
}

static void test_json_escaping(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t n;
        const char *out;
    } cases[] = {
        {"plain", 5, "plain"},
        {"", 0, ""},
        {"a\"b", 3, "a\\\"b"},
        {"back\\slash", 10, "back\\\\slash"},
        {"\n\r\t", 3, "\\u000a\\u000d\\u0009"},
        {"\x01\x1f", 2, "\\u0001\\u001f"},
        {"nul\0x", 5, "nul\\u0000x"},
        {" \x7f", 2, " \x7f"},
        {"caf\xc3\xa9 \xe2\x82\xac", 9, "caf\xc3\xa9 \xe2\x82\xac"}, /* UTF-8 untouched */
        {"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},
        /* bytes that are not UTF-8 become U+FFFD, one per byte that starts no sequence */
        {"a\xff"
         "b",
         3, "a\\ufffdb"},
        {"end\xc3", 4, "end\\ufffd"},
        {"\xc3(", 2, "\\ufffd("},
        {"\xed\xa0\x80", 3, "\\ufffd\\ufffd\\ufffd"}, /* a surrogate */
        {"\xc0\xaf", 2, "\\ufffd\\ufffd"},            /* overlong '/' */
        {"</script>", 9, "</script>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = json_of(cases[i].in, cases[i].n);
        assert_string_equal(got, cases[i].out);
        free(got);
    }
    /* every byte value: output has no raw control byte, no unescaped quote */
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    char *got = json_of(all, 256);
    for (size_t i = 0; got[i]; i++) {
        assert_true((unsigned char)got[i] >= 0x20);
        if (got[i] == '\\') {
            assert_true(got[i + 1] == '\\' || got[i + 1] == '"' || got[i + 1] == 'u');
            i++;
        } else {
            assert_true(got[i] != '"');
        }
    }
    free(got);
}

/* A second, independent reading of UTF-8 for the test: decode by the lead byte's
 * length, then the bytes are well-formed iff the code point is a scalar value and
 * its shortest encoding is exactly those bytes. */
static size_t ref_utf8_seq(const unsigned char *p, size_t n)
{
    if (!n)
        return 0;
    size_t len = p[0] < 0x80 ? 1 : p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc0 ? 2 : 0;
    if (!len || len > n || p[0] >= 0xf8)
        return 0;
    uint32_t cp = len == 1 ? p[0] : (uint32_t)(p[0] & (0x7f >> len));
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    size_t shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    return shortest == len ? len : 0;
}

static void test_utf8(void **state)
{
    (void)state;
    unsigned char b[4];
    size_t checked = 0, valid3 = 0;
    /* every 1-, 2- and 3-byte string, and every 4-byte one whose last two bytes are
     * from the edges of each byte class */
    for (uint32_t x = 0; x < 0x1000000; x++) {
        b[0] = (unsigned char)(x >> 16), b[1] = (unsigned char)(x >> 8), b[2] = (unsigned char)x;
        size_t want = ref_utf8_seq(b, 3);
        assert_int_equal(bdb_utf8_seq(b, 3), want);
        checked++;
        valid3 += want == 3;
        if (!(x & 0xffff))
            assert_int_equal(bdb_utf8_seq(b, 1), ref_utf8_seq(b, 1));
        if (!(x & 0xff))
            assert_int_equal(bdb_utf8_seq(b, 2), ref_utf8_seq(b, 2));
    }
    static const unsigned char edge[] = {0x00, 0x7f, 0x80, 0x8f, 0x90, 0xbf, 0xc0, 0xff};
    size_t valid4 = 0;
    for (uint32_t x = 0; x < 0x10000; x++)
        for (size_t i = 0; i < sizeof edge; i++)
            for (size_t j = 0; j < sizeof edge; j++) {
                b[0] = (unsigned char)(x >> 8), b[1] = (unsigned char)x, b[2] = edge[i];
                b[3] = edge[j];
                size_t want = ref_utf8_seq(b, 4);
                assert_int_equal(bdb_utf8_seq(b, 4), want);
                checked++;
                valid4 += want == 4;
            }
    assert_int_equal(bdb_utf8_seq(b, 0), 0);
    /* 3-byte sequences: U+0800..U+FFFF less the 2,048 surrogates */
    assert_int_equal(valid3, 0x10000 - 0x800 - 0x800);
    /* 4-byte: U+10000..U+10FFFF is 256 first-two-byte pairs, 4 x 4 edge tails each */
    assert_int_equal(valid4, 256 * 4 * 4);

    size_t bad = 99;
    assert_true(bdb_utf8_valid("", 0, &bad));
    assert_true(bdb_utf8_valid("plain ascii text, longer than eight", 35, &bad));
    assert_true(bdb_utf8_valid("Pumpe Gr\xc3\xb6\xc3\x9f"
                               "e \xf0\x9f\x98\x80",
                               19, &bad));
    assert_int_equal(bad, 99);
    assert_false(bdb_utf8_valid("abcdefghij\xff", 11, &bad));
    assert_int_equal(bad, 10);
    assert_false(bdb_utf8_valid("ab\xe2\x82", 4, &bad)); /* cut short */
    assert_int_equal(bad, 2);
    assert_false(bdb_utf8_valid("\xc3\xa9\x80", 3, &bad)); /* stray continuation */
    assert_int_equal(bad, 2);
    assert_false(bdb_utf8_valid("12345678\xf4\x90\x80\x80", 12, &bad)); /* > U+10FFFF */
    assert_int_equal(bad, 8);
    print_message("utf8: %zu strings compared with a reference decoder, 0 differences\n", checked);
}

static char *fmt_double(double v)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_double(&b, v);
    bdb_buf_putc(&b, '\0');
    return (char *)b.data;
}

/* bdb_buf_i64 and bdb_buf_u64 write what %lld and %llu write. */
static void test_integer_format(void **state)
{
    (void)state;
    static const int64_t edge[] = {0,
                                   1,
                                   -1,
                                   9,
                                   10,
                                   -10,
                                   99,
                                   100,
                                   999,
                                   1000,
                                   1700000000000,
                                   INT64_MAX,
                                   INT64_MIN,
                                   INT64_MIN + 1,
                                   -9223372036854};
    char want[32];
    bdb_buf b;
    bdb_buf_init(&b);
    rng_state = 31337;
    for (int i = 0; i < 200000; i++) {
        int64_t v =
            i < (int)(sizeof edge / sizeof edge[0]) ? edge[i] : (int64_t)(rng() >> (rng() % 64));
        if (i % 3 == 1)
            v = -v;
        bdb_buf_reset(&b);
        bdb_buf_i64(&b, v);
        snprintf(want, sizeof want, "%lld", (long long)v);
        if (b.len != strlen(want) || memcmp(b.data, want, b.len))
            fail_msg("i64 %s: got %.*s", want, (int)b.len, (const char *)b.data);
        uint64_t u = (uint64_t)v;
        bdb_buf_reset(&b);
        bdb_buf_u64(&b, u);
        snprintf(want, sizeof want, "%llu", (unsigned long long)u);
        if (b.len != strlen(want) || memcmp(b.data, want, b.len))
            fail_msg("u64 %s: got %.*s", want, (int)b.len, (const char *)b.data);
    }
    bdb_buf_free(&b);
}

/* What bdb_buf_double printed before its fixed-point fast path: the shortest of %.15g,
 * %.16g, %.17g that reads back as v. The fast path must print the same. */
static void same_as_printf_search(double v)
{
    char want[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(want, sizeof want, "%.*g", prec, v);
        if (strtod(want, NULL) == v)
            break;
    }
    char *got = fmt_double(v);
    if (strcmp(got, want))
        fail_msg("%.17g: got %s, want %s", v, got, want);
    free(got);
}

static void test_double_format(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *s;
    } cases[] = {
        {0.0, "0"},
        {1.0, "1"},
        {-1.5, "-1.5"},
        {0.1, "0.1"},
        {21.5, "21.5"},
        {100.0, "100"},
        {1e21, "1e+21"},
        {1e-7, "1e-07"},
        {-0.0, "-0"},
        {0.3, "0.3"},
        {123456789.0, "123456789"},
        {1.0 / 3.0, "0.3333333333333333"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1700000000000.0, "1700000000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *s = fmt_double(cases[i].v);
        assert_string_equal(s, cases[i].s);
        free(s);
    }
    /* the fixed-point fast path prints exactly what the printf search prints */
    static const double edge[] = {1e-4,
                                  9.9999999999999e-5,
                                  1e15,
                                  999999999999999.0,
                                  999999999999999.9,
                                  0.1,
                                  0.0042,
                                  123456789012345.0,
                                  12345678901234.5,
                                  4503599627370496.0,
                                  1e14,
                                  0.30000000000000004};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        for (int sign = 0; sign < 2; sign++)
            same_as_printf_search(sign ? -edge[i] : edge[i]);
    /* around every power of ten the fast path's range and digit count touch */
    for (int e = -6; e <= 17; e++) {
        double p = pow(10.0, e), lo = p, hi = p;
        for (int step = 0; step < 4; step++) {
            same_as_printf_search(lo);
            same_as_printf_search(hi);
            same_as_printf_search(p * 0.9999999999999995);
            same_as_printf_search(p * 9.99999999999999);
            lo = nextafter(lo, 0.0);
            hi = nextafter(hi, INFINITY);
        }
    }
    /* powers of two and their neighbours: the gap below is half the gap above */
    for (int e = -20; e <= 55; e++)
        for (int step = -3; step <= 3; step++) {
            double v = ldexp(1.0, e);
            for (int t = 0; t < (step < 0 ? -step : step); t++)
                v = nextafter(v, step < 0 ? 0.0 : INFINITY);
            same_as_printf_search(v);
        }
    /* any double of the range printed without printf, mantissa and exponent at random:
     * mostly the 16- and 17-digit path */
    rng_state = 99;
    for (int i = 0; i < 1500000; i++) {
        uint64_t bits = (rng() & ((1ull << 52) - 1)) | ((uint64_t)(1023 - 14 + rng() % 64) << 52);
        double v;
        memcpy(&v, &bits, 8);
        same_as_printf_search(i & 1 ? -v : v);
    }
    rng_state = 4242;
    for (int i = 0; i < 300000; i++) {
        double v;
        switch (i % 4) {
        case 0: { /* a sensor value: up to 6 decimals at scales 1e-4..1e14 */
            int dec = (int)(rng() % 7);
            double scale = pow(10.0, (double)(rng() % 19) - 4.0);
            v = (double)(int64_t)(rng() % 2000001 - 1000000) / pow(10.0, dec) * scale;
            break;
        }
        case 1: { /* any bit pattern */
            uint64_t bits = rng();
            memcpy(&v, &bits, 8);
            if (!isfinite(v))
                continue;
            break;
        }
        case 2: /* a computed statistic */
            v = (double)(rng() % 100000) / (double)(1 + rng() % 977);
            break;
        default: /* integers up to 2^53 */
            v = (double)(rng() >> 11);
            break;
        }
        same_as_printf_search(v);
    }
    /* random bit patterns and decimal-looking values round-trip exactly */
    rng_state = 777;
    for (int i = 0; i < 20000; i++) {
        double v;
        if (i % 2) {
            uint64_t bits = rng();
            memcpy(&v, &bits, 8);
            if (!isfinite(v))
                continue;
        } else {
            v = (double)(int64_t)(rng() % 2000001 - 1000000) / 1000.0;
        }
        char *s = fmt_double(v);
        char *end;
        double back = strtod(s, &end);
        assert_int_equal(*end, '\0');
        assert_memory_equal(&back, &v, sizeof v);
        assert_true(strlen(s) <= 24);
        free(s);
    }
    /* extremes */
    double ext[] = {DBL_MAX, -DBL_MAX, DBL_MIN, 4.9406564584124654e-324, DBL_EPSILON};
    for (size_t i = 0; i < sizeof ext / sizeof ext[0]; i++) {
        char *s = fmt_double(ext[i]);
        assert_true(strtod(s, NULL) == ext[i]);
        free(s);
    }
}

static void test_status_strings(void **state)
{
    (void)state;
    assert_string_equal(bdb_strerror(BDB_OK), "ok");
    assert_string_equal(bdb_strerror(BDB_ERR_READONLY),
                        "storage is read-only after a failed fsync");
    assert_string_equal(bdb_strerror(BDB_ERR_NOTFOUND), "not found");
    assert_string_equal(bdb_strerror(12345), "unknown status");
    assert_string_equal(bdb_strerror(-1), "unknown status");
    int codes[] = {BDB_ERR_NOMEM,    BDB_ERR_IO,      BDB_ERR_CORRUPT, BDB_ERR_INVALID,
                   BDB_ERR_LIMIT,    BDB_ERR_NOSPACE, BDB_ERR_EXISTS,  BDB_ERR_AGAIN,
                   BDB_ERR_SHUTDOWN, BDB_ERR_PARTIAL};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        assert_true(codes[i] < -1000);
        assert_string_not_equal(bdb_strerror(codes[i]), "unknown status");
    }
}

/* ------------------------------------------------------------ map */

#define NKEYS 3000

static int make_key(char *out, size_t i)
{
    /* varied lengths, some with NUL bytes and shared prefixes */
    switch (i % 4) {
    case 0:
        return snprintf(out, 64, "key-%zu", i);
    case 1:
        return snprintf(out, 64, "tenant/device-%zu/metric.temperature", i);
    case 2: {
        int n = snprintf(out, 64, "b%zu", i);
        out[n] = '\0';
        out[n + 1] = 'x';
        return n + 2; /* includes a NUL inside */
    }
    default:
        return snprintf(out, 64, "%zu", i * 7919);
    }
}

static void test_map_basic(void **state)
{
    (void)state;
    bdb_map *m = bdb_map_new();
    assert_int_equal(bdb_map_count(m), 0);
    assert_null(bdb_map_get(m, "a", 1));
    assert_null(bdb_map_del(m, "a", 1));
    int x = 1, y = 2, z = 3;
    assert_null(bdb_map_put(m, "a", 1, &x));
    assert_ptr_equal(bdb_map_get(m, "a", 1), &x);
    assert_ptr_equal(bdb_map_put(m, "a", 1, &y), &x); /* replace returns previous */
    assert_int_equal(bdb_map_count(m), 1);
    assert_ptr_equal(bdb_map_get(m, "a", 1), &y);
    /* prefixes and the empty key are distinct keys */
    assert_null(bdb_map_get(m, "ab", 2));
    assert_null(bdb_map_get(m, "", 0));
    assert_null(bdb_map_put(m, "", 0, &z));
    assert_ptr_equal(bdb_map_get(m, "", 0), &z);
    assert_null(bdb_map_put(m, "ab", 2, &x));
    assert_int_equal(bdb_map_count(m), 3);
    /* the key is copied */
    char k[4] = "xyz";
    assert_null(bdb_map_put(m, k, 3, &x));
    k[0] = 'Q';
    assert_ptr_equal(bdb_map_get(m, "xyz", 3), &x);
    assert_null(bdb_map_get(m, k, 3));
    /* get_h / put_h with the real hash agree with the plain calls */
    assert_ptr_equal(bdb_map_get_h(m, "ab", 2, bdb_hash("ab", 2)), &x);
    assert_null(bdb_map_put_h(m, "cd", 2, bdb_hash("cd", 2), &y));
    assert_ptr_equal(bdb_map_get(m, "cd", 2), &y);
    assert_ptr_equal(bdb_map_del(m, "cd", 2), &y);
    assert_ptr_equal(bdb_map_del(m, "a", 1), &y);
    assert_null(bdb_map_get(m, "a", 1));
    assert_null(bdb_map_del(m, "a", 1));
    assert_int_equal(bdb_map_count(m), 3);
    /* NULL values are storable but indistinguishable from absent on get */
    bdb_map_free(m);
    bdb_map_free(NULL);

    assert_int_equal(bdb_hash("abc", 3), bdb_hash("abc", 3));
    assert_true(bdb_hash("abc", 3) != bdb_hash("abd", 3));
}

/* Random put/replace/delete against a reference array; after each phase every key is
 * checked and iteration must visit exactly the live keys once. Many deletes in a
 * table that grows and stays dense exercise backward shift in long probe runs,
 * including runs that wrap around the end of the table. */
static void map_churn(int borrow)
{
    static uintptr_t ref[NKEYS];          /* 0 = absent */
    static uint16_t owner[40 * 5000 + 2]; /* value -> key index */
    static char keys[NKEYS][64];
    static int klen[NKEYS];
    memset(ref, 0, sizeof ref);
    for (size_t i = 0; i < NKEYS; i++)
        klen[i] = make_key(keys[i], i);
    /* a borrowing map keeps pointers into keys[], which stay put */
    bdb_map *m = borrow ? bdb_map_new_borrowed() : bdb_map_new();
    rng_state = 0xfeedface;
    size_t live = 0;
    uintptr_t version = 1;
    for (int phase = 0; phase < 40; phase++) {
        /* the key range in use shifts, so the table fills, drains and refills */
        size_t lo = (size_t)(phase % 10) * 200, span = 400 + (size_t)(phase % 3) * 700;
        for (int op = 0; op < 5000; op++) {
            size_t i = (lo + rng() % span) % NKEYS;
            unsigned what = (unsigned)(rng() % 10);
            if (what < 5) {
                uintptr_t v = ++version;
                owner[v] = (uint16_t)i;
                void *prev = bdb_map_put(m, keys[i], (size_t)klen[i], (void *)v);
                assert_ptr_equal(prev, (void *)ref[i]);
                if (!ref[i])
                    live++;
                ref[i] = v;
            } else if (what < 9) {
                void *prev = bdb_map_del(m, keys[i], (size_t)klen[i]);
                assert_ptr_equal(prev, (void *)ref[i]);
                if (ref[i])
                    live--;
                ref[i] = 0;
            } else {
                assert_ptr_equal(bdb_map_get(m, keys[i], (size_t)klen[i]), (void *)ref[i]);
            }
            assert_int_equal(bdb_map_count(m), live);
        }
        for (size_t i = 0; i < NKEYS; i++)
            assert_ptr_equal(bdb_map_get(m, keys[i], (size_t)klen[i]), (void *)ref[i]);
        static unsigned char seen[NKEYS];
        memset(seen, 0, sizeof seen);
        size_t pos = 0, kl, visited = 0;
        const void *k;
        void *v;
        while (bdb_map_next(m, &pos, &k, &kl, &v)) {
            visited++;
            assert_true(visited <= live);
            /* which key this is, by its (unique) value */
            assert_true((uintptr_t)v > 1 && (uintptr_t)v <= version);
            size_t i = owner[(uintptr_t)v];
            assert_int_equal(ref[i], (uintptr_t)v);
            assert_int_equal(kl, (size_t)klen[i]);
            assert_memory_equal(k, keys[i], kl);
            assert_int_equal(seen[i], 0);
            seen[i] = 1;
        }
        assert_int_equal(visited, live);
    }
    /* delete everything: the map is empty and all lookups miss */
    for (size_t i = 0; i < NKEYS; i++)
        if (ref[i])
            assert_ptr_equal(bdb_map_del(m, keys[i], (size_t)klen[i]), (void *)ref[i]);
    assert_int_equal(bdb_map_count(m), 0);
    size_t pos = 0, kl;
    const void *k;
    void *v;
    assert_int_equal(bdb_map_next(m, &pos, &k, &kl, &v), 0);
    for (size_t i = 0; i < NKEYS; i += 13)
        assert_null(bdb_map_get(m, keys[i], (size_t)klen[i]));
    bdb_map_free(m);
}

/* ------------------------------------------------------------ time */

static void test_map_churn_vs_reference(void **state)
{
    (void)state;
    map_churn(0);
}

/* The same with keys kept as the caller's pointers; iteration hands back those
 * pointers themselves. */
static void test_map_borrowed_churn(void **state)
{
    (void)state;
    map_churn(1);
    bdb_map *m = bdb_map_new_borrowed();
    static const char key[] = "device-1";
    int x = 1;
    assert_int_equal(bdb_map_set(m, key, 8, &x), BDB_OK);
    size_t pos = 0, kl;
    const void *k;
    void *v;
    assert_int_equal(bdb_map_next(m, &pos, &k, &kl, &v), 1);
    assert_ptr_equal(k, key);
    assert_int_equal(kl, 8);
    assert_ptr_equal(bdb_map_del(m, "device-1", 8), &x);
    assert_int_equal(bdb_map_count(m), 0);
    bdb_map_free(m);
}
static void test_parse_unix_ms(void **state)
{
    (void)state;
    int64_t t = 0;
    assert_int_equal(bdb_parse_time_ms("1700000000000", &t), BDB_OK);
    assert_int_equal(t, 1700000000000);
    assert_int_equal(bdb_parse_time_ms("0", &t), BDB_OK);
    assert_int_equal(t, 0);
    assert_int_equal(bdb_parse_time_ms("-5", &t), BDB_OK);
    assert_int_equal(t, -5);
    assert_int_equal(bdb_parse_time_ms("9223372036854775807", &t), BDB_OK);
    assert_int_equal(t, INT64_MAX);

    t = 77;
    const char *bad[] = {"",
                         "-",
                         "12ab",
                         "1.5",
                         " 12",
                         "12 ",
                         "+12",
                         "0x10",
                         "1e3",
                         "99999999999999999999",
                         "-99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = bdb_parse_time_ms(bad[i], &t);
        if (rc != BDB_ERR_INVALID)
            fail_msg("'%s' was accepted as %lld", bad[i], (long long)t);
    }
    assert_int_equal(bdb_parse_time_ms(NULL, &t), BDB_ERR_INVALID);
    assert_int_equal(t, 77); /* untouched on error */
}

/* Query times: the stored range plus its exclusive end; past it, int64 overflow
 * included, is BDB_ERR_LIMIT (a 400 naming the range), not BDB_ERR_INVALID. */
static void test_parse_query_time(void **state)
{
    (void)state;
    int64_t t = 77;
    assert_int_equal(bdb_parse_query_time("-9223372036854", &t), BDB_OK);
    assert_int_equal(t, BDB_QT_MIN_MS);
    assert_int_equal(bdb_parse_query_time("9223372036855", &t), BDB_OK);
    assert_int_equal(t, BDB_TS_MAX_MS + 1);
    assert_int_equal(bdb_parse_query_time("2262-04-11T23:47:16.855Z", &t), BDB_OK);
    assert_int_equal(t, BDB_QT_MAX_MS);
    t = 77;
    const char *far[] = {"-9223372036855",       "9223372036856",           "9223372036854775807",
                         "-9223372036854775808", "99999999999999999999",    "-99999999999999999999",
                         "9999-12-31T23:59:59Z", "2262-04-11T23:47:16.856Z"};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++)
        if (bdb_parse_query_time(far[i], &t) != BDB_ERR_LIMIT)
            fail_msg("'%s' is not refused as out of range", far[i]);
    const char *bad[] = {"", "-", "abc", " 5", "+5", "1e3", "2024-13-01T00:00:00Z"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (bdb_parse_query_time(bad[i], &t) != BDB_ERR_INVALID)
            fail_msg("'%s' is not refused as invalid", bad[i]);
    assert_int_equal(t, 77); /* untouched on error */
}

static void test_parse_rfc3339(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int64_t want;
    } ok[] = {
        {"2023-11-14T22:13:20Z", 1700000000000},
        {"2023-11-14t22:13:20z", 1700000000000},
        {"2023-11-14 22:13:20Z", 1700000000000},
        {"2023-11-14T22:13:20.5Z", 1700000000500},
        {"2023-11-14T22:13:20.05Z", 1700000000050},
        {"2023-11-14T22:13:20.123Z", 1700000000123},
        {"2023-11-14T22:13:20.123456789Z", 1700000000123}, /* truncated to ms */
        {"2023-11-14T22:13:20.999999Z", 1700000000999},
        {"2023-11-14T23:13:20+01:00", 1700000000000},
        {"2023-11-14T16:43:20-05:30", 1700000000000},
        {"2023-11-15T00:13:20.250+02:00", 1700000000250},
        {"2023-11-14T22:13:20+00:00", 1700000000000},
        {"2023-11-14T22:13:20-00:00", 1700000000000},
        {"1970-01-01T00:00:00Z", 0},
        {"1970-01-01T00:00:00.001Z", 1},
        {"1969-12-31T23:59:59.999Z", -1},
        {"1969-12-31T23:00:00Z", -3600000},
        {"1900-01-01T00:00:00Z", -2208988800000},
        {"2000-02-29T12:00:00Z", 951825600000},
        {"2024-02-29T00:00:00Z", 1709164800000},
        {"2023-12-31T23:59:59Z", 1704067199000},
        {"2024-01-01T00:00:00Z", 1704067200000},
        {"2016-12-31T23:59:60Z", 1483228800000}, /* leap second folds into the next */
        {"1970-01-01T00:00:00+14:00", -14 * 3600000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int64_t t = 0;
        int rc = bdb_parse_time_ms(ok[i].s, &t);
        if (rc != BDB_OK || t != ok[i].want)
            fail_msg("'%s': rc %d t %lld, want %lld", ok[i].s, rc, (long long)t,
                     (long long)ok[i].want);
    }
    static const char *bad[] = {
        "2023-11-14T22:13:20",       /* no zone */
        "2023-11-14",                /* date only */
        "2023-11-14T22:13Z",         /* no seconds */
        "2023-11-14T22:13:20.Z",     /* empty fraction */
        "2023-11-14T22:13:20ZZ",     /* trailing junk */
        "2023-11-14T22:13:20Z ",     /* trailing space */
        "2023-11-14T22:13:20+01",    /* short offset */
        "2023-11-14T22:13:20+0100",  /* offset without colon */
        "2023-11-14T22:13:20+24:00", /* offset hour out of range */
        "2023-11-14T22:13:20+01:60", /* offset minute out of range */
        "2023-13-14T22:13:20Z",      /* month 13 */
        "2023-00-14T22:13:20Z",      /* month 0 */
        "2023-11-00T22:13:20Z",      /* day 0 */
        "2023-11-31T22:13:20Z",      /* November has 30 days */
        "2023-02-29T00:00:00Z",      /* not a leap year */
        "1900-02-29T00:00:00Z",      /* century, not a leap year */
        "2023-04-31T00:00:00Z",      /* April has 30 days */
        "2023-11-14T24:00:00Z",      /* hour 24 */
        "2023-11-14T22:60:00Z",      /* minute 60 */
        "2023-11-14T22:13:61Z",      /* second 61 */
        "2023/11/14T22:13:20Z",
        "23-11-14T22:13:20Z",
        "2023-1-14T22:13:20Z",
        "2023-11-14X22:13:20Z",
        "abc",
        "T",
        "2023-11-14T2a:13:20Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t t = 0;
        if (bdb_parse_time_ms(bad[i], &t) != BDB_ERR_INVALID)
            fail_msg("'%s' was accepted as %lld", bad[i], (long long)t);
    }
}

static void test_format_time(void **state)
{
    (void)state;
    char out[40];
    static const struct {
        int64_t ms;
        const char *s;
    } cases[] = {
        {1700000000000, "2023-11-14T22:13:20.000Z"},
        {1700000000123, "2023-11-14T22:13:20.123Z"},
        {0, "1970-01-01T00:00:00.000Z"},
        {-1, "1969-12-31T23:59:59.999Z"},
        {-1000, "1969-12-31T23:59:59.000Z"},
        {-1001, "1969-12-31T23:59:58.999Z"},
        {951825600000, "2000-02-29T12:00:00.000Z"},
        {253402300799999, "9999-12-31T23:59:59.999Z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bdb_format_time_ms(cases[i].ms, out, sizeof out);
        assert_string_equal(out, cases[i].s);
    }
    /* format -> parse round trip over a wide random range */
    rng_state = 4242;
    for (int i = 0; i < 20000; i++) {
        /* years 0001 .. 9999 */
        int64_t ms = (int64_t)(rng() % 315537897600000ull) - 62135596800000;
        bdb_format_time_ms(ms, out, sizeof out);
        int64_t back = 0;
        assert_int_equal(bdb_parse_time_ms(out, &back), BDB_OK);
        assert_int_equal(back, ms);
    }
    /* the extremes neither overflow nor print garbage (found by the CQL fuzzer) */
    bdb_format_time_ms(INT64_MIN, out, sizeof out);
    assert_true(strlen(out) > 0);
    bdb_format_time_ms(INT64_MAX, out, sizeof out);
    assert_true(strlen(out) > 0);
    bdb_format_time_ms(-1, out, sizeof out);
    assert_string_equal(out, "1969-12-31T23:59:59.999Z");
    /* a short output buffer is truncated, never overrun */
    char small[8];
    memset(small, 'X', sizeof small);
    bdb_format_time_ms(0, small, 5);
    assert_string_equal(small, "1970");
    assert_int_equal(small[5], 'X');
}

static void test_floor_div_align(void **state)
{
    (void)state;
    assert_int_equal(bdb_floor_div(7, 2), 3);
    assert_int_equal(bdb_floor_div(-7, 2), -4);
    assert_int_equal(bdb_floor_div(-8, 2), -4);
    assert_int_equal(bdb_floor_div(7, -2), -4);
    assert_int_equal(bdb_floor_div(-7, -2), 3);
    assert_int_equal(bdb_floor_div(0, 5), 0);
    assert_int_equal(bdb_align_down(-1, 1000), -1000);
    assert_int_equal(bdb_align_down(-1000, 1000), -1000);
    assert_int_equal(bdb_align_down(999, 1000), 0);
    assert_int_equal(bdb_align_down(1700000000123, 3600000), 1699999200000);
    /* the clocks move forward and are in a sane range */
    int64_t a = bdb_monotonic_ms(), now = bdb_now_ms();
    assert_true(now > 1600000000000);
    assert_true(bdb_monotonic_ms() >= a);
}

static void test_path_join(void **state)
{
    (void)state;
    char *p = bdb_path_join("/data", "blocks", NULL);
    assert_string_equal(p, "/data/blocks");
    free(p);
    p = bdb_path_join("/data/blocks", "0001.blk", ".tmp");
    assert_string_equal(p, "/data/blocks/0001.blk.tmp");
    free(p);
    /* a chain started from a failed allocation fails once, at its end */
    assert_null(bdb_path_join(NULL, "wal", NULL));
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, 1);
    assert_null(bdb_path_join("/data", "wal", NULL));
    assert_int_equal(bdb_alloc_fail_injected(), 1);
    bdb_alloc_fail_disarm();
    /* the longest name the limit allows: directory, subdirectory, prefix, NAME_MAX */
    assert_true(BDB_DATA_DIR_MAX + sizeof "/quarantine/fleet-" + 255 < BDB_PATH_BUF);
}

/* bdb_buf_put_num: every double back bit for bit, in the documented sizes, and only
 * the writer's form accepted. */
static void num_roundtrip(double v, size_t want_len)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_put_num(&b, v);
    if (want_len)
        assert_int_equal(b.len, want_len);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    double r = bdb_dec_num(&d);
    assert_false(d.err);
    assert_int_equal(bdb_dec_left(&d), 0);
    assert_memory_equal(&r, &v, sizeof v);
    bdb_buf_free(&b);
}

static int num_refused(const uint8_t *p, size_t n)
{
    bdb_dec d;
    bdb_dec_init(&d, p, n);
    bdb_dec_num(&d);
    return d.err;
}

static void test_exact_numbers(void **state)
{
    (void)state;
    num_roundtrip(0.0, 1);
    num_roundtrip(21.5, 2);      /* 215 / 10 */
    num_roundtrip(51.27, 3);     /* 5127 / 100 */
    num_roundtrip(1013.25, 4);   /* 101325 / 100: 22 bits */
    num_roundtrip(-40.0, 2);     /* -40 */
    num_roundtrip(1e15, 8);      /* an integer */
    num_roundtrip(0.1, 1);       /* 1 / 10 */
    num_roundtrip(-0.0, 9);      /* raw */
    num_roundtrip(1.0 / 3.0, 9); /* raw */
    num_roundtrip(NAN, 9);
    num_roundtrip(INFINITY, 9);
    num_roundtrip(-INFINITY, 9);
    num_roundtrip(DBL_MAX, 9);
    num_roundtrip(DBL_TRUE_MIN, 9);
    num_roundtrip(9007199254740992.0, 0); /* 2^53 */
    num_roundtrip(9007199254740994.0, 0); /* past 2^53 */
    num_roundtrip(21.299999237060547, 0); /* a float32 reading */
    num_roundtrip(0.00000000000001, 0);   /* 1e-14: e = 14 */
    num_roundtrip(0.000000000000001, 9);  /* 1e-15: past e = 14, raw */
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double v;
        if (i % 3 == 0) { /* any bit pattern */
            memcpy(&v, &x, sizeof v);
        } else { /* decimal readings of 0 to 6 digits after the point */
            static const double p10[7] = {1, 10, 100, 1000, 1e4, 1e5, 1e6};
            v = (double)(int64_t)(x % 20000001) - 10000000.0;
            v /= p10[x % 7];
        }
        num_roundtrip(v, 0);
    }
    /* not the writer's form: 10 / 10 (1 is e = 0), a raw 21.5, an overlong varint, a
     * tag of 15 with bits above it, a mantissa past 2^53 */
    const uint8_t ten_tenths[] = {0xc1, 0x02}; /* zigzag(10) = 20; 20 << 4 | 1 = 321 */
    assert_true(num_refused(ten_tenths, sizeof ten_tenths));
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, 15);
    bdb_buf_put_f64(&b, 21.5);
    assert_true(num_refused(b.data, b.len));
    const uint8_t overlong[] = {0x80, 0x00};
    assert_true(num_refused(overlong, sizeof overlong));
    const uint8_t tag_hi[] = {0x1f, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_true(num_refused(tag_hi, sizeof tag_hi));
    bdb_buf_reset(&b);
    bdb_buf_put_uvarint(&b, ((uint64_t)1 << 55) << 4);
    assert_true(num_refused(b.data, b.len));
    bdb_buf_free(&b);
}

/* bdb_dec_num accepts a (mantissa, exponent) form exactly when it is the one the writer
 * makes of its value, near the bounds of the decoder's shortcut (|m| < 2^50, m not a
 * multiple of 10) too. */
static void test_num_canonical_forms(void **state)
{
    (void)state;
    static const double p10[15] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6, 1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    bdb_buf in, out;
    bdb_buf_init(&in);
    bdb_buf_init(&out);
    for (int i = 0; i < 300000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int bits = (int)(x % 54); /* magnitudes up to 2^53, around 2^50 often */
        if (i % 4 == 0)
            bits = 48 + (int)(x % 6);
        int64_t m = bits ? (int64_t)((x >> 10) & ((UINT64_C(1) << bits) - 1)) : 0;
        if (i % 5 == 0)
            m -= m % 10; /* a multiple of 10: never the shortest form past e = 0 */
        if (i % 2)
            m = -m;
        unsigned e = (unsigned)((x >> 3) % 15);
        uint64_t zz = ((uint64_t)m << 1) ^ (uint64_t)(m >> 63);
        bdb_buf_reset(&in);
        bdb_buf_put_uvarint(&in, zz << 4 | e);
        bdb_dec d;
        bdb_dec_init(&d, in.data, in.len);
        double v = bdb_dec_num(&d);
        double want = (double)m / p10[e];
        bdb_buf_reset(&out);
        bdb_buf_put_num(&out, want);
        int canonical = out.len == in.len && !memcmp(out.data, in.data, in.len);
        assert_int_equal(!d.err, canonical);
        if (canonical)
            assert_memory_equal(&v, &want, sizeof v);
    }
    bdb_buf_free(&in);
    bdb_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf_basics),         cmocka_unit_test(test_num_canonical_forms),
        cmocka_unit_test(test_fixed_width),        cmocka_unit_test(test_varints),
        cmocka_unit_test(test_strings_and_bytes),  cmocka_unit_test(test_dec_sticky_errors),
        cmocka_unit_test(test_exact_numbers),      cmocka_unit_test(test_json_escaping),
        cmocka_unit_test(test_double_format),      cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_map_basic),          cmocka_unit_test(test_map_churn_vs_reference),
        cmocka_unit_test(test_map_borrowed_churn), cmocka_unit_test(test_parse_unix_ms),
        cmocka_unit_test(test_parse_query_time),   cmocka_unit_test(test_parse_rfc3339),
        cmocka_unit_test(test_format_time),        cmocka_unit_test(test_floor_div_align),
        cmocka_unit_test(test_path_join),          cmocka_unit_test(test_utf8),
        cmocka_unit_test(test_integer_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
