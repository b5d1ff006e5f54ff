/* Helpers for the crash and corruption tests of the storage engine
 * (powerloss_test.c, corrupt_test.c): directory images and file damage. Header-only,
 * like testutil.h, because each test is its own binary. */
#ifndef BDB_CRASHUTIL_H
#define BDB_CRASHUTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Copies a directory tree (regular files and directories); 0 on success. Taken while
 * a db is open it is what a crash would leave, since BATCH sync has every
 * acknowledged write in the WAL files. */
static inline int cu_copy_tree(const char *from, const char *to)
{
    if (mkdir(to, 0755) != 0 && errno != EEXIST)
        return -1;
    DIR *d = opendir(from);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        struct stat st;
        if (stat(a, &st) != 0)
            continue; /* vanished meanwhile */
        if (S_ISDIR(st.st_mode)) {
            rc = cu_copy_tree(a, b);
            continue;
        }
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        char buf[65536];
        ssize_t n = 0;
        while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
            if (write(out, buf, (size_t)n) != n) {
                n = -1;
                break;
            }
        if (in < 0 || out < 0 || n < 0)
            rc = -1;
        if (in >= 0)
            close(in);
        if (out >= 0)
            close(out);
    }
    closedir(d);
    return rc;
}

/* Paths of the regular files under dir (recursively) whose name ends in suffix ("" =
 * all), in a malloc'd array of malloc'd strings; *n gets the count. */
static inline char **cu_list_files(const char *dir, const char *suffix, size_t *n)
{
    static char **acc;
    static size_t nacc, cap;
    int top = acc == NULL;
    if (top) {
        nacc = 0;
        cap = 16;
        acc = malloc(cap * sizeof *acc);
    }
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *de;
        size_t sl = strlen(suffix);
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            struct stat st;
            if (stat(p, &st) != 0)
                continue;
            if (S_ISDIR(st.st_mode)) {
                cu_list_files(p, suffix, n);
                continue;
            }
            size_t l = strlen(de->d_name);
            if (l < sl || strcmp(de->d_name + l - sl, suffix) != 0)
                continue;
            if (nacc == cap)
                acc = realloc(acc, (cap *= 2) * sizeof *acc);
            acc[nacc++] = strdup(p);
        }
        closedir(d);
    }
    if (!top)
        return NULL;
    char **out = acc;
    *n = nacc;
    acc = NULL;
    return out;
}

static inline void cu_free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static inline long cu_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* XORs one byte of a file with mask (non-zero): a bit flip when mask is a power of 2. */
static inline int cu_xor_byte(const char *path, long off, unsigned char mask)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    unsigned char c;
    int rc = -1;
    if (pread(fd, &c, 1, off) == 1) {
        c ^= mask;
        rc = pwrite(fd, &c, 1, off) == 1 ? 0 : -1;
    }
    close(fd);
    return rc;
}

#endif
