/* latest_reserve: the current-state index's reservations (db_latest_reserve/release),
 * the step bdb_db_write takes before its WAL append so that the apply after it cannot
 * run out of memory.
 *
 * Covered: what a reservation creates (the entry of a new device, a new state's set)
 * is invisible to every reader and to the saved file until a report is applied, and
 * gone without a trace (same bytes, same counts) when released unapplied; with the
 * reservations held, applying allocates nothing (every allocation fails meanwhile),
 * including two reports of one device in one batch where the first empties the state
 * the second goes back to, and an existing device gaining metrics; releasing hidden
 * entries out of a crowded stripe table keeps every other entry reachable; the walk
 * that feeds a storage sink skips held entries; writers on four threads moving the
 * same devices between states end with the index the rules give (run it under ASan
 * for the use-after-free a wrong release would cause); a write
 * refused for memory at each of its reservation's allocations leaves the index as it
 * was. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/core/db_int.h"
#include "storage/embedded/state/db_latest.h"
#include "storage/embedded/sink/db_state_sink.h" /* db_latest_walk: what a sink is sent */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */
#define TEN "t1"

static char tmpdir[64], datadir[128];

static int setup(void **st)
{
    (void)st;
    bdb_log_set_level(BDB_LOG_ERROR);
    /* tmpfs when there is one: the refused-write sweep opens a db per allocation */
    eu_scratch(tmpdir, sizeof tmpdir, "lresv", EU_TMPFS, datadir, sizeof datadir);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmpdir);
}

static bdb_db *open_fresh(int fresh)
{
    if (fresh)
        tu_rm_rf(datadir);
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = datadir;
    o.background = 0;
    return eu_open(&o);
}

/* One report of dev with metrics m0..m<nm-1> (value v) and an optional state. */
static bdb_batch *one_report(const char *dev, int64_t ts, const char *state, int nm, double v)
{
    bdb_batch *b = bdb_batch_new();
    assert_non_null(b);
    bdb_batch_begin(b, dev, strlen(dev), ts, 0);
    for (int k = 0; k < nm; k++) {
        char mn[16];
        snprintf(mn, sizeof mn, "m%d", k);
        bdb_batch_metric(b, mn, strlen(mn), v + k);
    }
    if (state)
        bdb_batch_state(b, state, strlen(state));
    assert_int_equal(bdb_batch_end(b), 1);
    return b;
}

static void write1(bdb_db *db, const char *dev, int64_t ts, const char *state, int nm, double v)
{
    bdb_batch *b = one_report(dev, ts, state, nm, v);
    assert_int_equal(bdb_db_write(db, TEN, b), BDB_OK);
    bdb_batch_free(b);
}

/* ---------------------------------------------------------------- index as text */

struct text {
    char s[8192];
    size_t n;
};

static void add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->s + t->n, sizeof t->s - t->n, fmt, ap);
    va_end(ap);
    assert_true(w >= 0 && (size_t)w < sizeof t->s - t->n);
    t->n += (size_t)w;
}

static int latest_cb(void *ctx, const bdb_latest *l)
{
    add(ctx, "ev=%lld st=%s", (long long)l->event_ts, l->state ? l->state : "-");
    for (size_t i = 0; i < l->nmetrics; i++)
        add(ctx, " %s=%g", l->metrics[i].name, l->metrics[i].value);
    return 0;
}

static int count_cb(void *ctx, const char *state, uint64_t n)
{
    add(ctx, " %s:%llu", state, (unsigned long long)n);
    return 0;
}

static int dev_cb(void *ctx, const char *dev, int64_t ts)
{
    (void)ts;
    add(ctx, " %s", dev);
    return 0;
}

/* What the index answers about devs and the states on, off, boot. */
static void index_text(bdb_db *db, const char *const *devs, int ndev, struct text *t)
{
    t->n = 0;
    t->s[0] = 0;
    for (int i = 0; i < ndev; i++) {
        add(t, "\n%s: ", devs[i]);
        int rc = bdb_db_latest(db, TEN, devs[i], latest_cb, t);
        if (rc != BDB_OK)
            add(t, "%s", bdb_strerror(rc));
    }
    uint64_t none = 0;
    add(t, "\ncounts:");
    assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, t, &none), BDB_OK);
    add(t, " none:%llu", (unsigned long long)none);
    const char *st[] = {"on", "off", "boot"};
    for (int i = 0; i < 3; i++) {
        int more = 0;
        uint64_t total = 0;
        add(t, "\n%s:", st[i]);
        assert_int_equal(bdb_db_state_devices(db, TEN, st[i], NULL, 100, dev_cb, t, &more, &total),
                         BDB_OK);
        add(t, " total %llu", (unsigned long long)total);
    }
}

