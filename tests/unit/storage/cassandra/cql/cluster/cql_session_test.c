/* cql_session's routing plan (replicas of the local DC first in ring order, other
 * local nodes next, remote DCs only when the consistency allows), its retry rules
 * (idempotence decides after a write timeout or a lost connection) and the bounded
 * backoff. The requests themselves run against the real node in
 * tests/integration/test_cassandra_backend.py. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/cluster/cql_session.h"

#include <stdlib.h>
#include <string.h>

/* Five nodes, one token each: ring order by token is 3 (-300), 0 (-100), 4 (100),
 * 1 (300), 2 (500). Nodes 0, 1, 2 are in dc1; 3 and 4 in dc2. */
static cql_topology *five_nodes(void)
{
    static const int64_t toks[5] = {-100, 300, 500, -300, 100};
    static const char *dcs[5] = {"dc1", "dc1", "dc1", "dc2", "dc2"};
    cql_topology *t = calloc(1, sizeof *t);
    t->nodes = calloc(5, sizeof *t->nodes);
    t->nnodes = 5;
    for (size_t i = 0; i < 5; i++) {
        t->nodes[i].tokens = calloc(1, sizeof(int64_t));
        t->nodes[i].tokens[0] = toks[i];
        t->nodes[i].ntokens = 1;
        strcpy(t->nodes[i].dc, dcs[i]);
    }
    assert_int_equal(cql_topology_build_ring(t), BDB_OK);
    return t;
}

static void expect_plan(const uint32_t *got, size_t n, const uint32_t *want, size_t wn)
{
    assert_int_equal(n, wn);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i], want[i]);
}

static void test_plan_local_dc(void **state)
{
    (void)state;
    cql_topology *t = five_nodes();
    uint32_t out[8];
    /* token 150: owner is node 1 (300), then 2, then 3, 0, 4 clockwise */
    size_t n = cql_plan(t, 1, 150, "dc1", 0, out, 8);
    expect_plan(out, n, (const uint32_t[]){1, 2, 0}, 3);
    /* remote allowed: dc2 nodes follow in ring order from the token */
    n = cql_plan(t, 1, 150, "dc1", 1, out, 8);
    expect_plan(out, n, (const uint32_t[]){1, 2, 0, 3, 4}, 5);
    /* local dc2: its replicas first */
    n = cql_plan(t, 1, 150, "dc2", 0, out, 8);
    expect_plan(out, n, (const uint32_t[]){3, 4}, 2);
    /* wrap-around: token above every node's goes to the first ring entry (node 3) */
    n = cql_plan(t, 1, 600, "", 0, out, 8);
    expect_plan(out, n, (const uint32_t[]){3, 0, 4, 1, 2}, 5);
    /* no token: index order, local first */
    n = cql_plan(t, 0, 0, "dc2", 1, out, 8);
    expect_plan(out, n, (const uint32_t[]){3, 4, 0, 1, 2}, 5);
    /* max bounds the output */
    n = cql_plan(t, 1, 150, "dc1", 1, out, 2);
    expect_plan(out, n, (const uint32_t[]){1, 2}, 2);
    cql_topology_free(t);
}

static void test_plan_no_ring(void **state)
{
    (void)state;
    cql_topology t;
    memset(&t, 0, sizeof t);
    cql_node nodes[2];
    memset(nodes, 0, sizeof nodes);
    strcpy(nodes[0].dc, "b");
    strcpy(nodes[1].dc, "a");
    t.nodes = nodes;
    t.nnodes = 2;
    uint32_t out[4];
    size_t n = cql_plan(&t, 1, 42, "a", 0, out, 4);
    expect_plan(out, n, (const uint32_t[]){1}, 1);
    n = cql_plan(&t, 1, 42, "a", 1, out, 4);
    expect_plan(out, n, (const uint32_t[]){1, 0}, 2);
    t.nnodes = 0;
    assert_int_equal(cql_plan(&t, 1, 42, "a", 1, out, 4), 0);
}

static void test_retry_rules(void **state)
{
    (void)state;
    /* never applied or reads: always */
    for (int idem = 0; idem < 2; idem++) {
        assert_true(cql_should_retry(CQL_ERR_UNAVAILABLE, idem));
        assert_true(cql_should_retry(CQL_ERR_OVERLOADED, idem));
        assert_true(cql_should_retry(CQL_ERR_IS_BOOTSTRAPPING, idem));
        assert_true(cql_should_retry(CQL_ERR_READ_TIMEOUT, idem));
        /* bad statements: never */
        assert_false(cql_should_retry(CQL_ERR_SYNTAX, idem));
        assert_false(cql_should_retry(CQL_ERR_INVALID, idem));
        assert_false(cql_should_retry(CQL_ERR_UNAUTHORIZED, idem));
        assert_false(cql_should_retry(CQL_ERR_BAD_CREDENTIALS, idem));
        assert_false(cql_should_retry(CQL_ERR_ALREADY_EXISTS, idem));
        assert_false(cql_should_retry(CQL_ERR_CLIENT_CLOSED, idem));
    }
    /* may have been applied: only idempotent statements */
    const int32_t maybe[] = {CQL_ERR_WRITE_TIMEOUT, CQL_ERR_WRITE_FAILURE, CQL_ERR_CLIENT_TIMEOUT,
                             CQL_ERR_CLIENT_IO, CQL_ERR_SERVER};
    for (size_t i = 0; i < sizeof maybe / sizeof maybe[0]; i++) {
        assert_true(cql_should_retry(maybe[i], 1));
        assert_false(cql_should_retry(maybe[i], 0));
    }
}

static void test_backoff(void **state)
{
    (void)state;
    assert_int_equal(cql_backoff_ms(0, 20, 1000), 0);
    assert_int_equal(cql_backoff_ms(1, 20, 1000), 20);
    assert_int_equal(cql_backoff_ms(2, 20, 1000), 40);
    assert_int_equal(cql_backoff_ms(5, 20, 1000), 320);
    assert_int_equal(cql_backoff_ms(6, 20, 1000), 640);
    assert_int_equal(cql_backoff_ms(7, 20, 1000), 1000);
    assert_int_equal(cql_backoff_ms(1000, 20, 1000), 1000); /* no overflow */
}

static void test_open_errors(void **state)
{
    (void)state;
    char err[256];
    cql_session *s = NULL;
    cql_session_opts o;
    memset(&o, 0, sizeof o);
    assert_int_equal(cql_session_open(&o, &s, err, sizeof err), BDB_ERR_INVALID);
    assert_non_null(strstr(err, "contact point"));
    /* nothing listens on port 1 of loopback: refused at once */
    o.hosts = "127.0.0.1:1,127.0.0.1:1";
    o.connect_timeout_ms = 500;
    int rc = cql_session_open(&o, &s, err, sizeof err);
    assert_int_not_equal(rc, BDB_OK);
    assert_null(s);
    assert_non_null(strstr(err, "127.0.0.1:1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_local_dc), cmocka_unit_test(test_plan_no_ring),
        cmocka_unit_test(test_retry_rules),   cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
