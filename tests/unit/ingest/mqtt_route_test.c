/* mqtt_route: route lines (filter, scheme=, payload=, tenant=, qos=) with their
 * defaults and every refusal, $share filters matched by their inner filter, and the
 * codec's SUBSCRIBE with a subscription identifier and a PUBLISH's identifiers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/buf.h"
#include "ingest/mqtt/mqtt_codec.h"
#include "ingest/mqtt/mqtt_route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bdb_mqtt_route r;

static void test_full_line(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(bdb_mqtt_route_parse("  homeassistant/+/+/state   scheme=+/+/{device}/state "
                                          "payload=value:2\ttenant=ha qos=0 ",
                                          &r, err, sizeof err),
                     0);
    assert_string_equal(r.filter, "homeassistant/+/+/state");
    assert_int_equal(r.inner, 0);
    assert_int_equal(r.format, BDB_MQTT_FMT_VALUE);
    assert_int_equal(r.level, 2);
    assert_int_equal(r.qos, 0);
    assert_string_equal(r.tenant, "ha");
    assert_int_equal(r.scheme.device, 2);
    assert_int_equal(r.scheme.tenant, -1);
    assert_true(bdb_mqtt_route_matches(&r, "homeassistant/sensor/t/state", 28));
    assert_false(bdb_mqtt_route_matches(&r, "homeassistant/sensor/t/unit", 27));
}

static void test_defaults_and_share(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(bdb_mqtt_route_parse("$share/bdb/bucketdb/+/+/telemetry", &r, err, sizeof err),
                     0);
    assert_int_equal(r.qos, 1);
    assert_int_equal(r.format, BDB_MQTT_FMT_AUTO);
    assert_string_equal(r.tenant, "");
    assert_int_equal(r.scheme.tenant, 1); /* +/{tenant}/{device}/# */
    assert_int_equal(r.scheme.device, 2);
    assert_string_equal(r.filter + r.inner, "bucketdb/+/+/telemetry");
    const char *t = "bucketdb/acme/p1/telemetry";
    assert_true(bdb_mqtt_route_matches(&r, t, strlen(t)));
    /* a route parsed where it stays keeps its scheme literals */
    assert_int_equal(
        bdb_mqtt_route_parse("tele/+/SENSOR scheme=tele/{device}/SENSOR", &r, err, sizeof err), 0);
    assert_string_equal(r.scheme.lit[0], "tele");
    assert_string_equal(r.scheme.lit[2], "SENSOR");
}

static void refused(const char *spec, const char *want)
{
    char err[600] = "";
    if (bdb_mqtt_route_parse(spec, &r, err, sizeof err) != -1)
        fail_msg("'%s' was accepted", spec);
    if (!strstr(err, want))
        fail_msg("'%s': got '%s', want '%s'", spec, err, want);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("", "the topic filter first");
    refused("   ", "the topic filter first");
    refused("scheme=+/{device} a/+", "the topic filter first");
    refused("a/#/b", "'a/#/b' is not a valid topic filter");
    refused("$share/g+/a/+", "($share/<group>/<filter>)");
    refused("a/+ scheme", "'scheme' is not option=value");
    refused("a/+ colour=red", "unknown option 'colour' (scheme, payload, tenant, qos)");
    refused("a/+ qos=2", "qos=2: must be 0 or 1 (QoS 2 is not supported)");
    refused("a/+ qos=", "qos=: must be 0 or 1");
    refused("a/+ qos=01", "qos=01: must be 0 or 1");
    refused("a/+ payload=xml", "payload=xml is not json, lp, object, value, value:<level> or auto");
    refused("a/+ payload=value:0", "payload=value:0: the metric level must be 1..32");
    refused("a/+ payload=value:33", "the metric level must be 1..32");
    refused("a/+ payload=json payload=lp", "payload= given twice");
    refused("a/+ scheme=a/{device} scheme=b/{device}", "scheme= given twice");
    refused("a/+ scheme=a/+", "scheme 'a/+': {device} is missing");
    refused("a/+ scheme=#/{device}", "'#' must be the last level");
    refused("a/+ scheme=", "scheme: empty");
    refused("a/+ tenant=", "tenant= must be 1..128 characters");
    refused("a/+ tenant=acme", "tenant=acme and the scheme's {tenant} level both name the tenant");
    char longt[200];
    memset(longt, 'x', sizeof longt);
    snprintf(longt, sizeof longt, "a/+ scheme=a/{device} tenant=%0130d", 0);
    refused(longt, "tenant= must be 1..128 characters");
    char longf[1100];
    memset(longf, 'a', sizeof longf - 1);
    longf[sizeof longf - 1] = '\0';
    refused(longf, "filter longer than 1023 bytes");
}

/* The limits and look-alike option names: a value of 1024 bytes, a scheme that fits
 * the value but not the scheme, long words cut to 64 bytes in the error, option names
 * of the right length but another spelling, and the blanks allowed before a filter. */
