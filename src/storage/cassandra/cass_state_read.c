/* cass_state_read: the reads of cass_state.h: a device's latest event, the devices
 * per state, the registry and the event counts. */
#include "storage/cassandra/cass_state.h"
#include "storage/cassandra/cass_state_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "model/bucket.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DAYS 400 /* count reads: day partitions one request may read */

/* ---------------------------------------------------------------- reads */

/* One read: its query text, bind values and routing key, run as a paged SELECT
 * (cs_query) whose rows are copied into r. */
typedef struct sel {
    cass_state_ctx c;
    char q[512];
    vb v;
    bdb_buf rk;
    rowset r;
} sel;

/* A read of ncols columns; fmt is the query with one %s, for the keyspace. Returns
 * BDB_ERR_IO while the sink is not connected (then there is nothing to end). */
static int sel_begin(bdb_sink *s, sel *sq, int32_t ncols, const char *fmt)
    __attribute__((format(printf, 4, 0)));
static int sel_begin(bdb_sink *s, sel *sq, int32_t ncols, const char *fmt)
{
    memset(sq, 0, sizeof *sq);
    int rc = cs_ctx(s, &sq->c);
    if (rc != BDB_OK)
        return rc;
    snprintf(sq->q, sizeof sq->q, fmt, sq->c.ks);
    bdb_buf_init(&sq->rk);
    sq->r.ncols = ncols;
    bdb_buf_init(&sq->r.arena);
    return BDB_OK;
}

/* Runs the query with the values bound since the last run (they are consumed). */
static int sel_run(sel *sq)
{
    return cs_query(&sq->c, sq->q, &sq->v, &sq->rk, &sq->r);
}

static cql_bytes sel_cell(const sel *sq, size_t row, int32_t col)
{
    return rs_cell(&sq->r, row, col);
}

static void sel_end(sel *sq)
{
    rs_free(&sq->r);
    vb_free(&sq->v);
    bdb_buf_free(&sq->rk);
}

