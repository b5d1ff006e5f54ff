/* tenants: names, SHA-256 hashing (a known vector) and constant-time comparison,
 * token generation, create / get / list / update / rotate / delete, lookup by token
 * hash (the old token stops working at rotation), persistence across reopen (0600,
 * nothing of the token itself on disk), corruption detection (flipped byte,
 * truncation, unknown version, count mismatch, unknown key, duplicate), a failed save
 * leaving the registry unchanged, and write-rate admission with its counters; deleted
 * names: generations, storage keys, lookups by key, their file lines. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[64];
static char regpath[128];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/bdb-tenants-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(regpath, sizeof regpath, "%s/tenants", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(tmpdir);
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = calloc(1, 1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    return buf;
}

static void write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* Writes body followed by a correct checksum line. */
static void write_with_crc(const char *path, const char *body)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%scrc32 %08x\n", body,
             (unsigned)crc32(0L, (const unsigned char *)body, (uInt)strlen(body)));
    write_file(path, buf, strlen(buf));
}

static bdb_tenants *open_ok(void)
{
    bdb_tenants *r = NULL;
    char err[300];
    assert_int_equal(bdb_tenants_open(tmpdir, &r, err, sizeof err), BDB_OK);
    return r;
}

static int open_err(char *err, size_t errlen)
{
    bdb_tenants *r = NULL;
    int rc = bdb_tenants_open(tmpdir, &r, err, errlen);
    if (rc == BDB_OK)
        bdb_tenants_close(r);
    return rc;
}

static void test_names(void **state)
{
    (void)state;
    assert_true(bdb_tenant_name_valid("acme"));
    assert_true(bdb_tenant_name_valid("A-b_c.9"));
    char longest[BDB_TENANT_NAME_MAX + 2];
    memset(longest, 'x', sizeof longest);
    longest[BDB_TENANT_NAME_MAX] = '\0';
    assert_true(bdb_tenant_name_valid(longest));
    longest[BDB_TENANT_NAME_MAX] = 'x';
    longest[BDB_TENANT_NAME_MAX + 1] = '\0';
    assert_false(bdb_tenant_name_valid(longest));
    assert_false(bdb_tenant_name_valid(""));
    assert_false(bdb_tenant_name_valid("a b"));
    assert_false(bdb_tenant_name_valid("a/b"));
    assert_false(bdb_tenant_name_valid("a=b"));
    assert_false(bdb_tenant_name_valid("\xc3\xa9"));
}

static void hex(const uint8_t *h, char *out)
{
    for (int i = 0; i < BDB_HASH_BYTES; i++)
        sprintf(out + 2 * i, "%02x", h[i]);
}

