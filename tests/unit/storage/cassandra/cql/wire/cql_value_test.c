/* cql_value: every schema type encodes and decodes; the text forms parse and format
 * back to the same text; malformed values and bad text are rejected with a reason.
 * cql_token: Murmur3 tokens equal the ones a real Cassandra 2.1.0 node computed
 * (SELECT token(k) on blob keys chosen to cover every tail length and tail bytes
 * >= 0x80, where Cassandra's hash differs from the reference MurmurHash3). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cql_bytes bytes_of(const bdb_buf *b)
{
    return (cql_bytes){b->data, (int32_t)b->len};
}

static void test_scalar_encode_decode(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    int32_t i32;
    int64_t i64;
    double d;
    int bo;
    uint8_t u[16], u2[16];

    int32_t ints[] = {0, 1, -1, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        bdb_buf_reset(&b);
        cql_enc_int(&b, ints[i]);
        assert_int_equal(b.len, 4);
        assert_int_equal(cql_dec_int(bytes_of(&b), &i32), BDB_OK);
        assert_int_equal(i32, ints[i]);
    }
    bdb_buf_reset(&b);
    cql_enc_int(&b, 0x01020304);
    assert_memory_equal(b.data, "\x01\x02\x03\x04", 4); /* big-endian */

    int64_t longs[] = {0, -1, INT64_MAX, INT64_MIN, 1700000000123LL};
    for (size_t i = 0; i < sizeof longs / sizeof longs[0]; i++) {
        bdb_buf_reset(&b);
        cql_enc_bigint(&b, longs[i]);
        assert_int_equal(cql_dec_bigint(bytes_of(&b), &i64), BDB_OK);
        assert_true(i64 == longs[i]);
    }
    double dbl[] = {0.0, -0.0, 0.1, -273.15, 1e300, INFINITY};
    for (size_t i = 0; i < sizeof dbl / sizeof dbl[0]; i++) {
        bdb_buf_reset(&b);
        cql_enc_double(&b, dbl[i]);
        assert_int_equal(cql_dec_double(bytes_of(&b), &d), BDB_OK);
        assert_memory_equal(&d, &dbl[i], 8);
    }
    bdb_buf_reset(&b);
    cql_enc_double(&b, 1.0);
    assert_memory_equal(b.data, "\x3F\xF0\x00\x00\x00\x00\x00\x00", 8);

    bdb_buf_reset(&b);
    cql_enc_boolean(&b, 7);
    assert_int_equal(b.data[0], 1);
    assert_int_equal(cql_dec_boolean(bytes_of(&b), &bo), BDB_OK);
    assert_true(bo);
    bdb_buf_reset(&b);
    cql_enc_boolean(&b, 0);
    assert_int_equal(cql_dec_boolean(bytes_of(&b), &bo), BDB_OK);
    assert_false(bo);

    assert_int_equal(cql_uuid_parse("550e8400-e29b-41d4-a716-446655440000", u), BDB_OK);
    bdb_buf_reset(&b);
    cql_enc_uuid(&b, u);
    assert_int_equal(cql_dec_uuid(bytes_of(&b), u2), BDB_OK);
    assert_memory_equal(u, u2, 16);
    char s[37];
    cql_uuid_format(u2, s);
    assert_string_equal(s, "550e8400-e29b-41d4-a716-446655440000");
    assert_int_equal(cql_uuid_parse("550e8400e29b-41d4-a716-446655440000", u), BDB_ERR_INVALID);
    assert_int_equal(cql_uuid_parse("550e8400-e29b-41d4-a716-44665544000g", u), BDB_ERR_INVALID);
    assert_int_equal(cql_uuid_parse("550e8400-e29b-41d4-a716-4466554400001", u), BDB_ERR_INVALID);

    /* Wrong sizes and nulls. */
    cql_bytes three = {(const uint8_t *)"abc", 3}, null = {NULL, CQL_NULL};
    assert_int_equal(cql_dec_int(three, &i32), BDB_ERR_CORRUPT);
    assert_int_equal(cql_dec_bigint(three, &i64), BDB_ERR_CORRUPT);
    assert_int_equal(cql_dec_double(three, &d), BDB_ERR_CORRUPT);
    assert_int_equal(cql_dec_boolean(three, &bo), BDB_ERR_CORRUPT);
    assert_int_equal(cql_dec_uuid(three, u), BDB_ERR_CORRUPT);
    assert_int_equal(cql_dec_int(null, &i32), BDB_ERR_NOTFOUND);
    bdb_buf_free(&b);
}

