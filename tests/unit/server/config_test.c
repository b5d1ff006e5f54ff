/* config: defaults, every value kind (strings, ints, sizes with units, durations with
 * units) with their errors and overflows, key spelling (dash or underscore), the file
 * format (comments, optional '=', whitespace, FILE:LINE errors), the cross-field
 * checks, print -> load round trip, and the key/help tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/bdb-config-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmpdir);
    return 0;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_defaults(void **state)
{
    (void)state;
    bdb_config c;
    memset(&c, 0x5a, sizeof c);
    bdb_config_default(&c);
    assert_string_equal(c.listen, "127.0.0.1:8086");
    assert_string_equal(c.data, "./data");
    assert_string_equal(c.log_level, "info");
    assert_string_equal(c.sync, "batch");
    assert_int_equal(c.sync_interval_ms, 100);
    assert_int_equal(c.wal_segment_bytes, 64u << 20);
    assert_int_equal(c.block_window_ms, 2 * 3600000);
    assert_int_equal(c.flush_interval_ms, 10 * 60000);
    assert_int_equal(c.head_max_bytes, 1ull << 30);
    assert_int_equal(c.retention_ms, 30 * INT64_C(86400000));
    assert_int_equal(c.query_workers, 4);
    assert_int_equal(c.http_threads_max, 1024);
    assert_int_equal(c.max_inflight_bytes, 256u << 20);
    assert_int_equal(c.max_inflight_writes, 256);
    assert_int_equal(c.tenant_inflight_share, 50);
    assert_int_equal(c.max_body_bytes, 64u << 20);
    assert_int_equal(c.max_line_bytes, 65536);
    assert_int_equal(c.max_tags, 64);
    assert_int_equal(c.max_fields, 256);
    assert_int_equal(c.max_key_bytes, 256);
    assert_int_equal(c.max_tag_value_bytes, 1024);
    assert_int_equal(c.max_future_ms, 3600000);
    assert_int_equal(c.max_query_samples, 1000000);
    assert_string_equal(c.device_tag, "device");
    assert_string_equal(c.metric_naming, "measurement.field");
    assert_string_equal(c.default_tenant, "default");
    assert_string_equal(c.auth, "auto");
    char err[256] = "";
    assert_int_equal(bdb_config_check(&c, err, sizeof err), 0);
}

static void test_set_kinds(void **state)
{
    (void)state;
    bdb_config c;
    bdb_config_default(&c);
    char err[256];
    /* strings; flag spelling with dashes is the same key */
    assert_int_equal(bdb_config_set(&c, "listen", "0.0.0.0:9000", err, sizeof err), 0);
    assert_string_equal(c.listen, "0.0.0.0:9000");
    assert_int_equal(bdb_config_set(&c, "device-tag", "host", err, sizeof err), 0);
    assert_string_equal(c.device_tag, "host");
    assert_int_equal(bdb_config_set(&c, "default_tenant", "", err, sizeof err), 0);
    assert_string_equal(c.default_tenant, "");
    /* ints */
    assert_int_equal(bdb_config_set(&c, "query-workers", "16", err, sizeof err), 0);
    assert_int_equal(c.query_workers, 16);
    assert_int_equal(bdb_config_set(&c, "sync_interval_ms", "1000000000", err, sizeof err), 0);
    assert_int_equal(c.sync_interval_ms, 1000000000);
    /* sizes with units */
    static const struct {
        const char *v;
        uint64_t want;
    } sizes[] = {{"0", 0},
                 {"12", 12},
                 {"12B", 12},
                 {"1K", 1024},
                 {"3KiB", 3072},
                 {"64M", 64u << 20},
                 {"64MiB", 64u << 20},
                 {"2G", 2ull << 30},
                 {"1GiB", 1ull << 30},
                 {"17179869183G", 17179869183ull << 30}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        assert_int_equal(bdb_config_set(&c, "head_max_bytes", sizes[i].v, err, sizeof err), 0);
        assert_int_equal(c.head_max_bytes, sizes[i].want);
        assert_int_equal(bdb_config_set(&c, "max-body-bytes", sizes[i].v, err, sizeof err), 0);
        assert_int_equal(c.max_body_bytes, (size_t)sizes[i].want);
    }
    /* durations with units */
    static const struct {
        const char *v;
        int64_t want;
    } durs[] = {{"0", 0},
                {"250", 250},
                {"500ms", 500},
                {"10s", 10000},
                {"10m", 600000},
                {"2h", 7200000},
                {"30d", 2592000000},
                {"106751991167d", 106751991167LL * 86400000}};
    for (size_t i = 0; i < sizeof durs / sizeof durs[0]; i++) {
        assert_int_equal(bdb_config_set(&c, "retention_ms", durs[i].v, err, sizeof err), 0);
        assert_int_equal(c.retention_ms, durs[i].want);
    }
    assert_int_equal(bdb_config_set(&c, "max-future-ms", "5m", err, sizeof err), 0);
    assert_int_equal(c.max_future_ms, 300000);
}

