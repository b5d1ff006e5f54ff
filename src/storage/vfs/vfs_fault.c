/* vfs_fault: a test VFS that injects errors and simulates power loss (vfs_fault.h).
 *
 * What it models:
 * - The page cache. pwrite() only records the write in memory, per underlying file
 *   (a "node", shared by every handle opened on the same path). Reads, size() and
 *   map() see those writes laid over the underlying file. sync() applies them, in
 *   order, to the underlying file and fsyncs it: only then are they durable.
 * - Power loss. bdb_vfs_fault_crash() decides the fate of every unsynced write (keep,
 *   drop, keep a sector-aligned prefix, keep a random subset), applies the survivors
 *   in their original order, and kills every handle. The underlying directory is then
 *   exactly what a reboot would find.
 * - Directory entries. rename() and unlink() happen at once on the underlying file
 *   system, but a displaced or unlinked file is parked under a hidden backup name
 *   until sync_dir() on the directory makes the operation durable; a crash in any mode
 *   but KEEP renames everything back, newest first.
 * - fsyncgate. A failed sync() discards the file's unsynced writes: on Linux the
 *   kernel may mark the pages clean, so they never reach the disk, and a retried fsync
 *   then "succeeds". We drop them from reads too, which is the harsher choice.
 * - Injected errors: the Nth counted call (pwrite, sync, rename, unlink, truncate,
 *   open with create, sync_dir) fails with the chosen errno and has no effect.
 * - Power off at call N: from then on every counted call fails with EIO, has no effect
 *   and discards nothing, so the crash that follows sees the page cache as it was.
 *
 * What it does not model: creation of a file or directory is durable at once (no
 *   directory fsync needed); truncate() is applied and durable at once; partial
 *   (short) writes; cross-directory renames are made durable by syncing the target's
 *   directory alone; unlink() assumes a regular file. A handle must be closed before
 *   bdb_vfs_fault_free(). Freeing without a crash keeps everything, like a machine
 *   that simply went on running.
 *
 * One mutex serialises the whole VFS, including the underlying fsyncs: simple, and
 * the tests that use it care about outcomes, not speed. */
#include "storage/vfs/vfs_fault.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKUP_TAG ".bdbfault-bak-"

typedef struct pending_write {
    uint64_t off;
    size_t len;
    uint8_t *data;
} pending_write;

typedef struct fnode {
    struct fnode *next;
    char *path;      /* current name; NULL once unlinked or replaced by a rename */
    bdb_file *under; /* read-write handle on the underlying file; NULL after a crash */
    pending_write *w;
    size_t nw, capw;
    int refs;
} fnode;

typedef struct ffile {
    bdb_file base;
    fnode *node;
    int writable;
} ffile;

enum { OP_RENAME, OP_UNLINK };

typedef struct dir_op {
    int kind;
    char *dir;    /* the directory whose sync makes the operation durable */
    char *from;   /* rename source, or the unlinked path */
    char *to;     /* rename target */
    char *backup; /* where the displaced target or the unlinked file is parked */
} dir_op;

typedef struct fault_vfs {
    bdb_vfs base;
    bdb_vfs *under;
    pthread_mutex_t mu;
    uint64_t rng;
    uint64_t calls, fail_at, off_at;
    int fail_err, fail_sticky;
    int crashed;
    fnode *nodes;
    dir_op *ops;
    size_t nops, capops;
    uint64_t backup_seq;
} fault_vfs;

static const struct bdb_vfs_ops fault_ops;

static uint64_t next_rand(fault_vfs *fv)
{
    /* xorshift64*: deterministic per seed, which is all crash tests need. */
    fv->rng ^= fv->rng >> 12;
    fv->rng ^= fv->rng << 25;
    fv->rng ^= fv->rng >> 27;
    return fv->rng * 0x2545F4914F6CDD1DULL;
}

static int dead(void)
{
    errno = EIO;
    return BDB_ERR_IO;
}

static int fail_with(int err)
{
    errno = err;
    return err == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO;
}