static device *dev_of(bdb_db *db, const char *name)
{
    device *d = db_get_device(db, TEN, strlen(TEN), name, strlen(name));
    assert_non_null(d);
    return d;
}

static const char *const M[] = {"m0", "m1", "m2", "m3"};

/* The series of metrics M[0..nm) of d, made if need be, as prepare_batch does. */
static void series_of(bdb_db *db, device *d, int nm, series **ser)
{
    for (int k = 0; k < nm; k++) {
        ser[k] = cat_series(db, d, M[k], strlen(M[k]), 1);
        assert_non_null(ser[k]);
    }
}

static int reserve(bdb_db *db, device *d, const char *state, int nm, db_latest_resv *r)
{
    series *ser[4];
    pthread_mutex_lock(dev_lock(db, d));
    series_of(db, d, nm, ser);
    int rc =
        db_latest_reserve(db, d, state, state ? strlen(state) : 0, ser, (uint32_t)nm, NULL, 0, r);
    pthread_mutex_unlock(dev_lock(db, d));
    return rc;
}

static void release(bdb_db *db, device *d, db_latest_resv *r)
{
    pthread_mutex_lock(dev_lock(db, d));
    db_latest_release(db, r);
    pthread_mutex_unlock(dev_lock(db, d));
}

/* Applies one report the way the write path does after its append: the series exist
 * (made before), and every allocation fails meanwhile. */
static int apply_nomem(bdb_db *db, device *d, int64_t ts, const char *state, int nm, double v)
{
    series *ser[4];
    double vals[4];
    for (int k = 0; k < nm; k++)
        vals[k] = v + k;
    pthread_mutex_lock(dev_lock(db, d));
    series_of(db, d, nm, ser);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    int rc = db_latest_apply(db, d, NULL, ts, state, state ? strlen(state) : 0, ser, vals,
                             (uint32_t)nm, NULL, 0);
    bdb_alloc_fail_disarm();
    pthread_mutex_unlock(dev_lock(db, d));
    return rc;
}

static void make_series(bdb_db *db, device *d, int nm)
{
    pthread_mutex_lock(dev_lock(db, d));
    for (int k = 0; k < nm; k++)
        assert_non_null(cat_series(db, d, M[k], strlen(M[k]), 1));
    pthread_mutex_unlock(dev_lock(db, d));
}

/* ---------------------------------------------------------------- tests */

/* Held but not applied: nobody sees it, the saved file does not hold it, and letting
 * go leaves exactly what was there. */
static void hidden_until_applied(void **st)
{
    (void)st;
    bdb_db *db = open_fresh(1);
    write1(db, "a", T0, "on", 2, 1);
    const char *devs[] = {"a", "b"};
    struct text before, now;
    index_text(db, devs, 2, &before);
    uint64_t bytes = bdb_db_state_bytes(db);

    device *b = dev_of(db, "b"); /* in the catalog now, as a refused write leaves it */
    device *a = dev_of(db, "a");
    db_latest_resv rb, ra;
    assert_int_equal(reserve(db, b, "boot", 3, &rb), BDB_OK);
    assert_int_equal(reserve(db, a, "idle", 4, &ra), BDB_OK);
    assert_non_null(rb.e);
    assert_int_equal(rb.metrics, 3); /* all new: no entry yet */
    assert_int_equal(ra.metrics, 2); /* m0 and m1 are there already */
    assert_true(bdb_db_state_bytes(db) > bytes);
    index_text(db, devs, 2, &now);
    assert_string_equal(before.s, now.s);
    /* a flush saves the index meanwhile: the held entry must not be in the file, which
     * is put back below as a crash right after this flush would leave it */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/latest", datadir);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char saved[1 << 16];
    size_t nsaved = fread(saved, 1, sizeof saved, f);
    fclose(f);
    assert_true(nsaved > 0 && nsaved < sizeof saved);
    release(db, b, &rb);
    release(db, a, &ra);
    assert_null(rb.e);
    index_text(db, devs, 2, &now);
    assert_string_equal(before.s, now.s);
    assert_int_equal(bdb_db_close(db), BDB_OK);

    db = open_fresh(0);
    index_text(db, devs, 2, &now);
    assert_string_equal(before.s, now.s);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(saved, 1, nsaved, f), nsaved);
    fclose(f);
    db = open_fresh(0);
    index_text(db, devs, 2, &now);
    assert_string_equal(before.s, now.s);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

