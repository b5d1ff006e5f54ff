/* mqtt_props: the MQTT 5 property parser and the small v5 packet parsers that use it,
 * fed malformed input from brokers (MQTT 5.0 spec sections 2.2.2 and 3.x).
 *
 * Every property type cut short by one byte is refused; strings with a NUL
 * ([MQTT-1.5.4-2]), repeated single-valued properties, unknown identifiers, and values
 * out of their range (receive maximum 0, maximum packet size 0, flags above 1) are
 * refused; user properties and subscription identifiers may repeat. Then PUBACK,
 * DISCONNECT and SUBACK with property blocks, topic filters at the edges and the
 * CONNECT encoder's refusals; the topic scheme and per-filter formats at their size
 * limits. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/buf.h"
#include "ingest/mqtt/mqtt_codec.h"
#include "ingest/mqtt/mqtt_topic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses a property block made of the given bytes (length prefix added here). */
static int parse(const uint8_t *props, size_t n, bdb_mqtt_props *out)
{
    static uint8_t buf[300]; /* parsed strings point into it after the return */
    assert_true(n < 128);
    buf[0] = (uint8_t)n;
    memcpy(buf + 1, props, n);
    size_t used = 0;
    int rc = bdb_mqtt_parse_props(buf, n + 1, &used, out);
    if (rc == 0)
        assert_int_equal(used, n + 1);
    return rc;
}

#define PARSE(out, ...)                                                                            \
    ({                                                                                             \
        static const uint8_t b_[] = {__VA_ARGS__};                                                 \
        parse(b_, sizeof b_, out);                                                                 \
    })

