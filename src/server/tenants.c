/* tenants: registry in memory (two maps: by name and by token hash), its file, and
 * the per-tenant write-rate buckets. */
#include "server/tenants.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/map.h"
#include "server/hotpart.h"
#include "server/quota.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define REG_FILE "tenants"
#define REG_MAGIC "bucketdb-tenants"
#define REG_VERSION 1
#define REG_MAX_BYTES (64u << 20) /* refuse absurd files rather than read them */

typedef struct tentry {
    bdb_tenant_info info;
    uint8_t hash[BDB_HASH_BYTES];
    bdb_tbucket tb;
} tentry;

struct bdb_tenants {
    char *dir, *path;
    pthread_mutex_t mu;      /* guards the maps and the entries */
    pthread_mutex_t save_mu; /* serialises changes (held across the file write) */
    bdb_map *by_name;        /* name -> tentry */
    bdb_map *by_hash;        /* hash bytes -> tentry */
};

static const char *const limit_names[BDB_LIMIT_N] = {"writes_per_second", "burst", "max_devices",
                                                     "storage_bytes"};

const char *bdb_quota_limit_name(enum bdb_quota_limit l)
{
    return (unsigned)l < BDB_LIMIT_N ? limit_names[l] : "unknown";
}

int bdb_tenant_name_valid(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > BDB_TENANT_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
    return 1;
}

void bdb_token_hash(const char *token, size_t len, uint8_t out[BDB_HASH_BYTES])
{
    unsigned int n = 0;
    if (EVP_Digest(token, len, out, &n, EVP_sha256(), NULL) != 1 || n != BDB_HASH_BYTES) {
        /* Cannot happen with a working libcrypto; never let a failure look like a
         * match: a hash of all 0xff is no token's hash in practice. */
        memset(out, 0xff, BDB_HASH_BYTES);
    }
}

int bdb_hash_equal(const uint8_t a[BDB_HASH_BYTES], const uint8_t b[BDB_HASH_BYTES])
{
    return CRYPTO_memcmp(a, b, BDB_HASH_BYTES) == 0;
}

