/* vfs_util: whole-file helpers built only on the vfs operations, so they behave the
 * same over the POSIX VFS and the fault-injecting one. */
#include "storage/vfs/vfs.h"
#include "common/alloc.h"
#include "common/path.h"

#include "bucketdb/bdb.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Joins dir/name[suffix] into a malloc'd string. */
int bdb_vfs_write_atomic(bdb_vfs *v, const char *dir, const char *name, const void *data,
                         size_t len)
{
    char *path = bdb_path_join(dir, name, NULL);
    char *tmp = bdb_path_join(dir, name, ".tmp");
    bdb_file *f = NULL;
    int rc = BDB_ERR_NOMEM;
    if (!path || !tmp)
        goto out;
    /* A .tmp left behind by an earlier crash is simply overwritten. */
    rc = bdb_vfs_open(v, tmp, BDB_O_RDWR | BDB_O_CREAT | BDB_O_TRUNC, &f);
    if (rc != BDB_OK)
        goto out;
    rc = bdb_file_pwrite(f, data, len, 0);
    if (rc == BDB_OK)
        rc = bdb_file_sync(f);
    int crc = bdb_file_close(f);
    if (rc == BDB_OK)
        rc = crc;
    /* The rename publishes the new content; syncing the directory makes the publication
     * itself survive power loss. Before the data sync, a crash could leave the new name
     * pointing at an empty file. */
    if (rc == BDB_OK)
        rc = bdb_vfs_rename(v, tmp, path);
    if (rc == BDB_OK) {
        rc = bdb_vfs_sync_dir(v, dir);
    } else {
        int e = errno;
        bdb_vfs_unlink(v, tmp); /* best effort; the caller wants the first error */
        errno = e;
    }
out:
    free(path);
    free(tmp);
    return rc;
}

int bdb_vfs_read_all(bdb_vfs *v, const char *path, void **data, size_t *len)
{
    bdb_file *f;
    int rc = bdb_vfs_open(v, path, BDB_O_RDONLY, &f);
    if (rc != BDB_OK)
        return rc;
    uint64_t size;
    rc = bdb_file_size(f, &size);
    uint8_t *buf = NULL;
    size_t got = 0;
    if (rc == BDB_OK && size >= SIZE_MAX) {
        errno = EFBIG;
        rc = BDB_ERR_IO;
    }
    if (rc == BDB_OK) {
        /* +1 so an empty file still yields a non-NULL buffer the caller can free. */
        buf = bdb_malloc((size_t)size + 1);
        if (!buf)
            rc = BDB_ERR_NOMEM;
    }
    if (rc == BDB_OK)
        rc = bdb_file_pread(f, buf, (size_t)size, 0, &got);
    int e = errno;
    bdb_file_close(f);
    errno = e;
    if (rc != BDB_OK) {
        free(buf);
        return rc;
    }
    /* A file that shrank since fstat is returned as read; one that grew is cut at the
     * size seen, which is all a snapshot read can promise. */
    *data = buf;
    *len = got;
    return BDB_OK;
}
