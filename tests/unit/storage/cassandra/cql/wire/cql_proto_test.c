/* cql_proto: every notation type round-trips through the encoders and the sticky
 * decoder; request messages have the spec's layout; RESULT, ERROR, SUPPORTED, EVENT
 * bodies decode (v3 and v4 differences included); malformed and truncated bodies are
 * rejected without reading out of bounds (ASan checks the "never" part). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/wire/cql_proto.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- primitives */

static void test_primitive_round_trip(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    uint8_t uuid[16];
    for (int i = 0; i < 16; i++)
        uuid[i] = (uint8_t)(0xA0 + i);
    const char *list[] = {"a", "", "ccc"};
    const char *mk[] = {"CQL_VERSION", "COMPRESSION"}, *mv[] = {"3.0.0", "lz4"};
    const char *mmk[] = {"K1", "K2"}, *mmv[] = {"x", "y", "z"};
    uint16_t mmc[] = {1, 2};
    uint8_t v4[4] = {127, 0, 0, 2}, v6[16] = {0x20, 0x01, 0x0d, 0xb8};
    cql_put_u8(&b, 0xFE);
    cql_put_short(&b, 0xBEEF);
    cql_put_int(&b, -123456789);
    cql_put_long(&b, INT64_MIN);
    cql_put_string(&b, "héllo", strlen("héllo"));
    cql_put_long_string(&b, "SELECT * FROM t", 15);
    cql_put_uuid(&b, uuid);
    cql_put_string_list(&b, list, 3);
    cql_put_bytes(&b, "\x00\x01\x02", 3);
    cql_put_bytes(&b, NULL, CQL_NULL);
    cql_put_bytes(&b, NULL, CQL_UNSET);
    cql_put_bytes(&b, "", 0);
    cql_put_short_bytes(&b, "\xAA\xBB", 2);
    cql_put_string_map(&b, mk, mv, 2);
    cql_put_string_multimap(&b, mmk, mmc, mmv, 2);
    cql_put_short(&b, CQL_LOCAL_QUORUM); /* [consistency] */
    cql_put_inet(&b, v4, 4, 9042);
    cql_put_inet(&b, v6, 16, 7000);

    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_get_u8(&d), 0xFE);
    assert_int_equal(cql_get_short(&d), 0xBEEF);
    assert_int_equal(cql_get_int(&d), -123456789);
    assert_true(cql_get_long(&d) == INT64_MIN);
    size_t n;
    const char *s = cql_get_string(&d, &n);
    assert_int_equal(n, strlen("héllo"));
    assert_memory_equal(s, "héllo", n);
    s = cql_get_long_string(&d, &n);
    assert_int_equal(n, 15);
    assert_memory_equal(s, "SELECT * FROM t", 15);
    assert_memory_equal(cql_get_uuid(&d), uuid, 16);
    uint16_t ln;
    char **l = cql_get_string_list(&d, &ln);
    assert_int_equal(ln, 3);
    assert_string_equal(l[0], "a");
    assert_string_equal(l[1], "");
    assert_string_equal(l[2], "ccc");
    cql_free_string_list(l, ln);
    cql_bytes v = cql_get_bytes(&d);
    assert_int_equal(v.len, 3);
    assert_memory_equal(v.p, "\x00\x01\x02", 3);
    assert_int_equal(cql_get_bytes(&d).len, CQL_NULL);
    assert_int_equal(cql_get_bytes(&d).len, CQL_UNSET);
    assert_int_equal(cql_get_bytes(&d).len, 0);
    uint16_t sbn;
    const uint8_t *sb = cql_get_short_bytes(&d, &sbn);
    assert_int_equal(sbn, 2);
    assert_memory_equal(sb, "\xAA\xBB", 2);
    assert_int_equal(cql_get_short(&d), 2); /* string map */
    char *k = cql_get_string_dup(&d), *val = cql_get_string_dup(&d);
    assert_string_equal(k, "CQL_VERSION");
    assert_string_equal(val, "3.0.0");
    free(k);
    free(val);
    k = cql_get_string_dup(&d);
    val = cql_get_string_dup(&d);
    assert_string_equal(k, "COMPRESSION");
    assert_string_equal(val, "lz4");
    free(k);
    free(val);
    assert_int_equal(cql_get_short(&d), 2); /* multimap */
    for (int i = 0; i < 2; i++) {
        k = cql_get_string_dup(&d);
        assert_string_equal(k, mmk[i]);
        free(k);
        l = cql_get_string_list(&d, &ln);
        assert_int_equal(ln, mmc[i]);
        assert_string_equal(l[0], i == 0 ? "x" : "y");
        cql_free_string_list(l, ln);
    }
    assert_int_equal(cql_get_short(&d), CQL_LOCAL_QUORUM);
    uint8_t addr[16];
    int32_t port;
    assert_int_equal(cql_get_inet(&d, addr, &port), 4);
    assert_memory_equal(addr, v4, 4);
    assert_int_equal(port, 9042);
    assert_int_equal(cql_get_inet(&d, addr, &port), 16);
    assert_memory_equal(addr, v6, 16);
    assert_int_equal(port, 7000);
    assert_int_equal(d.err, 0);
    assert_int_equal(bdb_dec_left(&d), 0);
    /* Sticky: one read past the end sets err and every later read returns zero. */
    assert_int_equal(cql_get_int(&d), 0);
    assert_int_equal(d.err, 1);
    assert_int_equal(cql_get_short(&d), 0);
    assert_null(cql_get_uuid(&d));
    bdb_buf_free(&b);
}