static void expect_set_error(const char *key, const char *value, const char *fragment)
{
    bdb_config c;
    bdb_config_default(&c);
    bdb_config before;
    memcpy(&before, &c, sizeof c);
    char err[256] = "";
    if (bdb_config_set(&c, key, value, err, sizeof err) != -1)
        fail_msg("%s = '%s' was accepted", key, value);
    if (!strstr(err, fragment))
        fail_msg("%s = '%s': message '%s' lacks '%s'", key, value, err, fragment);
    /* a refused value leaves the setting as it was */
    assert_memory_equal(&c, &before, sizeof c);
}

static void test_set_errors(void **state)
{
    (void)state;
    expect_set_error("no_such_key", "1", "unknown setting 'no_such_key'");
    expect_set_error("--listen", "x", "unknown setting");
    expect_set_error("LISTEN", "x", "unknown setting");
    /* numbers */
    expect_set_error("query_workers", "", "query_workers");
    expect_set_error("query_workers", "abc", "not a valid number");
    expect_set_error("query_workers", "-1", "not a valid number");
    expect_set_error("query_workers", "1000000001", "not a valid number");
    expect_set_error("query_workers", "4x", "not a valid number");
    /* sizes */
    expect_set_error("max_body_bytes", "-5", "not a valid size");
    expect_set_error("max_body_bytes", "1.5G", "not a valid size");
    expect_set_error("max_body_bytes", "10 MiB", "not a valid size");
    expect_set_error("max_body_bytes", "1T", "not a valid size");
    expect_set_error("max_body_bytes", "99999999999999999999", "not a valid size");
    expect_set_error("wal_segment_bytes", "17179869184G", "not a valid size"); /* 2^64 */
    expect_set_error("wal_segment_bytes", "18446744073709551615K", "not a valid size");
    /* durations */
    expect_set_error("retention_ms", "-1d", "not a valid duration");
    expect_set_error("retention_ms", "1.5h", "not a valid duration");
    expect_set_error("retention_ms", "10 m", "not a valid duration");
    expect_set_error("retention_ms", "h", "not a valid duration");
    expect_set_error("retention_ms", "3w", "not a valid duration");
    expect_set_error("retention_ms", "99999999999999999999", "not a valid duration");
    expect_set_error("retention_ms", "106751991168d", "not a valid duration"); /* > int64 */
    expect_set_error("block_window_ms", "9223372036854776s", "not a valid duration");
    /* strings too long for their field: 255 bytes fit, 256 do not */
    char longv[300];
    memset(longv, 'x', sizeof longv);
    longv[256] = '\0';
    expect_set_error("listen", longv, "too long");
    bdb_config c;
    bdb_config_default(&c);
    char err[128];
    longv[255] = '\0';
    assert_int_equal(bdb_config_set(&c, "listen", longv, err, sizeof err), 0);
    assert_int_equal(strlen(c.listen), 255);
    expect_set_error("sync", "periodically-ish", "too long");
    /* the data directory: the engine's limit, BDB_DATA_DIR_MAX bytes */
    char dir[BDB_DATA_DIR_MAX + 2];
    memset(dir, 'd', sizeof dir);
    dir[BDB_DATA_DIR_MAX + 1] = '\0';
    assert_int_equal(bdb_config_set(&c, "data", dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "data: value too long (max 1023 bytes)"));
    dir[BDB_DATA_DIR_MAX] = '\0';
    assert_int_equal(bdb_config_set(&c, "data", dir, err, sizeof err), 0);
    assert_int_equal(strlen(c.data), BDB_DATA_DIR_MAX);
}

