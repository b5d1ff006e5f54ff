/* admin_token: the file alone without a store; with one that keeps documents, the
 * store's hash wins, a new directory makes no file, another file's token is refused,
 * a store without the document gets the directory's, an unreachable store leaves the
 * directory's token, and a document that is not one stops the start. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "server/admin_token.h"
#include "storage/fakesink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir_a[64], dir_b[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir_a, "/tmp/bdb-admtok-XXXXXX");
    strcpy(dir_b, "/tmp/bdb-admtok-XXXXXX");
    return mkdtemp(dir_a) && mkdtemp(dir_b) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(dir_a);
    tu_rm_rf(dir_b);
    return 0;
}

static int has_file(const char *dir)
{
    char p[128];
    snprintf(p, sizeof p, "%s/token", dir);
    return access(p, F_OK) == 0;
}

static void write_file(const char *dir, const char *tok)
{
    char p[128];
    snprintf(p, sizeof p, "%s/token", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", tok);
    fclose(f);
}

static int open_tok(const char *dir, fakesink *f, char tok[BDB_ADMIN_TOKEN_MAX + 1],
                    uint8_t h[BDB_HASH_BYTES])
{
    char err[300];
    return bdb_admin_token_open(dir, f ? &f->base : NULL, tok, h, err, sizeof err);
}

static void test_file_alone(void **state)
{
    (void)state;
    char t1[BDB_ADMIN_TOKEN_MAX + 1], t2[BDB_ADMIN_TOKEN_MAX + 1];
    uint8_t h1[BDB_HASH_BYTES], h2[BDB_HASH_BYTES], want[BDB_HASH_BYTES];
    assert_int_equal(open_tok(dir_a, NULL, t1, h1), BDB_OK);
    assert_int_equal(strlen(t1), BDB_ADMIN_TOKEN_LEN);
    bdb_token_hash(t1, strlen(t1), want);
    assert_memory_equal(h1, want, BDB_HASH_BYTES);
    assert_int_equal(open_tok(dir_a, NULL, t2, h2), BDB_OK); /* the same on a restart */
    assert_string_equal(t1, t2);
    write_file(dir_a, "abc"); /* a file cut short: a new token replaces it */
    assert_int_equal(open_tok(dir_a, NULL, t2, h2), BDB_OK);
    assert_int_equal(strlen(t2), BDB_ADMIN_TOKEN_LEN);
    assert_string_not_equal(t1, t2);
}

static void test_store_wins(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    char ta[BDB_ADMIN_TOKEN_MAX + 1], tb[BDB_ADMIN_TOKEN_MAX + 1];
    uint8_t ha[BDB_HASH_BYTES], hb[BDB_HASH_BYTES];
    /* the first directory's token goes up */
    assert_int_equal(open_tok(dir_a, f, ta, ha), BDB_OK);
    assert_int_equal(strlen(ta), BDB_ADMIN_TOKEN_LEN);
    assert_int_equal(f->ndoc, 1);
    assert_string_equal(f->doc[0].key, BDB_ADMIN_DOC_KEY);
    /* a new directory: the store's hash, no token here, no file made */
    assert_int_equal(open_tok(dir_b, f, tb, hb), BDB_OK);
    assert_string_equal(tb, "");
    assert_memory_equal(ha, hb, BDB_HASH_BYTES);
    assert_false(has_file(dir_b));
    /* a directory with another token: refused, its file kept */
    write_file(dir_b, "0123456789abcdef0123456789abcdef");
    assert_int_equal(open_tok(dir_b, f, tb, hb), BDB_OK);
    assert_string_equal(tb, "");
    assert_memory_equal(ha, hb, BDB_HASH_BYTES);
    assert_true(has_file(dir_b));
    /* a file cut short (under 16 characters) is no token: none here either */
    write_file(dir_b, "abc");
    assert_int_equal(open_tok(dir_b, f, tb, hb), BDB_OK);
    assert_string_equal(tb, "");
    assert_memory_equal(ha, hb, BDB_HASH_BYTES);
    /* the first directory still holds the token in force and prints it */
    assert_int_equal(open_tok(dir_a, f, tb, hb), BDB_OK);
    assert_string_equal(ta, tb);
    fakesink_free(f);
}

static void test_unreachable_and_bad_document(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    char t[BDB_ADMIN_TOKEN_MAX + 1];
    uint8_t h[BDB_HASH_BYTES];
    f->fail_op = FS_DOC_GET;
    f->fail_rc = BDB_ERR_AGAIN;
    assert_int_equal(open_tok(dir_a, f, t, h), BDB_OK); /* the directory's, made */
    assert_int_equal(strlen(t), BDB_ADMIN_TOKEN_LEN);
    assert_int_equal(f->ndoc, 0);
    f->fail_op = -1;
    /* the next start reaches the store and stores it */
    char t2[BDB_ADMIN_TOKEN_MAX + 1];
    assert_int_equal(open_tok(dir_a, f, t2, h), BDB_OK);
    assert_string_equal(t, t2);
    assert_int_equal(f->ndoc, 1);
    /* a document that is not one stops the start */
    assert_int_equal(f->doc[0].len > 10, 1);
    ((char *)f->doc[0].data)[10] ^= 1;
    assert_int_equal(open_tok(dir_b, f, t2, h), BDB_ERR_CORRUPT);
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file_alone, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreachable_and_bad_document, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
