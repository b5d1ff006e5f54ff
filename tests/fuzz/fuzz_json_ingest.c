/* libFuzzer harness for the JSON batch format: no crash, no leak, and the result
 * always agrees with what landed in the batch and with the limits. */
#include "bucketdb/bdb.h"
#include "ingest/json_ingest.h"
#include "model/batch.h"

#include <math.h>
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

static void run(const char *body, size_t size, const bdb_json_limits *l, bdb_batch *b)
{
    bdb_json_result res;
    bdb_batch_reset(b);
    int rc = bdb_json_ingest(body, size, 1700000000000LL, l, b, &res);
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    CHECK(rc == BDB_OK || rc == BDB_ERR_INVALID || rc == BDB_ERR_LIMIT);
    CHECK(memchr(res.first_error, '\0', sizeof res.first_error) != NULL);
    CHECK(n == res.accepted);
    if (rc == BDB_OK)
        CHECK(res.rejected == 0 && !res.fatal && res.first_bad_index == -1);
    if (res.fatal || rc == BDB_ERR_LIMIT)
        CHECK(res.accepted == 0 && res.rejected == 0 && res.first_error[0]);
    if (rc == BDB_ERR_INVALID && !res.fatal)
        CHECK(res.rejected > 0);
    if (res.rejected)
        CHECK(res.first_bad_index >= 0 && res.first_error[0] &&
              (size_t)res.first_bad_index < res.accepted + res.rejected);
    CHECK(res.accepted + res.rejected <= l->max_reports);
    size_t samples = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(r[i].device_len > 0 && r[i].device_len <= l->max_key_len);
        CHECK(r[i].nmetrics <= l->max_metrics && r[i].ntags <= l->max_tags);
        CHECK(r[i].nmetrics > 0 || r[i].state || r[i].nattrs > 0); /* something to store */
        CHECK(!r[i].state || r[i].state_len <= l->max_value_len);
        CHECK(r[i].lineno < res.accepted + res.rejected);
        for (uint32_t j = 0; j < r[i].nmetrics; j++)
            CHECK(isfinite(r[i].metrics[j].value) && r[i].metrics[j].nlen > 0 &&
                  r[i].metrics[j].nlen <= l->max_key_len);
        for (uint32_t j = 0; j < r[i].ntags; j++)
            CHECK(r[i].tags[j].klen > 0 && r[i].tags[j].vlen <= l->max_value_len);
        samples += r[i].nmetrics;
    }
    CHECK(samples == bdb_batch_samples(b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bdb_batch *b;
    static bdb_json_limits def, tiny = {.max_reports = 3,
                                        .max_metrics = 2,
                                        .max_tags = 2,
                                        .max_key_len = 4,
                                        .max_value_len = 4};
    if (!b) {
        b = bdb_batch_new();
        bdb_json_limits_default(&def);
    }
    run((const char *)data, size, &def, b);
    run((const char *)data, size, &tiny, b);
    return 0;
}
