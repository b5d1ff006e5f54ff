/* db_consumer: the registry and the calls of the phases, with recording fake consumers
 * on a bare db (the engine's own consumers are covered through the engine's tests).
 *
 * Covered: phases run in registration order and close in reverse; each consumer gets
 * its own zeroed, 8-aligned reservation, batch and device bytes at distinct offsets;
 * a failing reserve or apply stops the later consumers and returns its error; freeze
 * and maintain call every consumer and return the first error; flush threads the
 * status through every consumer; the registry refuses a ninth consumer and sizes past
 * its bound; slot and device lookups of an unregistered consumer give NULL. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/embedded/core/db_consumer.h"

#include <stdlib.h>
#include <string.h>

static char trace[256];
static int fail_reserve_of = -1, fail_apply_of = -1, fail_maint_of = -1;

static void note(char c, int who)
{
    size_t n = strlen(trace);
    if (n + 2 < sizeof trace) {
        trace[n] = c;
        trace[n + 1] = (char)('0' + who);
        trace[n + 2] = 0;
    }
}

/* Consumer k's functions: which one is called is told by the table it was reached
 * through, so each fake carries its index in its name ("0", "1", ...). */
static int who_of(bdb_db *db, const db_consumer *c)
{
    for (uint32_t i = 0; i < db->cons.n; i++)
        if (db->cons.c[i] == c)
            return (int)i;
    return -1;
}

