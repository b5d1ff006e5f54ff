/* The engine's sink glue on the flush side (db_sink.c, db_agg_sink.c,
 * db_state_sink.c, db_late_sink.c) against the in-memory fake sink of
 * tests/unit/storage/fakesink.h, through the public API (background = 0: every flush
 * is explicit); the read side is sink_glue_read_test.c, the helpers both use
 * sink_glue_util.h.
 *
 * Reference: an embedded engine (no sink) fed the same reports. Both sides are turned
 * into the same sorted text (raw samples, tier and fleet windows, latest state, state
 * index, registry, event counts, late events), so a check is one string compare:
 *   - after a flush the fake holds exactly what the reference computes;
 *   - the sink engine's public reads (head + sink merged) answer what the reference
 *     answers, before and after more unflushed reports;
 *   - each call of a flush failing in turn (BDB_ERR_IO, BDB_ERR_AGAIN) fails that
 *     flush with the head intact (reads unchanged) and the WAL intact (a crash image
 *     replays the unflushed reports), and the next flush leaves the fake with exactly
 *     the clean run's contents: nothing lost, nothing counted twice;
 *   - a sink with the raw ops only: everything else stays with the engine's files;
 *   - out of memory at allocations spread over a big flush: the same as a failing
 *     call. */
#include "storage/embedded/sink_glue_util.h"

#include <signal.h>
#include <sys/wait.h>

static void test_fake_equals_reference(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    bdb_db *dbs[2] = {open_db("eq_ref", NULL), open_db("eq_sink", f)};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 2, round);
        assert_int_equal(bdb_db_flush(dbs[0]), BDB_OK);
        assert_int_equal(bdb_db_flush(dbs[1]), BDB_OK);
        /* the fake holds exactly the reference's flushed data, every kind */
        assert_same("fake vs reference", dump_db(dbs[0], S_ALL), dump_fake(f, S_ALL));
        /* and the sink engine answers like the reference */
        assert_same("sink engine vs reference", dump_db(dbs[0], S_ALL), dump_db(dbs[1], S_ALL));
    }
    assert_true(f->nraw > 400 && f->ntier > 0 && f->nfleet > 0 && f->nst == NDEV &&
                f->ndev == NDEV && f->ncnt > 0 && f->nlate >= 2);
    /* unflushed reports: the head and the sink merged, per field the newer wins */
    fake_now += HOUR;
    report(dbs, 2, 0, fake_now, 0, 5.5);
    report(dbs, 2, 2, T0 + 7 * HOUR + 5, -1, 6.5); /* late, unflushed */
    size_t nraw = f->nraw;
    assert_same("head + sink vs reference", dump_db(dbs[0], S_ALL), dump_db(dbs[1], S_ALL));
    assert_int_equal(f->nraw, nraw); /* nothing reached the sink without a flush */
    bdb_db_close(dbs[0]);
    bdb_db_close(dbs[1]);
    assert_true(f->closed);
    fakesink_free(f);
}

