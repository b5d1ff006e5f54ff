/* fault_preload: an LD_PRELOAD library for tests/crash/test_io_faults.py that makes
 * the real bucketdb binary see I/O errors, with no test hook in the server.
 *
 * Armed through files in the directory named by BDB_FAULT_DIR (absent: the library
 * does nothing, every call goes straight to libc):
 *   fsync-eio   the next fsync or fdatasync fails with EIO and the file is removed:
 *               one failure, after which fsync works again (the "fsyncgate" case: a
 *               server that retries and then acknowledges has lost data).
 *   enospc      while it exists, write, pwrite and fallocate on files fail with ENOSPC
 *               (the fallback when the test cannot mount a small tmpfs).
 * Built by the test with `cc -shared -fPIC`; never linked into bucketdb. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static int armed(const char *name, int take)
{
    const char *dir = getenv("BDB_FAULT_DIR");
    if (!dir)
        return 0;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (access(p, F_OK) != 0)
        return 0;
    if (take && unlink(p) != 0)
        return 0; /* another thread took it first */
    return 1;
}

/* Only regular files past stderr: sockets, pipes and the log must keep working. */
static int regular(int fd)
{
    struct stat st;
    return fd > 2 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

int fsync(int fd)
{
    if (armed("fsync-eio", 1)) {
        errno = EIO;
        return -1;
    }
    return REAL("fsync", int (*)(int))(fd);
}

int fdatasync(int fd)
{
    if (armed("fsync-eio", 1)) {
        errno = EIO;
        return -1;
    }
    return REAL("fdatasync", int (*)(int))(fd);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    if (n > 0 && regular(fd) && armed("enospc", 0)) {
        errno = ENOSPC;
        return -1;
    }
    return REAL("write", ssize_t(*)(int, const void *, size_t))(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (n > 0 && regular(fd) && armed("enospc", 0)) {
        errno = ENOSPC;
        return -1;
    }
    return REAL("pwrite", ssize_t(*)(int, const void *, size_t, off_t))(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (n > 0 && regular(fd) && armed("enospc", 0)) {
        errno = ENOSPC;
        return -1;
    }
    return REAL("pwrite64", ssize_t(*)(int, const void *, size_t, off_t))(fd, buf, n, off);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    if (armed("enospc", 0)) {
        errno = ENOSPC;
        return -1;
    }
    return REAL("fallocate", int (*)(int, int, off_t, off_t))(fd, mode, off, len);
}