static void to_hex(const uint8_t *p, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[p[i] >> 4];
        out[2 * i + 1] = hx[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int from_hex(const char *s, size_t slen, uint8_t *out, size_t n)
{
    if (slen != 2 * n)
        return -1;
    for (size_t i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return 0;
}

int bdb_token_generate(char out[BDB_TOKEN_HEX + 1])
{
    uint8_t rnd[BDB_TOKEN_BYTES];
    if (RAND_bytes(rnd, sizeof rnd) != 1)
        return BDB_ERR_IO;
    to_hex(rnd, sizeof rnd, out);
    OPENSSL_cleanse(rnd, sizeof rnd);
    return BDB_OK;
}

static int quotas_valid(const bdb_quotas *q)
{
    /* An effective burst of up to 10 x BDB_QUOTA_MAX_RATE still fits the bucket's
     * milli-sample arithmetic in 64 bits. */
    return q->writes_per_second <= BDB_QUOTA_MAX_RATE && q->burst <= BDB_QUOTA_MAX_RATE;
}

/* ------------------------------------------------------------------ the file */

static int cmp_entry(const void *a, const void *b)
{
    return strcmp((*(tentry *const *)a)->info.name, (*(tentry *const *)b)->info.name);
}

/* Entries in name order; caller holds mu and frees the array. */
static tentry **sorted_entries(bdb_tenants *r, size_t *n)
{
    size_t cnt = bdb_map_count(r->by_name), k = 0;
    tentry **v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        *n = 0;
        return NULL;
    }
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (k < cnt && bdb_map_next(r->by_name, &pos, &key, &klen, &val))
        v[k++] = val;
    qsort(v, k, sizeof *v, cmp_entry);
    *n = k;
    return v;
}

static const char *const tier_key[3] = {"1m", "1h", "1d"}; /* tier_retention_<key> */

static int tier_index(const char *key)
{
    for (int k = 0; k < 3; k++)
        if (!strcmp(key, tier_key[k]))
            return k;
    return -1;
}

static int tier_retention_valid(const int64_t v[3])
{
    return v[0] >= -1 && v[1] >= -1 && v[2] >= -1;
}

/* The optional hot_* keys of a tenant line: only those set, replacing its newline. */
static void hot_encode(bdb_buf *b, const bdb_tenant_hot *h)
{
    if (!h->threshold && !h->policy && !h->subbuckets && !h->rate_limit && h->sample == 0)
        return;
    b->len--; /* the line's '\n' */
    if (h->threshold)
        bdb_buf_printf(b, " hot_threshold=%llu", (unsigned long long)h->threshold);
    if (h->policy)
        bdb_buf_printf(b, " hot_policy=%s", bdb_hot_kind_name(h->policy - 1));
    if (h->subbuckets)
        bdb_buf_printf(b, " hot_subbuckets=%u", h->subbuckets);
    if (h->rate_limit)
        bdb_buf_printf(b, " hot_rate_limit=%llu", (unsigned long long)h->rate_limit);
    if (h->sample != 0)
        bdb_buf_printf(b, " hot_sample=%.6f", h->sample);
    bdb_buf_putc(b, '\n');
}

int bdb_tenant_hot_valid(const bdb_tenant_hot *h)
{
    return h->threshold <= UINT32_MAX && h->policy >= 0 && h->policy <= BDB_HOT_SAMPLE + 1 &&
           (h->subbuckets == 0 || (h->subbuckets >= 2 && h->subbuckets <= 64)) &&
           h->rate_limit <= UINT32_MAX && h->sample >= 0 && h->sample <= 1.0 &&
           (h->sample == 0 || h->sample >= 0.000001);
}

/* Encodes the registry; caller holds mu. */
static int encode(bdb_tenants *r, bdb_buf *b)
{
    size_t n;
    tentry **v = sorted_entries(r, &n);
    if (!v)
        return BDB_ERR_NOMEM;
    bdb_buf_printf(b, "%s %d\n", REG_MAGIC, REG_VERSION);
    for (size_t i = 0; i < n; i++) {
        const bdb_tenant_info *t = &v[i]->info;
        char hx[2 * BDB_HASH_BYTES + 1];
        to_hex(v[i]->hash, BDB_HASH_BYTES, hx);
        bdb_buf_printf(b,
                       "tenant %s sha256=%s created=%lld rotated=%lld writes_per_second=%llu "
                       "burst=%llu max_devices=%llu storage_bytes=%llu retention_ms=%lld\n",
                       t->name, hx, (long long)t->created_ms, (long long)t->token_rotated_ms,
                       (unsigned long long)t->quotas.writes_per_second,
                       (unsigned long long)t->quotas.burst,
                       (unsigned long long)t->quotas.max_devices,
                       (unsigned long long)t->quotas.storage_bytes, (long long)t->retention_ms);
        hot_encode(b, &t->hot);
        for (int k = 0; k < 3; k++) /* tier retention: optional keys */
            if (t->tier_retention_ms[k]) {
                b->len--;
                bdb_buf_printf(b, " tier_retention_%s=%lld\n", tier_key[k],
                               (long long)t->tier_retention_ms[k]);
            }
    }
    free(v);
    bdb_buf_printf(b, "count %zu\n", n);
    uint32_t crc = (uint32_t)crc32(0L, b->data, (uInt)b->len);
    bdb_buf_printf(b, "crc32 %08x\n", crc);
    return BDB_OK;
}

/* temp file (0600), write, fsync, rename, fsync the directory */
static int write_file(bdb_tenants *r, const bdb_buf *b)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return BDB_ERR_IO;
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = write(fd, b->data + off, b->len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return errno == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return BDB_ERR_IO;
    }
    if (close(fd) != 0 || rename(tmp, r->path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return BDB_ERR_IO;
    }
    int dfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return BDB_ERR_IO;
    int rc = fsync(dfd) == 0 ? BDB_OK : BDB_ERR_IO;
    close(dfd);
    return rc;
}

static int persist(bdb_tenants *r)
{
    bdb_buf b;
    bdb_buf_init(&b);
    pthread_mutex_lock(&r->mu);
    int rc = encode(r, &b);
    pthread_mutex_unlock(&r->mu);
    if (rc == BDB_OK)
        rc = write_file(r, &b);
    bdb_buf_free(&b);
    return rc;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_i64(const char *s, int64_t *out)
{
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static void put_entry(bdb_tenants *r, tentry *e)
{
    bdb_map_put(r->by_name, e->info.name, strlen(e->info.name), e);
    bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
}

static void drop_entry(bdb_tenants *r, tentry *e)
{
    bdb_map_del(r->by_name, e->info.name, strlen(e->info.name));
    bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
}

/* One optional hot_<k>=v key of a tenant line; -1 if bad or repeated. */
static int hot_parse(const char *k, const char *v, bdb_tenant_hot *h, unsigned *seen)
{
    static const char *const names[] = {"threshold", "policy", "subbuckets", "rate_limit",
                                        "sample"};
    unsigned i = 0;
    while (i < 5 && strcmp(k, names[i]))
        i++;
    if (i == 5 || (*seen & (256u << i)))
        return -1;
    *seen |= 256u << i;
    uint64_t u = 0;
    char *end;
    switch (i) {
    case 0:
        return parse_u64(v, &h->threshold);
    case 1: {
        int kind = bdb_hot_kind_parse(v);
        h->policy = kind + 1;
        return kind < 0 ? -1 : 0;
    }
    case 2:
        if (parse_u64(v, &u) || u > 64)
            return -1;
        h->subbuckets = (uint32_t)u;
        return 0;
    case 3:
        return parse_u64(v, &h->rate_limit);
    default:
        h->sample = strtod(v, &end);
        return end == v || *end ? -1 : 0;
    }
}

/* One "tenant ..." line (without "tenant "), split in place. */
static int parse_tenant_line(char *line, tentry *e)
{
    memset(e, 0, sizeof *e);
    char *save = NULL;
    char *name = strtok_r(line, " ", &save);
    if (!name || !bdb_tenant_name_valid(name))
        return -1;
    snprintf(e->info.name, sizeof e->info.name, "%s", name);
    unsigned seen = 0;
    for (char *kv = strtok_r(NULL, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq)
            return -1;
        *eq = '\0';
        const char *k = kv, *v = eq + 1;
        int bad;
        unsigned bit;
        if (!strcmp(k, "sha256")) {
            bit = 1, bad = from_hex(v, strlen(v), e->hash, BDB_HASH_BYTES);
        } else if (!strcmp(k, "created")) {
            bit = 2, bad = parse_i64(v, &e->info.created_ms);
        } else if (!strcmp(k, "rotated")) {
            bit = 4, bad = parse_i64(v, &e->info.token_rotated_ms);
        } else if (!strcmp(k, "writes_per_second")) {
            bit = 8, bad = parse_u64(v, &e->info.quotas.writes_per_second);
        } else if (!strcmp(k, "burst")) {
            bit = 16, bad = parse_u64(v, &e->info.quotas.burst);
        } else if (!strcmp(k, "max_devices")) {
            bit = 32, bad = parse_u64(v, &e->info.quotas.max_devices);
        } else if (!strcmp(k, "storage_bytes")) {
            bit = 64, bad = parse_u64(v, &e->info.quotas.storage_bytes);
        } else if (!strcmp(k, "retention_ms")) {
            bit = 128, bad = parse_i64(v, &e->info.retention_ms);
        } else if (!strncmp(k, "hot_", 4)) {
            bit = 0, bad = hot_parse(k + 4, v, &e->info.hot, &seen);
        } else if (!strncmp(k, "tier_retention_", 15)) { /* optional, 1m/1h/1d */
            int t = tier_index(k + 15);
            bit = t < 0 ? 0 : 256u << t;
            bad = t < 0 || parse_i64(v, &e->info.tier_retention_ms[t]) ||
                  e->info.tier_retention_ms[t] == 0;
        } else {
            return -1; /* a key this version does not know: not ours to guess */
        }
        if (bad || (seen & bit))
            return -1;
        seen |= bit;
    }
    return (seen & 255) == 255 && quotas_valid(&e->info.quotas) && e->info.retention_ms >= 0 &&
                   bdb_tenant_hot_valid(&e->info.hot) &&
                   tier_retention_valid(e->info.tier_retention_ms)
               ? 0
               : -1;
}

static int load(bdb_tenants *r, char *err, size_t errlen)
{
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return BDB_OK;
        snprintf(err, errlen, "cannot open %s: %s", r->path, strerror(errno));
        return BDB_ERR_IO;
    }
    bdb_buf b;
    bdb_buf_init(&b);
    char chunk[65536];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 || b.len + (size_t)got > REG_MAX_BYTES) {
            snprintf(err, errlen, "cannot read %s: %s", r->path,
                     got < 0 ? strerror(errno) : "file too large");
            close(fd);
            bdb_buf_free(&b);
            return got < 0 ? BDB_ERR_IO : BDB_ERR_CORRUPT;
        }
        bdb_buf_append(&b, chunk, (size_t)got);
    }
    close(fd);
    bdb_buf_putc(&b, 0);
    b.len--;
    char *text = (char *)b.data;
    int rc = BDB_ERR_CORRUPT;
    /* The last line is "crc32 XXXXXXXX" over everything before it. */
    if (b.len < 16 || text[b.len - 1] != '\n' || memchr(text, 0, b.len)) {
        snprintf(err, errlen, "%s is damaged: truncated or not a tenant registry", r->path);
        goto out;
    }
    text[b.len - 1] = '\0';
    char *last = strrchr(text, '\n');
    char *crcline = last ? last + 1 : NULL;
    unsigned int want;
    char extra;
    if (!crcline || sscanf(crcline, "crc32 %8x%c", &want, &extra) != 1 || strlen(crcline) != 14) {
        snprintf(err, errlen, "%s is damaged: no checksum line", r->path);
        goto out;
    }
    size_t body_len = (size_t)(crcline - text);
    if ((uint32_t)crc32(0L, b.data, (uInt)body_len) != (uint32_t)want) {
        snprintf(err, errlen, "%s is damaged: checksum mismatch", r->path);
        goto out;
    }
    *last = '\0';
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    int version = 0;
    char magic[32];
    if (!line || sscanf(line, "%31s %d%c", magic, &version, &extra) != 2 ||
        strcmp(magic, REG_MAGIC)) {
        snprintf(err, errlen, "%s is not a tenant registry (bad header)", r->path);
        goto out;
    }
    if (version != REG_VERSION) {
        snprintf(err, errlen, "%s has format version %d; this bucketdb reads version %d", r->path,
                 version, REG_VERSION);
        goto out;
    }
    size_t n = 0, count = (size_t)-1;
    int lineno = 1;
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        lineno++;
        if (!strncmp(line, "tenant ", 7)) {
            tentry *e = malloc(sizeof *e);
            if (!e) {
                rc = BDB_ERR_NOMEM;
                goto out;
            }
            if (parse_tenant_line(line + 7, e) != 0 ||
                bdb_map_get(r->by_name, e->info.name, strlen(e->info.name)) ||
                bdb_map_get(r->by_hash, e->hash, BDB_HASH_BYTES)) {
                free(e);
                snprintf(err, errlen, "%s is damaged: line %d is not a valid tenant entry", r->path,
                         lineno);
                goto out;
            }
            put_entry(r, e);
            n++;
        } else if (!strncmp(line, "count ", 6) && count == (size_t)-1) {
            uint64_t c;
            if (parse_u64(line + 6, &c)) {
                snprintf(err, errlen, "%s is damaged: bad count line", r->path);
                goto out;
            }
            count = (size_t)c;
        } else {
            snprintf(err, errlen, "%s is damaged: unexpected line %d", r->path, lineno);
            goto out;
        }
    }
    if (count != n) {
        snprintf(err, errlen, "%s is damaged: %zu tenant entries, count says %zu", r->path, n,
                 count);
        goto out;
    }
    rc = BDB_OK;
out:
    bdb_buf_free(&b);
    return rc;
}

