/* Tests for the MQTT codec: remaining length, the 3.1.1 and MQTT 5 packets a QoS 1
 * subscriber sends and receives (properties, reason codes), topic filters and shared
 * subscriptions, and robustness against malformed input. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest/mqtt/mqtt_codec.h"

#include <stdlib.h>
#include <string.h>

static void remlen_round_trip(void **state)
{
    (void)state;
    const size_t cases[] = {0, 1, 127, 128, 16383, 16384, 2097151, 2097152, BDB_MQTT_MAX_REMLEN};
    const size_t bytes[] = {1, 1, 1, 2, 2, 3, 3, 4, 4};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t buf[5] = {0x30};
        size_t n = bdb_mqtt_encode_remlen(buf + 1, cases[i]);
        assert_int_equal(n, bytes[i]);
        bdb_mqtt_hdr h;
        assert_int_equal(bdb_mqtt_decode_header(buf, 1 + n, 0, &h), BDB_MQTT_COMPLETE);
        assert_int_equal(h.rem_len, cases[i]);
        assert_int_equal(h.hdr_len, 1 + n);
        assert_int_equal(h.type, BDB_MQTT_PUBLISH);
        /* every shorter prefix needs more bytes */
        for (size_t k = 0; k < 1 + n; k++)
            assert_int_equal(bdb_mqtt_decode_header(buf, k, 0, &h), BDB_MQTT_NEED_MORE);
    }
    uint8_t out[4];
    assert_int_equal(bdb_mqtt_encode_remlen(out, BDB_MQTT_MAX_REMLEN + 1), 0);
}

static void header_malformed_and_too_large(void **state)
{
    (void)state;
    bdb_mqtt_hdr h;
    const uint8_t five[] = {0x30, 0xff, 0xff, 0xff, 0xff, 0x01};
    assert_int_equal(bdb_mqtt_decode_header(five, sizeof five, 0, &h), BDB_MQTT_MALFORMED);
    const uint8_t nonmin[] = {0x30, 0x80, 0x00};
    assert_int_equal(bdb_mqtt_decode_header(nonmin, sizeof nonmin, 0, &h), BDB_MQTT_MALFORMED);
    const uint8_t big[] = {0x30, 0x80, 0x01}; /* 128 + 3 header bytes > 100 */
    assert_int_equal(bdb_mqtt_decode_header(big, sizeof big, 100, &h), BDB_MQTT_TOO_LARGE);
    assert_int_equal(h.rem_len, 128);
    assert_int_equal(bdb_mqtt_decode_header(big, sizeof big, 131, &h), BDB_MQTT_COMPLETE);
}

static void connect_encoding(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_mqtt_encode_connect(&b, "bdb", "u", "pw", 30, 0), 0);
    const uint8_t want[] = {0x10, 22, 0,   4,   'M', 'Q', 'T', 'T', 4, 0xc0, 0,   30,
                            0,    3,  'b', 'd', 'b', 0,   1,   'u', 0, 2,    'p', 'w'};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_connect(&b, "x", NULL, NULL, 10, 1), 0);
    assert_int_equal(b.data[9], 0x02); /* clean session, no user, no password */
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_connect(&b, "x", NULL, "pw", 10, 0), -1);
    assert_int_equal(b.len, 0);
    bdb_buf_free(&b);
}

static void subscribe_puback_ping(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    const char *f[] = {"a/+", "b/#"};
    assert_int_equal(bdb_mqtt_encode_subscribe(&b, 7, f, 2, 1), 0);
    const uint8_t want[] = {0x82, 14, 0, 7, 0, 3, 'a', '/', '+', 1, 0, 3, 'b', '/', '#', 1};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_subscribe(&b, 0, f, 2, 1), -1); /* packet id 0 */
    bdb_mqtt_encode_puback(&b, 0x1234);
    bdb_mqtt_encode_pingreq(&b);
    bdb_mqtt_encode_disconnect(&b);
    const uint8_t w2[] = {0x40, 2, 0x12, 0x34, 0xc0, 0, 0xe0, 0};
    assert_int_equal(b.len, sizeof w2);
    assert_memory_equal(b.data, w2, sizeof w2);
    bdb_buf_free(&b);
}

