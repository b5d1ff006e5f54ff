/* hotpart: hot partition detection and mitigation with an injected clock, against the
 * real embedded engine for the sub-bucket policy.
 *
 * The scenario of issue 3 item 4: one device writing 1,000 reports/s among 10,000
 * quiet devices (1 report/min each). Covered: the hot device is listed within a minute
 * of injected time (and no quiet device ever is), one episode (started once, ended
 * once after a quiet minute); subbucket: samples spread over N partition ids, a range
 * query returns every sample, also after a crash (WAL replay); ratelimit: at most the
 * limit kept per minute, the excess refused and counted; sample: exactly the stated
 * fraction kept, the rest counted; policy validation; the table's size per device. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "query/pool.h"
#include "query/range.h"
#include "server/admission/hotpart.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/hot/db_hot.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define T0 INT64_C(1699920000000) /* a minute (and day) boundary */
#define QUIET 10000
#define HOT_RATE 1000

static int64_t now_ms;
static char tmpdir[64], datadir[128];

static int64_t clk(void *ctx)
{
    (void)ctx;
    return now_ms;
}

struct world {
    bdb_db *db;
    int starts, ends;
    int64_t started_at;
    uint32_t last_n;
};

static void on_episode(void *ctx, const char *tenant, const char *device, int hot,
                       const bdb_hot_policy *p)
{
    struct world *w = ctx;
    assert_string_equal(tenant, "t");
    assert_string_equal(device, "hot");
    if (hot) {
        w->starts++;
        w->started_at = now_ms;
    } else {
        w->ends++;
    }
    if (w->db && p->kind == BDB_HOT_SUBBUCKET)
        assert_int_equal(bdb_db_set_subbuckets(w->db, tenant, device, hot ? p->subbuckets : 1),
                         BDB_OK);
}

static int setup(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bdb_hotpart_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(datadir, sizeof datadir, "%s/data", tmpdir);
    now_ms = T0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(tmpdir);
    return 0;
}

static bdb_db *open_db(const char *dir)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    o.clock = (bdb_clock){clk, NULL};
    bdb_db *db = NULL;
    assert_int_equal(bdb_db_open(&o, &db), BDB_OK);
    return db;
}

static void copy_tree(const char *from, const char *to)
{
    mkdir(to, 0755);
    DIR *d = opendir(from);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") || !strcmp(de->d_name, "LOCK"))
            continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat st;
        assert_int_equal(stat(a, &st), 0);
        if (S_ISDIR(st.st_mode)) {
            copy_tree(a, b);
            continue;
        }
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(in >= 0 && out >= 0);
        char buf[65536];
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            assert_int_equal(write(out, buf, (size_t)n), n);
        close(in);
        close(out);
    }
    closedir(d);
}

struct tally {
    uint64_t offered, kept, dropped, rejected; /* of the hot device */
    uint64_t quiet_kept, quiet_offered;
    uint64_t kept_minute[8]; /* hot reports kept per minute of the run */
};

/* One second of the fleet at now_ms: the hot device's batch of HOT_RATE reports (when
 * hot_on), and the quiet devices whose turn it is (device k reports in second k % 60
 * of each minute), as a second batch. Kept reports are written to w->db if set. */