#define FAKE(K)                                                                                    \
    static const db_consumer fake##K;                                                              \
    static int reserve##K(bdb_db *db, device *d, const bdb_report *r, series *const *ser,          \
                          void *resv, void *batch)                                                 \
    {                                                                                              \
        (void)d, (void)r, (void)ser;                                                               \
        note('r', K);                                                                              \
        /* zeroed on entry; marked so that overlapping slots would show */                         \
        assert_int_equal(*(uint64_t *)resv, 0);                                                    \
        assert_int_equal((uintptr_t)resv % 8, 0);                                                  \
        *(uint64_t *)resv = 100 + K;                                                               \
        *(uint64_t *)batch += 1000 + K;                                                            \
        return who_of(db, &fake##K) == fail_reserve_of ? BDB_ERR_NOMEM : BDB_OK;                   \
    }                                                                                              \
    static int apply##K(bdb_db *db, device *d, const db_apply *a, void *resv)                      \
    {                                                                                              \
        (void)d, (void)a;                                                                          \
        note('a', K);                                                                              \
        if (resv)                                                                                  \
            assert_int_equal(*(uint64_t *)resv, 100 + K);                                          \
        return who_of(db, &fake##K) == fail_apply_of ? BDB_ERR_NOMEM : BDB_OK;                     \
    }                                                                                              \
    static void release##K(bdb_db *db, device *d, void *resv)                                      \
    {                                                                                              \
        (void)db, (void)d;                                                                         \
        note('x', K);                                                                              \
        *(uint64_t *)resv = 0;                                                                     \
    }                                                                                              \
    static int flush##K(bdb_db *db, series *const *v, size_t n, uint64_t sealed, int rc)           \
    {                                                                                              \
        (void)db, (void)v, (void)n, (void)sealed;                                                  \
        note('f', K);                                                                              \
        return rc == BDB_OK && K == 1 ? BDB_ERR_IO : rc;                                           \
    }                                                                                              \
    static int maintain##K(bdb_db *db)                                                             \
    {                                                                                              \
        note('m', K);                                                                              \
        return who_of(db, &fake##K) == fail_maint_of ? BDB_ERR_IO + K : BDB_OK;                    \
    }                                                                                              \
    static void close##K(bdb_db *db)                                                               \
    {                                                                                              \
        (void)db;                                                                                  \
        note('c', K);                                                                              \
    }                                                                                              \
    static const db_consumer fake##K = {                                                           \
        .name = #K,                                                                                \
        .resv_size = 8,                                                                            \
        .batch_size = 8,                                                                           \
        .dev_size = 4 + K,                                                                         \
        .reserve = reserve##K,                                                                     \
        .apply = apply##K,                                                                         \
        .release = release##K,                                                                     \
        .flush = flush##K,                                                                         \
        .maintain = maintain##K,                                                                   \
        .close = close##K,                                                                         \
    };

FAKE(0)
FAKE(1)
FAKE(2)

static const db_consumer bare = {.name = "bare"}; /* no phase at all */

static bdb_db *fresh(void)
{
    bdb_db *db = calloc(1, sizeof *db);
    assert_non_null(db);
    trace[0] = 0;
    fail_reserve_of = fail_apply_of = fail_maint_of = -1;
    assert_int_equal(db_consumer_register(db, &fake0), BDB_OK);
    assert_int_equal(db_consumer_register(db, &bare), BDB_OK);
    assert_int_equal(db_consumer_register(db, &fake1), BDB_OK);
    assert_int_equal(db_consumer_register(db, &fake2), BDB_OK);
    return db;
}

static void test_order_and_slots(void **st)
{
    (void)st;
    bdb_db *db = fresh();
    assert_int_equal(db->cons.resv_total, 24);
    assert_int_equal(db->cons.batch_total, 24);
    assert_int_equal(db->cons.dev_total, 8 + 8 + 8); /* 4, 5, 6 bytes, each 8-aligned */
    uint64_t resv[3] = {0}, batch[3] = {0};
    device *d = calloc(1, sizeof *d + db->cons.dev_total);
    assert_non_null(d);
    bdb_report r;
    memset(&r, 0, sizeof r);
    assert_int_equal(db_consumers_reserve(db, d, &r, NULL, resv, batch), BDB_OK);
    assert_int_equal(resv[0], 100);
    assert_int_equal(resv[1], 101);
    assert_int_equal(resv[2], 102);
    assert_int_equal(batch[0] + batch[1] + batch[2], 3003);
    db_apply a;
    memset(&a, 0, sizeof a);
    assert_int_equal(db_consumers_apply(db, d, &a, resv), BDB_OK);
    assert_int_equal(db_consumers_apply(db, d, &a, NULL), BDB_OK); /* replay: no resv */
    db_consumers_release(db, d, resv);
    assert_string_equal(trace, "r0r1r2a0a1a2a0a1a2x0x1x2");
    /* device bytes: distinct, inside the device's extension */
    char *e0 = db_consumer_dev(db, d, &fake0), *e1 = db_consumer_dev(db, d, &fake1),
         *e2 = db_consumer_dev(db, d, &fake2);
    assert_ptr_equal(e0, (char *)d->ext);
    assert_ptr_equal(e1, (char *)d->ext + 8);
    assert_ptr_equal(e2, (char *)d->ext + 16);
    assert_null(db_consumer_dev(db, d, &(db_consumer){.name = "other"}));
    assert_null(db_consumer_slot(db, &(db_consumer){.name = "other"}));
    *db_consumer_slot(db, &fake1) = d;
    assert_ptr_equal(db->cons.state[2], d);
    trace[0] = 0;
    /* flush threads the status: fake1 fails, fake2 sees the failure */
    assert_int_equal(db_consumers_flush(db, NULL, 0, 7, BDB_OK), BDB_ERR_IO);
    db_consumers_close(db);
    assert_string_equal(trace, "f0f1f2c2c1c0");
    free(d);
    free(db);
}

static void test_errors(void **st)
{
    (void)st;
    bdb_db *db = fresh();
    uint64_t resv[3] = {0}, batch[3] = {0};
    device *d = calloc(1, sizeof *d + db->cons.dev_total);
    bdb_report r;
    memset(&r, 0, sizeof r);
    fail_reserve_of = 2; /* fake1 (index 2): fake2 is not asked */
    assert_int_equal(db_consumers_reserve(db, d, &r, NULL, resv, batch), BDB_ERR_NOMEM);
    assert_string_equal(trace, "r0r1");
    trace[0] = 0;
    fail_apply_of = 0;
    db_apply a;
    memset(&a, 0, sizeof a);
    assert_int_equal(db_consumers_apply(db, d, &a, NULL), BDB_ERR_NOMEM);
    assert_string_equal(trace, "a0");
    trace[0] = 0;
    fail_maint_of = 2; /* every consumer maintains; the first error is returned */
    assert_int_equal(db_consumers_maintain(db), BDB_ERR_IO + 1);
    assert_string_equal(trace, "m0m1m2");
    /* no consumer has these phases: nothing to do, no error */
    assert_int_equal(db_consumers_freeze(db), BDB_OK);
    assert_int_equal(db_consumers_commit(db, 1), BDB_OK);
    assert_int_equal(db_consumers_open(db), BDB_OK);
    assert_int_equal(db_consumers_purge_tenant(db, "t"), BDB_OK);
    free(d);
    free(db);
}

static void test_limits(void **st)
{
    (void)st;
    bdb_db *db = calloc(1, sizeof *db);
    assert_non_null(db);
    static const db_consumer big = {.name = "big", .resv_size = 4097};
    assert_int_equal(db_consumer_register(db, &big), BDB_ERR_INVALID);
    assert_int_equal(db->cons.n, 0);
    for (int i = 0; i < DB_MAX_CONSUMERS; i++)
        assert_int_equal(db_consumer_register(db, &bare), BDB_OK);
    assert_int_equal(db_consumer_register(db, &bare), BDB_ERR_INVALID);
    assert_int_equal(db->cons.n, DB_MAX_CONSUMERS);
    free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_slots),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
