/* merge: the newest-write-wins merger (storage/embedded/core/merge.h) on its own:
 * priorities, duplicates within a source, empty sources, many sources and large inputs
 * checked against a plain reference merge, each path of the sort (already ascending,
 * two runs to rotate, qsort), head chunks with side lists, encoded chunks (bounds and
 * damage), every output (arrays, per partition, block chunks) and running out of
 * memory (the merge fails whole, never with part of the samples). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "storage/embedded/block/block.h"
#include "storage/embedded/chunk/chunk.h"
#include "storage/embedded/core/db_int.h" /* hchunk */
#include "storage/embedded/core/merge.h"
#include "storage/vfs/vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 1;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- a plain reference: for each time, the sample of the highest priority, the
 * first pushed among equals; quadratic, for small inputs only ---- */

typedef struct ref_samp {
    int64_t ts;
    uint64_t prio;
    double v;
} ref_samp;

typedef struct ref {
    ref_samp *v;
    size_t n, cap;
} ref;

static void ref_put(ref *r, int64_t ts, uint64_t prio, double v)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].ts == ts) {
            if (prio > r->v[i].prio)
                r->v[i] = (ref_samp){ts, prio, v};
            return;
        }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 64;
        r->v = realloc(r->v, r->cap * sizeof *r->v);
        assert_non_null(r->v);
    }
    r->v[r->n++] = (ref_samp){ts, prio, v};
}

static int ref_cmp(const void *a, const void *b)
{
    const ref_samp *x = a, *y = b;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* Pushes one sample into both. */
static void both(db_merger *m, ref *r, int64_t ts, double v)
{
    db_merger_push(m, ts, v);
    ref_put(r, ts, m->prio, v);
}

/* Sorts m and checks it against r (which it frees). */
static void check_ref(db_merger *m, ref *r)
{
    assert_int_equal(db_merger_sort(m), BDB_OK);
    if (r->n > 1)
        qsort(r->v, r->n, sizeof *r->v, ref_cmp);
    assert_int_equal(m->n, r->n);
    for (size_t i = 0; i < r->n; i++) {
        assert_int_equal(m->t[i].ts, r->v[i].ts);
        assert_true(m->t[i].v == r->v[i].v);
    }
    free(r->v);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- priorities */

static void test_priority_wins(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    /* the newest source first, as a read gathers the head before the blocks */
    db_merger_source(&m, 9, 0);
    db_merger_push(&m, 20, 2.9);
    db_merger_push(&m, 30, 3.9);
    db_merger_source(&m, 3, 0);
    db_merger_push(&m, 10, 1.3);
    db_merger_push(&m, 20, 2.3);
    db_merger_push(&m, 30, 3.3);
    db_merger_push(&m, 40, 4.3);
    db_merger_source(&m, 5, 0);
    db_merger_push(&m, 30, 3.5);
    db_merger_push(&m, 40, 4.5);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    const int64_t ts[] = {10, 20, 30, 40};
    const double v[] = {1.3, 2.9, 3.9, 4.5};
    assert_int_equal(m.n, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(m.t[i].ts, ts[i]);
        assert_true(m.t[i].v == v[i]);
    }
    db_merger_free(&m);
}

/* Within one source a time given twice keeps the first; a higher priority still wins. */
static void test_duplicates_in_a_source(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 1, 0);
    db_merger_push(&m, 5, 0.5);
    db_merger_push(&m, 7, 0.7);
    db_merger_push(&m, 5, 9.5);
    db_merger_push(&m, 7, 9.7);
    db_merger_push(&m, 6, 0.6);
    db_merger_source(&m, 2, 0);
    db_merger_push(&m, 7, 2.7);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, 3);
    assert_int_equal(m.t[0].ts, 5);
    assert_true(m.t[0].v == 0.5);
    assert_int_equal(m.t[1].ts, 6);
    assert_int_equal(m.t[2].ts, 7);
    assert_true(m.t[2].v == 2.7);
    /* in order but for the very last sample, which rewrites a time */
    db_merger_clear(&m);
    db_merger_source(&m, 1, 0);
    for (int64_t t = 1; t <= 3; t++)
        db_merger_push(&m, t, 1.0);
    db_merger_source(&m, 2, 0);
    db_merger_push(&m, 2, 2.0);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, 3);
    assert_true(m.t[1].ts == 2 && m.t[1].v == 2.0 && m.t[2].ts == 3);
    db_merger_free(&m);
}

