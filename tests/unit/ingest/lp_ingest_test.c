/* lp_ingest: line protocol onto the model. The device tag (default and configured),
 * other tags as device tags, metric naming "<measurement>.<field>" and field-only,
 * numeric/integer/boolean fields as doubles, the "state" string field, other string
 * fields rejecting the line, the max-future limit at its boundary, the receive time for
 * points without one, precisions, invalid device and metric names, and the counts:
 * lines, accepted, rejected, the first bad line's number and message, limits flagged. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/timeutil.h"
#include "bucketdb/bdb.h"
#include "ingest/lineproto.h"
#include "ingest/lp_ingest.h"
#include "model/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW INT64_C(1700000000000)

static bdb_lp_map default_map(void)
{
    bdb_lp_map m = {
        .device_tag = "device", .field_only = 0, .max_future_ms = 3600000, .max_name_bytes = 256};
    return m;
}

struct run {
    bdb_lp_parser *p;
    bdb_batch *b;
    bdb_lp_result res;
    const bdb_report *r;
    size_t n;
};

static void ingest(struct run *x, const char *body, enum bdb_lp_precision prec,
                   const bdb_lp_map *map)
{
    if (!x->p)
        x->p = bdb_lp_parser_new(NULL);
    if (!x->b)
        x->b = bdb_batch_new();
    bdb_batch_reset(x->b);
    assert_int_equal(bdb_lp_ingest(x->p, body, strlen(body), prec, NOW, map, x->b, &x->res),
                     BDB_OK);
    x->r = bdb_batch_reports(x->b, &x->n);
    assert_int_equal(x->n, x->res.accepted);
}

static void done(struct run *x)
{
    bdb_lp_parser_free(x->p);
    bdb_batch_free(x->b);
}

static const bdb_metric_val *metric(const bdb_report *r, const char *name)
{
    for (uint32_t i = 0; i < r->nmetrics; i++)
        if (r->metrics[i].nlen == strlen(name) &&
            !memcmp(r->metrics[i].name, name, r->metrics[i].nlen))
            return &r->metrics[i];
    return NULL;
}

static const char *tag(const bdb_report *r, const char *key)
{
    for (uint32_t i = 0; i < r->ntags; i++)
        if (r->tags[i].klen == strlen(key) && !memcmp(r->tags[i].key, key, r->tags[i].klen))
            return r->tags[i].val;
    return NULL;
}

static void test_basic_mapping(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    ingest(&x,
           "sensor,device=d1,site=berlin temp=21.5,rpm=900i,count=7u,on=true,off=F,"
           "state=\"running\" 1699999999000000000\n",
           BDB_LP_NS, &m);
    assert_int_equal(x.res.lines, 1);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 0);
    assert_int_equal(x.res.first_bad_line, 0);
    assert_string_equal(x.res.first_error, "");
    const bdb_report *r = &x.r[0];
    assert_int_equal(r->device_len, 2);
    assert_string_equal(r->device, "d1");
    assert_int_equal(r->ts_ms, NOW - 1000);
    assert_int_equal(r->lineno, 1);
    /* the device tag is not a device tag of itself */
    assert_int_equal(r->ntags, 1);
    assert_string_equal(tag(r, "site"), "berlin");
    assert_null(tag(r, "device"));
    assert_int_equal(r->nmetrics, 5);
    assert_true(metric(r, "sensor.temp")->value == 21.5);
    assert_true(metric(r, "sensor.rpm")->value == 900.0);
    assert_true(metric(r, "sensor.count")->value == 7.0);
    assert_true(metric(r, "sensor.on")->value == 1.0);
    assert_true(metric(r, "sensor.off")->value == 0.0);
    assert_null(metric(r, "sensor.state"));
    assert_non_null(r->state);
    assert_int_equal(r->state_len, 7);
    assert_string_equal(r->state, "running");
    done(&x);
}