static void free_entries(bdb_tenants *r)
{
    size_t pos = 0;
    const void *key;
    size_t klen;
    void *val;
    while (bdb_map_next(r->by_name, &pos, &key, &klen, &val))
        free(val);
}

int bdb_tenants_open(const char *dir, bdb_tenants **out, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    bdb_tenants *r = calloc(1, sizeof *r);
    if (!r)
        return BDB_ERR_NOMEM;
    size_t pl = strlen(dir) + sizeof REG_FILE + 2;
    r->dir = strdup(dir);
    r->path = malloc(pl);
    r->by_name = bdb_map_new();
    r->by_hash = bdb_map_new();
    if (!r->dir || !r->path || !r->by_name || !r->by_hash) {
        bdb_tenants_close(r);
        return BDB_ERR_NOMEM;
    }
    snprintf(r->path, pl, "%s/%s", dir, REG_FILE);
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->save_mu, NULL);
    int rc = load(r, err, errlen);
    if (rc != BDB_OK) {
        bdb_tenants_close(r);
        return rc;
    }
    *out = r;
    return BDB_OK;
}

void bdb_tenants_close(bdb_tenants *r)
{
    if (!r)
        return;
    if (r->by_name) {
        free_entries(r);
        bdb_map_free(r->by_name);
    }
    if (r->by_hash)
        bdb_map_free(r->by_hash);
    if (r->path) {
        pthread_mutex_destroy(&r->mu);
        pthread_mutex_destroy(&r->save_mu);
    }
    free(r->dir);
    free(r->path);
    free(r);
}

