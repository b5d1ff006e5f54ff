/* wal_edge: the WAL at the edges wal_test.c does not reach.
 *
 * - Page padding: a record ending fewer than 7 bytes before a page end is followed by
 *   zero padding; replay skips it, and reports non-zero padding as "bad content" and a
 *   file ending inside the padding as "torn record" (each cut after the last record).
 * - A FIRST fragment ending the file at a page end (the LAST never came): torn, nothing
 *   delivered. Hand-made fragment sequences (MIDDLE or LAST outside a record, FULL or
 *   FIRST inside one) are each "bad fragment sequence"; an empty record split into an
 *   empty FIRST and an empty LAST is delivered as an empty record.
 * - Names in the directory that are not 20 decimal digits of a 64-bit number are left
 *   alone; more than 16 segments (the list grows) are replayed in order.
 * - The documented argument errors (BDB_ERR_INVALID), optional out-parameters.
 * - Out of memory when sealing or creating a segment: the record is not written, the
 *   WAL stays usable and nothing earlier is lost.
 * - Every single I/O failure during open and replay of damaged segments: an error is
 *   returned, records delivered are a prefix of the good ones, and a later clean replay
 *   still delivers every good record (nothing lost to a failed truncation). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"
#include "storage/failvfs.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "storage/embedded/core/wal.h"
#include "storage/vfs/vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define PAGE (32 * 1024)
#define HDR 7
#define MAXREC 64

static char tmpdir[64];
static char waldir[96];

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "waledge", EU_TMPFS, NULL, 0);
    snprintf(waldir, sizeof waldir, "%s/wal", tmpdir);
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

static bdb_wal *open_wal(bdb_vfs *vfs, uint64_t segment_bytes)
{
    bdb_wal_opts o = {.dir = waldir, .vfs = vfs, .segment_bytes = segment_bytes};
    bdb_wal *w = NULL;
    assert_int_equal(bdb_wal_open(&o, &w), BDB_OK);
    return w;
}

/* What replay delivered: each record's length and first byte. */
typedef struct got {
    size_t n;
    size_t len[MAXREC];
    int first[MAXREC];
    uint64_t seg[MAXREC];
} got;

static int collect(void *ctx, const uint8_t *rec, size_t len, uint64_t segment)
{
    got *g = ctx;
    assert_non_null(rec);
    if (g->n < MAXREC) {
        g->len[g->n] = len;
        g->first[g->n] = len ? rec[0] : -1;
        g->seg[g->n] = segment;
    }
    g->n++;
    return 0;
}

static void append_filled(bdb_wal *w, size_t len, int fill)
{
    uint8_t *r = malloc(len ? len : 1);
    assert_non_null(r);
    memset(r, fill, len);
    assert_int_equal(bdb_wal_append(w, r, len, NULL), BDB_OK);
    free(r);
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

/* Replays everything with a fresh WAL over POSIX. */
static void replay_all(got *g, bdb_wal_replay_stats *st)
{
    memset(g, 0, sizeof *g);
    bdb_wal *w = open_wal(NULL, 0);
    assert_int_equal(bdb_wal_replay(w, 0, collect, g, st), BDB_OK);
    bdb_wal_close(w);
}

/* A record of PAGE - 10 bytes ends 3 bytes before the page end: the next record
 * starts on the next page after 3 zero bytes. */
static void make_padded_segment(void)
{
    bdb_wal *w = open_wal(NULL, 0);
    append_filled(w, PAGE - 10, 'a');
    append_filled(w, 100, 'b');
    bdb_wal_close(w);
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), PAGE + HDR + 100);
}

static void test_page_padding(void **state)
{
    (void)state;
    got g;
    bdb_wal_replay_stats st;
    make_padded_segment();
    replay_all(&g, &st);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.len[0], PAGE - 10);
    assert_int_equal(g.first[1], 'b');
    assert_int_equal(st.corruptions, 0);

    /* a non-zero padding byte: bad content, cut after the first record */
    size_t n;
    uint8_t *p = read_file(eu_wal_seg(waldir, 1), &n);
    p[PAGE - 2] = 0x55;
    eu_write_file(eu_wal_seg(waldir, 1), p, n);
    replay_all(&g, &st);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.len[0], PAGE - 10);
    assert_int_equal(st.corruptions, 1);
    assert_non_null(strstr(st.first_error, "non-zero page padding"));
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), PAGE - 3);

    /* the file ends inside the (zero) padding: a torn tail, the first record stays */
    p[PAGE - 2] = 0;
    eu_write_file(eu_wal_seg(waldir, 1), p, PAGE - 1);
    free(p);
    replay_all(&g, &st);
    assert_int_equal(g.n, 1);
    assert_int_equal(st.corruptions, 1);
    assert_non_null(strstr(st.first_error, "torn record"));
    assert_int_equal(st.corrupt_bytes, 2);
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), PAGE - 3);
}