static void test_decoder_rejects_bad_lengths(void **state)
{
    (void)state;
    /* [bytes] of -3 is invalid; a [string] longer than what is left; a negative
     * [long string]; an [inet] of size 5. */
    const uint8_t neg3[] = {0xFF, 0xFF, 0xFF, 0xFD};
    bdb_dec d;
    bdb_dec_init(&d, neg3, sizeof neg3);
    cql_get_bytes(&d);
    assert_int_equal(d.err, 1);
    const uint8_t longstr[] = {0x00, 0x05, 'a', 'b'};
    bdb_dec_init(&d, longstr, sizeof longstr);
    size_t n;
    cql_get_string(&d, &n);
    assert_int_equal(d.err, 1);
    assert_int_equal(n, 0);
    const uint8_t neglong[] = {0x80, 0x00, 0x00, 0x00};
    bdb_dec_init(&d, neglong, sizeof neglong);
    cql_get_long_string(&d, &n);
    assert_int_equal(d.err, 1);
    const uint8_t inet5[] = {5, 1, 2, 3, 4, 5, 0, 0, 0, 1};
    bdb_dec_init(&d, inet5, sizeof inet5);
    uint8_t a[16];
    int32_t port;
    assert_int_equal(cql_get_inet(&d, a, &port), 0);
    assert_int_equal(d.err, 1);
    /* A list count far beyond the bytes left fails before allocating. */
    const uint8_t biglist[] = {0xFF, 0xFF, 0x00, 0x01, 'x'};
    bdb_dec_init(&d, biglist, sizeof biglist);
    uint16_t ln;
    assert_null(cql_get_string_list(&d, &ln));
    assert_int_equal(d.err, 1);
}

/* ---------------------------------------------------------------- header */

static void test_header(void **state)
{
    (void)state;
    uint8_t p[CQL_HEADER_LEN];
    cql_header h = {.version = 4,
                    .response = 1,
                    .flags = CQL_FLAG_WARNING,
                    .stream = -1,
                    .opcode = CQL_OP_EVENT,
                    .length = 1234};
    cql_header_encode(p, &h);
    assert_int_equal(p[0], 0x84);
    assert_int_equal(p[2], 0xFF);
    assert_int_equal(p[3], 0xFF);
    cql_header g;
    assert_int_equal(cql_header_decode(p, &g, 1 << 20), BDB_OK);
    assert_int_equal(g.version, 4);
    assert_int_equal(g.response, 1);
    assert_int_equal(g.flags, CQL_FLAG_WARNING);
    assert_int_equal(g.stream, -1);
    assert_int_equal(g.opcode, CQL_OP_EVENT);
    assert_int_equal(g.length, 1234);
    /* Too long for the limit, and versions this codec does not speak. */
    assert_int_equal(cql_header_decode(p, &g, 1000), BDB_ERR_LIMIT);
    p[5] = 0x7F; /* 2 GB */
    assert_int_equal(cql_header_decode(p, &g, UINT32_MAX), BDB_ERR_LIMIT);
    p[5] = 0;
    p[0] = 0x82;
    assert_int_equal(cql_header_decode(p, &g, 1 << 20), BDB_ERR_CORRUPT);
    p[0] = 0x05;
    assert_int_equal(cql_header_decode(p, &g, 1 << 20), BDB_ERR_CORRUPT);
}

