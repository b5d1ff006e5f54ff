/* cass_state: current state, device registry and event counts on Cassandra
 * (cass_state.h): the pure rules, the CQL helpers both files use, the schema upgrade
 * and the writes. The reads are in cass_state_read.c. */
#include "storage/cassandra/cass_state.h"
#include "storage/cassandra/cass_sink.h"
#include "storage/cassandra/cass_state_int.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/bucket.h"
#include "storage/cassandra/cql/wire/cql_proto.h"
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"
#include "storage/cassandra/schema.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define PAGE_ROWS 5000

/* ---------------------------------------------------------------- pure helpers */

int cass_state_action(const char *old, int64_t old_ts, const char *state, int64_t state_ts)
{
    if (!old)
        return CASS_STATE_WRITE;
    int same = strcmp(old, state) == 0;
    if (old_ts > state_ts || (old_ts == state_ts && !same))
        return CASS_STATE_SKIP;
    return same ? CASS_STATE_WRITE : CASS_STATE_MOVE;
}

const char *cass_state_key(const char *state, char out[CASS_STATE_KEY_MAX])
{
    size_t n = strlen(state);
    if (n <= CASS_STATE_KEY_SHORT) {
        memcpy(out, state, n + 1);
        return out;
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(state, n));
    static const char hex[] = "0123456789abcdef";
    char *p = out + sprintf(out, "#xxh128:");
    for (size_t i = 0; i < sizeof c.digest; i++) {
        *p++ = hex[c.digest[i] >> 4];
        *p++ = hex[c.digest[i] & 15];
    }
    *p = 0;
    return out;
}

int64_t cass_state_usec(int64_t ms)
{
    if (ms > INT64_MAX / 1000)
        return INT64_MAX;
    if (ms < INT64_MIN / 1000)
        return INT64_MIN + 1;
    return ms * 1000;
}

int cass_count_days(int64_t from, int64_t to, int64_t max_days, int64_t *first, int64_t *last)
{
    /* A bucket [s, s + size) with size <= 1 day overlaps [from, to) only when
     * from - 1 day < s < to; its partition is the day of s. */
    int64_t lo = from > INT64_MIN + BDB_MS_DAY ? from - BDB_MS_DAY + 1 : INT64_MIN + BDB_MS_DAY;
    int64_t a = bdb_floor_div(lo, BDB_MS_DAY), b = bdb_floor_div(to - 1, BDB_MS_DAY);
    if (b < a || b - a >= max_days)
        return -1;
    *first = a * BDB_MS_DAY;
    *last = b * BDB_MS_DAY;
    return 0;
}

/* ---------------------------------------------------------------- values */

void vb_mark(vb *v, size_t start)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 32;
        v->off = realloc(v->off, (size_t)v->cap * sizeof *v->off);
        v->len = realloc(v->len, (size_t)v->cap * sizeof *v->len);
        if (!v->off || !v->len)
            abort();
    }
    v->off[v->n] = start;
    v->len[v->n] = (int32_t)(v->b.len - start);
    v->n++;
}

void vb_free(vb *v)
{
    bdb_buf_free(&v->b);
    free(v->off);
    free(v->len);
    memset(v, 0, sizeof *v);
}

void vb_raw(vb *v, const void *p, size_t n)
{
    size_t st = v->b.len;
    bdb_buf_append(&v->b, p, n);
    vb_mark(v, st);
}

void vb_text(vb *v, const char *s)
{
    vb_raw(v, s, strlen(s));
}

void vb_long(vb *v, int64_t x)
{
    uint8_t t[8];
    cql_be64(t, (uint64_t)x);
    vb_raw(v, t, 8);
}

void vb_int(vb *v, int32_t x)
{
    uint8_t t[4];
    cql_be32(t, (uint32_t)x);
    vb_raw(v, t, 4);
}

void vb_double(vb *v, double x)
{
    uint64_t bits;
    memcpy(&bits, &x, 8);
    vb_long(v, (int64_t)bits);
}