static void walk_cb(void *ud, device *d, const bdb_latest *l, int64_t dirty_lo)
{
    (void)d;
    (void)dirty_lo;
    add(ud, " %s", l->device);
}

/* The walk that feeds a storage sink (db_state_sink.c) skips held entries too. */
static void walk_skips_held(void **st)
{
    (void)st;
    bdb_db *db = open_fresh(1);
    write1(db, "a", T0, "on", 2, 1);
    device *b = dev_of(db, "b");
    db_latest_resv r;
    assert_int_equal(reserve(db, b, "boot", 1, &r), BDB_OK);
    struct text t = {.n = 0};
    assert_int_equal(db_latest_walk(db, TEN, 0, walk_cb, &t), BDB_OK);
    assert_string_equal(t.s, " a");
    release(db, b, &r);
    write1(db, "b", T0, "boot", 1, 1);
    t.n = 0;
    assert_int_equal(db_latest_walk(db, TEN, 0, walk_cb, &t), BDB_OK);
    assert_true(!strcmp(t.s, " a b") || !strcmp(t.s, " b a"));
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Released unapplied, a new device's entry and a new state's set are freed again: the
 * index holds the same bytes as before. (Room a reservation grew in a stripe's table
 * stays, like head room: the first reservation below only makes that table.) */
static void release_leaves_no_bytes(void **st)
{
    (void)st;
    bdb_db *db = open_fresh(1);
    write1(db, "a", T0, "on", 2, 1);
    device *b = dev_of(db, "b");
    db_latest_resv r1, r2;
    assert_int_equal(reserve(db, b, NULL, 0, &r1), BDB_OK);
    release(db, b, &r1);
    uint64_t bytes = bdb_db_state_bytes(db);
    assert_int_equal(reserve(db, b, "boot", 3, &r1), BDB_OK);
    assert_int_equal(reserve(db, b, "boot", 1, &r2), BDB_OK); /* the same entry, held twice */
    assert_ptr_equal(r1.e, r2.e);
    assert_ptr_equal(r1.st, r2.st);
    release(db, b, &r1);
    assert_true(bdb_db_state_bytes(db) > bytes); /* r2 still holds them */
    release(db, b, &r2);
    assert_int_equal(bdb_db_state_bytes(db), bytes);
    release(db, b, &r2); /* a zeroed reservation: nothing to do */
    assert_int_equal(bdb_db_state_bytes(db), bytes);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* With the reservations held, the apply allocates nothing: a new device with metrics
 * and a new state; an existing device gaining two metrics; two reports of one device
 * where the first leaves the state the second returns to (its set would be dropped
 * and made again without the hold). */
static void apply_allocates_nothing(void **st)
{
    (void)st;
    bdb_db *db = open_fresh(1);
    write1(db, "a", T0, "off", 2, 1);
    device *a = dev_of(db, "a"), *b = dev_of(db, "b");
    make_series(db, a, 4);
    make_series(db, b, 3);
    db_latest_resv rb, ra1, ra2;
    assert_int_equal(reserve(db, b, "boot", 3, &rb), BDB_OK);
    assert_int_equal(reserve(db, a, "on", 4, &ra1), BDB_OK);
    assert_int_equal(reserve(db, a, "off", 1, &ra2), BDB_OK);
    assert_int_equal(apply_nomem(db, b, T0 + 1000, "boot", 3, 10), BDB_OK);
    assert_int_equal(apply_nomem(db, a, T0 + 2000, "on", 4, 20), BDB_OK);
    assert_int_equal(apply_nomem(db, a, T0 + 3000, "off", 1, 30), BDB_OK);
    release(db, b, &rb);
    release(db, a, &ra1);
    release(db, a, &ra2);

    const char *devs[] = {"a", "b"};
    struct text got;
    index_text(db, devs, 2, &got);
    const char *want = "\na: ev=1699920003000 st=off m0=30 m1=21 m2=22 m3=23"
                       "\nb: ev=1699920001000 st=boot m0=10 m1=11 m2=12"
                       "\ncounts: boot:1 off:1 none:0"
                       "\non: total 0"
                       "\noff: a total 1"
                       "\nboot: b total 1";
    assert_string_equal(got.s, want);
    /* the same after a restart (file + WAL): only "a"'s first write is in the WAL, so
     * the rest must come from the saved file */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_close(db), BDB_OK);
    db = open_fresh(0);
    index_text(db, devs, 2, &got);
    assert_string_equal(got.s, want);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* Hidden entries released out of crowded stripe tables, in an order unrelated to
 * their slots: every entry left (live or held) must still be found. */
static void release_keeps_others_reachable(void **st)
{
    (void)st;
    enum { NLIVE = 600, NHELD = 1200 };
    bdb_db *db = open_fresh(1);
    bdb_batch *bt = bdb_batch_new();
    char name[32];
    for (int i = 0; i < NLIVE; i++) {
        snprintf(name, sizeof name, "live-%d", i);
        bdb_batch_begin(bt, name, strlen(name), T0 + i, 0);
        bdb_batch_metric(bt, "m0", 2, i);
        assert_int_equal(bdb_batch_end(bt), 1);
    }
    assert_int_equal(bdb_db_write(db, TEN, bt), BDB_OK);
    bdb_batch_free(bt);
    static device *held[NHELD];
    static db_latest_resv r[NHELD];
    for (int i = 0; i < NHELD; i++) {
        snprintf(name, sizeof name, "held-%d", i);
        held[i] = dev_of(db, name);
        assert_int_equal(reserve(db, held[i], NULL, 1, &r[i]), BDB_OK);
    }
    uint64_t seed = 7;
    int order[NHELD];
    for (int i = 0; i < NHELD; i++)
        order[i] = i;
    for (int i = NHELD - 1; i > 0; i--) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < NHELD; k++) {
        release(db, held[order[k]], &r[order[k]]);
        if (k % 100 != 99)
            continue;
        /* every held entry is still the one a new reservation finds */
        for (int m = k + 1; m < NHELD; m++) {
            db_latest_resv again;
            int i = order[m];
            assert_int_equal(reserve(db, held[i], NULL, 0, &again), BDB_OK);
            assert_ptr_equal(again.e, r[i].e);
            release(db, held[i], &again);
        }
        for (int i = 0; i < NLIVE; i += 7) {
            snprintf(name, sizeof name, "live-%d", i);
            struct text t = {.n = 0};
            assert_int_equal(bdb_db_latest(db, TEN, name, latest_cb, &t), BDB_OK);
        }
    }
    uint64_t none = 0;
    assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, &(struct text){.n = 0}, &none), BDB_OK);
    assert_int_equal(none, NLIVE); /* no held device counted */
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

