/* admin_token: the admin token's file and its hash in a store (admin_token.h). */
#include "server/admin_token.h"

#include "bucketdb/bdb.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The document: a version line and the hash in hex, so that a look at the table says
 * what it is. */
#define DOC_HEAD "bucketdb-admin 1 sha256 "
#define DOC_LEN (sizeof DOC_HEAD - 1 + 2 * BDB_HASH_BYTES + 1)

/* The token of <dir>/token: 1 when there is one (16 characters at least: a shorter
 * one is a first start cut short), 0 when not, -1 when it cannot be read. */
static int read_file(const char *path, char token[BDB_ADMIN_TOKEN_MAX + 1])
{
    token[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    int ok = fscanf(f, "%64s", token) == 1;
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        errno = EIO;
        return -1; /* never taken for "none": that would replace the file */
    }
    if (!ok || strlen(token) < 16) {
        token[0] = '\0';
        return 0;
    }
    return 1;
}

/* A new token in <dir>/token (0600): written whole to token.tmp, synced, renamed over
 * the name and the directory synced, so that the file is the token printed or none. */
static int make_file(const char *dir, const char *path, char token[BDB_ADMIN_TOKEN_MAX + 1])
{
    unsigned char rnd[BDB_ADMIN_TOKEN_LEN / 2];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
        int e = fd < 0 ? errno : EIO;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    close(fd);
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(token + 2 * i, 3, "%02x", rnd[i]);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (tfd < 0)
        return -1;
    size_t n = strlen(token);
    errno = 0; /* a short write sets none */
    int ok = write(tfd, token, n) == (ssize_t)n && write(tfd, "\n", 1) == 1 && fsync(tfd) == 0;
    int e = ok ? 0 : errno ? errno : EIO;
    close(tfd);
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (ok) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ok = dfd >= 0 && fsync(dfd) == 0;
        e = ok ? 0 : errno;
        if (dfd >= 0)
            close(dfd);
    }
    if (!ok) {
        unlink(tmp);
        token[0] = '\0';
        errno = e;
        return -1;
    }
    return 0;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int parse_doc(const char *doc, size_t len, uint8_t hash[BDB_HASH_BYTES])
{
    if (len != DOC_LEN || memcmp(doc, DOC_HEAD, sizeof DOC_HEAD - 1) != 0 || doc[len - 1] != '\n')
        return -1;
    const char *h = doc + sizeof DOC_HEAD - 1;
    for (size_t i = 0; i < BDB_HASH_BYTES; i++) {
        int a = hexval(h[2 * i]), b = hexval(h[2 * i + 1]);
        if (a < 0 || b < 0)
            return -1;
        hash[i] = (uint8_t)(a << 4 | b);
    }
    return 0;
}

static void put_doc(bdb_sink *store, const uint8_t hash[BDB_HASH_BYTES])
{
    char doc[DOC_LEN + 1];
    int n = snprintf(doc, sizeof doc, "%s", DOC_HEAD);
    for (size_t i = 0; i < BDB_HASH_BYTES; i++)
        n += snprintf(doc + n, sizeof doc - (size_t)n, "%02x", hash[i]);
    doc[n++] = '\n';
    const char *where = store->ops->describe(store);
    if (store->ops->doc_put(store, BDB_ADMIN_DOC_KEY, doc, (size_t)n) == BDB_OK)
        BDB_INFO("admin token: its hash stored in %s: every server of it takes this token", where);
    else
        BDB_WARN("admin token: cannot store its hash in %s: this directory's token is in "
                 "force here; the next start stores it",
                 where);
}

int bdb_admin_token_open(const char *dir, bdb_sink *store, char token[BDB_ADMIN_TOKEN_MAX + 1],
                         uint8_t hash[BDB_HASH_BYTES], char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/token", dir);
    if (errlen)
        err[0] = '\0';
    token[0] = '\0';
    int have = read_file(path, token);
    if (have < 0)
        return BDB_ERR_IO;
    if (!store || !store->ops->doc_get || !store->ops->doc_put) {
        if (!have && make_file(dir, path, token) != 0)
            return BDB_ERR_IO;
        bdb_token_hash(token, strlen(token), hash);
        return BDB_OK;
    }
    void *doc = NULL;
    size_t len = 0;
    char derr[300] = "";
    int rc = store->ops->doc_get(store, BDB_ADMIN_DOC_KEY, &doc, &len, derr, sizeof derr);
    if (rc == BDB_OK) {
        int bad = parse_doc(doc, len, hash);
        free(doc);
        if (bad) {
            snprintf(err, errlen, "the admin token document of %s is not one (%zu bytes)",
                     store->ops->describe(store), len);
            return BDB_ERR_CORRUPT;
        }
        uint8_t mine[BDB_HASH_BYTES];
        if (have)
            bdb_token_hash(token, strlen(token), mine);
        if (have && !bdb_hash_equal(mine, hash)) {
            BDB_WARN("admin token: %s holds another token than %s's admin token, which is "
                     "in force: the file's token is refused",
                     path, store->ops->describe(store));
            token[0] = '\0';
        } else if (!have) {
            BDB_INFO("admin token: %s's (this directory holds none: use the token the "
                     "directory that made it printed)",
                     store->ops->describe(store));
        }
        return BDB_OK;
    }
    if (rc == BDB_ERR_CORRUPT) {
        snprintf(err, errlen, "the admin token document of %s is refused: %s",
                 store->ops->describe(store), derr);
        return BDB_ERR_CORRUPT;
    }
    if (!have && make_file(dir, path, token) != 0)
        return BDB_ERR_IO;
    bdb_token_hash(token, strlen(token), hash);
    if (rc == BDB_ERR_NOTFOUND)
        put_doc(store, hash);
    else
        BDB_WARN("admin token: %s cannot be reached (%s): this directory's token is in force "
                 "here; the next start compares it with the keyspace's",
                 store->ops->describe(store), derr[0] ? derr : bdb_strerror(rc));
    return BDB_OK;
}
