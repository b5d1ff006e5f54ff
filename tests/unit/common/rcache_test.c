/* rcache: hits and misses, the memory limit and least-recently-used eviction, values
 * held by a reader across their eviction (ASan would see a use after free), a value
 * the limit cannot hold, a repeated key, a cache of size 0, and allocation failures
 * (the cache forgets, never fails the caller). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/rcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *val(size_t n, int fill)
{
    void *p = malloc(n);
    assert_non_null(p);
    memset(p, fill, n);
    return p;
}

static void put_s(bdb_rcache *c, const char *k, size_t n, int fill)
{
    bdb_rcache_put(c, k, strlen(k), val(n, fill), n);
}

static int has(bdb_rcache *c, const char *k)
{
    size_t len;
    bdb_rcache_ent *ref;
    const void *v = bdb_rcache_get(c, k, strlen(k), &len, &ref);
    bdb_rcache_release(c, ref);
    return v != NULL;
}

static void test_hit_miss_counts(void **st)
{
    (void)st;
    bdb_rcache *c = bdb_rcache_new(1 << 20);
    assert_non_null(c);
    size_t len = 0;
    bdb_rcache_ent *ref;
    assert_null(bdb_rcache_get(c, "a", 1, &len, &ref));
    put_s(c, "a", 100, 7);
    const unsigned char *v = bdb_rcache_get(c, "a", 1, &len, &ref);
    assert_non_null(v);
    assert_int_equal(len, 100);
    assert_int_equal(v[0], 7);
    assert_int_equal(v[99], 7);
    bdb_rcache_release(c, ref);
    /* a second put of a key keeps the first value */
    put_s(c, "a", 50, 9);
    v = bdb_rcache_get(c, "a", 1, &len, &ref);
    assert_int_equal(len, 100);
    assert_int_equal(v[0], 7);
    bdb_rcache_release(c, ref);
    /* keys are bytes: "ab" is not "a" */
    assert_false(has(c, "ab"));
    bdb_rcache_stats s;
    bdb_rcache_stats_get(c, &s);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.entries, 1);
    assert_int_equal(s.bytes, 100 + 1 + RCACHE_ENTRY_OVERHEAD);
    assert_int_equal(s.max_bytes, 1 << 20);
    assert_int_equal(s.evictions, 0);
    bdb_rcache_free(c);
}

static void test_limit_evicts_least_recent(void **st)
{
    (void)st;
    const size_t one = 1000 + 2 + RCACHE_ENTRY_OVERHEAD;
    bdb_rcache *c = bdb_rcache_new(3 * one);
    put_s(c, "k1", 1000, 1);
    put_s(c, "k2", 1000, 2);
    put_s(c, "k3", 1000, 3);
    assert_true(has(c, "k1")); /* k1 used: k2 is now the least recent */
    put_s(c, "k4", 1000, 4);
    assert_false(has(c, "k2"));
    assert_true(has(c, "k1"));
    assert_true(has(c, "k3"));
    assert_true(has(c, "k4"));
    bdb_rcache_stats s;
    bdb_rcache_stats_get(c, &s);
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.entries, 3);
    assert_true(s.bytes <= 3 * one);
    /* larger than the whole limit: not kept, nothing evicted for it */
    put_s(c, "big", 3 * one, 5);
    assert_false(has(c, "big"));
    bdb_rcache_stats_get(c, &s);
    assert_int_equal(s.entries, 3);
    /* a value held by a reader outlives its eviction */
    size_t len;
    bdb_rcache_ent *ref;
    const unsigned char *v = bdb_rcache_get(c, "k3", 2, &len, &ref);
    assert_non_null(v);
    for (int i = 0; i < 3; i++) {
        char k[8] = "n0";
        k[1] = (char)('0' + i);
        put_s(c, k, 1000, 6);
    }
    assert_false(has(c, "k3"));
    assert_int_equal(v[0], 3);
    assert_int_equal(v[999], 3);
    bdb_rcache_release(c, ref);
    /* many keys: the table grows, every one found */
    bdb_rcache *d = bdb_rcache_new(1 << 24);
    char k[16];
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "key%d", i);
        put_s(d, k, 8, i & 0xff);
    }
    for (int i = 0; i < 5000; i++) {
        snprintf(k, sizeof k, "key%d", i);
        v = bdb_rcache_get(d, k, strlen(k), &len, &ref);
        assert_non_null(v);
        assert_int_equal(v[0], i & 0xff);
        bdb_rcache_release(d, ref);
    }
    bdb_rcache_free(d);
    bdb_rcache_free(c);
}