static void test_check_rules(void **state)
{
    (void)state;
    static const struct {
        const char *key, *value, *fragment;
    } bad[] = {
        {"sync", "never", "sync"},
        {"log_level", "verbose", "log_level"},
        {"metric_naming", "tag", "metric_naming"},
        {"auth", "maybe", "auth"},
        {"block_window_ms", "7h", "block_window_ms"},
        {"block_window_ms", "0", "block_window_ms"},
        {"block_window_ms", "90s", "block_window_ms"},
        {"listen", "8086", "listen"},
        {"query_workers", "0", "query_workers"},
        {"query_workers", "257", "query_workers"},
        {"http_header_timeout", "999ms", "http_header_timeout: must be 1s..1h"},
        {"http_header_timeout", "0", "http_header_timeout: must be 1s..1h"},
        {"http_header_timeout", "61m", "http_header_timeout: must be 1s..1h"},
        {"http_body_min_rate", "1073741825", "http_body_min_rate: at most 1073741824"},
        {"max_body_bytes", "1023", "max_body_bytes"},
        {"max_line_bytes", "63", "max_line_bytes"},
        {"max_fields", "0", "max_fields"},
        {"device_tag", "", "device_tag"},
        {"default_tenant", "", "default_tenant"},
        {"max_inflight_writes", "0", "max_inflight_writes"},
        {"tenant_inflight_share", "0", "tenant_inflight_share"},
        {"tenant_inflight_share", "101", "tenant_inflight_share"},
        {"max_inflight_bytes", "65535", "max_inflight_bytes"},
        {"max_key_bytes", "0", "max_key_bytes: must be 1..32767"},
        {"max_key_bytes", "32768", "max_key_bytes: must be 1..32767"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bdb_config c;
        bdb_config_default(&c);
        char err[256] = "";
        assert_int_equal(bdb_config_set(&c, bad[i].key, bad[i].value, err, sizeof err), 0);
        err[0] = '\0';
        if (bdb_config_check(&c, err, sizeof err) != -1)
            fail_msg("%s = '%s' passed the check", bad[i].key, bad[i].value);
        if (!strstr(err, bad[i].fragment))
            fail_msg("%s = '%s': message '%s'", bad[i].key, bad[i].value, err);
    }
    /* and values that pass */
    static const struct {
        const char *key, *value;
    } good[] = {
        {"sync", "periodic"},
        {"log_level", "debug"},
        {"log_level", "error"},
        {"metric_naming", "field"},
        {"auth", "on"},
        {"auth", "off"},
        {"block_window_ms", "1h"},
        {"block_window_ms", "1d"},
        {"block_window_ms", "30m"},
        {"query_workers", "256"},
        {"query_workers", "1"},
        {"http_header_timeout", "1s"},
        {"http_header_timeout", "1h"},
        {"http_body_min_rate", "0"},
        {"http_body_min_rate", "1073741824"},
        {"max_body_bytes", "1K"},
        {"max_line_bytes", "64"},
        {"listen", "[::1]:8086"},
        {"tenant_inflight_share", "100"},
        {"tenant_inflight_share", "1"},
        {"max_inflight_bytes", "64KiB"},
        {"max_inflight_writes", "1"},
        {"max_key_bytes", "1"},
        {"max_key_bytes", "32767"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        bdb_config c;
        bdb_config_default(&c);
        char err[256] = "";
        assert_int_equal(bdb_config_set(&c, good[i].key, good[i].value, err, sizeof err), 0);
        if (bdb_config_check(&c, err, sizeof err) != 0)
            fail_msg("%s = '%s' failed the check: %s", good[i].key, good[i].value, err);
    }
}

/* metrics_auth: who may read /metrics (auto = the admin token where tokens matter,
 * open = no token); both spellings of the key, the file, and bad values refused by
 * the check with the key and the value in the message. */
static void test_metrics_auth(void **state)
{
    (void)state;
    bdb_config c;
    bdb_config_default(&c);
    assert_string_equal(c.metrics_auth, "auto");
    char err[256] = "";
    static const char *const good[] = {"auto", "open"};
    for (size_t i = 0; i < 2; i++) {
        bdb_config_default(&c);
        assert_int_equal(bdb_config_set(&c, "metrics_auth", good[i], err, sizeof err), 0);
        assert_string_equal(c.metrics_auth, good[i]);
        if (bdb_config_check(&c, err, sizeof err) != 0)
            fail_msg("metrics_auth = %s failed the check: %s", good[i], err);
    }
    bdb_config_default(&c);
    assert_int_equal(bdb_config_set(&c, "metrics-auth", "open", err, sizeof err), 0); /* flag */
    assert_string_equal(c.metrics_auth, "open");
    static const char *const bad[] = {"closed", "on", "off", "Open", "auto ", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bdb_config_default(&c);
        assert_int_equal(bdb_config_set(&c, "metrics_auth", bad[i], err, sizeof err), 0);
        err[0] = '\0';
        if (bdb_config_check(&c, err, sizeof err) != -1)
            fail_msg("metrics_auth = '%s' passed the check", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "not '%s'", bad[i]);
        if (!strstr(err, "metrics_auth: must be auto or open") || !strstr(err, want))
            fail_msg("metrics_auth = '%s': message '%s'", bad[i], err);
    }
    bdb_config_default(&c);
    err[0] = '\0';
    assert_int_equal(bdb_config_set(&c, "metrics_auth", "a-value-of-sixteen", err, sizeof err), -1);
    assert_non_null(strstr(err, "metrics_auth: value too long"));
    char path[128];
    snprintf(path, sizeof path, "%s/m.conf", tmpdir);
    write_file(path, "auth = on\nmetrics_auth = open\n");
    bdb_config_default(&c);
    assert_int_equal(bdb_config_load(&c, path, err, sizeof err), 0);
    assert_string_equal(c.metrics_auth, "open");
    assert_string_equal(c.auth, "on");
    assert_int_equal(bdb_config_check(&c, err, sizeof err), 0);
    assert_non_null(bdb_config_help("metrics_auth"));
}

static void test_load_file(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/a.conf", tmpdir);
    write_file(path, "# bucketdb settings\n"
                     "\n"
                     "listen = 0.0.0.0:9999\n"
                     "   data=/var/lib/bucketdb   # trailing comment\n"
                     "query-workers 8\n"
                     "\tretention_ms\t=\t30d\r\n"
                     "max_body_bytes = 16MiB\n"
                     "   # indented comment\n"
                     "metric_naming = field\n"
                     "device_tag == host\n");
    bdb_config c;
    bdb_config_default(&c);
    char err[512] = "";
    assert_int_equal(bdb_config_load(&c, path, err, sizeof err), 0);
    assert_string_equal(c.listen, "0.0.0.0:9999");
    assert_string_equal(c.data, "/var/lib/bucketdb");
    assert_int_equal(c.query_workers, 8);
    assert_int_equal(c.retention_ms, 30LL * 86400000);
    assert_int_equal(c.max_body_bytes, 16u << 20);
    assert_string_equal(c.metric_naming, "field");
    assert_string_equal(c.device_tag, "host");
    assert_string_equal(c.log_level, "info"); /* untouched keys keep their value */
    assert_int_equal(bdb_config_check(&c, err, sizeof err), 0);

    /* an empty file is fine */
    write_file(path, "");
    assert_int_equal(bdb_config_load(&c, path, err, sizeof err), 0);
}

static void expect_load_error(const char *text, const char *fragment)
{
    char path[128], want[256];
    snprintf(path, sizeof path, "%s/bad.conf", tmpdir);
    write_file(path, text);
    bdb_config c;
    bdb_config_default(&c);
    char err[512] = "";
    assert_int_equal(bdb_config_load(&c, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:%s", path, fragment);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("error '%s' does not start with '%s'", err, want);
}

static void test_load_errors(void **state)
{
    (void)state;
    expect_load_error("listen = a:1\nbogus = 1\n", "2: unknown setting 'bogus'");
    expect_load_error("# c\n\n\nquery_workers = many\n", "4: query_workers: 'many' is not a valid");
    expect_load_error("data\n", "1: 'data' has no value");
    expect_load_error("data =   # only a comment\n", "1: 'data' has no value");
    expect_load_error("retention_ms = 5y\n", "1: retention_ms");
    char err[512] = "";
    bdb_config c;
    bdb_config_default(&c);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/does-not-exist.conf", tmpdir);
    assert_int_equal(bdb_config_load(&c, missing, err, sizeof err), -1);
    assert_non_null(strstr(err, missing));
}

static void test_print_round_trip(void **state)
{
    (void)state;
    bdb_config a, b;
    bdb_config_default(&a);
    char err[256];
    static const char *set[][2] = {
        {"listen", "10.0.0.1:8086"},
        {"data", "/srv/bdb data"},
        {"log_level", "warn"},
        {"sync", "periodic"},
        {"sync_interval_ms", "250"},
        {"wal_segment_bytes", "8MiB"},
        {"block_window_ms", "1h"},
        {"flush_interval_ms", "90s"},
        {"retention_ms", "7d"},
        {"query_workers", "12"},
        {"max_tags", "9"},
        {"max_future_ms", "0"},
        {"device_tag", "dev"},
        {"metric_naming", "field"},
        {"auth", "on"},
        {"metrics_auth", "open"},
        {"max_query_samples", "5000"},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++)
        assert_int_equal(bdb_config_set(&a, set[i][0], set[i][1], err, sizeof err), 0);
    char p1[128], p2[128];
    snprintf(p1, sizeof p1, "%s/printed.conf", tmpdir);
    snprintf(p2, sizeof p2, "%s/printed2.conf", tmpdir);
    FILE *f = fopen(p1, "w");
    bdb_config_print(&a, f);
    fclose(f);
    bdb_config_default(&b);
    assert_int_equal(bdb_config_load(&b, p1, err, sizeof err), 0);
    /* every field survived */
    assert_string_equal(b.listen, a.listen);
    assert_string_equal(b.data, a.data);
    assert_string_equal(b.log_level, a.log_level);
    assert_string_equal(b.sync, a.sync);
    assert_int_equal(b.sync_interval_ms, a.sync_interval_ms);
    assert_int_equal(b.wal_segment_bytes, a.wal_segment_bytes);
    assert_int_equal(b.block_window_ms, a.block_window_ms);
    assert_int_equal(b.flush_interval_ms, a.flush_interval_ms);
    assert_int_equal(b.retention_ms, a.retention_ms);
    assert_int_equal(b.query_workers, a.query_workers);
    assert_int_equal(b.max_tags, a.max_tags);
    assert_int_equal(b.max_future_ms, a.max_future_ms);
    assert_string_equal(b.device_tag, a.device_tag);
    assert_string_equal(b.metric_naming, a.metric_naming);
    assert_string_equal(b.auth, a.auth);
    assert_string_equal(b.metrics_auth, a.metrics_auth);
    assert_int_equal(b.max_query_samples, a.max_query_samples);
    /* printing again gives the same text */
    f = fopen(p2, "w");
    bdb_config_print(&b, f);
    fclose(f);
    char t1[8192], t2[8192];
    f = fopen(p1, "r");
    size_t n1 = fread(t1, 1, sizeof t1, f);
    fclose(f);
    f = fopen(p2, "r");
    size_t n2 = fread(t2, 1, sizeof t2, f);
    fclose(f);
    assert_int_equal(n1, n2);
    assert_memory_equal(t1, t2, n1);
    /* one line per key */
    size_t lines = 0;
    for (size_t i = 0; i < n1; i++)
        lines += t1[i] == '\n';
    size_t nkeys = 0;
    for (const char *const *k = bdb_config_keys(); *k; k++)
        nkeys++;
    assert_int_equal(lines, nkeys);
}

static void test_keys_and_help(void **state)
{
    (void)state;
    const char *const *k = bdb_config_keys();
    size_t n = 0;
    int saw_listen = 0, saw_auth = 0;
    for (; k[n]; n++) {
        assert_non_null(bdb_config_help(k[n]));
        assert_true(strlen(bdb_config_help(k[n])) > 10);
        assert_null(strchr(k[n], '-'));
        saw_listen |= !strcmp(k[n], "listen");
        saw_auth |= !strcmp(k[n], "auth");
        /* every key is settable by its own name (value validity aside) */
        bdb_config c;
        bdb_config_default(&c);
        char err[256] = "";
        bdb_config_set(&c, k[n], "1", err, sizeof err);
        assert_null(strstr(err, "unknown setting"));
        for (size_t j = 0; j < n; j++)
            assert_string_not_equal(k[j], k[n]);
    }
    assert_true(n >= 24); /* the 24 keys of the first release; more may come */
    assert_true(saw_listen && saw_auth);
    assert_null(bdb_config_help("nope"));
    assert_null(bdb_config_help("max-body-bytes")); /* help takes the key name */
}

/* A config whose mqtt_route lines are `text`, checked: 0, or -1 with err. */
static int check_routes(const char *text, char *err, size_t errlen)
{
    char path[128];
    snprintf(path, sizeof path, "%s/routes.conf", tmpdir);
    write_file(path, text);
    bdb_config c;
    bdb_config_default(&c);
    if (bdb_config_load(&c, path, err, errlen) != 0)
        return -1;
    return bdb_config_check(&c, err, errlen);
}

static void route_refused(const char *text, const char *want)
{
    char err[1024] = "";
    assert_int_equal(check_routes(text, err, sizeof err), -1);
    if (!strstr(err, want))
        fail_msg("error '%s' does not contain '%s'", err, want);
}

static void test_mqtt_routes(void **state)
{
    (void)state;
    char path[128], err[1024] = "";
    snprintf(path, sizeof path, "%s/routes.conf", tmpdir);
    /* repeated lines accumulate; '#' inside a filter is not a comment */
    write_file(path, "mqtt_route = zigbee2mqtt/+ scheme=+/{device} payload=object tenant=home\n"
                     "# a comment between routes\n"
                     "mqtt_route = $share/g/tele/# scheme=tele/{device}/#  # Tasmota\n");
    bdb_config c;
    bdb_config_default(&c);
    assert_int_equal(bdb_config_load(&c, path, err, sizeof err), 0);
    assert_string_equal(c.mqtt_route, "zigbee2mqtt/+ scheme=+/{device} payload=object "
                                      "tenant=home\n$share/g/tele/# scheme=tele/{device}/#");
    assert_int_equal(bdb_config_check(&c, err, sizeof err), 0);
    /* a flag adds a route to the file's */
    assert_int_equal(bdb_config_set(&c, "mqtt-route", "x/+ scheme=x/{device}", err, sizeof err), 0);
    assert_non_null(strstr(c.mqtt_route, "\nx/+ scheme=x/{device}"));
    /* print -> load gives the same lines */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    bdb_config_print(&c, f);
    fclose(f);
    bdb_config back;
    bdb_config_default(&back);
    assert_int_equal(bdb_config_load(&back, path, err, sizeof err), 0);
    assert_string_equal(back.mqtt_route, c.mqtt_route);
    /* without routes print shows the key commented out, and loading it back keeps none */
    bdb_config_default(&c);
    f = fopen(path, "w");
    bdb_config_print(&c, f);
    fclose(f);
    bdb_config_default(&back);
    assert_int_equal(bdb_config_load(&back, path, err, sizeof err), 0);
    assert_string_equal(back.mqtt_route, "");

    route_refused("mqtt_route = a/+ scheme=a/{device}\nmqtt_route = b/+ qos=2\n",
                  "mqtt_route 2 ('b/+ qos=2'): qos=2: must be 0 or 1");
    route_refused("mqtt_route = a/+ payload=xml\n",
                  "mqtt_route 1 ('a/+ payload=xml'): payload=xml");
    route_refused("mqtt_route = a/+ scheme=a/{device} tenant=bad/name\n",
                  "tenant=bad/name is not a valid name");
    route_refused("mqtt_version = 3.1.1\nmqtt_route = $share/g/a/+\n",
                  "a shared subscription needs mqtt_version = 5");
    route_refused("mqtt_topics = x/+\nmqtt_route = a/+\n",
                  "mqtt_route: leave mqtt_topics, mqtt_topic_scheme and mqtt_formats unset");
    route_refused("mqtt_topic_scheme = {device}/#\nmqtt_route = a/+\n", "leave mqtt_topics");
    route_refused("mqtt_formats = a/+=json\nmqtt_route = a/+\n", "leave mqtt_topics");
    char many[4096] = "";
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "mqtt_route = r%d/+\n", i);
    route_refused(many, "mqtt_route: more than 32 routes");
    /* the lines together are bounded by the field */
    bdb_config_default(&c);
    char line[1100];
    memset(line, 'a', sizeof line - 1);
    line[sizeof line - 1] = '\0';
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++)
        rc = bdb_config_set(&c, "mqtt_route", line, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "mqtt_route: all lines together longer than 8191 bytes"));
    assert_int_equal(bdb_config_set(&c, "mqtt_route", "a\nb", err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_set_kinds),
        cmocka_unit_test(test_set_errors),
        cmocka_unit_test(test_check_rules),
        cmocka_unit_test_setup_teardown(test_load_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_round_trip, setup, teardown),
        cmocka_unit_test(test_keys_and_help),
        cmocka_unit_test_setup_teardown(test_metrics_auth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mqtt_routes, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