/* The extreme priorities of the callers (UINT64_MAX for a read's newest head chunk, 0
 * for the late recompute's sink rows) and times at the ends of the range. */
static void test_extremes(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 0, 0);
    db_merger_push(&m, INT64_MIN, 1);
    db_merger_push(&m, INT64_MAX, 2);
    db_merger_source(&m, UINT64_MAX, 0);
    db_merger_push(&m, INT64_MAX, 3);
    db_merger_push(&m, INT64_MIN, 4);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, 2);
    assert_int_equal(m.t[0].ts, INT64_MIN);
    assert_true(m.t[0].v == 4);
    assert_int_equal(m.t[1].ts, INT64_MAX);
    assert_true(m.t[1].v == 3);
    db_merger_free(&m);
}

/* ---------------------------------------------------------------- empty */

static void test_empty(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    assert_int_equal(db_merger_sort(&m), BDB_OK); /* nothing ever pushed */
    assert_int_equal(m.n, 0);
    int64_t *ts = NULL;
    double *v = NULL;
    size_t n = 7, cap = 0;
    assert_int_equal(db_merger_samples(&m, &ts, &v, &n, &cap), BDB_OK);
    assert_int_equal(n, 0);
    /* empty sources among full ones change nothing */
    db_merger_source(&m, 4, 0);
    db_merger_source(&m, 2, 0);
    db_merger_push(&m, 1, 1.0);
    db_merger_source(&m, 8, 0);
    assert_int_equal(db_merger_samples(&m, &ts, &v, &n, &cap), BDB_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ts[0], 1);
    assert_int_equal(m.n, 0); /* emptied */
    /* a chunk wholly outside [lo, hi) pushes nothing */
    bdb_buf b;
    bdb_buf_init_checked(&b);
    const int64_t cts[] = {100, 200};
    const double cv[] = {1, 2};
    assert_int_equal(bdb_chunk_encode(cts, cv, 2, &b), BDB_OK);
    db_merger_source(&m, 1, 0);
    assert_int_equal(
        db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = b.data, .len = b.len}, 300, 400), BDB_OK);
    assert_int_equal(m.n, 0);
    bdb_buf_free(&b);
    free(ts);
    free(v);
    db_merger_free(&m);
}

/* ---------------------------------------------------------------- many and large */

/* Hundreds of sources of distinct priorities over a narrow range of times, so that
 * most times repeat across sources; the order of the sources is shuffled. */
static void test_many_sources(void **st)
{
    (void)st;
    rng_state = 0x9e3779b97f4a7c15ull;
    db_merger m;
    memset(&m, 0, sizeof m);
    for (int round = 0; round < 20; round++) {
        ref r = {NULL, 0, 0};
        size_t nsrc = 50 + rng() % 500;
        uint64_t *prio = malloc(nsrc * sizeof *prio);
        assert_non_null(prio);
        for (size_t i = 0; i < nsrc; i++)
            prio[i] = i * 3 + 1;
        for (size_t i = nsrc; i > 1; i--) {
            size_t j = rng() % i;
            uint64_t x = prio[i - 1];
            prio[i - 1] = prio[j];
            prio[j] = x;
        }
        for (size_t s = 0; s < nsrc; s++) {
            db_merger_source(&m, prio[s], 0);
            /* ascending runs, as every real source gives them */
            int64_t t = (int64_t)(rng() % 50);
            for (size_t k = rng() % 40; k > 0; k--) {
                both(&m, &r, t, (double)(rng() % 1000000));
                t += 1 + (int64_t)(rng() % 5);
            }
        }
        check_ref(&m, &r);
        db_merger_clear(&m);
        free(prio);
    }
    db_merger_free(&m);
}

/* Large inputs through each path of the sort: one ascending source (no sort), two
 * ascending runs the second wholly before the first (a rotation), two interleaved
 * runs and a random one (qsort); the buffers are kept between merges. */
