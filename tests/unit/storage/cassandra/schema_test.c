/* schema: the CQL DDL generator. Option parsing (durations, replication per DC,
 * server versions, state models), version capabilities (TWCS, DTCS, materialized
 * views), the gc_grace rule of seed 002, and the generated text for each option. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/schema.h"

#include <stdio.h>
#include <string.h>

/* Generates with o; returns the DDL (static storage) and the warnings in warn_out. */
static char ddl[65536], warns[4096], errmsg[512];

static int gen(const sch_opts *o)
{
    bdb_buf out, warn;
    bdb_buf_init(&out);
    bdb_buf_init(&warn);
    errmsg[0] = 0;
    int rc = sch_generate(o, &out, &warn, errmsg, sizeof errmsg);
    snprintf(ddl, sizeof ddl, "%.*s", (int)out.len, out.len ? (const char *)out.data : "");
    snprintf(warns, sizeof warns, "%.*s", (int)warn.len, warn.len ? (const char *)warn.data : "");
    bdb_buf_free(&out);
    bdb_buf_free(&warn);
    return rc;
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_durations(void **state)
{
    (void)state;
    int64_t s;
    assert_int_equal(sch_parse_duration("30d", &s), BDB_OK);
    assert_int_equal(s, 2592000);
    assert_int_equal(sch_parse_duration("1h", &s), BDB_OK);
    assert_int_equal(s, 3600);
    assert_int_equal(sch_parse_duration("15m", &s), BDB_OK);
    assert_int_equal(s, 900);
    assert_int_equal(sch_parse_duration("2w", &s), BDB_OK);
    assert_int_equal(s, 1209600);
    assert_int_equal(sch_parse_duration("1y", &s), BDB_OK);
    assert_int_equal(s, 31536000);
    assert_int_equal(sch_parse_duration("45", &s), BDB_OK);
    assert_int_equal(s, 45);
    assert_int_equal(sch_parse_duration("0", &s), BDB_OK);
    assert_int_equal(s, 0);
    assert_int_equal(sch_parse_duration("", &s), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_duration("d", &s), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_duration("-1d", &s), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_duration("3x", &s), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_duration("3dd", &s), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_duration("99999999999999999999d", &s), BDB_ERR_INVALID);
}

static void test_replication(void **state)
{
    (void)state;
    sch_opts o;
    char err[256];
    sch_opts_default(&o);
    assert_int_equal(o.ndcs, 0);
    assert_int_equal(o.simple_rf, 3);
    assert_int_equal(sch_parse_replication("simple:1", &o, err, sizeof err), BDB_OK);
    assert_int_equal(o.ndcs, 0);
    assert_int_equal(o.simple_rf, 1);
    assert_int_equal(sch_parse_replication("us-west:3,eu_1:2", &o, err, sizeof err), BDB_OK);
    assert_int_equal(o.ndcs, 2);
    assert_string_equal(o.dcs[0].name, "us-west");
    assert_int_equal(o.dcs[0].rf, 3);
    assert_string_equal(o.dcs[1].name, "eu_1");
    assert_int_equal(o.dcs[1].rf, 2);
    const char *bad[] = {"",       "simple:", "simple:0", "simple:x",    "dc1",     "dc1:",
                         "dc1:3,", ":3",      "dc'1:3",   "dc1:3,dc1:2", "dc1:101", "dc1:3,,dc2:3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sch_opts_default(&o);
        err[0] = 0;
        assert_int_equal(sch_parse_replication(bad[i], &o, err, sizeof err), BDB_ERR_INVALID);
        assert_true(err[0] != 0);
    }
    /* NetworkTopologyStrategy with each DC in the DDL */
    sch_opts_default(&o);
    assert_int_equal(sch_parse_replication("dc1:3,dc2:3", &o, err, sizeof err), BDB_OK);
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "{'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 3}"));
    assert_null(strstr(ddl, "SimpleStrategy"));
    sch_opts_default(&o);
    o.simple_rf = 2;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "{'class': 'SimpleStrategy', 'replication_factor': 2}"));
    assert_non_null(strstr(warns, "replication factor 2"));
}