static void test_hash_and_tokens(void **state)
{
    (void)state;
    uint8_t h[BDB_HASH_BYTES], h2[BDB_HASH_BYTES];
    char hx[2 * BDB_HASH_BYTES + 1];
    bdb_token_hash("abc", 3, h); /* FIPS 180-2 test vector */
    hex(h, hx);
    assert_string_equal(hx, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    bdb_token_hash("", 0, h2);
    hex(h2, hx);
    assert_string_equal(hx, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_false(bdb_hash_equal(h, h2));
    memcpy(h2, h, sizeof h);
    assert_true(bdb_hash_equal(h, h2));
    h2[BDB_HASH_BYTES - 1] ^= 1;
    assert_false(bdb_hash_equal(h, h2));

    char t1[BDB_TOKEN_HEX + 1], t2[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_token_generate(t1), BDB_OK);
    assert_int_equal(bdb_token_generate(t2), BDB_OK);
    assert_int_equal(strlen(t1), BDB_TOKEN_HEX);
    assert_int_equal(strspn(t1, "0123456789abcdef"), BDB_TOKEN_HEX);
    assert_string_not_equal(t1, t2);
}

struct names {
    char v[8][BDB_TENANT_NAME_MAX + 1];
    int n;
};

static int collect(void *ctx, const bdb_tenant_info *t)
{
    struct names *n = ctx;
    if (n->n < 8)
        snprintf(n->v[n->n++], sizeof n->v[0], "%s", t->name);
    return 0;
}

static int token_owner(bdb_tenants *r, const char *token, char *name)
{
    uint8_t h[BDB_HASH_BYTES];
    bdb_token_hash(token, strlen(token), h);
    return bdb_tenants_find_by_hash(r, h, name);
}

static void test_crud_and_persistence(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    assert_int_equal(bdb_tenants_count(r), 0); /* no file: empty */
    char tok_a[BDB_TOKEN_HEX + 1], tok_b[BDB_TOKEN_HEX + 1], tok_x[BDB_TOKEN_HEX + 1];
    bdb_quotas qa = {100, 500, 10, 1u << 30};
    assert_int_equal(bdb_tenants_create(r, "acme", &qa, 7 * 86400000LL, 1000, tok_a), BDB_OK);
    bdb_quotas qb = {0};
    assert_int_equal(bdb_tenants_create(r, "beta", &qb, 0, 2000, tok_b), BDB_OK);
    assert_string_not_equal(tok_a, tok_b);
    assert_int_equal(bdb_tenants_create(r, "acme", &qb, 0, 3000, tok_x), BDB_ERR_EXISTS);
    assert_int_equal(bdb_tenants_create(r, "bad name", &qb, 0, 3000, tok_x), BDB_ERR_INVALID);
    bdb_quotas huge = {BDB_QUOTA_MAX_RATE + 1, 0, 0, 0};
    assert_int_equal(bdb_tenants_create(r, "huge", &huge, 0, 3000, tok_x), BDB_ERR_INVALID);
    assert_int_equal(bdb_tenants_create(r, "neg", &qb, -1, 3000, tok_x), BDB_ERR_INVALID);
    assert_int_equal(bdb_tenants_count(r), 2);

    char who[BDB_TENANT_NAME_MAX + 1];
    assert_true(token_owner(r, tok_a, who));
    assert_string_equal(who, "acme");
    assert_true(token_owner(r, tok_b, who));
    assert_string_equal(who, "beta");
    assert_false(token_owner(r, "not a token", who));

    bdb_tenant_info t;
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(t.quotas.writes_per_second, 100);
    assert_int_equal(t.quotas.burst, 500);
    assert_int_equal(t.quotas.max_devices, 10);
    assert_int_equal(t.quotas.storage_bytes, 1u << 30);
    assert_int_equal(t.retention_ms, 7 * 86400000LL);
    assert_int_equal(t.created_ms, 1000);
    assert_int_equal(bdb_tenants_get(r, "nope", &t), BDB_ERR_NOTFOUND);

    /* partial update: only what the patch names */
    bdb_tenant_patch p = {0};
    p.has_max_devices = 1;
    p.quotas.max_devices = 20;
    assert_int_equal(bdb_tenants_update(r, "acme", &p, &t), BDB_OK);
    assert_int_equal(t.quotas.max_devices, 20);
    assert_int_equal(t.quotas.writes_per_second, 100);
    p.has_writes_per_second = 1;
    p.quotas.writes_per_second = BDB_QUOTA_MAX_RATE + 1;
    assert_int_equal(bdb_tenants_update(r, "acme", &p, &t), BDB_ERR_INVALID);
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(t.quotas.writes_per_second, 100); /* refused patch changed nothing */
    assert_int_equal(bdb_tenants_update(r, "nope", &p, &t), BDB_ERR_NOTFOUND);

    /* rotation: the old token stops working, the new one works */
    char tok_a2[BDB_TOKEN_HEX + 1];
    assert_int_equal(bdb_tenants_rotate(r, "acme", 5000, tok_a2), BDB_OK);
    assert_string_not_equal(tok_a, tok_a2);
    assert_false(token_owner(r, tok_a, who));
    assert_true(token_owner(r, tok_a2, who));
    assert_string_equal(who, "acme");
    assert_int_equal(bdb_tenants_rotate(r, "nope", 5000, tok_x), BDB_ERR_NOTFOUND);
    bdb_tenants_close(r);

    /* the file: 0600, hashes only */
    struct stat st;
    assert_int_equal(stat(regpath, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    size_t len;
    char *text = read_file(regpath, &len);
    assert_null(strstr(text, tok_a2));
    assert_null(strstr(text, tok_b));
    assert_non_null(strstr(text, "bucketdb-tenants 1\n"));
    free(text);

    /* everything survives a reopen */
    r = open_ok();
    assert_int_equal(bdb_tenants_count(r), 2);
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(t.quotas.max_devices, 20);
    assert_int_equal(t.quotas.burst, 500);
    assert_int_equal(t.retention_ms, 7 * 86400000LL);
    assert_int_equal(t.created_ms, 1000);
    assert_int_equal(t.token_rotated_ms, 5000);
    assert_true(token_owner(r, tok_a2, who));
    assert_false(token_owner(r, tok_a, who));
    assert_true(token_owner(r, tok_b, who));
    struct names nl = {0};
    bdb_tenants_list(r, collect, &nl);
    assert_int_equal(nl.n, 2);
    assert_string_equal(nl.v[0], "acme");
    assert_string_equal(nl.v[1], "beta");

    /* delete: gone, token with it, and still gone after a reopen */
    assert_int_equal(bdb_tenants_delete(r, "beta", 1000), BDB_OK);
    assert_int_equal(bdb_tenants_delete(r, "beta", 1000), BDB_ERR_NOTFOUND);
    assert_false(token_owner(r, tok_b, who));
    bdb_tenants_close(r);
    r = open_ok();
    assert_int_equal(bdb_tenants_count(r), 1);
    assert_false(token_owner(r, tok_b, who));
    /* the name can be registered again, with a new token */
    assert_int_equal(bdb_tenants_create(r, "beta", &qb, 0, 9000, tok_x), BDB_OK);
    assert_string_not_equal(tok_x, tok_b);
    bdb_tenants_close(r);
}

static void test_corruption_detected(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    char tok[BDB_TOKEN_HEX + 1];
    bdb_quotas q = {10, 0, 5, 0};
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1, tok), BDB_OK);
    assert_int_equal(bdb_tenants_create(r, "beta", &q, 0, 2, tok), BDB_OK);
    bdb_tenants_close(r);
    size_t len;
    char *good = read_file(regpath, &len);
    char err[300];

    /* every single flipped bit anywhere in the file is caught */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            char *bad = malloc(len);
            memcpy(bad, good, len);
            bad[i] ^= (char)(1 << bit);
            write_file(regpath, bad, len);
            free(bad);
            err[0] = '\0';
            assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
            assert_non_null(strstr(err, "tenants"));
        }
    }
    /* truncation at every length */
    for (size_t n = 0; n < len; n++) {
        write_file(regpath, good, n);
        if (n == 0) {
            assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
            continue;
        }
        assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    }
    /* a newer version, correctly checksummed, is refused with a clear message */
    write_with_crc(regpath, "bucketdb-tenants 2\ncount 0\n");
    assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "version 2"));
    /* a count that does not match the entries */
    write_with_crc(regpath, "bucketdb-tenants 1\ncount 1\n");
    assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    /* an unknown key, a missing key, a duplicate tenant: all refused */
    const char *line = "tenant a sha256=" /* 64 hex */
                       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
                       " created=1 rotated=1 writes_per_second=0 burst=0 max_devices=0"
                       " storage_bytes=0 retention_ms=0";
    char body[2048];
    snprintf(body, sizeof body, "bucketdb-tenants 1\n%s\ncount 1\n", line);
    write_with_crc(regpath, body);
    assert_int_equal(open_err(err, sizeof err), BDB_OK); /* the well-formed base case */
    snprintf(body, sizeof body, "bucketdb-tenants 1\n%s colour=blue\ncount 1\n", line);
    write_with_crc(regpath, body);
    assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    snprintf(body, sizeof body, "bucketdb-tenants 1\n%.*s\ncount 1\n",
             (int)(strstr(line, " retention_ms") - line), line);
    write_with_crc(regpath, body);
    assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    snprintf(body, sizeof body, "bucketdb-tenants 1\n%s\n%s\ncount 2\n", line, line);
    write_with_crc(regpath, body);
    assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "line 3"));
    /* the good file still opens, and a leftover temp file changes nothing */
    write_file(regpath, good, len);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", regpath);
    write_file(tmp, "garbage", 7);
    r = open_ok();
    assert_int_equal(bdb_tenants_count(r), 2);
    bdb_tenants_close(r);
    free(good);
}