const char *bdb_tenants_path(const bdb_tenants *r)
{
    return r->path;
}

/* ------------------------------------------------------------------ changes */

int bdb_tenants_create(bdb_tenants *r, const char *name, const bdb_quotas *q, int64_t retention_ms,
                       int64_t now_ms, char token[BDB_TOKEN_HEX + 1])
{
    if (!bdb_tenant_name_valid(name) || !quotas_valid(q) || retention_ms < 0)
        return BDB_ERR_INVALID;
    tentry *e = calloc(1, sizeof *e);
    if (!e)
        return BDB_ERR_NOMEM;
    snprintf(e->info.name, sizeof e->info.name, "%s", name);
    e->info.quotas = *q;
    e->info.retention_ms = retention_ms;
    e->info.created_ms = now_ms;
    e->info.token_rotated_ms = now_ms;
    int rc = bdb_token_generate(token);
    if (rc != BDB_OK) {
        free(e);
        return rc;
    }
    bdb_token_hash(token, strlen(token), e->hash);
    pthread_mutex_lock(&r->save_mu);
    pthread_mutex_lock(&r->mu);
    if (bdb_map_get(r->by_name, name, strlen(name))) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        free(e);
        OPENSSL_cleanse(token, BDB_TOKEN_HEX);
        token[0] = '\0';
        return BDB_ERR_EXISTS;
    }
    put_entry(r, e);
    pthread_mutex_unlock(&r->mu);
    rc = persist(r);
    if (rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        drop_entry(r, e);
        pthread_mutex_unlock(&r->mu);
        free(e);
        token[0] = '\0';
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_update(bdb_tenants *r, const char *name, const bdb_tenant_patch *p,
                       bdb_tenant_info *out)
{
    pthread_mutex_lock(&r->save_mu);
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_NOTFOUND;
    }
    bdb_tenant_info old = e->info, nw = e->info;
    if (p->has_writes_per_second)
        nw.quotas.writes_per_second = p->quotas.writes_per_second;
    if (p->has_burst)
        nw.quotas.burst = p->quotas.burst;
    if (p->has_max_devices)
        nw.quotas.max_devices = p->quotas.max_devices;
    if (p->has_storage_bytes)
        nw.quotas.storage_bytes = p->quotas.storage_bytes;
    if (p->has_retention)
        nw.retention_ms = p->retention_ms;
    if (p->has_hot_threshold)
        nw.hot.threshold = p->hot.threshold;
    if (p->has_hot_policy)
        nw.hot.policy = p->hot.policy;
    if (p->has_hot_subbuckets)
        nw.hot.subbuckets = p->hot.subbuckets;
    if (p->has_hot_rate_limit)
        nw.hot.rate_limit = p->hot.rate_limit;
    if (p->has_hot_sample)
        nw.hot.sample = p->hot.sample;
    for (int k = 0; k < 3; k++)
        if (p->has_tier_retention[k])
            nw.tier_retention_ms[k] = p->tier_retention_ms[k];
    if (!quotas_valid(&nw.quotas) || nw.retention_ms < 0 || !bdb_tenant_hot_valid(&nw.hot) ||
        !tier_retention_valid(nw.tier_retention_ms)) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_INVALID;
    }
    e->info = nw;
    pthread_mutex_unlock(&r->mu);
    int rc = persist(r);
    pthread_mutex_lock(&r->mu);
    if (rc != BDB_OK) {
        /* keep the counters that moved meanwhile, restore the settings */
        e->info.quotas = old.quotas;
        e->info.retention_ms = old.retention_ms;
        e->info.hot = old.hot;
        memcpy(e->info.tier_retention_ms, old.tier_retention_ms, sizeof old.tier_retention_ms);
    } else if (out) {
        *out = e->info;
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_delete(bdb_tenants *r, const char *name)
{
    pthread_mutex_lock(&r->save_mu);
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return BDB_ERR_NOTFOUND;
    }
    drop_entry(r, e);
    pthread_mutex_unlock(&r->mu);
    int rc = persist(r);
    if (rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        put_entry(r, e);
        pthread_mutex_unlock(&r->mu);
    } else {
        free(e);
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

int bdb_tenants_rotate(bdb_tenants *r, const char *name, int64_t now_ms,
                       char token[BDB_TOKEN_HEX + 1])
{
    int rc = bdb_token_generate(token);
    if (rc != BDB_OK)
        return rc;
    uint8_t h[BDB_HASH_BYTES];
    bdb_token_hash(token, strlen(token), h);
    pthread_mutex_lock(&r->save_mu);
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (!e) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        token[0] = '\0';
        return BDB_ERR_NOTFOUND;
    }
    uint8_t old[BDB_HASH_BYTES];
    int64_t old_rot = e->info.token_rotated_ms;
    memcpy(old, e->hash, sizeof old);
    bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
    memcpy(e->hash, h, sizeof h);
    e->info.token_rotated_ms = now_ms;
    bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
    pthread_mutex_unlock(&r->mu);
    rc = persist(r);
    if (rc != BDB_OK) {
        pthread_mutex_lock(&r->mu);
        bdb_map_del(r->by_hash, e->hash, BDB_HASH_BYTES);
        memcpy(e->hash, old, sizeof old);
        e->info.token_rotated_ms = old_rot;
        bdb_map_put(r->by_hash, e->hash, BDB_HASH_BYTES, e);
        pthread_mutex_unlock(&r->mu);
        token[0] = '\0';
    }
    pthread_mutex_unlock(&r->save_mu);
    return rc;
}

/* ------------------------------------------------------------------ reads */

int64_t bdb_tenants_tier_retention(bdb_tenants *r, const char *name, int tier, int64_t dflt)
{
    bdb_tenant_info ti;
    if (tier < 0 || tier > 2 || bdb_tenants_get(r, name, &ti) != BDB_OK ||
        !ti.tier_retention_ms[tier])
        return dflt;
    return ti.tier_retention_ms[tier] < 0 ? 0 : ti.tier_retention_ms[tier];
}

int bdb_tenants_get(bdb_tenants *r, const char *name, bdb_tenant_info *out)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e)
        *out = e->info;
    pthread_mutex_unlock(&r->mu);
    return e ? BDB_OK : BDB_ERR_NOTFOUND;
}

