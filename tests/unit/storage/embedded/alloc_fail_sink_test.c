/* alloc_fail_sink: the engine's sink glue under allocation failure, every allocation
 * of a path in turn (common/alloc.h, BDB_ALLOC_FAIL_NTH, N = 1, 2, ... until a run no
 * longer reaches an injected failure), against the fake sink of storage/fakesink.h.
 *
 * Base: an engine over the fake flushed a first round of reports (raw samples, tiers,
 * fleet, state, registry, counts and late events are in the fake) and holds a second
 * round unflushed (a new device, newer states, late events), which its WAL holds too;
 * the data directory copied at that moment is the crash image every flush run starts
 * from.
 *   - flush: open a copy of the image over a copy of the fake as it was, then flush
 *     with allocation N failing. The flush answers BDB_OK or BDB_ERR_NOMEM. After
 *     NOMEM: the engine is not read-only, its readers answer exactly what they answered
 *     before the flush, a copy of its data directory opened without a sink replays
 *     every unflushed sample from the WAL (or, when only the clean-up after the commit
 *     failed, the committed state), and the next flush succeeds. Either way the fake
 *     ends holding exactly what a flush without failure leaves in it (puts are
 *     idempotent: nothing lost, nothing counted twice).
 *   - reads: the base engine (local head and index merged with the fake) and an engine
 *     on an empty directory over the same fake (every answer from the sink) run each
 *     raw, state, registry, count, late, tier and fleet reader with allocation N
 *     failing: each answers exactly what it answers without failure, or
 *     BDB_ERR_NOMEM.
 * The runs are in this process (a fork per run costs too much under ASan): an
 * allocation site that still aborts ends the binary, which fails the test; a leak on
 * an error path fails the ASan pass (detect_leaks=1) at exit. Figures: "alloc sweep
 * ...". ALLOC_SINK_ONLY=f:N (flush) or r:N (reads) runs allocation N alone. */
#include "storage/embedded/sink_glue_util.h"

#define MAX_SITES 20000 /* bound of every sweep */

static fakesink *g_fake; /* after round 0: every flush run starts from a copy */
/* The base, kept open for the whole file: closing flushes, which would change the
 * fake. */
static bdb_db *g_base, *g_fresh;
static char g_image[160], g_work[160], g_copy[160];
static char *g_want_reads, *g_want_fake, *g_want_wal, *g_want_wal_after;

/* Round 0: d0 and d1, four reports 20 minutes apart (states on some, d1 tagged),
 * then a report of d0 61 minutes behind its newest (a late event). Round 1: newer
 * reports of d0 and d1 (new states), d3's first ones, a late report of d1. */
static void mini_feed(bdb_db *db, int round)
{
    if (round == 0) {
        for (int i = 0; i < 4; i++) {
            fake_now = T0 + i * 20 * 60000 + 1000;
            for (int d = 0; d < 2; d++)
                report(&db, 1, d, fake_now - d * 1000, (i + d) % 3 == 0 ? (i + d) % NSTATE : -1,
                       d * 10 + i * 0.5);
        }
        report(&db, 1, 0, T0 + 5, -1, 7.75);
        return;
    }
    for (int i = 0; i < 2; i++) {
        fake_now = T0 + 2 * HOUR + i * 7 * 60000;
        report(&db, 1, 0, fake_now, i, 40 + i);
        report(&db, 1, 1, fake_now - 1000, 2 - i, 50 + i);
        report(&db, 1, 3, fake_now - 3000, i == 1 ? 0 : -1, 60 + i);
    }
    report(&db, 1, 1, T0 + 5 * 60000 + 17, 1, 12.25);
}