static void test_failed_save_changes_nothing(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    char tok[BDB_TOKEN_HEX + 1], tok2[BDB_TOKEN_HEX + 1];
    bdb_quotas q = {10, 0, 5, 0};
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1, tok), BDB_OK);
    /* a directory where the temp file goes makes every save fail */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", regpath);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(bdb_tenants_create(r, "beta", &q, 0, 2, tok2), BDB_ERR_IO);
    assert_int_equal(bdb_tenants_count(r), 1);
    bdb_tenant_info t;
    assert_int_equal(bdb_tenants_get(r, "beta", &t), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_rotate(r, "acme", 5, tok2), BDB_ERR_IO);
    char who[BDB_TENANT_NAME_MAX + 1];
    assert_true(token_owner(r, tok, who)); /* the old token still works */
    bdb_tenant_patch p = {0};
    p.has_max_devices = 1;
    p.quotas.max_devices = 99;
    assert_int_equal(bdb_tenants_update(r, "acme", &p, &t), BDB_ERR_IO);
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(t.quotas.max_devices, 5);
    assert_int_equal(bdb_tenants_delete(r, "acme", 1000), BDB_ERR_IO);
    assert_int_equal(bdb_tenants_count(r), 1);
    assert_true(token_owner(r, tok, who));
    /* the failed deletion moved no generation: the data is where it was */
    char key[BDB_TENANT_KEY_MAX + 1];
    assert_int_equal(bdb_tenants_storage_key(r, "acme", key, sizeof key), BDB_OK);
    assert_string_equal(key, "acme");
    assert_false(bdb_tenants_key_deleted(r, "acme"));
    rmdir(tmp);
    bdb_tenants_close(r);
    r = open_ok();
    assert_int_equal(bdb_tenants_count(r), 1);
    assert_true(token_owner(r, tok, who));
    bdb_tenants_close(r);
}