/* Round 0 flushed, round 1 written, then the flush fails at call k of the sink. */
static void test_fail_every_call(void **st)
{
    (void)st;
    /* the clean run: what the fake must hold at the end */
    fakesink *clean = fakesink_new(1);
    bdb_db *ref = open_db("fail_clean", clean);
    feed(&ref, 1, 0);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    feed(&ref, 1, 1);
    uint64_t before = clean->calls;
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    uint64_t flush_calls = clean->calls - before;
    char *want_reads = dump_db(ref, S_ALL);
    char *want_fake = dump_fake(clean, S_ALL);
    bdb_db_close(ref);
    fakesink_free(clean);
    assert_true(flush_calls >= 10); /* puts of every kind, the commit */

    uint64_t failed_runs = 0;
    for (uint64_t k = 1; k <= flush_calls + 1 && k <= 200; k++) {
        char name[32], dir[128], img[160];
        snprintf(name, sizeof name, "fail_%llu", (unsigned long long)k);
        fakesink *f = fakesink_new(1);
        bdb_db *db = open_db(name, f);
        feed(&db, 1, 0);
        assert_int_equal(bdb_db_flush(db), BDB_OK);
        feed(&db, 1, 1);
        f->fail_call = f->calls + k;
        f->fail_rc = k % 2 ? BDB_ERR_IO : BDB_ERR_AGAIN;
        int rc = bdb_db_flush(db);
        if (k > flush_calls) { /* past the last call: nothing failed */
            f->fail_call = 0;
            assert_int_equal(f->failed, 0);
            assert_int_equal(rc, BDB_OK);
        } else if (f->failed == 1 && f->failed_op == FS_DOC_PUT) {
            /* the storage measure's document is put once the flush committed, best
             * effort (db_sink_usage.h): the flush stands, the next one puts it */
            assert_int_equal(rc, BDB_OK);
            failed_runs++;
            f->fail_call = 0;
            uint64_t puts = f->op_calls[FS_DOC_PUT];
            assert_int_equal(bdb_db_flush(db), BDB_OK);
            assert_int_equal(f->op_calls[FS_DOC_PUT], puts + 1);
        } else {
            assert_int_equal(f->failed, 1);
            assert_int_not_equal(rc, BDB_OK);
            failed_runs++;
            /* head intact: the readers answer as before the flush */
            char *got = dump_db(db, S_ALL);
            assert_same("reads after a failed flush", strdup(want_reads), got);
            /* WAL intact: a crash image now replays round 1 (no sink: the raw
             * samples of round 1 must be in the image itself) */
            path_of(dir, sizeof dir, name);
            snprintf(img, sizeof img, "%s_img", dir);
            assert_int_equal(cu_copy_tree(dir, img), 0);
            char iname[48];
            snprintf(iname, sizeof iname, "%s_img", name);
            bdb_db *crash = open_db(iname, NULL);
            bdb_samples s[1];
            memset(s, 0, sizeof s);
            assert_int_equal(bdb_db_read(crash, "t1", "d2", &mets[1], 1, T0 + 3 * HOUR,
                                         T0 + 3 * HOUR + 124, s, NULL),
                             BDB_OK);
            assert_int_equal(s->n, 1); /* the late report of round 1 */
            assert_true(s->v[0] == 12.25);
            bdb_samples_free(s);
            bdb_db_close(crash);
            tu_rm_rf(img);
            /* the next flush: nothing lost, nothing doubled */
            f->fail_call = 0;
            assert_int_equal(bdb_db_flush(db), BDB_OK);
        }
        assert_same("fake after retry", strdup(want_fake), dump_fake(f, S_ALL));
        assert_same("reads after retry", strdup(want_reads), dump_db(db, S_ALL));
        bdb_db_close(db);
        fakesink_free(f);
        path_of(dir, sizeof dir, name);
        tu_rm_rf(dir);
    }
    assert_int_equal(failed_runs, flush_calls);
    printf("sink glue figures: %llu sink calls in the swept flush, each failed once\n",
           (unsigned long long)flush_calls);
    free(want_reads);
    free(want_fake);
}

/* A sink with the raw ops only: the fake gets the samples and nothing else; the
 * engine's tier and fleet files and its index answer the rest. */
static void test_raw_only_sink(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(0);
    bdb_db *dbs[2] = {open_db("ro_ref", NULL), open_db("ro_sink", f)};
    for (int round = 0; round < 2; round++) {
        feed(dbs, 2, round);
        assert_int_equal(bdb_db_flush(dbs[0]), BDB_OK);
        assert_int_equal(bdb_db_flush(dbs[1]), BDB_OK);
        assert_same("raw-only fake vs reference", dump_db(dbs[0], S_RAW), dump_fake(f, S_RAW));
        assert_same("raw-only sink engine", dump_db(dbs[0], S_ALL), dump_db(dbs[1], S_ALL));
    }
    assert_true(f->nraw > 0);
    assert_int_equal(f->ntier + f->nfleet + f->nst + f->ndev + f->ncnt + f->nlate, 0);
    bdb_db_close(dbs[0]);
    bdb_db_close(dbs[1]);
    fakesink_free(f);
}