static void one_second(bdb_hotpart *h, const bdb_hot_policy *p, struct world *w, int hot_on,
                       int sec, struct tally *t)
{
    bdb_batch *b = bdb_batch_new();
    bdb_hot_verdict v;
    bdb_batch *kept = NULL;
    if (hot_on) {
        for (int i = 0; i < HOT_RATE; i++) {
            bdb_batch_begin(b, "hot", 3, now_ms + i, (size_t)i);
            bdb_batch_metric(b, "v", 1, (double)(now_ms + i));
            assert_int_equal(bdb_batch_end(b), 1);
        }
        t->offered += HOT_RATE;
        int ok = bdb_hotpart_admit_batch(h, "t", p, b, &kept, &v);
        if (!ok) {
            t->rejected += v.rejected;
            assert_int_equal(v.rejected, HOT_RATE);
            assert_int_equal(v.device_len, 3);
            assert_memory_equal(v.device, "hot", 3);
            assert_true(v.retry_after_ms > 0 && v.retry_after_ms <= 60000);
        } else {
            const bdb_batch *wb = kept ? kept : b;
            size_t n;
            bdb_batch_reports(wb, &n);
            t->kept += n;
            t->dropped += v.dropped;
            t->kept_minute[(now_ms - T0) / 60000 % 8] += n;
            if (w->db)
                assert_int_equal(bdb_db_write(w->db, "t", wb), BDB_OK);
        }
        bdb_batch_free(kept);
        bdb_batch_reset(b);
    }
    for (int k = sec % 60; k < QUIET; k += 60) {
        char name[32];
        int n = snprintf(name, sizeof name, "quiet-%05d", k);
        bdb_batch_begin(b, name, (size_t)n, now_ms, 0);
        bdb_batch_metric(b, "v", 1, 1.0);
        bdb_batch_end(b);
    }
    size_t nq;
    bdb_batch_reports(b, &nq);
    t->quiet_offered += nq;
    assert_int_equal(bdb_hotpart_admit_batch(h, "t", p, b, &kept, &v), 1);
    assert_null(kept); /* quiet devices are never sampled */
    t->quiet_kept += nq;
    if (w->db)
        assert_int_equal(bdb_db_write(w->db, "t", b), BDB_OK);
    bdb_batch_free(b);
}

struct listing {
    int n;
    char device[64];
    uint64_t prev, rejected, sampled_out;
};

static int list_cb(void *ctx, const bdb_hot_info *i)
{
    struct listing *l = ctx;
    l->n++;
    snprintf(l->device, sizeof l->device, "%s", i->device);
    l->prev = i->writes_prev;
    l->rejected = i->rejected;
    l->sampled_out = i->sampled_out;
    return 0;
}

static struct listing list_hot(bdb_hotpart *h, const char *tenant)
{
    struct listing l;
    memset(&l, 0, sizeof l);
    bdb_hotpart_list(h, tenant, list_cb, &l);
    return l;
}

struct tstats {
    uint64_t hot_now, episodes, rejected, sampled_out;
};

static void stats_cb(void *ctx, const bdb_hot_tenant_stats *s)
{
    struct tstats *t = ctx;
    if (!strcmp(s->tenant, "t"))
        *t = (struct tstats){s->hot_now, s->episodes, s->rejected, s->sampled_out};
}

static struct tstats stats(bdb_hotpart *h)
{
    struct tstats t = {0};
    bdb_hotpart_stats(h, stats_cb, &t);
    return t;
}

static bdb_hot_policy policy(int kind)
{
    bdb_hot_policy p = {3000, kind, 8, 5000, 0.1};
    return p;
}

/* Runs `secs` seconds with the hot device on, then `quiet_secs` with it off. */
static void run(bdb_hotpart *h, const bdb_hot_policy *p, struct world *w, int secs, int quiet_secs,
                struct tally *t)
{
    for (int s = 0; s < secs + quiet_secs; s++) {
        now_ms = T0 + (int64_t)s * 1000;
        one_second(h, p, w, s < secs, s, t);
        if (s == 59) {
            /* Within a minute of injected time the hot device is listed, alone. */
            struct listing l = list_hot(h, "t");
            assert_int_equal(l.n, 1);
            assert_string_equal(l.device, "hot");
            assert_int_equal(w->starts, 1);
            assert_true(w->started_at - T0 < 60000);
        }
    }
}

struct ids {
    int64_t id[64];
    int n;
};

static int count_cb(void *ctx, const char *m, int64_t ts_, double v_)
{
    (void)m;
    (void)ts_;
    (void)v_;
    (*(uint64_t *)ctx)++;
    return 0;
}

/* Distinct partition ids of the hot device in the blocks. */
static int ids_cb(void *ctx, const char *tn, const char *dn, int64_t bs, uint64_t rows,
                  uint64_t bytes)
{
    (void)tn;
    (void)rows;
    (void)bytes;
    struct ids *ids = ctx;
    if (strcmp(dn, "hot"))
        return 0;
    for (int i = 0; i < ids->n; i++)
        if (ids->id[i] == bs)
            return 0;
    if (ids->n < 64)
        ids->id[ids->n++] = bs;
    return 0;
}