int cass_state_get(bdb_sink *s, const char *tenant, const char *device, bdb_sink_state_fn fn,
                   void *ud)
{
    sel sq;
    int rc = sel_begin(s, &sq, 7,
                       "SELECT event_time, state, state_time, metrics, metric_times, attributes, "
                       "attribute_times FROM %s.latest_by_device WHERE tenant_id = ? AND "
                       "device_id = ?");
    if (rc != BDB_OK)
        return rc;
    vb_text(&sq.v, tenant);
    vb_text(&sq.v, device);
    cs_rkey(&sq.rk, tenant, NULL, 0);
    rc = sel_run(&sq);
    if (rc == BDB_OK && sq.r.nrows == 0)
        rc = BDB_ERR_NOTFOUND;
    if (rc == BDB_OK) {
        bdb_sink_state st = {
            tenant, device, cs_cell_ms(sel_cell(&sq, 0, 0), INT64_MIN), NULL, INT64_MIN, NULL, 0};
        char *state = cs_cell_str(sel_cell(&sq, 0, 1));
        st.state = state;
        st.state_ts = state ? cs_cell_ms(sel_cell(&sq, 0, 2), INT64_MIN) : INT64_MIN;
        cql_coll_iter it, it2;
        int n = sel_cell(&sq, 0, 3).len > 0 ? cql_coll_begin(&it, sel_cell(&sq, 0, 3), 1) : 0;
        bdb_sink_metric *mv = calloc(n > 0 ? (size_t)n : 1, sizeof *mv);
        char **names = calloc(n > 0 ? (size_t)n : 1, sizeof *names);
        if (!mv || !names)
            abort();
        size_t k = 0;
        cql_bytes key, val;
        while (n > 0 && k < (size_t)n && cql_coll_next(&it, &key) == 1 &&
               cql_coll_next(&it, &val) == 1) {
            double x;
            if (cql_dec_double(val, &x) != BDB_OK)
                continue;
            names[k] = cs_cell_str(key);
            mv[k] = (bdb_sink_metric){names[k], INT64_MIN, x};
            k++;
        }
        /* metric_times: the same keys, in the same (name) order. */
        int n2 = sel_cell(&sq, 0, 4).len > 0 ? cql_coll_begin(&it2, sel_cell(&sq, 0, 4), 1) : 0;
        while (n2 > 0 && cql_coll_next(&it2, &key) == 1 && cql_coll_next(&it2, &val) == 1)
            for (size_t i = 0; i < k; i++)
                if ((size_t)key.len == strlen(names[i]) &&
                    memcmp(key.p, names[i], (size_t)key.len) == 0)
                    mv[i].ts = cs_cell_ms(val, INT64_MIN);
        st.metrics = mv;
        st.nmetrics = k;
        /* attributes and attribute_times: the same keys, in the same order */
        int na = sel_cell(&sq, 0, 5).len > 0 ? cql_coll_begin(&it, sel_cell(&sq, 0, 5), 1) : 0;
        bdb_sink_attr *av = calloc(na > 0 ? (size_t)na : 1, sizeof *av);
        char **astr = calloc(na > 0 ? 2 * (size_t)na : 1, sizeof *astr);
        if (!av || !astr)
            abort();
        size_t ka = 0;
        while (na > 0 && ka < (size_t)na && cql_coll_next(&it, &key) == 1 &&
               cql_coll_next(&it, &val) == 1) {
            astr[2 * ka] = cs_cell_str(key);
            astr[2 * ka + 1] = cs_cell_str(val);
            if (!astr[2 * ka + 1]) /* a null value: not an attribute */
                astr[2 * ka + 1] = calloc(1, 1);
            if (!astr[2 * ka + 1])
                abort();
            av[ka] = (bdb_sink_attr){astr[2 * ka], astr[2 * ka + 1], INT64_MIN};
            ka++;
        }
        n2 = sel_cell(&sq, 0, 6).len > 0 ? cql_coll_begin(&it2, sel_cell(&sq, 0, 6), 1) : 0;
        while (n2 > 0 && cql_coll_next(&it2, &key) == 1 && cql_coll_next(&it2, &val) == 1)
            for (size_t i = 0; i < ka; i++)
                if ((size_t)key.len == strlen(av[i].name) &&
                    memcmp(key.p, av[i].name, (size_t)key.len) == 0)
                    av[i].ts = cs_cell_ms(val, INT64_MIN);
        st.attrs = av;
        st.nattrs = ka;
        fn(ud, &st);
        for (size_t i = 0; i < k; i++)
            free(names[i]);
        for (size_t i = 0; i < 2 * ka; i++)
            free(astr[i]);
        free(astr);
        free(av);
        free(names);
        free(mv);
        free(state);
    }
    sel_end(&sq);
    return rc;
}

/* A latest_by_state row's state_full against the state asked for: null or "" (the
 * key is the state: a short one, or a row from before state_full) or the state. */
static int full_state_is(cql_bytes full, const char *state)
{
    size_t n = strlen(state);
    if (full.len <= 0)
        return n <= CASS_STATE_KEY_SHORT;
    return (size_t)full.len == n && memcmp(full.p, state, n) == 0;
}