/* The values as cql_bytes (caller frees). */
cql_bytes *vb_out(const vb *v)
{
    static const uint8_t empty[1] = {0};
    cql_bytes *out = calloc(v->n ? (size_t)v->n : 1, sizeof *out);
    if (!out)
        abort();
    for (int i = 0; i < v->n; i++)
        out[i] = (cql_bytes){v->b.data ? v->b.data + v->off[i] : empty, v->len[i]};
    return out;
}

/* Routing key of (tenant) or (tenant, second component). */
void cs_rkey(bdb_buf *out, const char *tn, const void *p2, size_t n2)
{
    if (!p2) {
        bdb_buf_append(out, tn, strlen(tn));
        return;
    }
    cql_bytes parts[2] = {{(const uint8_t *)tn, (int32_t)strlen(tn)},
                          {(const uint8_t *)p2, (int32_t)n2}};
    cql_composite_key(out, parts, 2);
}

/* Rows of one statement sent as UNLOGGED batches of BATCH_ROWS (routed by the
 * tenant when every row is in the tenant's partition). */
#define BATCH_ROWS 50
typedef struct batcher {
    const cass_state_ctx *c;
    char q[512];
    vb v;
    uint16_t per_row, rows;
    bdb_buf rk;
    int rc;
} batcher;

static void bt_init(batcher *b, const cass_state_ctx *c, int per_row)
{
    memset(b, 0, sizeof *b);
    b->c = c;
    b->per_row = (uint16_t)per_row;
    bdb_buf_init(&b->rk);
}

static int bt_send(batcher *b)
{
    if (b->rows == 0 || b->rc != BDB_OK) {
        bdb_buf_reset(&b->v.b);
        b->v.n = 0;
        b->rows = 0;
        return b->rc;
    }
    cql_bytes *vals = vb_out(&b->v);
    cql_call call = {.query = b->q,
                     .values = vals,
                     .nvalues = b->per_row,
                     .nrows = b->rows,
                     .routing_key = b->rk.len ? b->rk.data : NULL,
                     .routing_len = b->rk.len,
                     .consistency = b->c->write_cl,
                     .idempotent = 1};
    cql_response *r = NULL;
    b->rc = cql_session_batch(b->c->sess, &call, &r);
    if (b->rc != BDB_OK)
        BDB_WARN("cassandra: batch of %u rows of %.60s... failed: %s", b->rows, b->q,
                 r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                      : bdb_strerror(b->rc));
    cql_response_free(r);
    free(vals);
    bdb_buf_reset(&b->v.b);
    b->v.n = 0;
    b->rows = 0;
    return b->rc;
}

/* After the row's per_row values were added. */
static void bt_row(batcher *b)
{
    if (++b->rows == BATCH_ROWS)
        bt_send(b);
}

static int bt_free(batcher *b)
{
    int rc = bt_send(b);
    vb_free(&b->v);
    bdb_buf_free(&b->rk);
    return rc;
}

/* Record indexes ordered by tenant, so that each tenant's rows share batches. */
struct by_tenant {
    const char *tenant;
    size_t i;
};

