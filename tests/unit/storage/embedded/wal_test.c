/* wal: round trips across page and segment boundaries, the on-disk layout, the seven
 * kinds of damage (each hand-made in a segment's bytes), random bit flips, group commit
 * from several threads, a failed fsync, and power loss through the fault VFS. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "storage/embedded/engutil.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "storage/embedded/core/wal.h"
#include "storage/vfs/vfs.h"
#include "storage/vfs/vfs_fault.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE (32 * 1024)
#define HDR 7

static char tmpdir[64];
static char waldir[96];

static uint64_t rng_state;

static void rng_seed(uint64_t s)
{
    rng_state = s ? s : 1;
}

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int setup(void **state)
{
    (void)state;
    eu_scratch(tmpdir, sizeof tmpdir, "wal", EU_TMPFS, NULL, 0);
    snprintf(waldir, sizeof(waldir), "%s/wal", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return eu_cleanup(tmpdir);
}

/* ---- the records we append: content is a pure function of (id, len) ---- */

typedef struct recs {
    uint8_t **data;
    size_t *len;
    size_t n, cap;
} recs;

static void recs_push(recs *r, const uint8_t *p, size_t len)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->data = realloc(r->data, r->cap * sizeof(*r->data));
        r->len = realloc(r->len, r->cap * sizeof(*r->len));
        assert_non_null(r->data);
        assert_non_null(r->len);
    }
    r->data[r->n] = malloc(len ? len : 1);
    assert_non_null(r->data[r->n]);
    if (len)
        memcpy(r->data[r->n], p, len);
    r->len[r->n++] = len;
}

static void recs_free(recs *r)
{
    for (size_t i = 0; i < r->n; i++)
        free(r->data[i]);
    free(r->data);
    free(r->len);
    memset(r, 0, sizeof(*r));
}

static uint8_t *make_rec(uint64_t id, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    uint64_t x = id * 0x9E3779B97F4A7C15ULL + len + 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
    return p;
}

/* Appends a record made from (id, len) and remembers it in `want`. */
static uint64_t append_rec(bdb_wal *w, recs *want, uint64_t id, size_t len)
{
    uint8_t *p = make_rec(id, len);
    uint64_t lsn = 0;
    assert_int_equal(bdb_wal_append(w, p, len, &lsn), BDB_OK);
    if (want)
        recs_push(want, p, len);
    free(p);
    return lsn;
}

typedef struct got {
    recs r;
    uint64_t seg[4096];
    int stop_at; /* stop replay (return 7) when this many records have been seen */
} got;

static int collect(void *ctx, const uint8_t *rec, size_t len, uint64_t segment)
{
    got *g = ctx;
    if (g->r.n < 4096)
        g->seg[g->r.n] = segment;
    recs_push(&g->r, rec, len);
    return g->stop_at && (int)g->r.n >= g->stop_at ? 7 : 0;
}

/* The delivered records must be exactly want[first .. first+n). */
static void expect_records(const recs *r, size_t from, const recs *want, size_t first, size_t n)
{
    assert_true(r->n >= from + n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(r->len[from + i], want->len[first + i]);
        assert_memory_equal(r->data[from + i], want->data[first + i], want->len[first + i]);
    }
}

static bdb_wal *open_wal(bdb_vfs *vfs, uint64_t segment_bytes)
{
    bdb_wal_opts o = {.dir = waldir, .vfs = vfs, .segment_bytes = segment_bytes};
    bdb_wal *w = NULL;
    assert_int_equal(bdb_wal_open(&o, &w), BDB_OK);
    return w;
}

/* Opens, replays everything into g, and returns the open WAL. */
static bdb_wal *reopen_replay(got *g, bdb_wal_replay_stats *st)
{
    bdb_wal *w = open_wal(NULL, 0);
    memset(g, 0, sizeof(*g));
    assert_int_equal(bdb_wal_replay(w, 0, collect, g, st), BDB_OK);
    return w;
}

