/* failvfs: a test VFS over another one that fails exactly one call, any call.
 *
 * The fault VFS (vfs_fault.h) counts only the calls that change the disk, because its
 * job is power loss. The I/O-fault sweeps (iofault_sweep_test.c) also need the reads
 * to fail: opening a file for reading, pread, map, size, listing a directory, so that
 * the engine's error paths on the way in (open, replay, block and tier reads) are
 * exercised as well. Every call counts here except exists (it has no error return) and
 * unmap. Call number fail_at (1-based; 0 = never) fails once with err, without
 * reaching the file system, and the VFS remembers which operation and path it was.
 * Counters are atomic: the engine may call from its own threads.
 * Header-only, like crashutil.h, because each test is its own binary. */
#ifndef BDB_FAILVFS_H
#define BDB_FAILVFS_H

#include "bucketdb/bdb.h"
#include "storage/vfs/vfs.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fv_op {
    FV_NONE,
    FV_OPEN,
    FV_CLOSE,
    FV_PREAD,
    FV_PWRITE,
    FV_SYNC,
    FV_SIZE,
    FV_TRUNCATE,
    FV_MAP,
    FV_RENAME,
    FV_UNLINK,
    FV_MKDIR,
    FV_SYNC_DIR,
    FV_LIST,
};

static const char *const fv_op_names[] = {"none",   "open",  "close",    "pread", "pwrite",
                                          "sync",   "size",  "truncate", "map",   "rename",
                                          "unlink", "mkdir", "sync_dir", "list"};

typedef struct failvfs {
    bdb_vfs base;
    bdb_vfs *under;
    _Atomic uint64_t calls;
    uint64_t fail_at;
    int err;
    /* what the failed call was (FV_NONE until it happened) */
    enum fv_op failed_op;
    char failed_path[512];
} failvfs;

typedef struct fv_file {
    bdb_file base;
    bdb_file *in;
    char path[512];
} fv_file;

/* 1 if this call is the one to fail (then errno is set and the details recorded). */
static inline int fv_hit(failvfs *v, enum fv_op op, const char *path)
{
    uint64_t n = atomic_fetch_add(&v->calls, 1) + 1;
    if (n != v->fail_at)
        return 0;
    v->failed_op = op;
    snprintf(v->failed_path, sizeof v->failed_path, "%s", path ? path : "");
    errno = v->err;
    return 1;
}

static inline int fv_status(const failvfs *v)
{
    return v->err == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO;
}

static inline failvfs *fv_of(bdb_file *f)
{
    return (failvfs *)f->vfs;
}

static int fv_open(bdb_vfs *bv, const char *path, int flags, bdb_file **out)
{
    failvfs *v = (failvfs *)bv;
    if (fv_hit(v, FV_OPEN, path))
        return fv_status(v);
    fv_file *f = calloc(1, sizeof *f);
    if (!f)
        return BDB_ERR_NOMEM;
    int rc = bdb_vfs_open(v->under, path, flags, &f->in);
    if (rc != BDB_OK) {
        free(f);
        return rc;
    }
    f->base.vfs = bv;
    snprintf(f->path, sizeof f->path, "%s", path);
    *out = &f->base;
    return BDB_OK;
}

static int fv_close(bdb_file *bf)
{
    fv_file *f = (fv_file *)bf;
    /* a failing close still releases the file, as close(2) does */
    int hit = fv_hit(fv_of(bf), FV_CLOSE, f->path);
    int rc = bdb_file_close(f->in);
    int st = fv_status(fv_of(bf));
    free(f);
    return hit ? st : rc;
}

static int fv_pread(bdb_file *bf, void *buf, size_t n, uint64_t off, size_t *nread)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_PREAD, f->path)) {
        *nread = 0;
        return fv_status(fv_of(bf));
    }
    return bdb_file_pread(f->in, buf, n, off, nread);
}

static int fv_pwrite(bdb_file *bf, const void *buf, size_t n, uint64_t off)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_PWRITE, f->path))
        return fv_status(fv_of(bf));
    return bdb_file_pwrite(f->in, buf, n, off);
}

static int fv_sync(bdb_file *bf)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_SYNC, f->path))
        return fv_status(fv_of(bf));
    return bdb_file_sync(f->in);
}

static int fv_size(bdb_file *bf, uint64_t *out)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_SIZE, f->path))
        return fv_status(fv_of(bf));
    return bdb_file_size(f->in, out);
}

static int fv_truncate(bdb_file *bf, uint64_t size)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_TRUNCATE, f->path))
        return fv_status(fv_of(bf));
    return bdb_file_truncate(f->in, size);
}

static int fv_map(bdb_file *bf, const void **p, size_t *len)
{
    fv_file *f = (fv_file *)bf;
    if (fv_hit(fv_of(bf), FV_MAP, f->path))
        return fv_status(fv_of(bf));
    return bdb_file_map(f->in, p, len);
}

static int fv_unmap(bdb_file *bf, const void *p, size_t len)
{
    return bdb_file_unmap(((fv_file *)bf)->in, p, len);
}

static int fv_rename(bdb_vfs *bv, const char *from, const char *to)
{
    failvfs *v = (failvfs *)bv;
    return fv_hit(v, FV_RENAME, to) ? fv_status(v) : bdb_vfs_rename(v->under, from, to);
}

static int fv_unlink(bdb_vfs *bv, const char *path)
{
    failvfs *v = (failvfs *)bv;
    return fv_hit(v, FV_UNLINK, path) ? fv_status(v) : bdb_vfs_unlink(v->under, path);
}

static int fv_mkdir(bdb_vfs *bv, const char *path)
{
    failvfs *v = (failvfs *)bv;
    return fv_hit(v, FV_MKDIR, path) ? fv_status(v) : bdb_vfs_mkdir(v->under, path);
}

static int fv_sync_dir(bdb_vfs *bv, const char *path)
{
    failvfs *v = (failvfs *)bv;
    return fv_hit(v, FV_SYNC_DIR, path) ? fv_status(v) : bdb_vfs_sync_dir(v->under, path);
}

static int fv_list(bdb_vfs *bv, const char *dir, int (*cb)(void *, const char *), void *ctx)
{
    failvfs *v = (failvfs *)bv;
    return fv_hit(v, FV_LIST, dir) ? fv_status(v) : bdb_vfs_list(v->under, dir, cb, ctx);
}

static int fv_exists(bdb_vfs *bv, const char *path)
{
    return bdb_vfs_exists(((failvfs *)bv)->under, path);
}

static const struct bdb_vfs_ops fv_ops = {
    .open = fv_open,
    .close = fv_close,
    .pread = fv_pread,
    .pwrite = fv_pwrite,
    .sync = fv_sync,
    .size = fv_size,
    .truncate = fv_truncate,
    .map = fv_map,
    .unmap = fv_unmap,
    .rename = fv_rename,
    .unlink = fv_unlink,
    .mkdir = fv_mkdir,
    .sync_dir = fv_sync_dir,
    .list = fv_list,
    .exists = fv_exists,
};

/* A failvfs over under that fails call fail_at (0 = none) with err. */
static inline void fv_init(failvfs *v, bdb_vfs *under, uint64_t fail_at, int err)
{
    memset(v, 0, sizeof *v);
    v->base.ops = &fv_ops;
    v->under = under;
    v->fail_at = fail_at;
    v->err = err;
}

static inline uint64_t fv_calls(failvfs *v)
{
    return atomic_load(&v->calls);
}

#endif
