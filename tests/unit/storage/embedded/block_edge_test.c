/* block_edge: the block writer's and reader's edges that block_test.c does not reach.
 *
 *  - API misuse: every NULL or inconsistent argument is BDB_ERR_INVALID and leaves a
 *    writer as it was; names given as NULL with length 0 are the empty name.
 *  - Chunks of 1 MiB and more (past the ~1 MiB staging buffer), read back exactly.
 *  - I/O faults: each call of a writer's life (open, every pwrite, sync, close,
 *    rename, directory sync) fails in turn, with the staging buffer's flushes placed
 *    in the chunk data, at a series' run CRC and in every part of the index. The
 *    error (BDB_ERR_IO, or BDB_ERR_NOSPACE for ENOSPC) is returned and no file, final
 *    or temporary, is left. Failed opens of a reader return the error.
 *  - Allocation failures: each allocation of a writer's life fails in turn.
 *    BDB_ERR_NOMEM is returned; a rejected chunk either leaves the writer usable (the
 *    same chunk then goes in and the finished file holds every chunk exactly) or the
 *    error sticks and no file is left. The same for a reader's open.
 * Damaged files are block_test.c's and block_mapped_test.c's. */
#include "storage/embedded/block/block.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "storage/failvfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "storage/embedded/engutil.h"

#define HDR 36
#define FTR 128
#define MIB ((size_t)1 << 20)
#define W0 INT64_C(1700000000000)
#define WLEN INT64_C(3600000)

/* The sweeps write hundreds of files (some of 1 MiB) through eu_nosync_vfs (POSIX
 * without fsync): whether a sync reaches the disk is powerloss_test.c's subject, not
 * this one's (the failing VFS fails syncs before they get here). */

/* ---- API misuse ---- */

