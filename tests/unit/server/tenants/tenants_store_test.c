/* tenants_store: the registry kept in a store (bdb_tenants_open_store) over the fake
 * sink's documents: a change goes to the store and then the file, a change the store
 * refuses changes nothing anywhere (create, update, rotate, delete); a new directory
 * gets the store's registry (the same tokens, settings and deleted names, the file
 * rewritten); a file and no document: stored up; the store unreachable at open: the
 * file, and the store's registry adopted before the first change; no file and the
 * store unreachable: refused unless offline_start; a damaged document refused. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "server/tenants/tenants.h"
#include "storage/fakesink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir_a[64], dir_b[64];

static int setup(void **state)
{
    (void)state;
    strcpy(dir_a, "/tmp/bdb-tnstore-XXXXXX");
    strcpy(dir_b, "/tmp/bdb-tnstore-XXXXXX");
    return mkdtemp(dir_a) && mkdtemp(dir_b) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(dir_a);
    tu_rm_rf(dir_b);
    return 0;
}

/* The file of dir ("" when there is none); the caller frees. */
static char *file_of(const char *dir, size_t *len)
{
    char path[128];
    snprintf(path, sizeof path, "%s/tenants", dir);
    char *buf = calloc(1, 1 << 20);
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        *len = fread(buf, 1, (1 << 20) - 1, f);
        fclose(f);
    }
    return buf;
}

/* The fake's document "tenants" ("" when none). */
static const char *doc_of(fakesink *f, size_t *len)
{
    for (size_t k = 0; k < f->ndoc; k++)
        if (!strcmp(f->doc[k].key, "tenants")) {
            *len = f->doc[k].len;
            return f->doc[k].data;
        }
    *len = 0;
    return "";
}