static void test_size_zero_and_nomem(void **st)
{
    (void)st;
    bdb_rcache *c = bdb_rcache_new(0);
    assert_non_null(c);
    put_s(c, "a", 1, 1);
    assert_false(has(c, "a"));
    bdb_rcache_free(c);
    bdb_rcache_free(NULL);
    c = bdb_rcache_new(1 << 20);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1); /* the entry cannot be made: forgotten */
    put_s(c, "a", 10, 1);
    bdb_alloc_fail_disarm();
    assert_false(has(c, "a"));
    put_s(c, "a", 10, 1);
    assert_true(has(c, "a"));
    bdb_rcache_free(c);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_NTH, 2); /* the table */
    assert_null(bdb_rcache_new(1 << 20));
    bdb_alloc_fail_disarm();
}

/* A key is worth keeping the second time it misses; once many other keys took the
 * slots (hashes are fixed: the outcome is too), it starts over. */
static void test_admit_second_miss(void **st)
{
    (void)st;
    bdb_rcache *c = bdb_rcache_new(1 << 20);
    assert_int_equal(bdb_rcache_admit(c, "a", 1), 0);
    assert_int_equal(bdb_rcache_admit(c, "a", 1), 1);
    assert_int_equal(bdb_rcache_admit(c, "a", 1), 1);
    assert_int_equal(bdb_rcache_admit(c, "b", 1), 0);
    char k[16];
    for (int i = 0; i < 16 * RCACHE_SEEN_SLOTS; i++) {
        snprintf(k, sizeof k, "x%d", i);
        bdb_rcache_admit(c, k, strlen(k));
    }
    assert_int_equal(bdb_rcache_admit(c, "a", 1), 0);
    bdb_rcache_free(c);
}

/* put_ref: the caller reads on what it put (a reference that outlives eviction), a
 * second value of a key is freed with its own function and the first one handed back,
 * and a value the limit cannot hold stays the caller's. */
static int freed;
static void count_free(void *p)
{
    freed++;
    free(p);
}

static void test_put_ref(void **st)
{
    (void)st;
    const size_t one = 100 + 1 + RCACHE_ENTRY_OVERHEAD;
    bdb_rcache *c = bdb_rcache_new(one);
    freed = 0;
    bdb_rcache_ent *r1, *r2;
    void *a = val(100, 1);
    const unsigned char *v = bdb_rcache_put_ref(c, "a", 1, a, 100, count_free, &r1);
    assert_ptr_equal(v, a);
    v = bdb_rcache_put_ref(c, "a", 1, val(100, 2), 100, count_free, &r2);
    assert_ptr_equal(v, a); /* the first one's, and the second freed */
    assert_int_equal(freed, 1);
    bdb_rcache_release(c, r2);
    put_s(c, "b", 100, 3); /* evicts "a", which r1 still holds */
    assert_false(has(c, "a"));
    assert_int_equal(freed, 1);
    assert_int_equal(v[99], 1);
    bdb_rcache_release(c, r1);
    assert_int_equal(freed, 2);
    void *big = val(200, 4);
    assert_null(bdb_rcache_put_ref(c, "c", 1, big, 200, count_free, &r1));
    assert_int_equal(freed, 2);
    free(big);
    bdb_rcache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss_counts),
        cmocka_unit_test(test_limit_evicts_least_recent),
        cmocka_unit_test(test_size_zero_and_nomem),
        cmocka_unit_test(test_admit_second_miss),
        cmocka_unit_test(test_put_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