/* ---- round trips and layout ---- */

static void test_round_trip(void **state)
{
    (void)state;
    static const size_t edges[] = {0,        1,          PAGE - HDR,     PAGE - 2 * HDR,
                                   PAGE,     PAGE - 10,  PAGE - 14,      2 * (PAGE - HDR),
                                   PAGE - 8, PAGE - 6,   3 * PAGE - 100, 100000,
                                   600000,   PAGE - HDR, PAGE - HDR + 1, PAGE - HDR - 1};
    bdb_wal *w = open_wal(NULL, 0);
    recs want = {0};
    rng_seed(42);
    uint64_t id = 0, total = 0;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        append_rec(w, &want, id++, edges[i]);
        for (int k = 0; k < 12; k++) /* random sizes, a third of them above a page */
            append_rec(w, &want, id++, (size_t)(rng() % (k % 3 == 0 ? 90000 : 3000)));
    }
    for (size_t i = 0; i < want.n; i++)
        total += want.len[i];
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.appends, want.n);
    assert_int_equal(ws.bytes, total);
    assert_int_equal(ws.current_segment, 1);
    bdb_wal_close(w);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, want.n);
    expect_records(&g.r, 0, &want, 0, want.n);
    assert_int_equal(st.records, want.n);
    assert_int_equal(st.bytes, total);
    assert_int_equal(st.segments, 1);
    assert_int_equal(st.corruptions, 0);
    assert_string_equal(st.first_error, "");
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 2); /* appends go to a fresh segment */
    assert_int_equal(ws.segments_on_disk, 2);
    assert_int_equal(ws.bytes_on_disk, eu_file_size(eu_wal_seg(waldir, 1)));

    /* Records appended after a reopen follow the old ones on the next replay. */
    append_rec(w, &want, id++, 5);
    bdb_wal_close(w);
    recs_free(&g.r);
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, want.n);
    expect_records(&g.r, 0, &want, 0, want.n);
    assert_int_equal(g.seg[want.n - 1], 2);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