static void publish_round_trip(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_mqtt_encode_publish(&b, "t/1", "hello", 5, 1, 1, 42), 0);
    bdb_mqtt_hdr h;
    assert_int_equal(bdb_mqtt_decode_header(b.data, b.len, 0, &h), BDB_MQTT_COMPLETE);
    assert_int_equal(h.type, BDB_MQTT_PUBLISH);
    bdb_mqtt_publish p;
    assert_int_equal(bdb_mqtt_parse_publish(h.flags, b.data + h.hdr_len, h.rem_len, &p), 0);
    assert_int_equal(p.qos, 1);
    assert_int_equal(p.dup, 1);
    assert_int_equal(p.packet_id, 42);
    assert_int_equal(p.topic_len, 3);
    assert_memory_equal(p.topic, "t/1", 3);
    assert_int_equal(p.payload_len, 5);
    assert_memory_equal(p.payload, "hello", 5);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_publish(&b, "t", "", 0, 0, 0, 0), 0);
    assert_int_equal(bdb_mqtt_decode_header(b.data, b.len, 0, &h), BDB_MQTT_COMPLETE);
    assert_int_equal(bdb_mqtt_parse_publish(h.flags, b.data + h.hdr_len, h.rem_len, &p), 0);
    assert_int_equal(p.qos, 0);
    assert_int_equal(p.packet_id, 0);
    assert_int_equal(p.payload_len, 0);
    bdb_buf_free(&b);
}

static void publish_malformed(void **state)
{
    (void)state;
    bdb_mqtt_publish p;
    const uint8_t ok[] = {0, 1, 't', 0, 5, 'x'};
    assert_int_equal(bdb_mqtt_parse_publish(0x2, ok, sizeof ok, &p), 0);
    assert_int_equal(bdb_mqtt_parse_publish(0x6, ok, sizeof ok, &p), -1); /* QoS 3 */
    assert_int_equal(bdb_mqtt_parse_publish(0x8, ok, sizeof ok, &p), -1); /* DUP at QoS 0 */
    const uint8_t short_topic[] = {0, 9, 't'};
    assert_int_equal(bdb_mqtt_parse_publish(0, short_topic, sizeof short_topic, &p), -1);
    const uint8_t empty_topic[] = {0, 0, 'x'};
    assert_int_equal(bdb_mqtt_parse_publish(0, empty_topic, sizeof empty_topic, &p), -1);
    const uint8_t wild[] = {0, 3, 'a', '/', '+'};
    assert_int_equal(bdb_mqtt_parse_publish(0, wild, sizeof wild, &p), -1);
    const uint8_t nul[] = {0, 2, 'a', 0};
    assert_int_equal(bdb_mqtt_parse_publish(0, nul, sizeof nul, &p), -1);
    const uint8_t no_id[] = {0, 1, 't', 0};
    assert_int_equal(bdb_mqtt_parse_publish(0x2, no_id, sizeof no_id, &p), -1); /* 1 id byte */
    const uint8_t zero_id[] = {0, 1, 't', 0, 0};
    assert_int_equal(bdb_mqtt_parse_publish(0x2, zero_id, sizeof zero_id, &p), -1);
    assert_int_equal(bdb_mqtt_parse_publish(0, ok, 1, &p), -1);
    assert_int_equal(bdb_mqtt_parse_publish(0, ok, 0, &p), -1);
}

