/* Tests for the MQTT gateway's mapping: topic schemes (levels to tenant and device),
 * per-filter payload formats, JSON and line-protocol payloads, the topic's device as
 * the default, and malformed payloads. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "model/batch.h"
#include "server/config.h"
#include "ingest/mqtt/mqtt_topic.h"
#include "server/mqtt/mqtt_gw.h"

#include <string.h>

#define NOW 1700000000000LL

static bdb_config C;
static bdb_batch *B;
static char WHY[700];

static int setup(void **state)
{
    (void)state;
    bdb_config_default(&C);
    B = bdb_batch_new();
    return B ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    bdb_batch_free(B);
    return 0;
}

static int parse(const char *payload, const char *device)
{
    bdb_batch_reset(B);
    return bdb_mqtt_payload_parse(&C, BDB_MQTT_FMT_AUTO, 0, payload, strlen(payload), device, NOW,
                                  B, WHY, sizeof WHY);
}

static const bdb_report *report(size_t i, const char *device)
{
    size_t n;
    const bdb_report *r = bdb_batch_reports(B, &n);
    assert_true(i < n);
    assert_int_equal(r[i].device_len, strlen(device));
    assert_memory_equal(r[i].device, device, strlen(device));
    return &r[i];
}

static size_t nreports(void)
{
    size_t n;
    bdb_batch_reports(B, &n);
    return n;
}

static bdb_mqtt_scheme SC;

static int ids(const char *scheme, const char *topic, char *t, size_t tc, char *d, size_t dc,
               char *why, size_t wl)
{
    char err[200];
    assert_int_equal(bdb_mqtt_scheme_parse(scheme, &SC, err, sizeof err), 0);
    return bdb_mqtt_topic_names(&SC, "deftenant", topic, strlen(topic), t, tc, d, dc, why, wl);
}

static void topic_ids(void **state)
{
    (void)state;
    char t[129], d[257], why[200];
    const char *def = "+/{tenant}/{device}/#";
    assert_int_equal(
        ids(def, "bucketdb/acme/dev-1/telemetry", t, sizeof t, d, sizeof d, why, sizeof why), 0);
    assert_string_equal(t, "acme");
    assert_string_equal(d, "dev-1");
    assert_int_equal(ids(def, "x/acme/d", t, sizeof t, d, sizeof d, why, sizeof why), 0);
    assert_string_equal(d, "d");
    const char *bad[] = {"bucketdb/acme", "bucketdb//d/telemetry", "bucketdb/acme//telemetry",
                         "bucketdb/bad tenant/d/telemetry", "bucketdb/a\x01/d/t"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = 0;
        assert_int_equal(ids(def, bad[i], t, sizeof t, d, sizeof d, why, sizeof why), -1);
        assert_true(why[0] != 0);
    }
    char tiny[4];
    assert_int_equal(
        ids(def, "bucketdb/acme/dev-1/telemetry", t, sizeof t, tiny, sizeof tiny, why, sizeof why),
        -1); /* device longer than the buffer */
    /* the device level is a device name: UTF-8 (a broker may pass other bytes on) */
    assert_int_equal(ids(def,
                         "bucketdb/acme/Gr\xc3\xb6\xc3\x9f"
                         "e/t",
                         t, sizeof t, d, sizeof d, why, sizeof why),
                     0);
    assert_string_equal(d, "Gr\xc3\xb6\xc3\x9f"
                           "e");
    assert_int_equal(ids(def, "bucketdb/acme/a\xff/t", t, sizeof t, d, sizeof d, why, sizeof why),
                     -1);
    assert_string_equal(why, "device level is not UTF-8 or has control characters");
}