static void test_large(void **st)
{
    (void)st;
    enum { N = 300000 };
    db_merger m;
    memset(&m, 0, sizeof m);

    db_merger_source(&m, 1, 0);
    for (int64_t i = 0; i < N; i++)
        db_merger_push(&m, i * 10, (double)i);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, N);
    for (size_t i = 0; i < N; i++)
        assert_true(m.t[i].ts == (int64_t)i * 10 && m.t[i].v == (double)i);
    db_merger_samp *kept = m.t;
    size_t cap = m.cap;
    db_merger_clear(&m);

    /* newer samples first: [N/2, N) at priority 2, then [0, N/2) at priority 1 */
    db_merger_source(&m, 2, 0);
    for (int64_t i = N / 2; i < N; i++)
        db_merger_push(&m, i * 10, (double)i);
    db_merger_source(&m, 1, 0);
    for (int64_t i = 0; i < N / 2; i++)
        db_merger_push(&m, i * 10, (double)i);
    assert_true(m.t == kept && m.cap == cap); /* no allocation for a merge that fits */
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, N);
    for (size_t i = 0; i < N; i++)
        assert_true(m.t[i].ts == (int64_t)i * 10 && m.t[i].v == (double)i);
    db_merger_clear(&m);

    /* interleaved: even times in both, the later source wins them */
    db_merger_source(&m, 1, 0);
    for (int64_t i = 0; i < N / 2; i++)
        db_merger_push(&m, i * 2, -1.0);
    db_merger_source(&m, 2, 0);
    for (int64_t i = 0; i < N / 2; i++)
        db_merger_push(&m, i * 4, (double)i);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, N / 2 + N / 4); /* 0..N-2 even, and 4i up to 2N-4 */
    for (size_t i = 1; i < m.n; i++)
        assert_true(m.t[i - 1].ts < m.t[i].ts);
    for (size_t i = 0; i < m.n; i++)
        assert_true(m.t[i].ts % 4 == 0 ? m.t[i].v == (double)(m.t[i].ts / 4) : m.t[i].v == -1.0);
    db_merger_clear(&m);

    /* random: times in a range of N / 4, so most repeat, against the reference on a
     * sample of it (the reference is quadratic) */
    rng_state = 77;
    for (int round = 0; round < 3; round++) {
        ref r = {NULL, 0, 0};
        for (int s = 0; s < 8; s++) {
            db_merger_source(&m, (uint64_t)(s * 7 % 8), 0);
            for (int k = 0; k < 500; k++)
                both(&m, &r, (int64_t)(rng() % 600), (double)(rng() % 1000));
        }
        check_ref(&m, &r);
        db_merger_clear(&m);
    }
    db_merger_source(&m, 1, 0);
    for (int k = 0; k < N; k++)
        db_merger_push(&m, (int64_t)(rng() % (N / 4)), (double)k);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_true(m.n > N / 5 && m.n <= N / 4);
    for (size_t i = 1; i < m.n; i++)
        assert_true(m.t[i - 1].ts < m.t[i].ts);
    db_merger_free(&m);
}

/* More sources after a sort: the result so far is merged again with them. */
static void test_sort_then_more(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 100, 0);
    db_merger_push(&m, 50, 5.0);
    db_merger_push(&m, 40, 4.0);
    db_merger_source(&m, 101, 0);
    db_merger_push(&m, 50, 5.1);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, 2);
    db_merger_source(&m, 7, 0); /* older: wins only times the first part lacks */
    for (int64_t t = 10; t <= 50; t += 10)
        db_merger_push(&m, t, -1.0);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    const double want[] = {-1.0, -1.0, -1.0, 4.0, 5.1};
    assert_int_equal(m.n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(m.t[i].ts, (int64_t)(i + 1) * 10);
        assert_true(m.t[i].v == want[i]);
    }
    db_merger_free(&m);
}

/* ---------------------------------------------------------------- chunks */

static void test_push_chunk(void **st)
{
    (void)st;
    const int64_t ts[] = {100, 110, 120, 130, 140};
    const double v[] = {1, 2, 3, 4, 5};
    bdb_buf b;
    bdb_buf_init_checked(&b);
    assert_int_equal(bdb_chunk_encode(ts, v, 5, &b), BDB_OK);
    db_merger m;
    memset(&m, 0, sizeof m);
    /* [lo, hi): 110 and 120 only; one source across two chunks keeps counting */
    db_merger_source(&m, 3, 77);
    assert_int_equal(
        db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = b.data, .len = b.len}, 110, 130), BDB_OK);
    assert_int_equal(m.n, 2);
    assert_int_equal(
        db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = b.data, .len = b.len}, 140, 141), BDB_OK);
    assert_int_equal(m.n, 3);
    assert_int_equal(m.t[2].order, 2);
    assert_int_equal(m.t[2].part, 77);
    assert_int_equal(m.t[2].prio, 3);
    /* damage: a bad header, and a stream cut short */
    uint8_t bad[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    assert_int_equal(db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = bad, .len = sizeof bad},
                                          INT64_MIN, INT64_MAX),
                     BDB_ERR_CORRUPT);
    assert_int_equal(
        db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = b.data, .len = 2}, INT64_MIN, INT64_MAX),
        BDB_ERR_CORRUPT);
    bdb_buf_free(&b);
    db_merger_free(&m);
}

