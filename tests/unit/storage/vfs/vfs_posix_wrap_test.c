/* vfs_posix_wrap: the POSIX VFS when its system calls misbehave in ways a test cannot
 * provoke on a healthy local disk: EINTR, short reads and writes, a write of 0 bytes,
 * failing fstat, mmap, munmap, close, fsync and readdir.
 *
 * How: the Makefile links this one binary with `ld --wrap=SYM` for each call in
 * VFS_WRAPPED, so every reference to SYM from the statically linked objects
 * (libbucketdb.a's vfs_posix.o among them) goes to __wrap_SYM below, and __real_SYM is
 * the libc function. A wrapper passes the call through unless the test armed a script
 * for it: first `eintr` calls fail with EINTR, then `pass` calls go through, then every
 * call fails with `err` (0: never). `cap` limits the bytes one pread/pwrite moves, and
 * the next `zero` pwrites return 0. Shared libraries (libc itself, cmocka, the sanitizer
 * runtime) are not affected, and the production code carries no test hook.
 *
 * Each test checks what vfs.h promises: EINTR is retried and the full data arrives, a
 * short transfer is completed, a persistent error comes back as BDB_ERR_IO or (ENOSPC)
 * BDB_ERR_NOSPACE with errno kept, and no descriptor or memory is leaked (descriptors
 * are counted in /proc/self/fd, memory by ASan in the asan build). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#define VT_PREFIX "bdb-vfswrap"
#include "vfs_testutil.h"

#include "bucketdb/bdb.h"
#include "storage/vfs/vfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

enum wop {
    W_OPEN,
    W_CLOSE,
    W_PREAD,
    W_PWRITE,
    W_FDATASYNC,
    W_FSTAT,
    W_FTRUNCATE,
    W_MMAP,
    W_MUNMAP,
    W_FSYNC,
    W_READDIR,
    W_N
};

typedef struct script {
    int eintr; /* this many calls fail with EINTR first */
    int pass;  /* then this many go through */
    int err;   /* then every call fails with this errno; 0 = never */
    size_t cap;
    int zero;
    int calls; /* calls seen, armed or not, since the last reset */
} script;

static script S[W_N];

static void reset(void)
{
    memset(S, 0, sizeof S);
}

/* 1 if this call must fail (errno set), 0 if it goes through. */
static int scripted(enum wop op)
{
    script *s = &S[op];
    s->calls++;
    if (s->eintr > 0) {
        s->eintr--;
        errno = EINTR;
        return 1;
    }
    if (s->pass > 0) {
        s->pass--;
        return 0;
    }
    if (s->err) {
        errno = s->err;
        return 1;
    }
    return 0;
}

static size_t capped(enum wop op, size_t n)
{
    return S[op].cap && S[op].cap < n ? S[op].cap : n;
}

int __real_open(const char *path, int flags, ...);
int __real_close(int fd);
ssize_t __real_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
int __real_fdatasync(int fd);
int __real_fstat(int fd, struct stat *st);
int __real_ftruncate(int fd, off_t size);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
int __real_fsync(int fd);
struct dirent *__real_readdir(DIR *d);

int __wrap_open(const char *path, int flags, ...);
int __wrap_close(int fd);
ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off);
int __wrap_fdatasync(int fd);
int __wrap_fstat(int fd, struct stat *st);
int __wrap_ftruncate(int fd, off_t size);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __wrap_munmap(void *addr, size_t len);
int __wrap_fsync(int fd);
struct dirent *__wrap_readdir(DIR *d);

int __wrap_open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return scripted(W_OPEN) ? -1 : __real_open(path, flags, mode);
}

/* Linux releases the descriptor even when close() reports an error: so do we. */
int __wrap_close(int fd)
{
    int r = __real_close(fd);
    return scripted(W_CLOSE) ? -1 : r;
}

ssize_t __wrap_pread(int fd, void *buf, size_t n, off_t off)
{
    return scripted(W_PREAD) ? -1 : __real_pread(fd, buf, capped(W_PREAD, n), off);
}

ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (scripted(W_PWRITE))
        return -1;
    if (S[W_PWRITE].zero > 0) {
        S[W_PWRITE].zero--;
        return 0;
    }
    return __real_pwrite(fd, buf, capped(W_PWRITE, n), off);
}

int __wrap_fdatasync(int fd)
{
    return scripted(W_FDATASYNC) ? -1 : __real_fdatasync(fd);
}

