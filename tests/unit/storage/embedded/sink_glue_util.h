/* sink_glue_util: what the tests of the engine's sink glue share (sink_glue_test.c,
 * sink_glue_read_test.c, alloc_fail_sink_test.c, sink_glue_edge_test.c): data
 * directories on tmpfs, an engine over the fake sink (storage/fakesink.h) or none, a
 * deterministic feed of reports, and one sorted text per side (dump_db: what the
 * engine's public readers answer; dump_fake: what the fake holds, in the same words),
 * so that a check is one string compare.
 *
 * Header-only (the Makefile links each test from its own .c): include it in one test
 * file per binary; its functions are static inline, so a test uses what it needs. */
#ifndef BDB_TEST_SINK_GLUE_UTIL_H
#define BDB_TEST_SINK_GLUE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/crashutil.h"
#include "storage/fakesink.h"

#include "agg/fleet.h"
#include "agg/rollup.h"
#include "agg/stats.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOUR BDB_MS_HOUR
#define DAY BDB_MS_DAY
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define LO (T0 - 4 * DAY)
#define HI (T0 + 6 * DAY)
#define NDEV 4
#define NMET 2
#define NSTATE 3

static const char *const devs[NDEV] = {"d0", "d1", "d2", "d3"};
static const char *const mets[NMET] = {"hum", "temp"};
static const char *const states[NSTATE] = {"fault", "off", "on"};
static char tmpdir[64];
static int64_t fake_now;