static void connack_suback(void **state)
{
    (void)state;
    int sp, rc;
    const uint8_t c1[] = {1, 0};
    assert_int_equal(bdb_mqtt_parse_connack(c1, 2, &sp, &rc), 0);
    assert_int_equal(sp, 1);
    assert_int_equal(rc, 0);
    const uint8_t c2[] = {0, 5};
    assert_int_equal(bdb_mqtt_parse_connack(c2, 2, &sp, &rc), 0);
    assert_int_equal(rc, 5);
    assert_string_equal(bdb_mqtt_connack_str(rc), "not authorized");
    const uint8_t c3[] = {2, 0};
    assert_int_equal(bdb_mqtt_parse_connack(c3, 2, &sp, &rc), -1); /* reserved bits */
    assert_int_equal(bdb_mqtt_parse_connack(c1, 1, &sp, &rc), -1);
    uint16_t pid;
    uint8_t codes[4];
    size_t n;
    const uint8_t s1[] = {0, 1, 1, 0x80};
    assert_int_equal(bdb_mqtt_parse_suback(s1, sizeof s1, &pid, codes, 4, &n), 0);
    assert_int_equal(pid, 1);
    assert_int_equal(n, 2);
    assert_int_equal(codes[1], 0x80);
    const uint8_t s2[] = {0, 1, 7};
    assert_int_equal(bdb_mqtt_parse_suback(s2, sizeof s2, &pid, codes, 4, &n), -1);
    assert_int_equal(bdb_mqtt_parse_suback(s2, 2, &pid, codes, 4, &n), -1);
}

static int match(const char *f, const char *t)
{
    return bdb_mqtt_topic_match(f, t, strlen(t));
}

static void topic_filters(void **state)
{
    (void)state;
    assert_true(bdb_mqtt_filter_valid("bucketdb/+/+/telemetry"));
    assert_true(bdb_mqtt_filter_valid("#"));
    assert_true(bdb_mqtt_filter_valid("a/#"));
    assert_true(bdb_mqtt_filter_valid("+"));
    assert_false(bdb_mqtt_filter_valid(""));
    assert_false(bdb_mqtt_filter_valid("a/#/b"));
    assert_false(bdb_mqtt_filter_valid("a+/b"));
    assert_false(bdb_mqtt_filter_valid("a/b#"));

    assert_true(match("bucketdb/+/+/telemetry", "bucketdb/acme/d1/telemetry"));
    assert_false(match("bucketdb/+/+/telemetry", "bucketdb/acme/telemetry"));
    assert_false(match("bucketdb/+/+/telemetry", "bucketdb/acme/d1/telemetry/x"));
    assert_true(match("a/#", "a"));
    assert_true(match("a/#", "a/b/c"));
    assert_true(match("#", "a/b"));
    assert_false(match("#", "$SYS/x"));
    assert_false(match("+/x", "$SYS/x"));
    assert_true(match("$SYS/#", "$SYS/x"));
    assert_true(match("a/+", "a/"));
    assert_false(match("a/+", "a"));
    assert_true(match("+/+", "/x"));
    assert_false(match("a/b", "a/bc"));
    assert_false(match("a/b", "a"));
}

/* Random and mutated bytes never crash the decoder or read past the input (ASan). */
static void robustness(void **state)
{
    (void)state;
    srand(12345);
    bdb_buf b;
    bdb_buf_init(&b);
    for (int iter = 0; iter < 20000; iter++) {
        bdb_buf_reset(&b);
        bdb_mqtt_encode_publish(&b, "bucketdb/a/d/telemetry", "x v=1", 5, 1, 0, 9);
        size_t len = b.len;
        uint8_t *copy = malloc(len);
        memcpy(copy, b.data, len);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            copy[rand() % len] = (uint8_t)rand();
        size_t cut = (size_t)rand() % (len + 1);
        uint8_t *exact = malloc(cut ? cut : 1);
        memcpy(exact, copy, cut);
        bdb_mqtt_hdr h;
        int r = bdb_mqtt_decode_header(exact, cut, 1 << 20, &h);
        if (r == BDB_MQTT_COMPLETE && h.hdr_len + h.rem_len <= cut) {
            bdb_mqtt_publish p;
            if (bdb_mqtt_parse_publish(h.flags, exact + h.hdr_len, h.rem_len, &p) == 0) {
                assert_true(p.topic_len > 0);
                assert_true((const uint8_t *)p.topic + p.topic_len <= exact + cut);
                assert_true(p.payload + p.payload_len <= exact + cut);
            }
            int sp, rc;
            bdb_mqtt_parse_connack(exact + h.hdr_len, h.rem_len, &sp, &rc);
            uint16_t pid;
            uint8_t codes[2];
            size_t n;
            bdb_mqtt_parse_suback(exact + h.hdr_len, h.rem_len, &pid, codes, 2, &n);
        }
        free(exact);
        free(copy);
    }
    bdb_buf_free(&b);
}