static void test_api_misuse(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-edge");
    bdb_vfs *v = eu_nosync_vfs();
    bdb_block_writer *w = NULL;
    assert_int_equal(bdb_block_writer_open(NULL, dir, "f", 0, 10, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(v, NULL, "f", 0, 10, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(v, dir, NULL, 0, 10, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(v, dir, "", 0, 10, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(v, dir, "f", 0, 10, 1, NULL), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_open(v, dir, "f", 10, 10, 1, &w), BDB_ERR_INVALID);
    assert_int_equal(eu_count_entries(dir), 0);

    assert_int_equal(bdb_block_writer_open(v, dir, "f", W0, W0 + WLEN, 1, &w), BDB_OK);
    uint8_t data[8] = "payload";
    bdb_chunk_ref c = {.bucket_start = W0,
                       .min_ts = W0,
                       .max_ts = W0 + 5,
                       .count = 2,
                       .data = data,
                       .len = sizeof data};
    bdb_series_key ok = {"t", 1, "d", 1, "m", 1};
    const size_t big = (size_t)UINT32_MAX + 1;
    bdb_series_key bad[] = {
        {NULL, 1, "d", 1, "m", 1},  {"t", 1, NULL, 1, "m", 1},  {"t", 1, "d", 1, NULL, 1},
        {"t", big, "d", 1, "m", 1}, {"t", 1, "d", big, "m", 1}, {"t", 1, "d", 1, "m", big},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(bdb_block_writer_add(w, &bad[i], &c), BDB_ERR_INVALID);
    bdb_chunk_ref nodata = c, huge = c;
    nodata.data = NULL;
    huge.len = big;
    assert_int_equal(bdb_block_writer_add(w, &ok, &nodata), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, &ok, &huge), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(NULL, &ok, &c), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, NULL, &c), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_writer_add(w, &ok, NULL), BDB_ERR_INVALID);
    /* Empty tenant, device and metric given as NULL pointers: the empty names. */
    bdb_series_key empty = {NULL, 0, NULL, 0, NULL, 0};
    assert_int_equal(bdb_block_writer_add(w, &empty, &c), BDB_OK);
    assert_int_equal(bdb_block_writer_add(w, &ok, &c), BDB_OK);
    assert_int_equal(bdb_block_writer_finish(NULL, NULL), BDB_ERR_INVALID);
    bdb_block_writer_abort(NULL);
    bdb_block_meta meta;
    assert_int_equal(bdb_block_writer_finish(w, &meta), BDB_OK);
    assert_int_equal(meta.nseries, 2);
    assert_int_equal(meta.nchunks, 2);

    char path[512];
    snprintf(path, sizeof path, "%s/f", dir);
    bdb_block *b = NULL;
    assert_int_equal(bdb_block_open(NULL, path, &b), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_open(v, NULL, &b), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_open(v, path, NULL), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_open(v, path, &b), BDB_OK);
    bdb_block_close(NULL);

    bdb_block_cursor cur;
    bdb_chunk_ref got;
    assert_int_equal(bdb_block_find(NULL, &ok, &cur), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_find(b, NULL, &cur), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_find(b, &ok, NULL), BDB_ERR_INVALID);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(bdb_block_find(b, &bad[i], &cur), BDB_ERR_INVALID);
    /* The rejected adds left nothing behind: exactly the two series, each one chunk. */
    bdb_series_key empty_tenant_only = {"t", 1, NULL, 0, NULL, 0};
    assert_int_equal(bdb_block_find(b, &empty_tenant_only, &cur), BDB_ERR_NOTFOUND);
    bdb_series_key unknown_metric = {"t", 1, "d", 1, "zz", 2};
    assert_int_equal(bdb_block_find(b, &unknown_metric, &cur), BDB_ERR_NOTFOUND);
    bdb_series_key *want[] = {&empty, &ok};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(bdb_block_find(b, want[i], &cur), BDB_OK);
        assert_int_equal(cur.nchunks, 1);
        assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
        assert_int_equal(got.len, sizeof data);
        assert_memory_equal(got.data, data, sizeof data);
        assert_int_equal(bdb_block_cursor_next(&cur, &got), 0);
    }
    assert_int_equal(bdb_block_cursor_next(NULL, &got), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_cursor_next(&cur, NULL), BDB_ERR_INVALID);

    bdb_block_iter it;
    bdb_series_key k;
    assert_int_equal(bdb_block_iter_seek(NULL, &it, "t", 1, NULL, 0), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_iter_seek(b, NULL, "t", 1, NULL, 0), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_iter_seek(b, &it, NULL, 1, NULL, 0), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_iter_seek(b, &it, "t", 1, NULL, 1), BDB_ERR_INVALID);
    /* NULL tenant of length 0 is the empty tenant: the seek lands on the first series. */
    assert_int_equal(bdb_block_iter_seek(b, &it, NULL, 0, NULL, 0), BDB_OK);
    assert_int_equal(bdb_block_iter_next(&it, &k, NULL), 1);
    assert_int_equal(k.tenant_len + k.device_len + k.metric_len, 0);
    assert_int_equal(bdb_block_iter_next(NULL, &k, NULL), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_iter_next(&it, NULL, NULL), BDB_ERR_INVALID);
    bdb_block_iter zero_it;
    memset(&zero_it, 0, sizeof zero_it); /* never initialised on a block: empty */
    assert_int_equal(bdb_block_iter_next(&zero_it, &k, NULL), 0);

    bdb_block_part_iter pit;
    bdb_partition_stat st;
    bdb_block_part_iter_init(b, &pit);
    assert_int_equal(bdb_block_partition_next(NULL, &st), BDB_ERR_INVALID);
    assert_int_equal(bdb_block_partition_next(&pit, NULL), BDB_ERR_INVALID);
    bdb_block_part_iter_init(NULL, &pit);
    assert_int_equal(bdb_block_partition_next(&pit, &st), 0);
    bdb_block_close(b);
    eu_remove_flat_dir(dir);
}

/* ---- large chunks and I/O faults ---- */

/* A writer's life in one layout: `n` series (one chunk each, lengths lens[]) of
 * tenant "t", device "d", metrics "m0".. . Returns the first error, BDB_OK if the
 * file was finished. */
static int write_layout(bdb_vfs *v, const char *dir, const size_t *lens, unsigned n, unsigned nch,
                        uint8_t *buf)
{
    bdb_block_writer *w;
    int rc = bdb_block_writer_open(v, dir, "blk", W0, W0 + WLEN, 9, &w);
    if (rc != BDB_OK)
        return rc;
    for (unsigned s = 0; s < n; s++) {
        char m[16];
        snprintf(m, sizeof m, "m%u", s);
        bdb_series_key k = {"t", 1, "d", 1, m, strlen(m)};
        for (unsigned j = 0; j < nch; j++) {
            eu_fill(buf, lens[s], s, j);
            bdb_chunk_ref c = {.bucket_start = W0,
                               .min_ts = W0 + s + 100 * j,
                               .max_ts = W0 + s + 100 * j + 10,
                               .count = 3,
                               .data = buf,
                               .len = lens[s]};
            rc = bdb_block_writer_add(w, &k, &c);
            if (rc != BDB_OK) {
                /* An I/O error sticks: finishing reports it again and leaves no file. */
                assert_int_equal(bdb_block_writer_finish(w, NULL), rc);
                return rc;
            }
        }
    }
    return bdb_block_writer_finish(w, NULL);
}

static void check_layout(const char *dir, const size_t *lens, unsigned n, unsigned nch,
                         uint8_t *buf)
{
    char path[512];
    snprintf(path, sizeof path, "%s/blk", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(eu_nosync_vfs(), path, &b), BDB_OK);
    assert_int_equal(bdb_block_get_meta(b)->nseries, n);
    for (unsigned s = 0; s < n; s++) {
        char m[16];
        snprintf(m, sizeof m, "m%u", s);
        bdb_series_key k = {"t", 1, "d", 1, m, strlen(m)};
        bdb_block_cursor cur;
        bdb_chunk_ref c;
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        for (unsigned j = 0; j < nch; j++) {
            assert_int_equal(bdb_block_cursor_next(&cur, &c), 1);
            assert_int_equal(c.min_ts, W0 + s + 100 * j);
            assert_int_equal(c.len, lens[s]);
            eu_fill(buf, lens[s], s, j);
            assert_memory_equal(c.data, buf, lens[s]);
        }
        assert_int_equal(bdb_block_cursor_next(&cur, &c), 0);
    }
    bdb_block_close(b);
}

/* Staging holds the 36-byte header plus whatever is added; a flush happens when the
 * next piece would pass 1 MiB. These layouts put that moment in turn at: chunks of
 * 1 MiB and more (written past the buffer; in one series twice in a row, so the
 * second finds the buffer empty), a series' run CRC, and each part of the index
 * (group head and body, sparse table, string offsets, string bytes, footer). */
static void layouts(size_t lens[][3], unsigned *ns, unsigned *nch, size_t *nl)
{
    size_t k = 0;
    lens[k][0] = MIB + 3, lens[k][1] = MIB, lens[k][2] = 100, nch[k] = 1, ns[k++] = 3;
    lens[k][0] = MIB + 1, nch[k] = 2, ns[k++] = 1;
    lens[k][0] = MIB - HDR - 2, lens[k][1] = 50, nch[k] = 1, ns[k++] = 2; /* the run CRC */
    size_t tail[] = {2, 9, 20, 30, 40, 47, 60, 100};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
        lens[k][0] = MIB - HDR - 4 - tail[i], nch[k] = 1, ns[k++] = 1;
    *nl = k;
}

static void test_large_chunks_and_io_faults(void **state)
{
    (void)state;
    size_t lens[16][3];
    unsigned ns[16], nch[16];
    size_t nl;
    layouts(lens, ns, nch, &nl);
    uint8_t *buf = malloc(MIB + 16);
    assert_non_null(buf);
    int faults = 0;
    for (size_t l = 0; l < nl; l++) {
        char *dir = eu_make_flat_dir("/tmp/bdb-block-edge");
        failvfs fv;
        fv_init(&fv, eu_nosync_vfs(), 0, EIO);
        assert_int_equal(write_layout(&fv.base, dir, lens[l], ns[l], nch[l], buf), BDB_OK);
        check_layout(dir, lens[l], ns[l], nch[l], buf);
        uint64_t calls = fv_calls(&fv);
        char path[512];
        snprintf(path, sizeof path, "%s/blk", dir);
        unlink(path);
        for (uint64_t at = 1; at <= calls; at++) {
            int err = at % 2 ? EIO : ENOSPC;
            fv_init(&fv, eu_nosync_vfs(), at, err);
            int rc = write_layout(&fv.base, dir, lens[l], ns[l], nch[l], buf);
            assert_int_equal(fv.failed_op != FV_NONE, 1);
            assert_int_equal(rc, err == EIO ? BDB_ERR_IO : BDB_ERR_NOSPACE);
            assert_int_equal(eu_count_entries(dir), 0);
            faults++;
        }
        eu_remove_flat_dir(dir);
    }
    printf("block edge figures: %d injected I/O faults over %zu layouts\n", faults, nl);
    assert_true(faults >= 5 * (int)nl);

    /* The reader: a failed open, size or map is returned, nothing leaks (ASan). */
    char *dir = eu_make_flat_dir("/tmp/bdb-block-edge");
    size_t small[] = {40};
    assert_int_equal(write_layout(eu_nosync_vfs(), dir, small, 1, 1, buf), BDB_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/blk", dir);
    failvfs fv;
    fv_init(&fv, eu_nosync_vfs(), 0, EIO);
    bdb_block *b;
    assert_int_equal(bdb_block_open(&fv.base, path, &b), BDB_OK);
    bdb_block_close(b);
    uint64_t calls = fv_calls(&fv);
    int failed_opens = 0;
    for (uint64_t at = 1; at <= calls; at++) {
        fv_init(&fv, eu_nosync_vfs(), at, EIO);
        int rc = bdb_block_open(&fv.base, path, &b);
        if (rc == BDB_OK) { /* the fault is the last call, close's, which returns nothing */
            assert_int_equal(at, calls);
            bdb_block_close(b);
            assert_int_equal(fv.failed_op, FV_CLOSE);
            continue;
        }
        assert_int_equal(rc, BDB_ERR_IO);
        failed_opens++;
    }
    assert_int_equal(failed_opens, calls - 1); /* open, size, map */
    eu_remove_flat_dir(dir);
    free(buf);
}

/* ---- allocation failures ---- */

#define AF_SERIES 150 /* > 64 names, so the name table grows; several groups */

static void af_key(unsigned s, char *t, char *d, char *m, bdb_series_key *k)
{
    snprintf(t, 16, "t%u", s / 100);
    snprintf(d, 16, "d%02u", (s / 10) % 10);
    snprintf(m, 16, "m%03u", s);
    *k = (bdb_series_key){t, strlen(t), d, strlen(d), m, strlen(m)};
}

static void af_chunk(unsigned s, int64_t j, uint8_t *buf, bdb_chunk_ref *c)
{
    eu_fill(buf, 24, s, (unsigned)j);
    *c = (bdb_chunk_ref){.bucket_start = W0 + j * 600000,
                         .min_ts = W0 + j * 600000 + s,
                         .max_ts = W0 + j * 600000 + s + 9,
                         .count = 4,
                         .data = buf,
                         .len = 24};
}

/* One writer's life with the injector armed at allocation nth (0 = disarmed).
 * Returns 1 if the file was finished (then it holds every chunk), 0 if the failure
 * stuck (then no file is left). */
static uint64_t af_injected; /* failures injected in the last af_run */

static void af_disarm(void)
{
    af_injected = bdb_alloc_fail_injected();
    bdb_alloc_fail_disarm();
}

static int af_run(const char *dir, uint64_t nth)
{
    uint8_t buf[32];
    if (nth)
        eu_arm(nth);
    bdb_block_writer *w;
    int rc = bdb_block_writer_open(eu_nosync_vfs(), dir, "af", W0, W0 + WLEN, 3, &w);
    if (rc != BDB_OK) {
        af_disarm();
        assert_int_equal(rc, BDB_ERR_NOMEM);
        assert_int_equal(eu_count_entries(dir), 0);
        return 0;
    }
    for (unsigned s = 0; s < AF_SERIES; s++) {
        for (int64_t j = 0; j < 2; j++) {
            char t[16], d[16], m[16];
            bdb_series_key k;
            bdb_chunk_ref c;
            af_key(s, t, d, m, &k);
            af_chunk(s, j, buf, &c);
            rc = bdb_block_writer_add(w, &k, &c);
            if (rc == BDB_OK)
                continue;
            assert_int_equal(rc, BDB_ERR_NOMEM);
            /* Either the writer is as it was (the same chunk goes in now) or the
             * error sticks. */
            rc = bdb_block_writer_add(w, &k, &c);
            if (rc != BDB_OK) {
                assert_int_equal(rc, BDB_ERR_NOMEM);
                af_disarm();
                assert_int_equal(bdb_block_writer_finish(w, NULL), BDB_ERR_NOMEM);
                assert_int_equal(eu_count_entries(dir), 0);
                return 0;
            }
        }
    }
    rc = bdb_block_writer_finish(w, NULL);
    af_disarm();
    if (rc != BDB_OK) {
        assert_int_equal(rc, BDB_ERR_NOMEM);
        assert_int_equal(eu_count_entries(dir), 0);
        return 0;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/af", dir);
    bdb_block *b;
    assert_int_equal(bdb_block_open(eu_nosync_vfs(), path, &b), BDB_OK);
    assert_int_equal(bdb_block_get_meta(b)->nchunks, 2 * AF_SERIES);
    for (unsigned s = 0; s < AF_SERIES; s++) {
        char t[16], d[16], m[16];
        bdb_series_key k;
        bdb_block_cursor cur;
        af_key(s, t, d, m, &k);
        assert_int_equal(bdb_block_find(b, &k, &cur), BDB_OK);
        for (int64_t j = 0; j < 2; j++) {
            bdb_chunk_ref got, want;
            af_chunk(s, j, buf, &want);
            assert_int_equal(bdb_block_cursor_next(&cur, &got), 1);
            assert_int_equal(got.min_ts, want.min_ts);
            assert_int_equal(got.bucket_start, want.bucket_start);
            assert_int_equal(got.len, want.len);
            assert_memory_equal(got.data, want.data, want.len);
        }
    }
    bdb_block_close(b);
    unlink(path);
    return 1;
}

static void test_alloc_failures(void **state)
{
    (void)state;
    char *dir = eu_make_flat_dir("/tmp/bdb-block-edge");
    assert_int_equal(af_run(dir, 0), 1);
    /* Every allocation of the writer's life fails in turn, until a run injects none. */
    int survived = 0, stuck = 0;
    uint64_t nth;
    for (nth = 1; nth <= 5000; nth++) {
        int r = af_run(dir, nth);
        if (!af_injected)
            break;
        survived += r;
        stuck += !r;
    }
    printf("block edge figures: %llu allocations failed in turn: %d runs ended in "
           "BDB_ERR_NOMEM with no file, %d finished complete after a refused chunk\n",
           (unsigned long long)nth - 1, stuck, survived);
    assert_true(nth > 20 && nth <= 5000); /* the sweep reached the end */
    assert_true(stuck > 10);              /* failures were reported */
    assert_true(survived > 0);            /* and some were refused without harm */

    /* The reader: an open whose allocation fails says so and leaks nothing. */
    uint8_t buf[32];
    size_t len[] = {24};
    assert_int_equal(write_layout(eu_nosync_vfs(), dir, len, 1, 1, buf), BDB_OK);
    char path[512];
    snprintf(path, sizeof path, "%s/blk", dir);
    int nomem = 0;
    for (uint64_t at = 1; at <= 8; at++) {
        bdb_block *b;
        eu_arm(at);
        int rc = bdb_block_open(eu_nosync_vfs(), path, &b);
        bdb_alloc_fail_disarm();
        if (rc == BDB_OK) {
            bdb_block_close(b);
            continue;
        }
        assert_int_equal(rc, BDB_ERR_NOMEM);
        nomem++;
    }
    assert_true(nomem >= 1);
    eu_remove_flat_dir(dir);
}

int main(void)
{
    bdb_log_set_level(BDB_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_misuse),
        cmocka_unit_test(test_large_chunks_and_io_faults),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
