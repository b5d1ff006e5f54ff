/* The engine's sink glue at its edges, against the fake sink (storage/fakesink.h) with
 * the helpers of sink_glue_util.h; each test checks what the engine must do there:
 *   - a sink with part of an op group (a put without its read, the state ops without
 *     the registry and counts): only whole groups are used, the rest stays local;
 *   - registry rows with tags, metrics and bucket changes answered from the sink;
 *   - the TTLs handed to the sink (tier windows past their retention, the 20-year cap,
 *     forever; each late event with its tenant's raw TTL);
 *   - late events of two engines that share arrival time and order are all listed;
 *   - readers whose callback stops, bad page limits, unknown tenants, a sink out of
 *     memory, a flush with nothing new, a tier range outside a device's life;
 *   - a time written twice across head chunks, sub-buckets interleaving partitions, a
 *     tier put failing among many series, fleet windows over several file spans. */
#include "storage/embedded/sink_glue_util.h"

/* ---------------------------------------------------------------- helpers */

static fakesink *fake_with(const bdb_sink_ops *ops)
{
    fakesink *f = fakesink_new(1);
    f->base.ops = ops;
    return f;
}

/* Both engines fed rounds 0 and 1 of the shared feed, each round flushed. */
static void feed_both(bdb_db *ref, bdb_db *db)
{
    bdb_db *dbs[2] = {ref, db};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 2, round);
        assert_int_equal(bdb_db_flush(ref), BDB_OK);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
}

static void one_report(bdb_db *db, const char *tn, const char *dn, int64_t ts, const char *state,
                       double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, dn, strlen(dn), ts, 0);
    if (state)
        bdb_batch_state(b, state, strlen(state));
    bdb_batch_metric(b, "temp", 4, v);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, tn, b), BDB_OK);
    bdb_batch_free(b);
}

static int stop_after_one(void *ctx)
{
    int *n = ctx;
    return ++*n >= 1;
}
static int stop_dev(void *ctx, const bdb_device_info *d)
{
    (void)d;
    return stop_after_one(ctx);
}
static int stop_instate(void *ctx, const char *dn, int64_t ts)
{
    (void)dn;
    (void)ts;
    return stop_after_one(ctx);
}
static int stop_count(void *ctx, const char *state, uint64_t n)
{
    (void)state;
    (void)n;
    return stop_after_one(ctx);
}
static int stop_tbt(void *ctx, const bdb_tbt_row *r)
{
    (void)r;
    return stop_after_one(ctx);
}
static int stop_late(void *ctx, const bdb_late_event *e)
{
    (void)e;
    return stop_after_one(ctx);
}

/* ---------------------------------------------------------------- partial op groups */

static bdb_sink_ops half_ops, state_only_ops;

static void test_partial_op_groups(void **st)
{
    (void)st;
    /* a put without its read: the group is not used (reads could not come back) */
    half_ops = fs_ops_full;
    half_ops.tier_read = NULL;
    half_ops.fleet_read = NULL;
    half_ops.state_get = NULL;
    half_ops.late_list = NULL;
    fakesink *f = fake_with(&half_ops);
    bdb_db *ref = open_db("po_ref", NULL), *db = open_db("po_half", f);
    feed_both(ref, db);
    assert_true(f->nraw > 0);
    assert_int_equal(f->ntier + f->nfleet + f->nst + f->ndev + f->ncnt + f->nlate, 0);
    assert_same("half sink vs reference", dump_db(ref, S_ALL), dump_db(db, S_ALL));
    bdb_db_close(db);
    fakesink_free(f);
    /* the state ops without registry and counts: state through the sink, the registry
     * and the event counts from the engine alone */
    state_only_ops = fs_ops_full;
    state_only_ops.device_put = NULL;
    state_only_ops.count_put = NULL;
    state_only_ops.device_list = NULL;
    state_only_ops.count_list = NULL;
    f = fake_with(&state_only_ops);
    db = open_db("po_state", f);
    bdb_db *dbs[2] = {db, NULL};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 1, round);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    assert_int_equal(f->nst, NDEV);
    assert_int_equal(f->ndev + f->ncnt, 0);
    assert_same("state-only sink vs reference", dump_db(ref, S_ALL), dump_db(db, S_ALL));
    /* NOTFOUND from the catalog stays NOTFOUND: no registry op to ask */
    lines l = {NULL, 0};
    assert_int_equal(bdb_db_get_device(db, "t1", "nosuch", dev_cb, &l), BDB_ERR_NOTFOUND);
    bdb_db_close(db);
    bdb_db_close(ref);
    fakesink_free(f);
}