int __wrap_fstat(int fd, struct stat *st)
{
    return scripted(W_FSTAT) ? -1 : __real_fstat(fd, st);
}

int __wrap_ftruncate(int fd, off_t size)
{
    return scripted(W_FTRUNCATE) ? -1 : __real_ftruncate(fd, size);
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return scripted(W_MMAP) ? MAP_FAILED : __real_mmap(addr, len, prot, flags, fd, off);
}

/* The mapping really goes; only the report is a failure, so nothing leaks. */
int __wrap_munmap(void *addr, size_t len)
{
    int r = __real_munmap(addr, len);
    return scripted(W_MUNMAP) ? -1 : r;
}

int __wrap_fsync(int fd)
{
    return scripted(W_FSYNC) ? -1 : __real_fsync(fd);
}

struct dirent *__wrap_readdir(DIR *d)
{
    return scripted(W_READDIR) ? NULL : __real_readdir(d);
}

/* Open descriptors of this process (the listing's own one included, every time). */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static int wsetup(void **state)
{
    reset();
    return setup(state);
}

static int wteardown(void **state)
{
    reset();
    return teardown(state);
}

static bdb_file *create(const char *path)
{
    bdb_file *f = NULL;
    assert_int_equal(bdb_vfs_open(bdb_vfs_posix(), path, BDB_O_RDWR | BDB_O_CREAT, &f), BDB_OK);
    return f;
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(i * 31 + seed);
}

static void test_eintr_is_retried(void **state)
{
    (void)state;
    int fds = open_fds();
    bdb_vfs *v = bdb_vfs_posix();
    S[W_OPEN].eintr = 2;
    bdb_file *f = create(P(0, "f"));
    assert_int_equal(S[W_OPEN].calls, 3);

    S[W_PWRITE].eintr = 1;
    assert_int_equal(bdb_file_pwrite(f, "hello world", 11, 0), BDB_OK);
    assert_int_equal(S[W_PWRITE].calls, 2);
    S[W_FDATASYNC].eintr = 2;
    assert_int_equal(bdb_file_sync(f), BDB_OK);
    assert_int_equal(S[W_FDATASYNC].calls, 3);
    S[W_FTRUNCATE].eintr = 1;
    assert_int_equal(bdb_file_truncate(f, 5), BDB_OK);
    assert_int_equal(S[W_FTRUNCATE].calls, 2);
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 5);

    S[W_PREAD].eintr = 3;
    char buf[16];
    size_t got = 0;
    assert_int_equal(bdb_file_pread(f, buf, sizeof buf, 0, &got), BDB_OK);
    assert_int_equal(got, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(S[W_PREAD].calls, 5); /* 3 EINTR, the data, then end of file */

    /* close is not retried (the descriptor is gone either way) and EINTR is success */
    S[W_CLOSE].eintr = 1;
    assert_int_equal(bdb_file_close(f), BDB_OK);
    assert_int_equal(S[W_CLOSE].calls, 1);

    /* the directory sync retries both its open and its fsync */
    S[W_OPEN] = (script){.eintr = 1};
    S[W_FSYNC].eintr = 2;
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_OK);
    assert_int_equal(S[W_OPEN].calls, 2);
    assert_int_equal(S[W_FSYNC].calls, 3);
    reset();
    assert_int_equal(open_fds(), fds);
}

static void test_short_transfers_are_completed(void **state)
{
    (void)state;
    enum { N = 1000 };
    uint8_t in[N], out[2 * N];
    fill(in, N, 7);
    bdb_file *f = create(P(0, "f"));
    S[W_PWRITE].cap = 3;
    assert_int_equal(bdb_file_pwrite(f, in, N, 0), BDB_OK);
    assert_int_equal(S[W_PWRITE].calls, (N + 2) / 3);
    S[W_PREAD].cap = 7;
    size_t got = 0;
    assert_int_equal(bdb_file_pread(f, out, N, 0, &got), BDB_OK);
    assert_int_equal(got, N);
    assert_memory_equal(out, in, N);
    assert_int_equal(S[W_PREAD].calls, (N + 6) / 7);
    /* asking for more than there is: short pieces up to the end, then the end */
    assert_int_equal(bdb_file_pread(f, out, sizeof out, 0, &got), BDB_OK);
    assert_int_equal(got, N);
    assert_memory_equal(out, in, N);
    assert_int_equal(bdb_file_pread(f, out, 100, N - 10, &got), BDB_OK);
    assert_int_equal(got, 10);
    assert_memory_equal(out, in + N - 10, 10);
    assert_int_equal(bdb_file_close(f), BDB_OK);

    /* the whole-file reader loops the same way */
    void *data = NULL;
    size_t len = 0;
    S[W_PREAD].cap = 1;
    assert_int_equal(bdb_vfs_read_all(bdb_vfs_posix(), P(0, "f"), &data, &len), BDB_OK);
    assert_int_equal(len, N);
    assert_memory_equal(data, in, N);
    free(data);
}