static void test_deleted_names(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    char tok[BDB_TOKEN_HEX + 1], key[BDB_TENANT_KEY_MAX + 1], nm[BDB_TENANT_NAME_MAX + 1];
    bdb_quotas q = {10, 0, 5, 0};
    bdb_tenant_info t;
    uint64_t gen = 0;
    int64_t at = 0;
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1, tok), BDB_OK);
    assert_int_equal(bdb_tenants_storage_key(r, "acme", key, sizeof key), BDB_OK);
    assert_string_equal(key, "acme"); /* never deleted: the name itself */
    assert_false(bdb_tenants_deleted(r, "acme", &gen, &at));
    assert_int_equal(bdb_tenants_delete(r, "acme", 777), BDB_OK);
    assert_true(bdb_tenants_deleted(r, "acme", &gen, &at));
    assert_int_equal(gen, 1);
    assert_int_equal(at, 777);
    assert_true(bdb_tenants_key_deleted(r, "acme"));
    assert_false(bdb_tenants_key_deleted(r, "acme@1"));
    assert_false(bdb_tenants_key_deleted(r, "other"));
    assert_int_equal(bdb_tenants_storage_key(r, "acme", key, sizeof key), BDB_OK);
    assert_string_equal(key, "acme@1");
    assert_int_equal(bdb_tenants_storage_key(r, "acme", key, 6), BDB_ERR_LIMIT);
    /* unregistered now: neither the name nor a key finds it */
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_get(r, "acme@1", &t), BDB_ERR_NOTFOUND);
    /* created again: found by its name and its current key, not by an old one */
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 2, tok), BDB_OK);
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(bdb_tenants_get(r, "acme@1", &t), BDB_OK);
    assert_int_equal(bdb_tenants_get(r, "acme@2", &t), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_get(r, "acme@x", &t), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_count_ingest(r, "acme@1", 5), 1); /* per-request calls */
    assert_string_equal(bdb_tenant_key_name("acme@1", nm), "acme");
    assert_string_equal(bdb_tenant_key_name("acme", nm), "acme");
    /* a deletion that cannot be written changes nothing: same generation, same key */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", regpath);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(bdb_tenants_delete(r, "acme", 999), BDB_ERR_IO);
    assert_true(bdb_tenants_deleted(r, "acme", &gen, &at));
    assert_int_equal(gen, 1);
    assert_int_equal(at, 777);
    assert_int_equal(bdb_tenants_storage_key(r, "acme", key, sizeof key), BDB_OK);
    assert_string_equal(key, "acme@1");
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(bdb_tenants_create(r, "gamma", &q, 0, 3, tok), BDB_ERR_IO);
    assert_int_equal(bdb_tenants_delete(r, "gamma", 999), BDB_ERR_NOTFOUND);
    rmdir(tmp);
    assert_int_equal(bdb_tenants_create(r, "gamma", &q, 0, 3, tok), BDB_OK);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(bdb_tenants_delete(r, "gamma", 999), BDB_ERR_IO);
    assert_false(bdb_tenants_deleted(r, "gamma", &gen, &at)); /* no generation 0 left */
    assert_false(bdb_tenants_key_deleted(r, "gamma"));
    rmdir(tmp);
    assert_int_equal(bdb_tenants_undo_create(r, "gamma"), BDB_OK);
    /* a second deletion: both older generations are deleted, across a reopen */
    assert_int_equal(bdb_tenants_delete(r, "acme", 888), BDB_OK);
    bdb_tenants_close(r);
    r = open_ok();
    assert_true(bdb_tenants_key_deleted(r, "acme"));
    assert_true(bdb_tenants_key_deleted(r, "acme@1"));
    assert_false(bdb_tenants_key_deleted(r, "acme@2"));
    assert_true(bdb_tenants_deleted(r, "acme", &gen, &at));
    assert_int_equal(gen, 2);
    assert_int_equal(at, 888);
    assert_int_equal(bdb_tenants_count(r), 0);
    /* undoing a create records no deletion */
    assert_int_equal(bdb_tenants_create(r, "beta", &q, 0, 3, tok), BDB_OK);
    assert_int_equal(bdb_tenants_undo_create(r, "beta"), BDB_OK);
    assert_false(bdb_tenants_deleted(r, "beta", &gen, &at));
    bdb_tenants_close(r);
    size_t len;
    char *txt = read_file(regpath, &len);
    assert_non_null(strstr(txt, "\ndeleted acme gen=2 at=888\n"));
    free(txt);

    /* damaged deleted lines stop the open */
    static const char *const bad[] = {
        "deleted acme gen=0 at=1",
        "deleted acme gen=1",
        "deleted a@b gen=1 at=1",
        "deleted acme gen=x at=1",
        "deleted acme at=1 gen=1",
        "deleted acme gen=1 at=1 x=1",
        "deleted acme gen=1 at=1\ndeleted acme gen=2 at=1",
        "deleted acme gen=1 at=1 purged=2",
        "deleted acme gen=1 at=1 purged=x",
        "deleted acme gen=1 at=1 purge=1",
        "deleted acme gen=1 at=1 purged=1 x=1",
    };
    char body[512], err[300];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(body, sizeof body, "bucketdb-tenants 1\n%s\ncount 0\n", bad[i]);
        write_with_crc(regpath, body);
        err[0] = '\0';
        assert_int_equal(open_err(err, sizeof err), BDB_ERR_CORRUPT);
        assert_non_null(strstr(err, "deleted-tenant entry"));
    }
    write_with_crc(regpath, "bucketdb-tenants 1\ndeleted acme gen=3 at=5\ncount 0\n");
    r = open_ok();
    assert_true(bdb_tenants_key_deleted(r, "acme@2"));
    bdb_tenants_close(r);
}