/* ---------------------------------------------------------------- registry rows */

/* The fake keeps only a registry row's counts; this keeps the whole row. */
typedef struct reg_row {
    char *tenant, *device;
    bdb_sink_device d;
    char **tk, **tv, **metrics;
    int64_t *hf, *hs;
} reg_row;
static reg_row g_reg[64];
static size_t g_nreg;
static bdb_sink_ops reg_ops;

static char **dupv(const char *const *v, size_t n)
{
    char **o = calloc(n + 1, sizeof *o);
    for (size_t i = 0; i < n; i++)
        o[i] = strdup(v[i]);
    return o;
}

static void freev(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void reg_free_row(reg_row *r)
{
    free(r->tenant);
    free(r->device);
    freev(r->tk, r->d.ntags);
    freev(r->tv, r->d.ntags);
    freev(r->metrics, r->d.nmetrics);
    free(r->hf);
    free(r->hs);
}

static int reg_put(bdb_sink *s, const bdb_sink_device *v, size_t n)
{
    int rc = fs_device_put(s, v, n); /* the fake counts the call (and may fail it) */
    for (size_t i = 0; i < n && rc == BDB_OK; i++) {
        size_t k = 0;
        while (k < g_nreg &&
               !(!strcmp(g_reg[k].tenant, v[i].tenant) && !strcmp(g_reg[k].device, v[i].device)))
            k++;
        if (k == g_nreg) {
            assert_true(g_nreg < 64);
            g_nreg++;
        } else {
            reg_free_row(&g_reg[k]);
        }
        reg_row *r = &g_reg[k];
        r->d = v[i];
        r->tenant = strdup(v[i].tenant);
        r->device = strdup(v[i].device);
        r->tk = dupv(v[i].tag_keys, v[i].ntags);
        r->tv = dupv(v[i].tag_vals, v[i].ntags);
        r->metrics = dupv(v[i].metrics, v[i].nmetrics);
        r->hf = calloc(v[i].nhist + 1, sizeof *r->hf);
        r->hs = calloc(v[i].nhist + 1, sizeof *r->hs);
        memcpy(r->hf, v[i].hist_from, v[i].nhist * sizeof *r->hf);
        memcpy(r->hs, v[i].hist_size, v[i].nhist * sizeof *r->hs);
        r->d.tenant = r->tenant;
        r->d.device = r->device;
        r->d.tag_keys = (const char *const *)r->tk;
        r->d.tag_vals = (const char *const *)r->tv;
        r->d.metrics = (const char *const *)r->metrics;
        r->d.hist_from = r->hf;
        r->d.hist_size = r->hs;
    }
    return rc;
}

static void ignore_dev(void *ud, const bdb_sink_device *d)
{
    (void)ud;
    (void)d;
}

static int reg_list(bdb_sink *s, const char *tn, bdb_sink_device_fn fn, void *ud)
{
    int rc = fs_device_list(s, tn, ignore_dev, NULL); /* counted, may fail */
    for (size_t k = 0; k < g_nreg && rc == BDB_OK; k++)
        if (!strcmp(g_reg[k].tenant, tn))
            fn(ud, &g_reg[k].d);
    return rc;
}

static int full_dev_cb(void *ctx, const bdb_device_info *d)
{
    char tags[128] = "", ms[128] = "";
    for (size_t i = 0; i < d->ntags; i++)
        snprintf(tags + strlen(tags), sizeof tags - strlen(tags), "%.*s=%.*s,",
                 (int)d->tags[i].klen, d->tags[i].key, (int)d->tags[i].vlen, d->tags[i].val);
    for (size_t i = 0; i < d->nmetrics; i++)
        snprintf(ms + strlen(ms), sizeof ms - strlen(ms), "%s,", d->metrics[i]);
    addf(ctx, "device %s samples=%llu %lld..%lld bucket=%lld changes=%u tags=%s metrics=%s",
         d->device, (unsigned long long)d->samples, (long long)d->first_ts, (long long)d->last_ts,
         (long long)d->bucket_ms, (unsigned)d->nbucket_changes, tags, ms);
    return 0;
}

static char *registry_text(bdb_db *db, int one_by_one)
{
    lines l = {NULL, 0};
    char name[16];
    if (!one_by_one)
        assert_int_equal(bdb_db_list_devices(db, "t1", full_dev_cb, &l), BDB_OK);
    for (int i = 0; i < 20 && one_by_one; i++) {
        snprintf(name, sizeof name, "e%02d", i);
        assert_int_equal(bdb_db_get_device(db, "t1", name, full_dev_cb, &l), BDB_OK);
    }
    return join(&l);
}

static void test_registry_rows_from_sink(void **st)
{
    (void)st;
    reg_ops = fs_ops_full;
    reg_ops.device_put = reg_put;
    reg_ops.device_list = reg_list;
    fakesink *f = fake_with(&reg_ops);
    bdb_db *ref = open_db("rg_ref", NULL), *db = open_db("rg_sink", f);
    /* 20 devices (more rows than the reader's first vector), tags, two metrics, a
     * bucket size change on e03 */
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof name, "e%02d", i);
        for (int k = 0; k < 2; k++) {
            bdb_db *both[2] = {ref, db};
            for (int j = 0; j < 2; j++) {
                bdb_batch *b = bdb_batch_new();
                bdb_batch_begin(b, name, strlen(name), T0 + i * 1000 + k * HOUR, 0);
                bdb_batch_tag(b, "site", 4, i % 2 ? "north" : "south", 5);
                bdb_batch_metric(b, "temp", 4, i + k);
                bdb_batch_metric(b, "hum", 3, 50 - i);
                assert_int_equal(bdb_batch_end(b), 1);
                assert_int_equal(bdb_db_write(both[j], "t1", b), BDB_OK);
                bdb_batch_free(b);
            }
        }
    }
    for (int j = 0; j < 2; j++) {
        bdb_db *x = j ? db : ref;
        assert_int_equal(bdb_db_set_device_bucket(x, "t1", "e03", 6 * HOUR), BDB_OK);
        assert_int_equal(bdb_db_flush(x), BDB_OK);
    }
    bdb_db *fresh = open_db("rg_fresh", f);
    char *want = registry_text(ref, 0);
    assert_non_null(strstr(want, "changes=1"));
    assert_non_null(strstr(want, "tags=site=north,"));
    assert_same("registry from the sink", strdup(want), registry_text(fresh, 0));
    assert_same("registry rows one by one", want, registry_text(fresh, 1));
    /* a callback that stops: one device, and the listing still answers OK */
    int n = 0;
    assert_int_equal(bdb_db_list_devices(fresh, "t1", stop_dev, &n), BDB_OK);
    assert_int_equal(n, 1);
    /* the sink failing: a device only the sink knows is not found, not invented */
    f->fail_op = FS_DEVICE_LIST;
    f->fail_nth = 0;
    lines l = {NULL, 0};
    assert_int_equal(bdb_db_get_device(fresh, "t1", "e01", full_dev_cb, &l), BDB_ERR_NOTFOUND);
    assert_int_equal(l.n, 0);
    /* the sink out of memory: the reader is, too (the sink's rows are unknown) */
    f->fail_rc = BDB_ERR_NOMEM;
    assert_int_equal(bdb_db_get_device(fresh, "t1", "e01", full_dev_cb, &l), BDB_ERR_NOMEM);
    assert_int_equal(bdb_db_list_devices(fresh, "t1", full_dev_cb, &l), BDB_ERR_NOMEM);
    f->fail_op = -1;
    free(join(&l));
    /* no tenant: every tenant's devices, from the local catalog */
    lines a = {NULL, 0}, b = {NULL, 0};
    assert_int_equal(bdb_db_list_devices(ref, NULL, full_dev_cb, &a), BDB_OK);
    assert_int_equal(bdb_db_list_devices(db, NULL, full_dev_cb, &b), BDB_OK);
    assert_same("registry of every tenant", join(&a), join(&b));
    bdb_db_close(fresh);
    bdb_db_close(db);
    bdb_db_close(ref);
    fakesink_free(f);
    for (size_t k = 0; k < g_nreg; k++)
        reg_free_row(&g_reg[k]);
    g_nreg = 0;
}