static int by_tenant_cmp(const void *a, const void *b)
{
    const struct by_tenant *x = a, *y = b;
    int c = strcmp(x->tenant, y->tenant);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* ---------------------------------------------------------------- paged reads */

void rs_reset(void *ud)
{
    rowset *r = ud;
    bdb_buf_reset(&r->arena);
    r->ncells = r->nrows = 0;
    r->bad = 0;
}

int rs_page(void *ud, const cql_response *page)
{
    rowset *r = ud;
    const cql_result *res = &page->result;
    if (res->kind != CQL_RESULT_ROWS || (r->ncols && res->meta.ncols != r->ncols)) {
        r->bad = 1;
        return 1;
    }
    size_t n = (size_t)res->nrows * (size_t)r->ncols;
    if (r->ncells + n > r->cap) {
        r->cap = (r->ncells + n) * 2;
        r->off = realloc(r->off, r->cap * sizeof *r->off);
        r->len = realloc(r->len, r->cap * sizeof *r->len);
        if (!r->off || !r->len)
            abort();
    }
    for (size_t i = 0; i < n; i++) {
        r->off[r->ncells] = r->arena.len;
        r->len[r->ncells] = res->cells[i].len;
        if (res->cells[i].len > 0)
            bdb_buf_append(&r->arena, res->cells[i].p, (size_t)res->cells[i].len);
        r->ncells++;
    }
    r->nrows += (size_t)res->nrows;
    return 0;
}

cql_bytes rs_cell(const rowset *r, size_t row, int32_t col)
{
    size_t i = row * (size_t)r->ncols + (size_t)col;
    return (cql_bytes){r->len[i] > 0 ? r->arena.data + r->off[i] : NULL, r->len[i]};
}

void rs_free(rowset *r)
{
    bdb_buf_free(&r->arena);
    free(r->off);
    free(r->len);
}

int cs_query(const cass_state_ctx *c, const char *q, vb *v, const bdb_buf *rk, rowset *out)
{
    cql_bytes *vals = vb_out(v);
    cql_call call = {.query = q,
                     .values = vals,
                     .nvalues = (uint16_t)v->n,
                     .routing_key = rk->data,
                     .routing_len = rk->len,
                     .consistency = c->read_cl,
                     .idempotent = 1};
    cql_response *err = NULL;
    int rc = cql_session_query_paged(c->sess, &call, PAGE_ROWS, rs_reset, rs_page, out, &err);
    if (rc == BDB_OK && out->bad)
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK)
        BDB_WARN("cassandra: %.60s... failed: %s", q,
                 err && err->error.message ? err->error.message : bdb_strerror(rc));
    cql_response_free(err);
    free(vals);
    bdb_buf_reset(&v->b);
    v->n = 0;
    return rc;
}

char *cs_cell_str(cql_bytes b)
{
    if (b.len < 0)
        return NULL;
    char *s = malloc((size_t)b.len + 1);
    if (!s)
        abort();
    if (b.len)
        memcpy(s, b.p, (size_t)b.len);
    s[b.len] = 0;
    return s;
}

int64_t cs_cell_ms(cql_bytes b, int64_t dflt)
{
    int64_t v;
    return b.len == 8 && cql_dec_bigint(b, &v) == BDB_OK ? v : dflt;
}

/* ---------------------------------------------------------------- schema */

int cass_column_exists(cql_session *sess, const char *ks, const char *table, const char *col)
{
    /* The schema tables moved in 3.0 (system_schema.columns, table_name). */
    const cql_topology *t = cql_session_topology(sess);
    int ver[3] = {0, 0, 0};
    for (size_t i = 0; t && i < t->nnodes; i++)
        if (t->nodes[i].is_local && t->nodes[i].release[0])
            sch_parse_version(t->nodes[i].release, ver);
    /* an unquoted name in DDL is stored in lower case */
    char lks[64];
    size_t n = 0;
    for (; ks[n] && n < sizeof lks - 1; n++)
        lks[n] = (char)(ks[n] >= 'A' && ks[n] <= 'Z' ? ks[n] - 'A' + 'a' : ks[n]);
    lks[n] = 0;
    char q[384];
    if (ver[0] >= 3)
        snprintf(q, sizeof q,
                 "SELECT column_name FROM system_schema.columns WHERE keyspace_name = '%s' "
                 "AND table_name = '%s' AND column_name = '%s'",
                 lks, table, col);
    else
        snprintf(q, sizeof q,
                 "SELECT column_name FROM system.schema_columns WHERE keyspace_name = '%s' "
                 "AND columnfamily_name = '%s' AND column_name = '%s'",
                 lks, table, col);
    cql_call c = {.query = q, .consistency = CQL_ONE, .idempotent = 1, .unprepared = 1};
    cql_response *r = NULL;
    int rc = cql_session_execute(sess, &c, &r);
    int found = rc != BDB_OK || r->result.kind != CQL_RESULT_ROWS ? -1 : r->result.nrows > 0;
    cql_response_free(r);
    return found;
}