/* ---------------------------------------------------------------- requests */

static void test_startup_and_options_layout(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    cql_msg_startup(&b, 3, NULL);
    const uint8_t want[] = {0x03, 0,   0,   0,   CQL_OP_STARTUP,
                            0,    0,   0,   22,  0,
                            1,    0,   11,  'C', 'Q',
                            'L',  '_', 'V', 'E', 'R',
                            'S',  'I', 'O', 'N', 0,
                            5,    '3', '.', '0', '.',
                            '0'};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    bdb_buf_reset(&b);
    cql_msg_options(&b, 4);
    const uint8_t opt[] = {0x04, 0, 0, 0, CQL_OP_OPTIONS, 0, 0, 0, 0};
    assert_int_equal(b.len, sizeof opt);
    assert_memory_equal(b.data, opt, sizeof opt);
    cql_frame_set_stream(b.data, 0x1234);
    assert_int_equal(b.data[2], 0x12);
    assert_int_equal(b.data[3], 0x34);
    bdb_buf_free(&b);
}

static void test_query_layout(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    cql_bytes vals[2] = {{(const uint8_t *)"\x00\x00\x00\x2A", 4}, {NULL, CQL_NULL}};
    cql_query_params p = {.consistency = CQL_QUORUM,
                          .values = vals,
                          .nvalues = 2,
                          .page_size = 100,
                          .paging_state = {(const uint8_t *)"PS", 2},
                          .serial_consistency = CQL_LOCAL_SERIAL,
                          .timestamp_us = 1700000000000000LL};
    cql_msg_query(&b, 3, "Q", 1, &p);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    cql_header h;
    assert_int_equal(cql_header_decode(bdb_dec_bytes(&d, CQL_HEADER_LEN), &h, 1 << 20), BDB_OK);
    assert_int_equal(h.opcode, CQL_OP_QUERY);
    assert_int_equal(h.response, 0);
    assert_int_equal(h.length, b.len - CQL_HEADER_LEN);
    size_t n;
    assert_memory_equal(cql_get_long_string(&d, &n), "Q", 1);
    assert_int_equal(cql_get_short(&d), CQL_QUORUM);
    assert_int_equal(cql_get_u8(&d), CQL_QF_VALUES | CQL_QF_PAGE_SIZE | CQL_QF_PAGING_STATE |
                                         CQL_QF_SERIAL_CONSISTENCY | CQL_QF_DEFAULT_TIMESTAMP);
    assert_int_equal(cql_get_short(&d), 2);
    cql_bytes v = cql_get_bytes(&d);
    assert_int_equal(v.len, 4);
    assert_int_equal(cql_get_bytes(&d).len, CQL_NULL);
    assert_int_equal(cql_get_int(&d), 100);
    v = cql_get_bytes(&d);
    assert_memory_equal(v.p, "PS", 2);
    assert_int_equal(cql_get_short(&d), CQL_LOCAL_SERIAL);
    assert_true(cql_get_long(&d) == 1700000000000000LL);
    assert_int_equal(bdb_dec_left(&d), 0);
    assert_int_equal(d.err, 0);

    /* No options at all: consistency and a zero flags byte. */
    bdb_buf_reset(&b);
    cql_query_params none = {.consistency = CQL_ONE};
    cql_msg_execute(&b, 4, (const uint8_t *)"0123456789abcdef", 16, &none);
    assert_int_equal(b.len, CQL_HEADER_LEN + 2 + 16 + 2 + 1);
    assert_int_equal(b.data[0], 4);
    assert_int_equal(b.data[4], CQL_OP_EXECUTE);
    assert_int_equal(b.data[b.len - 1], 0);
    bdb_buf_free(&b);
}

