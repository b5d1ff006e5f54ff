/* cass_late: late events into and out of late_arrivals (cass_late.h). */
#include "storage/cassandra/cass_late.h"
#include "storage/cassandra/cass_state.h" /* cass_column_exists */
#include "storage/cassandra/cass_state_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/bucket.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TTL_S INT64_C(630720000) /* Cassandra's limit: 20 years */

int64_t cass_late_ttl_s(int64_t ts, int64_t ttl_ms, int64_t now)
{
    if (ttl_ms <= 0)
        return 0;
    if (ts > INT64_MAX - ttl_ms) /* an event far in the future: the longest TTL */
        return MAX_TTL_S;
    int64_t left = ts + ttl_ms - now;
    if (left < 1000) /* under a second left: the raw sample is gone (or going) too */
        return -1;
    return left / 1000 > MAX_TTL_S ? MAX_TTL_S : left / 1000;
}

int64_t cass_late_bucket(int64_t arrived)
{
    return bdb_align_down(arrived, BDB_MS_DAY);
}

void cass_late_upgrade(cql_session *sess, const char *ks)
{
    char q[256];
    static const char *const cols[][2] = {{"device_newest", "timestamp"},
                                          {"arrival_seq", "bigint"}};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        if (cass_column_exists(sess, ks, "late_arrivals", cols[i][0]) == 1)
            continue; /* the usual case (cass_state.h) */
        snprintf(q, sizeof q, "ALTER TABLE %s.late_arrivals ADD %s %s", ks, cols[i][0], cols[i][1]);
        cql_call c = {.query = q, .consistency = CQL_ONE, .idempotent = 1, .unprepared = 1};
        cql_response *r = NULL;
        /* Refused when the column exists after all. */
        if (cql_session_execute(sess, &c, &r) == BDB_OK) {
            BDB_INFO("cassandra: added late_arrivals.%s (a keyspace from an older bucketdb)",
                     cols[i][0]);
            cql_session_wait_schema(sess, 30000);
        }
        cql_response_free(r);
    }
}

int cass_late_put(bdb_sink *s, const bdb_sink_late *v, size_t n)
{
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK || n == 0)
        return rc;
    char q[512];
    snprintf(
        q, sizeof q,
        "INSERT INTO %s.late_arrivals (tenant_id, device_id, bucket, event_time, "
        "metric_name, arrived_at, device_newest, arrival_seq) VALUES (?, ?, ?, ?, '', ?, ?, ?) "
        "USING TTL ?",
        c.ks);
    int64_t now = bdb_now_ms();
    vb b = {0};
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        const bdb_sink_late *e = &v[i];
        int64_t ttl = cass_late_ttl_s(e->ts, e->ttl_ms, now);
        if (ttl < 0)
            continue;
        vb_text(&b, e->tenant);
        vb_text(&b, e->device);
        vb_long(&b, cass_late_bucket(e->arrived));
        vb_long(&b, e->ts);
        vb_long(&b, e->arrived);
        vb_long(&b, e->newest);
        vb_long(&b, (int64_t)e->seq);
        vb_int(&b, (int32_t)ttl);
        cql_bytes *vals = vb_out(&b);
        cql_call call = {.query = q,
                         .values = vals,
                         .nvalues = (uint16_t)b.n,
                         .consistency = c.write_cl,
                         .idempotent = 1};
        cql_response *r = NULL;
        rc = cql_session_execute(c.sess, &call, &r);
        if (rc != BDB_OK)
            BDB_WARN("cassandra: late event of %s/%s at %lld not written: %s", e->tenant, e->device,
                     (long long)e->ts,
                     r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                          : bdb_strerror(rc));
        cql_response_free(r);
        free(vals);
        bdb_buf_reset(&b.b);
        b.n = 0;
    }
    vb_free(&b);
    return rc;
}

int cass_late_list(bdb_sink *s, const char *tenant, const char *device,
                   void (*fn)(void *ud, const bdb_sink_late *e), void *ud)
{
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK)
        return rc;
    char q[256];
    snprintf(q, sizeof q,
             "SELECT tenant_id, device_id, event_time, device_newest, arrived_at, arrival_seq FROM "
             "%s.late_arrivals",
             c.ks);
    vb v = {0};
    bdb_buf rk;
    bdb_buf_init(&rk);
    rowset r = {.ncols = 6};
    bdb_buf_init(&r.arena);
    rc = cs_query(&c, q, &v, &rk, &r);
    for (size_t i = 0; rc == BDB_OK && i < r.nrows; i++) {
        char *tn = cs_cell_str(rs_cell(&r, i, 0)), *dn = cs_cell_str(rs_cell(&r, i, 1));
        if (tn && dn && strcmp(tn, tenant) == 0 && (!device || strcmp(dn, device) == 0)) {
            int64_t ts = cs_cell_ms(rs_cell(&r, i, 2), INT64_MIN);
            bdb_sink_late e = {tn,
                               dn,
                               ts,
                               cs_cell_ms(rs_cell(&r, i, 3), ts),
                               cs_cell_ms(rs_cell(&r, i, 4), INT64_MIN),
                               (uint64_t)cs_cell_ms(rs_cell(&r, i, 5), 0), /* a bigint */
                               0};
            fn(ud, &e);
        }
        free(tn);
        free(dn);
    }
    rs_free(&r);
    vb_free(&v);
    bdb_buf_free(&rk);
    return rc;
}