static void v5_connect_subscribe_puback(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_mqtt_connect_opts o = {BDB_MQTT_V5, "bdb", "u", "pw", 30, 0, 0xffffffffu, 32, 0};
    assert_int_equal(bdb_mqtt_encode_connect_opts(&b, &o), 0);
    const uint8_t want[] = {0x10, 31,  0,    4,    'M',  'Q',  'T',  'T',  5, 0xc0, 0,
                            30,   8,   0x11, 0xff, 0xff, 0xff, 0xff, 0x21, 0, 32,   0,
                            3,    'b', 'd',  'b',  0,    1,    'u',  0,    2, 'p',  'w'};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    /* MQTT 5 allows a password without a user name; 3.1.1 does not */
    bdb_buf_reset(&b);
    o.user = NULL;
    assert_int_equal(bdb_mqtt_encode_connect_opts(&b, &o), 0);
    o.version = 3;
    assert_int_equal(bdb_mqtt_encode_connect_opts(&b, &o), -1);
    bdb_buf_reset(&b);
    const char *f[] = {"$share/g/a/+"};
    assert_int_equal(bdb_mqtt_encode_subscribe_v(&b, BDB_MQTT_V5, 1, f, 1, 1), 0);
    const uint8_t ws[] = {0x82, 18,  0,   1,   0,   0,   12,  '$', 's', 'h',
                          'a',  'r', 'e', '/', 'g', '/', 'a', '/', '+', 1};
    assert_int_equal(b.len, sizeof ws);
    assert_memory_equal(b.data, ws, sizeof ws);
    bdb_buf_reset(&b);
    bdb_mqtt_encode_puback_v(&b, BDB_MQTT_V5, 7, 0);
    bdb_mqtt_encode_puback_v(&b, BDB_MQTT_V5, 8, BDB_MQTT_RC_PAYLOAD_INVALID);
    bdb_mqtt_encode_puback_v(&b, BDB_MQTT_V311, 9, BDB_MQTT_RC_PAYLOAD_INVALID);
    const uint8_t wp[] = {0x40, 2, 0, 7, 0x40, 3, 0, 8, 0x99, 0x40, 2, 0, 9};
    assert_int_equal(b.len, sizeof wp);
    assert_memory_equal(b.data, wp, sizeof wp);
    bdb_buf_free(&b);
}

