/* wal: segmented write-ahead log with group commit (wal.h).
 *
 * On-disk format
 * --------------
 * A segment is a file <dir>/<20-digit number>. It is a sequence of 32 KiB pages; only
 * the last page of a segment may be partial. A record is stored as one or more
 * fragments, each a 7-byte header followed by its payload:
 *
 *     type u8 | length u16le | crc u32le | payload[length]
 *
 * type is FULL (1, the whole record), or FIRST (2), MIDDLE (3), LAST (4) for a record
 * split across pages. crc is zlib's CRC-32 of the type byte followed by the payload.
 * Covering the type byte (as LevelDB does; Prometheus covers the payload only) means a
 * flipped type cannot turn a FIRST into a FULL and deliver half a record, and a zero
 * byte flipped to 1 cannot read as a valid empty record. zlib is already linked and
 * its braided crc32 (1.2.12+) ran at about 7 GB/s on the 2-core build machine, far
 * above what the disk takes, so a hand-written CRC32C would buy speed we cannot use.
 *
 * The writer never lets a fragment cross a page: when fewer than 7 bytes remain in a
 * page they are zero padding and the next fragment starts on the next page. So FIRST
 * and MIDDLE fragments always end exactly at a page end; a FIRST may have an empty
 * payload when exactly 7 bytes remain. A record never spans two segments.
 *
 * Validity rules applied by replay, in this order, each with its own message:
 *  - a page tail shorter than 7 bytes must be zero ("bad content");
 *  - a zero type byte where a header must start: if the rest of the file is zero the
 *    tail was zero-filled by a crash ("torn record"), otherwise "bad content";
 *  - type above LAST: "bad type flag";
 *  - header or payload cut off by the end of the file, or a record whose LAST never
 *    came: "torn record";
 *  - payload running past the page end: "bad length";
 *  - FIRST or MIDDLE not ending at the page end: "bad header";
 *  - MIDDLE/LAST outside a record, FULL/FIRST inside one: "bad fragment sequence";
 *  - crc mismatch: "bad checksum".
 * At the first violation the segment is truncated after its last complete record, and
 * replay goes on with the next segment. Replay reads the segments that existed at open
 * (never the one open() created for appends) and hands cb a pointer into the mapped
 * segment or a reassembly buffer, valid only during the call.
 *
 * Writing and group commit
 * ------------------------
 * bdb_wal_append frames the record into a staging buffer (padding included) and issues
 * one pwrite at the end of the current segment, under the mutex. The LSN it returns is
 * the end of those bytes in a log-wide byte count. bdb_wal_sync(lsn) waits until
 * synced_lsn >= lsn: if nobody is syncing, the caller becomes the syncer, notes
 * written_lsn as its target, drops the mutex, fsyncs, and on success raises
 * synced_lsn to that target; everyone whose bytes lay below it is released together.
 * Appends continue during the fsync; they are covered by the next one.
 *
 * Rolling to a new segment happens at the next append once the segment has reached
 * segment_bytes. It waits for any running fsync (which holds the old file), fsyncs the
 * old segment under the mutex so synced_lsn can cover everything written, creates the
 * next one and fsyncs the directory so the new name survives power loss.
 *
 * A failed fsync (of a segment or of the directory) sets `failed` for good: afterwards
 * append, sync and cut return BDB_ERR_READONLY. The unsynced bytes may be lost even if a
 * retried fsync succeeds, so nothing after that point may be acknowledged. A failed
 * write (disk full) is not sticky: the partial bytes are cut off and the error returned.
 * bdb_wal_remove_upto refuses (BDB_ERR_INVALID) to delete the segment being written. */
#include "storage/embedded/core/wal.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define WAL_PAGE (32 * 1024)
#define HDR 7
#define DEFAULT_SEGMENT_BYTES (64ULL << 20)
#define DEFAULT_PERIODIC_MS 100

enum { FRAG_ZERO = 0, FRAG_FULL = 1, FRAG_FIRST = 2, FRAG_MIDDLE = 3, FRAG_LAST = 4 };

typedef struct seg_info {
    uint64_t num, size;
} seg_info;