/* Counts one call and says whether it must fail. */
static int count_call(fault_vfs *fv)
{
    fv->calls++;
    if (fv->off_at && fv->calls >= fv->off_at)
        return fail_with(EIO);
    if (fv->fail_at && (fv->calls == fv->fail_at || (fv->fail_sticky && fv->calls > fv->fail_at)))
        return fail_with(fv->fail_err);
    return BDB_OK;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = bdb_malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static void strip_slashes(char *d)
{
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/')
        d[--n] = '\0';
}

/* The directory part of path (or path itself when whole), without trailing slashes,
 * so "d/x", "d//x" and sync_dir("d/") all agree on "d". */
static char *dir_of(const char *path, int whole)
{
    char *d = dup_str(path);
    if (!d)
        return NULL;
    strip_slashes(d);
    if (whole)
        return d;
    char *slash = strrchr(d, '/');
    if (!slash) {
        free(d);
        return dup_str(".");
    }
    slash[slash == d ? 1 : 0] = '\0';
    strip_slashes(d);
    return d;
}

static fnode *find_node(fault_vfs *fv, const char *path)
{
    for (fnode *n = fv->nodes; n; n = n->next)
        if (n->path && strcmp(n->path, path) == 0)
            return n;
    return NULL;
}

static void drop_pending(fnode *n)
{
    for (size_t i = 0; i < n->nw; i++)
        free(n->w[i].data);
    n->nw = 0;
}

/* Frees a node nobody can reach any more: no handle and nothing unsynced (after a
 * crash nothing is). Every node is on fv->nodes until this frees it. */
static void release_node(fault_vfs *fv, fnode *n)
{
    if (n->refs > 0 || n->nw > 0)
        return;
    fnode **pp = &fv->nodes;
    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    if (n->under)
        bdb_file_close(n->under);
    drop_pending(n);
    free(n->w);
    free(n->path);
    free(n);
}

static int node_size(fnode *n, uint64_t *out)
{
    uint64_t size;
    int rc = bdb_file_size(n->under, &size);
    if (rc != BDB_OK)
        return rc;
    for (size_t i = 0; i < n->nw; i++)
        if (n->w[i].off + n->w[i].len > size)
            size = n->w[i].off + n->w[i].len;
    *out = size;
    return BDB_OK;
}

/* Reads [off, off+len) of the logical file (underlying bytes + unsynced writes);
 * the caller has checked that the range lies inside the logical size. */
static int node_read(fnode *n, uint8_t *buf, size_t len, uint64_t off)
{
    memset(buf, 0, len); /* holes between the old end and a later write read as zeros */
    size_t got;
    int rc = bdb_file_pread(n->under, buf, len, off, &got);
    if (rc != BDB_OK)
        return rc;
    for (size_t i = 0; i < n->nw; i++) {
        const pending_write *w = &n->w[i];
        uint64_t lo = w->off > off ? w->off : off;
        uint64_t hi = w->off + w->len < off + len ? w->off + w->len : off + len;
        if (lo < hi)
            memcpy(buf + (lo - off), w->data + (lo - w->off), (size_t)(hi - lo));
    }
    return BDB_OK;
}

static int ff_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    fault_vfs *fv = (fault_vfs *)v;
    int rc = BDB_OK;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed) {
        rc = dead();
        goto out;
    }
    if ((flags & BDB_O_CREAT) && (rc = count_call(fv)) != BDB_OK)
        goto out;
    ffile *f = bdb_calloc(1, sizeof(*f));
    if (!f) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    fnode *n = find_node(fv, path);
    if (n) {
        if ((flags & BDB_O_CREAT) && (flags & BDB_O_EXCL))
            rc = fail_with(EEXIST);
        else if (flags & BDB_O_TRUNC) {
            drop_pending(n);
            rc = bdb_file_truncate(n->under, 0);
        }
    } else {
        n = bdb_calloc(1, sizeof(*n));
        char *p = dup_str(path);
        if (!n || !p) {
            free(p);
            rc = BDB_ERR_NOMEM;
        } else {
            /* Always read-write underneath: sync() may apply writes made through
             * any handle of this node. */
            int uflags = BDB_O_RDWR | (flags & (BDB_O_CREAT | BDB_O_EXCL | BDB_O_TRUNC));
            rc = bdb_vfs_open(fv->under, path, uflags, &n->under);
            if (rc == BDB_OK) {
                n->path = p;
                n->next = fv->nodes;
                fv->nodes = n;
            } else {
                free(p);
            }
        }
        if (rc != BDB_OK) {
            int e = errno;
            free(n);
            errno = e;
            n = NULL;
        }
    }
    if (rc != BDB_OK) {
        free(f);
        goto out;
    }
    n->refs++;
    f->base.vfs = v;
    f->node = n;
    f->writable = (flags & BDB_O_RDWR) != 0;
    *out = &f->base;