/* Page tails, an empty FIRST fragment, and a record that fills a page exactly. */
static void test_layout(void **state)
{
    (void)state;
    bdb_wal *w = open_wal(NULL, 0);
    recs want = {0};
    append_rec(w, &want, 1, PAGE - HDR);     /* fills page 0 exactly */
    append_rec(w, &want, 2, PAGE - 10);      /* leaves 3 bytes of page 1 */
    append_rec(w, &want, 3, 5);              /* padding, then page 2 */
    append_rec(w, &want, 4, PAGE - 12 - 14); /* leaves exactly 7 bytes of page 2 */
    append_rec(w, &want, 5, 10);             /* empty FIRST, LAST on page 3 */
    bdb_wal_close(w);

    void *data;
    size_t len;
    assert_int_equal(bdb_vfs_read_all(bdb_vfs_posix(), eu_wal_seg(waldir, 1), &data, &len), BDB_OK);
    const uint8_t *p = data;
    assert_int_equal(len, 3 * PAGE + HDR + 10);
    assert_int_equal(p[0], 1); /* FULL */
    assert_int_equal(p[1] | p[2] << 8, PAGE - HDR);
    assert_int_equal(p[PAGE], 1);
    for (int i = 0; i < 3; i++)
        assert_int_equal(p[2 * PAGE - 3 + i], 0);
    assert_int_equal(p[2 * PAGE], 1);
    assert_int_equal(p[2 * PAGE + 12], 1);
    assert_int_equal(p[3 * PAGE - HDR], 2); /* FIRST with no payload */
    assert_int_equal(p[3 * PAGE - HDR + 1] | p[3 * PAGE - HDR + 2] << 8, 0);
    assert_int_equal(p[3 * PAGE], 4); /* LAST */
    assert_int_equal(p[3 * PAGE + 1] | p[3 * PAGE + 2] << 8, 10);
    free(data);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(st.corruptions, 0);
    assert_int_equal(g.r.n, want.n);
    expect_records(&g.r, 0, &want, 0, want.n);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

static void test_segment_roll(void **state)
{
    (void)state;
    const uint64_t seg_bytes = 100 * 1024;
    bdb_wal *w = open_wal(NULL, seg_bytes);
    recs want = {0};
    rng_seed(7);
    for (uint64_t i = 0; i < 80; i++)
        append_rec(w, &want, i, (size_t)(rng() % 20000));
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_true(ws.segments_on_disk >= 5);
    assert_int_equal(ws.current_segment, ws.segments_on_disk);
    bdb_wal_close(w);
    for (uint64_t s = 1; s < ws.current_segment; s++) {
        /* A segment rolls at the first append past the limit: over by < one record. */
        uint64_t sz = eu_file_size(eu_wal_seg(waldir, s));
        assert_true(sz >= seg_bytes && sz < seg_bytes + 20000 + 2 * PAGE);
    }

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, want.n);
    expect_records(&g.r, 0, &want, 0, want.n);
    assert_int_equal(st.segments, ws.current_segment);
    for (size_t i = 1; i < g.r.n; i++)
        assert_true(g.seg[i] >= g.seg[i - 1]);
    assert_int_equal(g.seg[g.r.n - 1], ws.current_segment);

    /* cb returning non-zero stops replay with that value. */
    bdb_wal_close(w);
    recs_free(&g.r);
    w = open_wal(NULL, 0);
    memset(&g, 0, sizeof(g));
    g.stop_at = 3;
    assert_int_equal(bdb_wal_replay(w, 0, collect, &g, NULL), 7);
    assert_int_equal(g.r.n, 3);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

static void test_cut_replay_from_and_remove(void **state)
{
    (void)state;
    bdb_wal *w = open_wal(NULL, 0);
    recs want = {0};
    uint64_t s1, s2;
    for (uint64_t i = 0; i < 3; i++)
        append_rec(w, &want, i, 100);
    assert_int_equal(bdb_wal_cut(w, &s1), BDB_OK);
    for (uint64_t i = 3; i < 6; i++)
        append_rec(w, &want, i, 40000);
    assert_int_equal(bdb_wal_cut(w, &s2), BDB_OK);
    for (uint64_t i = 6; i < 8; i++)
        append_rec(w, &want, i, 7);
    assert_int_equal(s1, 1);
    assert_int_equal(s2, 2);
    assert_int_equal(bdb_wal_remove_upto(w, 3), BDB_ERR_INVALID); /* still being written */
    bdb_wal_close(w);

    w = open_wal(NULL, 0);
    got g = {0};
    bdb_wal_replay_stats st;
    assert_int_equal(bdb_wal_replay(w, s2, collect, &g, &st), BDB_OK);
    assert_int_equal(g.r.n, 5);
    expect_records(&g.r, 0, &want, 3, 5);
    assert_int_equal(st.segments, 2);
    assert_int_equal(g.seg[0], 2);
    assert_int_equal(g.seg[4], 3);
    recs_free(&g.r);

    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.segments_on_disk, 4);
    assert_int_equal(bdb_wal_remove_upto(w, s1), BDB_OK);
    assert_false(bdb_vfs_exists(bdb_vfs_posix(), eu_wal_seg(waldir, 1)));
    assert_true(bdb_vfs_exists(bdb_vfs_posix(), eu_wal_seg(waldir, 2)));
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.segments_on_disk, 3);
    memset(&g, 0, sizeof(g));
    assert_int_equal(bdb_wal_replay(w, 0, collect, &g, NULL), BDB_OK);
    assert_int_equal(g.r.n, 5);
    expect_records(&g.r, 0, &want, 3, 5);
    recs_free(&g.r);
    assert_int_equal(bdb_wal_remove_upto(w, 3), BDB_OK);
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.segments_on_disk, 1);
    assert_int_equal(ws.bytes_on_disk, 0);
    bdb_wal_close(w);
    recs_free(&want);
}

