/* alloc_fail: the engine under allocation failure, every allocation of a path in turn.
 *
 * For each path (bdb_db_write with its WAL append and group commit; flush with the
 * tier, fleet and latest files; maintenance: compaction and retention; open with WAL
 * replay; raw, tier and current-state reads; a storage usage measurement) the operation runs with
 * allocation N failing (common/alloc.h, BDB_ALLOC_FAIL_NTH), for N = 1, 2, ... until a run no
 * longer reaches an injected failure: every allocation of the path fails once. Each
 * run starts from the same freshly built directory and checks:
 *   - the call returns BDB_OK or BDB_ERR_NOMEM (and never crashes);
 *   - after a failed write the db holds exactly what it held before, and the same
 *     write then succeeds; a failed flush or maintenance run leaves every sample
 *     readable and succeeds when repeated; a read returns BDB_OK with exactly the
 *     acknowledged samples, or an error, never a partial answer;
 *   - the directory closes and reopens with exactly the acknowledged data.
 * A failed write must also leave the current-state index as it was (latest events,
 * states, counts: the swept write brings a new device, a new metric and a new state),
 * and must not be in the WAL (a reopen before the retry shows none of it).
 * The write path reserves everything its apply allocates before the WAL append, so a
 * write that turns the engine read-only (a failure after the append, the fallback the
 * engine keeps for what a concurrent writer can take meanwhile) fails the sweep; the
 * child still checks that the reopened directory holds such a write whole or not at
 * all.
 * Leaks: the ASan build runs every unit test with detect_leaks=1, so a leak on any
 * error path fails this binary at exit. Figures: "alloc sweep <path>: ...". */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "agg/rollup.h"
#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIN INT64_C(60000)
#define DAY (1440 * MIN)
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define TEN "acme"
#define NDEV 3 /* d2 first appears in the swept write */
#define NMET 2
#define PER 3
#define MAX_SITES 20000 /* bound of every sweep */

/* Exit codes of one run (a forked child, so that a run ending in abort() is told
 * apart from one that crashes, and LeakSanitizer checks every run at its exit). */
enum { CHILD_DONE = 0, CHILD_OK = 1, CHILD_NOMEM = 2, CHILD_READONLY = 3, CHILD_FAILED = 10 };

/* Checks that end the process: most run in a forked child (see sweep). */
#define FAILF(...)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(CHILD_FAILED);                                                                        \
    } while (0)
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            FAILF("check failed: %s", #c);                                                         \
    } while (0)

static const char *const DEVS[NDEV] = {"d0", "d1", "d2"};
static const char *const METS[NMET] = {"m.a", "m.b"};

static char tmpdir[64], basedir[128], workdir[128];

/* ---------------------------------------------------------------- the model */

struct sample {
    int dev, met;
    int64_t ts;
    double v;
};
static struct sample model[256];
static int nmodel;

static void model_put(int dev, int met, int64_t ts, double v)
{
    for (int i = 0; i < nmodel; i++)
        if (model[i].dev == dev && model[i].met == met && model[i].ts == ts) {
            model[i].v = v; /* the later write wins */
            return;
        }
    CHECK(nmodel < (int)(sizeof model / sizeof model[0]));
    model[nmodel++] = (struct sample){dev, met, ts, v};
}

/* Batch k: PER reports per device (devices 0..ndev-1) a minute apart, both metrics, a
 * tag and a state; from batch 2 on its first report per device is out of order (older
 * than the batch before). Added to the model when add is set. */
