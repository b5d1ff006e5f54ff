/* cql_topology: the token ring built from nodes' tokens finds the owner of a token
 * (first token >= it, wrapping past the largest) and the distinct replicas clockwise. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cql_topology *three_nodes(void)
{
    /* node 0: -100, 500; node 1: 0, 900; node 2: 200 (tokens given unsorted) */
    static const int64_t toks[3][2] = {{500, -100}, {900, 0}, {200, 0}};
    static const size_t counts[3] = {2, 2, 1};
    cql_topology *t = calloc(1, sizeof *t);
    t->nodes = calloc(3, sizeof *t->nodes);
    t->nnodes = 3;
    for (size_t i = 0; i < 3; i++) {
        t->nodes[i].tokens = calloc(2, sizeof(int64_t));
        memcpy(t->nodes[i].tokens, toks[i], counts[i] * sizeof(int64_t));
        t->nodes[i].ntokens = counts[i];
    }
    assert_int_equal(cql_topology_build_ring(t), BDB_OK);
    return t;
}

static void test_owner(void **state)
{
    (void)state;
    cql_topology *t = three_nodes();
    assert_int_equal(t->nring, 5);
    for (size_t i = 1; i < t->nring; i++)
        assert_true(t->ring[i - 1].token <= t->ring[i].token);
    assert_int_equal(cql_topology_owner(t, -100), 0); /* exact token */
    assert_int_equal(cql_topology_owner(t, -99), 1);  /* next is 0 */
    assert_int_equal(cql_topology_owner(t, 1), 2);    /* next is 200 */
    assert_int_equal(cql_topology_owner(t, 201), 0);  /* next is 500 */
    assert_int_equal(cql_topology_owner(t, 600), 1);  /* next is 900 */
    assert_int_equal(cql_topology_owner(t, 901), 0);  /* wraps to -100 */
    assert_int_equal(cql_topology_owner(t, INT64_MIN), 0);
    assert_int_equal(cql_topology_owner(t, INT64_MAX), 0);
    cql_topology_free(t);
}

static void test_replicas(void **state)
{
    (void)state;
    cql_topology *t = three_nodes();
    uint32_t r[4];
    /* From 1: 200 (node 2), 500 (node 0), 900 (node 1). */
    assert_int_equal(cql_topology_replicas(t, 1, 3, r), 3);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], 1);
    /* From 600: 900 (1), wrap -100 (0), 0 (1 again: skipped), 200 (2). */
    assert_int_equal(cql_topology_replicas(t, 600, 3, r), 3);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 0);
    assert_int_equal(r[2], 2);
    /* Never more than the nodes there are. */
    assert_int_equal(cql_topology_replicas(t, 600, 4, r), 3);
    assert_int_equal(cql_topology_replicas(t, 600, 1, r), 1);
    cql_topology_free(t);
    cql_topology empty = {0};
    assert_int_equal(cql_topology_owner(&empty, 5), -1);
    assert_int_equal(cql_topology_replicas(&empty, 5, 3, r), 0);
}

static void test_token_routing_end_to_end(void **state)
{
    (void)state;
    /* A partition key's token routes to a node: with node 0 owning (900, -100] and the
     * key 0x61 hashing to -8839064797231613815 (Cassandra's value), node 0 owns it. */
    cql_topology *t = three_nodes();
    int64_t tok = cql_murmur3_token("a", 1);
    assert_true(tok == -8839064797231613815LL);
    assert_int_equal(cql_topology_owner(t, tok), 0);
    cql_topology_free(t);
}

/* A topology of n nodes "127.0.0.<k>" in dc1 with the given tokens (one per node). */
static cql_topology *nodes_with(size_t n, const char *const *addrs, const int64_t *toks)
{
    cql_topology *t = calloc(1, sizeof *t);
    t->nodes = calloc(n ? n : 1, sizeof *t->nodes);
    t->nnodes = n;
    snprintf(t->cluster, sizeof t->cluster, "c");
    for (size_t i = 0; i < n; i++) {
        snprintf(t->nodes[i].addr, sizeof t->nodes[i].addr, "%s", addrs[i]);
        snprintf(t->nodes[i].dc, sizeof t->nodes[i].dc, "dc1");
        t->nodes[i].tokens = calloc(1, sizeof(int64_t));
        t->nodes[i].tokens[0] = toks[i];
        t->nodes[i].ntokens = 1;
    }
    assert_int_equal(cql_topology_build_ring(t), BDB_OK);
    return t;
}