static void test_detect_and_subbucket(void **state)
{
    (void)state;
    struct world w = {0};
    w.db = open_db(datadir);
    bdb_hotpart_opts o = {{clk, NULL}, on_episode, &w};
    bdb_hotpart *h = bdb_hotpart_new(&o);
    bdb_hot_policy p = policy(BDB_HOT_SUBBUCKET);
    struct tally t = {0};
    /* 90 s hot, then 130 s without it: its minute closes quiet and the episode ends. */
    run(h, &p, &w, 90, 130, &t);
    assert_int_equal(w.starts, 1);
    assert_int_equal(w.ends, 1);
    assert_int_equal(list_hot(h, NULL).n, 0);
    struct tstats ts = stats(h);
    assert_int_equal(ts.episodes, 1);
    assert_int_equal(ts.hot_now, 0);
    assert_int_equal(t.kept, t.offered); /* subbucket keeps everything */
    assert_int_equal(t.quiet_kept, t.quiet_offered);
    assert_int_equal(bdb_db_subbuckets(w.db, "t", "hot"), 1); /* back to one */

    /* Every stored sample comes back from a range query, and after a crash. */
    bdb_pool *pool = bdb_pool_new(2);
    bdb_range_query q = {"t", "hot", NULL, 0, T0, T0 + BDB_MS_HOUR, 0, 0};
    bdb_query_stats st;
    uint64_t n = 0;
    assert_int_equal(bdb_query_range(w.db, pool, &q, count_cb, &n, &st), BDB_OK);
    assert_int_equal(n, 90 * HOT_RATE);
    char crash[256];
    snprintf(crash, sizeof crash, "%s/crash", tmpdir);
    copy_tree(datadir, crash);
    assert_int_equal(bdb_db_flush(w.db), BDB_OK);
    struct ids ids = {{0}, 0};
    assert_int_equal(bdb_db_partition_sizes(w.db, ids_cb, &ids), BDB_OK);
    assert_int_equal(ids.n, 8); /* bucket start (= sub 0) and subs 1..7 */
    n = 0;
    assert_int_equal(bdb_query_range(w.db, pool, &q, count_cb, &n, &st), BDB_OK);
    assert_int_equal(n, 90 * HOT_RATE);
    assert_int_equal(bdb_db_close(w.db), BDB_OK);
    w.db = open_db(crash);
    n = 0;
    assert_int_equal(bdb_query_range(w.db, pool, &q, count_cb, &n, &st), BDB_OK);
    assert_int_equal(n, 90 * HOT_RATE);
    assert_int_equal(bdb_db_close(w.db), BDB_OK);
    bdb_pool_free(pool);
    bdb_hotpart_free(h);
}

static void test_ratelimit(void **state)
{
    (void)state;
    struct world w = {0};
    bdb_hotpart_opts o = {{clk, NULL}, on_episode, &w};
    bdb_hotpart *h = bdb_hotpart_new(&o);
    bdb_hot_policy p = policy(BDB_HOT_RATELIMIT);
    struct tally t = {0};
    run(h, &p, &w, 120, 0, &t);
    assert_int_equal(w.starts, 1);
    /* Minute 0: 3 s before it was hot, then 5 batches of 1,000 within the limit. */
    assert_int_equal(t.kept_minute[0], 3000 + 5000);
    assert_int_equal(t.kept_minute[1], 5000);
    assert_int_equal(t.kept + t.rejected, t.offered);
    struct tstats ts = stats(h);
    assert_int_equal(ts.rejected, t.rejected);
    assert_int_equal(ts.rejected, 120000 - 13000);
    assert_int_equal(ts.sampled_out, 0);
    struct listing l = list_hot(h, "t");
    assert_int_equal(l.n, 1);
    assert_int_equal(l.rejected, t.rejected);
    assert_int_equal(l.prev, 60000); /* offered reports count, refused or not */
    assert_int_equal(list_hot(h, "other").n, 0);
    bdb_hotpart_free(h);
}