static void test_batch_layout(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    cql_bytes v1[1] = {{(const uint8_t *)"abc", 3}};
    cql_batch_stmt st[2] = {
        {.id = (const uint8_t *)"IDIDIDIDIDIDIDID", .id_len = 16, .values = v1, .nvalues = 1},
        {.query = "INSERT x", .query_len = 8},
    };
    cql_msg_batch(&b, 3, CQL_BATCH_UNLOGGED, st, 2, CQL_LOCAL_QUORUM, 0, 0);
    bdb_dec d;
    bdb_dec_init(&d, b.data + CQL_HEADER_LEN, b.len - CQL_HEADER_LEN);
    assert_int_equal(b.data[4], CQL_OP_BATCH);
    assert_int_equal(cql_get_u8(&d), CQL_BATCH_UNLOGGED);
    assert_int_equal(cql_get_short(&d), 2);
    assert_int_equal(cql_get_u8(&d), 1);
    uint16_t idn;
    assert_memory_equal(cql_get_short_bytes(&d, &idn), "IDIDIDIDIDIDIDID", 16);
    assert_int_equal(cql_get_short(&d), 1);
    assert_memory_equal(cql_get_bytes(&d).p, "abc", 3);
    assert_int_equal(cql_get_u8(&d), 0);
    size_t n;
    assert_memory_equal(cql_get_long_string(&d, &n), "INSERT x", 8);
    assert_int_equal(cql_get_short(&d), 0);
    assert_int_equal(cql_get_short(&d), CQL_LOCAL_QUORUM);
    assert_int_equal(cql_get_u8(&d), 0); /* flags */
    assert_int_equal(bdb_dec_left(&d), 0);
    assert_int_equal(d.err, 0);

    bdb_buf_reset(&b);
    bdb_buf tok;
    bdb_buf_init(&tok);
    cql_sasl_plain(&tok, "cassandra", "secret");
    assert_int_equal(tok.len, 1 + 9 + 1 + 6);
    assert_memory_equal(tok.data, "\0cassandra\0secret", tok.len);
    cql_msg_auth_response(&b, 3, tok.data, (int32_t)tok.len);
    assert_int_equal(b.data[4], CQL_OP_AUTH_RESPONSE);
    assert_int_equal(cql_get_be32(b.data + 5), 4 + tok.len);
    bdb_buf_free(&tok);
    bdb_buf_free(&b);
}

/* ---------------------------------------------------------------- responses */

/* A Rows body: global table spec, 3 columns (int, map<text,text>, list<set<text>>),
 * a paging state and 2 rows (one cell null). */
static void build_rows(bdb_buf *b, int with_paging)
{
    cql_put_int(b, CQL_RESULT_ROWS);
    cql_put_int(b, CQL_META_GLOBAL_TABLES_SPEC | (with_paging ? CQL_META_HAS_MORE_PAGES : 0));
    cql_put_int(b, 3);
    if (with_paging)
        cql_put_bytes(b, "STATE", 5);
    cql_put_string(b, "ks", 2);
    cql_put_string(b, "tbl", 3);
    cql_put_string(b, "id", 2);
    cql_put_short(b, CQL_TYPE_INT);
    cql_put_string(b, "tags", 4);
    cql_put_short(b, CQL_TYPE_MAP);
    cql_put_short(b, CQL_TYPE_VARCHAR);
    cql_put_short(b, CQL_TYPE_VARCHAR);
    cql_put_string(b, "nested", 6);
    cql_put_short(b, CQL_TYPE_LIST);
    cql_put_short(b, CQL_TYPE_SET);
    cql_put_short(b, CQL_TYPE_ASCII);
    cql_put_int(b, 2);
    cql_put_bytes(b, "\x00\x00\x00\x01", 4);
    cql_put_bytes(b, "\x00\x00\x00\x00", 4);
    cql_put_bytes(b, NULL, CQL_NULL);
    cql_put_bytes(b, "\x00\x00\x00\x02", 4);
    cql_put_bytes(b, NULL, CQL_NULL);
    cql_put_bytes(b, "", 0);
}

static void test_rows_result(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    build_rows(&b, 1);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    cql_result r;
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_OK);
    assert_int_equal(r.kind, CQL_RESULT_ROWS);
    assert_int_equal(r.meta.ncols, 3);
    assert_true(r.meta.flags & CQL_META_HAS_MORE_PAGES);
    assert_int_equal(r.meta.paging_state.len, 5);
    assert_memory_equal(r.meta.paging_state.p, "STATE", 5);
    assert_string_equal(r.meta.cols[0].ks, "ks");
    assert_string_equal(r.meta.cols[2].table, "tbl");
    assert_string_equal(r.meta.cols[1].name, "tags");
    assert_int_equal(r.meta.cols[1].type->id, CQL_TYPE_MAP);
    assert_int_equal(r.meta.cols[1].type->n, 2);
    assert_int_equal(r.meta.cols[1].type->sub[1]->id, CQL_TYPE_VARCHAR);
    assert_int_equal(r.meta.cols[2].type->sub[0]->sub[0]->id, CQL_TYPE_ASCII);
    bdb_buf name;
    bdb_buf_init(&name);
    cql_type_name(&name, r.meta.cols[2].type);
    bdb_buf_putc(&name, 0);
    assert_string_equal((char *)name.data, "list<set<ascii>>");
    bdb_buf_free(&name);
    assert_int_equal(r.nrows, 2);
    assert_int_equal(r.cells[0].len, 4);
    assert_int_equal(r.cells[2].len, CQL_NULL);
    assert_int_equal(r.cells[5].len, 0);
    cql_result_clear(&r);
    bdb_buf_free(&b);
}