/* ---- hand-made damage ---- */

/* Segment 1: r0, r1 (100 B each, FULL), r2 (40000 B: FIRST filling page 0, LAST on
 * page 1), r3, r4 (100 B). Segment 2: r5, r6. */
enum { R_FULL = 100 + HDR, R2_AT = 2 * R_FULL, R2_LAST_AT = PAGE };
static const uint64_t r2_end = PAGE + HDR + (40000 - (PAGE - R2_AT - HDR));

static void build_fixture(recs *want)
{
    bdb_wal *w = open_wal(NULL, 0);
    append_rec(w, want, 0, 100);
    append_rec(w, want, 1, 100);
    append_rec(w, want, 2, 40000);
    append_rec(w, want, 3, 100);
    append_rec(w, want, 4, 100);
    uint64_t sealed;
    assert_int_equal(bdb_wal_cut(w, &sealed), BDB_OK);
    append_rec(w, want, 5, 100);
    append_rec(w, want, 6, 100);
    bdb_wal_close(w);
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), r2_end + 2 * R_FULL);
}

static void poke(uint64_t off, const void *bytes, size_t n)
{
    FILE *f = fopen(eu_wal_seg(waldir, 1), "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, (long)off, SEEK_SET), 0);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

typedef struct damage_case {
    const char *name;
    uint64_t off;        /* where to write */
    uint8_t bytes[7];    /* what to write */
    size_t n;            /* how many; 0 = truncate the file at off instead */
    size_t keep;         /* records of segment 1 that must survive */
    uint64_t valid_end;  /* segment 1's size after repair */
    uint64_t err_off;    /* reported offset of the damage */
    const char *message; /* expected in first_error */
} damage_case;

static void run_damage(const damage_case *c)
{
    recs want = {0};
    build_fixture(&want);
    uint64_t before = eu_file_size(eu_wal_seg(waldir, 1));
    if (c->n == 0)
        assert_int_equal(truncate(eu_wal_seg(waldir, 1), (off_t)c->off), 0);
    else
        poke(c->off, c->bytes, c->n);
    uint64_t damaged = eu_file_size(eu_wal_seg(waldir, 1));
    assert_true(c->n == 0 || damaged == before);

    got g;
    bdb_wal_replay_stats st;
    bdb_wal *w = reopen_replay(&g, &st);
    /* The valid prefix of segment 1, then all of segment 2. */
    assert_int_equal(g.r.n, c->keep + 2);
    expect_records(&g.r, 0, &want, 0, c->keep);
    expect_records(&g.r, c->keep, &want, 5, 2);
    assert_int_equal(g.seg[c->keep], 2);
    assert_int_equal(st.corruptions, 1);
    assert_int_equal(st.corrupt_bytes, damaged - c->valid_end);
    assert_int_equal(st.segments, 2);
    char expect[256];
    snprintf(expect, sizeof(expect), "segment 1 offset %llu: %s", (unsigned long long)c->err_off,
             c->message);
    if (strncmp(st.first_error, expect, strlen(expect)) != 0)
        fail_msg("%s: first_error '%s', expected '%s'", c->name, st.first_error, expect);
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), c->valid_end);
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.current_segment, 3); /* a fresh segment follows */
    bdb_wal_close(w);
    recs_free(&g.r);

    /* Repaired for good: the second replay sees the same records and no damage. */
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, c->keep + 2);
    expect_records(&g.r, 0, &want, 0, c->keep);
    assert_int_equal(st.corruptions, 0);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
    tu_rm_rf(waldir);
}

