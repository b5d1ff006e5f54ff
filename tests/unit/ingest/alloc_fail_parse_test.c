/* alloc_fail_parse: the parsers under allocation failure, every allocation in turn.
 *
 * A line-protocol body (escapes, a long number that takes the strtod path, tags,
 * several fields, a state, a bad line) and a JSON body (tags, metrics, states, a
 * rejected report) are parsed into a batch with allocation N failing
 * (common/alloc.h), for N = 1, 2, ... until a run reaches no injected failure. Each
 * run must return BDB_OK with exactly the batch an unhindered parse gives, or
 * BDB_ERR_NOMEM; never a partial batch presented as complete. The ASan build checks
 * that no run leaks. Figures: "alloc sweep <parser>: ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "ingest/json_ingest.h"
#include "ingest/lineproto.h"
#include "ingest/lp_ingest.h"
#include "model/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOW INT64_C(1700000000000)
#define MAX_SITES 5000

#if defined(__SANITIZE_ADDRESS__)
#define LEAKS "0 leaks"
#else
#define LEAKS "leaks unchecked (release build; the ASan build checks them)"
#endif

static const char LP_BODY[] =
    "env,device=d\\ 1,site=ber\\,lin temp=21.5,hum=40i,state=\"on\" 1700000000000\n"
    "env,device=d2 temp=1.00000000000000000000000000000000000000000000000000000000000000001 "
    "1700000001000\n"
    "# a comment\n"
    "env,site=x temp=1 1700000002000\n" /* no device tag: rejected, counted */
    "env,device=d3,a=1,b=2,c=3 f1=1,f2=2,f3=3,f4=4,f5=5,f6=6,f7=7,f8=8 1700000003000\n";

static const char JSON_BODY[] =
    "{\"reports\": ["
    "{\"device\": \"d1\", \"time\": 1700000000000, \"tags\": {\"site\": \"berlin\"},"
    " \"metrics\": {\"env.temp\": 21.5, \"env.on\": true}, \"state\": \"on\"},"
    "{\"device\": \"d2\", \"time\": 1700000001000, \"metrics\": {\"env.temp\": 1e20}},"
    "{\"device\": \"d3\", \"time\": \"not a time\", \"metrics\": {\"x\": 1}}"
    "]}";

/* The batch as text, to compare runs. */
static void dump(const bdb_batch *b, char *out, size_t cap)
{
    size_t n, len = 0;
    const bdb_report *r = bdb_batch_reports(b, &n);
    out[0] = 0;
    for (size_t i = 0; i < n && len < cap; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%.*s@%lld state=%s", (int)r[i].device_len,
                                r[i].device, (long long)r[i].ts_ms, r[i].state ? r[i].state : "-");
        for (uint32_t k = 0; k < r[i].ntags && len < cap; k++)
            len += (size_t)snprintf(out + len, cap - len, " %s=%s", r[i].tags[k].key,
                                    r[i].tags[k].val);
        for (uint32_t k = 0; k < r[i].nmetrics && len < cap; k++)
            len += (size_t)snprintf(out + len, cap - len, " %s:%.17g", r[i].metrics[k].name,
                                    r[i].metrics[k].value);
        if (len < cap)
            len += (size_t)snprintf(out + len, cap - len, "\n");
    }
}

/* One parse; the batch text in out (when it returns BDB_OK). */
static int parse(int json, char *out, size_t cap, size_t *rejected)
{
    bdb_batch *b = bdb_batch_new();
    if (!b)
        return BDB_ERR_NOMEM;
    int rc;
    if (json) {
        bdb_json_result jr;
        rc = bdb_json_ingest(JSON_BODY, strlen(JSON_BODY), NOW, NULL, b, &jr);
        if (rc == BDB_ERR_INVALID && !jr.fatal) /* one report rejected: the others stay */
            rc = BDB_OK;
        *rejected = jr.rejected;
    } else {
        bdb_lp_parser *p = bdb_lp_parser_new(NULL);
        bdb_lp_map map = {"device", NULL, 0, 0, 256, 1024, 0};
        bdb_lp_result lr;
        rc = p ? bdb_lp_ingest(p, LP_BODY, strlen(LP_BODY), BDB_LP_MS, NOW, &map, b, &lr)
               : BDB_ERR_NOMEM;
        bdb_lp_parser_free(p);
        *rejected = p ? lr.rejected : 0;
    }
    if (rc == BDB_OK)
        dump(b, out, cap);
    bdb_batch_free(b);
    return rc;
}

static void sweep(int json)
{
    static char want[8192], got[8192];
    size_t want_rej, rej;
    assert_int_equal(parse(json, want, sizeof want, &want_rej), BDB_OK);
    assert_int_equal(want_rej, 1);
    int n, nomem = 0;
    for (n = 1; n <= MAX_SITES; n++) {
        bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, (uint64_t)n);
        int rc = parse(json, got, sizeof got, &rej);
        bdb_alloc_fail_disarm();
        int hit = bdb_alloc_fail_injected() > 0;
        if (rc == BDB_ERR_NOMEM) {
            assert_true(hit);
            nomem++;
            continue;
        }
        assert_int_equal(rc, BDB_OK);
        /* a run that did not fail answers the whole batch, exactly */
        assert_string_equal(got, want);
        assert_int_equal(rej, want_rej);
        if (!hit)
            break;
    }
    assert_true(n <= MAX_SITES && n > 1);
    printf("alloc sweep %s parse into a batch: %d allocation sites failed in turn (%d answered "
           "NOMEM), 0 crashes, %s, 0 partial batches\n",
           json ? "JSON" : "line protocol", n - 1, nomem, LEAKS);
}

static void lp_sweep(void **state)
{
    (void)state;
    sweep(0);
}

static void json_sweep(void **state)
{
    (void)state;
    sweep(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lp_sweep),
        cmocka_unit_test(json_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