out:
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_close(bdb_file *bf)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    ffile *f = (ffile *)bf;
    pthread_mutex_lock(&fv->mu);
    f->node->refs--;
    release_node(fv, f->node);
    pthread_mutex_unlock(&fv->mu);
    free(f);
    return BDB_OK;
}

static int ff_pread(bdb_file *bf, void *buf, size_t len, uint64_t off, size_t *nread)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    fnode *n = ((ffile *)bf)->node;
    uint64_t size = 0;
    int rc;
    *nread = 0;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed)
        rc = dead();
    else if ((rc = node_size(n, &size)) == BDB_OK && off < size) {
        size_t m = size - off < len ? (size_t)(size - off) : len;
        rc = node_read(n, buf, m, off);
        if (rc == BDB_OK)
            *nread = m;
    }
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_pwrite(bdb_file *bf, const void *buf, size_t len, uint64_t off)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    ffile *f = (ffile *)bf;
    fnode *n = f->node;
    int rc = BDB_OK;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed)
        rc = dead();
    else if (!f->writable)
        rc = fail_with(EBADF);
    else if ((rc = count_call(fv)) == BDB_OK && len > 0) { /* no bytes: no change */
        if (n->nw == n->capw) {
            size_t cap = n->capw ? n->capw * 2 : 16;
            pending_write *w = bdb_realloc(n->w, cap * sizeof(*w));
            if (!w) {
                rc = BDB_ERR_NOMEM;
                goto out;
            }
            n->w = w;
            n->capw = cap;
        }
        uint8_t *copy = bdb_malloc(len);
        if (!copy) {
            rc = BDB_ERR_NOMEM;
            goto out;
        }
        memcpy(copy, buf, len);
        n->w[n->nw++] = (pending_write){.off = off, .len = len, .data = copy};
    }
out:
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

/* Writes every unsynced write, in order, to the underlying file (a crash has cut
 * each one to what survives first), then forgets them. */
static int apply_pending(fnode *n)
{
    int rc = BDB_OK;
    for (size_t i = 0; i < n->nw && rc == BDB_OK; i++)
        if (n->w[i].len > 0)
            rc = bdb_file_pwrite(n->under, n->w[i].data, n->w[i].len, n->w[i].off);
    drop_pending(n);
    return rc;
}

static int ff_sync(bdb_file *bf)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    fnode *n = ((ffile *)bf)->node;
    int rc;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed) {
        rc = dead();
    } else if ((rc = count_call(fv)) != BDB_OK) {
        /* fsyncgate: the kernel forgot these pages; after power off the crash decides */
        if (!(fv->off_at && fv->calls >= fv->off_at))
            drop_pending(n);
    } else {
        rc = apply_pending(n);
        if (rc == BDB_OK)
            rc = bdb_file_sync(n->under);
    }
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_size(bdb_file *bf, uint64_t *out)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    pthread_mutex_lock(&fv->mu);
    int rc = fv->crashed ? dead() : node_size(((ffile *)bf)->node, out);
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_truncate(bdb_file *bf, uint64_t size)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    ffile *f = (ffile *)bf;
    fnode *n = f->node;
    int rc;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed)
        rc = dead();
    else if (!f->writable)
        rc = fail_with(EBADF);
    else if ((rc = count_call(fv)) == BDB_OK) {
        size_t keep = 0;
        for (size_t i = 0; i < n->nw; i++) {
            pending_write w = n->w[i];
            if (w.off >= size) {
                free(w.data);
                continue;
            }
            if (w.off + w.len > size)
                w.len = (size_t)(size - w.off);
            n->w[keep++] = w;
        }
        n->nw = keep;
        rc = bdb_file_truncate(n->under, size);
    }
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