static void test_first_fragment_at_eof(void **state)
{
    (void)state;
    bdb_wal *w = open_wal(NULL, 0);
    append_filled(w, PAGE + 100, 'x'); /* FIRST fills page 0, LAST in page 1 */
    bdb_wal_close(w);
    assert_int_equal(truncate(eu_wal_seg(waldir, 1), PAGE), 0);
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(g.n, 0);
    assert_int_equal(st.corruptions, 1);
    assert_non_null(strstr(st.first_error, "offset 32768: torn record"));
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), 0);
}

/* One hand-made fragment at out + *off. */
static void put_frag(uint8_t *out, size_t *off, uint8_t type, const uint8_t *pl, size_t n)
{
    out[*off] = type;
    out[*off + 1] = (uint8_t)n;
    out[*off + 2] = (uint8_t)(n >> 8);
    uLong c = crc32(0L, &type, 1);
    c = crc32(c, pl, (uInt)n);
    out[*off + 3] = (uint8_t)c;
    out[*off + 4] = (uint8_t)(c >> 8);
    out[*off + 5] = (uint8_t)(c >> 16);
    out[*off + 6] = (uint8_t)(c >> 24);
    if (n)
        memcpy(out + *off + HDR, pl, n);
    *off += HDR + n;
}

/* Segment 1: a good FULL record of 10 bytes, then fragment `second` (reaching the page
 * end when a third follows) and `third` (0 = none; a FIRST or MIDDLE fills its page, as
 * it must, so the sequence check is what fails). */
static void check_sequence(uint8_t second, uint8_t third, const char *err)
{
    tu_rm_rf(waldir);
    assert_int_equal(mkdir(waldir, 0755), 0);
    static uint8_t seg[2 * PAGE];
    memset(seg, 0, sizeof seg);
    uint8_t pl[PAGE];
    memset(pl, 'q', sizeof pl);
    size_t off = 0;
    put_frag(seg, &off, 1, pl, 10);
    size_t good = off;
    if (third) {
        put_frag(seg, &off, second, pl, PAGE - off - HDR);
        put_frag(seg, &off, third, pl, third == 2 || third == 3 ? PAGE - HDR : 5);
    } else {
        put_frag(seg, &off, second, pl, 5);
    }
    eu_write_file(eu_wal_seg(waldir, 1), seg, off);
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.len[0], 10);
    assert_int_equal(st.corruptions, 1);
    assert_non_null(strstr(st.first_error, err));
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), good);
}

static void test_fragment_sequences(void **state)
{
    (void)state;
    /* LAST, or a MIDDLE reaching the page end, outside a record */
    check_sequence(4, 0, "bad fragment sequence");
    check_sequence(3, 4, "bad fragment sequence");
    /* FULL or FIRST inside one */
    check_sequence(2, 1, "bad fragment sequence");
    check_sequence(2, 2, "bad fragment sequence");
    /* a MIDDLE shorter than its page: the header check comes first */
    check_sequence(3, 0, "bad header");

    /* an empty record written as an empty FIRST (exactly 7 bytes before the page end)
     * and an empty LAST: one empty record, not a NULL pointer */
    tu_rm_rf(waldir);
    assert_int_equal(mkdir(waldir, 0755), 0);
    static uint8_t seg[2 * PAGE];
    memset(seg, 0, sizeof seg);
    uint8_t pl[PAGE];
    memset(pl, 'z', sizeof pl);
    size_t off = 0;
    put_frag(seg, &off, 1, pl, PAGE - 2 * HDR);
    put_frag(seg, &off, 2, pl, 0);
    assert_int_equal(off, PAGE);
    put_frag(seg, &off, 4, pl, 0);
    eu_write_file(eu_wal_seg(waldir, 1), seg, off);
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(st.corruptions, 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.len[1], 0);
}

