/* db_cat_sink through the engine, over the fake sink with whole registry rows and a
 * tenant listing (fakesink_new(2)): a data directory lost and replaced by an empty
 * one on the same sink (docs/CASSANDRA.md, "A new data directory on a keyspace").
 *
 * Covered: engine A and a reference engine without a sink take round 0 of the glue
 * feed (four devices, tags, two metrics, states, 47 hours) and flush; A is closed and
 * engine B opens an EMPTY directory on A's sink: its catalog is rebuilt from the
 * registry, so raw, tier and fleet answers equal the reference's; both then take
 * round 1 (later reports into the same hour and day windows, a rewrite and a late
 * event into flushed windows, sub-buckets) and flush: B's windows merge the sink's
 * rows of the windows it inherited and still equal the reference's, and so does
 * what the sink holds; a reopen of B (the horizons saved in its catalog) answers the
 * same; a sink whose registry cannot be listed fails the open of an empty directory
 * rather than start on a catalog that would overwrite the sink's rows. */
#include "storage/embedded/sink_glue_util.h"

#define SEC (S_RAW | S_TIER | S_FLEET)

static void flush_all(bdb_db *const *dbs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bdb_db_flush(dbs[i]), BDB_OK);
}

static void test_empty_directory_rebuilds(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(2);
    bdb_db *dbs[2] = {open_db("ref", NULL), open_db("a", f)};
    feed(dbs, 2, 0);
    flush_all(dbs, 2);
    char *want = dump_db(dbs[0], SEC);
    assert_same("A against the reference", strdup(want), dump_db(dbs[1], SEC));
    bdb_db_close(dbs[1]);
    uint64_t lists = f->op_calls[FS_TENANT_LIST]; /* A's first open asked an empty sink */

    /* the disk is lost: B on an empty directory, the same sink */
    dbs[1] = open_db("b", f);
    assert_same("B on an empty directory", want, dump_db(dbs[1], SEC));
    assert_int_equal(f->op_calls[FS_TENANT_LIST], lists + 1);

    /* more into the windows B inherited */
    feed(dbs, 2, 1);
    flush_all(dbs, 2);
    want = dump_db(dbs[0], SEC);
    assert_same("B after adding to inherited windows", strdup(want), dump_db(dbs[1], SEC));
    /* the sink's rows are the reference's windows: a second fake fed whole by one
     * engine holds the same */
    fakesink *g = fakesink_new(2);
    bdb_db *one = open_db("one", g);
    feed(&one, 1, 0);
    assert_int_equal(bdb_db_flush(one), BDB_OK);
    feed(&one, 1, 1);
    assert_int_equal(bdb_db_flush(one), BDB_OK);
    assert_same("what the sink holds", dump_fake(g, S_TIER | S_FLEET),
                dump_fake(f, S_TIER | S_FLEET));
    bdb_db_close(one);
    fakesink_free(g);

    /* a reopen keeps the inherited horizons (catalog) */
    bdb_db_close(dbs[1]);
    dbs[1] = open_db("b", f);
    assert_int_equal(f->op_calls[FS_TENANT_LIST], lists + 1); /* a catalog now: no rebuild */
    assert_same("B reopened", want, dump_db(dbs[1], SEC));
    bdb_db_close(dbs[1]);
    bdb_db_close(dbs[0]);

    /* a registry that cannot be listed: an empty directory does not open */
    f->fail_op = FS_TENANT_LIST;
    f->fail_nth = 0;
    f->fail_rc = BDB_ERR_AGAIN;
    char dir[128];
    path_of(dir, sizeof dir, "c");
    bdb_db_opts o;
    eu_opts(&o, dir, clock_fn, NULL);
    o.vfs = eu_nosync_vfs();
    o.sink = &f->base;
    bdb_db *c = NULL;
    assert_int_not_equal(bdb_db_open(&o, &c), BDB_OK);
    assert_null(c);
    f->fail_op = -1;
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_directory_rebuilds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