/* A pwrite that moves nothing would spin forever if retried: it is an I/O error. */
static void test_write_of_nothing_is_an_error(void **state)
{
    (void)state;
    bdb_file *f = create(P(0, "f"));
    S[W_PWRITE].zero = 1;
    errno = 0;
    assert_int_equal(bdb_file_pwrite(f, "abc", 3, 0), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_int_equal(S[W_PWRITE].calls, 1);
    assert_int_equal(bdb_file_close(f), BDB_OK);
}

static void test_read_and_write_errors(void **state)
{
    (void)state;
    uint8_t in[64], out[64];
    fill(in, sizeof in, 1);
    bdb_file *f = create(P(0, "f"));
    assert_int_equal(bdb_file_pwrite(f, in, sizeof in, 0), BDB_OK);

    /* an error after a first short piece: the error, and how much did arrive */
    S[W_PREAD] = (script){.cap = 4, .pass = 1, .err = EIO};
    size_t got = 99;
    errno = 0;
    assert_int_equal(bdb_file_pread(f, out, sizeof out, 0, &got), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_int_equal(got, 4);
    assert_memory_equal(out, in, 4);
    S[W_PREAD] = (script){0};

    /* a write error is never a partial success, and ENOSPC is told apart */
    S[W_PWRITE] = (script){.cap = 8, .pass = 1, .err = EIO};
    assert_int_equal(bdb_file_pwrite(f, in, sizeof in, 100), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_PWRITE] = (script){.err = ENOSPC};
    assert_int_equal(bdb_file_pwrite(f, in, sizeof in, 200), BDB_ERR_NOSPACE);
    assert_int_equal(errno, ENOSPC);
    S[W_PWRITE] = (script){0};
    uint64_t size;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 108); /* only the first 8-byte piece at 100 reached the file */

    S[W_FDATASYNC].err = EIO;
    assert_int_equal(bdb_file_sync(f), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_FDATASYNC].err = ENOSPC;
    assert_int_equal(bdb_file_sync(f), BDB_ERR_NOSPACE);
    S[W_FDATASYNC].err = 0;
    S[W_FTRUNCATE].err = EPERM;
    assert_int_equal(bdb_file_truncate(f, 0), BDB_ERR_IO);
    assert_int_equal(errno, EPERM);
    S[W_FTRUNCATE].err = 0;
    assert_int_equal(bdb_file_size(f, &size), BDB_OK);
    assert_int_equal(size, 108); /* the refused truncate changed nothing */
    assert_int_equal(bdb_file_close(f), BDB_OK);
}

static void test_size_and_map_errors(void **state)
{
    (void)state;
    int fds = open_fds();
    bdb_file *f = create(P(0, "f"));
    assert_int_equal(bdb_file_pwrite(f, "mapped", 6, 0), BDB_OK);
    uint64_t size = 77;
    S[W_FSTAT].err = EIO;
    assert_int_equal(bdb_file_size(f, &size), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_int_equal(size, 77); /* not written on failure */
    const void *p = NULL;
    size_t len = 0;
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_IO); /* map needs the size */
    S[W_FSTAT].err = 0;

    p = (const void *)1;
    len = 5;
    S[W_MMAP].err = ENOMEM;
    assert_int_equal(bdb_file_map(f, &p, &len), BDB_ERR_IO);
    assert_int_equal(errno, ENOMEM);
    assert_null(p);
    assert_int_equal(len, 0);
    S[W_MMAP].err = 0;

    assert_int_equal(bdb_file_map(f, &p, &len), BDB_OK);
    assert_int_equal(len, 6);
    assert_memory_equal(p, "mapped", 6);
    S[W_MUNMAP].err = EINVAL;
    assert_int_equal(bdb_file_unmap(f, p, len), BDB_ERR_IO);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(S[W_MUNMAP].calls, 1);

    /* a failing close still releases the descriptor and the handle */
    S[W_CLOSE].err = EIO;
    assert_int_equal(bdb_file_close(f), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_CLOSE].err = 0;
    /* and a failing open leaves nothing behind */
    S[W_OPEN].err = EMFILE;
    assert_int_equal(bdb_vfs_open(bdb_vfs_posix(), P(0, "f"), BDB_O_RDONLY, &f), BDB_ERR_IO);
    assert_int_equal(errno, EMFILE);
    S[W_OPEN].err = 0;
    assert_int_equal(open_fds(), fds);
}

static int count_cb(void *ctx, const char *name)
{
    (void)name;
    ++*(int *)ctx;
    return 0;
}

static void test_directory_errors(void **state)
{
    (void)state;
    int fds = open_fds();
    bdb_vfs *v = bdb_vfs_posix();
    S[W_FSYNC].err = EIO;
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_FSYNC].err = ENOSPC;
    assert_int_equal(bdb_vfs_sync_dir(v, tmpdir), BDB_ERR_NOSPACE);
    S[W_FSYNC].err = 0;
    assert_int_equal(open_fds(), fds); /* the directory's descriptor was closed */

    bdb_file *f = create(P(0, "a"));
    assert_int_equal(bdb_file_close(f), BDB_OK);
    f = create(P(0, "b"));
    assert_int_equal(bdb_file_close(f), BDB_OK);
    /* readdir failing after the first entry: an error, not a short listing */
    int n = 0;
    S[W_READDIR] = (script){.pass = 1, .err = EIO};
    errno = 0;
    assert_int_equal(bdb_vfs_list(v, tmpdir, count_cb, &n), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    assert_true(n <= 1);
    S[W_READDIR] = (script){0};
    n = 0;
    assert_int_equal(bdb_vfs_list(v, tmpdir, count_cb, &n), BDB_OK);
    assert_int_equal(n, 2);
    assert_int_equal(open_fds(), fds);
}

static int tmp_cb(void *ctx, const char *name)
{
    if (strstr(name, ".tmp"))
        ++*(int *)ctx;
    return 0;
}

/* After a failed write_atomic the old content is intact and no .tmp is left. */
static void check_old(const char *want)
{
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(bdb_vfs_read_all(bdb_vfs_posix(), P(0, "m"), &data, &len), BDB_OK);
    assert_int_equal(len, strlen(want));
    assert_memory_equal(data, want, len);
    free(data);
    int tmps = 0;
    assert_int_equal(bdb_vfs_list(bdb_vfs_posix(), tmpdir, tmp_cb, &tmps), BDB_OK);
    assert_int_equal(tmps, 0);
}

static void test_whole_file_helpers(void **state)
{
    (void)state;
    int fds = open_fds();
    bdb_vfs *v = bdb_vfs_posix();
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "m", "old", 3), BDB_OK);

    S[W_FDATASYNC].err = EIO;
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "m", "new!", 4), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_FDATASYNC].err = 0;
    check_old("old");
    S[W_PWRITE].err = ENOSPC;
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "m", "new!", 4), BDB_ERR_NOSPACE);
    assert_int_equal(errno, ENOSPC);
    S[W_PWRITE].err = 0;
    check_old("old");
    S[W_CLOSE].err = EIO; /* the data was synced, but a failed close is not trusted */
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "m", "new!", 4), BDB_ERR_IO);
    S[W_CLOSE].err = 0;
    check_old("old");
    /* the directory sync fails after the rename: reported, the new name stands */
    S[W_FSYNC].err = EIO;
    assert_int_equal(bdb_vfs_write_atomic(v, tmpdir, "m", "new!", 4), BDB_ERR_IO);
    S[W_FSYNC].err = 0;
    check_old("new!");

    void *data = (void *)1;
    size_t len = 3;
    S[W_FSTAT].err = EIO;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "m"), &data, &len), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_FSTAT].err = 0;
    S[W_PREAD].err = EIO;
    assert_int_equal(bdb_vfs_read_all(v, P(0, "m"), &data, &len), BDB_ERR_IO);
    assert_int_equal(errno, EIO);
    S[W_PREAD].err = 0;
    assert_ptr_equal(data, (void *)1); /* nothing handed back on failure */
    assert_int_equal(len, 3);
    assert_int_equal(open_fds(), fds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_eintr_is_retried, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_short_transfers_are_completed, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_write_of_nothing_is_an_error, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_read_and_write_errors, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_size_and_map_errors, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_directory_errors, wsetup, wteardown),
        cmocka_unit_test_setup_teardown(test_whole_file_helpers, wsetup, wteardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
