/* The engine's sink glue on the read side (db_state_sink.c's and db_state_read.c's
 * state, registry and count readers, db_late_sink.c's late events, db_agg_sink.c's
 * tier and fleet reads) against the in-memory fake sink of
 * tests/unit/storage/fakesink.h, with the helpers of sink_glue_util.h (the flush side
 * is sink_glue_test.c):
 *   - every read op failing: the readers fall back to the local files and index; the
 *     raw read answers the head's samples as BDB_ERR_PARTIAL;
 *   - a fresh data directory over a sink that holds another engine's flushes: the
 *     state, registry, count and late readers answer from the sink;
 *   - the sink as the newer side (two engines over one sink): per field the newer
 *     event wins, counts take the larger. */
#include "storage/embedded/sink_glue_util.h"

#include "query/range.h"

struct got {
    size_t n;
    int64_t ts;
    double v;
};

static int range_cb(void *ctx, const char *metric, int64_t ts, double v)
{
    (void)metric;
    struct got *g = ctx;
    g->n++;
    g->ts = ts;
    g->v = v;
    return 0;
}

/* Every read op failing in turn, always: the readers answer from the local files and
 * index (which hold the same flushed data), or fail; never a wrong answer. */
static void test_read_fallbacks(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *dbs[2] = {open_db("rf_ref", NULL), open_db("rf_sink", f)};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 2, round);
        assert_int_equal(bdb_db_flush(dbs[0]), BDB_OK);
        assert_int_equal(bdb_db_flush(dbs[1]), BDB_OK);
    }
    static const enum fs_op reads[] = {FS_TIER_READ,   FS_FLEET_READ, FS_STATE_GET, FS_STATE_LIST,
                                       FS_DEVICE_LIST, FS_COUNT_LIST, FS_LATE_LIST};
    for (size_t i = 0; i < sizeof reads / sizeof *reads; i++) {
        f->fail_op = (int)reads[i];
        f->fail_nth = 0; /* every call */
        f->failed = 0;
        f->fail_rc = i % 2 ? BDB_ERR_IO : BDB_ERR_AGAIN;
        for (int rep = 0; rep < 2; rep++) {
            char *want = dump_db(dbs[0], S_ALL);
            char *got = dump_db(dbs[1], S_ALL);
            if (strcmp(want, got) != 0)
                fprintf(stderr, "read op %d failing\n", (int)reads[i]);
            assert_same("reads with a failing read op", want, got);
        }
        assert_true(f->failed > 0); /* the op was asked and failed */
    }
    /* the raw read failing for want of the sink (IO, AGAIN): BDB_ERR_PARTIAL with the
     * head's samples only, never samples missing the flushed part presented as whole;
     * any other failure stays an error */
    report(&dbs[1], 1, 0, T0 + 5 * DAY, -1, 42.0); /* d0's one sample in the head */
    bdb_samples s[1];
    for (int k = 0; k < 3; k++) {
        static const int rcs[] = {BDB_ERR_IO, BDB_ERR_AGAIN, BDB_ERR_CORRUPT};
        f->fail_op = FS_READ;
        f->fail_rc = rcs[k];
        memset(s, 0, sizeof s);
        int rc = bdb_db_read(dbs[1], "t1", "d0", &mets[1], 1, LO, HI, s, NULL);
        if (k < 2) {
            assert_int_equal(rc, BDB_ERR_PARTIAL);
            assert_int_equal(s[0].n, 1);
            assert_true(s[0].ts[0] == T0 + 5 * DAY && s[0].v[0] == 42.0);
        } else {
            assert_int_equal(rc, BDB_ERR_CORRUPT);
        }
        bdb_samples_free(s);
    }
    /* the query layer over it: every head sample emitted, then BDB_ERR_PARTIAL */
    f->fail_op = FS_READ;
    f->fail_rc = BDB_ERR_IO;
    bdb_range_query q = {
        .tenant = "t1", .device = "d0", .metrics = &mets[1], .nmetrics = 1, .from = LO, .to = HI};
    struct got g = {0, 0, 0};
    assert_int_equal(bdb_query_range(dbs[1], NULL, &q, range_cb, &g, NULL), BDB_ERR_PARTIAL);
    assert_int_equal(g.n, 1);
    assert_true(g.ts == T0 + 5 * DAY && g.v == 42.0);
    f->fail_op = -1;
    bdb_db_close(dbs[0]);
    bdb_db_close(dbs[1]);
    fakesink_free(f);
}

/* An engine on an empty data directory over a sink that holds another engine's
 * flushes: the state, registry, count and late readers answer from the sink. */
static void test_fresh_dir_reads_sink(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *dbs[2] = {open_db("fr_ref", NULL), open_db("fr_sink", f)};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 2, round);
        assert_int_equal(bdb_db_flush(dbs[0]), BDB_OK);
        assert_int_equal(bdb_db_flush(dbs[1]), BDB_OK);
    }
    bdb_db_close(dbs[1]);
    f->closed = 0;
    bdb_db *fresh = open_db("fr_fresh", f);
    assert_same("fresh engine over the sink vs fake", dump_fake(f, S_SINKSIDE),
                dump_db(fresh, S_SINKSIDE));
    /* the sink failing too: nothing known (local is empty), not a wrong answer */
    f->fail_op = FS_DEVICE_LIST;
    f->fail_nth = 0;
    lines l = {NULL, 0};
    assert_int_equal(bdb_db_list_devices(fresh, "t1", dev_cb, &l), BDB_OK);
    assert_int_equal(l.n, 0);
    f->fail_op = -1;
    bdb_db_close(fresh);
    bdb_db_close(dbs[0]);
    fakesink_free(f);
}

/* The merge rules of db_state_sink.h when the sink is the newer side: two engines
 * over one sink, x flushed the first reports, y the same and newer ones. x's readers
 * merge its local index with y's newer rows: per field the newer event wins, counts
 * take the larger, late events come from the sink, so x answers like a reference that
 * saw everything. (Not a deployment: two servers must not share a keyspace's devices,
 * docs/CASSANDRA.md; the registry, whose local row wins for a device the catalog
 * knows, is left out for that reason.) */
static void test_shared_sink_newer_wins(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *ref = open_db("sh_ref", NULL), *x = open_db("sh_x", f), *y = open_db("sh_y", f);
    bdb_db *both[2] = {ref, y};
    feed(both, 2, 0);
    feed(&x, 1, 0);
    assert_int_equal(bdb_db_flush(x), BDB_OK);
    feed(both, 2, 1);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    assert_int_equal(bdb_db_flush(y), BDB_OK);
    assert_same("x over y's newer rows vs reference", dump_db(ref, S_STATE | S_COUNT | S_LATE),
                dump_db(x, S_STATE | S_COUNT | S_LATE));
    bdb_db_close(x);
    bdb_db_close(y);
    bdb_db_close(ref);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_fallbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fresh_dir_reads_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_sink_newer_wins, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