static char *dup0(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* A deep copy of f (the same contents, its own counters and lock). */
static fakesink *fake_clone(const fakesink *f)
{
    fakesink *c = fakesink_new(f->base.ops == &fs_ops_full);
    c->raw = calloc(f->nraw + 1, sizeof *c->raw);
    c->tier = calloc(f->ntier + 1, sizeof *c->tier);
    c->fleet = calloc(f->nfleet + 1, sizeof *c->fleet);
    c->st = calloc(f->nst + 1, sizeof *c->st);
    c->dev = calloc(f->ndev + 1, sizeof *c->dev);
    c->cnt = calloc(f->ncnt + 1, sizeof *c->cnt);
    c->late = calloc(f->nlate + 1, sizeof *c->late);
    assert_true(c->raw && c->tier && c->fleet && c->st && c->dev && c->cnt && c->late);
    for (size_t k = 0; k < f->nraw; k++, c->nraw++) {
        c->raw[k] = f->raw[k];
        c->raw[k].tenant = dup0(f->raw[k].tenant);
        c->raw[k].device = dup0(f->raw[k].device);
        c->raw[k].metric = dup0(f->raw[k].metric);
    }
    for (size_t k = 0; k < f->ntier; k++, c->ntier++) {
        c->tier[k] = f->tier[k];
        c->tier[k].tenant = dup0(f->tier[k].tenant);
        c->tier[k].device = dup0(f->tier[k].device);
        c->tier[k].metric = dup0(f->tier[k].metric);
        bdb_rollup_init(&c->tier[k].r, f->tier[k].r.width);
        for (size_t i = 0; i < f->tier[k].r.n; i++)
            assert_int_equal(bdb_rollup_set_window(&c->tier[k].r, &f->tier[k].r.w[i]), BDB_OK);
    }
    for (size_t k = 0; k < f->nfleet; k++, c->nfleet++) {
        c->fleet[k] = f->fleet[k];
        c->fleet[k].tenant = dup0(f->fleet[k].tenant);
        c->fleet[k].metric = dup0(f->fleet[k].metric);
        bdb_fleet_init(&c->fleet[k].f, f->fleet[k].f.width);
        assert_int_equal(bdb_fleet_merge(&c->fleet[k].f, &f->fleet[k].f), BDB_OK);
    }
    for (size_t k = 0; k < f->nst; k++, c->nst++) {
        c->st[k] = f->st[k];
        c->st[k].tenant = dup0(f->st[k].tenant);
        c->st[k].device = dup0(f->st[k].device);
        c->st[k].state = dup0(f->st[k].state);
        c->st[k].m = calloc(f->st[k].nm + 1, sizeof *c->st[k].m);
        assert_non_null(c->st[k].m);
        for (size_t j = 0; j < f->st[k].nm; j++) {
            c->st[k].m[j] = f->st[k].m[j];
            c->st[k].m[j].name = dup0(f->st[k].m[j].name);
        }
    }
    for (size_t k = 0; k < f->ndev; k++, c->ndev++) {
        c->dev[k] = f->dev[k];
        c->dev[k].tenant = dup0(f->dev[k].tenant);
        c->dev[k].device = dup0(f->dev[k].device);
        c->dev[k].rest = NULL; /* not compared */
    }
    for (size_t k = 0; k < f->ncnt; k++, c->ncnt++) {
        c->cnt[k] = f->cnt[k];
        c->cnt[k].tenant = dup0(f->cnt[k].tenant);
        c->cnt[k].device = dup0(f->cnt[k].device);
    }
    for (size_t k = 0; k < f->nlate; k++, c->nlate++) {
        c->late[k] = f->late[k];
        c->late[k].tenant = dup0(f->late[k].tenant);
        c->late[k].device = dup0(f->late[k].device);
        c->late[k].e.tenant = c->late[k].tenant;
        c->late[k].e.device = c->late[k].device;
    }
    return c;
}

#define FAILF(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        fail();                                                                                    \
    } while (0)

/* The first line where got differs from want, on stderr. */
static void show_diff(const char *want, const char *got)
{
    size_t i = 0, bol = 0;
    while (want[i] && want[i] == got[i])
        if (want[i++] == '\n')
            bol = i;
    fprintf(stderr, " want: %.160s\n  got: %.160s\n", want + bol, got + bol);
}

/* The raw samples a data directory's WAL gives an engine without a sink. */
static char *wal_dump(const char *name)
{
    bdb_db *db = open_db(name, NULL);
    char *s = dump_db(db, S_RAW);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    return s;
}