int bdb_tenants_list(bdb_tenants *r, int (*cb)(void *ctx, const bdb_tenant_info *t), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    size_t n;
    tentry **v = sorted_entries(r, &n);
    bdb_tenant_info *copy = v ? malloc((n ? n : 1) * sizeof *copy) : NULL;
    for (size_t i = 0; copy && i < n; i++)
        copy[i] = v[i]->info;
    pthread_mutex_unlock(&r->mu);
    free(v);
    if (!copy)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        if (cb(ctx, &copy[i]))
            break;
    free(copy);
    return BDB_OK;
}

size_t bdb_tenants_count(bdb_tenants *r)
{
    pthread_mutex_lock(&r->mu);
    size_t n = bdb_map_count(r->by_name);
    pthread_mutex_unlock(&r->mu);
    return n;
}

int bdb_tenants_find_by_hash(bdb_tenants *r, const uint8_t hash[BDB_HASH_BYTES],
                             char name[BDB_TENANT_NAME_MAX + 1])
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_hash, hash, BDB_HASH_BYTES);
    /* The map finds the candidate; the stored hash is then compared in constant time. */
    int ok = e && bdb_hash_equal(e->hash, hash);
    if (ok)
        snprintf(name, BDB_TENANT_NAME_MAX + 1, "%s", e->info.name);
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/* ------------------------------------------------------------------ admission */