static void test_field_only_naming(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    m.field_only = 1;
    ingest(&x, "sensor,device=d1 temp=1,hum=2\nother,device=d1 temp=3\n", BDB_LP_NS, &m);
    assert_int_equal(x.res.accepted, 2);
    assert_true(metric(&x.r[0], "temp")->value == 1.0);
    assert_true(metric(&x.r[0], "hum")->value == 2.0);
    assert_null(metric(&x.r[0], "sensor.temp"));
    /* with field naming, two measurements feed the same metric */
    assert_true(metric(&x.r[1], "temp")->value == 3.0);
    /* escaped measurement and field names keep their unescaped text */
    m.field_only = 0;
    ingest(&x, "my\\ sensor,device=d\\,1 tot\\=al=4\n", BDB_LP_NS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_string_equal(x.r[0].device, "d,1");
    assert_non_null(metric(&x.r[0], "my sensor.tot=al"));
    done(&x);
}

static void test_device_tag_configured(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    m.device_tag = "host";
    ingest(&x, "cpu,host=h1,device=x usage=1\ncpu,device=d2 usage=2\n", BDB_LP_NS, &m);
    assert_int_equal(x.res.lines, 2);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 1);
    assert_string_equal(x.r[0].device, "h1");
    /* "device" is now an ordinary tag */
    assert_string_equal(tag(&x.r[0], "device"), "x");
    assert_int_equal(x.res.first_bad_line, 2);
    assert_non_null(strstr(x.res.first_error, "missing device tag 'host'"));
    /* a tag whose key merely starts with the device tag is not it */
    ingest(&x, "cpu,hostname=h1 usage=1\n", BDB_LP_NS, &m);
    assert_int_equal(x.res.accepted, 0);
    assert_int_equal(x.res.rejected, 1);
    done(&x);
}

