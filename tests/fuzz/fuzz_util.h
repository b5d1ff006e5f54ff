/* Helpers for the harnesses that decode files: a private scratch directory (on
 * /dev/shm when there is one, so an iteration costs no disk I/O) and whole-file
 * writes. Only for tests/fuzz. */
#ifndef BDB_FUZZ_UTIL_H
#define BDB_FUZZ_UTIL_H

#include "../unit/testutil.h"
#include "common/log.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FZ_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The decoders warn about every damaged input, which is every other execution here:
 * at 4,000 a second that was 1.5 GB of log per hour and most of the CPU. */
__attribute__((constructor)) static void fz_quiet_(void)
{
    bdb_log_set_level(BDB_LOG_OFF);
}

/* The process's scratch directory, created on first use and removed at exit. */
static char fz_dir_[256];
static void fz_cleanup_(void)
{
    if (fz_dir_[0])
        tu_rm_rf(fz_dir_);
}
static inline const char *fz_scratch(void)
{
    if (!fz_dir_[0]) {
        const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fz_dir_, sizeof fz_dir_, "%s/bdb-fuzz.XXXXXX", base);
        if (!mkdtemp(fz_dir_))
            abort();
        atexit(fz_cleanup_);
    }
    return fz_dir_;
}

/* Writes len bytes to path (created or truncated); aborts on failure, which is the
 * harness's fault, not the code under test's. */
static inline void fz_write_file(const char *path, const void *p, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FZ_CHECK(fd >= 0);
    const char *c = p;
    while (len) {
        ssize_t n = write(fd, c, len);
        FZ_CHECK(n > 0);
        c += n;
        len -= (size_t)n;
    }
    close(fd);
}

#endif