static void v5_publish_round_trip(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_mqtt_user_prop up[] = {{"reason", "bad json"}, {"topic", "a/b"}};
    assert_int_equal(
        bdb_mqtt_encode_publish_v(&b, BDB_MQTT_V5, "dl/x", "{oops", 5, 1, 0, 77, up, 2), 0);
    bdb_mqtt_hdr h;
    assert_int_equal(bdb_mqtt_decode_header(b.data, b.len, 0, &h), BDB_MQTT_COMPLETE);
    bdb_mqtt_publish p;
    bdb_mqtt_props props;
    assert_int_equal(
        bdb_mqtt_parse_publish_v(BDB_MQTT_V5, h.flags, b.data + h.hdr_len, h.rem_len, &p, &props),
        0);
    assert_int_equal(p.packet_id, 77);
    assert_int_equal(p.payload_len, 5);
    assert_memory_equal(p.payload, "{oops", 5);
    assert_int_equal(props.user_props, 2);
    /* payload NULL: the head alone, whose length counts the payload streamed after it */
    bdb_buf head;
    bdb_buf_init(&head);
    assert_int_equal(
        bdb_mqtt_encode_publish_v(&head, BDB_MQTT_V5, "dl/x", NULL, 5, 1, 0, 77, up, 2), 0);
    assert_int_equal(head.len, b.len - 5);
    bdb_buf_append(&head, "{oops", 5);
    assert_memory_equal(head.data, b.data, b.len);
    bdb_buf_free(&head);
    /* the same bytes read as 3.1.1 keep the property block in the payload */
    assert_int_equal(bdb_mqtt_parse_publish(h.flags, b.data + h.hdr_len, h.rem_len, &p), 0);
    assert_true(p.payload_len > 5);
    /* a topic alias is refused (we announce a Topic Alias Maximum of 0) */
    const uint8_t alias[] = {0, 1, 't', 0, 5, 3, 0x23, 0, 1, 'x'};
    assert_int_equal(bdb_mqtt_parse_publish_v(BDB_MQTT_V5, 0x2, alias, sizeof alias, &p, &props),
                     -1);
    /* content type and payload format indicator are kept */
    const uint8_t ct[] = {0, 1, 't', 0, 5, 9, 0x01, 1, 0x03, 0, 4, 'j', 's', 'o', 'n', '{', '}'};
    assert_int_equal(bdb_mqtt_parse_publish_v(BDB_MQTT_V5, 0x2, ct, sizeof ct, &p, &props), 0);
    assert_int_equal(props.payload_format, 1);
    assert_int_equal(props.content_type_len, 4);
    assert_memory_equal(props.content_type, "json", 4);
    assert_int_equal(p.payload_len, 2);
    /* property length past the packet */
    const uint8_t cut[] = {0, 1, 't', 0, 5, 9, 0x01};
    assert_int_equal(bdb_mqtt_parse_publish_v(BDB_MQTT_V5, 0x2, cut, sizeof cut, &p, &props), -1);
    bdb_buf_free(&b);
}

static int props_ok(const uint8_t *buf, size_t len)
{
    size_t used;
    bdb_mqtt_props p;
    return bdb_mqtt_parse_props(buf, len, &used, &p) == 0 && used == len;
}

static void v5_properties(void **state)
{
    (void)state;
    const uint8_t all[] = {20, 0x11, 0, 0,    0, 60,   0x21, 0, 10,  0x27, 0,
                           1,  0,    0, 0x24, 1, 0x1f, 0,    2, 'o', 'k'};
    size_t used;
    bdb_mqtt_props p;
    assert_int_equal(bdb_mqtt_parse_props(all, sizeof all, &used, &p), 0);
    assert_int_equal(used, sizeof all);
    assert_int_equal(p.session_expiry, 60);
    assert_int_equal(p.receive_max, 10);
    assert_int_equal(p.max_packet, 65536);
    assert_int_equal(p.max_qos, 1);
    assert_int_equal(p.reason_len, 2);
    assert_true(BDB_MQTT_HAS(&p, BDB_MQTT_P_RECEIVE_MAX));
    assert_false(BDB_MQTT_HAS(&p, BDB_MQTT_P_TOPIC_ALIAS));
    const uint8_t empty[] = {0};
    assert_true(props_ok(empty, 1));
    const uint8_t pairs[] = {12, 0x26, 0, 1, 'a', 0, 1, 'b', 0x26, 0, 0, 0, 0};
    assert_true(props_ok(pairs, sizeof pairs));
    const uint8_t unknown[] = {2, 0x05, 0};
    assert_false(props_ok(unknown, sizeof unknown));
    const uint8_t dup[] = {6, 0x21, 0, 1, 0x21, 0, 2};
    assert_false(props_ok(dup, sizeof dup));
    const uint8_t rm0[] = {3, 0x21, 0, 0};
    assert_false(props_ok(rm0, sizeof rm0));
    const uint8_t nul[] = {4, 0x1f, 0, 1, 0};
    assert_false(props_ok(nul, sizeof nul));
    const uint8_t short_u32[] = {3, 0x11, 0, 0};
    assert_false(props_ok(short_u32, sizeof short_u32));
    const uint8_t nonmin[] = {0x80, 0x00};
    assert_false(props_ok(nonmin, sizeof nonmin));
    const uint8_t past[] = {9, 0x21, 0, 1};
    assert_false(props_ok(past, sizeof past));
    const uint8_t sid0[] = {2, 0x0b, 0}; /* subscription identifier 0 */
    assert_false(props_ok(sid0, sizeof sid0));
    const uint8_t badbyte[] = {2, 0x24, 2}; /* maximum QoS 2 */
    assert_false(props_ok(badbyte, sizeof badbyte));
}