/* The purge's bookkeeping (tenants_purge.h): generations handed out oldest first, each
 * recorded once, durably, and a failed record changes nothing. */
static void test_purge_records(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    char tok[BDB_TOKEN_HEX + 1], key[BDB_TENANT_KEY_MAX + 1];
    bdb_quotas q = {0};
    assert_int_equal(bdb_tenants_purge_next(r, key, sizeof key), 0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1, tok), BDB_OK);
        assert_int_equal(bdb_tenants_delete(r, "acme", 5), BDB_OK);
    }
    assert_int_equal(bdb_tenants_purge_pending(r), 2);
    assert_int_equal(bdb_tenants_purge_next(r, key, sizeof key), 1);
    assert_string_equal(key, "acme");
    assert_int_equal(bdb_tenants_purge_next(r, key, 3), BDB_ERR_LIMIT);
    assert_int_equal(bdb_tenants_purge_done(r, "acme@1"), BDB_ERR_NOTFOUND); /* not next */
    assert_int_equal(bdb_tenants_purge_done(r, "acme@2"), BDB_ERR_NOTFOUND); /* current */
    assert_int_equal(bdb_tenants_purge_done(r, "nobody"), BDB_ERR_NOTFOUND);
    assert_int_equal(bdb_tenants_purge_done(r, "acme"), BDB_OK);
    assert_int_equal(bdb_tenants_purge_done(r, "acme"), BDB_ERR_NOTFOUND); /* once */
    bdb_tenants_close(r);
    r = open_ok();
    assert_int_equal(bdb_tenants_purge_pending(r), 1);
    assert_int_equal(bdb_tenants_purge_next(r, key, sizeof key), 1);
    assert_string_equal(key, "acme@1");
    /* a directory where the temp file goes: the record cannot be written and stays */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", regpath);
    assert_int_equal(mkdir(tmp, 0700), 0);
    assert_int_equal(bdb_tenants_purge_done(r, "acme@1"), BDB_ERR_IO);
    rmdir(tmp);
    assert_int_equal(bdb_tenants_purge_pending(r), 1);
    assert_int_equal(bdb_tenants_purge_done(r, "acme@1"), BDB_OK);
    assert_int_equal(bdb_tenants_purge_pending(r), 0);
    assert_int_equal(bdb_tenants_purge_next(r, key, sizeof key), 0);
    assert_true(bdb_tenants_key_deleted(r, "acme@1")); /* purged keys stay deleted */
    bdb_tenants_close(r);
    size_t len;
    char *txt = read_file(regpath, &len);
    assert_non_null(strstr(txt, "\ndeleted acme gen=2 at=5 purged=2\n"));
    free(txt);
}

