/* The device rule (ingest/devrule.h): parsing and its errors, first-present and
 * composite alternatives, escaping only in rules with a composite, the tags a rule
 * uses, and a built name that does not fit. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "ingest/devrule.h"

#include <stdio.h>
#include <string.h>

struct tags {
    const char *kv[8][2];
};

static const char *get(void *ctx, const char *key, size_t klen, size_t *vlen)
{
    struct tags *t = ctx;
    for (int i = 0; i < 8 && t->kv[i][0]; i++)
        if (strlen(t->kv[i][0]) == klen && !memcmp(t->kv[i][0], key, klen)) {
            *vlen = strlen(t->kv[i][1]);
            return t->kv[i][1];
        }
    return NULL;
}

/* The device of tags under spec as a string ("" when none), and the alternative. */
static int dev(const char *spec, struct tags *t, char *out, size_t cap)
{
    bdb_devrule r;
    char err[200];
    assert_int_equal(bdb_devrule_parse(spec, &r, err, sizeof err), 0);
    char buf[64];
    const char *p;
    size_t n;
    int a = bdb_devrule_device(&r, get, t, buf, sizeof buf, &p, &n);
    out[0] = '\0';
    if (a >= 0)
        snprintf(out, cap, "%.*s", (int)n, p);
    return a;
}

static void parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *why;
    } bad[] = {
        {"", "empty tag key"},
        {"a,", "empty alternative"},
        {"+a", "empty tag key"},
        {"a++b", "empty tag key"},
        {"a+b+a", "repeated"},
        {"a+b+c+d+e", "more than 4 keys"},
        {"a,b,c,d,e,f,g,h,i", "more than 8 alternatives"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bdb_devrule r;
        char err[200];
        assert_int_equal(bdb_devrule_parse(bad[i].spec, &r, err, sizeof err), -1);
        assert_non_null(strstr(err, bad[i].why));
    }
    char long_spec[400];
    memset(long_spec, 'k', sizeof long_spec - 1);
    long_spec[sizeof long_spec - 1] = '\0';
    bdb_devrule r;
    char err[200];
    assert_int_equal(bdb_devrule_parse(long_spec, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "longer than 255"));
    /* blanks are ignored; the canonical text has none */
    assert_int_equal(bdb_devrule_parse(" host + device , host ", &r, err, sizeof err), 0);
    assert_string_equal(bdb_devrule_text(&r), "host+device,host");
    assert_int_equal(bdb_devrule_parse("a,b,c,d,e,f,g,h", &r, err, sizeof err), 0);
    assert_int_equal(bdb_devrule_parse("a+b+c+d", &r, err, sizeof err), 0);
}

static void first_present_and_composite(void **state)
{
    (void)state;
    char out[128];
    struct tags disk = {{{"host", "h1"}, {"device", "sda1"}, {"path", "/"}}};
    struct tags cpu = {{{"host", "h1"}, {"cpu", "cpu0"}}};
    struct tags none = {{{"site", "x"}}};
    /* the default rule: verbatim, even with '/' */
    struct tags slash = {{{"device", "a/b"}}};
    assert_int_equal(dev("device", &slash, out, sizeof out), 0);
    assert_string_equal(out, "a/b");
    assert_int_equal(dev("device", &cpu, out, sizeof out), -1);
    /* first present */
    assert_int_equal(dev("device,host", &cpu, out, sizeof out), 1);
    assert_string_equal(out, "h1");
    assert_int_equal(dev("device,host", &disk, out, sizeof out), 0);
    assert_string_equal(out, "sda1");
    /* composite, and the fallback to one key */
    assert_int_equal(dev("host+device,host", &disk, out, sizeof out), 0);
    assert_string_equal(out, "h1/sda1");
    assert_int_equal(dev("host+device,host", &cpu, out, sizeof out), 1);
    assert_string_equal(out, "h1");
    assert_int_equal(dev("host+device,host", &none, out, sizeof out), -1);
    /* a composite rule escapes every value, so no two tag sets meet */
    struct tags a = {{{"host", "h1/sda1"}}};
    struct tags b = {{{"host", "h1"}, {"device", "sda1"}}};
    struct tags c = {{{"host", "h1"}, {"device", "a\\b/c"}}};
    assert_int_equal(dev("host+device,host", &a, out, sizeof out), 1);
    assert_string_equal(out, "h1\\/sda1");
    assert_int_equal(dev("host+device,host", &b, out, sizeof out), 0);
    assert_string_equal(out, "h1/sda1");
    assert_int_equal(dev("host+device,host", &c, out, sizeof out), 0);
    assert_string_equal(out, "h1/a\\\\b\\/c");
    /* a built name that does not fit the buffer (64) */
    char big[80];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    struct tags t = {{{"host", big}, {"device", "d"}}};
    assert_int_equal(dev("host+device", &t, out, sizeof out), -2);
}