struct bdb_wal {
    bdb_vfs *vfs;
    char *dir;
    uint64_t segment_bytes;
    enum bdb_wal_sync_mode mode;
    int periodic_ms;

    pthread_mutex_t mu;
    pthread_cond_t synced; /* a sync finished: waiters re-check synced_lsn */
    bdb_file *cur;         /* NULL only if creating the next segment failed */
    uint64_t cur_num;      /* current segment, or the last sealed one if cur is NULL */
    uint64_t cur_off;      /* bytes written into cur */
    uint64_t written_lsn, synced_lsn;
    int syncing, failed;
    uint8_t *stage;
    size_t stage_cap;
    seg_info *old; /* sealed or pre-existing segments, ascending */
    size_t nold, capold;
    uint64_t appends, bytes, fsyncs, fsync_ns_total, fsync_ns_max;

    pthread_t flusher; /* PERIODIC only */
    pthread_cond_t tick;
    int has_flusher, stop;
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static uint32_t frag_crc(uint8_t type, const uint8_t *p, size_t n)
{
    uLong c = crc32(0L, &type, 1);
    return (uint32_t)crc32(c, p, (uInt)n);
}

static char *seg_path(const char *dir, uint64_t num)
{
    size_t n = strlen(dir) + 23;
    char *p = bdb_malloc(n);
    if (p)
        snprintf(p, n, "%s/%020" PRIu64, dir, num);
    return p;
}

/* Segment names are exactly 20 decimal digits; anything else in the directory is not
 * ours to read. */
static int parse_seg_name(const char *name, uint64_t *num)
{
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    if (name[20] != '\0')
        return 0;
    *num = v;
    return 1;
}

static int push_old(bdb_wal *w, uint64_t num, uint64_t size)
{
    if (w->nold == w->capold) {
        size_t cap = w->capold ? w->capold * 2 : 16;
        seg_info *p = bdb_realloc(w->old, cap * sizeof(*p));
        if (!p)
            return BDB_ERR_NOMEM;
        w->old = p;
        w->capold = cap;
    }
    w->old[w->nold++] = (seg_info){num, size};
    return BDB_OK;
}

typedef struct collect_ctx {
    bdb_wal *w;
    int rc;
} collect_ctx;

static int collect_segment(void *ctx, const char *name)
{
    collect_ctx *c = ctx;
    uint64_t num;
    if (parse_seg_name(name, &num) && (c->rc = push_old(c->w, num, 0)) != BDB_OK)
        return 1;
    return 0;
}

static int oldest_cb(void *ctx, const char *name)
{
    uint64_t *oldest = ctx, num;
    if (parse_seg_name(name, &num) && num < *oldest)
        *oldest = num;
    return 0;
}

int bdb_wal_oldest_segment(bdb_vfs *vfs, const char *dir, uint64_t *oldest)
{
    uint64_t o = UINT64_MAX;
    if (!bdb_vfs_exists(vfs, dir))
        return BDB_ERR_NOTFOUND;
    int rc = bdb_vfs_list(vfs, dir, oldest_cb, &o);
    if (rc == BDB_ERR_NOTFOUND || (rc == BDB_OK && o == UINT64_MAX))
        return BDB_ERR_NOTFOUND;
    if (rc == BDB_OK)
        *oldest = o;
    return rc;
}

static int cmp_seg(const void *a, const void *b)
{
    uint64_t x = ((const seg_info *)a)->num, y = ((const seg_info *)b)->num;
    return x < y ? -1 : x > y;
}

/* Records the outcome of one fsync; a failure fails the WAL for good (fsyncgate). */
static int note_fsync(bdb_wal *w, int rc, uint64_t t0, const char *what)
{
    uint64_t dt = mono_ns() - t0;
    w->fsyncs++;
    w->fsync_ns_total += dt;
    if (dt > w->fsync_ns_max)
        w->fsync_ns_max = dt;
    if (rc != BDB_OK && !w->failed) {
        w->failed = 1;
        BDB_ERROR("wal %s: fsync of %s failed (%s, errno %d); the WAL is now read-only", w->dir,
                  what, bdb_strerror(rc), errno);
    }
    return rc == BDB_OK ? BDB_OK : BDB_ERR_READONLY;
}

/* Creates segment num and makes its name durable. Called with the mutex held. */
static int create_segment(bdb_wal *w, uint64_t num)
{
    char *path = seg_path(w->dir, num);
    if (!path)
        return BDB_ERR_NOMEM;
    bdb_file *f;
    int rc = bdb_vfs_open(w->vfs, path, BDB_O_RDWR | BDB_O_CREAT | BDB_O_EXCL, &f);
    free(path);
    if (rc != BDB_OK)
        return rc;
    uint64_t t0 = mono_ns();
    rc = note_fsync(w, bdb_vfs_sync_dir(w->vfs, w->dir), t0, "the directory");
    if (rc != BDB_OK) {
        bdb_file_close(f);
        return rc;
    }
    w->cur = f;
    w->cur_num = num;
    w->cur_off = 0;
    return BDB_OK;
}

/* Fsyncs and closes the current segment. Mutex held, no fsync running. */
static int seal_segment(bdb_wal *w)
{
    if (!w->cur)
        return BDB_OK;
    /* Room in the list first: out of memory then leaves the segment open and current. */
    if (w->nold == w->capold) {
        size_t cap = w->capold ? w->capold * 2 : 16;
        seg_info *p = bdb_realloc(w->old, cap * sizeof(*p));
        if (!p)
            return BDB_ERR_NOMEM;
        w->old = p;
        w->capold = cap;
    }
    uint64_t t0 = mono_ns();
    int rc = note_fsync(w, bdb_file_sync(w->cur), t0, "a segment");
    if (rc != BDB_OK)
        return rc;
    w->synced_lsn = w->written_lsn;
    pthread_cond_broadcast(&w->synced);
    w->old[w->nold++] = (seg_info){w->cur_num, w->cur_off}; /* room made above */
    bdb_file_close(w->cur);
    w->cur = NULL;
    return BDB_OK;
}

/* Runs one fsync on behalf of every record written so far. Mutex held on entry and
 * exit, released during the fsync; the caller checked that no fsync is running and that
 * synced_lsn < written_lsn, so cur is open: only sealing closes it, and sealing raises
 * synced_lsn to written_lsn, which no append can raise until a segment is open again. */
static void sync_round(bdb_wal *w)
{
    uint64_t target = w->written_lsn;
    bdb_file *f = w->cur; /* rolling waits for `syncing` to clear, so f stays open */
    w->syncing = 1;
    pthread_mutex_unlock(&w->mu);
    uint64_t t0 = mono_ns();
    int rc = bdb_file_sync(f);
    int e = errno;
    pthread_mutex_lock(&w->mu);
    w->syncing = 0;
    errno = e; /* for the log line */
    if (note_fsync(w, rc, t0, "a segment") == BDB_OK && target > w->synced_lsn)
        w->synced_lsn = target;
    pthread_cond_broadcast(&w->synced);
}

static int sync_upto(bdb_wal *w, uint64_t lsn)
{
    for (;;) {
        if (w->failed)
            return BDB_ERR_READONLY;
        if (w->synced_lsn >= lsn)
            return BDB_OK;
        if (w->syncing)
            pthread_cond_wait(&w->synced, &w->mu);
        else
            sync_round(w);
    }
}

static void *flusher_main(void *arg)
{
    bdb_wal *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        uint64_t ns = (uint64_t)dl.tv_nsec + (uint64_t)w->periodic_ms * 1000000ULL;
        dl.tv_sec += (time_t)(ns / 1000000000ULL);
        dl.tv_nsec = (long)(ns % 1000000000ULL);
        int r = 0;
        while (!w->stop && r != ETIMEDOUT)
            r = pthread_cond_timedwait(&w->tick, &w->mu, &dl);
        if (!w->stop && !w->failed && !w->syncing && w->written_lsn > w->synced_lsn)
            sync_round(w);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void free_wal(bdb_wal *w)
{
    pthread_cond_destroy(&w->tick);
    pthread_cond_destroy(&w->synced);
    pthread_mutex_destroy(&w->mu);
    free(w->stage);
    free(w->old);
    free(w->dir);
    free(w);
}

int bdb_wal_open(const bdb_wal_opts *opts, bdb_wal **out)
{
    if (!opts || !opts->dir || !out)
        return BDB_ERR_INVALID;
    bdb_wal *w = bdb_calloc(1, sizeof(*w));
    if (!w)
        return BDB_ERR_NOMEM;
    w->vfs = opts->vfs ? opts->vfs : bdb_vfs_posix();
    w->segment_bytes = opts->segment_bytes ? opts->segment_bytes : DEFAULT_SEGMENT_BYTES;
    w->mode = opts->sync_mode;
    w->periodic_ms = opts->periodic_ms > 0 ? opts->periodic_ms : DEFAULT_PERIODIC_MS;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->synced, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the flusher must ignore clock steps */
    pthread_cond_init(&w->tick, &ca);
    pthread_condattr_destroy(&ca);

    int rc = BDB_ERR_NOMEM;
    size_t dlen = strlen(opts->dir);
    if (!(w->dir = bdb_malloc(dlen + 1)))
        goto fail;
    memcpy(w->dir, opts->dir, dlen + 1);
    if ((rc = bdb_vfs_mkdir(w->vfs, w->dir)) != BDB_OK)
        goto fail;
    collect_ctx cc = {w, BDB_OK};
    if ((rc = bdb_vfs_list(w->vfs, w->dir, collect_segment, &cc)) != BDB_OK ||
        (rc = cc.rc) != BDB_OK)
        goto fail;
    if (w->nold > 1)
        qsort(w->old, w->nold, sizeof(*w->old), cmp_seg);
    for (size_t i = 0; i < w->nold; i++) {
        char *path = seg_path(w->dir, w->old[i].num);
        bdb_file *f;
        rc = path ? bdb_vfs_open(w->vfs, path, BDB_O_RDONLY, &f) : BDB_ERR_NOMEM;
        free(path);
        if (rc != BDB_OK)
            goto fail;
        rc = bdb_file_size(f, &w->old[i].size);
        bdb_file_close(f);
        if (rc != BDB_OK)
            goto fail;
    }
    uint64_t next = w->nold ? w->old[w->nold - 1].num + 1 : 1;
    if ((rc = create_segment(w, next)) != BDB_OK)
        goto fail;
    if (w->mode == BDB_WAL_SYNC_PERIODIC) {
        if (pthread_create(&w->flusher, NULL, flusher_main, w) != 0) {
            rc = BDB_ERR_NOMEM;
            bdb_file_close(w->cur);
            goto fail;
        }
        w->has_flusher = 1;
    }
    *out = w;
    return BDB_OK;
fail:
    free_wal(w);
    return rc;
}

/* Frames rec as fragments starting at in-page offset `at`, padding included, into out
 * (sized by frame_bound). Returns the number of bytes produced. */
static size_t frame(uint8_t *out, size_t at, const uint8_t *rec, size_t len)
{
    size_t o = 0, done = 0, p = at;
    for (int first = 1;; first = 0) {
        size_t room = WAL_PAGE - p;
        if (room < HDR) {
            memset(out + o, 0, room);
            o += room;
            p = 0;
            room = WAL_PAGE;
        }
        size_t n = len - done < room - HDR ? len - done : room - HDR;
        int last = done + n == len;
        uint8_t type = first ? (last ? FRAG_FULL : FRAG_FIRST) : (last ? FRAG_LAST : FRAG_MIDDLE);
        out[o] = type;
        out[o + 1] = (uint8_t)n;
        out[o + 2] = (uint8_t)(n >> 8);
        bdb_put_u32le(out + o + 3, frag_crc(type, rec + done, n));
        memcpy(out + o + HDR, rec + done, n);
        o += HDR + n;
        p = (p + HDR + n) % WAL_PAGE;
        done += n;
        if (last)
            return o;
    }
}

static size_t frame_bound(size_t len)
{
    return len + HDR * (len / (WAL_PAGE - HDR) + 2) + HDR;
}

int bdb_wal_append(bdb_wal *w, const void *rec, size_t len, uint64_t *lsn)
{
    if (len > SIZE_MAX / 2)
        return BDB_ERR_INVALID;
    pthread_mutex_lock(&w->mu);
    int rc;
    for (;;) {
        if (w->failed) {
            rc = BDB_ERR_READONLY;
            goto out;
        }
        if (w->cur && w->cur_off < w->segment_bytes)
            break;
        if (w->syncing) { /* the running fsync holds the segment we want to seal */
            pthread_cond_wait(&w->synced, &w->mu);
            continue;
        }
        if ((rc = seal_segment(w)) != BDB_OK || (rc = create_segment(w, w->cur_num + 1)) != BDB_OK)
            goto out;
    }
    size_t need = frame_bound(len);
    if (need > w->stage_cap) {
        uint8_t *s = bdb_realloc(w->stage, need);
        if (!s) {
            rc = BDB_ERR_NOMEM;
            goto out;
        }
        w->stage = s;
        w->stage_cap = need;
    }
    size_t n = frame(w->stage, (size_t)(w->cur_off % WAL_PAGE), rec, len);
    rc = bdb_file_pwrite(w->cur, w->stage, n, w->cur_off);
    if (rc != BDB_OK) {
        /* Part of the write may have landed. Cut it off so the next record starts on
         * clean bytes; if that fails too, replay still stops at the garbage, which lies
         * after every record we acknowledged. */
        int e = errno;
        bdb_file_truncate(w->cur, w->cur_off);
        errno = e;
        goto out;
    }
    w->cur_off += n;
    w->written_lsn += n;
    w->appends++;
    w->bytes += len;
    if (lsn)
        *lsn = w->written_lsn;
out:
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int bdb_wal_sync(bdb_wal *w, uint64_t lsn)
{
    pthread_mutex_lock(&w->mu);
    int rc;
    if (w->failed)
        rc = BDB_ERR_READONLY;
    else if (lsn > w->written_lsn)
        rc = BDB_ERR_INVALID; /* not an LSN we handed out; waiting would never end */
    else if (w->mode == BDB_WAL_SYNC_PERIODIC)
        rc = BDB_OK;
    else
        rc = sync_upto(w, lsn);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int bdb_wal_cut(bdb_wal *w, uint64_t *sealed)
{
    pthread_mutex_lock(&w->mu);
    int rc;
    while (w->syncing && !w->failed)
        pthread_cond_wait(&w->synced, &w->mu);
    if (w->failed)
        rc = BDB_ERR_READONLY;
    else if ((rc = seal_segment(w)) == BDB_OK) {
        if (sealed)
            *sealed = w->cur_num;
        /* Out of memory for the next segment is not a failed cut: the sealed one is
         * closed and durable, and the next append creates the new one. */
        if ((rc = create_segment(w, w->cur_num + 1)) == BDB_ERR_NOMEM)
            rc = BDB_OK;
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int bdb_wal_remove_upto(bdb_wal *w, uint64_t upto)
{
    pthread_mutex_lock(&w->mu);
    int rc = BDB_OK;
    if (w->cur && upto >= w->cur_num) {
        rc = BDB_ERR_INVALID; /* the segment being written cannot go; cut first */
        goto out;
    }
    size_t gone = 0;
    while (gone < w->nold && w->old[gone].num <= upto) {
        char *path = seg_path(w->dir, w->old[gone].num);
        rc = path ? bdb_vfs_unlink(w->vfs, path) : BDB_ERR_NOMEM;
        free(path);
        if (rc != BDB_OK)
            break;
        gone++;
    }
    if (gone > 0) {
        memmove(w->old, w->old + gone, (w->nold - gone) * sizeof(*w->old));
        w->nold -= gone;
        int src = bdb_vfs_sync_dir(w->vfs, w->dir);
        if (rc == BDB_OK)
            rc = src;
    }
out:
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

typedef struct scan {
    const uint8_t *p;
    uint64_t size;
    uint64_t valid_end; /* end of the last complete record */
    uint64_t err_off;
    const char *err;
} scan;

/* Walks one mapped segment, delivering records until the end or the first damage
 * (s->err). Returns what cb returned if it stopped the walk, else 0. */
static int scan_segment(scan *s, uint64_t num, bdb_buf *acc,
                        int (*cb)(void *, const uint8_t *, size_t, uint64_t), void *ctx,
                        bdb_wal_replay_stats *st)
{
    const uint8_t *p = s->p;
    uint64_t pos = 0, size = s->size;
    int in_rec = 0;
    while (pos < size) {
        uint64_t page_end = (pos / WAL_PAGE + 1) * WAL_PAGE;
        uint64_t room = page_end - pos;
        uint64_t avail = (page_end < size ? page_end : size) - pos;
        s->err_off = pos;
        if (room < HDR) {
            if (!all_zero(p + pos, (size_t)avail))
                s->err = "bad content (non-zero page padding)";
            else if (avail < room)
                s->err = "torn record";
            if (s->err)
                return 0;
            pos = page_end;
            continue;
        }
        uint8_t type = p[pos];
        if (type == FRAG_ZERO) {
            s->err = all_zero(p + pos, (size_t)(size - pos))
                         ? "torn record (zero-filled tail)"
                         : "bad content (zeros followed by data)";
            return 0;
        }
        if (type > FRAG_LAST) {
            s->err = "bad type flag";
            return 0;
        }
        if (avail < HDR) {
            s->err = "torn record";
            return 0;
        }
        uint64_t len = (uint64_t)p[pos + 1] | (uint64_t)p[pos + 2] << 8;
        uint64_t end = pos + HDR + len;
        if (HDR + len > room)
            s->err = "bad length";
        else if (HDR + len > avail)
            s->err = "torn record";
        else if ((type == FRAG_FIRST || type == FRAG_MIDDLE) && end != page_end)
            s->err = "bad header";
        else if (in_rec ? (type == FRAG_FULL || type == FRAG_FIRST)
                        : (type == FRAG_MIDDLE || type == FRAG_LAST))
            s->err = "bad fragment sequence";
        else if (frag_crc(type, p + pos + HDR, (size_t)len) != bdb_get_u32le(p + pos + 3))
            s->err = "bad checksum";
        if (s->err)
            return 0;

        const uint8_t *rec = NULL;
        size_t rlen = 0;
        if (type == FRAG_FULL) {
            rec = p + pos + HDR;
            rlen = (size_t)len;
        } else {
            if (type == FRAG_FIRST)
                bdb_buf_reset(acc);
            bdb_buf_append(acc, p + pos + HDR, (size_t)len);
            in_rec = type != FRAG_LAST;
            if (type == FRAG_LAST) {
                rec = acc->data;
                rlen = acc->len;
            }
        }
        pos = end;
        if (type == FRAG_FULL || type == FRAG_LAST) {
            s->valid_end = pos;
            st->records++;
            st->bytes += rlen;
            int r = cb(ctx, rec ? rec : (const uint8_t *)"", rlen, num);
            if (r != 0)
                return r;
        }
    }
    if (in_rec) {
        s->err_off = pos;
        s->err = "torn record";
    }
    return 0;
}

/* Cuts a damaged segment back to its valid prefix, durably. */
static int truncate_segment(bdb_wal *w, const char *path, uint64_t size)
{
    bdb_file *f;
    int rc = bdb_vfs_open(w->vfs, path, BDB_O_RDWR, &f);
    if (rc != BDB_OK)
        return rc;
    rc = bdb_file_truncate(f, size);
    if (rc == BDB_OK)
        rc = bdb_file_sync(f);
    int e = errno;
    bdb_file_close(f);
    errno = e;
    return rc;
}

static int replay_one(bdb_wal *w, uint64_t num, bdb_buf *acc,
                      int (*cb)(void *, const uint8_t *, size_t, uint64_t), void *ctx,
                      bdb_wal_replay_stats *st)
{
    char *path = seg_path(w->dir, num);
    if (!path)
        return BDB_ERR_NOMEM;
    bdb_file *f;
    int rc = bdb_vfs_open(w->vfs, path, BDB_O_RDONLY, &f);
    if (rc != BDB_OK) {
        free(path);
        return rc;
    }
    const void *map;
    size_t mlen;
    rc = bdb_file_map(f, &map, &mlen);
    if (rc != BDB_OK) {
        bdb_file_close(f);
        free(path);
        return rc;
    }
    st->segments++;
    scan s = {.p = map, .size = mlen};
    rc = scan_segment(&s, num, acc, cb, ctx, st);
    bdb_file_unmap(f, map, mlen);
    bdb_file_close(f);
    if (rc == 0 && s.err) {
        uint64_t cut = mlen - s.valid_end;
        BDB_WARN("wal %s: segment %" PRIu64 " offset %" PRIu64 ": %s; truncating to %" PRIu64
                 " bytes, dropping %" PRIu64,
                 w->dir, num, s.err_off, s.err, s.valid_end, cut);
        if (st->corruptions++ == 0)
            snprintf(st->first_error, sizeof(st->first_error),
                     "segment %" PRIu64 " offset %" PRIu64 ": %s", num, s.err_off, s.err);
        st->corrupt_bytes += cut;
        rc = truncate_segment(w, path, s.valid_end);
        if (rc == BDB_OK) {
            pthread_mutex_lock(&w->mu);
            for (size_t i = 0; i < w->nold; i++)
                if (w->old[i].num == num)
                    w->old[i].size = s.valid_end;
            pthread_mutex_unlock(&w->mu);
        }
    }
    free(path);
    return rc;
}

int bdb_wal_replay(bdb_wal *w, uint64_t from_segment,
                   int (*cb)(void *ctx, const uint8_t *rec, size_t len, uint64_t segment),
                   void *ctx, bdb_wal_replay_stats *stats)
{
    bdb_wal_replay_stats local;
    bdb_wal_replay_stats *st = stats ? stats : &local;
    memset(st, 0, sizeof(*st));
    /* A snapshot of the numbers, so the mutex is not held while cb runs. */
    pthread_mutex_lock(&w->mu);
    size_t n = w->nold;
    uint64_t *nums = bdb_malloc((n ? n : 1) * sizeof(*nums));
    for (size_t i = 0; nums && i < n; i++)
        nums[i] = w->old[i].num;
    pthread_mutex_unlock(&w->mu);
    if (!nums)
        return BDB_ERR_NOMEM;
    bdb_buf acc;
    bdb_buf_init(&acc);
    int rc = BDB_OK;
    for (size_t i = 0; i < n && rc == BDB_OK; i++)
        if (nums[i] >= from_segment)
            rc = replay_one(w, nums[i], &acc, cb, ctx, st);
    bdb_buf_free(&acc);
    free(nums);
    return rc;
}

void bdb_wal_get_stats(bdb_wal *w, bdb_wal_stats *st)
{
    memset(st, 0, sizeof(*st));
    pthread_mutex_lock(&w->mu);
    st->appends = w->appends;
    st->bytes = w->bytes;
    st->fsyncs = w->fsyncs;
    st->fsync_ns_total = w->fsync_ns_total;
    st->fsync_ns_max = w->fsync_ns_max;
    st->segments_on_disk = w->nold + (w->cur ? 1 : 0);
    st->bytes_on_disk = w->cur ? w->cur_off : 0;
    for (size_t i = 0; i < w->nold; i++)
        st->bytes_on_disk += w->old[i].size;
    st->current_segment = w->cur_num;
    st->written_lsn = w->written_lsn;
    st->failed = w->failed;
    pthread_mutex_unlock(&w->mu);
}

void bdb_wal_close(bdb_wal *w)
{
    if (!w)
        return;
    if (w->has_flusher) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_signal(&w->tick);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->flusher, NULL);
    }
    pthread_mutex_lock(&w->mu);
    while (w->syncing) /* a caller racing close is a bug, but never free under a syncer */
        pthread_cond_wait(&w->synced, &w->mu);
    if (w->cur) {
        if (!w->failed && w->written_lsn > w->synced_lsn) {
            uint64_t t0 = mono_ns();
            note_fsync(w, bdb_file_sync(w->cur), t0, "a segment");
        }
        bdb_file_close(w->cur);
        w->cur = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    free_wal(w);
}
