/* vfs_posix: the production VFS, a thin layer over POSIX file descriptors.
 *
 * Every call retries on EINTR, and pread/pwrite loop over short transfers so callers
 * never see a partial write as success. Failures keep errno and map ENOSPC to
 * BDB_ERR_NOSPACE, everything else to BDB_ERR_IO (vfs.h). */
#include "storage/vfs/vfs.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct posix_file {
    bdb_file base;
    int fd;
} posix_file;

static int err_status(void)
{
    return errno == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO;
}

static int px_open(bdb_vfs *v, const char *path, int flags, bdb_file **out)
{
    int oflags = O_CLOEXEC | ((flags & BDB_O_RDWR) ? O_RDWR : O_RDONLY);
    if (flags & BDB_O_CREAT)
        oflags |= O_CREAT;
    if (flags & BDB_O_EXCL)
        oflags |= O_EXCL;
    if (flags & BDB_O_TRUNC)
        oflags |= O_TRUNC;
    posix_file *f = bdb_malloc(sizeof(*f));
    if (!f)
        return BDB_ERR_NOMEM;
    int fd;
    do
        fd = open(path, oflags, 0644);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        int e = errno;
        free(f);
        errno = e;
        return err_status();
    }
    f->base.vfs = v;
    f->fd = fd;
    *out = &f->base;
    return BDB_OK;
}

static int px_close(bdb_file *bf)
{
    posix_file *f = (posix_file *)bf;
    /* Linux releases the descriptor even when close() fails, so retrying on EINTR
     * could close someone else's freshly opened fd. */
    int rc = close(f->fd) == 0 || errno == EINTR ? BDB_OK : BDB_ERR_IO;
    int e = errno;
    free(f);
    errno = e;
    return rc;
}

static int px_pread(bdb_file *bf, void *buf, size_t n, uint64_t off, size_t *nread)
{
    posix_file *f = (posix_file *)bf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *nread = done;
            return err_status();
        }
        if (r == 0)
            break; /* end of file */
        done += (size_t)r;
    }
    *nread = done;
    return BDB_OK;
}

static int px_pwrite(bdb_file *bf, const void *buf, size_t n, uint64_t off)
{
    posix_file *f = (posix_file *)bf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(f->fd, (const char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return err_status();
        }
        if (r == 0) { /* not expected from a regular file; avoid spinning on it */
            errno = EIO;
            return BDB_ERR_IO;
        }
        done += (size_t)r;
    }
    return BDB_OK;
}

static int px_sync(bdb_file *bf)
{
    posix_file *f = (posix_file *)bf;
    /* fdatasync still flushes the size change of an appended file, which is the only
     * metadata our readers depend on; it skips the mtime update that fsync would add. */
    int r;
    do
        r = fdatasync(f->fd);
    while (r < 0 && errno == EINTR);
    return r < 0 ? err_status() : BDB_OK;
}

static int px_size(bdb_file *bf, uint64_t *out)
{
    posix_file *f = (posix_file *)bf;
    struct stat st;
    if (fstat(f->fd, &st) < 0)
        return err_status();
    *out = (uint64_t)st.st_size;
    return BDB_OK;
}

static int px_truncate(bdb_file *bf, uint64_t size)
{
    posix_file *f = (posix_file *)bf;
    int r;
    do
        r = ftruncate(f->fd, (off_t)size);
    while (r < 0 && errno == EINTR);
    return r < 0 ? err_status() : BDB_OK;
}

static int px_map(bdb_file *bf, const void **p, size_t *len)
{
    uint64_t size;
    int rc = px_size(bf, &size);
    if (rc != BDB_OK)
        return rc;
    *p = NULL;
    *len = 0;
    if (size == 0)
        return BDB_OK; /* mmap rejects a zero length */
    if (size > SIZE_MAX) {
        errno = EFBIG;
        return BDB_ERR_IO;
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, ((posix_file *)bf)->fd, 0);
    if (m == MAP_FAILED)
        return err_status();
    *p = m;
    *len = (size_t)size;
    return BDB_OK;
}

static int px_unmap(bdb_file *bf, const void *p, size_t len)
{
    (void)bf;
    if (!p)
        return BDB_OK;
    return munmap((void *)p, len) < 0 ? err_status() : BDB_OK;
}

static int px_rename(bdb_vfs *v, const char *from, const char *to)
{
    (void)v;
    return rename(from, to) < 0 ? err_status() : BDB_OK;
}

static int px_unlink(bdb_vfs *v, const char *path)
{
    (void)v;
    return unlink(path) < 0 ? err_status() : BDB_OK;
}

static int px_mkdir(bdb_vfs *v, const char *path)
{
    (void)v;
    if (mkdir(path, 0755) == 0)
        return BDB_OK;
    if (errno != EEXIST)
        return err_status();
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return BDB_OK;
    errno = ENOTDIR; /* a file sits where the directory should be */
    return BDB_ERR_IO;
}

static int px_sync_dir(bdb_vfs *v, const char *path)
{
    (void)v;
    int fd;
    do
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return err_status();
    int r;
    do
        r = fsync(fd);
    while (r < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    errno = e;
    return r < 0 ? err_status() : BDB_OK;
}

static int px_list(bdb_vfs *v, const char *dir, int (*cb)(void *ctx, const char *name), void *ctx)
{
    (void)v;
    DIR *d = opendir(dir);
    if (!d)
        return err_status();
    int rc = BDB_OK;
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno != 0)
                rc = err_status();
            break;
        }
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (cb(ctx, de->d_name) != 0)
            break;
    }
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

static int px_exists(bdb_vfs *v, const char *path)
{
    (void)v;
    struct stat st;
    return stat(path, &st) == 0;
}

static const struct bdb_vfs_ops posix_ops = {
    .open = px_open,
    .close = px_close,
    .pread = px_pread,
    .pwrite = px_pwrite,
    .sync = px_sync,
    .size = px_size,
    .truncate = px_truncate,
    .map = px_map,
    .unmap = px_unmap,
    .rename = px_rename,
    .unlink = px_unlink,
    .mkdir = px_mkdir,
    .sync_dir = px_sync_dir,
    .list = px_list,
    .exists = px_exists,
};

static bdb_vfs posix_vfs = {.ops = &posix_ops};

bdb_vfs *bdb_vfs_posix(void)
{
    return &posix_vfs;
}