static void test_replication_from_probe(void **state)
{
    (void)state;
    sch_opts o;
    sch_opts_default(&o);
    const char *one[] = {"datacenter1"};
    assert_int_equal(sch_replication_from_nodes(&o, one, 1), BDB_OK);
    assert_int_equal(o.ndcs, 1);
    assert_string_equal(o.dcs[0].name, "datacenter1");
    assert_int_equal(o.dcs[0].rf, 1);
    const char *many[] = {"us-west", "eu", "us-west", "us-west", "eu", "us-west", ""};
    assert_int_equal(sch_replication_from_nodes(&o, many, 7), BDB_OK);
    assert_int_equal(o.ndcs, 3);
    assert_string_equal(o.dcs[0].name, "us-west");
    assert_int_equal(o.dcs[0].rf, 3); /* 4 nodes: capped at 3 */
    assert_string_equal(o.dcs[1].name, "eu");
    assert_int_equal(o.dcs[1].rf, 2);
    assert_string_equal(o.dcs[2].name, "datacenter1"); /* unnamed */
    assert_int_equal(o.dcs[2].rf, 1);
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "{'class': 'NetworkTopologyStrategy', 'us-west': 3, 'eu': 2, "
                                "'datacenter1': 1}"));
    const char *bad[] = {"dc'1"};
    assert_int_equal(sch_replication_from_nodes(&o, bad, 1), BDB_ERR_INVALID);
    assert_int_equal(sch_replication_from_nodes(&o, NULL, 0), BDB_ERR_INVALID);
}

static void test_versions(void **state)
{
    (void)state;
    int v[3];
    assert_int_equal(sch_parse_version("2.1.0", v), BDB_OK);
    assert_true(v[0] == 2 && v[1] == 1 && v[2] == 0);
    assert_int_equal(sch_parse_version("3.11", v), BDB_OK);
    assert_true(v[0] == 3 && v[1] == 11 && v[2] == 0);
    assert_int_equal(sch_parse_version("3.11.4-SNAPSHOT", v), BDB_OK);
    assert_true(v[0] == 3 && v[1] == 11 && v[2] == 4);
    assert_int_equal(sch_parse_version("4", v), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_version("x.1", v), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_version("4.1.", v), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_version("4.1x", v), BDB_ERR_INVALID);
    assert_int_equal(sch_parse_version("", v), BDB_ERR_INVALID);

    static const struct {
        int v[3];
        int comp, mv;
    } cases[] = {
        {{2, 0, 10}, SCH_COMPACT_STCS, 0}, {{2, 0, 11}, SCH_COMPACT_DTCS, 0},
        {{2, 1, 0}, SCH_COMPACT_STCS, 0},  {{2, 1, 1}, SCH_COMPACT_DTCS, 0},
        {{2, 2, 0}, SCH_COMPACT_DTCS, 0},  {{3, 0, 0}, SCH_COMPACT_DTCS, 1},
        {{3, 0, 7}, SCH_COMPACT_DTCS, 1},  {{3, 0, 8}, SCH_COMPACT_TWCS, 1},
        {{3, 7, 0}, SCH_COMPACT_DTCS, 1},  {{3, 8, 0}, SCH_COMPACT_TWCS, 1},
        {{3, 11, 0}, SCH_COMPACT_TWCS, 1}, {{4, 1, 0}, SCH_COMPACT_TWCS, 1},
        {{5, 0, 0}, SCH_COMPACT_TWCS, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(sch_compaction(cases[i].v), cases[i].comp);
        assert_int_equal(sch_has_mv(cases[i].v), cases[i].mv);
    }
}

static void test_state_models(void **state)
{
    (void)state;
    int m;
    assert_int_equal(sch_parse_state_model("partitioned", &m), BDB_OK);
    assert_int_equal(m, SCH_STATE_PARTITIONED);
    assert_int_equal(sch_parse_state_model("hash", &m), BDB_OK);
    assert_int_equal(m, SCH_STATE_HASH);
    assert_int_equal(sch_parse_state_model("index", &m), BDB_OK);
    assert_int_equal(m, SCH_STATE_INDEX);
    assert_int_equal(sch_parse_state_model("mv", &m), BDB_OK);
    assert_int_equal(m, SCH_STATE_MV);
    assert_int_equal(sch_parse_state_model("view", &m), BDB_ERR_INVALID);

    sch_opts o;
    sch_opts_default(&o);
    assert_int_equal(gen(&o), BDB_OK); /* default: state-partitioned */
    assert_non_null(strstr(ddl, "CREATE TABLE IF NOT EXISTS bucketdb.latest_by_state ("));
    assert_non_null(strstr(ddl, "PRIMARY KEY ((tenant_id, state), device_id)"));
    assert_null(strstr(ddl, "MATERIALIZED"));
    assert_null(strstr(ddl, "CREATE INDEX"));

    o.state_model = SCH_STATE_HASH;
    o.hash_buckets = 8;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "latest_by_state_bucket"));
    assert_non_null(strstr(ddl, "PRIMARY KEY ((tenant_id, state, hash_bucket), device_id)"));
    assert_non_null(strstr(ddl, "mod 8"));

    o.state_model = SCH_STATE_INDEX;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "CREATE INDEX IF NOT EXISTS latest_by_device_state_idx\n"
                                "  ON bucketdb.latest_by_device (state);"));
    assert_null(strstr(ddl, "latest_by_state ("));

    o.state_model = SCH_STATE_MV;
    o.ver[0] = 3, o.ver[1] = 11, o.ver[2] = 0;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(
        strstr(ddl, "CREATE MATERIALIZED VIEW IF NOT EXISTS bucketdb.latest_by_state_mv"));
    assert_non_null(strstr(ddl, "IS NOT NULL"));
    assert_non_null(strstr(ddl, "Caveats"));
    /* refused where the server has no views */
    o.ver[0] = 2, o.ver[1] = 2, o.ver[2] = 0;
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    assert_non_null(strstr(errmsg, "materialized views need Cassandra 3.0"));
    o.ver[0] = 2, o.ver[1] = 1, o.ver[2] = 0;
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
}