static void topic_schemes(void **state)
{
    (void)state;
    char t[129], d[257], why[200], err[200];
    /* device first, tenant last, a literal level, exactly four levels */
    const char *s1 = "fleet/{device}/+/{tenant}";
    assert_int_equal(ids(s1, "fleet/pump-1/x/acme", t, sizeof t, d, sizeof d, why, sizeof why), 0);
    assert_string_equal(t, "acme");
    assert_string_equal(d, "pump-1");
    assert_int_equal(ids(s1, "other/pump-1/x/acme", t, sizeof t, d, sizeof d, why, sizeof why), -1);
    assert_non_null(strstr(why, "'fleet'"));
    assert_int_equal(ids(s1, "fleet/pump-1/x/acme/more", t, sizeof t, d, sizeof d, why, sizeof why),
                     -1);
    assert_int_equal(ids(s1, "fleet/pump-1/x", t, sizeof t, d, sizeof d, why, sizeof why), -1);
    /* no {tenant}: the default tenant */
    assert_int_equal(
        ids("devices/{device}/#", "devices/d9", t, sizeof t, d, sizeof d, why, sizeof why), 0);
    assert_string_equal(t, "deftenant");
    assert_string_equal(d, "d9");
    assert_int_equal(
        ids("devices/{device}/#", "devices/d9/a/b", t, sizeof t, d, sizeof d, why, sizeof why), 0);
    /* invalid schemes name the problem */
    const char *bad[] = {"+/{tenant}/#/x", "{tenant}/+",  "{device}/{device}",
                         "a/{dev}/b",      "a+/{device}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        assert_int_equal(bdb_mqtt_scheme_parse(bad[i], &SC, err, sizeof err), -1);
        assert_non_null(strstr(err, "mqtt_topic_scheme"));
    }
}

static void payload_formats(void **state)
{
    (void)state;
    bdb_mqtt_formats f;
    char err[200];
    assert_int_equal(bdb_mqtt_formats_parse(" fleet/+/+/lp = lp , bucketdb/+/+/telemetry=json,"
                                            "a/#=auto",
                                            &f, err, sizeof err),
                     0);
    assert_int_equal(f.n, 3);
    const char *t1 = "fleet/acme/d/lp", *t2 = "bucketdb/acme/d/telemetry", *t3 = "x/y";
    assert_int_equal(bdb_mqtt_format_for(&f, t1, strlen(t1)), BDB_MQTT_FMT_LP);
    assert_int_equal(bdb_mqtt_format_for(&f, t2, strlen(t2)), BDB_MQTT_FMT_JSON);
    assert_int_equal(bdb_mqtt_format_for(&f, t3, strlen(t3)), BDB_MQTT_FMT_AUTO);
    assert_int_equal(bdb_mqtt_formats_parse("", &f, err, sizeof err), 0);
    assert_int_equal(f.n, 0);
    assert_int_equal(bdb_mqtt_formats_parse("a/b=xml", &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "xml"));
    assert_int_equal(bdb_mqtt_formats_parse("a/b", &f, err, sizeof err), -1);
    assert_int_equal(bdb_mqtt_formats_parse("a/#/b=json", &f, err, sizeof err), -1);
    /* a forced format: JSON-looking text as line protocol is malformed, and LP text
     * forced to JSON too; auto would have taken both */
    bdb_batch_reset(B);
    const char *js = "{\"metrics\": {\"a\": 1}}";
    assert_int_equal(bdb_mqtt_payload_parse(&C, BDB_MQTT_FMT_LP, 0, js, strlen(js), "d", NOW, B,
                                            WHY, sizeof WHY),
                     BDB_MQTT_BAD);
    const char *lp = "env t=1 1700000000000000000";
    assert_int_equal(bdb_mqtt_payload_parse(&C, BDB_MQTT_FMT_JSON, 0, lp, strlen(lp), "d", NOW, B,
                                            WHY, sizeof WHY),
                     BDB_MQTT_BAD);
    assert_non_null(strstr(WHY, "invalid JSON"));
    assert_int_equal(bdb_mqtt_payload_parse(&C, BDB_MQTT_FMT_JSON, 0, js, strlen(js), "d", NOW, B,
                                            WHY, sizeof WHY),
                     BDB_MQTT_OK);
}