void cass_state_upgrade(cql_session *sess, const char *ks)
{
    static const char *const cols[][3] = {
        {"latest_by_device", "state_time", "timestamp"},
        {"latest_by_device", "metric_times", "map<text, timestamp>"},
        {"devices", "pinned", "boolean"},
        {"devices", "bucket_history", "map<timestamp, int>"},
        {"devices", "metrics", "set<text>"},
        {"devices", "samples", "bigint"},
        {"devices", "tags_blob", "blob"},
        {"devices", "history_blob", "blob"},
        {"devices", "metrics_blob", "blob"},
        {"latest_by_state", "state_full", "text"},
        {"latest_by_device", "attributes", "map<text, text>"},
        {"latest_by_device", "attribute_times", "map<text, timestamp>"},
    };
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        if (cass_column_exists(sess, ks, cols[i][0], cols[i][1]) == 1)
            continue; /* the usual case: no ALTER for Cassandra to refuse */
        char q[256];
        snprintf(q, sizeof q, "ALTER TABLE %s.%s ADD %s %s", ks, cols[i][0], cols[i][1],
                 cols[i][2]);
        cql_call c = {.query = q, .consistency = CQL_ONE, .idempotent = 1, .unprepared = 1};
        cql_response *r = NULL;
        /* Refused when the column exists after all (the schema tables could not
         * tell): nothing to do. */
        if (cql_session_execute(sess, &c, &r) == BDB_OK) {
            BDB_INFO("cassandra: added %s.%s %s (a keyspace from an older bucketdb)", cols[i][0],
                     cols[i][1], cols[i][2]);
            cql_session_wait_schema(sess, 30000);
        }
        cql_response_free(r);
    }
}

/* ---------------------------------------------------------------- writes */

int cs_ctx(bdb_sink *s, cass_state_ctx *c)
{
    c->sess = cass_sink_session(s, &c->ks, &c->write_cl, &c->read_cl);
    return c->sess ? BDB_OK : BDB_ERR_IO;
}

static struct by_tenant *order_by_tenant(const void *v, size_t n, size_t size, size_t tenant_off)
{
    struct by_tenant *o = calloc(n ? n : 1, sizeof *o);
    if (!o)
        abort();
    for (size_t i = 0; i < n; i++) {
        const char *rec = (const char *)v + i * size;
        memcpy(&o[i].tenant, rec + tenant_off, sizeof o[i].tenant);
        o[i].i = i;
    }
    if (n > 1)
        qsort(o, n, sizeof *o, by_tenant_cmp);
    return o;
}

/* The state moves of up to BATCH_ROWS devices of one tenant that carry a state:
 * one read of the states Cassandra holds, then the deletes under the old states and
 * the inserts under the new ones, and only then latest_by_device's state (a crash
 * before that leaves the old state there, so the re-sent flush moves the device
 * again). */