static void test_refusal_limits(void **state)
{
    (void)state;
    char err[600] = "";
    assert_int_equal(bdb_mqtt_route_parse("\t a/+ qos=1 payload=json", &r, err, sizeof err), 0);
    assert_string_equal(r.filter, "a/+");
    assert_int_equal(r.qos, 1);
    refused("a/+ tenant=x tenant=y", "tenant= given twice");
    refused("a/+ qos=0 qos=1", "qos= given twice");
    refused("a/+ payloax=json", "unknown option 'payloax'");
    refused("a/+ qoz=1", "unknown option 'qoz'");
    refused("a/+ tenanx=a", "unknown option 'tenanx'");
    refused("a/+ schemx=a/{device}", "unknown option 'schemx'");
    static char spec[1400], want[80];
    /* a word without '=' longer than 64 bytes: the first 64 are named */
    memset(want, 'w', 64);
    want[64] = '\0';
    snprintf(spec, sizeof spec, "a/+ %s%s", want, "zzzz");
    refused(spec, want);
    char quoted[200];
    snprintf(quoted, sizeof quoted, "'%s' is not option=value", want);
    refused(spec, quoted);
    /* an unknown option name longer than 64 bytes, cut the same way */
    snprintf(spec, sizeof spec, "a/+ %szzzz=1", want);
    snprintf(quoted, sizeof quoted, "unknown option '%s' (", want);
    refused(spec, quoted);
    /* a value of 1023 bytes passes the value limit, 1024 does not */
    char val[1100];
    memset(val, 'v', 1024);
    val[1024] = '\0';
    snprintf(spec, sizeof spec, "a/+ tenant=%s", val);
    refused(spec, "tenant= value longer than 1023 bytes");
    val[1023] = '\0';
    snprintf(spec, sizeof spec, "a/+ tenant=%s", val);
    refused(spec, "tenant= must be 1..128 characters");
    /* a scheme of the scheme buffer's size (255 bytes fit) */
    char sch[300];
    memset(sch, 'a', sizeof sch);
    memcpy(sch, "{device}/", 9);
    sch[256] = '\0';
    snprintf(spec, sizeof spec, "a/+ scheme=%s", sch);
    refused(spec, "scheme= longer than 255 bytes");
    sch[255] = '\0';
    snprintf(spec, sizeof spec, "a/+ scheme=%s", sch);
    assert_int_equal(bdb_mqtt_route_parse(spec, &r, err, sizeof err), 0);
    assert_int_equal(r.scheme.device, 0);
}

static void test_subscribe_with_identifier(void **state)
{
    (void)state;
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_mqtt_encode_subscribe_id(&b, BDB_MQTT_V5, 3, "a/+", 0, 200), 0);
    /* SUBSCRIBE, remaining 12: id, properties (3: 0x0b, varint 200), filter, options */
    const uint8_t want[] = {0x82, 12, 0, 3, 3, 0x0b, 0xc8, 0x01, 0, 3, 'a', '/', '+', 0};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_subscribe_id(&b, BDB_MQTT_V311, 1, "a/+", 1, 7), 0);
    const uint8_t want311[] = {0x82, 8, 0, 1, 0, 3, 'a', '/', '+', 1};
    assert_int_equal(b.len, sizeof want311);
    assert_memory_equal(b.data, want311, sizeof want311);
    bdb_buf_reset(&b);
    assert_int_equal(bdb_mqtt_encode_subscribe_id(&b, BDB_MQTT_V5, 0, "a", 1, 1), -1);
    assert_int_equal(bdb_mqtt_encode_subscribe_id(&b, BDB_MQTT_V5, 1, "", 1, 1), -1);
    assert_int_equal(bdb_mqtt_encode_subscribe_id(&b, BDB_MQTT_V5, 1, "a", 1, 268435456u), -1);
    assert_int_equal(b.len, 0);
    bdb_buf_free(&b);
}

static void test_publish_identifiers(void **state)
{
    (void)state;
    /* two identifiers (overlapping subscriptions): the lowest is kept */
    const uint8_t blk[] = {6, 0x0b, 5, 0x0b, 2, 0x0b, 9};
    bdb_mqtt_props p;
    size_t used;
    assert_int_equal(bdb_mqtt_parse_props(blk, sizeof blk, &used, &p), 0);
    assert_true(BDB_MQTT_HAS(&p, BDB_MQTT_P_SUB_ID));
    assert_int_equal(p.sub_id, 2);
    const uint8_t none[] = {0};
    assert_int_equal(bdb_mqtt_parse_props(none, sizeof none, &used, &p), 0);
    assert_false(BDB_MQTT_HAS(&p, BDB_MQTT_P_SUB_ID));
    const uint8_t zero[] = {2, 0x0b, 0}; /* identifier 0 is a protocol error */
    assert_int_equal(bdb_mqtt_parse_props(zero, sizeof zero, &used, &p), -1);
    /* CONNACK: the broker says whether it has subscription identifiers */
    const uint8_t off[] = {2, 0x29, 0}, bad[] = {2, 0x29, 2};
    assert_int_equal(bdb_mqtt_parse_props(off, sizeof off, &used, &p), 0);
    assert_true(BDB_MQTT_HAS(&p, BDB_MQTT_P_SUB_ID_OK));
    assert_int_equal(p.sub_id_ok, 0);
    assert_int_equal(bdb_mqtt_parse_props(bad, sizeof bad, &used, &p), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_line),
        cmocka_unit_test(test_defaults_and_share),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refusal_limits),
        cmocka_unit_test(test_subscribe_with_identifier),
        cmocka_unit_test(test_publish_identifiers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