/* Leaves out one chunk, counting the chunks it was asked about. */
struct skipper {
    int *calls;
    const hchunk *skip;
};

static int skip_cb(const void *ctx, const struct hchunk *x)
{
    const struct skipper *sk = ctx;
    (*sk->calls)++;
    return x == sk->skip;
}

/* A head chunk by hand: its stream, and a side list that rewrites a time twice and
 * adds an older one; the side list's last write of a time wins inside the chunk, and
 * the chunk's priority against the others. */
static void test_head_chunks(void **st)
{
    (void)st;
    /* the stream's bytes follow the struct, then c0's side list, as head.c lays them
     * out */
    size_t side_bytes = sizeof(struct hc_ooo) + 3 * sizeof(struct ooo_sample);
    hchunk *c0 = calloc(1, sizeof(hchunk) + 256 + side_bytes),
           *c1 = calloc(1, sizeof(hchunk) + 256);
    assert_non_null(c0);
    assert_non_null(c1);
    hchunk *c[2] = {c0, c1};
    const struct ooo_sample side[3] = {{20, 2.5}, {5, 0.5}, {20, 2.75}};
    for (int k = 0; k < 2; k++) {
        bdb_chunk_state_init(&c[k]->st);
        c[k]->st.owner = 256;
        c[k]->lo = 0;
        c[k]->span = 1000;
    }
    for (int64_t t = 10; t <= 40; t += 10)
        assert_int_equal(bdb_chunk_stream_put(&c0->st, c0->buf, t, (double)t), BDB_OK);
    c0->st.owner |= HC_HAS_OOO;
    struct hc_ooo *o = hc_ooo(c0);
    o->n = o->cap = 3;
    memcpy(o->s, side, sizeof side);
    assert_int_equal(hc_nooo(c0), 3);
    assert_int_equal(bdb_chunk_stream_put(&c1->st, c1->buf, 30, -30.0), BDB_OK); /* newer */
    c1->next = c0;

    db_merger m;
    memset(&m, 0, sizeof m);
    /* the list, newest first: c[1] at base + 2, c[0] at base + 1 */
    assert_int_equal(db_merger_add_list(&m, c1, INT64_MIN, INT64_MAX, 40, NULL, NULL), 42);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    const int64_t ts[] = {5, 10, 20, 30, 40};
    const double v[] = {0.5, 10, 2.75, -30, 40};
    assert_int_equal(m.n, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(m.t[i].ts, ts[i]);
        assert_true(m.t[i].v == v[i]);
    }
    db_merger_clear(&m);
    /* [lo, hi): c[0] gives 10 20 30, c[1] 30; then c[1] skipped */
    db_merger_add_list(&m, c1, 10, 31, 0, NULL, NULL);
    assert_int_equal(m.n, 4);
    db_merger_clear(&m);
    int calls = 0;
    struct skipper sk = {&calls, c1};
    db_merger_add_list(&m, c1, INT64_MIN, INT64_MAX, 0, skip_cb, &sk);
    assert_int_equal(calls, 2);
    assert_int_equal(db_merger_sort(&m), BDB_OK);
    assert_int_equal(m.n, 5);
    assert_true(m.t[3].v == 30.0); /* c[0]'s own: c[1] was skipped */
    db_merger_clear(&m);
    /* one chunk on its own, with its priority and partition */
    db_merger_add_head(&m, c1, INT64_MIN, INT64_MAX, 9, 1234);
    assert_int_equal(m.n, 1);
    assert_int_equal(m.t[0].prio, 9);
    assert_int_equal(m.t[0].part, 1234);
    db_merger_free(&m);
    free(c0);
    free(c1);
}