static int state_moves(const cass_state_ctx *c, const char *tn, const bdb_sink_state *const *d,
                       size_t n)
{
    bdb_buf q;
    bdb_buf_init(&q);
    bdb_buf_printf(&q,
                   "SELECT device_id, state, state_time FROM %s.latest_by_device WHERE "
                   "tenant_id = ? AND device_id IN (",
                   c->ks);
    vb v = {0};
    vb_text(&v, tn);
    for (size_t i = 0; i < n; i++) {
        bdb_buf_puts(&q, i ? ", ?" : "?");
        vb_text(&v, d[i]->device);
    }
    bdb_buf_puts(&q, ")");
    bdb_buf_putc(&q, 0);
    bdb_buf rk;
    bdb_buf_init(&rk);
    cs_rkey(&rk, tn, NULL, 0);
    rowset r = {.ncols = 3};
    bdb_buf_init(&r.arena);
    int rc = cs_query(c, (const char *)q.data, &v, &rk, &r);
    batcher del, ins, st;
    bt_init(&del, c, 4);
    bt_init(&ins, c, 6);
    bt_init(&st, c, 5);
    snprintf(del.q, sizeof del.q,
             "DELETE FROM %s.latest_by_state USING TIMESTAMP ? WHERE tenant_id = ? AND "
             "state = ? AND device_id = ?",
             c->ks);
    snprintf(ins.q, sizeof ins.q,
             "INSERT INTO %s.latest_by_state (tenant_id, state, device_id, event_time, "
             "state_full) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?",
             c->ks);
    snprintf(st.q, sizeof st.q,
             "UPDATE %s.latest_by_device USING TIMESTAMP ? SET state = ?, state_time = ? "
             "WHERE tenant_id = ? AND device_id = ?",
             c->ks);
    cs_rkey(&st.rk, tn, NULL, 0);
    for (size_t i = 0; rc == BDB_OK && i < n; i++) {
        char *old = NULL;
        int64_t old_ts = INT64_MIN;
        for (size_t k = 0; k < r.nrows && !old; k++) {
            cql_bytes dev = rs_cell(&r, k, 0);
            if (dev.len >= 0 && (size_t)dev.len == strlen(d[i]->device) &&
                memcmp(dev.p, d[i]->device, (size_t)dev.len) == 0) {
                old = cs_cell_str(rs_cell(&r, k, 1));
                old_ts = cs_cell_ms(rs_cell(&r, k, 2), INT64_MIN);
                if (!old)
                    break;
            }
        }
        int act = cass_state_action(old, old_ts, d[i]->state, d[i]->state_ts);
        int64_t us = cass_state_usec(d[i]->state_ts);
        char okey[CASS_STATE_KEY_MAX], nkey[CASS_STATE_KEY_MAX];
        cass_state_key(d[i]->state, nkey);
        /* Two states with one key share the row: the insert (same write time, which a
         * delete would win) replaces state_full instead. */
        if (act == CASS_STATE_MOVE && strcmp(cass_state_key(old, okey), nkey) != 0) {
            vb_long(&del.v, us);
            vb_text(&del.v, tn);
            vb_text(&del.v, okey);
            vb_text(&del.v, d[i]->device);
            bt_row(&del);
        }
        if (act != CASS_STATE_SKIP) {
            vb_text(&ins.v, tn);
            vb_text(&ins.v, nkey);
            vb_text(&ins.v, d[i]->device);
            vb_long(&ins.v, d[i]->state_ts);
            /* "" when the key is the state: a cell, not the tombstone a null writes */
            vb_text(&ins.v, strcmp(nkey, d[i]->state) == 0 ? "" : d[i]->state);
            vb_long(&ins.v, us);
            bt_row(&ins);
            vb_long(&st.v, us);
            vb_text(&st.v, d[i]->state);
            vb_long(&st.v, d[i]->state_ts);
            vb_text(&st.v, tn);
            vb_text(&st.v, d[i]->device);
            st.rows++; /* sent after the others, below */
        }
        free(old);
    }
    if (rc == BDB_OK)
        rc = bt_free(&del);
    else
        bt_free(&del);
    if (rc == BDB_OK)
        rc = bt_free(&ins);
    else
        bt_free(&ins);
    if (rc == BDB_OK)
        rc = bt_free(&st);
    else
        bt_free(&st);
    rs_free(&r);
    vb_free(&v);
    bdb_buf_free(&rk);
    bdb_buf_free(&q);
    return rc;
}