static bdb_batch *make_batch(int k, int ndev, int add)
{
    bdb_batch *b = bdb_batch_new();
    CHECK((b) != NULL);
    for (int d = 0; d < ndev; d++)
        for (int i = 0; i < PER; i++) {
            int64_t ts = T0 + k * 10 * MIN + i * MIN + d * 1000;
            if (k >= 2 && i == 0)
                ts = T0 + (k - 1) * 10 * MIN - 5 * MIN + d * 1000;
            bdb_batch_begin(b, DEVS[d], strlen(DEVS[d]), ts, 0);
            char site[16];
            snprintf(site, sizeof site, "s%d", k);
            bdb_batch_tag(b, "site", 4, site, strlen(site));
            for (int m = 0; m < NMET; m++) {
                double v = k * 100 + i + d * 0.5 + m * 0.25;
                bdb_batch_metric(b, METS[m], strlen(METS[m]), v);
                if (add)
                    model_put(d, m, ts, v);
            }
            /* the swept batch: a metric d0 never had, and a state nobody was in */
            if (k == 3 && d == 0 && i == 1)
                bdb_batch_metric(b, "m.c", 3, 1.5);
            /* attributes: a value per batch, and in the swept batch a name d1 never had */
            char fw[16];
            snprintf(fw, sizeof fw, "v%d.%d", k, i);
            bdb_batch_attr(b, "fw", 2, fw, strlen(fw));
            if (k == 3 && d == 1 && i == 1)
                bdb_batch_attr(b, "note", 4, "new", 3);
            if (k == 3 && d == 2 && i == 0)
                bdb_batch_state(b, "boot", 4);
            else
                bdb_batch_state(b, i % 2 ? "on" : "off", i % 2 ? 2 : 3);
            CHECK((bdb_batch_end(b)) == (1));
        }
    CHECK((bdb_batch_failed(b)) == (BDB_OK));
    return b;
}

static int sample_cmp(const void *a, const void *b)
{
    const struct sample *x = a, *y = b;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* Differences between the db and a model (samples missing, extra or wrong), or -1 if
 * a read failed. */
static int g_read_rc; /* the error of the read diff() gave up on */

static int diff(bdb_db *db, const struct sample *mod, int nmod)
{
    int bad = 0;
    for (int d = 0; d < NDEV; d++)
        for (int m = 0; m < NMET; m++) {
            struct sample want[256];
            int nw = 0;
            for (int i = 0; i < nmod; i++)
                if (mod[i].dev == d && mod[i].met == m)
                    want[nw++] = mod[i];
            qsort(want, (size_t)nw, sizeof want[0], sample_cmp);
            bdb_samples out = {0};
            const char *metric = METS[m];
            uint64_t chunks = 0;
            int rc =
                bdb_db_read(db, TEN, DEVS[d], &metric, 1, T0 - DAY, T0 + 30 * DAY, &out, &chunks);
            if (rc == BDB_ERR_NOTFOUND) {
                bad += nw;
                continue;
            }
            if (rc != BDB_OK) {
                bdb_samples_free(&out);
                g_read_rc = rc;
                return -1;
            }
            if ((int)out.n != nw)
                bad += abs((int)out.n - nw);
            for (int i = 0; i < nw && i < (int)out.n; i++)
                if (out.ts[i] != want[i].ts || out.v[i] != want[i].v)
                    bad++;
            bdb_samples_free(&out);
        }
    return bad;
}

/* ---------------------------------------------------------------- state index */

struct snap {
    char s[4096];
    size_t n;
};

static void snap_add(struct snap *sn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(sn->s + sn->n, sizeof sn->s - sn->n, fmt, ap);
    va_end(ap);
    CHECK(w >= 0 && (size_t)w < sizeof sn->s - sn->n);
    sn->n += (size_t)w;
}

static int snap_latest(void *ctx, const bdb_latest *l)
{
    snap_add(ctx, "ev=%lld st=%s@%lld", (long long)l->event_ts, l->state ? l->state : "-",
             (long long)l->state_ts);
    for (size_t i = 0; i < l->nmetrics; i++)
        snap_add(ctx, " %s=%g@%lld", l->metrics[i].name, l->metrics[i].value,
                 (long long)l->metrics[i].ts);
    for (size_t i = 0; i < l->nattrs; i++)
        snap_add(ctx, " %s='%s'@%lld", l->attrs[i].name, l->attrs[i].value,
                 (long long)l->attrs[i].ts);
    return 0;
}

static int snap_count(void *ctx, const char *state, uint64_t devices)
{
    snap_add(ctx, " %s:%llu", state, (unsigned long long)devices);
    return 0;
}

static int snap_dev(void *ctx, const char *device, int64_t ts)
{
    snap_add(ctx, " %s@%lld", device, (long long)ts);
    return 0;
}

/* Everything the current-state index answers for the test's tenant, as text. */
static void state_snapshot(bdb_db *db, struct snap *sn)
{
    sn->n = 0;
    sn->s[0] = 0;
    for (int d = 0; d < NDEV; d++) {
        snap_add(sn, "\n%s: ", DEVS[d]);
        int rc = bdb_db_latest(db, TEN, DEVS[d], snap_latest, sn);
        if (rc != BDB_OK)
            snap_add(sn, "%s", bdb_strerror(rc));
    }
    uint64_t none = 0;
    snap_add(sn, "\ncounts:");
    CHECK(bdb_db_state_counts(db, TEN, snap_count, sn, &none) == BDB_OK);
    snap_add(sn, " none:%llu", (unsigned long long)none);
    const char *states[] = {"on", "off", "boot"};
    for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
        int more = 0;
        uint64_t total = 0;
        snap_add(sn, "\n%s:", states[i]);
        CHECK(bdb_db_state_devices(db, TEN, states[i], NULL, 100, snap_dev, sn, &more, &total) ==
              BDB_OK);
        snap_add(sn, " total %llu more %d", (unsigned long long)total, more);
    }
}