static void test_damage_cases(void **state)
{
    (void)state;
    const uint64_t r3 = r2_end, r4 = r2_end + R_FULL;
    const damage_case cases[] = {
        /* Power lost inside r2's LAST fragment: r2 never completed. */
        {"torn_last_record", PAGE + 10, {0}, 0, 2, R2_AT, PAGE, "torn record"},
        /* ... and inside the last record's header. */
        {"torn_header", r4 + 3, {0}, 0, 4, r4, r4, "torn record"},
        /* r1 claims to be FIRST but ends mid-page. */
        {"bad_header", R_FULL, {2}, 1, 1, R_FULL, R_FULL, "bad header"},
        /* r3 claims to be LAST with no FIRST before it. */
        {"bad_fragment_sequence", r3, {4}, 1, 3, r3, r3, "bad fragment sequence"},
        {"bad_fragment_flag", R_FULL, {123}, 1, 1, R_FULL, R_FULL, "bad type flag"},
        /* r2's FIRST turned into a FULL: structurally fine, caught only because the
         * checksum covers the type byte. Otherwise half of r2 would be delivered. */
        {"first_becomes_full", R2_AT, {1}, 1, 2, R2_AT, R2_AT, "bad checksum"},
        /* One payload byte of r2's LAST fragment. */
        {"bad_checksum", PAGE + HDR + 5, {0xA5}, 1, 2, R2_AT, PAGE, "bad checksum"},
        /* r1's length runs past the page. */
        {"bad_length", R_FULL + 1, {0xff, 0xff}, 2, 1, R_FULL, R_FULL, "bad length"},
        /* r1's header zeroed: a zero record in the middle, followed by data. */
        {"bad_content", R_FULL, {0, 0, 0, 0, 0, 0, 0}, 7, 1, R_FULL, R_FULL, "bad content"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_damage(&cases[i]);
}

/* A file system that grew the file but never wrote the data leaves zeros at the end. */
static void test_zero_filled_tail(void **state)
{
    (void)state;
    recs want = {0};
    build_fixture(&want);
    uint64_t size = eu_file_size(eu_wal_seg(waldir, 1));
    assert_int_equal(truncate(eu_wal_seg(waldir, 1), (off_t)(size + 5000)), 0);
    got g;
    bdb_wal_replay_stats st;
    bdb_wal *w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, 7);
    expect_records(&g.r, 0, &want, 0, 7);
    assert_int_equal(st.corruptions, 1);
    assert_int_equal(st.corrupt_bytes, 5000);
    assert_non_null(strstr(st.first_error, "zero-filled"));
    assert_int_equal(eu_file_size(eu_wal_seg(waldir, 1)), size);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

/* Random bit flips, up to four at a time, half of them aimed at fragment headers:
 * replay must never crash and never deliver anything but an exact prefix. */
static void test_bit_flips(void **state)
{
    (void)state;
    bdb_log_set_level(BDB_LOG_ERROR); /* one warning per trial is noise here */
    recs want = {0};
    bdb_wal *w = open_wal(NULL, 0);
    rng_seed(99);
    for (uint64_t i = 0; i < 120; i++)
        append_rec(w, &want, i, (size_t)(rng() % 10 < 7 ? rng() % 300 : rng() % 70000));
    bdb_wal_close(w);
    void *pristine;
    size_t plen;
    assert_int_equal(bdb_vfs_read_all(bdb_vfs_posix(), eu_wal_seg(waldir, 1), &pristine, &plen),
                     BDB_OK);
    const uint8_t *pp = pristine;

    /* Where the headers are, read with the format's own rules. */
    uint64_t *hdrs = malloc(sizeof(*hdrs) * (plen / HDR + 1));
    size_t nh = 0;
    for (uint64_t pos = 0; pos < plen;) {
        uint64_t room = PAGE - pos % PAGE;
        if (room < HDR) {
            pos += room;
            continue;
        }
        hdrs[nh++] = pos;
        pos += HDR + (uint64_t)(pp[pos + 1] | pp[pos + 2] << 8);
    }
    assert_true(nh > want.n);

    uint8_t *buf = malloc(plen);
    int trials = 150, lost_some = 0;
    for (int t = 0; t < trials; t++) {
        memcpy(buf, pristine, plen);
        int nflips = 1 + (int)(rng() % 4);
        uint64_t bits[4];
        for (int k = 0; k < nflips; k++) {
            uint64_t bit;
            int dup;
            do { /* distinct bits, so two flips never cancel out */
                uint64_t byte = rng() % 2 ? hdrs[rng() % nh] + rng() % HDR : rng() % plen;
                bit = byte * 8 + rng() % 8;
                dup = 0;
                for (int j = 0; j < k; j++)
                    dup |= bits[j] == bit;
            } while (dup);
            bits[k] = bit;
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
        tu_rm_rf(waldir);
        assert_int_equal(mkdir(waldir, 0755), 0);
        FILE *f = fopen(eu_wal_seg(waldir, 1), "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(buf, 1, plen, f), plen);
        assert_int_equal(fclose(f), 0);

        got g;
        bdb_wal_replay_stats st;
        w = reopen_replay(&g, &st);
        assert_true(g.r.n < want.n); /* every flip is noticed and costs its record */
        expect_records(&g.r, 0, &want, 0, g.r.n);
        assert_int_equal(st.corruptions, 1);
        bdb_wal_close(w);
        size_t kept = g.r.n;
        lost_some += kept + 1 < want.n;
        recs_free(&g.r);
        w = reopen_replay(&g, &st);
        assert_int_equal(g.r.n, kept);
        assert_int_equal(st.corruptions, 0);
        bdb_wal_close(w);
        recs_free(&g.r);
    }
    bdb_log_set_level(BDB_LOG_INFO);
    assert_true(lost_some > 0);
    free(buf);
    free(hdrs);
    free(pristine);
    recs_free(&want);
}

/* ---- concurrency ---- */

enum { THREADS = 4, PER_THREAD = 2000 };

typedef struct worker {
    bdb_wal *w;
    uint32_t id;
    int failures;
} worker;

static void *worker_main(void *arg)
{
    worker *k = arg;
    uint8_t rec[64];
    for (uint32_t seq = 0; seq < PER_THREAD; seq++) {
        memset(rec, (int)(k->id * 31 + seq), sizeof(rec));
        memcpy(rec, &k->id, 4);
        memcpy(rec + 4, &seq, 4);
        uint64_t lsn;
        size_t len = 8 + seq % 56;
        if (bdb_wal_append(k->w, rec, len, &lsn) != BDB_OK || bdb_wal_sync(k->w, lsn) != BDB_OK)
            k->failures++;
    }
    return NULL;
}

static void test_group_commit(void **state)
{
    (void)state;
    bdb_wal *w = open_wal(NULL, 256 * 1024); /* small segments: rolls race with syncs */
    pthread_t th[THREADS];
    worker ks[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        ks[i] = (worker){.w = w, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &ks[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ks[i].failures, 0);
    }
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.appends, THREADS * PER_THREAD);
    assert_true(ws.fsyncs > 0);
    print_message("group commit: %llu appends, %llu fsyncs, %llu segments\n",
                  (unsigned long long)ws.appends, (unsigned long long)ws.fsyncs,
                  (unsigned long long)ws.segments_on_disk);
    bdb_wal_close(w);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, THREADS * PER_THREAD);
    assert_int_equal(st.corruptions, 0);
    uint32_t next[THREADS] = {0};
    for (size_t i = 0; i < g.r.n; i++) {
        uint32_t id, seq;
        assert_true(g.r.len[i] >= 8);
        memcpy(&id, g.r.data[i], 4);
        memcpy(&seq, g.r.data[i] + 4, 4);
        assert_true(id < THREADS);
        assert_int_equal(seq, next[id]); /* each thread's records, once, in order */
        assert_int_equal(g.r.len[i], 8 + seq % 56);
        next[id]++;
    }
    bdb_wal_close(w);
    recs_free(&g.r);
}

/* Group commit under power loss: four threads append and sync through the fault VFS
 * until the crash; every record whose sync returned BDB_OK must come back. An LSN
 * check that let a sync return before its bytes were covered would lose some. */
typedef struct crash_worker {
    bdb_wal *w;
    uint32_t id;
    atomic_uint acked; /* records of this thread whose sync returned BDB_OK */
    atomic_int done;
} crash_worker;

static void *crash_worker_main(void *arg)
{
    crash_worker *k = arg;
    uint8_t rec[300];
    for (uint32_t seq = 0; seq < 100000; seq++) {
        memset(rec, (int)seq, sizeof(rec));
        memcpy(rec, &k->id, 4);
        memcpy(rec + 4, &seq, 4);
        uint64_t lsn;
        if (bdb_wal_append(k->w, rec, 8 + seq % 290, &lsn) != BDB_OK ||
            bdb_wal_sync(k->w, lsn) != BDB_OK)
            break;
        atomic_store(&k->acked, seq + 1);
    }
    atomic_store(&k->done, 1);
    return NULL;
}

static void test_group_commit_power_loss(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 11);
    bdb_wal *w = open_wal(fv, 64 * 1024);
    pthread_t th[THREADS];
    crash_worker ks[THREADS];
    for (uint32_t i = 0; i < THREADS; i++) {
        ks[i].w = w;
        ks[i].id = i;
        atomic_init(&ks[i].acked, 0);
        atomic_init(&ks[i].done, 0);
        assert_int_equal(pthread_create(&th[i], NULL, crash_worker_main, &ks[i]), 0);
    }
    /* Crash once enough has been acknowledged (or every worker gave up). */
    for (;;) {
        unsigned total = 0;
        int done = 0;
        for (int i = 0; i < THREADS; i++) {
            total += atomic_load(&ks[i].acked);
            done += atomic_load(&ks[i].done);
        }
        if (total >= 2000 || done == THREADS)
            break;
        sched_yield();
    }
    bdb_vfs_fault_crash(fv, BDB_CRASH_DROP, 512);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    bdb_wal_close(w);
    bdb_vfs_fault_free(fv);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    uint32_t next[THREADS] = {0};
    for (size_t i = 0; i < g.r.n; i++) {
        uint32_t id, seq;
        assert_true(g.r.len[i] >= 8);
        memcpy(&id, g.r.data[i], 4);
        memcpy(&seq, g.r.data[i] + 4, 4);
        assert_true(id < THREADS);
        assert_int_equal(seq, next[id]);
        assert_int_equal(g.r.len[i], 8 + seq % 290);
        next[id]++;
    }
    for (int i = 0; i < THREADS; i++)
        assert_true(next[i] >= atomic_load(&ks[i].acked));
    bdb_wal_close(w);
    recs_free(&g.r);
}

static void test_periodic_mode(void **state)
{
    (void)state;
    bdb_wal_opts o = {.dir = waldir, .sync_mode = BDB_WAL_SYNC_PERIODIC, .periodic_ms = 5};
    bdb_wal *w;
    assert_int_equal(bdb_wal_open(&o, &w), BDB_OK);
    recs want = {0};
    for (uint64_t i = 0; i < 100; i++) {
        uint64_t lsn = append_rec(w, &want, i, (size_t)(i * 37));
        assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
    }
    assert_int_equal(bdb_wal_sync(w, UINT64_MAX), BDB_ERR_INVALID);
    bdb_wal_close(w); /* close syncs whatever the flusher has not */
    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, 100);
    expect_records(&g.r, 0, &want, 0, 100);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

/* ---- faults ---- */

static void test_fsync_failure_is_sticky(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_wal *w = open_wal(fv, 0);
    recs want = {0};
    uint64_t lsn = append_rec(w, &want, 0, 1000);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
    /* Next counted calls: the append's pwrite, then the fsync. Not sticky in the VFS:
     * the WAL itself must refuse to carry on. */
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 2, EIO, 0);
    lsn = append_rec(w, NULL, 1, 1000);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_ERR_READONLY);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_ERR_READONLY);
    assert_int_equal(bdb_wal_sync(w, 0), BDB_ERR_READONLY);
    uint64_t l2;
    assert_int_equal(bdb_wal_append(w, "x", 1, &l2), BDB_ERR_READONLY);
    uint64_t sealed;
    assert_int_equal(bdb_wal_cut(w, &sealed), BDB_ERR_READONLY);
    bdb_wal_stats ws;
    bdb_wal_get_stats(w, &ws);
    assert_int_equal(ws.failed, 1);
    bdb_wal_close(w);
    bdb_vfs_fault_free(fv);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_true(g.r.n >= 1);
    expect_records(&g.r, 0, &want, 0, 1);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

