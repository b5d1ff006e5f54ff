/* cass_doc: the document header (format, parse, refusals) and the assembly of the
 * parts read back: any order, and a part missing, repeated, out of range, of the wrong
 * length, or of another version (checksum) refused rather than used. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "storage/cassandra/cass_doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_head(void **state)
{
    (void)state;
    cass_doc_head h, back;
    const char data[] = "bucketdb-tenants 1\n";
    cass_doc_head_of(data, strlen(data), 1700000000123, &h);
    assert_int_equal(h.parts, 1);
    assert_int_equal(h.bytes, strlen(data));
    char t[160];
    size_t n = cass_doc_head_format(&h, t, sizeof t);
    assert_string_equal(t, "bucketdb-doc 1 version=1700000000123 parts=1 bytes=19 crc32=3603d6ce");
    assert_int_equal(cass_doc_head_parse(t, n, &back), BDB_OK);
    assert_int_equal(back.version, h.version);
    assert_int_equal(back.crc, h.crc);
    /* sizes: 0 bytes has 0 parts; one byte over a part, two */
    cass_doc_head_of("", 0, 1, &h);
    assert_int_equal(h.parts, 0);
    assert_int_equal(h.crc, 0);
    static const char *const bad[] = {
        "bucketdb-doc 2 version=1 parts=1 bytes=19 crc32=ad5f2c2c",
        "bucketdb-doc 1 version=1 parts=2 bytes=19 crc32=ad5f2c2c", /* parts disagree */
        "bucketdb-doc 1 version=1 parts=1 bytes=19 crc32=ad5f2c2c x",
        "bucketdb-doc 1 version=1 parts=1 bytes=19",
        "bucketdb-doc 1 version=1 parts=257 bytes=67108865 crc32=00000000", /* too large */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cass_doc_head_parse(bad[i], strlen(bad[i]), &back), BDB_ERR_CORRUPT);
}

static void test_assemble(void **state)
{
    (void)state;
    size_t len = 2 * CASS_DOC_PART_MAX + 100;
    char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)(i * 7 + i / 1000);
    cass_doc_head h;
    cass_doc_head_of(data, len, 42, &h);
    assert_int_equal(h.parts, 3);
    /* stored in any order */
    cass_doc_slice v[4] = {{2, data + 2 * CASS_DOC_PART_MAX, 100},
                           {0, data, CASS_DOC_PART_MAX},
                           {1, data + CASS_DOC_PART_MAX, CASS_DOC_PART_MAX}};
    void *out = NULL;
    char err[200];
    assert_int_equal(cass_doc_assemble(&h, v, 3, &out, err, sizeof err), BDB_OK);
    assert_memory_equal(out, data, len);
    assert_int_equal(((char *)out)[len], '\0');
    free(out);
    /* a part missing (a put that stopped half-way under this header) */
    assert_int_equal(cass_doc_assemble(&h, v, 2, &out, err, sizeof err), BDB_ERR_CORRUPT);
    assert_null(out);
    assert_non_null(strstr(err, "2 of its 3 parts"));
    /* a part twice instead of another */
    cass_doc_slice dup[3] = {v[0], v[1], v[1]};
    assert_int_equal(cass_doc_assemble(&h, dup, 3, &out, err, sizeof err), BDB_ERR_CORRUPT);
    /* out of range */
    cass_doc_slice far[3] = {v[0], v[1], {3, data, 100}};
    assert_int_equal(cass_doc_assemble(&h, far, 3, &out, err, sizeof err), BDB_ERR_CORRUPT);
    /* a short part */
    cass_doc_slice shrt[3] = {v[1], v[2], {2, data + 2 * CASS_DOC_PART_MAX, 99}};
    assert_int_equal(cass_doc_assemble(&h, shrt, 3, &out, err, sizeof err), BDB_ERR_CORRUPT);
    assert_non_null(strstr(err, "holds 99 bytes"));
    /* the right sizes, other bytes (another version's part): the checksum */
    char *other = malloc(CASS_DOC_PART_MAX);
    memcpy(other, data + CASS_DOC_PART_MAX, CASS_DOC_PART_MAX);
    other[12345] ^= 0x10;
    cass_doc_slice mixed[3] = {v[0], v[1], {1, other, CASS_DOC_PART_MAX}};
    assert_int_equal(cass_doc_assemble(&h, mixed, 3, &out, err, sizeof err), BDB_ERR_CORRUPT);
    assert_null(out);
    assert_non_null(strstr(err, "checksum"));
    free(other);
    /* an empty document */
    cass_doc_head_of("", 0, 7, &h);
    assert_int_equal(cass_doc_assemble(&h, v, 0, &out, err, sizeof err), BDB_OK);
    assert_int_equal(((char *)out)[0], '\0');
    free(out);
    free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_assemble),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