/* A write refused at each allocation of its reservations (a new device with a new
 * state and metrics, an existing one gaining a metric and a state) leaves the index
 * as it was; then the same write succeeds. */
static void refused_write_leaves_index(void **st)
{
    (void)st;
    const char *devs[] = {"a", "n"};
    int refused = 0;
    for (uint64_t n = 1; n < 500; n++) {
        bdb_db *db = open_fresh(1);
        write1(db, "a", T0, "on", 1, 1);
        struct text before, now;
        index_text(db, devs, 2, &before);
        bdb_batch *b = bdb_batch_new();
        bdb_batch_begin(b, "a", 1, T0 + 1000, 0);
        bdb_batch_metric(b, "m0", 2, 2);
        bdb_batch_metric(b, "m1", 2, 3);
        bdb_batch_state(b, "idle", 4);
        assert_int_equal(bdb_batch_end(b), 1);
        bdb_batch_begin(b, "n", 1, T0 + 1000, 0);
        bdb_batch_metric(b, "m2", 2, 4);
        bdb_batch_state(b, "boot", 4);
        assert_int_equal(bdb_batch_end(b), 1);
        eu_arm(n);
        int rc = bdb_db_write(db, TEN, b);
        int hit = eu_disarm();
        bdb_db_stats s;
        bdb_db_get_stats(db, &s);
        assert_false(s.readonly);
        if (rc == BDB_ERR_NOMEM) {
            refused++;
            index_text(db, devs, 2, &now);
            assert_string_equal(before.s, now.s);
            assert_int_equal(bdb_db_write(db, TEN, b), BDB_OK);
        } else {
            assert_int_equal(rc, BDB_OK);
        }
        index_text(db, devs, 2, &now);
        assert_non_null(strstr(now.s, "a: ev=1699920001000 st=idle m0=2 m1=3"));
        assert_non_null(strstr(now.s, "n: ev=1699920001000 st=boot m2=4"));
        bdb_batch_free(b);
        assert_int_equal(bdb_db_close(db), BDB_OK);
        if (!hit)
            break;
    }
    assert_true(refused > 10);
}