/* Every truncation of a valid body fails cleanly; so does a trailing count lie. */
static void test_rows_truncated_everywhere(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    build_rows(&b, 1);
    for (size_t cut = 0; cut < b.len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size so ASan sees any overread */
        memcpy(copy, b.data, cut);
        bdb_dec d;
        bdb_dec_init(&d, copy, cut);
        cql_result r;
        assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
        assert_null(r.cells);
        assert_null(r.meta.cols);
        free(copy);
    }
    bdb_buf_free(&b);
}

static void test_rows_hostile_counts(void **state)
{
    (void)state;
    /* Huge column count: rejected before allocation. */
    bdb_buf b;
    bdb_buf_init(&b);
    cql_put_int(&b, CQL_RESULT_ROWS);
    cql_put_int(&b, 0);
    cql_put_int(&b, 0x7FFFFFFF);
    cql_put_string(&b, "k", 1);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    cql_result r;
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    /* Huge row count with no metadata (columns known to the client). */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_ROWS);
    cql_put_int(&b, CQL_META_NO_METADATA);
    cql_put_int(&b, 1000);
    cql_put_int(&b, 0x7FFFFFFF);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    /* Negative counts. */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_ROWS);
    cql_put_int(&b, CQL_META_NO_METADATA);
    cql_put_int(&b, -1);
    cql_put_int(&b, 0);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    /* Type nesting deeper than the limit: list<list<...>>. */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_ROWS);
    cql_put_int(&b, CQL_META_GLOBAL_TABLES_SPEC);
    cql_put_int(&b, 1);
    cql_put_string(&b, "k", 1);
    cql_put_string(&b, "t", 1);
    cql_put_string(&b, "c", 1);
    for (int i = 0; i < CQL_TYPE_MAX_DEPTH + 5; i++)
        cql_put_short(&b, CQL_TYPE_LIST);
    cql_put_short(&b, CQL_TYPE_INT);
    cql_put_int(&b, 0);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    /* Unknown type id and unknown result kind. */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_ROWS);
    cql_put_int(&b, CQL_META_GLOBAL_TABLES_SPEC);
    cql_put_int(&b, 1);
    cql_put_string(&b, "k", 1);
    cql_put_string(&b, "t", 1);
    cql_put_string(&b, "c", 1);
    cql_put_short(&b, 0x00FF);
    cql_put_int(&b, 0);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    bdb_buf_reset(&b);
    cql_put_int(&b, 9);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
}

static void build_prepared(bdb_buf *b, int version)
{
    cql_put_int(b, CQL_RESULT_PREPARED);
    cql_put_short_bytes(b, "0123456789ABCDEF", 16);
    /* bind metadata: 2 markers, v4 adds partition key indexes */
    cql_put_int(b, CQL_META_GLOBAL_TABLES_SPEC);
    cql_put_int(b, 2);
    if (version >= 4) {
        cql_put_int(b, 1);
        cql_put_short(b, 1);
    }
    cql_put_string(b, "ks", 2);
    cql_put_string(b, "t", 1);
    cql_put_string(b, "v", 1);
    cql_put_short(b, CQL_TYPE_DOUBLE);
    cql_put_string(b, "k", 1);
    cql_put_short(b, CQL_TYPE_UUID);
    /* result metadata: none (an INSERT) */
    cql_put_int(b, CQL_META_NO_METADATA);
    cql_put_int(b, 0);
}