/* ---------------------------------------------------------------- directories */

static void copy_tree(const char *from, const char *to)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    CHECK((d) != NULL);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "LOCK"))
            continue;
        char a[512], b[512];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat st;
        CHECK((stat(a, &st)) == (0));
        if (S_ISDIR(st.st_mode)) {
            copy_tree(a, b);
            continue;
        }
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(in >= 0 && out >= 0);
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            CHECK((write(out, buf, (size_t)n)) == (n));
        close(in);
        close(out);
    }
    closedir(d);
}

static int64_t fixed_now(void *ctx)
{
    (void)ctx;
    return T0 + 2 * DAY;
}

static int open_db(const char *dir, bdb_db **db)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    o.clock.now_ms = fixed_now;
    return bdb_db_open(&o, db);
}

static int g_model_base; /* model entries of the base image */
static struct sample g_base[256];

/* The base image: batches 0 and 1 flushed into blocks (two flushes, so compaction has
 * two blocks of one window to merge), batch 2 only in the WAL. Copied at the moment
 * batch 2 is acknowledged, it is what a crash would leave: the WAL tail is replayed
 * at every open. */
static void build_base(void)
{
    tu_rm_rf(basedir);
    nmodel = 0;
    char live[160];
    snprintf(live, sizeof live, "%s/live", tmpdir);
    tu_rm_rf(live);
    bdb_db *db;
    CHECK((open_db(live, &db)) == (BDB_OK));
    for (int k = 0; k < 3; k++) {
        bdb_batch *b = make_batch(k, 2, 1);
        CHECK((bdb_db_write(db, TEN, b)) == (BDB_OK));
        bdb_batch_free(b);
        if (k < 2)
            CHECK((bdb_db_flush(db)) == (BDB_OK));
    }
    copy_tree(live, basedir);
    CHECK((bdb_db_close(db)) == (BDB_OK));
    tu_rm_rf(live);
    g_model_base = nmodel;
    memcpy(g_base, model, sizeof model);
}

static void fresh_work(void)
{
    tu_rm_rf(workdir);
    copy_tree(basedir, workdir);
    nmodel = g_model_base;
    memcpy(model, g_base, sizeof model);
}

/* ---------------------------------------------------------------- the sweep */

enum op { OP_WRITE, OP_FLUSH, OP_MAINTAIN, OP_OPEN, OP_READ, OP_TIER, OP_STATE, OP_USAGE };
static const char *const OP_NAME[] = {"write (WAL append, group commit, head)",
                                      "flush (blocks, tier, fleet, latest, catalog)",
                                      "maintenance (compaction, retention)",
                                      "open + WAL replay",
                                      "range read",
                                      "tier read",
                                      "state read",
                                      "storage usage measurement"};

static int latest_cb(void *ctx, const bdb_latest *l)
{
    int *seen = ctx;
    *seen = l->event_ts > 0 && l->nmetrics == NMET;
    return 0;
}

