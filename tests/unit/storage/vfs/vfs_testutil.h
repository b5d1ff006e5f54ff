/* vfs_testutil: the setup every VFS unit test shares, a fresh temporary directory per
 * test and short names inside it.
 *
 * Header-only with static state, like tests/unit/testutil.h: each test is its own
 * binary. Define VT_PREFIX before including to name the directory after the test
 * (a directory left behind by a crashed run then says which test made it). */
#ifndef BDB_VFS_TESTUTIL_H
#define BDB_VFS_TESTUTIL_H

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef VT_PREFIX
#define VT_PREFIX "bdb-vfs"
#endif

static char tmpdir[64];
static char pathbuf[4][256];

/* tmpdir/name; four slots so that one call can take up to four such paths. */
static inline const char *P(int slot, const char *name)
{
    snprintf(pathbuf[slot], sizeof(pathbuf[slot]), "%s/%s", tmpdir, name);
    return pathbuf[slot];
}

/* cmocka group or per-test setup and teardown. */
static inline int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/" VT_PREFIX "-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int teardown(void **state)
{
    (void)state;
    tu_rm_rf(tmpdir);
    return 0;
}

/* The bytes of a file on the real disk, past every VFS; -1 if it is not there. */
static inline long on_disk(const char *path, char *buf, size_t cap)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return -1;
    size_t n = fread(buf, 1, cap, fp);
    fclose(fp);
    return (long)n;
}

/* The real file at path holds exactly want (NULL: there is no such file). Needs
 * cmocka.h included first. */
static inline void expect_disk(const char *path, const char *want)
{
    char buf[256];
    long n = on_disk(path, buf, sizeof buf);
    if (!want) {
        assert_int_equal(n, -1);
        return;
    }
    assert_int_equal(n, (long)strlen(want));
    assert_memory_equal(buf, want, (size_t)n);
}

/* Writes text as the whole real file, past every VFS (fixtures). */
static inline int put_disk(const char *path, const char *text)
{
    FILE *fp = fopen(path, "wb");
    if (!fp)
        return -1;
    int rc = fputs(text, fp) < 0 ? -1 : 0;
    return fclose(fp) != 0 ? -1 : rc;
}

#endif