int cass_state_list(bdb_sink *s, const char *tenant, const char *state, bdb_sink_state_fn fn,
                    void *ud)
{
    sel sq;
    int rc = sel_begin(s, &sq, state ? 3 : 4,
                       state ? "SELECT device_id, event_time, state_full FROM %s.latest_by_state "
                               "WHERE tenant_id = ? AND state = ?"
                             : "SELECT device_id, event_time, state, state_time FROM "
                               "%s.latest_by_device WHERE tenant_id = ?");
    if (rc != BDB_OK)
        return rc;
    vb_text(&sq.v, tenant);
    char key[CASS_STATE_KEY_MAX];
    if (state) {
        vb_text(&sq.v, cass_state_key(state, key));
        cs_rkey(&sq.rk, tenant, key, strlen(key));
    } else {
        cs_rkey(&sq.rk, tenant, NULL, 0);
    }
    rc = sel_run(&sq);
    for (size_t i = 0; rc == BDB_OK && i < sq.r.nrows; i++) {
        char *dev = cs_cell_str(sel_cell(&sq, i, 0));
        if (!dev)
            continue;
        bdb_sink_state st = {tenant, dev, INT64_MIN, state, INT64_MIN, NULL, 0};
        char *sname = NULL;
        if (state) {
            if (!full_state_is(sel_cell(&sq, i, 2), state)) {
                free(dev);
                continue;
            }
            st.state_ts = cs_cell_ms(sel_cell(&sq, i, 1), INT64_MIN);
        } else {
            st.event_ts = cs_cell_ms(sel_cell(&sq, i, 1), INT64_MIN);
            sname = cs_cell_str(sel_cell(&sq, i, 2));
            st.state = sname;
            st.state_ts = sname ? cs_cell_ms(sel_cell(&sq, i, 3), INT64_MIN) : INT64_MIN;
        }
        fn(ud, &st);
        free(sname);
        free(dev);
    }
    sel_end(&sq);
    return rc;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static cql_bytes newer_cell(const rowset *r, size_t row, int32_t col, int32_t older)
{
    cql_bytes b = rs_cell(r, row, col);
    return b.len >= 0 ? b : rs_cell(r, row, older);
}

int cass_device_list(bdb_sink *s, const char *tenant, bdb_sink_device_fn fn, void *ud)
{
    sel sq;
    int rc =
        sel_begin(s, &sq, 13,
                  "SELECT device_id, tags, reporting_class, bucket_seconds, first_seen, last_seen, "
                  "pinned, bucket_history, metrics, samples, tags_blob, history_blob, "
                  "metrics_blob FROM %s.devices WHERE tenant_id = ?");
    if (rc != BDB_OK)
        return rc;
    vb_text(&sq.v, tenant);
    cs_rkey(&sq.rk, tenant, NULL, 0);
    rc = sel_run(&sq);
    for (size_t i = 0; rc == BDB_OK && i < sq.r.nrows; i++) {
        char *dev = cs_cell_str(sel_cell(&sq, i, 0));
        if (!dev)
            continue;
        bdb_sink_device d;
        memset(&d, 0, sizeof d);
        d.tenant = tenant;
        d.device = dev;
        cql_coll_iter it;
        cql_bytes a, b;
        /* The encoded columns, or the older ones of a row not written since. */
        cql_bytes tags = newer_cell(&sq.r, i, 10, 1), hist = newer_cell(&sq.r, i, 11, 7),
                  mets = newer_cell(&sq.r, i, 12, 8);
        /* tags */
        int n = tags.len > 0 ? cql_coll_begin(&it, tags, 1) : 0;
        char **tk = calloc(n > 0 ? (size_t)n : 1, sizeof *tk);
        char **tv = calloc(n > 0 ? (size_t)n : 1, sizeof *tv);
        if (!tk || !tv)
            abort();
        while (n > 0 && d.ntags < (size_t)n && cql_coll_next(&it, &a) == 1 &&
               cql_coll_next(&it, &b) == 1) {
            tk[d.ntags] = cs_cell_str(a);
            tv[d.ntags++] = cs_cell_str(b);
        }
        d.tag_keys = (const char *const *)tk;
        d.tag_vals = (const char *const *)tv;
        char *cls = cs_cell_str(sel_cell(&sq, i, 2));
        d.freq_class = BDB_FREQ_UNKNOWN;
        for (int k = BDB_FREQ_UNKNOWN; cls && k <= BDB_FREQ_HIGH; k++)
            if (strcmp(cls, bdb_freq_name((enum bdb_freq_class)k)) == 0)
                d.freq_class = k;
        int32_t bsec = 0;
        if (sel_cell(&sq, i, 3).len == 4)
            cql_dec_int(sel_cell(&sq, i, 3), &bsec);
        d.bucket_ms = (int64_t)bsec * 1000;
        d.first_ts = cs_cell_ms(sel_cell(&sq, i, 4), INT64_MAX);
        d.last_ts = cs_cell_ms(sel_cell(&sq, i, 5), INT64_MIN);
        int pin = 0;
        if (sel_cell(&sq, i, 6).len == 1)
            cql_dec_boolean(sel_cell(&sq, i, 6), &pin);
        d.pinned = pin;
        /* bucket history */
        int nh = hist.len > 0 ? cql_coll_begin(&it, hist, 1) : 0;
        int64_t *hf = calloc(nh > 0 ? (size_t)nh : 1, sizeof *hf);
        int64_t *hs = calloc(nh > 0 ? (size_t)nh : 1, sizeof *hs);
        if (!hf || !hs)
            abort();
        while (nh > 0 && d.nhist < (size_t)nh && cql_coll_next(&it, &a) == 1 &&
               cql_coll_next(&it, &b) == 1) {
            int32_t sec = 0;
            hf[d.nhist] = cs_cell_ms(a, 0);
            if (b.len == 4)
                cql_dec_int(b, &sec);
            hs[d.nhist++] = (int64_t)sec * 1000;
        }
        d.hist_from = hf;
        d.hist_size = hs;
        /* metrics */
        int nm = mets.len > 0 ? cql_coll_begin(&it, mets, 0) : 0;
        char **mn = calloc(nm > 0 ? (size_t)nm : 1, sizeof *mn);
        if (!mn)
            abort();
        while (nm > 0 && d.nmetrics < (size_t)nm && cql_coll_next(&it, &a) == 1)
            mn[d.nmetrics++] = cs_cell_str(a);
        d.metrics = (const char *const *)mn;
        d.samples = (uint64_t)cs_cell_ms(sel_cell(&sq, i, 9), 0);
        fn(ud, &d);
        free_strs(tk, d.ntags);
        free_strs(tv, d.ntags);
        free_strs(mn, d.nmetrics);
        free(hf);
        free(hs);
        free(cls);
        free(dev);
    }
    sel_end(&sq);
    return rc;
}

int cass_tenant_list(bdb_sink *s, void (*fn)(void *ud, const char *tenant), void *ud)
{
    sel sq;
    int rc = sel_begin(s, &sq, 1, "SELECT DISTINCT tenant_id FROM %s.devices");
    if (rc != BDB_OK)
        return rc;
    rc = sel_run(&sq); /* no routing key: any node coordinates the scan */
    for (size_t i = 0; rc == BDB_OK && i < sq.r.nrows; i++) {
        char *tn = cs_cell_str(sel_cell(&sq, i, 0));
        if (tn)
            fn(ud, tn);
        free(tn);
    }
    sel_end(&sq);
    return rc;
}

int cass_count_list(bdb_sink *s, const char *tenant, int64_t from, int64_t to, bdb_sink_count_fn fn,
                    void *ud)
{
    int64_t first, last;
    if (cass_count_days(from, to, MAX_DAYS, &first, &last) != 0)
        return BDB_ERR_LIMIT;
    sel sq;
    int rc = sel_begin(s, &sq, 5,
                       "SELECT bucket, device_id, bucket_end, event_count, sub_buckets FROM "
                       "%s.telemetry_by_tenant_totals WHERE tenant_id = ? AND day = ?");
    if (rc != BDB_OK)
        return rc;
    for (int64_t day = first; day <= last && rc == BDB_OK; day += BDB_MS_DAY) {
        uint8_t db8[8];
        cql_be64(db8, (uint64_t)day);
        bdb_buf_reset(&sq.rk);
        cs_rkey(&sq.rk, tenant, db8, 8);
        vb_text(&sq.v, tenant);
        vb_long(&sq.v, day);
        rc = sel_run(&sq);
        for (size_t i = 0; rc == BDB_OK && i < sq.r.nrows; i++) {
            int64_t bs = cs_cell_ms(sel_cell(&sq, i, 0), 0),
                    be = cs_cell_ms(sel_cell(&sq, i, 2), 0);
            if (be <= from || bs >= to)
                continue;
            char *dev = cs_cell_str(sel_cell(&sq, i, 1));
            if (!dev)
                continue;
            int32_t subs = 1;
            if (sel_cell(&sq, i, 4).len == 4)
                cql_dec_int(sel_cell(&sq, i, 4), &subs);
            bdb_sink_count cn = {
                tenant, dev, bs, be, (uint64_t)cs_cell_ms(sel_cell(&sq, i, 3), 0), (uint32_t)subs};
            fn(ud, &cn);
            free(dev);
        }
    }
    sel_end(&sq);
    return rc;
}