static void json_single_report_gets_topic_device(void **state)
{
    (void)state;
    assert_int_equal(parse("{\"time\": 1700000000001, \"metrics\": {\"temp\": 21.5}}", "dev1"),
                     BDB_MQTT_OK);
    assert_int_equal(nreports(), 1);
    const bdb_report *r = report(0, "dev1");
    assert_int_equal(r->ts_ms, 1700000000001LL);
    assert_int_equal(r->nmetrics, 1);
    assert_true(r->metrics[0].value == 21.5);
    /* a report naming its device keeps it */
    assert_int_equal(parse("{\"device\": \"own\", \"metrics\": {\"t\": 1}}", "dev1"), BDB_MQTT_OK);
    assert_int_equal(report(0, "own")->ts_ms, NOW); /* no time: the receive time */
}

static void json_batch_and_array(void **state)
{
    (void)state;
    assert_int_equal(parse("{\"reports\": [{\"metrics\": {\"a\": 1}}, {\"device\": \"x\", "
                           "\"metrics\": {\"b\": 2}}]}",
                           "dt"),
                     BDB_MQTT_OK);
    assert_int_equal(nreports(), 2);
    report(0, "dt");
    report(1, "x");
    assert_int_equal(parse("  [{\"metrics\": {\"a\": 1}}]", "dt"), BDB_MQTT_OK);
    report(0, "dt");
    /* one bad report of two: partial, the good one is kept */
    assert_int_equal(
        parse("[{\"metrics\": {\"a\": 1}}, {\"metrics\": {\"a\\u0001\": \"s\"}}]", "dt"),
        BDB_MQTT_PARTIAL);
    assert_int_equal(nreports(), 1);
    assert_non_null(strstr(WHY, "1 rejected"));
}

static void line_protocol(void **state)
{
    (void)state;
    assert_int_equal(parse("env temp=19.5,hum=40i 1700000000000000000\n", "dev2"), BDB_MQTT_OK);
    const bdb_report *r = report(0, "dev2");
    assert_int_equal(r->ts_ms, 1700000000000LL);
    assert_int_equal(r->nmetrics, 2);
    /* the line's own device tag wins; other tags are kept */
    assert_int_equal(parse("env,site=b,device=own t=1 1700000000000000000", "dev2"), BDB_MQTT_OK);
    r = report(0, "own");
    assert_int_equal(r->ntags, 1);
    /* a device name needing escapes */
    assert_int_equal(parse("env t=1", "a b,c=d"), BDB_MQTT_OK);
    report(0, "a b,c=d");
    /* comments and blank lines; one good and one bad line: partial */
    assert_int_equal(parse("# comment\n\nenv t=1 1\nenv t=oops 2\n", "d"), BDB_MQTT_PARTIAL);
    assert_int_equal(nreports(), 1);
    assert_non_null(strstr(WHY, "line"));
}

static void malformed(void **state)
{
    (void)state;
    const char *bad[] = {"",
                         "   \n",
                         "{\"time\": 1, \"metrics\": ",
                         "{\"metrics\": {}}",
                         "[]",
                         "not line protocol",
                         "{\"metrics\": {\"a\\u0001\": \"str\"}}",
                         "[1, 2]",
                         "\"just a string\"",
                         "env"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        WHY[0] = 0;
        assert_int_equal(parse(bad[i], "d"), BDB_MQTT_BAD);
        assert_true(WHY[0] != 0);
    }
    /* a NUL inside the payload */
    bdb_batch_reset(B);
    assert_int_equal(bdb_mqtt_payload_parse(&C, BDB_MQTT_FMT_AUTO, 0, "env t=1\0x", 9, "d", NOW, B,
                                            WHY, sizeof WHY),
                     BDB_MQTT_BAD);
}

/* auto recognises gateway objects and bare values; value:<level> names the metric
 * after a topic level, range-checked when the list is parsed. */