static void test_prepared_v3_v4(void **state)
{
    (void)state;
    for (int v = 3; v <= 4; v++) {
        bdb_buf b;
        bdb_buf_init(&b);
        build_prepared(&b, v);
        bdb_dec d;
        bdb_dec_init(&d, b.data, b.len);
        cql_result r;
        assert_int_equal(cql_result_decode(&d, (uint8_t)v, &r), BDB_OK);
        assert_int_equal(r.kind, CQL_RESULT_PREPARED);
        assert_int_equal(r.prepared_id.len, 16);
        assert_memory_equal(r.prepared_id.p, "0123456789ABCDEF", 16);
        assert_int_equal(r.meta.ncols, 2);
        assert_string_equal(r.meta.cols[1].name, "k");
        assert_int_equal(r.meta.cols[0].type->id, CQL_TYPE_DOUBLE);
        assert_int_equal(r.meta.npk, v >= 4 ? 1 : 0);
        if (v >= 4)
            assert_int_equal(r.meta.pk[0], 1);
        assert_int_equal(r.result_meta.ncols, 0);
        assert_true(r.result_meta.flags & CQL_META_NO_METADATA);
        cql_result_clear(&r);
        /* Decoded with the other version's layout it must not pass as valid data
         * silently: v3 bytes read as v4 take the first column spec as pk count. */
        bdb_dec_init(&d, b.data, b.len);
        int rc = cql_result_decode(&d, (uint8_t)(v == 3 ? 4 : 3), &r);
        if (rc == BDB_OK)
            cql_result_clear(&r);
        bdb_buf_free(&b);
    }
}

static void test_other_results(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    cql_result r;
    bdb_dec d;
    cql_put_int(&b, CQL_RESULT_VOID);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_OK);
    assert_int_equal(r.kind, CQL_RESULT_VOID);
    cql_result_clear(&r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_SET_KEYSPACE);
    cql_put_string(&b, "telemetry", 9);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_OK);
    assert_string_equal(r.keyspace, "telemetry");
    cql_result_clear(&r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_SCHEMA_CHANGE);
    cql_put_string(&b, "CREATED", 7);
    cql_put_string(&b, "TABLE", 5);
    cql_put_string(&b, "ks", 2);
    cql_put_string(&b, "samples", 7);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_OK);
    assert_string_equal(r.change_type, "CREATED");
    assert_string_equal(r.target, "TABLE");
    assert_string_equal(r.keyspace, "ks");
    assert_string_equal(r.name, "samples");
    cql_result_clear(&r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_SCHEMA_CHANGE);
    cql_put_string(&b, "DROPPED", 7);
    cql_put_string(&b, "KEYSPACE", 8);
    cql_put_string(&b, "ks", 2);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 3, &r), BDB_OK);
    assert_string_equal(r.target, "KEYSPACE");
    assert_null(r.name);
    cql_result_clear(&r);

    bdb_buf_reset(&b);
    const char *args[] = {"int", "text"};
    cql_put_int(&b, CQL_RESULT_SCHEMA_CHANGE);
    cql_put_string(&b, "CREATED", 7);
    cql_put_string(&b, "FUNCTION", 8);
    cql_put_string(&b, "ks", 2);
    cql_put_string(&b, "f", 1);
    cql_put_string_list(&b, args, 2);
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(cql_result_decode(&d, 4, &r), BDB_OK);
    assert_int_equal(r.narg_types, 2);
    assert_string_equal(r.arg_types[1], "text");
    cql_result_clear(&r);
    bdb_buf_free(&b);
}

static cql_response *decode_frame(uint8_t version, uint8_t flags, uint8_t opcode, bdb_buf *body,
                                  int *rc)
{
    cql_header h = {.version = version,
                    .response = 1,
                    .flags = flags,
                    .opcode = opcode,
                    .length = (uint32_t)body->len};
    uint8_t *copy = body->len ? malloc(body->len) : NULL;
    if (body->len)
        memcpy(copy, body->data, body->len);
    cql_response *r = NULL;
    *rc = cql_response_decode(&h, copy, body->len, &r);
    return r;
}

