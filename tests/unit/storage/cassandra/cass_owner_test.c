/* cass_owner: the pure parts of the older-copy rail (docs/CASSANDRA.md, "Older copies
 * of the data directory"): the rule between the data directory's flush generation and
 * the keyspace's, and the file 'cluster' in both its versions. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/cassandra/cass_owner.h"

#define ID "0123456789abcdef0123456789abcdef"
#define NODE "fedcba9876543210fedcba9876543210"

static void test_rule(void **st)
{
    (void)st;
    /* the same directory, a first start and a directory from before generations */
    assert_int_equal(cass_owner_gen_check(0, 0), CASS_GEN_OK);
    assert_int_equal(cass_owner_gen_check(7, 7), CASS_GEN_OK);
    /* the file is written before the keyspace: a crash between them leaves it ahead */
    assert_int_equal(cass_owner_gen_check(8, 7), CASS_GEN_OK);
    assert_int_equal(cass_owner_gen_check(1, 0), CASS_GEN_OK);
    /* any directory behind the keyspace is an older copy, one flush behind too */
    assert_int_equal(cass_owner_gen_check(6, 7), CASS_GEN_OLDER);
    assert_int_equal(cass_owner_gen_check(0, 1), CASS_GEN_OLDER);
    assert_int_equal(cass_owner_gen_check(1, INT64_MAX), CASS_GEN_OLDER);
    /* two or more ahead: the keyspace lost writes (warned, not refused) */
    assert_int_equal(cass_owner_gen_check(9, 7), CASS_GEN_AHEAD);
    assert_int_equal(cass_owner_gen_check(INT64_MAX, 0), CASS_GEN_AHEAD);
}

static int parse(const char *text, int64_t *gen)
{
    char ks[64], id[33], node[33];
    int rc = cass_owner_file_parse(text, ks, id, node, gen);
    if (rc == 1) {
        assert_string_equal(ks, "bdb");
        assert_string_equal(id, ID);
        assert_string_equal(node, NODE);
    }
    return rc;
}

static void test_file(void **st)
{
    (void)st;
    int64_t g = 99;
    /* version 1, as older versions wrote it: no generation */
    assert_int_equal(parse("bucketdb-cluster 1\nkeyspace bdb\nid " ID "\nnode " NODE "\n", &g), 1);
    assert_int_equal(g, -1);
    /* version 2 */
    assert_int_equal(
        parse("bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 42\n", &g),
        1);
    assert_int_equal(g, 42);
    assert_int_equal(
        parse("bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 0\n", &g), 1);
    assert_int_equal(g, 0);
    assert_int_equal(parse("bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE
                           "\ngeneration 9223372036854775807\n",
                           &g),
                     1);
    assert_int_equal(g, INT64_MAX);
    /* version 1 with the line a downgrade keeps (an older version reads four lines) */
    assert_int_equal(
        parse("bucketdb-cluster 1\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 5\n", &g), 1);
    assert_int_equal(g, 5);
    /* damaged: version 2 without its line, a bad or out-of-range number, trailing text,
     * an unknown version, a short id */
    const char *bad[] = {
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration -1\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration  1\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 1x\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE
        "\ngeneration 9223372036854775808\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 1\nmore\n",
        "bucketdb-cluster 2\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 1",
        "bucketdb-cluster 3\nkeyspace bdb\nid " ID "\nnode " NODE "\ngeneration 1\n",
        "bucketdb-cluster 1\nkeyspace bdb\nid 0123\nnode " NODE "\n",
        "bucketdb-cluster 1\nkeyspace bdb\nid " ID "\nnode " NODE "0\n",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (parse(bad[i], &g) != -1)
            fail_msg("parsed: %s", bad[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
