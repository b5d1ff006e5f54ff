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
int bdb_vfs_stream_open(bdb_vfs_stream *s, bdb_vfs *v, const char *dir, const char *name)
{
    memset(s, 0, sizeof *s);
    s->v = v;
    s->dir = bdb_strdup(dir);
    s->path = bdb_path_join(dir, name, NULL);
    s->tmp = bdb_path_join(dir, name, ".tmp");
    if (!s->dir || !s->path || !s->tmp) {
        bdb_vfs_stream_abort(s);
        return BDB_ERR_NOMEM;
    }
    /* A .tmp left behind by an earlier crash is simply overwritten. */
    int rc = bdb_vfs_open(v, s->tmp, BDB_O_RDWR | BDB_O_CREAT | BDB_O_TRUNC, &s->f);
    if (rc != BDB_OK) {
        free(s->tmp); /* not created: nothing to unlink */
        s->tmp = NULL;
        bdb_vfs_stream_abort(s);
    }
    return rc;
}

int bdb_vfs_stream_write(bdb_vfs_stream *s, const void *p, size_t n)
{
    int rc = n ? bdb_file_pwrite(s->f, p, n, s->off) : BDB_OK;
    if (rc == BDB_OK)
        s->off += n;
    return rc;
}

int bdb_vfs_stream_commit(bdb_vfs_stream *s)
{
    int rc = bdb_file_sync(s->f);
    int crc = bdb_file_close(s->f);
    s->f = NULL;
    if (rc == BDB_OK)
        rc = crc;
    /* The rename publishes the new content; syncing the directory makes the publication
     * itself survive power loss. Before the data sync, a crash could leave the new name
     * pointing at an empty file. */
    if (rc == BDB_OK)
        rc = bdb_vfs_rename(s->v, s->tmp, s->path);
    if (rc == BDB_OK) {
        rc = bdb_vfs_sync_dir(s->v, s->dir);
        free(s->tmp);
        s->tmp = NULL; /* published: nothing for the abort below to unlink */
    }
    bdb_vfs_stream_abort(s);
    return rc;
}

void bdb_vfs_stream_abort(bdb_vfs_stream *s)
{
    int e = errno; /* best effort; the caller wants the first error */
    if (s->f)
        bdb_file_close(s->f);
    if (s->tmp && s->v)
        bdb_vfs_unlink(s->v, s->tmp);
    errno = e;
    free(s->dir);
    free(s->path);
    free(s->tmp);
    memset(s, 0, sizeof *s);
}

int bdb_vfs_write_atomic(bdb_vfs *v, const char *dir, const char *name, const void *data,
                         size_t len)
{
    bdb_vfs_stream s;
    int rc = bdb_vfs_stream_open(&s, v, dir, name);
    if (rc != BDB_OK)
        return rc;
    rc = bdb_vfs_stream_write(&s, data, len);
    if (rc != BDB_OK) {
        bdb_vfs_stream_abort(&s);
        return rc;
    }
    return bdb_vfs_stream_commit(&s);
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