static void test_each_type_cut_short(void **state)
{
    (void)state;
    bdb_mqtt_props p;
    /* byte (payload format), u16 (server keep alive), u32 (session expiry), varint
     * (subscription identifier), string (content type), binary (correlation data),
     * pair (user property): whole, then one byte short */
    assert_int_equal(PARSE(&p, 0x01, 0x01), 0);
    assert_int_equal(p.payload_format, 1);
    assert_int_equal(PARSE(&p, 0x01), -1);
    assert_int_equal(PARSE(&p, 0x13, 0x00, 0x3c), 0);
    assert_int_equal(p.server_keepalive, 60);
    assert_int_equal(PARSE(&p, 0x13, 0x00), -1);
    assert_int_equal(PARSE(&p, 0x11, 0x00, 0x00, 0x0e, 0x10), 0);
    assert_int_equal(p.session_expiry, 3600);
    assert_int_equal(PARSE(&p, 0x11, 0x00, 0x00, 0x0e), -1);
    assert_int_equal(PARSE(&p, 0x0b, 0x05), 0);
    assert_int_equal(PARSE(&p, 0x0b, 0x80), -1); /* continuation bit, nothing follows */
    assert_int_equal(PARSE(&p, 0x0b, 0x00), -1); /* a subscription identifier of 0 */
    assert_int_equal(PARSE(&p, 0x03, 0x00, 0x02, 'a', 'b'), 0);
    assert_int_equal(p.content_type_len, 2);
    assert_memory_equal(p.content_type, "ab", 2);
    assert_int_equal(PARSE(&p, 0x03, 0x00, 0x02, 'a'), -1);
    assert_int_equal(PARSE(&p, 0x03, 0x00), -1);
    assert_int_equal(PARSE(&p, 0x09, 0x00, 0x02, 0x00, 0x01), 0); /* binary may hold NUL */
    assert_int_equal(PARSE(&p, 0x09, 0x00, 0x03, 0x00, 0x01), -1);
    assert_int_equal(PARSE(&p, 0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v'), 0);
    assert_int_equal(p.user_props, 1);
    assert_int_equal(PARSE(&p, 0x26, 0x00, 0x01, 'k', 0x00, 0x02, 'v'), -1);
    assert_int_equal(PARSE(&p, 0x26, 0x00, 0x02, 'k'), -1);
    assert_int_equal(PARSE(&p, 0x26, 0x00), -1);
    /* the block's own length beyond the buffer */
    uint8_t over[] = {0x05, 0x01, 0x01};
    size_t used;
    assert_int_equal(bdb_mqtt_parse_props(over, sizeof over, &used, &p), -1);
}

static void test_strings_repeats_and_unknown_ids(void **state)
{
    (void)state;
    bdb_mqtt_props p;
    /* [MQTT-1.5.4-2]: no NUL in a UTF-8 string, in a plain string or in a pair */
    assert_int_equal(PARSE(&p, 0x1f, 0x00, 0x02, 'a', 0x00), -1);
    assert_int_equal(PARSE(&p, 0x26, 0x00, 0x01, 0x00, 0x00, 0x01, 'v'), -1);
    assert_int_equal(PARSE(&p, 0x26, 0x00, 0x01, 'k', 0x00, 0x01, 0x00), -1);
    /* a single-valued property twice is a protocol error; user properties and
     * subscription identifiers may repeat */
    assert_int_equal(PARSE(&p, 0x13, 0x00, 0x01, 0x13, 0x00, 0x02), -1);
    assert_int_equal(
        PARSE(&p, 0x26, 0x00, 0x01, 'a', 0x00, 0x00, 0x26, 0x00, 0x01, 'b', 0x00, 0x00), 0);
    assert_int_equal(p.user_props, 2);
    assert_int_equal(PARSE(&p, 0x0b, 0x01, 0x0b, 0x02), 0);
    /* identifiers the spec does not define */
    assert_int_equal(PARSE(&p, 0x00), -1);
    assert_int_equal(PARSE(&p, 0x7f, 0x00), -1);
    /* validate only: no props to fill */
    assert_int_equal(PARSE(NULL, 0x12, 0x00, 0x01, 'x', 0x26, 0x00, 0x00, 0x00, 0x00), 0);
}

static void test_value_ranges(void **state)
{
    (void)state;
    bdb_mqtt_props p;
    assert_int_equal(PARSE(&p, 0x01, 0x02), -1);       /* payload format 0 or 1 */
    assert_int_equal(PARSE(&p, 0x21, 0x00, 0x00), -1); /* receive maximum 0 */
    assert_int_equal(PARSE(&p, 0x21, 0x00, 0x0a), 0);
    assert_int_equal(p.receive_max, 10);
    assert_true(BDB_MQTT_HAS(&p, BDB_MQTT_P_RECEIVE_MAX));
    assert_int_equal(PARSE(&p, 0x24, 0x02), -1); /* maximum QoS 0 or 1 */
    assert_int_equal(PARSE(&p, 0x24, 0x01), 0);
    assert_int_equal(p.max_qos, 1);
    assert_int_equal(PARSE(&p, 0x27, 0x00, 0x00, 0x00, 0x00), -1); /* maximum packet 0 */
    assert_int_equal(PARSE(&p, 0x27, 0x00, 0x00, 0x10, 0x00), 0);
    assert_int_equal(p.max_packet, 4096);
    /* the availability flags are 0 or 1 */
    static const uint8_t flags[] = {0x17, 0x19, 0x25, 0x28, 0x29, 0x2a};
    for (size_t i = 0; i < sizeof flags; i++) {
        uint8_t ok[] = {flags[i], 0x01}, bad[] = {flags[i], 0x02};
        assert_int_equal(parse(ok, 2, &p), 0);
        assert_int_equal(parse(bad, 2, &p), -1);
    }
    assert_int_equal(PARSE(&p, 0x22, 0x00, 0x05, 0x23, 0x00, 0x02, 0x12, 0x00, 0x01, 'c'), 0);
    assert_int_equal(p.topic_alias_max, 5);
    assert_int_equal(p.topic_alias, 2);
    assert_int_equal(p.assigned_id_len, 1);
}

static void test_puback_and_disconnect(void **state)
{
    (void)state;
    uint16_t id;
    int reason;
    bdb_mqtt_props p;
    static const uint8_t ok2[] = {0x00, 0x07};
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V311, ok2, 2, &id, &reason, &p), 0);
    assert_int_equal(id, 7);
    static const uint8_t zero[] = {0x00, 0x00};
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, zero, 2, &id, &reason, NULL), -1);
    static const uint8_t r3[] = {0x00, 0x07, 0x10};
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V311, r3, 3, &id, &reason, &p), -1);
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, r3, 3, &id, &reason, &p), 0);
    assert_int_equal(reason, 0x10);
    static const uint8_t withprops[] = {0x00, 0x07, 0x10, 0x03, 0x1f, 0x00, 0x00};
    assert_int_equal(
        bdb_mqtt_parse_puback(BDB_MQTT_V5, withprops, sizeof withprops, &id, &reason, &p), 0);
    assert_true(BDB_MQTT_HAS(&p, BDB_MQTT_P_REASON));
    /* trailing bytes after the properties */
    static const uint8_t trailing[] = {0x00, 0x07, 0x10, 0x00, 0x01};
    assert_int_equal(
        bdb_mqtt_parse_puback(BDB_MQTT_V5, trailing, sizeof trailing, &id, &reason, &p), -1);
    assert_int_equal(bdb_mqtt_parse_puback(BDB_MQTT_V5, ok2, 1, &id, &reason, &p), -1);

    assert_int_equal(bdb_mqtt_parse_disconnect(NULL, 0, &reason, &p), 0);
    assert_int_equal(reason, 0);
    static const uint8_t d1[] = {0x8e};
    assert_int_equal(bdb_mqtt_parse_disconnect(d1, 1, &reason, NULL), 0);
    assert_int_equal(reason, 0x8e);
    static const uint8_t dp[] = {0x8e, 0x05, 0x1f, 0x00, 0x02, 'g', 'o'};
    assert_int_equal(bdb_mqtt_parse_disconnect(dp, sizeof dp, &reason, &p), 0);
    assert_int_equal(p.reason_len, 2);
    static const uint8_t dbad[] = {0x8e, 0x05, 0x1f, 0x00, 0x02, 'g'};
    assert_int_equal(bdb_mqtt_parse_disconnect(dbad, sizeof dbad, &reason, &p), -1);
    static const uint8_t dtrail[] = {0x8e, 0x00, 0x00};
    assert_int_equal(bdb_mqtt_parse_disconnect(dtrail, sizeof dtrail, &reason, &p), -1);
}