static void test_admission(void **state)
{
    (void)state;
    bdb_tenants *r = open_ok();
    char tok[BDB_TOKEN_HEX + 1];
    bdb_quotas q = {10, 30, 0, 0};
    assert_int_equal(bdb_tenants_create(r, "acme", &q, 0, 1, tok), BDB_OK);
    bdb_quotas none = {0};
    assert_int_equal(bdb_tenants_create(r, "free", &none, 0, 1, tok), BDB_OK);
    int64_t ra = 0;
    uint64_t val = 0;
    assert_int_equal(bdb_tenants_admit(r, "acme", 30, 0, &ra, &val), 1);
    assert_int_equal(bdb_tenants_admit(r, "acme", 5, 0, &ra, &val), 0);
    assert_int_equal(ra, 1);
    assert_int_equal(val, 10);
    assert_int_equal(bdb_tenants_admit(r, "acme", 31, 0, &ra, &val), -1);
    assert_int_equal(val, 30);
    assert_int_equal(bdb_tenants_admit(r, "acme", 5, 500, &ra, &val), 1); /* refilled */
    /* a failed write gives its cost back */
    bdb_tenants_refund(r, "acme", 5);
    assert_int_equal(bdb_tenants_admit(r, "acme", 5, 500, &ra, &val), 1);
    /* no rate limit, or not registered: always admitted */
    assert_int_equal(bdb_tenants_admit(r, "free", 1000000, 0, &ra, &val), 1);
    assert_int_equal(bdb_tenants_admit(r, "stranger", 1000000, 0, &ra, &val), 1);
    bdb_tenants_count_rejection(r, "acme", BDB_LIMIT_DEVICES);
    bdb_tenants_count_rejection(r, "stranger", BDB_LIMIT_DEVICES); /* ignored */
    bdb_tenant_info t;
    assert_int_equal(bdb_tenants_get(r, "acme", &t), BDB_OK);
    assert_int_equal(t.rejections[BDB_LIMIT_RATE], 1);
    assert_int_equal(t.rejections[BDB_LIMIT_BURST], 1);
    assert_int_equal(t.rejections[BDB_LIMIT_DEVICES], 1);
    assert_string_equal(bdb_quota_limit_name(BDB_LIMIT_RATE), "writes_per_second");
    assert_string_equal(bdb_quota_limit_name(BDB_LIMIT_BURST), "burst");
    assert_string_equal(bdb_quota_limit_name(BDB_LIMIT_DEVICES), "max_devices");
    /* a quota change applies to the next request */
    bdb_tenant_patch p = {0};
    p.has_writes_per_second = 1;
    p.quotas.writes_per_second = 0;
    assert_int_equal(bdb_tenants_update(r, "acme", &p, NULL), BDB_OK);
    assert_int_equal(bdb_tenants_admit(r, "acme", 1000, 500, &ra, &val), 1);
    bdb_tenants_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_hash_and_tokens),
        cmocka_unit_test_setup_teardown(test_crud_and_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_save_changes_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_admission, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleted_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_purge_records, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
