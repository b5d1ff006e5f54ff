/* cql_topology: the token ring built from nodes' tokens finds the owner of a token
 * (first token >= it, wrapping past the largest) and the distinct replicas clockwise. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql_token.h"
#include "storage/cassandra/cql_topology.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owner),
        cmocka_unit_test(test_replicas),
        cmocka_unit_test(test_token_routing_end_to_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