static void fresh_work(void)
{
    tu_rm_rf(g_work);
    assert_int_equal(cu_copy_tree(g_image, g_work), 0);
}

/* Opens the work copy over f. The tier state is left to load inside the swept flush:
 * a tier file skipped there for lack of memory made the flush send windows without
 * that file's samples (db_tier.c scan_one; this sweep found it). */
static bdb_db *open_work(fakesink *f)
{
    bdb_db *db = open_db("work", f);
    return db;
}

/* ---------------------------------------------------------------- base */

static void build_base(void)
{
    g_fake = fakesink_new(1);
    g_base = open_db("base", g_fake);
    mini_feed(g_base, 0);
    assert_int_equal(bdb_db_flush(g_base), BDB_OK);
    mini_feed(g_base, 1);
    char base[160];
    path_of(base, sizeof base, "base");
    path_of(g_image, sizeof g_image, "image");
    path_of(g_work, sizeof g_work, "work");
    path_of(g_copy, sizeof g_copy, "copy");
    assert_int_equal(cu_copy_tree(base, g_image), 0);
    /* What a flush without failure gives: the readers (the same before and after it),
     * the fake after it, the WAL's samples before and after it. */
    fresh_work();
    g_want_wal = wal_dump("work");
    fresh_work();
    fakesink *f = fake_clone(g_fake);
    bdb_db *db = open_work(f);
    char *before = dump_db(db, S_ALL);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    g_want_reads = dump_db(db, S_ALL);
    assert_same("reads before and after a flush", before, strdup(g_want_reads));
    g_want_fake = dump_fake(f, S_ALL);
    tu_rm_rf(g_copy);
    assert_int_equal(cu_copy_tree(g_work, g_copy), 0);
    g_want_wal_after = wal_dump("copy");
    assert_int_equal(bdb_db_close(db), BDB_OK);
    fakesink_free(f);
    /* the unflushed round: d1's late report is in the WAL's samples */
    assert_non_null(strstr(g_want_wal, "raw d1 temp 1699920300017 12.25"));
    g_fresh = open_db("fresh", g_fake);
}

/* ---------------------------------------------------------------- flush run */

/* Flush with allocation n failing: 0 = no failure injected, 1 = the flush answered
 * BDB_OK, 2 = BDB_ERR_NOMEM; a wrong result fails the test. */
static int flush_run(uint64_t n)
{
    fresh_work();
    fakesink *f = fake_clone(g_fake);
    bdb_db *db = open_work(f);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, n);
    int rc = bdb_db_flush(db);
    bdb_alloc_fail_disarm();
    int hit = bdb_alloc_fail_injected() > 0;
    if (rc != BDB_OK && rc != BDB_ERR_NOMEM)
        FAILF("flush, allocation %llu failing: %s", (unsigned long long)n, bdb_strerror(rc));
    if (!hit)
        assert_int_equal(rc, BDB_OK);
    if (rc == BDB_ERR_NOMEM) {
        bdb_db_stats st;
        bdb_db_get_stats(db, &st);
        assert_false(st.readonly);
        char *got = dump_db(db, S_ALL);
        if (strcmp(got, g_want_reads) != 0) {
            show_diff(g_want_reads, got);
            FAILF("flush, allocation %llu failing: the readers answer otherwise after it",
                  (unsigned long long)n);
        }
        free(got);
        /* The WAL kept every unflushed sample, unless the flush committed (catalog
         * saved) and only its clean-up failed: then the fake already holds it all. */
        tu_rm_rf(g_copy);
        assert_int_equal(cu_copy_tree(g_work, g_copy), 0);
        got = wal_dump("copy");
        char *fake = dump_fake(f, S_ALL);
        int committed = !strcmp(got, g_want_wal_after) && !strcmp(fake, g_want_fake);
        if (strcmp(got, g_want_wal) != 0 && !committed) {
            show_diff(g_want_wal, got);
            FAILF("flush, allocation %llu failing: the WAL lost samples", (unsigned long long)n);
        }
        free(fake);
        free(got);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
    }
    char *got = dump_fake(f, S_ALL);
    if (strcmp(got, g_want_fake) != 0) {
        show_diff(g_want_fake, got);
        FAILF("flush, allocation %llu failing (rc %d): the fake holds something else",
              (unsigned long long)n, rc);
    }
    free(got);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    fakesink_free(f);
    return !hit ? 0 : rc == BDB_OK ? 1 : 2;
}