/* ---------------------------------------------------------------- outputs */

struct parts {
    int64_t part[8];
    size_t n[8];
    int64_t ts[8][16];
    size_t nparts;
    int fail_at; /* put number (1-based) that fails, 0 = none */
};

static int put_cb(void *ctx, int64_t part, const int64_t *ts, const double *v, size_t n)
{
    struct parts *p = ctx;
    (void)v;
    if (p->fail_at && (int)p->nparts + 1 == p->fail_at)
        return BDB_ERR_IO;
    assert_true(p->nparts < 8 && n <= 16);
    p->part[p->nparts] = part;
    p->n[p->nparts] = n;
    memcpy(p->ts[p->nparts], ts, n * sizeof *ts);
    p->nparts++;
    return BDB_OK;
}

/* Sub-buckets interleave partitions in time: each partition gets one put with its
 * samples in time order, partitions in the order of their first sample. */
static void test_each_part(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 1, 500);
    db_merger_push(&m, 3, 0);
    db_merger_push(&m, 5, 0);
    db_merger_source(&m, 2, 200);
    db_merger_push(&m, 2, 0);
    db_merger_push(&m, 4, 0);
    db_merger_push(&m, 5, 0); /* wins 5 from partition 500 */
    db_merger_source(&m, 3, 500);
    db_merger_push(&m, 6, 0);
    struct parts p;
    memset(&p, 0, sizeof p);
    assert_int_equal(db_merger_each_part(&m, put_cb, &p), BDB_OK);
    assert_int_equal(p.nparts, 2);
    assert_int_equal(p.part[0], 200);
    assert_int_equal(p.n[0], 3);
    assert_true(p.ts[0][0] == 2 && p.ts[0][1] == 4 && p.ts[0][2] == 5);
    assert_int_equal(p.part[1], 500);
    assert_int_equal(p.n[1], 2);
    assert_true(p.ts[1][0] == 3 && p.ts[1][1] == 6);
    assert_int_equal(m.n, 0);
    /* the first failing put stops it and is returned */
    db_merger_source(&m, 1, 1);
    db_merger_push(&m, 1, 0);
    db_merger_source(&m, 1, 2);
    db_merger_push(&m, 2, 0);
    memset(&p, 0, sizeof p);
    p.fail_at = 2;
    assert_int_equal(db_merger_each_part(&m, put_cb, &p), BDB_ERR_IO);
    assert_int_equal(p.nparts, 1);
    assert_int_equal(m.n, 0);
    db_merger_free(&m);
}

static void test_samples_grow(void **st)
{
    (void)st;
    db_merger m;
    memset(&m, 0, sizeof m);
    int64_t *ts = NULL;
    double *v = NULL;
    size_t n = 0, cap = 0;
    for (int round = 1; round <= 3; round++) {
        db_merger_source(&m, 1, 0);
        for (int i = 0; i < 1000 * round; i++)
            db_merger_push(&m, i, (double)-i);
        assert_int_equal(db_merger_samples(&m, &ts, &v, &n, &cap), BDB_OK);
        assert_int_equal(n, (size_t)(1000 * round));
        assert_true(cap >= n);
        assert_true(ts[n - 1] == (int64_t)n - 1 && v[n - 1] == (double)(1 - (int64_t)n));
    }
    free(ts);
    free(v);
    db_merger_free(&m);
}