static void test_collections(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    const char *items[] = {"a", "", "ccc"};
    cql_enc_text_list(&b, items, 3);
    cql_coll_iter it;
    assert_int_equal(cql_coll_begin(&it, bytes_of(&b), 0), 3);
    cql_bytes e;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(cql_coll_next(&it, &e), 1);
        assert_int_equal(e.len, (int32_t)strlen(items[i]));
        assert_memory_equal(e.p, items[i], strlen(items[i]));
    }
    assert_int_equal(cql_coll_next(&it, &e), 0);

    bdb_buf_reset(&b);
    const char *keys[] = {"site", "floor"}, *vals[] = {"berlin", "2"};
    cql_enc_text_map(&b, keys, vals, 2);
    assert_int_equal(cql_coll_begin(&it, bytes_of(&b), 1), 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(cql_coll_next(&it, &e), 1);
        assert_memory_equal(e.p, keys[i], strlen(keys[i]));
        assert_int_equal(cql_coll_next(&it, &e), 1);
        assert_memory_equal(e.p, vals[i], strlen(vals[i]));
    }
    assert_int_equal(cql_coll_next(&it, &e), 0);

    /* A count larger than the bytes can hold, a truncated element, trailing bytes. */
    const uint8_t big[] = {0x7F, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};
    assert_int_equal(cql_coll_begin(&it, (cql_bytes){big, sizeof big}, 0), BDB_ERR_CORRUPT);
    const uint8_t trunc[] = {0, 0, 0, 1, 0, 0, 0, 9, 'x'};
    assert_int_equal(cql_coll_begin(&it, (cql_bytes){trunc, sizeof trunc}, 0), 1);
    assert_int_equal(cql_coll_next(&it, &e), BDB_ERR_CORRUPT);
    const uint8_t trail[] = {0, 0, 0, 1, 0, 0, 0, 1, 'x', 'y', 'z', 'w', 'v'};
    assert_int_equal(cql_coll_begin(&it, (cql_bytes){trail, sizeof trail}, 0), 1);
    assert_int_equal(cql_coll_next(&it, &e), 1);
    assert_int_equal(cql_coll_next(&it, &e), BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
}

/* Type descriptors built by hand (normally they come from result metadata). */
static cql_type scalar(uint16_t id)
{
    return (cql_type){.id = id};
}

/* parse(text) then format() gives `want` (NULL: the same text). */
static void round_trip(const cql_type *t, const char *text, const char *want)
{
    bdb_buf b, out;
    bdb_buf_init(&b);
    bdb_buf_init(&out);
    char err[128] = "";
    int rc = cql_value_parse(&b, t, text, strlen(text), err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("parse '%s' failed: %s", text, err);
    assert_int_equal(cql_value_format(&out, t, bytes_of(&b)), BDB_OK);
    bdb_buf_putc(&out, 0);
    assert_string_equal((const char *)out.data, want ? want : text);
    bdb_buf_free(&b);
    bdb_buf_free(&out);
}

static void bad_parse(const cql_type *t, const char *text)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_putc(&b, 'Z'); /* left alone on failure */
    char err[128] = "";
    assert_int_equal(cql_value_parse(&b, t, text, strlen(text), err, sizeof err), BDB_ERR_INVALID);
    assert_true(err[0] != '\0');
    assert_int_equal(b.len, 1);
    bdb_buf_free(&b);
}