static bdb_tenants *open_on(const char *dir, fakesink *f, int offline)
{
    bdb_tenants *r = NULL;
    char err[600];
    int rc = bdb_tenants_open_store(dir, &f->base, offline, &r, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("open: %s (%s)", bdb_strerror(rc), err);
    return r;
}

static int token_works(bdb_tenants *r, const char *token, const char *want)
{
    uint8_t h[BDB_HASH_BYTES];
    char name[BDB_TENANT_NAME_MAX + 1];
    bdb_token_hash(token, strlen(token), h);
    return bdb_tenants_find_by_hash(r, h, name) && !strcmp(name, want);
}

/* The file and the document hold the same bytes. */
static void assert_same_copies(const char *dir, fakesink *f)
{
    size_t fl, dl;
    char *file = file_of(dir, &fl);
    const char *doc = doc_of(f, &dl);
    assert_true(fl > 0);
    assert_int_equal(fl, dl);
    assert_memory_equal(file, doc, fl);
    free(file);
}

static void test_store_first_and_new_directory(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_tenants *a = open_on(dir_a, f, 0);
    bdb_quotas q = {100, 0, 7, 0};
    char tok1[BDB_TOKEN_HEX + 1], tok2[BDB_TOKEN_HEX + 1], tok3[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create(a, "acme", &q, 3600000, 1000, tok1), BDB_OK);
    assert_int_equal(bdb_tenants_create(a, "globex", &q, 0, 1000, tok2), BDB_OK);
    assert_int_equal(bdb_tenants_create(a, "gone", &q, 0, 1000, tok3), BDB_OK);
    bdb_tenant_patch p = {0};
    p.has_hot_threshold = 1;
    p.hot.threshold = 500;
    p.has_max_devices = 1;
    p.quotas.max_devices = 9;
    assert_int_equal(bdb_tenants_update(a, "acme", &p, NULL), BDB_OK);
    assert_int_equal(bdb_tenants_delete(a, "gone", 2000), BDB_OK);
    /* a create with every setting is one change: one document written, never a
     * tenant without its settings */
    bdb_tenant_patch cp = {0};
    cp.has_hot_threshold = 1;
    cp.hot.threshold = 900;
    cp.has_device_rule = 1;
    strcpy(cp.device_rule, "device,host");
    uint64_t puts = f->op_calls[FS_DOC_PUT];
    char tok4[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create_with(a, "initech", &cp, 1500, tok4), BDB_OK);
    assert_int_equal(f->op_calls[FS_DOC_PUT], puts + 1);
    size_t dl0;
    assert_non_null(strstr(doc_of(f, &dl0), "hot_threshold=900 device_rule=device,host"));
    assert_same_copies(dir_a, f);
    size_t before_len;
    char *before = file_of(dir_a, &before_len);

    /* Every change refused by the store: nothing changes in memory, file or store. */
    f->fail_op = FS_DOC_PUT;
    f->fail_rc = BDB_ERR_IO;
    char t[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create(a, "hooli", &q, 0, 3000, t), BDB_ERR_AGAIN);
    assert_int_equal(t[0], '\0');
    p.quotas.max_devices = 1;
    assert_int_equal(bdb_tenants_update(a, "acme", &p, NULL), BDB_ERR_AGAIN);
    assert_int_equal(bdb_tenants_rotate(a, "acme", 3000, t), BDB_ERR_AGAIN);
    assert_int_equal(bdb_tenants_delete(a, "globex", 3000), BDB_ERR_AGAIN);
    f->fail_op = -1;
    bdb_tenant_info ti;
    assert_int_equal(bdb_tenants_get(a, "hooli", &ti), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_get(a, "acme", &ti), BDB_OK);
    assert_int_equal(ti.quotas.max_devices, 9);
    assert_int_equal(bdb_tenants_get(a, "globex", &ti), BDB_OK);
    assert_true(token_works(a, tok1, "acme"));
    size_t now_len;
    char *now = file_of(dir_a, &now_len);
    assert_int_equal(now_len, before_len);
    assert_memory_equal(now, before, now_len);
    free(now);
    assert_same_copies(dir_a, f);
    bdb_tenants_close(a);

    /* A new, empty directory on the same store: the same registry. */
    bdb_tenants *b = open_on(dir_b, f, 0);
    assert_int_equal(bdb_tenants_count(b), 3);
    assert_true(token_works(b, tok1, "acme"));
    assert_true(token_works(b, tok4, "initech"));
    assert_int_equal(bdb_tenants_get(b, "initech", &ti), BDB_OK);
    assert_int_equal(ti.hot.threshold, 900);
    assert_string_equal(ti.device_rule, "device,host");
    assert_true(token_works(b, tok2, "globex"));
    assert_false(token_works(b, tok3, "gone"));
    assert_int_equal(bdb_tenants_get(b, "acme", &ti), BDB_OK);
    assert_int_equal(ti.quotas.max_devices, 9);
    assert_int_equal(ti.quotas.writes_per_second, 100);
    assert_int_equal(ti.retention_ms, 3600000);
    assert_int_equal(ti.hot.threshold, 500);
    uint64_t gen;
    int64_t at;
    assert_true(bdb_tenants_deleted(b, "gone", &gen, &at));
    assert_int_equal(gen, 1);
    assert_int_equal(at, 2000);
    size_t bl;
    char *bfile = file_of(dir_b, &bl); /* rewritten from the store */
    assert_int_equal(bl, before_len);
    assert_memory_equal(bfile, before, bl);
    free(bfile);
    free(before);
    /* purge bookkeeping goes through the store too */
    char key[BDB_TENANT_KEY_MAX + 1];
    assert_int_equal(bdb_tenants_purge_next(b, key, sizeof key), 1);
    f->fail_op = FS_DOC_PUT;
    assert_int_equal(bdb_tenants_purge_done(b, key), BDB_ERR_AGAIN);
    f->fail_op = -1;
    assert_int_equal(bdb_tenants_purge_pending(b), 1);
    assert_int_equal(bdb_tenants_purge_done(b, key), BDB_OK);
    assert_int_equal(bdb_tenants_purge_pending(b), 0);
    assert_same_copies(dir_b, f);
    bdb_tenants_close(b);
    fakesink_free(f);
}

static void test_migration_and_unreachable(void **state)
{
    (void)state;
    /* A registry of the file alone (an existing deployment)... */
    bdb_tenants *r = NULL;
    char err[600];
    assert_int_equal(bdb_tenants_open(dir_a, &r, err, sizeof err), BDB_OK);
    bdb_quotas q = {0, 0, 0, 0};
    char tok[BDB_TOKEN_HEX + 1], tok2[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create(r, "old", &q, 0, 1000, tok), BDB_OK);
    bdb_tenants_close(r);
    /* ...cannot start on an unreachable store, but does on a reachable empty one, which
     * gets the file. */
    fakesink *f = fakesink_new(1);
    f->fail_op = FS_DOC_GET;
    r = open_on(dir_a, f, 0); /* the file, with a warning */
    assert_true(token_works(r, tok, "old"));
    assert_int_equal(f->ndoc, 0);
    f->fail_op = -1;
    bdb_tenants_close(r);
    r = open_on(dir_a, f, 0);
    assert_same_copies(dir_a, f);
    bdb_tenants_close(r);

    /* The store holds more than an old file: opened while unreachable, the file
     * answers; the first change adopts the store's registry first. */
    fakesink *g = fakesink_new(1);
    r = open_on(dir_b, g, 0);
    assert_int_equal(bdb_tenants_create(r, "a1", &q, 0, 1000, tok), BDB_OK);
    char stale[4096];
    size_t sl;
    char *s = file_of(dir_b, &sl);
    memcpy(stale, s, sl);
    free(s);
    assert_int_equal(bdb_tenants_create(r, "a2", &q, 0, 1000, tok2), BDB_OK);
    bdb_tenants_close(r);
    FILE *fp = fopen(strcat(strcpy(err, dir_b), "/tenants"), "wb"); /* an older copy */
    assert_non_null(fp);
    fwrite(stale, 1, sl, fp);
    fclose(fp);
    g->fail_op = FS_DOC_GET;
    r = open_on(dir_b, g, 0);
    assert_int_equal(bdb_tenants_count(r), 1);
    assert_false(token_works(r, tok2, "a2"));
    char tok3[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create(r, "a3", &q, 0, 1000, tok3), BDB_ERR_AGAIN);
    g->fail_op = -1;
    assert_int_equal(bdb_tenants_create(r, "a3", &q, 0, 1000, tok3), BDB_OK);
    assert_int_equal(bdb_tenants_count(r), 3);
    assert_true(token_works(r, tok2, "a2"));
    assert_true(token_works(r, tok3, "a3"));
    assert_same_copies(dir_b, g);
    bdb_tenants_close(r);

    /* No file, store unreachable: refused, unless offline_start (empty, and the store's
     * registry adopted before the first change). */
    tu_rm_rf(dir_b);
    g->fail_op = FS_DOC_GET;
    assert_int_equal(bdb_tenants_open_store(dir_b, &g->base, 0, &r, err, sizeof err), BDB_ERR_IO);
    assert_non_null(strstr(err, "offline_start"));
    r = open_on(dir_b, g, 1);
    assert_int_equal(bdb_tenants_count(r), 0);
    g->fail_op = -1;
    bdb_tenant_patch p = {0};
    p.has_max_devices = 1;
    p.quotas.max_devices = 4;
    assert_int_equal(bdb_tenants_update(r, "a1", &p, NULL), BDB_OK);
    assert_int_equal(bdb_tenants_count(r), 3);
    assert_true(token_works(r, tok3, "a3"));
    bdb_tenants_close(r);
    fakesink_free(f);
    fakesink_free(g);
}

static void test_damaged_document_refused(void **state)
{
    (void)state;
    fakesink *f = fakesink_new(1);
    bdb_tenants *r = open_on(dir_a, f, 0);
    bdb_quotas q = {0, 0, 0, 0};
    char tok[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1000, tok), BDB_OK);
    bdb_tenants_close(r);
    size_t n;
    char *d = (char *)doc_of(f, &n);
    d[20] ^= 1; /* inside the first tenant line: the checksum no longer matches */
    char err[600];
    assert_int_equal(bdb_tenants_open_store(dir_b, &f->base, 0, &r, err, sizeof err),
                     BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "checksum"));
    /* the sink's own check (missing part, bad checksum): refused as well */
    f->fail_op = FS_DOC_GET;
    f->fail_rc = BDB_ERR_CORRUPT;
    assert_int_equal(bdb_tenants_open_store(dir_a, &f->base, 1, &r, err, sizeof err),
                     BDB_ERR_CORRUPT);
    struct stat st;
    char path[128];
    snprintf(path, sizeof path, "%s/tenants", dir_b);
    assert_int_equal(stat(path, &st), -1); /* nothing written from it */
    fakesink_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_first_and_new_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migration_and_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_document_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