/* ---------------------------------------------------------------- read run */

enum { R_RAW, R_LATEST, R_INSTATE, R_COUNTS, R_LIST, R_GET, R_TBT, R_LATE, R_TIER, R_FLEET, R_N };
static const char *const R_NAME[R_N] = {"raw (through sink)",  "latest",   "devices in state",
                                        "state counts",        "registry", "registry of one",
                                        "event counts",        "late",     "tier (through sink)",
                                        "fleet (through sink)"};

/* Reader r of db as text; its status in *rc (the text is dropped unless BDB_OK). */
static char *read_one(bdb_db *db, int r, int *rc)
{
    lines l = {NULL, 0};
    *rc = BDB_OK;
    for (int d = 0; d < NDEV && *rc == BDB_OK; d++) {
        if (r == R_RAW) {
            bdb_samples sv[NMET];
            memset(sv, 0, sizeof sv);
            *rc = bdb_db_read(db, "t1", devs[d], (const char *const *)mets, NMET, LO, HI, sv, NULL);
            for (int m = 0; m < NMET && *rc == BDB_OK; m++)
                for (size_t i = 0; i < sv[m].n; i++)
                    addf(&l, "raw %s %s %lld %.17g", devs[d], mets[m], (long long)sv[m].ts[i],
                         sv[m].v[i]);
            for (int m = 0; m < NMET; m++)
                bdb_samples_free(&sv[m]);
        }
        if (r == R_LATEST)
            *rc = bdb_db_latest(db, "t1", devs[d], latest_cb, &l);
        if (r == R_GET)
            *rc = bdb_db_get_device(db, "t1", devs[d], dev_cb, &l);
        if (*rc == BDB_ERR_NOTFOUND) {
            addf(&l, "%s notfound", devs[d]);
            *rc = BDB_OK;
        }
    }
    for (int k = 0; k < NSTATE && r == R_INSTATE && *rc == BDB_OK; k++) {
        struct dctx c = {&l, states[k]};
        int more = 0;
        uint64_t total = 0;
        /* a page of 2 after d0: paging past a name, and more */
        *rc = bdb_db_state_devices(db, "t1", states[k], "d0", 2, instate_cb, &c, &more, &total);
        addf(&l, "instate %s total=%llu more=%d", states[k], (unsigned long long)total, more);
    }
    if (r == R_COUNTS) {
        uint64_t no_state = 0;
        *rc = bdb_db_state_counts(db, "t1", count_cb, &l, &no_state);
        addf(&l, "nostate %llu", (unsigned long long)no_state);
    }
    if (r == R_LIST)
        *rc = bdb_db_list_devices(db, "t1", dev_cb, &l);
    if (r == R_TBT)
        *rc = bdb_db_telemetry_by_tenant(db, "t1", LO, HI, tbt_cb, &l);
    if (r == R_LATE)
        *rc = bdb_db_late_recent(db, "t1", NULL, late_cb, &l);
    for (int d = 0; d < NDEV && r == R_TIER && *rc == BDB_OK; d++) {
        bdb_rollup out[NMET];
        for (int m = 0; m < NMET; m++)
            bdb_rollup_init(&out[m], bdb_res_width(BDB_RES_1M));
        *rc = bdb_db_tier_read(db, "t1", devs[d], (const char *const *)mets, NMET, BDB_RES_1M, LO,
                               HI, out);
        if (*rc == BDB_ERR_NOTFOUND)
            *rc = BDB_OK;
        for (int m = 0; m < NMET; m++) {
            for (size_t i = 0; *rc == BDB_OK && i < out[m].n; i++)
                add_window(&l, "w", BDB_RES_1M, devs[d], mets[m], &out[m].w[i]);
            bdb_rollup_free(&out[m]);
        }
    }
    for (int m = 0; m < NMET && r == R_FLEET && *rc == BDB_OK; m++) {
        bdb_fleet f;
        bdb_fleet_init(&f, bdb_res_width(BDB_RES_1H));
        *rc = bdb_db_fleet_read(db, "t1", mets[m], BDB_RES_1H, LO, HI, &f);
        if (*rc == BDB_OK)
            add_fleet(&l, BDB_RES_1H, mets[m], &f);
        bdb_fleet_free(&f);
    }
    return join(&l);
}