static void test_suback_v5(void **state)
{
    (void)state;
    uint16_t id;
    uint8_t codes[2];
    size_t n;
    bdb_mqtt_props p;
    /* properties, then three reason codes, of which two fit */
    static const uint8_t ok[] = {0x00, 0x09, 0x00, 0x00, 0x01, 0x80};
    assert_int_equal(bdb_mqtt_parse_suback_v(BDB_MQTT_V5, ok, sizeof ok, &id, codes, 2, &n, &p), 0);
    assert_int_equal(id, 9);
    assert_int_equal(n, 2);
    /* no reason code at all after the properties */
    static const uint8_t none[] = {0x00, 0x09, 0x00};
    assert_int_equal(bdb_mqtt_parse_suback_v(BDB_MQTT_V5, none, sizeof none, &id, codes, 2, &n, &p),
                     -1);
    static const uint8_t badprops[] = {0x00, 0x09, 0x03, 0x1f};
    assert_int_equal(
        bdb_mqtt_parse_suback_v(BDB_MQTT_V5, badprops, sizeof badprops, &id, codes, 2, &n, &p), -1);
}

static void test_filters_at_the_edges(void **state)
{
    (void)state;
    assert_false(bdb_mqtt_filter_valid(""));
    assert_true(bdb_mqtt_filter_valid("+"));
    assert_true(bdb_mqtt_filter_valid("#"));
    assert_true(bdb_mqtt_filter_valid("a/+/#"));
    assert_false(bdb_mqtt_filter_valid("a+"));
    assert_false(bdb_mqtt_filter_valid("+a"));
    assert_false(bdb_mqtt_filter_valid("a/#/b"));
    char *big = malloc(65537);
    memset(big, 'a', 65536);
    big[65536] = '\0';
    assert_false(bdb_mqtt_filter_valid(big)); /* longer than a UTF-8 string can be */
    free(big);
    const char *inner = NULL;
    assert_int_equal(bdb_mqtt_filter_shared("$share/g/a/+", &inner), 1);
    assert_string_equal(inner, "a/+");
    assert_int_equal(bdb_mqtt_filter_shared("$share//a", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g+/a", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g#/a", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("$share/g/a#", &inner), -1);
    assert_int_equal(bdb_mqtt_filter_shared("a/b", &inner), 0);
    /* $-topics are not matched by a leading wildcard [MQTT-4.7.2-1], but by a name */
    assert_false(bdb_mqtt_topic_match("#", "$SYS/x", 6));
    assert_false(bdb_mqtt_topic_match("+/x", "$SYS/x", 6));
    assert_true(bdb_mqtt_topic_match("$SYS/#", "$SYS/x", 6));
    assert_true(bdb_mqtt_topic_match("a/#", "a", 1)); /* the parent level itself */
    assert_false(bdb_mqtt_topic_match("a/+", "a", 1));
    assert_false(bdb_mqtt_topic_match("a/b/c", "a/b", 3));
    assert_true(bdb_mqtt_topic_match("+/+", "/x", 2)); /* empty levels are levels */
    assert_false(bdb_mqtt_topic_match("a", "a/b", 3));
    assert_true(bdb_mqtt_topic_match("+", "", 0));
}

static void test_connect_refusals(void **state)
{
    (void)state;
    bdb_buf out;
    bdb_buf_init(&out);
    bdb_mqtt_connect_opts o;
    memset(&o, 0, sizeof o);
    o.version = 3; /* MQTT 3.1 is not spoken */
    o.client_id = "c";
    assert_int_not_equal(bdb_mqtt_encode_connect_opts(&out, &o), 0);
    /* a password without a user name: refused in 3.1.1, allowed in 5 */
    o.version = BDB_MQTT_V311;
    o.pass = "p";
    assert_int_not_equal(bdb_mqtt_encode_connect_opts(&out, &o), 0);
    o.version = BDB_MQTT_V5;
    bdb_buf_reset(&out);
    assert_int_equal(bdb_mqtt_encode_connect_opts(&out, &o), 0);
    assert_true(out.len > 10);
    /* the limits we announce travel as properties 0x21 and 0x27 */
    o.receive_max = 10;
    o.max_packet = 4096;
    bdb_buf_reset(&out);
    assert_int_equal(bdb_mqtt_encode_connect_opts(&out, &o), 0);
    static const uint8_t rm[] = {0x21, 0x00, 0x0a}, mp[] = {0x27, 0x00, 0x00, 0x10, 0x00};
    assert_non_null(memmem(out.data, out.len, rm, sizeof rm));
    assert_non_null(memmem(out.data, out.len, mp, sizeof mp));
    /* no client id: an empty one, the broker assigns it */
    o.client_id = NULL;
    o.pass = NULL;
    bdb_buf_reset(&out);
    assert_int_equal(bdb_mqtt_encode_connect_opts(&out, &o), 0);
    bdb_buf_free(&out);
}

/* The configuration tables are fixed-size: each limit is refused with a message. */
static void test_topic_tables_at_their_limits(void **state)
{
    (void)state;
    char err[256], spec[1200];
    bdb_mqtt_scheme sc;
    assert_int_equal(bdb_mqtt_scheme_parse("", &sc, err, sizeof err), -1);
    memset(spec, 'a', 300);
    spec[300] = '\0';
    assert_int_equal(bdb_mqtt_scheme_parse(spec, &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than"));
    /* 33 levels: one too many */
    spec[0] = '\0';
    for (int i = 0; i < 32; i++)
        strcat(spec, "a/");
    strcat(spec, "{device}");
    assert_int_equal(bdb_mqtt_scheme_parse(spec, &sc, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 32 levels"));
    /* a literal level that differs names both */
    assert_int_equal(bdb_mqtt_scheme_parse("fleet/{tenant}/{device}", &sc, err, sizeof err), 0);
    const char *t, *d;
    size_t tl, dl;
    const char *topic = "plant/acme/d1";
    assert_int_equal(
        bdb_mqtt_scheme_ids(&sc, topic, strlen(topic), &t, &tl, &d, &dl, err, sizeof err), -1);
    assert_non_null(strstr(err, "'plant'"));
    topic = "flee/acme/d1"; /* a prefix of the literal is no match either */
    assert_int_equal(
        bdb_mqtt_scheme_ids(&sc, topic, strlen(topic), &t, &tl, &d, &dl, err, sizeof err), -1);

    bdb_mqtt_formats f;
    assert_int_equal(bdb_mqtt_formats_parse(" a/# = line ,\tb/+=lineproto\t, c=lp,d=json, ,e=auto",
                                            &f, err, sizeof err),
                     0);
    assert_int_equal(f.n, 5);
    assert_string_equal(f.filter[0], "a/#");
    assert_int_equal(bdb_mqtt_format_for(&f, "a/x", 3), BDB_MQTT_FMT_LP);
    assert_int_equal(bdb_mqtt_format_for(&f, "b/x", 3), BDB_MQTT_FMT_LP);
    assert_int_equal(bdb_mqtt_format_for(&f, "d", 1), BDB_MQTT_FMT_JSON);
    assert_int_equal(bdb_mqtt_format_for(&f, "zzz", 3), BDB_MQTT_FMT_AUTO);
    assert_string_equal(bdb_mqtt_format_name(BDB_MQTT_FMT_LP), "lp");
    assert_string_equal(bdb_mqtt_format_name(BDB_MQTT_FMT_JSON), "json");
    assert_string_equal(bdb_mqtt_format_name(BDB_MQTT_FMT_AUTO), "auto");
    memset(spec, 'a', 1100);
    spec[1100] = '\0';
    assert_int_equal(bdb_mqtt_formats_parse(spec, &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than"));
    spec[0] = '\0';
    for (int i = 0; i < 33; i++)
        snprintf(spec + strlen(spec), sizeof spec - strlen(spec), "t%d=json,", i);
    assert_int_equal(bdb_mqtt_formats_parse(spec, &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 32 entries"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_type_cut_short),
        cmocka_unit_test(test_strings_repeats_and_unknown_ids),
        cmocka_unit_test(test_value_ranges),
        cmocka_unit_test(test_puback_and_disconnect),
        cmocka_unit_test(test_suback_v5),
        cmocka_unit_test(test_filters_at_the_edges),
        cmocka_unit_test(test_connect_refusals),
        cmocka_unit_test(test_topic_tables_at_their_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