/* Block chunks: at most max samples each and one partition each, read back. */
static void test_emit_block(void **st)
{
    (void)st;
    char dir[] = "/tmp/bdb-merge-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "b.blk", 0, 100000, 1, &w), BDB_OK);
    bdb_series_key key = {"t", 1, "d", 1, "m", 1};
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 1, 0);
    db_merger_push(&m, 1, 1.0);
    assert_int_equal(db_merger_emit(&m, w, &key, 0), BDB_ERR_INVALID); /* writes nothing */
    assert_int_equal(m.n, 0);
    db_merger_source(&m, 1, 0); /* partition 0: 0 .. 9, partition 1000: 1000 .. 1004 */
    for (int64_t t = 0; t < 10; t++)
        db_merger_push(&m, t, (double)t);
    db_merger_source(&m, 2, 1000);
    for (int64_t t = 1004; t >= 1000; t--) /* not in order: the sort fixes it */
        db_merger_push(&m, t, (double)t);
    db_merger_source(&m, 3, 0); /* rewrites 5 */
    db_merger_push(&m, 5, 55.0);
    assert_int_equal(db_merger_emit(&m, w, &key, 4), BDB_OK);
    assert_int_equal(m.n, 0);
    bdb_block_meta meta;
    assert_int_equal(bdb_block_writer_finish(w, &meta), BDB_OK);
    char path[128];
    snprintf(path, sizeof path, "%s/b.blk", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    bdb_block_cursor cur;
    assert_int_equal(bdb_block_find(b, &key, &cur), BDB_OK);
    bdb_chunk_ref c;
    const uint32_t counts[] = {4, 4, 2, 4, 1};
    const int64_t parts[] = {0, 0, 0, 1000, 1000};
    size_t k = 0;
    int64_t next = 0;
    while (bdb_block_cursor_next(&cur, &c) == 1) {
        assert_true(k < 5);
        assert_int_equal(c.count, counts[k]);
        assert_int_equal(c.bucket_start, parts[k]);
        bdb_chunk_iter it;
        assert_int_equal(bdb_block_chunk_iter(&c, &it), BDB_OK);
        int64_t t;
        double v;
        while (bdb_chunk_iter_next(&it, &t, &v) == 1) {
            if (next == 10)
                next = 1000;
            assert_int_equal(t, next);
            assert_true(v == (t == 5 ? 55.0 : (double)t));
            next++;
        }
        k++;
    }
    assert_int_equal(k, 5);
    assert_int_equal(next, 1005);
    bdb_block_close(b);
    db_merger_free(&m);
    tu_rm_rf(dir);
}

/* A hot device's sub-buckets interleave partitions sample by sample: each partition's
 * samples become chunks of their own (at most max each), in the block by increasing
 * min_ts, never one chunk per sample. */
static void test_emit_interleaved(void **st)
{
    (void)st;
    char dir[] = "/tmp/bdb-merge-test-XXXXXX";
    assert_non_null(mkdtemp(dir));
    bdb_vfs *vfs = bdb_vfs_posix();
    bdb_block_writer *w;
    assert_int_equal(bdb_block_writer_open(vfs, dir, "b.blk", 0, 100000, 1, &w), BDB_OK);
    bdb_series_key key = {"t", 1, "d", 1, "m", 1};
    db_merger m;
    memset(&m, 0, sizeof m);
    for (int64_t t = 0; t < 100; t++) {
        db_merger_source(&m, 1, 100 + t % 4);
        db_merger_push(&m, t * 10, (double)t);
    }
    assert_int_equal(db_merger_emit(&m, w, &key, 10), BDB_OK);
    bdb_block_meta meta;
    assert_int_equal(bdb_block_writer_finish(w, &meta), BDB_OK);
    assert_int_equal(meta.nchunks, 12); /* 25 samples per partition: 10 + 10 + 5 */
    assert_int_equal(meta.nsamples, 100);
    char path[128];
    snprintf(path, sizeof path, "%s/b.blk", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(vfs, path, &b), BDB_OK);
    bdb_block_cursor cur;
    assert_int_equal(bdb_block_find(b, &key, &cur), BDB_OK);
    bdb_chunk_ref c;
    int seen[100] = {0};
    int64_t prev_min = -1;
    size_t k = 0;
    while (bdb_block_cursor_next(&cur, &c) == 1) {
        assert_true(c.min_ts > prev_min);
        prev_min = c.min_ts;
        bdb_chunk_iter it;
        assert_int_equal(bdb_block_chunk_iter(&c, &it), BDB_OK);
        int64_t t;
        double v;
        while (bdb_chunk_iter_next(&it, &t, &v) == 1) {
            assert_int_equal(t % 10, 0);
            assert_int_equal(100 + (t / 10) % 4, c.bucket_start); /* its own partition */
            assert_true(v == (double)(t / 10));
            seen[t / 10]++;
        }
        k++;
    }
    assert_int_equal(k, 12);
    for (int i = 0; i < 100; i++)
        assert_int_equal(seen[i], 1);
    bdb_block_close(b);
    /* out of memory for the partitions' list: nothing written, the merger empty */
    assert_int_equal(bdb_block_writer_open(vfs, dir, "c.blk", 0, 100000, 2, &w), BDB_OK);
    for (int64_t t = 0; t < 100; t++) {
        db_merger_source(&m, 1, 100 + t % 4);
        db_merger_push(&m, t * 10, (double)t);
    }
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    assert_int_equal(db_merger_emit(&m, w, &key, 10), BDB_ERR_NOMEM);
    bdb_alloc_fail_disarm();
    assert_int_equal(m.n, 0);
    bdb_block_writer_abort(w);
    db_merger_free(&m);
    tu_rm_rf(dir);
}