/* ---------------------------------------------------------------- TTLs */

static bdb_sink_ops ttl_ops;
static int32_t g_tier_ttl[3][64]; /* per resolution: the TTL of each window start seen */
static int64_t g_tier_start[3][64];
static size_t g_ntier_ttl[3];
static struct {
    char tenant[8];
    int64_t ttl;
} g_late_ttl[16];
static size_t g_nlate_ttl;

static int ttl_tier_put(bdb_sink *s, const char *tn, const char *dn, const char *mn, int res,
                        const bdb_rollup *r, const int32_t *ttl_s)
{
    fakesink *f = (fakesink *)s;
    pthread_mutex_lock(&f->mu); /* tier puts come from several threads */
    for (size_t i = 0; i < r->n && g_ntier_ttl[res - 1] < 64; i++) {
        g_tier_start[res - 1][g_ntier_ttl[res - 1]] = r->w[i].start;
        g_tier_ttl[res - 1][g_ntier_ttl[res - 1]++] = ttl_s[i];
    }
    pthread_mutex_unlock(&f->mu);
    return fs_tier_put(s, tn, dn, mn, res, r, ttl_s);
}

static int ttl_late_put(bdb_sink *s, const bdb_sink_late *v, size_t n)
{
    for (size_t i = 0; i < n && g_nlate_ttl < 16; i++) {
        snprintf(g_late_ttl[g_nlate_ttl].tenant, sizeof g_late_ttl[0].tenant, "%s", v[i].tenant);
        g_late_ttl[g_nlate_ttl++].ttl = v[i].ttl_ms;
    }
    return fs_late_put(s, v, n);
}