/* A read op: BDB_OK only with the complete answer. */
static int read_op(bdb_db *db, enum op op)
{
    if (op == OP_READ) {
        int d = diff(db, model, nmodel);
        if (d < 0)
            return g_read_rc; /* the read failed: must be NOMEM, checked below */
        CHECK((d) == (0));    /* an OK read is complete and exact */
        return BDB_OK;
    }
    if (op == OP_TIER) {
        const char *ms[NMET] = {METS[0], METS[1]};
        bdb_rollup out[NMET];
        for (int m = 0; m < NMET; m++)
            bdb_rollup_init(&out[m], MIN);
        int rc = bdb_db_tier_read(db, TEN, DEVS[0], ms, NMET, BDB_RES_1M, T0 - DAY, T0 + DAY, out);
        if (rc == BDB_OK) {
            /* every minute with a sample of d0 has its window, with the right count */
            for (int m = 0; m < NMET; m++) {
                uint64_t count = 0;
                for (size_t w = 0; w < out[m].n; w++)
                    count += out[m].w[w].st.count;
                uint64_t want = 0;
                for (int i = 0; i < nmodel; i++)
                    want += model[i].dev == 0 && model[i].met == m;
                CHECK((count) == (want));
            }
        }
        for (int m = 0; m < NMET; m++)
            bdb_rollup_free(&out[m]);
        return rc;
    }
    int seen = 0;
    int rc = bdb_db_latest(db, TEN, DEVS[1], latest_cb, &seen);
    if (rc == BDB_OK)
        CHECK(seen);
    return rc;
}

static bdb_batch *g_batch; /* the swept write's batch, built before arming */

static int run_op(bdb_db **db, enum op op, int *wrote)
{
    *wrote = 0;
    switch (op) {
    case OP_WRITE:
        return bdb_db_write(*db, TEN, g_batch);
    case OP_FLUSH:
        return bdb_db_flush(*db);
    case OP_MAINTAIN:
        return bdb_db_maintain(*db);
    case OP_OPEN:
        return open_db(workdir, db);
    case OP_USAGE: {
        int rc = bdb_db_usage_refresh(*db);
        if (rc == BDB_OK) { /* a published measurement is complete */
            bdb_storage_usage u;
            CHECK(bdb_db_tenant_storage(*db, TEN, &u) == BDB_OK);
            CHECK(u.measured && u.block_bytes > 0 && u.unflushed_samples > 0);
        }
        return rc;
    }
    default:
        return read_op(*db, op);
    }
}