static void test_foreign_names_and_many_segments(void **state)
{
    (void)state;
    assert_int_equal(mkdir(waldir, 0755), 0);
    const char *foreign[] = {"notes.txt", "0000000000000000000a", "-0000000000000000001",
                             "000000000000000000001", "99999999999999999999"};
    char p[256];
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        snprintf(p, sizeof p, "%s/%s", waldir, foreign[i]);
        eu_write_file(p, (const uint8_t *)"junk", 4);
    }
    /* 20 segments of one record each, sealed by cuts (the list grows past 16) */
    bdb_wal *w = open_wal(NULL, 0);
    for (int i = 0; i < 20; i++) {
        append_filled(w, 50, 'A' + i);
        assert_int_equal(bdb_wal_cut(w, NULL), BDB_OK);
    }
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 21);
    bdb_wal_close(w);
    got g;
    bdb_wal_replay_stats st;
    memset(&g, 0, sizeof g);
    w = open_wal(NULL, 0);
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 22); /* none of the foreign names counted */
    assert_int_equal(bdb_wal_replay(w, 0, collect, &g, &st), BDB_OK);
    assert_int_equal(g.n, 20);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(g.first[i], 'A' + i);
        assert_int_equal(g.seg[i], (uint64_t)i + 1);
    }
    assert_int_equal(st.corruptions, 0);
    assert_int_equal(bdb_wal_remove_upto(w, 21), BDB_OK);
    bdb_wal_close(w);
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        snprintf(p, sizeof p, "%s/%s", waldir, foreign[i]);
        assert_int_equal(eu_file_size(p), 4); /* never touched */
    }
    assert_int_equal(access(eu_wal_seg(waldir, 21), F_OK), -1);
}

static void test_arguments(void **state)
{
    (void)state;
    bdb_wal *w = NULL;
    bdb_wal_opts o = {.dir = waldir};
    assert_int_equal(bdb_wal_open(NULL, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_wal_open(&o, NULL), BDB_ERR_INVALID);
    o.dir = NULL;
    assert_int_equal(bdb_wal_open(&o, &w), BDB_ERR_INVALID);
    assert_null(w);
    w = open_wal(NULL, 0);
    uint8_t r[8] = {7};
    assert_int_equal(bdb_wal_append(w, r, SIZE_MAX / 2 + 1, NULL), BDB_ERR_INVALID);
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.appends, 0);
    assert_int_equal(ws.bytes_on_disk, 0);
    /* an lsn past anything handed out is refused rather than waited for */
    assert_int_equal(bdb_wal_sync(w, 1), BDB_ERR_INVALID);
    assert_int_equal(bdb_wal_append(w, r, sizeof r, NULL), BDB_OK);
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.appends, 1);
    assert_int_equal(bdb_wal_sync(w, ws.bytes_on_disk), BDB_OK);
    /* the segment being written cannot be removed */
    assert_int_equal(bdb_wal_remove_upto(w, ws.current_segment), BDB_ERR_INVALID);
    bdb_wal_close(w);
    bdb_wal_close(NULL);
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.first[0], 7);
}

static void test_out_of_memory_at_segment_edges(void **state)
{
    (void)state;
    /* segments roll after 100 bytes: every second append seals and creates */
    bdb_wal *w = open_wal(NULL, 100);
    append_filled(w, 120, 'a');
    /* the seal's list growth is the first allocation of the next append */
    eu_arm(1);
    uint8_t r[16];
    memset(r, 'b', sizeof r);
    assert_int_equal(bdb_wal_append(w, r, sizeof r, NULL), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.appends, 1);
    assert_int_equal(ws.current_segment, 1); /* still open and current */
    assert_int_equal(ws.failed, 0);
    /* the same for a cut */
    eu_arm(1);
    assert_int_equal(bdb_wal_cut(w, NULL), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 1);
    /* sealing works, creating the next segment's name does not: the append fails,
     * and the next one creates the segment */
    eu_arm(2);
    assert_int_equal(bdb_wal_append(w, r, sizeof r, NULL), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.segments_on_disk, 1); /* sealed, no current one */
    assert_int_equal(bdb_wal_sync(w, 0), BDB_OK);
    r[0] = 'c';
    assert_int_equal(bdb_wal_append(w, r, sizeof r, NULL), BDB_OK);
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 2);
    assert_int_equal(ws.appends, 2);
    /* a cut whose next segment cannot be named still seals (documented success) */
    uint64_t sealed = 0;
    eu_arm(1);
    assert_int_equal(bdb_wal_cut(w, &sealed), BDB_OK);
    bdb_alloc_fail_disarm();
    assert_int_equal(sealed, 2);
    r[0] = 'd';
    assert_int_equal(bdb_wal_append(w, r, sizeof r, NULL), BDB_OK);
    bdb_wal_close(w);
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(st.corruptions, 0);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.first[0], 'a');
    assert_int_equal(g.first[1], 'c');
    assert_int_equal(g.first[2], 'd');
    assert_int_equal(g.seg[2], 3);
}