/* Writers on several threads to the same devices (new ones first), each report with
 * a state and one of four metrics: between one writer's reservation and its apply
 * others move the device between states and add metrics. Nothing may turn the engine
 * read-only, and the index must end as the rules say (newest report wins per part). */
enum { NTHR = 4, NITER = 150, NDEVS = 6 };
static const char *const STATES[] = {"on", "off", "idle"};

static int64_t ts_of(int tid, int it)
{
    return T0 + (int64_t)it * NTHR + tid;
}

static void *writer(void *arg)
{
    bdb_db *db = arg;
    static _Atomic int next_tid;
    int tid = next_tid++;
    for (int it = 0; it < NITER; it++) {
        bdb_batch *b = bdb_batch_new();
        for (int d = 0; d < NDEVS; d++) {
            char dn[16];
            snprintf(dn, sizeof dn, "dev%d", d);
            bdb_batch_begin(b, dn, strlen(dn), ts_of(tid, it), 0);
            bdb_batch_metric(b, M[(it + d) % 4], 2, (double)(it * 100 + tid));
            const char *st = STATES[(it + tid + d) % 3];
            bdb_batch_state(b, st, strlen(st));
            if (bdb_batch_end(b) != 1)
                return (void *)1;
        }
        int rc = bdb_db_write(db, TEN, b);
        bdb_batch_free(b);
        if (rc != BDB_OK)
            return (void *)1;
    }
    return NULL;
}

static void concurrent_writers(void **st)
{
    (void)st;
    bdb_db *db = open_fresh(1);
    pthread_t th[NTHR];
    for (int i = 0; i < NTHR; i++)
        assert_int_equal(pthread_create(&th[i], NULL, writer, db), 0);
    for (int i = 0; i < NTHR; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    bdb_db_stats s;
    bdb_db_get_stats(db, &s);
    assert_false(s.readonly);
    /* the newest report of each device: the last iteration of the highest tid */
    struct text want = {.n = 0}, got = {.n = 0};
    int in_state[3] = {0, 0, 0};
    for (int d = 0; d < NDEVS; d++) {
        char dn[16];
        snprintf(dn, sizeof dn, "dev%d", d);
        int it = NITER - 1, tid = NTHR - 1;
        add(&want, "%s: ev=%lld st=%s", dn, (long long)ts_of(tid, it), STATES[(it + tid + d) % 3]);
        in_state[(it + tid + d) % 3]++;
        for (int m = 0; m < 4; m++) { /* newest iteration that carried metric m */
            int im = it;
            while ((im + d) % 4 != m)
                im--;
            add(&want, " %s=%g", M[m], (double)(im * 100 + tid));
        }
        add(&want, "\n");
        add(&got, "%s: ", dn);
        assert_int_equal(bdb_db_latest(db, TEN, dn, latest_cb, &got), BDB_OK);
        add(&got, "\n");
    }
    assert_string_equal(got.s, want.s);
    uint64_t none = 0;
    got.n = 0;
    got.s[0] = 0;
    assert_int_equal(bdb_db_state_counts(db, TEN, count_cb, &got, &none), BDB_OK);
    want.n = 0;
    want.s[0] = 0;
    const int order[] = {2, 1, 0}; /* idle, off, on: name order */
    for (int i = 0; i < 3; i++)
        if (in_state[order[i]])
            add(&want, " %s:%d", STATES[order[i]], in_state[order[i]]);
    assert_string_equal(got.s, want.s);
    assert_int_equal(none, 0);
    assert_int_equal(bdb_db_close(db), BDB_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hidden_until_applied),
        cmocka_unit_test(release_leaves_no_bytes),
        cmocka_unit_test(walk_skips_held),
        cmocka_unit_test(concurrent_writers),
        cmocka_unit_test(apply_allocates_nothing),
        cmocka_unit_test(release_keeps_others_reachable),
        cmocka_unit_test(refused_write_leaves_index),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