static void test_missing_device(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    ingest(&x, "sensor temp=1 1700000000000\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 1);
    assert_int_equal(x.res.accepted, 0);
    assert_int_equal(x.res.rejected, 1);
    assert_int_equal(x.res.first_bad_line, 1);
    assert_int_equal(x.res.first_is_limit, 0);
    assert_string_equal(x.res.first_error,
                        "unable to parse 'sensor temp=1 1700000000000': missing device tag "
                        "'device'");
    ingest(&x, "sensor,site=a temp=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.rejected, 1);
    done(&x);
}

static void test_state_and_string_fields(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    /* state only: a report without metrics */
    ingest(&x, "pump,device=p1 state=\"off\" 1700000000000\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.r[0].nmetrics, 0);
    assert_string_equal(x.r[0].state, "off");
    assert_int_equal(bdb_batch_samples(x.b), 0);
    /* escapes inside the state string */
    ingest(&x, "pump,device=p1 state=\"say \\\"hi\\\"\"\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_string_equal(x.r[0].state, "say \"hi\"");
    /* any other string field is an attribute named as a metric */
    ingest(&x, "pump,device=p1 rpm=1,fw=\"1.2\",State=\"on\"\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.strings_skipped, 0);
    assert_int_equal(x.r[0].nattrs, 2);
    assert_string_equal(x.r[0].attrs[0].key, "pump.fw");
    assert_string_equal(x.r[0].attrs[0].val, "1.2");
    assert_string_equal(x.r[0].attrs[1].key, "pump.State");
    assert_null(x.r[0].state);
    /* one over the state's limit is skipped and counted; the rest of its line is kept */
    m.max_state_bytes = 4;
    ingest(&x,
           "pump,device=p1,site=a rpm=1,note=\"hello\",state=\"on\"\n"
           "pump,device=p2 rpm=2\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 2);
    assert_int_equal(x.res.accepted, 2);
    assert_int_equal(x.res.strings_skipped, 1);
    assert_string_equal(x.res.first_skipped, "line 1: string field 'note'");
    assert_int_equal(x.r[0].nmetrics, 1);
    assert_string_equal(x.r[0].state, "on");
    /* a line of such strings only stores nothing: it is refused, and says why */
    ingest(&x,
           "pump,device=p1,site=a note=\"hello\"\n"
           "pump,device=p2 rpm=2\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 1);
    assert_int_equal(x.res.strings_skipped, 0);
    assert_non_null(strstr(x.res.first_error, "no field could be stored: string field 'note'"));
    assert_string_equal(x.r[0].device, "p2");
    assert_int_equal(x.r[0].ntags, 0);
    assert_int_equal(x.r[0].nmetrics, 1);
    assert_null(x.r[0].state);
    assert_int_equal(bdb_batch_samples(x.b), 1);
    /* "state" with a number is a metric, not a state */
    ingest(&x, "pump,device=p1 state=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_null(x.r[0].state);
    assert_true(metric(&x.r[0], "pump.state")->value == 1.0);
    /* "State" is another field name: a string there is an attribute */
    ingest(&x, "pump,device=p1 State=\"on\"\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_null(x.r[0].state);
    assert_int_equal(x.r[0].nattrs, 1);
    done(&x);
}

static void test_time_handling(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    /* no timestamp: the server's receive time */
    ingest(&x, "s,device=d v=1\n", BDB_LP_NS, &m);
    assert_int_equal(x.r[0].ts_ms, NOW);
    /* precisions */
    ingest(&x, "s,device=d v=1 1700000000\n", BDB_LP_S, &m);
    assert_int_equal(x.r[0].ts_ms, NOW);
    ingest(&x, "s,device=d v=1 1700000000123456\n", BDB_LP_US, &m);
    assert_int_equal(x.r[0].ts_ms, NOW + 123);
    ingest(&x, "s,device=d v=1 -1\n", BDB_LP_NS, &m); /* floor, not truncation */
    assert_int_equal(x.r[0].ts_ms, -1);

    /* max-future: exactly now + limit is accepted, one ms more is not */
    char body[256];
    snprintf(body, sizeof body, "s,device=d v=1 %lld\ns,device=d v=2 %lld\n",
             (long long)(NOW + 3600000), (long long)(NOW + 3600001));
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 1);
    assert_int_equal(x.res.first_bad_line, 2);
    assert_int_equal(x.r[0].ts_ms, NOW + 3600000);
    assert_non_null(strstr(x.res.first_error, "max-future"));
    assert_int_equal(x.res.first_is_limit, 0);
    /* old data is never refused here; 0 disables the future check */
    snprintf(body, sizeof body, "s,device=d v=1 %lld\ns,device=d v=2 %lld\n",
             (long long)(NOW + 100LL * 86400000), 0LL);
    m.max_future_ms = 0;
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 2);
    /* the stored range (int64 ns) at and one past both ends, with no other limit */
    snprintf(body, sizeof body,
             "s,device=d v=1 %lld\ns,device=d v=2 %lld\ns,device=d v=3 %lld\ns,device=d v=4 %lld\n",
             (long long)BDB_TS_MIN_MS, (long long)BDB_TS_MIN_MS - 1, (long long)BDB_TS_MAX_MS,
             (long long)BDB_TS_MAX_MS + 1);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 2);
    assert_int_equal(x.res.rejected, 2);
    assert_int_equal(x.res.first_bad_line, 2);
    assert_int_equal(x.r[0].ts_ms, BDB_TS_MIN_MS);
    assert_int_equal(x.r[1].ts_ms, BDB_TS_MAX_MS);
    assert_non_null(strstr(x.res.first_error,
                           "timestamp -9223372036855 ms is outside the supported range "
                           "1677-09-21T00:12:43.146Z..2262-04-11T23:47:16.854Z"));
    done(&x);
}

static void test_counts_and_first_error(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    const char *body = "# a comment\n"           /* 1: not a line */
                       "\n"                      /* 2: blank */
                       "s,device=a v=1 1\r\n"    /* 3: ok (CRLF) */
                       "s,device=b v=\n"         /* 4: syntax error */
                       "   \n"                   /* 5: blank */
                       "s v=1\n"                 /* 6: no device */
                       "s,device=c v=2 2\n"      /* 7: ok */
                       "s,device=d note=\"x\"\n" /* 8: an attribute only */
                       "s,device=e v=3 3";       /* 9: ok, no final newline */
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 6);
    assert_int_equal(x.res.accepted, 4);
    assert_int_equal(x.res.rejected, 2);
    assert_int_equal(x.res.first_bad_line, 4);
    assert_int_equal(x.res.first_is_limit, 0);
    assert_true(strncmp(x.res.first_error, "unable to parse 's,device=b v=': ", 33) == 0);
    assert_int_equal(x.n, 4);
    assert_string_equal(x.r[0].device, "a");
    assert_int_equal(x.r[0].lineno, 3);
    assert_string_equal(x.r[1].device, "c");
    assert_int_equal(x.r[1].lineno, 7);
    assert_string_equal(x.r[2].device, "d");
    assert_int_equal(x.r[2].nattrs, 1);
    assert_string_equal(x.r[3].device, "e");
    assert_int_equal(x.r[3].lineno, 9);
    assert_int_equal(x.r[3].ts_ms, 3);

    /* an empty body and a body of comments */
    ingest(&x, "", BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 0);
    assert_int_equal(x.res.accepted, 0);
    assert_int_equal(x.res.first_bad_line, 0);
    ingest(&x, "#x\n\n#y", BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 0);
    done(&x);
}

static void test_limits_and_long_lines(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_limits lim;
    bdb_lp_limits_default(&lim);
    lim.max_line_len = 300;
    lim.max_tags = 2;
    x.p = bdb_lp_parser_new(&lim);
    bdb_lp_map m = default_map();
    /* the first error is a limit: flagged; the shown line is cut at 200 bytes */
    char body[1024];
    char longline[320];
    memset(longline, 'a', sizeof longline);
    memcpy(longline, "s,device=d v=1,", 15);
    longline[310] = '\0';
    snprintf(body, sizeof body, "s,device=d v=1\n%s\ns,device=d,a=1,b=2 v=1\n", longline);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 3);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 2);
    assert_int_equal(x.res.first_bad_line, 2);
    assert_int_equal(x.res.first_is_limit, 1);
    assert_non_null(strstr(x.res.first_error, "...': line length 310 exceeds"));
    assert_true(strlen(x.res.first_error) < sizeof x.res.first_error);
    /* a tag-count limit as the first error is flagged too */
    ingest(&x, "s,device=d,a=1,b=2 v=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.first_is_limit, 1);
    assert_non_null(strstr(x.res.first_error, "max-tags"));
    /* a syntax error first, a limit second: not flagged */
    snprintf(body, sizeof body, "s,device=d v=\n%s\n", longline);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.rejected, 2);
    assert_int_equal(x.res.first_is_limit, 0);
    done(&x);
}

static void test_names(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    m.max_name_bytes = 8;
    /* device: 1..max bytes, no control characters */
    ingest(&x,
           "s,device=12345678 v=1\n"
           "s,device=123456789 v=1\n"
           "s,device=a\x01z v=1\n"
           "s,device=caf\xc3\xa9 v=1\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 2);
    assert_int_equal(x.res.rejected, 2);
    assert_int_equal(x.res.first_bad_line, 2);
    assert_non_null(strstr(x.res.first_error, "device name must be 1..8 bytes"));
    assert_string_equal(x.r[0].device, "12345678");
    assert_string_equal(x.r[1].device, "caf\xc3\xa9");
    /* metric names: field-only max bytes; measurement.field at most 2 x max + 1 */
    m.field_only = 1;
    ingest(&x, "s,device=d abcdefgh=1\ns,device=d abcdefghi=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.first_bad_line, 2);
    assert_non_null(strstr(x.res.first_error, "metric name for field 'abcdefghi'"));
    m.field_only = 0;
    ingest(&x, "abcdefgh,device=d abcdefgh=1\nabcdefgh,device=d abcdefghi=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_non_null(metric(&x.r[0], "abcdefgh.abcdefgh"));
    assert_int_equal(x.res.first_bad_line, 2);
    /* a control character in a field key makes the metric name invalid */
    ingest(&x, "s,device=d a\x02=1\n", BDB_LP_MS, &m);
    assert_int_equal(x.res.rejected, 1);
    assert_non_null(strstr(x.res.first_error, "metric name"));
    done(&x);
}

/* Line protocol is UTF-8: a line with bytes that are not is refused with the column
 * of the first one, whichever part of the line holds them; the lines around it stay. */
static void test_invalid_utf8_refused(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    static const char *bad[] = {
        "s,device=a\xff v=1\n",            /* device */
        "s,device=d,site=x\xfe v=1\n",     /* tag value */
        "s,device=d,k\xc3=1 v=1\n",        /* tag key, cut short */
        "\xed\xa0\x80,device=d v=1\n",     /* measurement: a surrogate */
        "s,device=d \xc0\xaf=1\n",         /* field key: overlong */
        "s,device=d state=\"o\xf5n\" 1\n", /* the state string */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "s,device=ok v=1\n%ss,device=ok2 v=2\n", bad[i]);
        ingest(&x, body, BDB_LP_MS, &m);
        assert_int_equal(x.res.accepted, 2);
        assert_int_equal(x.res.rejected, 1);
        assert_int_equal(x.res.first_bad_line, 2);
        assert_non_null(strstr(x.res.first_error, "invalid UTF-8 at column "));
        assert_string_equal(x.r[1].device, "ok2");
    }
    ingest(&x, "s,device=d,site=x\xfe v=1\n", BDB_LP_MS, &m);
    assert_non_null(strstr(x.res.first_error, "invalid UTF-8 at column 18 (byte 0xfe)"));
    /* well-formed multibyte names are taken as they are */
    ingest(&x,
           "Temp\xc3\xa9,device=Pumpe-Gr\xc3\xb6\xc3\x9f"
           "e,ort=K\xc3\xb6ln v\xe2\x82\xac=1,state=\"\xf0\x9f\x94\xa5\"\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_string_equal(x.r[0].device, "Pumpe-Gr\xc3\xb6\xc3\x9f"
                                       "e");
    assert_string_equal(tag(&x.r[0], "ort"), "K\xc3\xb6ln");
    assert_non_null(metric(&x.r[0], "Temp\xc3\xa9.v\xe2\x82\xac"));
    assert_string_equal(x.r[0].state, "\xf0\x9f\x94\xa5");
    done(&x);
}

/* measurement.field may be up to 2 x max_name_bytes + 1 bytes: also past the 1 KiB
 * the ingest keeps on its stack (such names were once refused as too long). */
static void test_long_metric_names(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_limits lim;
    bdb_lp_limits_default(&lim);
    lim.max_key_len = 2000;
    x.p = bdb_lp_parser_new(&lim);
    bdb_lp_map m = default_map();
    m.max_name_bytes = 2000;
    size_t cap = 16384;
    char *body = malloc(cap), *meas = malloc(2001), *field = malloc(2002), *want = malloc(4100);
    memset(meas, 'm', 2000);
    meas[2000] = 0;
    memset(field, 'f', 2001);
    field[2001] = 0;
    /* 2,000 + 1 + 2,000 bytes: at the limit; the field one byte longer: refused */
    field[2000] = 0;
    snprintf(body, cap, "%s,device=d %s=1\n%s,device=d %sg=2\n", meas, field, meas, field);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 1);
    snprintf(want, 4100, "%s.%s", meas, field);
    assert_int_equal(x.r[0].metrics[0].nlen, 4001);
    assert_memory_equal(x.r[0].metrics[0].name, want, 4001);
    /* field-only naming: the field key alone, up to max_name_bytes */
    m.field_only = 1;
    snprintf(body, cap, "s,device=d %s=1\n", field);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.r[0].metrics[0].nlen, 2000);
    free(body);
    free(meas);
    free(field);
    free(want);
    done(&x);
}

/* A rejected line in the middle of a body leaves the reports before and after it
 * intact, and a rejected line's tags and metrics do not leak into the next report. */
static void test_bad_line_leaves_no_trace(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    ingest(&x,
           "s,device=a,zone=1 v=1,w=2 10\n"
           "s,device=b,zone=2 v=1,bad=1x,w=2 20\n"
           "s,device=c v=3 30\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.n, 2);
    assert_string_equal(x.r[0].device, "a");
    assert_int_equal(x.r[0].ntags, 1);
    assert_int_equal(x.r[0].nmetrics, 2);
    assert_string_equal(x.r[1].device, "c");
    assert_int_equal(x.r[1].ntags, 0);
    assert_int_equal(x.r[1].nmetrics, 1);
    assert_true(x.r[1].metrics[0].value == 3.0);
    assert_int_equal(bdb_batch_samples(x.b), 3);
    done(&x);
}

/* A state over several physical lines is one report with the newlines in its text;
 * errors after it name the physical line (issue 19, item 6). */
static void test_multiline_state(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    ingest(&x,
           "pump,device=p1 state=\"a\npump,device=p1 rpm=2 T\nb\" 1700000000000\n"
           "pump,device=p2 rpm=oops 1700000000000\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.lines, 2);
    assert_int_equal(x.res.accepted, 1);
    assert_int_equal(x.res.rejected, 1);
    assert_int_equal(x.res.first_bad_line, 4);
    assert_int_equal(x.r[0].nmetrics, 0);
    assert_int_equal(x.r[0].state_len, strlen("a\npump,device=p1 rpm=2 T\nb"));
    assert_memory_equal(x.r[0].state, "a\npump,device=p1 rpm=2 T\nb", x.r[0].state_len);
    done(&x);
}

/* Skipped strings over several lines: the first one named, the count summed; a field
 * name over 100 bytes cut to 100 in both messages. */
static void test_skipped_strings_named_once(void **state)
{
    (void)state;
    struct run x = {0};
    bdb_lp_map m = default_map();
    m.max_state_bytes = 4;
    ingest(&x,
           "pump,device=p1 rpm=1,note=\"hello\"\n"
           "pump,device=p2 rpm=2,memo=\"world!\",text=\"again\"\n",
           BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 2);
    assert_int_equal(x.res.strings_skipped, 3);
    assert_string_equal(x.res.first_skipped, "line 1: string field 'note'");
    char key[131], body[400], want[200];
    memset(key, 'k', 130);
    key[130] = '\0';
    snprintf(body, sizeof body, "pump,device=p1 rpm=1,%s=\"hello\"\n", key);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.accepted, 1);
    snprintf(want, sizeof want, "line 1: string field '%.100s'", key);
    assert_string_equal(x.res.first_skipped, want);
    snprintf(body, sizeof body, "pump,device=p1 %s=\"hello\"\n", key);
    ingest(&x, body, BDB_LP_MS, &m);
    assert_int_equal(x.res.rejected, 1);
    snprintf(want, sizeof want, "no field could be stored: string field '%.100s' (only", key);
    if (!strstr(x.res.first_error, want))
        fail_msg("'%s' lacks '%s'", x.res.first_error, want);
    done(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_mapping),
        cmocka_unit_test(test_field_only_naming),
        cmocka_unit_test(test_device_tag_configured),
        cmocka_unit_test(test_missing_device),
        cmocka_unit_test(test_state_and_string_fields),
        cmocka_unit_test(test_time_handling),
        cmocka_unit_test(test_counts_and_first_error),
        cmocka_unit_test(test_limits_and_long_lines),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_bad_line_leaves_no_trace),
        cmocka_unit_test(test_multiline_state),
        cmocka_unit_test(test_invalid_utf8_refused),
        cmocka_unit_test(test_long_metric_names),
        cmocka_unit_test(test_skipped_strings_named_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