static void test_gc_grace_rule(void **state)
{
    (void)state;
    sch_opts o;
    sch_opts_default(&o);
    assert_int_equal(gen(&o), BDB_OK); /* 10 d > 7 d */
    assert_int_equal(count(ddl, "gc_grace_seconds = 864000"), count(ddl, "CREATE TABLE"));
    o.repair_s = 86400;
    o.gc_grace_s = 86400; /* equal: not longer than the repair interval */
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    assert_non_null(strstr(errmsg, "gc_grace_seconds 86400 must exceed the repair interval 86400"));
    assert_int_equal(strlen(ddl), 0); /* nothing printed */
    o.gc_grace_s = 3600;              /* seed 002 "Mistake 4" */
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    o.gc_grace_s = 86401;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "gc_grace_seconds = 86401;"));
}

static void test_ttl_and_bucket(void **state)
{
    (void)state;
    sch_opts o;
    sch_opts_default(&o);
    assert_int_equal(gen(&o), BDB_OK);
    /* telemetry: default TTL 30 d, TWCS with a 1-hour window, the seed's key */
    const char *t = strstr(ddl, "CREATE TABLE IF NOT EXISTS bucketdb.telemetry (");
    assert_non_null(t);
    const char *end = strstr(t, ";");
    assert_non_null(end);
    char tel[4096];
    snprintf(tel, sizeof tel, "%.*s", (int)(end - t), t);
    assert_non_null(strstr(tel, "PRIMARY KEY ((tenant_id, device_id, bucket, sub_bucket), "
                                "event_time, metric_name)"));
    assert_non_null(strstr(tel, "CLUSTERING ORDER BY (event_time DESC, metric_name ASC)"));
    assert_non_null(strstr(tel, "tags map<text, text>"));
    assert_non_null(strstr(tel, "metric_value double"));
    assert_non_null(strstr(tel,
                           "'class': 'TimeWindowCompactionStrategy', "
                           "'compaction_window_unit': 'HOURS', 'compaction_window_size': '1'"));
    assert_non_null(strstr(tel, "default_time_to_live = 2592000"));
    /* aggregate tiers: 90 d, 1 y, forever; sketch and m2 stored */
    assert_non_null(strstr(ddl, "agg_1m"));
    assert_non_null(strstr(ddl, "default_time_to_live = 7776000"));
    assert_non_null(strstr(ddl, "default_time_to_live = 31536000"));
    assert_int_equal(count(ddl, "sketch blob"), 5);
    assert_int_equal(count(ddl, "m2 double"), 5);
    assert_non_null(strstr(ddl, "fleet_agg_1h"));
    assert_non_null(strstr(ddl, "fleet_agg_1d"));
    assert_non_null(strstr(ddl, "event_count counter"));
    assert_non_null(strstr(ddl, "late_arrivals"));
    assert_non_null(strstr(ddl, "bucketdb.devices"));
    assert_non_null(strstr(ddl, "latest_by_device"));
    /* idempotent: every CREATE has IF NOT EXISTS */
    assert_int_equal(count(ddl, "CREATE "), count(ddl, "IF NOT EXISTS"));
    /* what bucketdb writes instead of the counter: absolute counts (cass_state.h) */
    assert_non_null(strstr(ddl, "telemetry_by_tenant_totals (\n"));
    assert_non_null(strstr(ddl, "  event_count bigint,\n"));
    assert_non_null(strstr(ddl, "  metric_times map<text, timestamp>,\n"));
    assert_non_null(strstr(ddl, "  attributes map<text, text>,\n"));
    assert_non_null(strstr(ddl, "  attribute_times map<text, timestamp>,\n"));
    assert_non_null(strstr(ddl, "  bucket_history map<timestamp, int>,\n"));
    /* the keyspace's identity and writer lease (cass_owner.h) */
    assert_non_null(
        strstr(ddl, "CREATE TABLE IF NOT EXISTS bucketdb.owner (\n  k text PRIMARY KEY,"));
    /* named documents: the tenant registry (cass_doc.h) */
    assert_non_null(strstr(ddl, "CREATE TABLE IF NOT EXISTS bucketdb.docs (\n  k text,\n  part "
                                "int,\n  body blob,\n  PRIMARY KEY (k, part)\n)"));
    assert_int_equal(count(ddl, "CREATE TABLE"), 14);
    assert_string_equal(warns, "");

    o.ttl_s = 7 * 86400;
    o.bucket_s = 86400;
    o.sub_bucket = 0;
    strcpy(o.keyspace, "fleet_eu");
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "CREATE KEYSPACE IF NOT EXISTS fleet_eu"));
    assert_non_null(strstr(ddl, "CREATE TABLE IF NOT EXISTS fleet_eu.telemetry ("));
    assert_non_null(strstr(ddl, "default_time_to_live = 604800"));
    assert_non_null(strstr(ddl, "'compaction_window_unit': 'DAYS', 'compaction_window_size': '1'"));
    assert_non_null(strstr(ddl, "PRIMARY KEY ((tenant_id, device_id, bucket), event_time"));
    assert_null(strstr(ddl, "sub_bucket int"));
    o.bucket_s = 900;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(
        strstr(ddl, "'compaction_window_unit': 'MINUTES', 'compaction_window_size': '15'"));
    o.bucket_s = 6 * 3600;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(
        strstr(ddl, "'compaction_window_unit': 'HOURS', 'compaction_window_size': '6'"));
    o.ttl_s = 0;
    assert_int_equal(gen(&o), BDB_OK);
    assert_non_null(strstr(ddl, "bucket 21600 s"));

    /* refused */
    sch_opts_default(&o);
    o.bucket_s = 10;
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    sch_opts_default(&o);
    o.ttl_s = 700000000;
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    sch_opts_default(&o);
    strcpy(o.keyspace, "1bad");
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
    strcpy(o.keyspace, "bad-name");
    assert_int_equal(gen(&o), BDB_ERR_INVALID);
}

