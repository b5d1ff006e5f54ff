/* ack_sink_test: the acknowledgement through the sink (db_ack_sink.c, ack=quorum) over
 * the fake sink: every acknowledged sample reaches the sink before bdb_db_write
 * returns, in the partition (bucket and sub-bucket) the flush later puts it in, with
 * the value the head keeps (a time written twice: the later write); a sink that does
 * not confirm fails the write with BDB_ERR_AGAIN and loses nothing the WAL logged; a
 * sink in ack=wal gets nothing early. */
#include "storage/embedded/sink_glue_util.h"

/* "tenant device metric partition ts value" per row, sorted. */
static char *dump_rows(const fs_raw *v, size_t n)
{
    lines l = {0};
    for (size_t i = 0; i < n; i++)
        addf(&l, "%s %s %s %lld %lld %.17g", v[i].tenant, v[i].device, v[i].metric,
             (long long)v[i].part, (long long)v[i].ts, v[i].v);
    return join(&l);
}

static void test_acked_rows_equal_the_flush(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    f->ack_on = 1;
    bdb_db *db = open_db("equal", f);
    feed(&db, 1, 0);
    feed(&db, 1, 1); /* rewrites, a late day, a time twice, d1 in sub-buckets */
    /* before any flush: everything acknowledged is in the sink already */
    assert_int_equal(f->nraw, 0);
    assert_true(f->nack > 0);
    assert_true(f->ack_groups > 0);
    char *acked = dump_rows(f->ack, f->nack);
    /* d1 was made hot between its reports: before any flush, the counts table names
     * its 4 sub-buckets (a node rebuilt from the sink scans that many) */
    uint32_t subs = 0;
    for (size_t i = 0; i < f->ncnt; i++)
        if (!strcmp(f->cnt[i].device, "d1") && f->cnt[i].subbuckets > subs)
            subs = f->cnt[i].subbuckets;
    assert_int_equal(subs, 4);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    char *flushed = dump_rows(f->raw, f->nraw);
    assert_string_equal(acked, flushed); /* same rows, partitions and values */
    /* d1's sub-buckets show in the partitions (not only bucket starts) */
    int sub = 0;
    for (size_t i = 0; i < f->nack; i++)
        if (!strcmp(f->ack[i].device, "d1") && f->ack[i].part % 60000 != 0)
            sub = 1;
    assert_true(sub);
    /* the partition d1 was made hot in counts the sub-buckets it holds from then on,
     * not those in force at its start */
    int64_t made_hot = T0 + 59 * 47 * 60000LL + 1000;
    int found = 0;
    for (size_t i = 0; i < f->ncnt; i++)
        if (!strcmp(f->cnt[i].device, "d1") && f->cnt[i].bucket_start <= made_hot &&
            made_hot < f->cnt[i].bucket_end) {
            assert_true(f->cnt[i].bucket_start < made_hot); /* made hot inside it */
            assert_int_equal(f->cnt[i].subbuckets, 4);
            found = 1;
        }
    assert_true(found);
    free(acked);
    free(flushed);
    bdb_db_close(db);
    fakesink_free(f);
}

static void test_unconfirmed_write_fails_and_keeps(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1);
    f->ack_on = 1;
    bdb_db *db = open_db("fail", f);
    fake_now = T0;
    bdb_db *one[1] = {db};
    report(one, 1, 0, T0, -1, 1.0);
    f->fail_op = FS_ACK_PUT; /* every ack put fails from now */
    bdb_batch *b = bdb_batch_new();
    bdb_batch_begin(b, "d0", 2, T0 + 1000, 0);
    bdb_batch_metric(b, "temp", 4, 2.0);
    assert_int_equal(bdb_batch_end(b), 1);
    assert_int_equal(bdb_db_write(db, "t1", b), BDB_ERR_AGAIN);
    bdb_batch_free(b);
    f->fail_op = -1;
    /* the refused write is logged and applied (a retry writes the same value again),
     * and the flush puts it like the acknowledged one */
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    char *flushed = dump_rows(f->raw, f->nraw);
    int64_t part = T0; /* a fresh device's bucket starts at the hour */
    char want[256];
    snprintf(want, sizeof want,
             "t1 d0 hum %lld %lld 99.5\nt1 d0 temp %lld %lld 1\nt1 d0 temp %lld %lld 2\n",
             (long long)part, (long long)T0, (long long)part, (long long)T0, (long long)part,
             (long long)(T0 + 1000));
    assert_string_equal(flushed, want);
    free(flushed);
    bdb_db_close(db);
    /* a restart replays the refused write's record too */
    db = open_db("fail", f);
    bdb_db_close(db);
    fakesink_free(f);
}

static void test_ack_wal_sends_nothing_early(void **st)
{
    (void)st;
    fakesink *f = fakesink_new(1); /* ack_on 0: ack_begin gives no group */
    bdb_db *db = open_db("wal", f);
    feed(&db, 1, 0);
    assert_int_equal(f->nack, 0);
    assert_int_equal(f->ack_groups, 0);
    assert_int_equal(f->op_calls[FS_ACK_PUT], 0);
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_true(f->nraw > 0);
    bdb_db_close(db);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_acked_rows_equal_the_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unconfirmed_write_fails_and_keeps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ack_wal_sends_nothing_early, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