int bdb_tenants_admit(bdb_tenants *r, const char *name, uint64_t cost, int64_t now_ms,
                      int64_t *retry_after_s, uint64_t *limit_value)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    int verdict = 1;
    if (e && e->info.quotas.writes_per_second) {
        uint64_t rate = e->info.quotas.writes_per_second;
        uint64_t burst = bdb_quota_burst(rate, e->info.quotas.burst);
        verdict = bdb_tbucket_take(&e->tb, rate, burst, cost, now_ms, retry_after_s);
        if (verdict == 0) {
            *limit_value = rate;
            e->info.rejections[BDB_LIMIT_RATE]++;
        } else if (verdict < 0) {
            *limit_value = burst;
            e->info.rejections[BDB_LIMIT_BURST]++;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return verdict;
}

void bdb_tenants_refund(bdb_tenants *r, const char *name, uint64_t cost)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e && e->info.quotas.writes_per_second)
        bdb_tbucket_refund(
            &e->tb, bdb_quota_burst(e->info.quotas.writes_per_second, e->info.quotas.burst), cost);
    pthread_mutex_unlock(&r->mu);
}

void bdb_tenants_count_rejection(bdb_tenants *r, const char *name, enum bdb_quota_limit l)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e && (unsigned)l < BDB_LIMIT_N)
        e->info.rejections[l]++;
    pthread_mutex_unlock(&r->mu);
}

int bdb_tenants_count_ingest(bdb_tenants *r, const char *name, uint64_t samples)
{
    pthread_mutex_lock(&r->mu);
    tentry *e = bdb_map_get(r->by_name, name, strlen(name));
    if (e) {
        e->info.ingested_samples += samples;
        e->info.ingested_requests++;
    }
    pthread_mutex_unlock(&r->mu);
    return e != NULL;
}