static void test_merge_add_remove(void **state)
{
    (void)state;
    static const char *const a12[] = {"127.0.0.1", "127.0.0.2"};
    static const char *const a312[] = {"127.0.0.3", "127.0.0.1", "127.0.0.2"};
    static const char *const a32[] = {"127.0.0.3", "127.0.0.2"};
    static const int64_t t12[] = {-100, 100};
    static const int64_t t312[] = {0, -100, 100};
    static const int64_t t32[] = {0, 100};
    cql_topology *cur = nodes_with(2, a12, t12);
    /* Before: token 50 belongs to node 1 (127.0.0.2, token 100). */
    assert_int_equal(cql_topology_owner(cur, 50), 1);

    /* Node 3 joins with token 0, listed first by the fresh read: it is appended,
     * the known nodes keep their indexes, and it owns (-100, 0] now. */
    cql_topology *fresh = nodes_with(3, a312, t312);
    cql_topology *m = NULL;
    int changed = 0;
    assert_int_equal(cql_topology_merge(cur, fresh, 8, &m, &changed), BDB_OK);
    assert_true(changed);
    assert_int_equal(m->nnodes, 3);
    assert_string_equal(m->nodes[0].addr, "127.0.0.1");
    assert_string_equal(m->nodes[1].addr, "127.0.0.2");
    assert_string_equal(m->nodes[2].addr, "127.0.0.3");
    assert_string_equal(m->nodes[2].dc, "dc1");
    assert_int_equal(m->nring, 3);
    assert_int_equal(cql_topology_owner(m, -50), 2);
    assert_int_equal(cql_topology_owner(m, 50), 1);
    assert_int_equal(cql_topology_owner(m, 101), 0); /* wraps to -100 */
    uint32_t r[3];
    assert_int_equal(cql_topology_replicas(m, -50, 3, r), 3);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[1], 1);
    assert_int_equal(r[2], 0);
    /* The merge copied: fresh can go, cur is untouched (readers may still use it). */
    cql_topology_free(fresh);
    assert_int_equal(cur->nnodes, 2);
    assert_int_equal(cql_topology_owner(cur, -50), 1);

    /* The same again: nothing changed. */
    fresh = nodes_with(3, a312, t312);
    cql_topology *m2 = NULL;
    assert_int_equal(cql_topology_merge(m, fresh, 8, &m2, &changed), BDB_OK);
    assert_false(changed);
    cql_topology_free(m2);
    cql_topology_free(fresh);

    /* Node 1 (127.0.0.1) removed: it keeps index 0 as removed, without tokens; the
     * ring has the two others only, so -100's range goes to the next token. */
    fresh = nodes_with(2, a32, t32);
    assert_int_equal(cql_topology_merge(m, fresh, 8, &m2, &changed), BDB_OK);
    assert_true(changed);
    assert_int_equal(m2->nnodes, 3);
    assert_true(m2->nodes[0].removed);
    assert_int_equal(m2->nodes[0].ntokens, 0);
    assert_false(m2->nodes[1].removed);
    assert_int_equal(m2->nring, 2);
    assert_int_equal(cql_topology_owner(m2, -150), 2);
    assert_int_equal(cql_topology_owner(m2, 101), 2);
    assert_int_equal(cql_topology_replicas(m2, 50, 3, r), 2);
    cql_topology_free(fresh);

    /* It comes back: same index, not removed, its token again. */
    fresh = nodes_with(3, a312, t312);
    cql_topology *m3 = NULL;
    assert_int_equal(cql_topology_merge(m2, fresh, 8, &m3, &changed), BDB_OK);
    assert_true(changed);
    assert_false(m3->nodes[0].removed);
    assert_int_equal(cql_topology_owner(m3, -150), 0);
    cql_topology_free(fresh);

    /* A moved token is a change too. */
    static const int64_t moved[] = {0, -100, 150};
    fresh = nodes_with(3, a312, moved);
    cql_topology *m4 = NULL;
    assert_int_equal(cql_topology_merge(m3, fresh, 8, &m4, &changed), BDB_OK);
    assert_true(changed);
    assert_int_equal(cql_topology_owner(m4, 120), 1);
    cql_topology_free(fresh);

    /* A node listed without tokens yet (still joining) is not added. */
    static const char *const a3124[] = {"127.0.0.3", "127.0.0.1", "127.0.0.2", "127.0.0.4"};
    static const int64_t t3124[] = {0, -100, 150, 400};
    fresh = nodes_with(4, a3124, t3124);
    free(fresh->nodes[3].tokens);
    fresh->nodes[3].tokens = NULL;
    fresh->nodes[3].ntokens = 0;
    cql_topology *m6 = NULL;
    assert_int_equal(cql_topology_merge(m4, fresh, 8, &m6, &changed), BDB_OK);
    assert_false(changed);
    assert_int_equal(m6->nnodes, 3);
    cql_topology_free(m6);
    cql_topology_free(fresh);

    /* More nodes than the session can hold: refused, nothing built. */
    fresh = nodes_with(3, a312, t312);
    cql_topology *m5 = (cql_topology *)1;
    assert_int_equal(cql_topology_merge(cur, fresh, 2, &m5, &changed), BDB_ERR_LIMIT);
    assert_null(m5);
    assert_false(changed);
    cql_topology_free(fresh);

    assert_int_equal(cql_topology_find(m4, "127.0.0.3"), 2);
    assert_int_equal(cql_topology_find(m4, "127.0.0.9"), -1);
    cql_topology_free(m4);
    cql_topology_free(m3);
    cql_topology_free(m2);
    cql_topology_free(m);
    cql_topology_free(cur);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_token_routing_end_to_end),
        cmocka_unit_test(test_merge_add_remove),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