/* One flush out of memory at allocation n, in a child process: 0 when the flush
 * did not fail and the fake is right, 2 when it failed with everything kept (reads as
 * the reference) and the next one left the fake exactly as the clean run; 1 on a
 * wrong result. */
static int alloc_trial(uint64_t n, const char *want, const char *want_fake)
{
    char name[32];
    snprintf(name, sizeof name, "af_%llu", (unsigned long long)n);
    fakesink *f = fakesink_new(1);
    bdb_db *db = open_db(name, f);
    feed(&db, 1, 0);
    int bad = bdb_db_flush(db) != BDB_OK;
    feed(&db, 1, 1);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, n);
    int rc = bdb_db_flush(db);
    bdb_alloc_fail_disarm();
    char *got;
    if (rc != BDB_OK) {
        got = dump_db(db, S_ALL);
        bad |= strcmp(want, got) != 0;
        free(got);
        bad |= bdb_db_flush(db) != BDB_OK;
    }
    got = dump_fake(f, S_ALL);
    bad |= strcmp(want_fake, got) != 0;
    free(got);
    if (bad)
        fprintf(stderr, "allocation %llu of the flush: rc %d, wrong result\n",
                (unsigned long long)n, rc);
    bdb_db_close(db);
    fakesink_free(f);
    return bad ? 1 : rc != BDB_OK ? 2 : 0;
}

/* Out of memory at allocations spread over the big flush of this file's feed (24
 * samples of its allocations; alloc_fail_sink_test.c fails every allocation of a
 * smaller one in turn). Each trial runs in a child; one that aborts fails the test,
 * unless SINK_GLUE_STRICT=0 (then it is only counted). A wrong result always fails it. */
static void test_alloc_failures(void **st)
{
    (void)st;
    fakesink *clean = fakesink_new(1);
    bdb_db *ref = open_db("af_ref", clean);
    feed(&ref, 1, 0);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    feed(&ref, 1, 1);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, UINT64_MAX);
    assert_int_equal(bdb_db_flush(ref), BDB_OK);
    uint64_t nalloc = bdb_alloc_fail_count();
    bdb_alloc_fail_disarm();
    char *want = dump_db(ref, S_ALL);
    char *want_fake = dump_fake(clean, S_ALL);
    bdb_db_close(ref);
    fakesink_free(clean);
    assert_true(nalloc > 24);
    const char *se = getenv("SINK_GLUE_STRICT");
    int strict = !se || strcmp(se, "0") != 0;
    unsigned ok = 0, failed = 0, aborted = 0;
    for (uint64_t i = 0; i < 24; i++) {
        uint64_t n = 1 + i * nalloc / 24 + i % 3; /* spread, not one stride */
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            exit(alloc_trial(n, want, want_fake)); /* exit: coverage counts are written */
        int ws = 0;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        if (WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT && !strict) {
            aborted++;
            continue;
        }
        assert_true(WIFEXITED(ws));
        assert_true(WEXITSTATUS(ws) == 0 || WEXITSTATUS(ws) == 2);
        ok += WEXITSTATUS(ws) == 0;
        failed += WEXITSTATUS(ws) == 2;
    }
    printf("sink glue figures: flush out of memory at 24 of its %llu allocations: %u failed "
           "and the retry lost nothing, %u went through intact, %u aborted\n",
           (unsigned long long)nalloc, failed, ok, aborted);
    free(want);
    free(want_fake);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fake_equals_reference, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fail_every_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_raw_only_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