static void test_sample(void **state)
{
    (void)state;
    struct world w = {0};
    bdb_hotpart_opts o = {{clk, NULL}, on_episode, &w};
    bdb_hotpart *h = bdb_hotpart_new(&o);
    bdb_hot_policy p = policy(BDB_HOT_SAMPLE);
    struct tally t = {0};
    run(h, &p, &w, 63, 0, &t);
    /* 3,000 kept before the episode, then exactly 1 in 10 of the 60,000 after. */
    assert_int_equal(t.kept, 3000 + 6000);
    assert_int_equal(t.dropped, 54000);
    assert_int_equal(t.rejected, 0);
    struct tstats ts = stats(h);
    assert_int_equal(ts.sampled_out, 54000);
    assert_int_equal(list_hot(h, NULL).sampled_out, 54000);
    assert_int_equal(t.quiet_kept, t.quiet_offered);
    bdb_hotpart_free(h);
}

static void test_policy_check(void **state)
{
    (void)state;
    char err[200];
    bdb_hot_policy p = policy(BDB_HOT_SAMPLE);
    assert_int_equal(bdb_hot_policy_check(&p, err, sizeof err), 0);
    p.subbuckets = 65;
    assert_int_equal(bdb_hot_policy_check(&p, err, sizeof err), -1);
    assert_non_null(strstr(err, "hot_subbuckets"));
    p = policy(BDB_HOT_SAMPLE);
    p.sample = 1.5;
    assert_int_equal(bdb_hot_policy_check(&p, err, sizeof err), -1);
    assert_non_null(strstr(err, "hot_sample"));
    p = policy(BDB_HOT_SAMPLE);
    p.max_per_minute = 0;
    assert_int_equal(bdb_hot_policy_check(&p, err, sizeof err), -1);
    assert_int_equal(bdb_hot_kind_parse("ratelimit"), BDB_HOT_RATELIMIT);
    assert_int_equal(bdb_hot_kind_parse("fast"), -1);
}

/* The counting table's size per tracked device, and that idle devices leave it. */
static void test_memory_per_device(void **state)
{
    (void)state;
    bdb_hotpart *h = bdb_hotpart_new(&(bdb_hotpart_opts){{clk, NULL}, NULL, NULL});
    bdb_hot_policy p = policy(BDB_HOT_NONE);
    const size_t N = 200000;
    bdb_batch *b = bdb_batch_new();
    bdb_hot_verdict v;
    bdb_batch *kept;
    for (size_t i = 0; i < N; i++) {
        char name[32];
        int n = snprintf(name, sizeof name, "dev-%zu", i);
        bdb_batch_begin(b, name, (size_t)n, now_ms, i);
        bdb_batch_metric(b, "v", 1, 1.0);
        bdb_batch_end(b);
        if ((i + 1) % 5000 == 0) {
            assert_int_equal(bdb_hotpart_admit_batch(h, "t", &p, b, &kept, &v), 1);
            bdb_batch_reset(b);
        }
    }
    bdb_batch_free(b);
    assert_int_equal(bdb_hotpart_entries(h), N);
    double per = (double)bdb_hotpart_table_bytes(h) / (double)N;
    print_message("hotpart: %zu devices, %zu table bytes, %.1f bytes per device\n", N,
                  bdb_hotpart_table_bytes(h), per);
    assert_true(per <= 24.0 * 16 / 3); /* at worst 3/16 full */
    /* Two idle minutes later every slot is gone and the table shrank. */
    now_ms += 2 * 60000;
    bdb_hotpart_tick(h);
    assert_int_equal(bdb_hotpart_entries(h), 0);
    assert_true(bdb_hotpart_table_bytes(h) <= 64 * 24);
    bdb_hotpart_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_detect_and_subbucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ratelimit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sample, setup, teardown),
        cmocka_unit_test(test_policy_check),
        cmocka_unit_test_setup_teardown(test_memory_per_device, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
