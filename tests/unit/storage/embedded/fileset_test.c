/* fileset: the load rules of window files (fileset.h), through a kind of files made
 * for the test: a file `<seq>.w` holds "W seq wal_upto input..." as text.
 *
 * Covered: published files of two directories kept; a .tmp deleted; a file another
 * lists as an input (a compaction interrupted before its unlinks) deleted and counted,
 * across directories; a file past the committed WAL position deleted and counted; a
 * damaged file moved to the quarantine directory under "<kind>-<name>" and counted;
 * other names left alone; the kind's out of memory and I/O errors stop the load
 * without quarantining or deleting anything more; a keep that fails otherwise leaves
 * only that file out. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "engutil.h"

#include "storage/embedded/fileset/fileset.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmp[128], dirs[2][192], quar[192];

struct wf {
    uint64_t seq, upto, in[4];
    size_t nin;
};

/* What the fake kind does and saw. */
struct ctx {
    uint64_t kept[16];
    size_t nkept;
    int parse_fail; /* seq whose parse fails with fail_rc */
    int fail_rc;
    int keep_fail; /* seq whose keep fails with keep_rc */
    int keep_rc;
};

static int decode(const uint8_t *p, size_t n, struct wf *w)
{
    char buf[128];
    if (n == 0 || n >= sizeof buf || p[0] != 'W')
        return BDB_ERR_CORRUPT;
    memcpy(buf, p, n);
    buf[n] = 0;
    memset(w, 0, sizeof *w);
    char *s = buf + 1, *e;
    w->seq = strtoull(s, &e, 10);
    w->upto = strtoull(e, &e, 10);
    while (*e == ' ' && w->nin < 4)
        w->in[w->nin++] = strtoull(e, &e, 10);
    return BDB_OK;
}

static int k_replaced(void *ctx, int sub, uint8_t *data, size_t len, bdb_fileset_seqs *out)
{
    (void)ctx;
    (void)sub;
    struct wf w;
    int rc = decode(data, len, &w);
    free(data);
    return rc == BDB_OK ? bdb_fileset_seqs_add(out, w.in, w.nin) : BDB_OK;
}

static int k_parse(void *ctx, int sub, const char *dir, const char *name, uint8_t *data, size_t len,
                   void **f, uint64_t *seq, uint64_t *upto, const char **why)
{
    (void)sub;
    (void)dir;
    (void)name;
    struct ctx *c = ctx;
    struct wf *w = malloc(sizeof *w);
    assert_non_null(w);
    int rc = decode(data, len, w);
    free(data);
    if (rc == BDB_OK && (int)w->seq == c->parse_fail)
        rc = c->fail_rc;
    if (rc != BDB_OK) {
        *why = "not a W file";
        free(w);
        return rc;
    }
    *f = w;
    *seq = w->seq;
    *upto = w->upto;
    return BDB_OK;
}

static void k_discard(void *ctx, void *f)
{
    (void)ctx;
    free(f);
}

static int k_keep(void *ctx, int sub, void *f, const char *path)
{
    struct ctx *c = ctx;
    struct wf *w = f;
    assert_non_null(strstr(path, dirs[sub]));
    if ((int)w->seq == c->keep_fail) {
        free(w);
        return c->keep_rc;
    }
    c->kept[c->nkept++] = w->seq;
    free(w);
    return BDB_OK;
}

static const bdb_fileset_kind kind = {"wtest", ".w", k_replaced, k_parse, k_discard, k_keep};

