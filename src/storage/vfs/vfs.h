/* vfs: the one file-system interface every byte of the storage engine goes through.
 *
 * Production uses bdb_vfs_posix(). Tests use a fault-injecting VFS (vfs_fault.h) that
 * can fail the Nth call with a chosen errno and simulate power loss. Keeping all I/O
 * here is what makes crash and fault tests cheap (the SQLite VFS lesson).
 *
 * All functions return BDB_OK or a negative bdb_status; on BDB_ERR_IO / BDB_ERR_NOSPACE
 * errno holds the system error (ENOSPC maps to BDB_ERR_NOSPACE). */
#ifndef BDB_VFS_H
#define BDB_VFS_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_vfs bdb_vfs;
typedef struct bdb_file bdb_file;

enum {
    BDB_O_RDONLY = 0,
    BDB_O_RDWR = 1,
    BDB_O_CREAT = 2,
    BDB_O_EXCL = 4,
    BDB_O_TRUNC = 8,
};

/* Operations table; implementations fill it. Callers use the wrappers below. */
struct bdb_vfs_ops {
    int (*open)(bdb_vfs *v, const char *path, int flags, bdb_file **out);
    int (*close)(bdb_file *f);
    int (*pread)(bdb_file *f, void *buf, size_t n, uint64_t off, size_t *nread);
    int (*pwrite)(bdb_file *f, const void *buf, size_t n, uint64_t off);
    int (*sync)(bdb_file *f);
    int (*size)(bdb_file *f, uint64_t *out);
    int (*truncate)(bdb_file *f, uint64_t size);
    /* Read-only mapping of the whole file; *p is NULL for an empty file. */
    int (*map)(bdb_file *f, const void **p, size_t *len);
    int (*unmap)(bdb_file *f, const void *p, size_t len);
    int (*rename)(bdb_vfs *v, const char *from, const char *to);
    int (*unlink)(bdb_vfs *v, const char *path);
    int (*mkdir)(bdb_vfs *v, const char *path); /* BDB_OK if it already exists */
    int (*sync_dir)(bdb_vfs *v, const char *path);
    /* Calls cb for each entry name (not "." or ".."); cb returning non-zero stops. */
    int (*list)(bdb_vfs *v, const char *dir, int (*cb)(void *ctx, const char *name), void *ctx);
    int (*exists)(bdb_vfs *v, const char *path); /* 1 yes, 0 no */
};

struct bdb_vfs {
    const struct bdb_vfs_ops *ops;
};

/* Base of every file object; implementations embed it first. */
struct bdb_file {
    bdb_vfs *vfs;
};

bdb_vfs *bdb_vfs_posix(void); /* process-wide singleton */

static inline int bdb_vfs_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    return v->ops->open(v, path, flags, out);
}
static inline int bdb_file_close(bdb_file *f)
{
    return f->vfs->ops->close(f);
}
static inline int bdb_file_pread(bdb_file *f, void *buf, size_t n, uint64_t off, size_t *nread)
{
    return f->vfs->ops->pread(f, buf, n, off, nread);
}
static inline int bdb_file_pwrite(bdb_file *f, const void *buf, size_t n, uint64_t off)
{
    return f->vfs->ops->pwrite(f, buf, n, off);
}
static inline int bdb_file_sync(bdb_file *f)
{
    return f->vfs->ops->sync(f);
}
static inline int bdb_file_size(bdb_file *f, uint64_t *out)
{
    return f->vfs->ops->size(f, out);
}
static inline int bdb_file_truncate(bdb_file *f, uint64_t size)
{
    return f->vfs->ops->truncate(f, size);
}
static inline int bdb_file_map(bdb_file *f, const void **p, size_t *len)
{
    return f->vfs->ops->map(f, p, len);
}
static inline int bdb_file_unmap(bdb_file *f, const void *p, size_t len)
{
    return f->vfs->ops->unmap(f, p, len);
}
static inline int bdb_vfs_rename(bdb_vfs *v, const char *from, const char *to)
{
    return v->ops->rename(v, from, to);
}
static inline int bdb_vfs_unlink(bdb_vfs *v, const char *path)
{
    return v->ops->unlink(v, path);
}
static inline int bdb_vfs_mkdir(bdb_vfs *v, const char *path)
{
    return v->ops->mkdir(v, path);
}
static inline int bdb_vfs_sync_dir(bdb_vfs *v, const char *path)
{
    return v->ops->sync_dir(v, path);
}
static inline int bdb_vfs_list(bdb_vfs *v, const char *dir, int (*cb)(void *, const char *),
                               void *ctx)
{
    return v->ops->list(v, dir, cb, ctx);
}
static inline int bdb_vfs_exists(bdb_vfs *v, const char *path)
{
    return v->ops->exists(v, path);
}

/* A file written in pieces and published atomically: `<dir>/<name>.tmp` is created
 * (truncated), appended to, then on commit synced, renamed to <name> and the directory
 * synced. Either the old or the new content survives a crash, never a mix; until the
 * commit nothing is visible under <name>. Open: BDB_ERR_NOMEM or the open's error (no
 * stream then). Commit and abort end the stream whatever happens; a failed commit or
 * an abort removes the .tmp (best effort, errno kept). */
typedef struct bdb_vfs_stream {
    bdb_vfs *v;
    bdb_file *f;
    char *dir, *path, *tmp;
    uint64_t off; /* bytes written so far */
} bdb_vfs_stream;
int bdb_vfs_stream_open(bdb_vfs_stream *s, bdb_vfs *v, const char *dir, const char *name);
int bdb_vfs_stream_write(bdb_vfs_stream *s, const void *p, size_t n);
int bdb_vfs_stream_commit(bdb_vfs_stream *s);
void bdb_vfs_stream_abort(bdb_vfs_stream *s);

/* Writes a whole file atomically: one stream (above) written at once. */
int bdb_vfs_write_atomic(bdb_vfs *v, const char *dir, const char *name, const void *data,
                         size_t len);
/* Writes a whole file atomically as head[0..hlen), then src[0..slen) compressed as one
 * zstd frame at level (the frame header carries slen), then the CRC-32 (zlib's) of
 * every byte before it as a little-endian u32: the layout of the catalog and the
 * current-state index (docs/formats). The compressed bytes go out in pieces, so the
 * file is never held in memory beside src. BDB_OK, BDB_ERR_NOMEM, BDB_ERR_IO (the
 * compressor failed too), or the stream's error. */
int bdb_vfs_write_zstd(bdb_vfs *v, const char *dir, const char *name, const void *head, size_t hlen,
                       const void *src, size_t slen, int level);
/* The zstd frame bdb_vfs_write_zstd would write for src[0..slen) at level, made
 * ahead of time into out (appended; its spare capacity given back): a caller that
 * must keep an image until a later write keeps the smaller frame instead. BDB_OK,
 * BDB_ERR_NOMEM, BDB_ERR_IO (the compressor failed). */
int bdb_zstd_frame(const void *src, size_t slen, int level, bdb_buf *out);
/* Writes a whole file atomically as head[0..hlen), frame[0..flen) (from
 * bdb_zstd_frame) and the CRC-32 of every byte before it: the file bdb_vfs_write_zstd
 * writes. BDB_OK or the stream's error. */
int bdb_vfs_write_framed(bdb_vfs *v, const char *dir, const char *name, const void *head,
                         size_t hlen, const void *frame, size_t flen);
/* Reads a whole file into a malloc'd buffer (caller frees). */
int bdb_vfs_read_all(bdb_vfs *v, const char *path, void **data, size_t *len);

#endif