int cass_state_put(bdb_sink *s, const bdb_sink_state *v, size_t n)
{
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK || n == 0)
        return rc;
    struct by_tenant *o = order_by_tenant(v, n, sizeof *v, offsetof(bdb_sink_state, tenant));
    const bdb_sink_state **moving = calloc(BATCH_ROWS, sizeof *moving);
    if (!moving)
        abort();
    for (size_t a = 0; a < n && rc == BDB_OK;) {
        const char *tn = o[a].tenant;
        size_t b = a;
        while (b < n && strcmp(o[b].tenant, tn) == 0)
            b++;
        batcher ev, met, att;
        bt_init(&ev, &c, 4);
        bt_init(&met, &c, 7);
        bt_init(&att, &c, 7);
        snprintf(ev.q, sizeof ev.q,
                 "UPDATE %s.latest_by_device USING TIMESTAMP ? SET event_time = ? "
                 "WHERE tenant_id = ? AND device_id = ?",
                 c.ks);
        snprintf(met.q, sizeof met.q,
                 "UPDATE %s.latest_by_device USING TIMESTAMP ? SET metrics[?] = ?, "
                 "metric_times[?] = ? WHERE tenant_id = ? AND device_id = ?",
                 c.ks);
        /* string attributes: one element per name at its own report's time, as metrics */
        snprintf(att.q, sizeof att.q,
                 "UPDATE %s.latest_by_device USING TIMESTAMP ? SET attributes[?] = ?, "
                 "attribute_times[?] = ? WHERE tenant_id = ? AND device_id = ?",
                 c.ks);
        cs_rkey(&ev.rk, tn, NULL, 0);
        cs_rkey(&met.rk, tn, NULL, 0);
        cs_rkey(&att.rk, tn, NULL, 0);
        size_t nmov = 0;
        for (size_t k = a; k < b && rc == BDB_OK; k++) {
            const bdb_sink_state *st = &v[o[k].i];
            if (st->event_ts != INT64_MIN) {
                vb_long(&ev.v, cass_state_usec(st->event_ts));
                vb_long(&ev.v, st->event_ts);
                vb_text(&ev.v, tn);
                vb_text(&ev.v, st->device);
                bt_row(&ev);
            }
            for (size_t i = 0; i < st->nmetrics; i++) {
                const bdb_sink_metric *m = &st->metrics[i];
                vb_long(&met.v, cass_state_usec(m->ts));
                vb_text(&met.v, m->name);
                vb_double(&met.v, m->v);
                vb_text(&met.v, m->name);
                vb_long(&met.v, m->ts);
                vb_text(&met.v, tn);
                vb_text(&met.v, st->device);
                bt_row(&met);
            }
            for (size_t i = 0; i < st->nattrs; i++) {
                const bdb_sink_attr *at = &st->attrs[i];
                vb_long(&att.v, cass_state_usec(at->ts));
                vb_text(&att.v, at->name);
                vb_text(&att.v, at->value);
                vb_text(&att.v, at->name);
                vb_long(&att.v, at->ts);
                vb_text(&att.v, tn);
                vb_text(&att.v, st->device);
                bt_row(&att);
            }
            if (st->state) {
                moving[nmov++] = st;
                if (nmov == BATCH_ROWS) {
                    rc = state_moves(&c, tn, moving, nmov);
                    nmov = 0;
                }
            }
            if (rc == BDB_OK)
                rc = ev.rc != BDB_OK ? ev.rc : met.rc != BDB_OK ? met.rc : att.rc;
        }
        if (rc == BDB_OK && nmov)
            rc = state_moves(&c, tn, moving, nmov);
        int r1 = bt_free(&ev), r2 = bt_free(&met), r3 = bt_free(&att);
        if (rc == BDB_OK)
            rc = r1 != BDB_OK ? r1 : r2 != BDB_OK ? r2 : r3;
        a = b;
    }
    free(moving);
    free(o);
    return rc;
}