/* Segments 1 and 2, each with two good records and a damaged tail. */
static uint8_t *damaged[2];
static size_t damaged_len[2];

static void write_damaged(void)
{
    tu_rm_rf(waldir);
    assert_int_equal(mkdir(waldir, 0755), 0);
    for (int i = 0; i < 2; i++)
        eu_write_file(eu_wal_seg(waldir, (uint64_t)i + 1), damaged[i], damaged_len[i]);
}

static void test_io_failure_during_replay(void **state)
{
    (void)state;
    bdb_wal *w = open_wal(NULL, 0);
    for (int s = 0; s < 2; s++) {
        append_filled(w, 30, 'a' + 2 * s);
        append_filled(w, 40, 'b' + 2 * s);
        assert_int_equal(bdb_wal_cut(w, NULL), BDB_OK);
    }
    bdb_wal_close(w);
    for (int i = 0; i < 2; i++) {
        damaged[i] = read_file(eu_wal_seg(waldir, (uint64_t)i + 1), &damaged_len[i]);
        uint8_t *p = realloc(damaged[i], damaged_len[i] + 9);
        assert_non_null(p);
        memset(p + damaged_len[i], 0x5a, 9); /* garbage after the last record */
        damaged[i] = p;
        damaged_len[i] += 9;
    }
    write_damaged();
    got g;
    bdb_wal_replay_stats st;
    replay_all(&g, &st);
    assert_int_equal(g.n, 4);
    assert_int_equal(st.corruptions, 2);
    assert_non_null(strstr(st.first_error, "segment 1 "));
    assert_int_equal(st.corrupt_bytes, 18);

    /* every call of open + replay fails once in turn */
    int hits = 0;
    for (uint64_t n = 1; n < 200; n++) {
        write_damaged();
        failvfs v;
        fv_init(&v, bdb_vfs_posix(), n, EIO);
        bdb_wal_opts o = {.dir = waldir, .vfs = &v.base};
        bdb_wal *fw = NULL;
        int rc = bdb_wal_open(&o, &fw);
        memset(&g, 0, sizeof g);
        if (rc == BDB_OK) {
            rc = bdb_wal_replay(fw, 0, collect, &g, &st);
            bdb_wal_close(fw);
        }
        if (v.failed_op == FV_NONE) {
            assert_int_equal(rc, BDB_OK);
            break;
        }
        if (rc == BDB_OK) /* only a failed close goes unreported (the file is released) */
            assert_int_equal(v.failed_op, FV_CLOSE);
        else /* a failed directory fsync makes the new segment's WAL read-only */
            assert_true(rc == BDB_ERR_IO || (rc == BDB_ERR_READONLY && v.failed_op == FV_SYNC_DIR));
        hits += v.failed_op == FV_TRUNCATE || (v.failed_op == FV_OPEN && g.n > 0);
        /* what was delivered is a prefix of the good records */
        for (size_t i = 0; i < g.n && i < 4; i++)
            assert_int_equal(g.first[i], "abcd"[i]);
        assert_true(g.n <= 4);
        /* and nothing good was lost */
        got all;
        replay_all(&all, &st);
        assert_int_equal(all.n, 4);
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(all.first[i], "abcd"[i]);
    }
    assert_true(hits >= 2); /* the truncation's open and truncate were among them */
    free(damaged[0]);
    free(damaged[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_page_padding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_fragment_at_eof, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fragment_sequences, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_names_and_many_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_memory_at_segment_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_io_failure_during_replay, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