static int64_t tenant_ttl(void *ctx, const char *tn)
{
    (void)ctx;
    return !strcmp(tn, "t1") ? 40 * DAY : 0; /* t2: retention_ms */
}

static void ttl_tweak(bdb_db_opts *o)
{
    o->tier_retention_ms[0] = 2 * DAY;          /* 1m: two days */
    o->tier_retention_ms[1] = 30 * 365LL * DAY; /* 1h: past Cassandra's 20-year cap */
    o->tier_retention_ms[2] = -1;               /* 1d: forever */
    o->retention_ms = 50 * DAY;
    o->tenant_retention = tenant_ttl;
}

static void test_ttls_to_sink(void **st)
{
    (void)st;
    ttl_ops = fs_ops_full;
    ttl_ops.tier_put = ttl_tier_put;
    ttl_ops.late_put = ttl_late_put;
    fakesink *f = fake_with(&ttl_ops);
    open_tweak = ttl_tweak;
    bdb_db *db = open_db("ttl", f);
    open_tweak = NULL;
    /* now is T0 + 3 days: a minute window of T0 + 2 h is past its two days already, one
     * of T0 + 3 d - 1 h is not */
    fake_now = T0 + 3 * DAY;
    const char *tns[2] = {"t1", "t2"};
    for (int t = 0; t < 2; t++) {
        one_report(db, tns[t], "d0", T0 + 2 * HOUR, NULL, 1);
        one_report(db, tns[t], "d0", fake_now - HOUR, NULL, 2);
        one_report(db, tns[t], "d0", fake_now - 3 * HOUR, NULL, 3); /* late: 2 h behind */
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    int past = 0, live = 0;
    for (size_t i = 0; i < g_ntier_ttl[0]; i++) {
        int64_t start = g_tier_start[0][i];
        int64_t want = (start + 60000 + 2 * DAY - fake_now) / 1000;
        if (want <= 0) {
            assert_int_equal(g_tier_ttl[0][i], -1); /* not to be written */
            past++;
        } else {
            assert_int_equal(g_tier_ttl[0][i], want);
            live++;
        }
    }
    assert_true(past > 0 && live > 0);
    assert_true(g_ntier_ttl[1] > 0 && g_ntier_ttl[2] > 0);
    for (size_t i = 0; i < g_ntier_ttl[1]; i++)
        assert_int_equal(g_tier_ttl[1][i], 630720000); /* 20 years */
    for (size_t i = 0; i < g_ntier_ttl[2]; i++)
        assert_int_equal(g_tier_ttl[2][i], 0); /* forever */
    /* each late event with its own tenant's raw TTL */
    assert_int_equal(g_nlate_ttl, 2);
    for (size_t i = 0; i < g_nlate_ttl; i++)
        assert_int_equal(g_late_ttl[i].ttl,
                         !strcmp(g_late_ttl[i].tenant, "t1") ? 40 * DAY : 50 * DAY);
    bdb_db_close(db);
    fakesink_free(f);
}

/* ---------------------------------------------------------------- late events */

/* Two engines over one sink note late events at the same arrival time and in the same
 * arrival order (seq): the events differ in time, in the device's newest time or in
 * the device. Each must be listed: only the same event seen twice is one. */
static void test_late_events_same_arrival(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *x = open_db("la_x", f), *y = open_db("la_y", f);
    fake_now = T0 + 4 * HOUR;
    one_report(x, "t1", "d0", T0 + 2 * HOUR, NULL, 1);
    one_report(y, "t1", "d0", T0 + 2 * HOUR, NULL, 1);
    one_report(x, "t1", "d1", T0 + 2 * HOUR, NULL, 1);
    one_report(y, "t1", "d1", T0 + 3 * HOUR, NULL, 1); /* a newer newest */
    one_report(x, "t1", "d2", T0 + 2 * HOUR, NULL, 1);
    one_report(y, "t1", "d3", T0 + 2 * HOUR, NULL, 1);
    one_report(x, "t1", "d0", T0, NULL, 2);
    one_report(y, "t1", "d0", T0 + 60000, NULL, 2); /* another time */
    one_report(x, "t1", "d1", T0, NULL, 2);
    one_report(y, "t1", "d1", T0, NULL, 2); /* another newest */
    one_report(x, "t1", "d2", T0, NULL, 2);
    one_report(y, "t1", "d3", T0, NULL, 2); /* another device */
    lines a = {NULL, 0};
    assert_int_equal(bdb_db_late_recent(x, "t1", NULL, late_cb, &a), BDB_OK);
    assert_int_equal(bdb_db_late_recent(y, "t1", NULL, late_cb, &a), BDB_OK);
    assert_int_equal(a.n, 6);
    assert_int_equal(bdb_db_flush(y), BDB_OK);
    lines b = {NULL, 0};
    assert_int_equal(bdb_db_late_recent(x, "t1", NULL, late_cb, &b), BDB_OK);
    assert_same("x's and y's late events", join(&a), join(&b));
    /* a callback that stops */
    int n = 0;
    assert_int_equal(bdb_db_late_recent(x, "t1", NULL, stop_late, &n), BDB_OK);
    assert_int_equal(n, 1);
    /* the sink out of memory: the reader is, too */
    f->fail_op = FS_LATE_LIST;
    f->fail_rc = BDB_ERR_NOMEM;
    assert_int_equal(bdb_db_late_recent(x, "t1", NULL, late_cb, &b), BDB_ERR_NOMEM);
    f->fail_op = -1;
    bdb_db_close(x);
    bdb_db_close(y);
    fakesink_free(f);
}

/* ---------------------------------------------------------------- readers */

static void test_reader_edges(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *ref = open_db("rd_ref", NULL), *db = open_db("rd_sink", f);
    feed_both(ref, db);
    int more = 0, n = 0;
    uint64_t total = 0, nostate = 0;
    /* bad page limits are refused, as without a sink */
    assert_int_equal(bdb_db_state_devices(db, "t1", "on", NULL, 0, stop_instate, &n, &more, &total),
                     BDB_ERR_INVALID);
    assert_int_equal(bdb_db_state_devices(db, "t1", "on", NULL, BDB_STATE_PAGE_MAX + 1,
                                          stop_instate, &n, &more, &total),
                     BDB_ERR_INVALID);
    /* callbacks that stop get one call and the reader answers OK */
    assert_int_equal(
        bdb_db_state_devices(db, "t1", "on", NULL, 10, stop_instate, &n, &more, &total), BDB_OK);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(bdb_db_state_counts(db, "t1", stop_count, &n, &nostate), BDB_OK);
    assert_int_equal(n, 1);
    n = 0;
    /* (this reader returns the callback's non-zero answer: db_hot.h) */
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t1", LO, HI, stop_tbt, &n), 1);
    assert_int_equal(n, 1);
    /* a tenant nobody knows */
    lines l = {NULL, 0};
    assert_int_equal(bdb_db_telemetry_by_tenant(db, "t9", LO, HI, tbt_cb, &l), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_db_latest(db, "t9", "d0", latest_cb, &l), BDB_ERR_NOTFOUND);
    assert_int_equal(l.n, 0);
    /* the sink out of memory: never an answer from the local side alone */
    static const enum fs_op ops[] = {FS_STATE_GET, FS_STATE_LIST, FS_COUNT_LIST};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        f->fail_op = (int)ops[i];
        f->fail_nth = 0;
        f->fail_rc = BDB_ERR_NOMEM;
        if (ops[i] == FS_STATE_GET)
            assert_int_equal(bdb_db_latest(db, "t1", "d0", latest_cb, &l), BDB_ERR_NOMEM);
        if (ops[i] == FS_STATE_LIST) {
            assert_int_equal(
                bdb_db_state_devices(db, "t1", "on", NULL, 10, instate_cb, &l, &more, &total),
                BDB_ERR_NOMEM);
            assert_int_equal(bdb_db_state_counts(db, "t1", count_cb, &l, &nostate), BDB_ERR_NOMEM);
        }
        if (ops[i] == FS_COUNT_LIST)
            assert_int_equal(bdb_db_telemetry_by_tenant(db, "t1", LO, HI, tbt_cb, &l),
                             BDB_ERR_NOMEM);
        assert_int_equal(l.n, 0);
    }
    f->fail_op = -1;
    /* a flush with nothing new sends nothing */
    char *before = dump_fake(f, S_ALL);
    uint64_t calls[FS_NOPS];
    memcpy(calls, f->op_calls, sizeof calls);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    for (int op = FS_TIER_PUT; op < FS_NOPS; op++)
        if (op != FS_TIER_READ && op != FS_FLEET_READ && op != FS_STATE_GET &&
            op != FS_STATE_LIST && op != FS_DEVICE_LIST && op != FS_COUNT_LIST &&
            op != FS_LATE_LIST)
            assert_int_equal(f->op_calls[op], calls[op]);
    assert_same("fake after an empty flush", before, dump_fake(f, S_ALL));
    /* a tier range outside the device's life: nothing, without asking the sink */
    uint64_t reads = f->op_calls[FS_TIER_READ];
    bdb_rollup r;
    bdb_rollup_init(&r, bdb_res_width(BDB_RES_1H));
    assert_int_equal(
        bdb_db_tier_read(db, "t1", "d0", &mets[0], 1, BDB_RES_1H, LO, T0 - 3 * DAY, &r), BDB_OK);
    assert_int_equal(r.n, 0);
    assert_int_equal(f->op_calls[FS_TIER_READ], reads);
    bdb_rollup_free(&r);
    free(join(&l));
    bdb_db_close(db);
    bdb_db_close(ref);
    fakesink_free(f);
}