/* A private snapshot instead of a real mapping, so unsynced writes are visible. */
static int ff_map(bdb_file *bf, const void **p, size_t *len)
{
    fault_vfs *fv = (fault_vfs *)bf->vfs;
    fnode *n = ((ffile *)bf)->node;
    uint64_t size = 0;
    int rc;
    *p = NULL;
    *len = 0;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed)
        rc = dead();
    else if ((rc = node_size(n, &size)) == BDB_OK && size > 0) {
        uint8_t *buf = size < SIZE_MAX ? bdb_malloc((size_t)size) : NULL;
        if (!buf)
            rc = BDB_ERR_NOMEM;
        else if ((rc = node_read(n, buf, (size_t)size, 0)) != BDB_OK)
            free(buf);
        else {
            *p = buf;
            *len = (size_t)size;
        }
    }
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_unmap(bdb_file *bf, const void *p, size_t len)
{
    (void)bf;
    (void)len;
    free((void *)p);
    return BDB_OK;
}

static int push_op(fault_vfs *fv, dir_op op)
{
    if (fv->nops == fv->capops) {
        size_t cap = fv->capops ? fv->capops * 2 : 16;
        dir_op *ops = bdb_realloc(fv->ops, cap * sizeof(*ops));
        if (!ops)
            return BDB_ERR_NOMEM;
        fv->ops = ops;
        fv->capops = cap;
    }
    fv->ops[fv->nops++] = op;
    return BDB_OK;
}

static void free_op(dir_op *op)
{
    free(op->dir);
    free(op->from);
    free(op->to);
    free(op->backup);
}

static char *backup_name(fault_vfs *fv, const char *path)
{
    size_t n = strlen(path) + sizeof(BACKUP_TAG) + 21;
    char *p = bdb_malloc(n);
    if (p)
        snprintf(p, n, "%s" BACKUP_TAG "%llu", path, (unsigned long long)++fv->backup_seq);
    return p;
}

/* Moves path aside to a fresh backup name; *backup is NULL if path did not exist. */
static int park(fault_vfs *fv, const char *path, char **backup, int must_exist)
{
    *backup = NULL;
    if (!bdb_vfs_exists(fv->under, path))
        return must_exist ? fail_with(ENOENT) : BDB_OK;
    char *b = backup_name(fv, path);
    if (!b)
        return BDB_ERR_NOMEM;
    int rc = bdb_vfs_rename(fv->under, path, b);
    if (rc != BDB_OK) {
        free(b);
        return rc;
    }
    *backup = b;
    return BDB_OK;
}