static void put(int d, const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dirs[d], name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int exists(const char *dir, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static int setup(void **st)
{
    (void)st;
    eu_scratch(tmp, sizeof tmp, "fileset", EU_TMPFS, NULL, 0);
    for (int d = 0; d < 2; d++) {
        snprintf(dirs[d], sizeof dirs[d], "%s/d%d", tmp, d);
        assert_int_equal(mkdir(dirs[d], 0755), 0);
    }
    snprintf(quar, sizeof quar, "%s/quarantine", tmp);
    assert_int_equal(mkdir(quar, 0755), 0);
    /* d0: 1, 2 replaced by 5 (in d1: the rule does not care which directory), 3 of a
     * flush past the committed position 10, a leftover .tmp, a damaged file, an
     * unrelated name; d1: 4, the compaction 5 and 8 past the committed position */
    put(0, "1.w", "W1 3");
    put(0, "2.w", "W2 4");
    put(0, "3.w", "W3 11");
    put(0, "6.w.tmp", "W6 1");
    put(0, "7.w", "garbage");
    put(0, "notes.txt", "W8 1");
    put(1, "4.w", "W4 5");
    put(1, "5.w", "W5 6 1 2");
    put(1, "8.w", "W8 12");
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return eu_cleanup(tmp);
}

static int load(struct ctx *c, _Atomic uint64_t *q, _Atomic uint64_t *d)
{
    const char *const dv[2] = {dirs[0], dirs[1]};
    return bdb_fileset_load(bdb_vfs_posix(), dv, 2, quar, 10, &kind, c, q, d);
}

static int has(const struct ctx *c, uint64_t seq)
{
    for (size_t i = 0; i < c->nkept; i++)
        if (c->kept[i] == seq)
            return 1;
    return 0;
}

static void test_rules(void **st)
{
    (void)st;
    struct ctx c = {0};
    _Atomic uint64_t q = 0, d = 0;
    assert_int_equal(load(&c, &q, &d), BDB_OK);
    assert_int_equal(c.nkept, 2);
    assert_true(has(&c, 4) && has(&c, 5));
    assert_int_equal(q, 1);
    assert_int_equal(d, 4); /* 1 and 2 replaced, 3 and 8 uncommitted */
    assert_false(exists(dirs[0], "1.w") || exists(dirs[0], "2.w") || exists(dirs[0], "3.w"));
    assert_false(exists(dirs[1], "8.w"));
    assert_false(exists(dirs[0], "6.w.tmp"));
    assert_false(exists(dirs[0], "7.w"));
    assert_true(exists(quar, "wtest-7.w"));
    assert_true(exists(dirs[0], "notes.txt"));
    /* a second load finds what the first left */
    struct ctx c2 = {0};
    assert_int_equal(load(&c2, &q, &d), BDB_OK);
    assert_int_equal(c2.nkept, 2);
    assert_int_equal(q, 1);
    assert_int_equal(d, 4);
}

/* Out of memory or a failed rewrite in parse is not damage: the load stops with it and
 * goes no further (d1, listed after d0, is left as it is; what d0's listing reached
 * before file 1 depends on the directory's order). */
static void test_parse_errors_stop(void **st)
{
    (void)st;
    int codes[2] = {BDB_ERR_NOMEM, BDB_ERR_NOSPACE};
    for (int i = 0; i < 2; i++) {
        struct ctx c = {.parse_fail = 1, .fail_rc = codes[i]};
        _Atomic uint64_t q = 0, d = 0;
        assert_int_equal(load(&c, &q, &d), codes[i]);
        assert_int_equal(c.nkept, 0);
        assert_true(exists(dirs[0], "1.w")); /* not quarantined */
        assert_true(exists(dirs[1], "8.w") && exists(dirs[1], "4.w"));
        assert_false(exists(dirs[0], "6.w.tmp")); /* the first pass ran */
    }
}

/* A keep out of memory stops the load; any other failure leaves that file out only. */
static void test_keep_errors(void **st)
{
    (void)st;
    struct ctx c = {.keep_fail = 4, .keep_rc = BDB_ERR_NOMEM};
    _Atomic uint64_t q = 0, d = 0;
    assert_int_equal(load(&c, &q, &d), BDB_ERR_NOMEM);
    assert_false(has(&c, 4));
    struct ctx c2 = {.keep_fail = 4, .keep_rc = BDB_ERR_IO};
    assert_int_equal(load(&c2, &q, &d), BDB_OK);
    assert_int_equal(c2.nkept, 1);
    assert_true(has(&c2, 5));
    assert_true(exists(dirs[1], "4.w")); /* left on disk: not damage */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_errors_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_keep_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