/* One run with allocation n failing; exits with one of the codes above. */
static void one_run(enum op op, int n)
{
    fresh_work();
    bdb_db *db = NULL;
    if (op != OP_OPEN) {
        CHECK(open_db(workdir, &db) == BDB_OK);
        if (op == OP_MAINTAIN || op == OP_TIER)
            CHECK(bdb_db_flush(db) == BDB_OK); /* the tail into blocks too */
        if (op == OP_USAGE) {
            bdb_usage_opts uo = {.partition_warn_bytes = 1, .manual = 1}; /* warns too */
            bdb_db_usage_start(db, &uo);
        }
    }
    int wrote, code;
    struct snap snap0, snap1;
    if (op == OP_WRITE)
        state_snapshot(db, &snap0);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, (uint64_t)n);
    int rc = run_op(&db, op, &wrote);
    bdb_alloc_fail_disarm();
    int hit = bdb_alloc_fail_injected() > 0;
    if (rc != BDB_OK && rc != BDB_ERR_NOMEM)
        FAILF("%s, allocation %d failing: %s", OP_NAME[op], n, bdb_strerror(rc));
    if (!hit)
        CHECK(rc == BDB_OK);
    code = !hit ? CHILD_DONE : rc == BDB_OK ? CHILD_OK : CHILD_NOMEM;
    if (rc == BDB_ERR_NOMEM) {
        if (op == OP_OPEN) {
            CHECK(db == NULL);
            CHECK(open_db(workdir, &db) == BDB_OK);
        } else {
            bdb_db_stats st;
            bdb_db_get_stats(db, &st);
            if (op == OP_WRITE && st.readonly) {
                /* logged but not applied: a restart must give all of it or none */
                CHECK(bdb_db_close(db) == BDB_OK);
                CHECK(open_db(workdir, &db) == BDB_OK);
                int before = diff(db, model, nmodel);
                bdb_batch_free(make_batch(3, NDEV, 1));
                int after = diff(db, model, nmodel);
                if (before != 0 && after != 0)
                    FAILF("%s, allocation %d failing: the refused write is there in part",
                          OP_NAME[op], n);
                CHECK(bdb_db_close(db) == BDB_OK);
                exit(CHILD_READONLY);
            }
            CHECK(!st.readonly);
            /* as if the call never happened: the same data, then the call succeeds */
            int d = diff(db, model, nmodel);
            if (d != 0)
                FAILF("%s, allocation %d failing: %d samples differ after the failed call",
                      OP_NAME[op], n, d);
            if (op == OP_WRITE) {
                /* no trace in the state index, and nothing of it in the WAL */
                state_snapshot(db, &snap1);
                if (strcmp(snap0.s, snap1.s) != 0)
                    FAILF("%s, allocation %d failing: state index changed:%s\n-- now:%s",
                          OP_NAME[op], n, snap0.s, snap1.s);
                CHECK(bdb_db_close(db) == BDB_OK);
                CHECK(open_db(workdir, &db) == BDB_OK);
                if ((d = diff(db, model, nmodel)) != 0)
                    FAILF("%s, allocation %d failing: %d samples of the refused write "
                          "came back from the WAL",
                          OP_NAME[op], n, d);
                state_snapshot(db, &snap1);
                if (strcmp(snap0.s, snap1.s) != 0)
                    FAILF("%s, allocation %d failing: state index after reopen:%s\n-- now:%s",
                          OP_NAME[op], n, snap0.s, snap1.s);
            }
            CHECK(run_op(&db, op, &wrote) == BDB_OK);
        }
    }
    if (op == OP_WRITE)
        bdb_batch_free(make_batch(3, NDEV, 1)); /* acknowledged: now in the model */
    CHECK(diff(db, model, nmodel) == 0);
    CHECK(bdb_db_close(db) == BDB_OK);
    /* reopened: exactly the acknowledged data */
    CHECK(open_db(workdir, &db) == BDB_OK);
    int lost = diff(db, model, nmodel);
    if (lost)
        FAILF("%s, allocation %d failing: %d samples lost or wrong after reopen", OP_NAME[op], n,
              lost);
    CHECK(bdb_db_close(db) == BDB_OK);
    exit(code);
}