/* ---------------------------------------------------------------- out of memory */

/* A push that cannot grow the buffers: every output then fails with BDB_ERR_NOMEM,
 * puts nothing, and leaves the merger empty and usable. */
static void test_out_of_memory(void **st)
{
    (void)st;
    for (int out = 0; out < 4; out++) {
        db_merger m;
        memset(&m, 0, sizeof m);
        db_merger_source(&m, 1, 0);
        db_merger_push(&m, 1, 1.0); /* the first 256 fit */
        bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
        for (int64_t t = 2; t <= 300; t++)
            db_merger_push(&m, t, 1.0);
        bdb_alloc_fail_disarm();
        assert_true(m.oom);
        int64_t *ts = NULL;
        double *v = NULL;
        size_t n = 5, cap = 0;
        struct parts p;
        memset(&p, 0, sizeof p);
        int rc = out == 0   ? db_merger_sort(&m)
                 : out == 1 ? db_merger_samples(&m, &ts, &v, &n, &cap)
                 : out == 2 ? db_merger_each_part(&m, put_cb, &p)
                            : db_merger_emit(&m, NULL, NULL, 10);
        assert_int_equal(rc, BDB_ERR_NOMEM);
        assert_int_equal(m.n, 0);
        assert_int_equal(p.nparts, 0);
        if (out == 1)
            assert_int_equal(n, 0);
        /* usable again */
        assert_false(m.oom);
        db_merger_source(&m, 1, 0);
        db_merger_push(&m, 9, 9.0);
        assert_int_equal(db_merger_sort(&m), BDB_OK);
        assert_int_equal(m.n, 1);
        free(ts);
        free(v);
        db_merger_free(&m);
    }
    /* a chunk whose samples do not fit: BDB_ERR_NOMEM from the push itself */
    const int64_t ts[] = {1, 2, 3};
    const double v[] = {1, 2, 3};
    bdb_buf b;
    bdb_buf_init_checked(&b);
    assert_int_equal(bdb_chunk_encode(ts, v, 3, &b), BDB_OK);
    db_merger m;
    memset(&m, 0, sizeof m);
    db_merger_source(&m, 1, 0);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    int rc = db_merger_push_chunk(&m, &(bdb_chunk_ref){.data = b.data, .len = b.len}, INT64_MIN,
                                  INT64_MAX);
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, BDB_ERR_NOMEM);
    assert_int_equal(db_merger_sort(&m), BDB_ERR_NOMEM);
    /* the scratch arrays of the per-partition and block outputs */
    db_merger_push(&m, 1, 1.0);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    struct parts p;
    memset(&p, 0, sizeof p);
    rc = db_merger_each_part(&m, put_cb, &p);
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, BDB_ERR_NOMEM);
    assert_int_equal(p.nparts, 0);
    db_merger_push(&m, 1, 1.0);
    bdb_alloc_fail_arm(BDB_ALLOC_FAIL_FROM, 1);
    int64_t *ots = NULL;
    double *ov = NULL;
    size_t on = 3, ocap = 0;
    rc = db_merger_samples(&m, &ots, &ov, &on, &ocap);
    bdb_alloc_fail_disarm();
    assert_int_equal(rc, BDB_ERR_NOMEM);
    assert_int_equal(on, 0);
    free(ots);
    free(ov);
    bdb_buf_free(&b);
    db_merger_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_wins),    cmocka_unit_test(test_duplicates_in_a_source),
        cmocka_unit_test(test_extremes),         cmocka_unit_test(test_empty),
        cmocka_unit_test(test_many_sources),     cmocka_unit_test(test_large),
        cmocka_unit_test(test_sort_then_more),   cmocka_unit_test(test_push_chunk),
        cmocka_unit_test(test_head_chunks),      cmocka_unit_test(test_each_part),
        cmocka_unit_test(test_samples_grow),     cmocka_unit_test(test_emit_block),
        cmocka_unit_test(test_emit_interleaved), cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
