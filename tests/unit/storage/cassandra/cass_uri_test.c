/* cass_uri: the Cassandra storage URI. Defaults for what it leaves out, every key
 * read into its setting, every numeric range at and one past its ends, text values
 * at their field's size and one past (refused, not cut), and the cross-key rules. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cass_uri.h"
#include "storage/cassandra/cql/wire/cql_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static int parse(const char *uri, cass_uri *o)
{
    err[0] = 0;
    return cass_uri_parse(uri, o, err, sizeof err);
}

static void refused(const char *uri, const char *needle)
{
    cass_uri o;
    int rc = parse(uri, &o);
    if (rc != BDB_ERR_INVALID || !strstr(err, needle))
        fail_msg("%.120s: rc %d, err '%s', want '%s'", uri, rc, err, needle);
}

static void test_defaults(void **state)
{
    (void)state;
    unsetenv("CQL_PASSWORD");
    cass_uri o;
    assert_int_equal(parse("cassandra://127.0.0.1", &o), BDB_OK);
    assert_string_equal(o.hosts, "127.0.0.1");
    assert_string_equal(o.ks, "bucketdb");
    assert_int_equal(o.write_cl, CQL_LOCAL_QUORUM);
    assert_int_equal(o.read_cl, CQL_LOCAL_QUORUM);
    assert_int_equal(o.inflight, 16);
    assert_int_equal(o.batch_rows, 100);
    assert_int_equal(o.pool, 2);
    assert_int_equal(o.retries, 6);
    assert_int_equal(o.timeout_ms, 12000);
    assert_int_equal(o.create_schema, 1);
    assert_int_equal(o.bucket_s, 3600);
    assert_int_equal(o.offline_start, 0);
    assert_int_equal(o.ack_quorum, 0); /* ack=wal */
    assert_int_equal(o.tls, 0);
    assert_int_equal(o.tls_verify, 1);
    assert_string_equal(o.password, "");
    /* the password from the environment, the URI's first */
    setenv("CQL_PASSWORD", "from-env", 1);
    assert_int_equal(parse("cassandra://h/ks", &o), BDB_OK);
    assert_string_equal(o.password, "from-env");
    assert_int_equal(parse("cassandra://h/ks?password=p", &o), BDB_OK);
    assert_string_equal(o.password, "p");
    unsetenv("CQL_PASSWORD");
}

static void test_every_key(void **state)
{
    (void)state;
    cass_uri o;
    assert_int_equal(parse("cassandra://a:9042,b:9043/tele_1?dc=eu1&consistency=ONE"
                           "&replication=eu1:3,us1:2&user=u&password=pw&inflight=256"
                           "&batch_rows=1000&pool=8&retries=0&timeout_ms=100&schema=none"
                           "&bucket=2h&offline_start=true&tls=true&ca=/c.pem&cert=/x.pem"
                           "&key=/k.pem&tls_verify=false&ack=quorum",
                           &o),
                     BDB_OK);
    assert_string_equal(o.hosts, "a:9042,b:9043");
    assert_string_equal(o.ks, "tele_1");
    assert_string_equal(o.dc, "eu1");
    assert_int_equal(o.write_cl, CQL_ONE);
    assert_int_equal(o.read_cl, CQL_ONE);
    assert_string_equal(o.replication, "eu1:3,us1:2");
    assert_string_equal(o.user, "u");
    assert_string_equal(o.password, "pw");
    assert_int_equal(o.inflight, 256);
    assert_int_equal(o.batch_rows, 1000);
    assert_int_equal(o.pool, 8);
    assert_int_equal(o.retries, 0);
    assert_int_equal(o.timeout_ms, 100);
    assert_int_equal(o.create_schema, 0);
    assert_int_equal(o.bucket_s, 7200);
    assert_int_equal(o.offline_start, 1);
    assert_int_equal(o.tls, 1);
    assert_string_equal(o.ca, "/c.pem");
    assert_string_equal(o.cert, "/x.pem");
    assert_string_equal(o.key, "/k.pem");
    assert_int_equal(o.tls_verify, 0);
    assert_int_equal(o.ack_quorum, 1);
    assert_int_equal(parse("cassandra://h/k?ack=wal", &o), BDB_OK);
    assert_int_equal(o.ack_quorum, 0);
    assert_int_equal(parse("cassandra://h/k?write_consistency=ALL&read_consistency=LOCAL_ONE", &o),
                     BDB_OK);
    assert_int_equal(o.write_cl, CQL_ALL);
    assert_int_equal(o.read_cl, CQL_LOCAL_ONE);
}