static void test_errors(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    int rc;

    cql_put_int(&b, CQL_ERR_UNAVAILABLE);
    cql_put_string(&b, "Cannot achieve consistency", 26);
    cql_put_short(&b, CQL_QUORUM);
    cql_put_int(&b, 2);
    cql_put_int(&b, 1);
    cql_response *r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->error.code, CQL_ERR_UNAVAILABLE);
    assert_string_equal(r->error.message, "Cannot achieve consistency");
    assert_int_equal(r->error.consistency, CQL_QUORUM);
    assert_int_equal(r->error.required, 2);
    assert_int_equal(r->error.alive, 1);
    assert_int_equal(cql_error_status(r->error.code), BDB_ERR_AGAIN);
    assert_true(cql_error_retryable(r->error.code));
    cql_response_free(r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_WRITE_TIMEOUT);
    cql_put_string(&b, "wt", 2);
    cql_put_short(&b, CQL_LOCAL_QUORUM);
    cql_put_int(&b, 1);
    cql_put_int(&b, 2);
    cql_put_string(&b, "UNLOGGED_BATCH", 14);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->error.received, 1);
    assert_int_equal(r->error.blockfor, 2);
    assert_string_equal(r->error.write_type, "UNLOGGED_BATCH");
    cql_response_free(r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_READ_TIMEOUT);
    cql_put_string(&b, "rt", 2);
    cql_put_short(&b, CQL_ONE);
    cql_put_int(&b, 0);
    cql_put_int(&b, 1);
    cql_put_u8(&b, 0);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->error.code, CQL_ERR_READ_TIMEOUT);
    assert_int_equal(r->error.data_present, 0);
    cql_response_free(r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_READ_FAILURE);
    cql_put_string(&b, "rf", 2);
    cql_put_short(&b, CQL_ONE);
    cql_put_int(&b, 0);
    cql_put_int(&b, 1);
    cql_put_int(&b, 3);
    cql_put_u8(&b, 1);
    r = decode_frame(4, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->error.numfailures, 3);
    assert_int_equal(r->error.data_present, 1);
    cql_response_free(r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_ALREADY_EXISTS);
    cql_put_string(&b, "exists", 6);
    cql_put_string(&b, "ks", 2);
    cql_put_string(&b, "", 0);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_string_equal(r->error.ks, "ks");
    assert_string_equal(r->error.table, "");
    assert_int_equal(cql_error_status(r->error.code), BDB_ERR_EXISTS);
    cql_response_free(r);

    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_UNPREPARED);
    cql_put_string(&b, "unknown id", 10);
    cql_put_short_bytes(&b, "IDIDIDIDIDIDIDID", 16);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->error.unprepared_id.len, 16);
    assert_memory_equal(r->error.unprepared_id.p, "IDIDIDIDIDIDIDID", 16);
    assert_int_equal(cql_error_status(r->error.code), BDB_ERR_NOTFOUND);
    cql_response_free(r);

    /* Syntax error: no extra body; not retryable. */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_SYNTAX);
    cql_put_string(&b, "line 1:0 no viable alternative", 30);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(cql_error_status(r->error.code), BDB_ERR_INVALID);
    assert_false(cql_error_retryable(r->error.code));
    cql_response_free(r);

    /* An UNAVAILABLE cut short is corrupt, not a half-filled error. */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_ERR_UNAVAILABLE);
    cql_put_string(&b, "x", 1);
    cql_put_short(&b, CQL_ONE);
    r = decode_frame(3, 0, CQL_OP_ERROR, &b, &rc);
    assert_int_equal(rc, BDB_ERR_CORRUPT);
    assert_null(r);
    bdb_buf_free(&b);
}

