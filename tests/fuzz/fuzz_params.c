/* libFuzzer harness for the query and configuration parameter parsers: times (Unix ms
 * or RFC 3339), durations ("10s", "5m"), resolutions ("1m", "auto") and line-protocol
 * precisions. The input is split at newlines and each piece goes to every parser.
 * Beyond "no crash": a time that parses and lies in years 0000..9999 formats back to
 * RFC 3339 and parses to the same instant; a query time is inside BDB_QT_MIN_MS..
 * BDB_QT_MAX_MS and the handlers' arithmetic on it (an hour or 30 days back, + 1,
 * aligned down to a day) cannot overflow (UBSan aborts if it does); a duration is
 * never negative and its
 * value in plain ms parses to itself; a known resolution's name parses back to it. */
#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "ingest/lineproto.h"
#include "model/bucket.h"
#include "server/config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* 0000-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z: the years RFC 3339 can write. */
#define MIN_RFC3339_MS (-62167219200000LL)
#define MAX_RFC3339_MS 253402300799999LL

static void one(const char *s)
{
    int64_t t;
    int rc = bdb_parse_time_ms(s, &t);
    CHECK(rc == BDB_OK || rc == BDB_ERR_INVALID);
    if (rc == BDB_OK && t >= MIN_RFC3339_MS && t <= MAX_RFC3339_MS) {
        char out[64], again[64];
        bdb_format_time_ms(t, out, sizeof out);
        int64_t t2;
        CHECK(bdb_parse_time_ms(out, &t2) == BDB_OK);
        CHECK(t2 == t);
        snprintf(again, sizeof again, "%" PRId64, t);
        CHECK(bdb_parse_time_ms(again, &t2) == BDB_OK && t2 == t);
    }

    int qr = bdb_parse_query_time(s, &t);
    CHECK(qr == BDB_OK || qr == BDB_ERR_INVALID || qr == BDB_ERR_LIMIT);
    CHECK(qr != BDB_OK || rc == BDB_OK);          /* a query time is a time */
    CHECK(rc != BDB_OK || qr != BDB_ERR_INVALID); /* and a time only too far out */
    if (qr == BDB_OK) {
        CHECK(t >= BDB_QT_MIN_MS && t <= BDB_QT_MAX_MS);
        volatile int64_t w = t - 30 * BDB_MS_DAY; /* h_query, h_fleet defaults */
        w = t + 1;                                /* telemetry_by_tenant bucket */
        w = bdb_align_down(t, BDB_MS_DAY);        /* tier and fleet windows */
        CHECK(w <= t);
    }

    int64_t d;
    if (bdb_config_parse_duration(s, &d) == 0) {
        CHECK(d >= 0);
        char plain[32];
        snprintf(plain, sizeof plain, "%" PRId64 "ms", d);
        int64_t d2;
        CHECK(bdb_config_parse_duration(plain, &d2) == 0 && d2 == d);
    }

    int r = bdb_res_parse(s);
    CHECK(r >= -1);
    if (r >= 0 && r <= BDB_RES_1D) {
        const char *name = bdb_res_name((enum bdb_res)r);
        CHECK(name && bdb_res_parse(name) == r);
    }

    int p = bdb_lp_parse_precision(s);
    CHECK(p >= -1 && p <= BDB_LP_H);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    /* Each line is one parameter value; an embedded NUL ends it early, as in a URL
     * decoded by libmicrohttpd. */
    for (char *line = copy, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        one(line);
    }
    free(copy);
    return 0;
}