static void test_ranges(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        int lo, hi;
    } r[] = {{"inflight", 1, 256},
             {"batch_rows", 1, 1000},
             {"pool", 1, 8},
             {"retries", 0, 20},
             {"timeout_ms", 100, 600000}};
    cass_uri o;
    char uri[256], want[128];
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        int ends[2] = {r[i].lo, r[i].hi};
        for (int e = 0; e < 2; e++) {
            snprintf(uri, sizeof uri, "cassandra://h/k?%s=%d", r[i].key, ends[e]);
            assert_int_equal(parse(uri, &o), BDB_OK);
            snprintf(uri, sizeof uri, "cassandra://h/k?%s=%d", r[i].key,
                     e ? ends[e] + 1 : ends[e] - 1);
            snprintf(want, sizeof want, "%s=%d must be an integer in %d..%d", r[i].key,
                     e ? ends[e] + 1 : ends[e] - 1, r[i].lo, r[i].hi);
            refused(uri, want);
        }
        snprintf(uri, sizeof uri, "cassandra://h/k?%s=12x", r[i].key);
        refused(uri, "must be an integer");
        snprintf(uri, sizeof uri, "cassandra://h/k?%s=", r[i].key);
        refused(uri, "must be an integer");
    }
}

/* fmt (one %s) with n bytes of fill parses (into *o); with n + 1 it is refused with
 * want in the message. */
static void at_limit_then_refused(const char *fmt, char fill, size_t n, const char *want,
                                  cass_uri *o)
{
    char *v = malloc(n + 2), *uri = malloc(n + 256);
    assert_non_null(v);
    assert_non_null(uri);
    memset(v, fill, n + 1);
    v[n + 1] = 0;
    snprintf(uri, n + 256, fmt, v);
    refused(uri, want);
    v[n] = 0;
    snprintf(uri, n + 256, fmt, v);
    assert_int_equal(parse(uri, o), BDB_OK);
    free(uri);
    free(v);
}

/* Text values at their field's size are kept whole; one byte more is refused (they
 * were cut: a password cut short fails authentication with no word of why). */
static void test_text_lengths(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        size_t max;
    } t[] = {{"dc", 63}, {"replication", 511}, {"user", 127}, {"password", 255}};
    cass_uri o;
    char *uri = malloc(4096), *v = malloc(1100), want[128];
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        memset(v, 'v', t[i].max);
        v[t[i].max] = 0;
        snprintf(uri, 4096, "cassandra://h/k?%s=%s", t[i].key, v);
        assert_int_equal(parse(uri, &o), BDB_OK);
        const char *got = !strcmp(t[i].key, "dc")            ? o.dc
                          : !strcmp(t[i].key, "replication") ? o.replication
                          : !strcmp(t[i].key, "user")        ? o.user
                                                             : o.password;
        assert_int_equal(strlen(got), t[i].max);
        snprintf(uri, 4096, "cassandra://h/k?%s=%sv", t[i].key, v);
        snprintf(want, sizeof want, "%s= is longer than %zu bytes", t[i].key, t[i].max);
        refused(uri, want);
    }
    memset(v, 'p', 256);
    v[256] = 0;
    setenv("CQL_PASSWORD", v, 1);
    refused("cassandra://h/k", "$CQL_PASSWORD= is longer than 255 bytes");
    unsetenv("CQL_PASSWORD");
    /* hosts: 1,023 bytes, then one more */
    at_limit_then_refused("cassandra://%s/k", 'h', 1023, "the host list is longer than 1023 bytes",
                          &o);
    assert_int_equal(strlen(o.hosts), 1023);
    /* keyspace: 48 characters, then 49 */
    at_limit_then_refused("cassandra://h/%s", 'k', 48, "keyspace longer than 48 characters", &o);
    /* ca/cert/key: 511 bytes of path */
    at_limit_then_refused("cassandra://h/k?tls=true&ca=%s", 'c', 511,
                          "ca= needs a file path of 1..511 bytes", &o);
    free(uri);
    free(v);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("http://h/k", "must start with cassandra://");
    refused("cassandra:///k", "no host");
    refused("cassandra://h/k-s", "letters, digits and _ only");
    refused("cassandra://h/k?inflight", "'inflight' is not key=value");
    refused("cassandra://h/k?nope=1", "unknown key 'nope'");
    refused("cassandra://h/k?ack=all", "ack=all must be wal or quorum");
    refused("cassandra://h/k?ack=", "ack= must be wal or quorum");
    refused("cassandra://h/k?consistency=SERIAL", "is not a consistency level");
    refused("cassandra://h/k?consistency=MOST", "is not a consistency level");
    refused("cassandra://h/k?schema=drop", "schema=drop must be create or none");
    refused("cassandra://h/k?offline_start=yes", "offline_start=yes must be true or false");
    refused("cassandra://h/k?tls=1", "tls=1 must be true or false");
    refused("cassandra://h/k?bucket=soon", "bucket=soon is not a duration");
    refused("cassandra://h/k?bucket=0s", "is not a duration");
    refused("cassandra://h/k?ca=/c.pem", "need tls=true");
    refused("cassandra://h/k?tls_verify=false", "need tls=true");
    refused("cassandra://h/k?tls=true&key=/k.pem", "key= needs cert=");
    refused("cassandra://h/k?tls=true&cert=", "cert= needs a file path");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults), cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_ranges),   cmocka_unit_test(test_text_lengths),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