/* A failed write (disk full) is reported, leaves no trace, and the WAL goes on. */
static void test_write_failure_recovers(void **state)
{
    (void)state;
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
    bdb_wal *w = open_wal(fv, 0);
    recs want = {0};
    append_rec(w, &want, 0, 50000);
    bdb_vfs_fault_fail_at(fv, bdb_vfs_fault_calls(fv) + 1, ENOSPC, 0);
    uint8_t *p = make_rec(1, 70000);
    uint64_t lsn;
    assert_int_equal(bdb_wal_append(w, p, 70000, &lsn), BDB_ERR_NOSPACE);
    free(p);
    lsn = append_rec(w, &want, 2, 300);
    assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
    bdb_wal_close(w);
    bdb_vfs_fault_free(fv);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_int_equal(g.r.n, 2);
    expect_records(&g.r, 0, &want, 0, 2);
    assert_int_equal(st.corruptions, 0);
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
}

/* Appends with a sync every few records, crashes with unsynced writes in flight, and
 * checks that what comes back is an exact prefix holding every acknowledged record. */
static void power_loss(enum bdb_fault_crash_mode mode, uint64_t seed, int *lost)
{
    bdb_vfs *fv = bdb_vfs_fault_new(bdb_vfs_posix(), seed);
    bdb_wal *w = open_wal(fv, 128 * 1024);
    recs want = {0};
    size_t acked = 0;
    rng_seed(seed);
    int n = 60 + (int)(rng() % 40);
    for (int i = 0; i < n; i++) {
        uint64_t lsn =
            append_rec(w, &want, (uint64_t)i, (size_t)(rng() % 3 ? rng() % 2000 : rng() % 40000));
        if (rng() % 4 == 0) {
            assert_int_equal(bdb_wal_sync(w, lsn), BDB_OK);
            acked = want.n;
        }
    }
    bdb_vfs_fault_crash(fv, mode, 512);
    bdb_wal_close(w);
    bdb_vfs_fault_free(fv);

    got g;
    bdb_wal_replay_stats st;
    w = reopen_replay(&g, &st);
    assert_true(g.r.n >= acked);
    assert_true(g.r.n <= want.n);
    expect_records(&g.r, 0, &want, 0, g.r.n);
    *lost += g.r.n < want.n;
    bdb_wal_close(w);
    recs_free(&g.r);
    recs_free(&want);
    tu_rm_rf(waldir);
}

static void test_power_loss_drop(void **state)
{
    (void)state;
    int lost = 0;
    for (uint64_t seed = 1; seed <= 12; seed++)
        power_loss(BDB_CRASH_DROP, seed, &lost);
    assert_true(lost > 0); /* the crash really threw unsynced records away */
}

static void test_power_loss_tear(void **state)
{
    (void)state;
    int lost = 0;
    for (uint64_t seed = 1; seed <= 12; seed++)
        power_loss(BDB_CRASH_TEAR, seed, &lost);
    assert_true(lost > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_segment_roll, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_replay_from_and_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damage_cases, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zero_filled_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bit_flips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_power_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_periodic_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_failure_is_sticky, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_failure_recovers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_power_loss_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_power_loss_tear, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