/* ---------------------------------------------------------------- raw and tier puts */

/* A time written twice with head chunks cut between the writes (the newer value is
 * what the sink gets), and sub-buckets 3 then 2 in one bucket (one put per partition,
 * gathered from interleaved samples; reads ask the widest). */
static void test_rewrites_and_subbuckets(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *ref = open_db("rs_ref", NULL), *db = open_db("rs_sink", f);
    bdb_db *both[2] = {ref, db};
    fake_now = T0; /* a new device's sub-buckets apply from now on */
    for (int j = 0; j < 2; j++) {
        assert_int_equal(bdb_db_set_subbuckets(both[j], "t1", "d0", 3), BDB_OK);
        for (int i = 0; i < 12; i++) /* seconds 0..11: sub-buckets 0,1,2,0,... */
            one_report(both[j], "t1", "d0", T0 + i * 1000, NULL, i);
        one_report(both[j], "t1", "d0", T0 + 2000, NULL, 102); /* after two chunk cuts */
        assert_int_equal(bdb_db_set_subbuckets(both[j], "t1", "d0", 2), BDB_OK);
        for (int i = 20; i < 26; i++)
            one_report(both[j], "t1", "d0", T0 + i * 1000, NULL, i);
        assert_int_equal(bdb_db_flush(both[j]), BDB_OK);
    }
    assert_int_equal(f->nraw, 18); /* one row per time */
    assert_same("read back through the sink", dump_db(ref, S_RAW), dump_db(db, S_RAW));
    int64_t parts[3] = {0, 0, 0};
    for (size_t k = 0; k < f->nraw; k++) {
        int64_t sub = f->raw[k].part - bdb_align_down(f->raw[k].part, 1000);
        assert_true(sub >= 0 && sub < 3);
        parts[sub]++;
        if (f->raw[k].ts == T0 + 2000)
            assert_true(f->raw[k].v == 102);
    }
    assert_true(parts[0] > 0 && parts[1] > 0 && parts[2] > 0);
    bdb_db_close(db);
    bdb_db_close(ref);
    fakesink_free(f);
}