static int ff_rename(bdb_vfs *v, const char *from, const char *to)
{
    fault_vfs *fv = (fault_vfs *)v;
    int rc;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed) {
        rc = dead();
        goto out;
    }
    if ((rc = count_call(fv)) != BDB_OK)
        goto out;
    if (strcmp(from, to) == 0) { /* POSIX: renaming a file onto itself does nothing */
        rc = bdb_vfs_exists(fv->under, from) ? BDB_OK : fail_with(ENOENT);
        goto out;
    }
    if (!bdb_vfs_exists(fv->under, from)) {
        rc = fail_with(ENOENT);
        goto out;
    }
    dir_op op = {.kind = OP_RENAME, .dir = dir_of(to, 0), .from = dup_str(from), .to = dup_str(to)};
    if (!op.dir || !op.from || !op.to) {
        free_op(&op);
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    if ((rc = park(fv, to, &op.backup, 0)) != BDB_OK) {
        free_op(&op);
        goto out;
    }
    if ((rc = bdb_vfs_rename(fv->under, from, to)) != BDB_OK) {
        int e = errno;
        if (op.backup)
            bdb_vfs_rename(fv->under, op.backup, to);
        free_op(&op);
        errno = e;
        goto out;
    }
    fnode *displaced = find_node(fv, to);
    fnode *moved = find_node(fv, from);
    if (displaced) {
        free(displaced->path);
        displaced->path = NULL;
    }
    if (moved) {
        char *p = dup_str(to);
        if (p) { /* on failure the node just stops being found by name */
            free(moved->path);
            moved->path = p;
        }
    }
    if (push_op(fv, op) != BDB_OK) { /* the rename stands, but it can no longer be undone */
        if (op.backup)
            bdb_vfs_unlink(fv->under, op.backup); /* nor can the file it replaced return */
        free_op(&op);
    }
out:
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_unlink(bdb_vfs *v, const char *path)
{
    fault_vfs *fv = (fault_vfs *)v;
    int rc;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed) {
        rc = dead();
        goto out;
    }
    if ((rc = count_call(fv)) != BDB_OK)
        goto out;
    dir_op op = {.kind = OP_UNLINK, .dir = dir_of(path, 0), .from = dup_str(path)};
    if (!op.dir || !op.from) {
        free_op(&op);
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    if ((rc = park(fv, path, &op.backup, 1)) != BDB_OK) {
        free_op(&op);
        goto out;
    }
    fnode *n = find_node(fv, path);
    if (n) {
        free(n->path);
        n->path = NULL;
    }
    if (push_op(fv, op) != BDB_OK) {
        bdb_vfs_unlink(fv->under, op.backup);
        free_op(&op);
    }
out:
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

static int ff_mkdir(bdb_vfs *v, const char *path)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    int rc = fv->crashed ? dead() : bdb_vfs_mkdir(fv->under, path);
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

/* Makes the directory operations in `dir` durable: parked files are really deleted. */
static int ff_sync_dir(bdb_vfs *v, const char *path)
{
    fault_vfs *fv = (fault_vfs *)v;
    int rc;
    pthread_mutex_lock(&fv->mu);
    if (fv->crashed) {
        rc = dead();
        goto out;
    }
    if ((rc = count_call(fv)) != BDB_OK)
        goto out; /* the operations stay undurable: a crash still undoes them */
    char *dir = dir_of(path, 1);
    if (!dir) {
        rc = BDB_ERR_NOMEM;
        goto out;
    }
    rc = bdb_vfs_sync_dir(fv->under, path);
    if (rc == BDB_OK) {
        size_t keep = 0;
        for (size_t i = 0; i < fv->nops; i++) {
            dir_op *op = &fv->ops[i];
            if (strcmp(op->dir, dir) != 0) {
                fv->ops[keep++] = *op;
                continue;
            }
            if (op->backup)
                bdb_vfs_unlink(fv->under, op->backup);
            free_op(op);
        }
        fv->nops = keep;
    }
    free(dir);
out:
    pthread_mutex_unlock(&fv->mu);
    return rc;
}

typedef struct list_ctx {
    int (*cb)(void *ctx, const char *name);
    void *ctx;
} list_ctx;

static int list_filter(void *ctx, const char *name)
{
    list_ctx *lc = ctx;
    return strstr(name, BACKUP_TAG) ? 0 : lc->cb(lc->ctx, name);
}

static int ff_list(bdb_vfs *v, const char *dir, int (*cb)(void *ctx, const char *name), void *ctx)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    int crashed = fv->crashed;
    pthread_mutex_unlock(&fv->mu);
    if (crashed)
        return dead();
    /* Unlocked: cb may call back into this VFS. */
    list_ctx lc = {cb, ctx};
    return bdb_vfs_list(fv->under, dir, list_filter, &lc);
}

static int ff_exists(bdb_vfs *v, const char *path)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    int r = fv->crashed ? 0 : bdb_vfs_exists(fv->under, path);
    pthread_mutex_unlock(&fv->mu);
    return r;
}

static const struct bdb_vfs_ops fault_ops = {
    .open = ff_open,
    .close = ff_close,
    .pread = ff_pread,
    .pwrite = ff_pwrite,
    .sync = ff_sync,
    .size = ff_size,
    .truncate = ff_truncate,
    .map = ff_map,
    .unmap = ff_unmap,
    .rename = ff_rename,
    .unlink = ff_unlink,
    .mkdir = ff_mkdir,
    .sync_dir = ff_sync_dir,
    .list = ff_list,
    .exists = ff_exists,
};

bdb_vfs *bdb_vfs_fault_new(bdb_vfs *under, uint64_t seed)
{
    fault_vfs *fv = bdb_calloc(1, sizeof(*fv));
    if (!fv)
        return NULL;
    fv->base.ops = &fault_ops;
    fv->under = under;
    fv->rng = seed ? seed : 0x9E3779B97F4A7C15ULL; /* xorshift must not start at 0 */
    pthread_mutex_init(&fv->mu, NULL);
    return &fv->base;
}