static void test_flags_and_other_opcodes(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    int rc;
    /* v4 response with tracing id and warnings before the body. */
    uint8_t trace[16] = {1, 2, 3};
    const char *warn[] = {"Batch too large"};
    cql_put_uuid(&b, trace);
    cql_put_string_list(&b, warn, 1);
    cql_put_int(&b, CQL_RESULT_VOID);
    cql_response *r = decode_frame(4, CQL_FLAG_TRACING | CQL_FLAG_WARNING, CQL_OP_RESULT, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_true(r->has_tracing);
    assert_memory_equal(r->tracing_id, trace, 16);
    assert_int_equal(r->nwarnings, 1);
    assert_string_equal(r->warnings[0], "Batch too large");
    assert_int_equal(r->result.kind, CQL_RESULT_VOID);
    cql_response_free(r);

    /* Compressed bodies are refused (this client never negotiates compression). */
    bdb_buf_reset(&b);
    cql_put_int(&b, CQL_RESULT_VOID);
    r = decode_frame(3, CQL_FLAG_COMPRESSION, CQL_OP_RESULT, &b, &rc);
    assert_int_equal(rc, BDB_ERR_INVALID);
    /* A request opcode is not a response. */
    r = decode_frame(3, 0, CQL_OP_QUERY, &b, &rc);
    assert_int_equal(rc, BDB_ERR_CORRUPT);

    /* SUPPORTED multimap. */
    bdb_buf_reset(&b);
    const char *keys[] = {"COMPRESSION", "CQL_VERSION"}, *vals[] = {"snappy", "lz4", "3.2.0"};
    uint16_t counts[] = {2, 1};
    cql_put_string_multimap(&b, keys, counts, vals, 2);
    r = decode_frame(3, 0, CQL_OP_SUPPORTED, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->nsup, 2);
    assert_string_equal(r->sup_keys[1], "CQL_VERSION");
    assert_int_equal(r->sup_nvals[0], 2);
    assert_string_equal(r->sup_vals[0][1], "lz4");
    cql_response_free(r);

    /* AUTHENTICATE, AUTH_SUCCESS (null token), READY. */
    bdb_buf_reset(&b);
    cql_put_string(&b, "org.apache.cassandra.auth.PasswordAuthenticator", 47);
    r = decode_frame(3, 0, CQL_OP_AUTHENTICATE, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_string_equal(r->authenticator, "org.apache.cassandra.auth.PasswordAuthenticator");
    cql_response_free(r);
    bdb_buf_reset(&b);
    cql_put_bytes(&b, NULL, CQL_NULL);
    r = decode_frame(3, 0, CQL_OP_AUTH_SUCCESS, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_int_equal(r->token.len, CQL_NULL);
    cql_response_free(r);
    bdb_buf_reset(&b);
    r = decode_frame(3, 0, CQL_OP_READY, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    cql_response_free(r);

    /* EVENTs. */
    bdb_buf_reset(&b);
    uint8_t a[4] = {127, 0, 0, 3};
    cql_put_string(&b, "STATUS_CHANGE", 13);
    cql_put_string(&b, "DOWN", 4);
    cql_put_inet(&b, a, 4, 9042);
    r = decode_frame(3, 0, CQL_OP_EVENT, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_string_equal(r->event.type, "STATUS_CHANGE");
    assert_string_equal(r->event.change, "DOWN");
    assert_int_equal(r->event.addr_len, 4);
    assert_int_equal(r->event.addr[3], 3);
    cql_response_free(r);
    bdb_buf_reset(&b);
    cql_put_string(&b, "SCHEMA_CHANGE", 13);
    cql_put_string(&b, "UPDATED", 7);
    cql_put_string(&b, "TABLE", 5);
    cql_put_string(&b, "ks", 2);
    cql_put_string(&b, "t", 1);
    r = decode_frame(3, 0, CQL_OP_EVENT, &b, &rc);
    assert_int_equal(rc, BDB_OK);
    assert_string_equal(r->event.schema.change_type, "UPDATED");
    assert_string_equal(r->event.schema.name, "t");
    cql_response_free(r);
    bdb_buf_free(&b);
}

static void test_names(void **state)
{
    (void)state;
    assert_int_equal(cql_consistency_parse("local_quorum"), CQL_LOCAL_QUORUM);
    assert_int_equal(cql_consistency_parse("ONE"), CQL_ONE);
    assert_int_equal(cql_consistency_parse("most"), -1);
    assert_string_equal(cql_consistency_name(CQL_EACH_QUORUM), "EACH_QUORUM");
    assert_string_equal(cql_opcode_name(CQL_OP_AUTH_SUCCESS), "AUTH_SUCCESS");
    assert_string_equal(cql_error_name(CQL_ERR_OVERLOADED), "overloaded");
    assert_true(cql_error_retryable(CQL_ERR_OVERLOADED));
    assert_true(cql_error_retryable(CQL_ERR_CLIENT_TIMEOUT));
    assert_false(cql_error_retryable(CQL_ERR_INVALID));
    assert_int_equal(cql_error_status(CQL_ERR_CLIENT_CLOSED), BDB_ERR_SHUTDOWN);
    assert_int_equal(cql_error_status(CQL_ERR_SERVER), BDB_ERR_IO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primitive_round_trip),
        cmocka_unit_test(test_decoder_rejects_bad_lengths),
        cmocka_unit_test(test_header),
        cmocka_unit_test(test_startup_and_options_layout),
        cmocka_unit_test(test_query_layout),
        cmocka_unit_test(test_batch_layout),
        cmocka_unit_test(test_rows_result),
        cmocka_unit_test(test_rows_truncated_everywhere),
        cmocka_unit_test(test_rows_hostile_counts),
        cmocka_unit_test(test_prepared_v3_v4),
        cmocka_unit_test(test_other_results),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_flags_and_other_opcodes),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