/* More series than tier put threads, one put failing: the flush fails, the retry puts
 * every window; and fleet windows of days in several file spans, then late data in
 * the oldest: the fake holds what the reference computes. */
static void many_series(bdb_db *const *dbs, int round)
{
    for (int d = 0; d < 10; d++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", d);
        for (int k = 0; k < 3; k++) {
            int64_t ts = round == 0 ? T0 + k * 9 * DAY + d * 60000 : T0 + 5 * 60000 + d;
            for (int j = 0; j < 2; j++) {
                bdb_batch *b = bdb_batch_new();
                bdb_batch_begin(b, name, strlen(name), ts, 0);
                bdb_batch_metric(b, "temp", 4, d + k + round);
                bdb_batch_metric(b, "hum", 3, 50 - d);
                assert_int_equal(bdb_batch_end(b), 1);
                assert_int_equal(bdb_db_write(dbs[j], "t1", b), BDB_OK);
                bdb_batch_free(b);
            }
        }
    }
}

static char *fleet_and_tiers(bdb_db *db)
{
    lines l = {NULL, 0};
    for (int res = BDB_RES_1M; res <= BDB_RES_1D; res++)
        for (int d = 0; d < 10; d++)
            for (int m = 0; m < NMET; m++) {
                char name[16];
                snprintf(name, sizeof name, "m%d", d);
                bdb_rollup r;
                bdb_rollup_init(&r, bdb_res_width((enum bdb_res)res));
                assert_int_equal(bdb_db_tier_read(db, "t1", name, &mets[m], 1, (enum bdb_res)res,
                                                  T0 - DAY, T0 + 30 * DAY, &r),
                                 BDB_OK);
                for (size_t i = 0; i < r.n; i++)
                    add_window(&l, "w", res, name, mets[m], &r.w[i]);
                bdb_rollup_free(&r);
            }
    for (int res = BDB_RES_1H; res <= BDB_RES_1D; res++)
        for (int m = 0; m < NMET; m++) {
            bdb_fleet fl;
            bdb_fleet_init(&fl, bdb_res_width((enum bdb_res)res));
            assert_int_equal(bdb_db_fleet_read(db, "t1", mets[m], (enum bdb_res)res, T0 - DAY,
                                               T0 + 30 * DAY, &fl),
                             BDB_OK);
            add_fleet(&l, res, mets[m], &fl);
            bdb_fleet_free(&fl);
        }
    return join(&l);
}