int cass_device_put(bdb_sink *s, const bdb_sink_device *v, size_t n)
{
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK || n == 0)
        return rc;
    struct by_tenant *o = order_by_tenant(v, n, sizeof *v, offsetof(bdb_sink_device, tenant));
    for (size_t a = 0; a < n && rc == BDB_OK;) {
        const char *tn = o[a].tenant;
        size_t b = a;
        while (b < n && strcmp(o[b].tenant, tn) == 0)
            b++;
        batcher bt;
        bt_init(&bt, &c, 12);
        snprintf(bt.q, sizeof bt.q,
                 "INSERT INTO %s.devices (tenant_id, device_id, tags_blob, reporting_class, "
                 "bucket_seconds, first_seen, last_seen, pinned, history_blob, "
                 "metrics_blob, samples) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                 "USING TIMESTAMP ?",
                 c.ks);
        cs_rkey(&bt.rk, tn, NULL, 0);
        for (size_t k = a; k < b && bt.rc == BDB_OK; k++) {
            const bdb_sink_device *d = &v[o[k].i];
            if (d->last_ts == INT64_MIN || d->last_ts == INT64_MAX)
                continue; /* no event yet: nothing to register */
            vb_text(&bt.v, tn);
            vb_text(&bt.v, d->device);
            size_t st = bt.v.b.len;
            cql_enc_text_map(&bt.v.b, d->tag_keys, d->tag_vals, (int32_t)d->ntags);
            vb_mark(&bt.v, st);
            vb_text(&bt.v, bdb_freq_name((enum bdb_freq_class)d->freq_class));
            vb_int(&bt.v, (int32_t)(d->bucket_ms / 1000));
            vb_long(&bt.v, d->first_ts);
            vb_long(&bt.v, d->last_ts);
            uint8_t pin = d->pinned ? 1 : 0;
            vb_raw(&bt.v, &pin, 1);
            st = bt.v.b.len; /* map<timestamp, int>: from -> bucket seconds */
            cql_put_int(&bt.v.b, (int32_t)d->nhist);
            for (size_t i = 0; i < d->nhist; i++) {
                uint8_t kb[8], val[4];
                cql_be64(kb, (uint64_t)d->hist_from[i]);
                cql_be32(val, (uint32_t)(d->hist_size[i] / 1000));
                cql_put_bytes(&bt.v.b, kb, 8);
                cql_put_bytes(&bt.v.b, val, 4);
            }
            vb_mark(&bt.v, st);
            st = bt.v.b.len;
            cql_enc_text_list(&bt.v.b, d->metrics, (int32_t)d->nmetrics);
            vb_mark(&bt.v, st);
            vb_long(&bt.v, (int64_t)d->samples);
            vb_long(&bt.v, cass_state_usec(d->last_ts));
            bt_row(&bt);
        }
        rc = bt_free(&bt);
        a = b;
    }
    free(o);
    return rc;
}

int cass_count_put(bdb_sink *s, const bdb_sink_count *v, size_t n)
{
    cass_state_ctx c;
    int rc = cs_ctx(s, &c);
    if (rc != BDB_OK || n == 0)
        return rc;
    /* Rows of several (tenant, day) partitions share a batch (not routed). */
    batcher bt;
    bt_init(&bt, &c, 8);
    snprintf(bt.q, sizeof bt.q,
             "INSERT INTO %s.telemetry_by_tenant_totals (tenant_id, day, bucket, device_id, "
             "bucket_end, event_count, sub_buckets) VALUES (?, ?, ?, ?, ?, ?, ?) "
             "USING TIMESTAMP ?",
             c.ks);
    for (size_t i = 0; i < n && bt.rc == BDB_OK; i++) {
        const bdb_sink_count *cn = &v[i];
        if (cn->events == 0)
            continue;
        int64_t day = bdb_floor_div(cn->bucket_start, BDB_MS_DAY) * BDB_MS_DAY;
        vb_text(&bt.v, cn->tenant);
        vb_long(&bt.v, day);
        vb_long(&bt.v, cn->bucket_start);
        vb_text(&bt.v, cn->device);
        vb_long(&bt.v, cn->bucket_end);
        vb_long(&bt.v, (int64_t)cn->events);
        vb_int(&bt.v, (int32_t)cn->subbuckets);
        /* The count is the write time: the larger count wins, a replay changes
         * nothing. */
        vb_long(&bt.v, (int64_t)cn->events);
        bt_row(&bt);
    }
    return bt_free(&bt);
}