static void v5_acks(void **state)
{
    (void)state;
    int sp, rc;
    bdb_mqtt_props p;
    const uint8_t c1[] = {1, 0, 3, 0x21, 0, 20};
    assert_int_equal(bdb_mqtt_parse_connack_v(BDB_MQTT_V5, c1, sizeof c1, &sp, &rc, &p), 0);
    assert_int_equal(sp, 1);
    assert_int_equal(p.receive_max, 20);
    const uint8_t c2[] = {0, 0x87, 0};
    assert_int_equal(bdb_mqtt_parse_connack_v(BDB_MQTT_V5, c2, sizeof c2, &sp, &rc, &p), 0);
    assert_int_equal(rc, 0x87);
    assert_string_equal(bdb_mqtt_reason_str(rc), "not authorized");
    const uint8_t c3[] = {0, 0, 3, 0x21, 0}; /* property cut */
    assert_int_equal(bdb_mqtt_parse_connack_v(BDB_MQTT_V5, c3, sizeof c3, &sp, &rc, &p), -1);
    const uint8_t c4[] = {0, 0, 0, 9}; /* a byte after the properties */
    assert_int_equal(bdb_mqtt_parse_connack_v(BDB_MQTT_V5, c4, sizeof c4, &sp, &rc, &p), -1);
    uint16_t pid;
    uint8_t codes[4];
    size_t n;
    const uint8_t s1[] = {0, 1, 0, 1, 0x87, 0x9e};
    assert_int_equal(bdb_mqtt_parse_suback_v(BDB_MQTT_V5, s1, sizeof s1, &pid, codes, 4, &n, &p),
                     0);
    assert_int_equal(n, 3);
    assert_int_equal(codes[2], 0x9e);
    const uint8_t s2[] = {0, 1, 0, 0x05};
    assert_int_equal(bdb_mqtt_parse_suback_v(BDB_MQTT_V5, s2, sizeof s2, &pid, codes, 4, &n, &p),
                     -1);
    const uint8_t s3[] = {0, 1, 0}; /* no reason code */
    assert_int_equal(bdb_mqtt_parse_suback_v(BDB_MQTT_V5, s3, sizeof s3, &pid, codes, 4, &n, &p),
                     -1);
    int reason;
    const uint8_t pa[] = {0, 9, 0x87, 0};
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, pa, sizeof pa, &pid, &reason, &p), 0);
    assert_int_equal(pid, 9);
    assert_int_equal(reason, 0x87);
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, pa, 2, &pid, &reason, &p), 0);
    assert_int_equal(reason, 0);
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V311, pa, 3, &pid, &reason, &p), -1);
    const uint8_t pz[] = {0, 0};
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, pz, 2, &pid, &reason, &p), -1);
    const uint8_t d1[] = {0x8b, 6, 0x1f, 0, 3, 'b', 'y', 'e'};
    assert_int_equal(bdb_mqtt_parse_disconnect(d1, sizeof d1, &reason, &p), 0);
    assert_int_equal(reason, 0x8b);
    assert_int_equal(p.reason_len, 3);
    assert_int_equal(bdb_mqtt_parse_disconnect(d1, 0, &reason, &p), 0);
    assert_int_equal(reason, 0);
    assert_int_equal(bdb_mqtt_parse_disconnect(d1, 4, &reason, &p), -1);
}