static inline int64_t clock_fn(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static inline int setup(void **st)
{
    (void)st;
    /* tmpfs when there is one: the sweep copies and reopens data directories */
    snprintf(tmpdir, sizeof tmpdir, "%s/bdb_sinkglue_XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    assert_non_null(mkdtemp(tmpdir));
    bdb_log_set_level(BDB_LOG_ERROR + 1); /* the failing flushes log by design */
    return 0;
}

static inline int teardown(void **st)
{
    (void)st;
    tu_rm_rf(tmpdir);
    return 0;
}

static inline void path_of(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* Set by a test to change the options of the engines open_db makes. */
static void (*open_tweak)(bdb_db_opts *o);

static inline bdb_db *open_db(const char *name, fakesink *f)
{
    char dir[128];
    path_of(dir, sizeof dir, name);
    bdb_db_opts o;
    eu_opts(&o, dir, clock_fn, NULL);
    /* without fsync: the sweep flushes a few hundred times and crash images here are
     * copies of the page cache, so durability to the platter is not under test
     * (powerloss_test.c does that) and a shared disk's fsync latency would be the
     * run's whole cost */
    o.vfs = eu_nosync_vfs();
    o.late_threshold_ms = HOUR;
    o.chunk_max_samples = 8; /* several head chunks per series */
    o.sink = f ? &f->base : NULL;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC; /* crash images are copies, not power cuts */
    if (open_tweak)
        open_tweak(&o);
    return eu_open(&o);
}

/* ---- the reports: round 0 spans two days of four devices; round 1 adds newer
 * reports, rewrites of flushed times, events hours late, a time written twice
 * before its flush and one device in sub-buckets. Deterministic. */

static inline void report(bdb_db *const *dbs, size_t ndb, int dev, int64_t ts, int state, double v)
{
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, devs[dev], strlen(devs[dev]), ts, 0);
    if (dev == 1)
        bdb_batch_tag(b, "site", 4, "north", 5);
    if (state >= 0)
        bdb_batch_state(b, states[state], strlen(states[state]));
    bdb_batch_metric(b, "temp", 4, v);
    if (dev != 3) /* d3 never reports hum */
        bdb_batch_metric(b, "hum", 3, 100 - v / 2);
    assert_int_equal(bdb_batch_end(b), 1);
    for (size_t i = 0; i < ndb; i++)
        assert_int_equal(bdb_db_write(dbs[i], "t1", b), BDB_OK);
    bdb_batch_free(b);
}

static inline void feed(bdb_db *const *dbs, size_t ndb, int round)
{
    if (round == 0) {
        for (int i = 0; i < 60; i++) {
            fake_now = T0 + i * 47 * 60000 + 1000;
            for (int d = 0; d < NDEV; d++)
                report(dbs, ndb, d, fake_now - d * 1000, (i + d) % 5 == 0 ? (i + d) % NSTATE : -1,
                       d * 10 + (i * 37 % 23) * 0.5);
        }
        return;
    }
    int64_t base = T0 + 60 * 47 * 60000;
    /* d1's partitions split into sub-buckets from here on: the sink gets one put per
     * sub-bucket, gathered from interleaved samples */
    for (size_t i = 0; i < ndb; i++)
        assert_int_equal(bdb_db_set_subbuckets(dbs[i], "t1", devs[1], 4), BDB_OK);
    for (int i = 0; i < 12; i++) {
        fake_now = base + i * 13 * 60000;
        for (int d = 0; d < NDEV; d++)
            report(dbs, ndb, d, fake_now - d * 1000, i % 4 == d ? i % NSTATE : -1,
                   d * 10 + i * 0.25);
    }
    /* late: a rewrite of a flushed time (same time, new value) and a new time a day
     * back, both far behind the device's newest */
    report(dbs, ndb, 0, T0 + 5 * 47 * 60000 + 1000, -1, 77.5);
    report(dbs, ndb, 2, T0 + 3 * HOUR + 123, 1, 12.25);
    /* a time written twice before the flush: the newer write wins, within one head
     * chunk and (the first report of this round, chunks cut every 8 samples) across
     * two */
    report(dbs, ndb, 3, base + 5 * 60000 + 7, -1, 1.5);
    report(dbs, ndb, 3, base + 5 * 60000 + 7, -1, 2.5);
    report(dbs, ndb, 3, base - 3 * 1000, -1, 9.75);
}

/* ---- one text for both sides: a list of lines, sorted before comparing ---- */

typedef struct lines {
    char **v;
    size_t n;
} lines;

static inline void addf(lines *l, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
    assert_non_null(l->v);
    l->v[l->n++] = strdup(buf);
}

static inline int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static inline char *join(lines *l)
{
    if (l->n > 1) /* (l->v is NULL without lines: qsort(NULL) is undefined) */
        qsort(l->v, l->n, sizeof *l->v, cmp_str);
    size_t len = 1;
    for (size_t i = 0; i < l->n; i++)
        len += strlen(l->v[i]) + 1;
    char *s = malloc(len), *p = s;
    for (size_t i = 0; i < l->n; i++) {
        p += sprintf(p, "%s\n", l->v[i]);
        free(l->v[i]);
    }
    *p = 0;
    free(l->v);
    l->v = NULL;
    l->n = 0;
    return s;
}

enum { S_RAW = 1, S_TIER = 2, S_FLEET = 4, S_STATE = 8, S_DEV = 16, S_COUNT = 32, S_LATE = 64 };
#define S_ALL 127
#define S_SINKSIDE (S_STATE | S_DEV | S_COUNT | S_LATE)

static inline void add_window(lines *l, const char *what, int res, const char *dn, const char *mn,
                              const bdb_window *w)
{
    addf(l, "tier %s %d %s %s %lld n=%llu min=%.17g max=%.17g sum=%.12g", what, res, dn, mn,
         (long long)w->start, (unsigned long long)bdb_stats_count(&w->st), bdb_stats_min(&w->st),
         bdb_stats_max(&w->st), bdb_stats_sum(&w->st));
}

static inline void add_fleet(lines *l, int res, const char *mn, const bdb_fleet *f)
{
    for (size_t i = 0; i < f->n; i++) {
        const bdb_fleet_win *w = &f->w[i];
        char devsbuf[64] = "";
        for (size_t k = 0; k < w->ndev; k++) {
            strcat(devsbuf, w->dev[k]);
            strcat(devsbuf, ",");
        }
        addf(l, "fleet %d %s %lld [%s] n=%llu min=%.17g max=%.17g sum=%.12g", res, mn,
             (long long)w->start, devsbuf, (unsigned long long)bdb_stats_count(&w->st),
             bdb_stats_min(&w->st), bdb_stats_max(&w->st), bdb_stats_sum(&w->st));
    }
}

struct dctx {
    lines *l;
    const char *dn;
};

static inline int latest_cb(void *ctx, const bdb_latest *x)
{
    lines *l = ctx;
    addf(l, "state %s ev=%lld %s@%lld", x->device, (long long)x->event_ts,
         x->state ? x->state : "-", (long long)(x->state ? x->state_ts : 0));
    for (size_t i = 0; i < x->nmetrics; i++)
        addf(l, "metric %s %s %lld %.17g", x->device, x->metrics[i].name,
             (long long)x->metrics[i].ts, x->metrics[i].value);
    return 0;
}

static inline int instate_cb(void *ctx, const char *dn, int64_t state_ts)
{
    struct dctx *c = ctx;
    addf(c->l, "instate %s %s %lld", c->dn, dn, (long long)state_ts);
    return 0;
}

static inline int count_cb(void *ctx, const char *state, uint64_t n)
{
    addf(ctx, "statecount %s %llu", state, (unsigned long long)n);
    return 0;
}

/* Pages of one device each: the same members as one page, in name order. */
struct page {
    char last[32];
    int n;
};

static inline int page_cb(void *ctx, const char *dn, int64_t state_ts)
{
    (void)state_ts;
    struct page *p = ctx;
    assert_true(strcmp(dn, p->last) > 0);
    snprintf(p->last, sizeof p->last, "%s", dn);
    p->n++;
    return 0;
}

static inline void check_pages(bdb_db *db, const char *state, uint64_t total)
{
    struct page p = {"", 0};
    int more = 1;
    for (int guard = 0; more && guard <= NDEV; guard++) {
        uint64_t t = 0;
        int before = p.n;
        assert_int_equal(
            bdb_db_state_devices(db, "t1", state, p.n ? p.last : NULL, 1, page_cb, &p, &more, &t),
            BDB_OK);
        assert_int_equal(t, total);
        assert_true(p.n <= before + 1);
    }
    assert_int_equal((uint64_t)p.n, total);
}

static inline int dev_cb(void *ctx, const bdb_device_info *d)
{
    lines *l = ctx;
    addf(l, "device %s samples=%llu %lld..%lld bucket=%lld", d->device,
         (unsigned long long)d->samples, (long long)d->first_ts, (long long)d->last_ts,
         (long long)d->bucket_ms);
    return 0;
}

static inline int tbt_cb(void *ctx, const bdb_tbt_row *r)
{
    lines *l = ctx;
    addf(l, "count %s %lld..%lld %llu", r->device, (long long)r->bucket_start,
         (long long)r->bucket_end, (unsigned long long)r->events);
    return 0;
}

static inline int late_cb(void *ctx, const bdb_late_event *e)
{
    lines *l = ctx;
    addf(l, "late %s %lld newest=%lld arrived=%lld", e->device, (long long)e->ts,
         (long long)e->newest, (long long)e->arrived);
    return 0;
}

/* What the engine's public readers answer. */
static inline char *dump_db(bdb_db *db, int sections)
{
    lines l = {NULL, 0};
    for (int d = 0; d < NDEV && (sections & S_RAW); d++) {
        bdb_samples s[NMET];
        memset(s, 0, sizeof s);
        int rc = bdb_db_read(db, "t1", devs[d], (const char *const *)mets, NMET, LO, HI, s, NULL);
        if (rc != BDB_OK)
            addf(&l, "raw %s error %d", devs[d], rc);
        for (int m = 0; m < NMET && rc == BDB_OK; m++)
            for (size_t i = 0; i < s[m].n; i++)
                addf(&l, "raw %s %s %lld %.17g", devs[d], mets[m], (long long)s[m].ts[i],
                     s[m].v[i]);
        for (int m = 0; m < NMET; m++)
            bdb_samples_free(&s[m]);
    }
    for (int res = BDB_RES_1M; res <= BDB_RES_1D && (sections & S_TIER); res++)
        for (int d = 0; d < NDEV; d++)
            for (int m = 0; m < NMET; m++) {
                bdb_rollup r;
                bdb_rollup_init(&r, bdb_res_width((enum bdb_res)res));
                int rc =
                    bdb_db_tier_read(db, "t1", devs[d], &mets[m], 1, (enum bdb_res)res, LO, HI, &r);
                if (rc != BDB_OK)
                    addf(&l, "tier error %d", rc);
                for (size_t i = 0; i < r.n; i++)
                    add_window(&l, "w", res, devs[d], mets[m], &r.w[i]);
                bdb_rollup_free(&r);
            }
    for (int res = BDB_RES_1H; res <= BDB_RES_1D && (sections & S_FLEET); res++)
        for (int m = 0; m < NMET; m++) {
            bdb_fleet f;
            bdb_fleet_init(&f, bdb_res_width((enum bdb_res)res));
            int rc = bdb_db_fleet_read(db, "t1", mets[m], (enum bdb_res)res, LO, HI, &f);
            if (rc != BDB_OK)
                addf(&l, "fleet error %d", rc);
            add_fleet(&l, res, mets[m], &f);
            bdb_fleet_free(&f);
        }
    if (sections & S_STATE) {
        for (int d = 0; d < NDEV; d++) {
            int rc = bdb_db_latest(db, "t1", devs[d], latest_cb, &l);
            if (rc != BDB_OK)
                addf(&l, "state %s error %d", devs[d], rc);
        }
        for (int k = 0; k < NSTATE; k++) {
            struct dctx c = {&l, states[k]};
            int more = 0;
            uint64_t total = 0;
            int rc =
                bdb_db_state_devices(db, "t1", states[k], NULL, 100, instate_cb, &c, &more, &total);
            addf(&l, "instate %s total=%llu more=%d rc=%d", states[k], (unsigned long long)total,
                 more, rc);
            if (rc == BDB_OK)
                check_pages(db, states[k], total);
        }
        uint64_t no_state = 0;
        int rc = bdb_db_state_counts(db, "t1", count_cb, &l, &no_state);
        addf(&l, "nostate %llu rc=%d", (unsigned long long)no_state, rc);
    }
    if (sections & S_DEV) {
        int rc = bdb_db_list_devices(db, "t1", dev_cb, &l);
        if (rc != BDB_OK)
            addf(&l, "device error %d", rc);
        for (int d = 0; d < NDEV; d++) {
            lines one = {NULL, 0};
            rc = bdb_db_get_device(db, "t1", devs[d], dev_cb, &one);
            char *s = join(&one);
            addf(&l, "getdevice %d %s", rc, s);
            free(s);
        }
    }
    if ((sections & S_COUNT) && bdb_db_telemetry_by_tenant(db, "t1", LO, HI, tbt_cb, &l) != BDB_OK)
        addf(&l, "count error");
    if ((sections & S_LATE) && bdb_db_late_recent(db, "t1", NULL, late_cb, &l) != BDB_OK)
        addf(&l, "late error");
    return join(&l);
}

static inline void fs_state_cb(void *ud, const bdb_sink_state *st)
{
    bdb_latest_metric m[8];
    assert_true(st->nmetrics <= 8);
    for (size_t i = 0; i < st->nmetrics; i++)
        m[i] = (bdb_latest_metric){st->metrics[i].name, st->metrics[i].ts, st->metrics[i].v, 0};
    bdb_latest x = {st->tenant, st->device, st->event_ts, st->state, st->state_ts, m, st->nmetrics};
    latest_cb(ud, &x);
}

static inline void fs_instate_cb(void *ud, const bdb_sink_state *st)
{
    struct dctx *c = ud;
    instate_cb(c, st->device, st->state_ts);
}

/* What the fake holds, in dump_db's words (the fields the sink keeps). */
static inline char *dump_fake(fakesink *f, int sections)
{
    lines l = {NULL, 0};
    for (size_t k = 0; k < f->nraw && (sections & S_RAW); k++)
        addf(&l, "raw %s %s %lld %.17g", f->raw[k].device, f->raw[k].metric,
             (long long)f->raw[k].ts, f->raw[k].v);
    for (size_t k = 0; k < f->ntier && (sections & S_TIER); k++)
        for (size_t i = 0; i < f->tier[k].r.n; i++)
            add_window(&l, "w", f->tier[k].res, f->tier[k].device, f->tier[k].metric,
                       &f->tier[k].r.w[i]);
    for (size_t k = 0; k < f->nfleet && (sections & S_FLEET); k++)
        add_fleet(&l, f->fleet[k].res, f->fleet[k].metric, &f->fleet[k].f);
    for (size_t k = 0; k < f->nst && (sections & S_STATE); k++)
        fs_emit_state(&f->st[k], 1, fs_state_cb, &l);
    for (int k = 0; k < NSTATE && (sections & S_STATE); k++) {
        struct dctx c = {&l, states[k]};
        uint64_t total = 0;
        for (size_t j = 0; j < f->nst; j++)
            if (fs_eq(f->st[j].state, states[k])) {
                fs_emit_state(&f->st[j], 0, fs_instate_cb, &c);
                total++;
            }
        addf(&l, "instate %s total=%llu more=0 rc=0", states[k], (unsigned long long)total);
        if (total)
            addf(&l, "statecount %s %llu", states[k], (unsigned long long)total);
    }
    if (sections & S_STATE) {
        uint64_t no_state = 0;
        for (size_t j = 0; j < f->nst; j++)
            no_state += f->st[j].state == NULL;
        addf(&l, "nostate %llu rc=0", (unsigned long long)no_state);
    }
    for (size_t k = 0; k < f->ndev && (sections & S_DEV); k++) {
        fs_device *d = &f->dev[k];
        addf(&l, "device %s samples=%llu %lld..%lld bucket=%lld", d->device,
             (unsigned long long)d->samples, (long long)d->first_ts, (long long)d->last_ts,
             (long long)d->bucket_ms);
        addf(&l, "getdevice 0 device %s samples=%llu %lld..%lld bucket=%lld\n", d->device,
             (unsigned long long)d->samples, (long long)d->first_ts, (long long)d->last_ts,
             (long long)d->bucket_ms);
    }
    for (size_t k = 0; k < f->ncnt && (sections & S_COUNT); k++)
        addf(&l, "count %s %lld..%lld %llu", f->cnt[k].device, (long long)f->cnt[k].bucket_start,
             (long long)f->cnt[k].bucket_end, (unsigned long long)f->cnt[k].events);
    for (size_t k = 0; k < f->nlate && (sections & S_LATE); k++)
        addf(&l, "late %s %lld newest=%lld arrived=%lld", f->late[k].device,
             (long long)f->late[k].e.ts, (long long)f->late[k].e.newest,
             (long long)f->late[k].e.arrived);
    return join(&l);
}

static inline void assert_same(const char *what, char *want, char *got)
{
    if (strcmp(want, got) != 0) {
        /* the first differing line, to see what went wrong */
        size_t i = 0, line = 1;
        while (want[i] && want[i] == got[i])
            if (want[i++] == '\n')
                line++;
        fprintf(stderr, "%s differs at line %zu:\n want: %.200s\n  got: %.200s\n", what, line,
                want + i, got + i);
    }
    assert_string_equal(want, got);
    free(want);
    free(got);
}

#endif