static void gateway_shapes(void **state)
{
    (void)state;
    bdb_mqtt_formats f;
    char err[200];
    assert_int_equal(
        bdb_mqtt_formats_parse("ha/+/+/state=value:2,z/+=object,p/+=value", &f, err, sizeof err),
        0);
    int level;
    const char *t = "ha/sensor/temp/state";
    assert_int_equal(bdb_mqtt_format_match(&f, t, strlen(t), &level), BDB_MQTT_FMT_VALUE);
    assert_int_equal(level, 2);
    assert_int_equal(bdb_mqtt_format_match(&f, "p/x", 3, &level), BDB_MQTT_FMT_VALUE);
    assert_int_equal(level, 0);
    assert_int_equal(bdb_mqtt_format_match(&f, "z/x", 3, &level), BDB_MQTT_FMT_OBJECT);
    assert_int_equal(bdb_mqtt_formats_parse("a=value:0", &f, err, sizeof err), -1);
    assert_non_null(strstr(err, "1..32"));
    assert_int_equal(bdb_mqtt_formats_parse("a=value:33", &f, err, sizeof err), -1);
    assert_int_equal(bdb_mqtt_formats_parse("a=value:2x", &f, err, sizeof err), -1);
    assert_int_equal(bdb_mqtt_formats_parse("a=value:32", &f, err, sizeof err), 0);
    const char *p;
    size_t n;
    assert_int_equal(bdb_mqtt_topic_level(t, strlen(t), 3, &p, &n), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(p, "temp", 4);
    assert_int_equal(bdb_mqtt_topic_level(t, strlen(t), 5, &p, &n), -1);

    /* auto: an object without report members is a gateway object */
    assert_int_equal(parse("{\"temperature\": 21.5, \"x\": {\"y\": true}}", "zb"), BDB_MQTT_OK);
    const bdb_report *r = report(0, "zb");
    assert_int_equal(r->nmetrics, 2);
    /* bare numbers and booleans are values named "value" */
    assert_int_equal(parse(" 21.5 \n", "v"), BDB_MQTT_OK);
    r = report(0, "v");
    assert_int_equal(r->nmetrics, 1);
    assert_true(r->metrics[0].value == 21.5);
    assert_int_equal(r->metrics[0].nlen, 5);
    assert_int_equal(parse("false", "v"), BDB_MQTT_OK);
    /* a word is no number: line protocol under auto, a state under value */
    assert_int_equal(parse("on", "v"), BDB_MQTT_BAD);
    bdb_batch_reset(B);
    bdb_mqtt_in in = {
        .format = BDB_MQTT_FMT_VALUE, .metric_level = 2, .topic = t, .topic_len = strlen(t)};
    assert_int_equal(bdb_mqtt_payload_parse_in(&C, &in, "on", 2, "temp", NOW, B, WHY, sizeof WHY),
                     BDB_MQTT_OK);
    r = report(0, "temp");
    assert_string_equal(r->state, "on");
    bdb_batch_reset(B);
    assert_int_equal(bdb_mqtt_payload_parse_in(&C, &in, "1e3", 3, "temp", NOW, B, WHY, sizeof WHY),
                     BDB_MQTT_OK);
    r = report(0, "temp");
    assert_int_equal(r->metrics[0].nlen, 6);
    assert_memory_equal(r->metrics[0].name, "sensor", 6);
    assert_true(r->metrics[0].value == 1000);
    in.metric_level = 9;
    bdb_batch_reset(B);
    assert_int_equal(bdb_mqtt_payload_parse_in(&C, &in, "1", 1, "temp", NOW, B, WHY, sizeof WHY),
                     BDB_MQTT_BAD);
    assert_non_null(strstr(WHY, "no level 9"));
    double d;
    assert_int_equal(bdb_mqtt_bare_number("0x10", 4, &d), 0);
    assert_int_equal(bdb_mqtt_bare_number("+1", 2, &d), 0);
    assert_int_equal(bdb_mqtt_bare_number("1e999", 5, &d), 0);
    assert_int_equal(bdb_mqtt_bare_number("-2.5e-1", 7, &d), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(topic_ids, setup, teardown),
        cmocka_unit_test_setup_teardown(topic_schemes, setup, teardown),
        cmocka_unit_test_setup_teardown(payload_formats, setup, teardown),
        cmocka_unit_test_setup_teardown(json_single_report_gets_topic_device, setup, teardown),
        cmocka_unit_test_setup_teardown(json_batch_and_array, setup, teardown),
        cmocka_unit_test_setup_teardown(line_protocol, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(gateway_shapes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