static void shared_filters(void **state)
{
    (void)state;
    const char *inner = NULL;
    assert_int_equal(bdb_mqtt_filter_shared("$share/g1/bucketdb/+/+/telemetry", &inner), 1);
    assert_string_equal(inner, "bucketdb/+/+/telemetry");
    assert_int_equal(bdb_mqtt_filter_shared("bucketdb/#", &inner), 0);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g1", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share//a", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g+/a", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g/a/#/b", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g/", &inner), -1);
    assert_string_equal(bdb_mqtt_reason_str(0x99), "payload format invalid");
    assert_string_equal(bdb_mqtt_reason_str(0x42), "unknown reason code");
}

/* Mutated MQTT 5 packets through every parser: no crash, no read past the input. */
static void v5_robustness(void **state)
{
    (void)state;
    srand(777);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_mqtt_user_prop up[] = {{"reason", "r"}, {"k", "v"}};
    for (int iter = 0; iter < 20000; iter++) {
        bdb_buf_reset(&b);
        bdb_mqtt_encode_publish_v(&b, BDB_MQTT_V5, "bucketdb/a/d/telemetry", "x v=1", 5, 1, 0, 9,
                                  up, (size_t)(iter % 3));
        size_t len = b.len;
        uint8_t *copy = malloc(len);
        memcpy(copy, b.data, len);
        int flips = 1 + rand() % 4;
        for (int k = 0; k < flips; k++)
            copy[rand() % len] = (uint8_t)rand();
        size_t cut = (size_t)rand() % (len + 1);
        uint8_t *exact = malloc(cut ? cut : 1);
        memcpy(exact, copy, cut);
        bdb_mqtt_hdr h;
        if (bdb_mqtt_decode_header(exact, cut, 1 << 20, &h) == BDB_MQTT_COMPLETE &&
            h.hdr_len + h.rem_len <= cut) {
            const uint8_t *body = exact + h.hdr_len;
            bdb_mqtt_publish p;
            bdb_mqtt_props props;
            if (bdb_mqtt_parse_publish_v(BDB_MQTT_V5, h.flags, body, h.rem_len, &p, &props) == 0) {
                assert_true((const uint8_t *)p.topic + p.topic_len <= exact + cut);
                assert_true(p.payload + p.payload_len <= exact + cut);
                if (props.reason)
                    assert_true((const uint8_t *)props.reason + props.reason_len <= exact + cut);
            }
            int sp, rc;
            uint16_t pid;
            uint8_t codes[2];
            size_t n, used;
            bdb_mqtt_parse_connack_v(BDB_MQTT_V5, body, h.rem_len, &sp, &rc, &props);
            bdb_mqtt_parse_suback_v(BDB_MQTT_V5, body, h.rem_len, &pid, codes, 2, &n, &props);
            bdb_mqtt_parse_puback(BDB_MQTT_V5, body, h.rem_len, &pid, &rc, &props);
            bdb_mqtt_parse_disconnect(body, h.rem_len, &rc, &props);
            bdb_mqtt_parse_props(body, h.rem_len, &used, NULL);
        }
        free(exact);
        free(copy);
    }
    bdb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(remlen_round_trip),
        cmocka_unit_test(header_malformed_and_too_large),
        cmocka_unit_test(connect_encoding),
        cmocka_unit_test(subscribe_puback_ping),
        cmocka_unit_test(publish_round_trip),
        cmocka_unit_test(publish_malformed),
        cmocka_unit_test(connack_suback),
        cmocka_unit_test(topic_filters),
        cmocka_unit_test(robustness),
        cmocka_unit_test(v5_connect_subscribe_puback),
        cmocka_unit_test(v5_publish_round_trip),
        cmocka_unit_test(v5_properties),
        cmocka_unit_test(v5_acks),
        cmocka_unit_test(shared_filters),
        cmocka_unit_test(v5_robustness),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