static void test_text_forms(void **state)
{
    (void)state;
    cql_type text = scalar(CQL_TYPE_VARCHAR), ascii = scalar(CQL_TYPE_ASCII),
             i32 = scalar(CQL_TYPE_INT), i64 = scalar(CQL_TYPE_BIGINT),
             counter = scalar(CQL_TYPE_COUNTER), ts = scalar(CQL_TYPE_TIMESTAMP),
             dbl = scalar(CQL_TYPE_DOUBLE), boolean = scalar(CQL_TYPE_BOOLEAN),
             blob = scalar(CQL_TYPE_BLOB), uuid = scalar(CQL_TYPE_UUID),
             tuuid = scalar(CQL_TYPE_TIMEUUID), inet = scalar(CQL_TYPE_INET);
    round_trip(&text, "héllo, 'world'", NULL);
    round_trip(&text, "", NULL);
    round_trip(&ascii, "plain", NULL);
    round_trip(&i32, "-2147483648", NULL);
    round_trip(&i32, " 42 ", "42");
    round_trip(&i64, "9223372036854775807", NULL);
    round_trip(&counter, "-5", NULL);
    round_trip(&ts, "2024-02-29T12:34:56.789Z", NULL);
    round_trip(&ts, "1700000000000", "2023-11-14T22:13:20.000Z");
    round_trip(&ts, "2024-01-02 03:04:05", "2024-01-02T03:04:05.000Z");
    round_trip(&dbl, "0.1", NULL);
    round_trip(&dbl, "-273.15", NULL);
    round_trip(&dbl, "NaN", NULL);
    round_trip(&dbl, "-Infinity", NULL);
    round_trip(&boolean, "true", NULL);
    round_trip(&boolean, "FALSE", "false");
    round_trip(&blob, "0xdeadBEEF", "0xdeadbeef");
    round_trip(&blob, "0x", NULL);
    round_trip(&uuid, "550e8400-e29b-41d4-a716-446655440000", NULL);
    round_trip(&tuuid, "5b6962dd-3f90-11ef-8000-000000000001", NULL);
    round_trip(&inet, "127.0.0.2", NULL);
    round_trip(&inet, "::1", NULL);

    bad_parse(&ascii, "é");
    bad_parse(&i32, "2147483648");
    bad_parse(&i32, "12x");
    bad_parse(&i32, "");
    bad_parse(&i64, "9223372036854775808");
    bad_parse(&ts, "yesterday");
    bad_parse(&ts, "2023-02-29T00:00:00Z");
    bad_parse(&dbl, "1.2.3");
    bad_parse(&boolean, "yes");
    bad_parse(&blob, "deadbeef");
    bad_parse(&blob, "0xabc");
    bad_parse(&blob, "0xzz");
    bad_parse(&uuid, "not-a-uuid");
    bad_parse(&tuuid, "550e8400-e29b-41d4-a716-446655440000"); /* version 4, not 1 */
    bad_parse(&inet, "300.1.1.1");
}

static void test_collection_text_forms(void **state)
{
    (void)state;
    cql_type text = scalar(CQL_TYPE_VARCHAR), i32 = scalar(CQL_TYPE_INT);
    cql_type *kv[2] = {&text, &text}, *one[1] = {&text}, *ione[1] = {&i32};
    cql_type map = {.id = CQL_TYPE_MAP, .n = 2, .sub = kv};
    cql_type list = {.id = CQL_TYPE_LIST, .n = 1, .sub = one};
    cql_type set = {.id = CQL_TYPE_SET, .n = 1, .sub = one};
    cql_type ilist = {.id = CQL_TYPE_LIST, .n = 1, .sub = ione};
    cql_type *nested_sub[1] = {&list};
    cql_type nested = {.id = CQL_TYPE_LIST, .n = 1, .sub = nested_sub};

    round_trip(&map, "{'site': 'berlin', 'it''s': 'a, b: c'}", NULL);
    round_trip(&map, "{}", NULL);
    round_trip(&map, " { 'a' : 'b' } ", "{'a': 'b'}");
    round_trip(&list, "['x', 'y', 'x']", NULL);
    round_trip(&list, "[]", NULL);
    round_trip(&set, "{'a', 'b'}", NULL);
    round_trip(&ilist, "[1, -2, 3]", NULL);
    round_trip(&nested, "[['a'], [], ['b', 'c']]", NULL);

    bad_parse(&map, "{'a'}");
    bad_parse(&map, "{'a': 'b'");
    bad_parse(&map, "['a']");
    bad_parse(&list, "['a' 'b']");
    bad_parse(&list, "['unterminated]");
    bad_parse(&list, "['a'] extra");
    bad_parse(&ilist, "[1, x]");

    /* Formatting refuses bytes that do not fit the type. */
    bdb_buf out;
    bdb_buf_init(&out);
    const uint8_t junk[] = {0, 0, 0, 2, 0, 0, 0, 1, 'a'};
    assert_int_equal(cql_value_format(&out, &list, (cql_bytes){junk, sizeof junk}),
                     BDB_ERR_CORRUPT);
    bdb_buf_reset(&out);
    assert_int_equal(cql_value_format(&out, &i32, (cql_bytes){junk, 3}), BDB_ERR_CORRUPT);
    bdb_buf_reset(&out);
    assert_int_equal(cql_value_format(&out, &i32, (cql_bytes){NULL, CQL_NULL}), BDB_OK);
    bdb_buf_putc(&out, 0);
    assert_string_equal((char *)out.data, "null");
    bdb_buf_free(&out);
}