/* The largest max_key_bytes whose agg_1m key (tenant 128, device K, metric 2K+1,
 * day, 3 bytes per component) still fits 65,535 bytes: 3K + 149 <= 65535. */
static void test_key_limits(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(sch_check_key_limits(128, 256, err, sizeof err), BDB_OK);
    assert_int_equal(sch_check_key_limits(128, 21795, err, sizeof err), BDB_OK);
    assert_int_equal(sch_check_key_limits(128, 21796, err, sizeof err), BDB_ERR_LIMIT);
    assert_non_null(strstr(err, "max_key_bytes 21796"));
    assert_non_null(strstr(err, "<= 21795"));
    assert_int_equal(sch_check_key_limits(65535, 1, err, sizeof err), BDB_ERR_LIMIT);
}

static void test_version_differences(void **state)
{
    (void)state;
    sch_opts o;
    sch_opts_default(&o);
    o.ver[0] = 2, o.ver[1] = 1, o.ver[2] = 0;
    assert_int_equal(gen(&o), BDB_OK);
    assert_null(strstr(ddl, "TimeWindow"));
    assert_null(strstr(ddl, "DateTiered"));
    assert_non_null(strstr(ddl, "'class': 'SizeTieredCompactionStrategy'"));
    assert_non_null(strstr(warns, "Cassandra 2.1.0 has neither TimeWindowCompactionStrategy"));
    assert_non_null(strstr(warns, "DateTieredCompactionStrategy"));

    o.ver[2] = 1;
    assert_int_equal(gen(&o), BDB_OK);
    assert_null(strstr(ddl, "TimeWindow"));
    assert_non_null(strstr(ddl, "'class': 'DateTieredCompactionStrategy', 'base_time_seconds': "
                                "'3600', 'max_sstable_age_days': '30'"));
    assert_non_null(strstr(warns, "has no TimeWindowCompactionStrategy"));

    o.ver[0] = 3, o.ver[1] = 11, o.ver[2] = 0;
    assert_int_equal(gen(&o), BDB_OK);
    assert_null(strstr(ddl, "DateTiered"));
    assert_non_null(strstr(ddl, "TimeWindowCompactionStrategy"));
    assert_string_equal(warns, "");
    /* late arrivals stay size-tiered on every version */
    const char *la = strstr(ddl, "late_arrivals (");
    assert_non_null(la);
    assert_non_null(strstr(la, "SizeTieredCompactionStrategy"));
    assert_true(strstr(la, "SizeTiered") < strstr(la, ";"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_replication),
        cmocka_unit_test(test_replication_from_probe),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_state_models),
        cmocka_unit_test(test_gc_grace_rule),
        cmocka_unit_test(test_ttl_and_bucket),
        cmocka_unit_test(test_version_differences),
        cmocka_unit_test(test_key_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