static void sweep(enum op op)
{
    build_base();
    g_batch = make_batch(3, NDEV, 0);
    int n, nomem = 0, readonly = 0, aborts = 0, first_abort = 0, failed = 0;
    char errpath[192];
    snprintf(errpath, sizeof errpath, "%s/child.err", tmpdir);
    /* ALLOC_SWEEP_ONLY=op:n runs allocation n of sweep op (0 = write ... 6 = state
     * read, 7 = usage) alone, in this process, for a debugger */
    const char *only = getenv("ALLOC_SWEEP_ONLY");
    if (only && atoi(only) == (int)op && strchr(only, ':'))
        one_run(op, atoi(strchr(only, ':') + 1));
    for (n = 1; n <= MAX_SITES; n++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* cmocka's handlers would carry a crashed child on into the next tests */
            int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
            for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
                signal(sigs[i], SIG_DFL);
            CHECK(freopen(errpath, "w", stderr) != NULL);
            one_run(op, n);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        /* With ASAN_OPTIONS=abort_on_error=1 a sanitizer report (a leak at exit
         * included) also ends in SIGABRT: its report tells it from an OOM abort. */
        char err[4096] = "";
        FILE *ef = fopen(errpath, "r");
        if (ef) {
            err[fread(err, 1, sizeof err - 1, ef)] = 0;
            fclose(ef);
        }
        if (strstr(err, "Sanitizer") || strstr(err, "runtime error")) {
            fprintf(stderr, "%s, allocation %d failing: sanitizer report:\n%s\n", OP_NAME[op], n,
                    err);
            failed++;
            continue;
        }
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
            /* an allocation site that still aborts (docs/RELIABILITY.md lists them) */
            if (!aborts++)
                first_abort = n;
            continue;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) >= CHILD_FAILED) {
            fprintf(stderr, "%s, allocation %d failing: %s %d\n%s", OP_NAME[op], n,
                    WIFEXITED(st) ? "failed, exit status" : "crashed, signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), err);
            failed++;
            continue;
        }
        int code = WEXITSTATUS(st);
        nomem += code == CHILD_NOMEM || code == CHILD_READONLY;
        readonly += code == CHILD_READONLY;
        if (code == CHILD_READONLY) /* the write path must reserve it before the append */
            fprintf(stderr, "%s, allocation %d failing: read-only after the WAL append\n",
                    OP_NAME[op], n);
        if (code == CHILD_DONE)
            break;
    }
    bdb_batch_free(g_batch);
    CHECK(n <= MAX_SITES);
    printf("alloc sweep %s: %d allocation sites failed in turn (%d answered NOMEM, %d of them "
           "read-only after the WAL append; %d still abort, first at %d), 0 crashes, %s, 0 lost\n",
           OP_NAME[op], n - 1, nomem, readonly, aborts, first_abort, EU_LEAKS);
    CHECK(n > 1);
    CHECK(failed == 0);
    CHECK(readonly == 0); /* every allocation of a write fails it cleanly (always strict) */
    /* strict by default: an allocation site of a swept path that aborts fails the test
     * (ALLOC_SWEEP_STRICT=0 only counts them, to look at the other checks meanwhile) */
    const char *strict = getenv("ALLOC_SWEEP_STRICT");
    if (!strict || strcmp(strict, "0") != 0)
        CHECK(aborts == 0);
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR); /* the injected failures are expected */
    /* tmpfs when there is one: every run fsyncs, and the sweeps make thousands of runs */
    snprintf(tmpdir, sizeof tmpdir, "%s/bdb_allocXXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    CHECK((mkdtemp(tmpdir)) != NULL);
    snprintf(basedir, sizeof basedir, "%s/base", tmpdir);
    snprintf(workdir, sizeof workdir, "%s/work", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

#define SWEEP_TEST(name, op)                                                                       \
    static void name(void **state)                                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        sweep(op);                                                                                 \
    }

SWEEP_TEST(write_sweep, OP_WRITE)
SWEEP_TEST(flush_sweep, OP_FLUSH)
SWEEP_TEST(maintain_sweep, OP_MAINTAIN)
SWEEP_TEST(open_sweep, OP_OPEN)
SWEEP_TEST(read_sweep, OP_READ)
SWEEP_TEST(tier_read_sweep, OP_TIER)
SWEEP_TEST(state_read_sweep, OP_STATE)
SWEEP_TEST(usage_sweep, OP_USAGE)

/* The injector itself: the Nth allocation fails, only it (or every later one). */
static void injector_counts(void **state)
{
    (void)state;
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, 2);
    void *a = bdb_malloc(8), *b = bdb_malloc(8), *c = bdb_calloc(1, 8);
    CHECK((a) != NULL);
    CHECK((b) == NULL);
    CHECK((c) != NULL);
    CHECK((bdb_alloc_fail_count()) == (3));
    CHECK((bdb_alloc_fail_injected()) == (1));
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 2);
    char *d = bdb_strdup("x"), *e = bdb_strdup("y");
    void *g = bdb_realloc(NULL, 4);
    bdb_alloc_fail_disarm();
    CHECK((d) != NULL);
    CHECK((e) == NULL);
    CHECK((g) == NULL);
    CHECK((bdb_alloc_fail_injected()) == (2));
    void *h = bdb_malloc(8); /* disarmed: never fails, not counted */
    CHECK((h) != NULL);
    CHECK((bdb_alloc_fail_count()) == (3));
    free(a);
    free(c);
    free(d);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(injector_counts), cmocka_unit_test(write_sweep),
        cmocka_unit_test(flush_sweep),     cmocka_unit_test(maintain_sweep),
        cmocka_unit_test(open_sweep),      cmocka_unit_test(read_sweep),
        cmocka_unit_test(tier_read_sweep), cmocka_unit_test(state_read_sweep),
        cmocka_unit_test(usage_sweep),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