/* ---------------------------------------------------------------- tokens */

static const struct {
    const char *hex;
    int64_t token;
} vectors[] = {
    /* From Cassandra 2.1.0: SELECT k, token(k) FROM t1.k (k blob PRIMARY KEY). */
    {"00", 5048724184180415669LL},
    {"0102030405060708090a0b0c0d0e0f", 597835946752277653LL},
    {"0102030405060708090a0b0c0d0e0f10", -5563837382979743776LL},
    {"0102030405060708090a0b0c0d0e0f10ff", -5612740317901377701LL},
    {"226ae15338ae1a34004d33ba0d246ac04c81b1baf23e3bf9eef5f79f2b4934af87f5520b69b94b0d982e85bb55"
     "b672a872637acd7466fcb60e0e8ff18463b0e4",
     1795946418182614364LL},
    {"2f8af2211f9ee491c5b10becb5563bfc1e6f93427ecbc8fe2955e5cd8e46dc", -8559579664023914505LL},
    {"4dca182530", 7390263720446528981LL},
    {"61", -8839064797231613815LL},
    {"6162", -7815133031266706642LL},
    {"616263", -5434086359492102041LL},
    {"69fedaa0eee8b9997f5c7c2999fdafe5", -6046204874731488795LL},
    {"71174494d6493c9d5c3460be31201e", -7952934165403564337LL},
    {"7b2ed91e3f721fcb19", 7692708834374091023LL},
    {"7f", 5072634478945617755LL},
    {"80", -5284281814142962636LL},
    {"8081828384858687", -6062263109623760877LL},
    {"88898a8b8c8d8e8f90", -5474663013855726227LL},
    {"8ed4b7c2764d2a5a4d767706f85d8690024ad6bda3401be9c8cbccc935f6cd1f61", 4942930353576199211LL},
    {"93253cd654af4dfad71427a0aeb3fee923", -7927851941898970823LL},
    {"a5", 9102176746827431674LL},
    {"bb1d6d132cded623", -2875683824787907187LL},
    {"deadbeef", 8688864458149848315LL},
    {"e8e7e6e5e4e3e2e1f0f1f2f3f4f5f6f7f8", 5977736817231900029LL},
    {"ff", -4442228696663692417LL},
    {"ffffffffffffffffff", 8434364767658694854LL},
};

static size_t unhex(const char *h, uint8_t *out)
{
    size_t n = 0;
    for (; h[0] && h[1]; h += 2) {
        unsigned v;
        sscanf(h, "%2x", &v);
        out[n++] = (uint8_t)v;
    }
    return n;
}

static void test_murmur3_tokens(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        uint8_t key[128];
        size_t n = unhex(vectors[i].hex, key);
        int64_t t = cql_murmur3_token(key, n);
        if (t != vectors[i].token)
            fail_msg("token(0x%s) = %lld, Cassandra says %lld", vectors[i].hex, (long long)t,
                     (long long)vectors[i].token);
    }
    assert_true(cql_murmur3_token("", 0) == INT64_MIN);
}

static void test_composite_key_token(void **state)
{
    (void)state;
    /* From Cassandra 2.1.0: PRIMARY KEY ((a text, b int)), SELECT token(a, b). */
    struct {
        const char *a;
        int32_t b;
        int64_t token;
    } v[] = {{"tenant-1", 7, -5444017931120446209LL}, {"dévice", -1, -4289822096139098891LL}};
    for (size_t i = 0; i < 2; i++) {
        bdb_buf bi, key;
        bdb_buf_init(&bi);
        bdb_buf_init(&key);
        cql_enc_int(&bi, v[i].b);
        cql_bytes parts[2] = {{(const uint8_t *)v[i].a, (int32_t)strlen(v[i].a)}, bytes_of(&bi)};
        cql_composite_key(&key, parts, 2);
        assert_int_equal(key.len, 2 + strlen(v[i].a) + 1 + 2 + 4 + 1);
        assert_int_equal(key.data[2 + strlen(v[i].a)], 0);
        assert_true(cql_murmur3_token(key.data, key.len) == v[i].token);
        bdb_buf_free(&bi);
        bdb_buf_free(&key);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar_encode_decode), cmocka_unit_test(test_collections),
        cmocka_unit_test(test_text_forms),           cmocka_unit_test(test_collection_text_forms),
        cmocka_unit_test(test_murmur3_tokens),       cmocka_unit_test(test_composite_key_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