static char *g_want_read[2][R_N];

/* Every reader of both engines with allocation n failing: 0, 1, 2 as flush_run. */
static int read_run(uint64_t n)
{
    bdb_db *dbs[2] = {g_base, g_fresh};
    int nomem = 0;
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, n);
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < R_N; r++) {
            int rc;
            char *got = read_one(dbs[k], r, &rc);
            if (rc == BDB_ERR_NOMEM) {
                nomem = 1;
            } else if (rc != BDB_OK || strcmp(got, g_want_read[k][r]) != 0) {
                bdb_alloc_fail_disarm();
                if (rc == BDB_OK)
                    show_diff(g_want_read[k][r], got);
                FAILF("%s read of the %s engine, allocation %llu failing: rc %d, %s answer",
                      R_NAME[r], k ? "fresh" : "base", (unsigned long long)n, rc,
                      rc == BDB_OK ? "a wrong" : "no");
            }
            free(got);
        }
    bdb_alloc_fail_disarm();
    int hit = bdb_alloc_fail_injected() > 0;
    assert_true(hit || !nomem);
    return !hit ? 0 : nomem ? 2 : 1;
}

/* ---------------------------------------------------------------- the sweep */

static void sweep(const char *what, int (*run)(uint64_t))
{
    const char *only = getenv("ALLOC_SINK_ONLY");
    if (only && only[0] == (run == flush_run ? 'f' : 'r') && only[1] == ':') {
        printf("allocation %s of %s: %d\n", only + 2, what, run(strtoull(only + 2, NULL, 10)));
        return;
    }
    uint64_t n;
    unsigned nomem = 0;
    for (n = 1; n <= MAX_SITES; n++) {
        int r = run(n);
        nomem += r == 2;
        if (r == 0)
            break;
    }
    assert_true(n > 1 && n <= MAX_SITES);
    printf("alloc sweep %s: %llu allocation sites failed in turn (%u answered NOMEM; 0 still "
           "abort), 0 crashes, %s, 0 lost\n",
           what, (unsigned long long)(n - 1), nomem, EU_LEAKS);
}

static void flush_sweep(void **st)
{
    (void)st;
    build_base();
    sweep("flush with a sink (raw, tiers, fleet, state, registry, counts, late, usage)", flush_run);
}

static void read_sweep(void **st)
{
    (void)st;
    assert_non_null(g_fresh); /* built by flush_sweep */
    bdb_db *dbs[2] = {g_base, g_fresh};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < R_N; r++) {
            int rc;
            g_want_read[k][r] = read_one(dbs[k], r, &rc);
            assert_int_equal(rc, BDB_OK);
        }
    /* the sink answers the fresh engine: its registry and late events are not empty */
    assert_non_null(strstr(g_want_read[1][R_LIST], "device d1"));
    assert_non_null(strstr(g_want_read[1][R_LATE], "late d0"));
    sweep("raw, state, registry, count, late, tier and fleet reads through a sink", read_run);
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < R_N; r++)
            free(g_want_read[k][r]);
}

static int group_teardown(void **st)
{
    if (g_fresh)
        bdb_db_close(g_fresh);
    if (g_base)
        bdb_db_close(g_base);
    if (g_fake)
        fakesink_free(g_fake);
    free(g_want_reads);
    free(g_want_fake);
    free(g_want_wal);
    free(g_want_wal_after);
    return teardown(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(flush_sweep),
        cmocka_unit_test(read_sweep),
    };
    return cmocka_run_group_tests(tests, setup, group_teardown);
}