void bdb_vfs_fault_fail_at(bdb_vfs *v, uint64_t n, int err, int sticky)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    fv->fail_at = n;
    fv->fail_err = err;
    fv->fail_sticky = sticky;
    pthread_mutex_unlock(&fv->mu);
}

void bdb_vfs_fault_power_off_at(bdb_vfs *v, uint64_t n)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    fv->off_at = n;
    pthread_mutex_unlock(&fv->mu);
}

uint64_t bdb_vfs_fault_calls(bdb_vfs *v)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    uint64_t n = fv->calls;
    pthread_mutex_unlock(&fv->mu);
    return n;
}

/* How many leading bytes of one unsynced write survive the crash. */
static size_t survivors(fault_vfs *fv, const pending_write *w, enum bdb_fault_crash_mode mode,
                        int sector)
{
    switch (mode) {
    case BDB_CRASH_KEEP:
        return w->len;
    case BDB_CRASH_DROP:
        return 0;
    case BDB_CRASH_REORDER:
        return (next_rand(fv) & 1) ? w->len : 0;
    case BDB_CRASH_TEAR:
    default:
        break;
    }
    /* Sectors are aligned to the file, not to the write: a write that starts inside a
     * sector keeps its bytes of that sector only if that whole sector made it. */
    uint64_t s = sector > 0 ? (uint64_t)sector : 512;
    uint64_t first = w->off / s;
    uint64_t spanned = (w->off + w->len + s - 1) / s - first;
    uint64_t m = next_rand(fv) % (spanned + 1);
    uint64_t end = (first + m) * s;
    if (end <= w->off)
        return 0;
    return end - w->off >= w->len ? w->len : (size_t)(end - w->off);
}

static void crash_locked(fault_vfs *fv, enum bdb_fault_crash_mode mode, int sector)
{
    /* Only a crash takes a node's underlying handle, so every node still has one. The
     * fate of each write is drawn in order, then the survivors are applied in order. */
    for (fnode *n = fv->nodes; n; n = n->next) {
        for (size_t i = 0; i < n->nw; i++)
            n->w[i].len = survivors(fv, &n->w[i], mode, sector);
        apply_pending(n);
        bdb_file_sync(n->under);
    }
    /* Newest first, so chains of renames unwind to the original names. */
    for (size_t i = fv->nops; i-- > 0;) {
        dir_op *op = &fv->ops[i];
        if (mode == BDB_CRASH_KEEP) {
            if (op->backup)
                bdb_vfs_unlink(fv->under, op->backup);
        } else if (op->kind == OP_RENAME) {
            bdb_vfs_rename(fv->under, op->to, op->from);
            if (op->backup)
                bdb_vfs_rename(fv->under, op->backup, op->to);
        } else {
            bdb_vfs_rename(fv->under, op->backup, op->from);
        }
        free_op(op);
    }
    fv->nops = 0;
    for (fnode *n = fv->nodes; n; n = n->next) {
        bdb_file_close(n->under);
        n->under = NULL;
    }
    /* Nodes still referenced by handles live until those handles are closed. */
    for (fnode *n = fv->nodes, *next; n; n = next) {
        next = n->next;
        release_node(fv, n);
    }
    fv->crashed = 1;
}

void bdb_vfs_fault_crash(bdb_vfs *v, enum bdb_fault_crash_mode mode, int sector)
{
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    if (!fv->crashed)
        crash_locked(fv, mode, sector);
    pthread_mutex_unlock(&fv->mu);
}

void bdb_vfs_fault_free(bdb_vfs *v)
{
    if (!v)
        return;
    fault_vfs *fv = (fault_vfs *)v;
    pthread_mutex_lock(&fv->mu);
    if (!fv->crashed)
        crash_locked(fv, BDB_CRASH_KEEP, 512);
    while (fv->nodes) {
        fnode *n = fv->nodes;
        n->refs = 0;
        release_node(fv, n);
    }
    pthread_mutex_unlock(&fv->mu);
    pthread_mutex_destroy(&fv->mu);
    free(fv->ops);
    free(fv);
}