static void uses_and_single(void **state)
{
    (void)state;
    bdb_devrule r;
    char err[200];
    assert_int_equal(bdb_devrule_parse("host+device,host", &r, err, sizeof err), 0);
    assert_true(bdb_devrule_uses(&r, 0, "host", 4));
    assert_true(bdb_devrule_uses(&r, 0, "device", 6));
    assert_false(bdb_devrule_uses(&r, 1, "device", 6));
    assert_false(bdb_devrule_uses(&r, 0, "hos", 3));
    char msg[200];
    bdb_devrule_missing(&r, msg, sizeof msg);
    assert_string_equal(msg, "no device: the device rule 'host+device,host' matches none of "
                             "the tags");
    /* a one-key rule of any bytes, without parsing: '+' and ',' are part of the key */
    bdb_devrule_single(&r, "a+b,c", 5);
    assert_int_equal(r.nalts, 1);
    assert_int_equal(r.escape, 0);
    assert_true(bdb_devrule_uses(&r, 0, "a+b,c", 5));
    bdb_devrule_missing(&r, msg, sizeof msg);
    assert_string_equal(msg, "missing device tag 'a+b,c'");
}

/* Which tags are left out of the device tags (bdb_devrule_tags): device_tag only, and
 * only when the alternative used names the device by it. */
static void tags_left_out(void **state)
{
    (void)state;
    bdb_devrule r;
    char err[200];
    assert_int_equal(bdb_devrule_parse("host+device,host", &r, err, sizeof err), 0);
    bdb_devrule_tags t;
    bdb_devrule_tags_init(&t, &r, "device");
    assert_false(t.dt_alone);
    bdb_devrule_skip s = bdb_devrule_tags_skip(&t, 0, "a/sda1");
    assert_false(bdb_devrule_tag_stored(&s, "device", 6, "sda1"));
    assert_true(bdb_devrule_tag_stored(&s, "host", 4, "a"));
    assert_true(bdb_devrule_tag_stored(&s, "path", 4, "/"));
    s = bdb_devrule_tags_skip(&t, 1, "a"); /* named by host alone: device stays a tag */
    assert_true(bdb_devrule_tag_stored(&s, "device", 6, "sda1"));
    s = bdb_devrule_tags_skip(&t, -100, "fallback"); /* named otherwise: every tag stays */
    assert_true(bdb_devrule_tag_stored(&s, "device", 6, "sda1"));

    /* no rule: device_tag alone; NULL device_tag is "device" */
    bdb_devrule_tags_init(&t, NULL, NULL);
    assert_true(t.dt_alone);
    assert_string_equal(bdb_devrule_text(t.rule), "device");
    /* the name is the tag's own value: its address tells the tag, whatever its key */
    const char *own = "d1";
    char copy[] = "d1";
    s = bdb_devrule_tags_skip(&t, 0, own);
    assert_false(bdb_devrule_tag_stored(&s, "device", 6, own));
    assert_true(bdb_devrule_tag_stored(&s, "device", 6, copy));
    /* without the name's address (JSON): by key */
    s = bdb_devrule_tags_skip(&t, 0, NULL);
    assert_false(bdb_devrule_tag_stored(&s, "device", 6, copy));
    assert_true(bdb_devrule_tag_stored(&s, "devic", 5, copy));
    assert_true(bdb_devrule_tag_stored(&s, "site", 4, copy));

    bdb_devrule_tags_init(&t, NULL, "node");
    assert_true(t.dt_alone);
    s = bdb_devrule_tags_skip(&t, 0, NULL);
    assert_false(bdb_devrule_tag_stored(&s, "node", 4, copy));
    assert_true(bdb_devrule_tag_stored(&s, "device", 6, copy));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_errors),
        cmocka_unit_test(first_present_and_composite),
        cmocka_unit_test(uses_and_single),
        cmocka_unit_test(tags_left_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