static void test_many_series_and_fleet_spans(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *ref = open_db("ms_ref", NULL), *db = open_db("ms_sink", f);
    bdb_db *both[2] = {ref, db};
    fake_now = T0 + 20 * DAY;
    many_series(both, 0);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    f->fail_op = FS_TIER_PUT;
    f->fail_nth = 3;
    assert_int_not_equal(bdb_db_flush(db), BDB_OK);
    f->fail_op = -1;
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_same("tiers and fleet after a failed put", fleet_and_tiers(ref), fleet_and_tiers(db));
    /* late data into the oldest day, behind newer published files */
    many_series(both, 1);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_same("tiers and fleet after late data", fleet_and_tiers(ref), fleet_and_tiers(db));
    bdb_db_close(db);
    bdb_db_close(ref);
    fakesink_free(f);
}

/* ---------------------------------------------------------------- flush failures */

/* A flush the backend keeps refusing (a Cassandra node rejecting rows) is counted: in
 * all, in a row since when, and the last error, for /health and /metrics. A success
 * ends the run; the samples were in the WAL all along and reach the sink. */
static void test_flush_failures_counted(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *db = open_db("ff", f);
    fake_now = T0 + 2 * HOUR;
    bdb_db_stats s;
    one_report(db, "t1", "d0", T0 + HOUR, NULL, 1);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_get_stats(db, &s);
    assert_int_equal(s.flush_failures, 0);
    assert_int_equal(s.flush_fail_streak, 0);
    assert_int_equal(s.flush_failing_since_ms, 0);
    one_report(db, "t1", "d0", T0 + HOUR + 1000, NULL, 2);
    f->fail_op = FS_PUT;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_INVALID;
    assert_int_equal(bdb_db_flush(db), BDB_ERR_INVALID);
    fake_now += 60000;
    assert_int_equal(bdb_db_flush(db), BDB_ERR_INVALID);
    bdb_db_get_stats(db, &s);
    assert_int_equal(s.flush_failures, 2);
    assert_int_equal(s.flush_fail_streak, 2);
    assert_int_equal(s.flush_failing_since_ms, T0 + 2 * HOUR); /* the first of the run */
    assert_int_equal(s.flush_last_error, BDB_ERR_INVALID);
    assert_int_equal(s.flushes, 1);
    f->fail_op = -1;
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    bdb_db_get_stats(db, &s);
    assert_int_equal(s.flush_failures, 2);
    assert_int_equal(s.flush_fail_streak, 0);
    assert_int_equal(s.flush_failing_since_ms, 0);
    assert_int_equal(s.flushes, 2);
    bdb_db_close(db);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_partial_op_groups, setup, teardown),
        cmocka_unit_test_setup_teardown(test_registry_rows_from_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttls_to_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_events_same_arrival, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rewrites_and_subbuckets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_series_and_fleet_spans, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_failures_counted, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
