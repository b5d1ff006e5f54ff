/* tenants_file: the tenant registry's file, <data>/tenants (docs/TENANCY.md): one
 * line per tenant with its token hash, quotas, retention and hot-partition settings,
 * a count and a checksum; written whole to a temporary name, fsynced and renamed, so a
 * crash leaves the old file or the new one. */
#include "ingest/devrule.h"
#include "server/tenants/tenants_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "server/admission/hotpart.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static int cmp_entry(const void *a, const void *b)
{
    return strcmp((*(tentry *const *)a)->info.name, (*(tentry *const *)b)->info.name);
}

/* Entries in name order; caller holds mu and frees the array. */
tentry **tn_sorted_entries(bdb_tenants *r, size_t *n)
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

int tn_device_rule_valid(const char *rule)
{
    if (!rule[0])
        return 1;
    bdb_devrule d;
    char why[300];
    return bdb_devrule_parse(rule, &d, why, sizeof why) == 0 && !strcmp(bdb_devrule_text(&d), rule);
}

int tn_tier_retention_valid(const int64_t v[3])
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

int tn_encode(bdb_tenants *r, bdb_buf *b)
{
    size_t n;
    tentry **v = tn_sorted_entries(r, &n);
    if (!v)
        return BDB_ERR_NOMEM;
    bdb_buf_printf(b, "%s %d\n", REG_MAGIC, REG_VERSION);
    size_t written = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i]->leaving)
            continue;
        written++;
        const bdb_tenant_info *t = &v[i]->info;
        char hx[2 * BDB_HASH_BYTES + 1];
        tn_to_hex(v[i]->hash, BDB_HASH_BYTES, hx);
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
        if (t->device_rule[0]) {
            b->len--;
            bdb_buf_printf(b, " device_rule=%s\n", t->device_rule);
        }
    }
    free(v);
    size_t nd;
    tdead **dv = tn_sorted_dead(r, &nd);
    if (!dv)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < nd; i++)
        if (dv[i]->gen) { /* 0: made by a deletion still being written */
            bdb_buf_printf(b, "deleted %s gen=%llu at=%lld\n", dv[i]->name,
                           (unsigned long long)dv[i]->gen, (long long)dv[i]->at_ms);
            if (dv[i]->purged) { /* optional: a line without it has nothing purged yet */
                b->len--;
                bdb_buf_printf(b, " purged=%llu\n", (unsigned long long)dv[i]->purged);
            }
        }
    free(dv);
    bdb_buf_printf(b, "count %zu\n", written);
    uint32_t crc = (uint32_t)crc32(0L, b->data, (uInt)b->len);
    bdb_buf_printf(b, "crc32 %08x\n", crc);
    return BDB_OK;
}

/* temp file (0600), write, fsync, rename, fsync the directory */
int tn_write_file(bdb_tenants *r, const bdb_buf *b)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->path);
    /* A new data directory gets the store's registry before the engine creates it. */
    if (mkdir(r->dir, 0755) != 0 && errno != EEXIST)
        return BDB_ERR_IO;
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

int tn_write(bdb_tenants *r, const bdb_buf *b)
{
    if (!r->store)
        return tn_write_file(r, b);
    /* The store first: a change it did not confirm is not made anywhere. */
    int rc = r->store->ops->doc_put(r->store, TN_DOC_KEY, b->data, b->len);
    if (rc != BDB_OK) {
        BDB_WARN("tenant registry: %s did not confirm the change (%s): nothing changed",
                 r->store->ops->describe(r->store), bdb_strerror(rc));
        return BDB_ERR_AGAIN;
    }
    rc = tn_write_file(r, b);
    if (rc != BDB_OK) {
        /* The store is the truth at the next start: give it the registry as it stays. */
        if (!r->stored.len ||
            r->store->ops->doc_put(r->store, TN_DOC_KEY, r->stored.data, r->stored.len) != BDB_OK)
            BDB_ERROR("tenant registry: %s could not be written and %s keeps the change "
                      "that failed: the next start loads it",
                      r->path, r->store->ops->describe(r->store));
        return rc;
    }
    bdb_buf_reset(&r->stored);
    bdb_buf_append(&r->stored, b->data, b->len);
    return BDB_OK;
}

int tn_persist(bdb_tenants *r)
{
    bdb_buf b;
    bdb_buf_init(&b);
    pthread_mutex_lock(&r->mu);
    int rc = tn_encode(r, &b);
    pthread_mutex_unlock(&r->mu);
    if (rc == BDB_OK)
        rc = tn_write(r, &b);
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
            bit = 1, bad = tn_from_hex(v, strlen(v), e->hash, BDB_HASH_BYTES);
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
        } else if (!strcmp(k, "device_rule")) { /* optional */
            bit = 2048;
            bad = !v[0] || strlen(v) >= sizeof e->info.device_rule || !tn_device_rule_valid(v);
            if (!bad)
                snprintf(e->info.device_rule, sizeof e->info.device_rule, "%s", v);
        } else {
            return -1; /* a key this version does not know: not ours to guess */
        }
        if (bad || (seen & bit))
            return -1;
        seen |= bit;
    }
    return (seen & 255) == 255 && tn_quotas_valid(&e->info.quotas) && e->info.retention_ms >= 0 &&
                   bdb_tenant_hot_valid(&e->info.hot) &&
                   tn_tier_retention_valid(e->info.tier_retention_ms)
               ? 0
               : -1;
}

/* One "deleted <name> gen=<n> at=<ms> [purged=<p>]" line (without "deleted "), split
 * in place; p <= n (the generations below p are purged). */
static int parse_dead_line(char *line, tdead *d)
{
    memset(d, 0, sizeof *d);
    char *save = NULL;
    char *name = strtok_r(line, " ", &save);
    char *g = strtok_r(NULL, " ", &save);
    char *at = strtok_r(NULL, " ", &save);
    char *pu = strtok_r(NULL, " ", &save);
    if (!name || !bdb_tenant_name_valid(name) || !g || strncmp(g, "gen=", 4) || !at ||
        strncmp(at, "at=", 3) || (pu && strncmp(pu, "purged=", 7)) || strtok_r(NULL, " ", &save))
        return -1;
    snprintf(d->name, sizeof d->name, "%s", name);
    if (parse_u64(g + 4, &d->gen) || d->gen == 0 || parse_i64(at + 3, &d->at_ms))
        return -1;
    return pu && (parse_u64(pu + 7, &d->purged) || d->purged > d->gen) ? -1 : 0;
}

int tn_read_file(const char *path, bdb_buf *b, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return BDB_ERR_NOTFOUND;
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return BDB_ERR_IO;
    }
    char chunk[65536];
    ssize_t got;
    while ((got = read(fd, chunk, sizeof chunk)) != 0) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 || b->len + (size_t)got > REG_MAX_BYTES) {
            snprintf(err, errlen, "cannot read %s: %s", path,
                     got < 0 ? strerror(errno) : "file too large");
            close(fd);
            return got < 0 ? BDB_ERR_IO : BDB_ERR_CORRUPT;
        }
        bdb_buf_append(b, chunk, (size_t)got);
    }
    close(fd);
    return BDB_OK;
}

int tn_load(bdb_tenants *r, char *err, size_t errlen)
{
    bdb_buf b;
    bdb_buf_init(&b);
    int rc = tn_read_file(r->path, &b, err, errlen);
    if (rc == BDB_OK)
        rc = tn_parse(r, b.data, b.len, r->path, err, errlen);
    bdb_buf_free(&b);
    return rc == BDB_ERR_NOTFOUND ? BDB_OK : rc;
}

int tn_parse(bdb_tenants *r, const void *data, size_t len, const char *what, char *err,
             size_t errlen)
{
    if (len > REG_MAX_BYTES) {
        snprintf(err, errlen, "%s is damaged: too large", what);
        return BDB_ERR_CORRUPT;
    }
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, data, len);
    bdb_buf_putc(&b, 0);
    b.len--;
    char *text = (char *)b.data;
    int rc = BDB_ERR_CORRUPT;
    /* The last line is "crc32 XXXXXXXX" over everything before it. */
    if (b.len < 16 || text[b.len - 1] != '\n' || memchr(text, 0, b.len)) {
        snprintf(err, errlen, "%s is damaged: truncated or not a tenant registry", what);
        goto out;
    }
    text[b.len - 1] = '\0';
    char *last = strrchr(text, '\n');
    char *crcline = last ? last + 1 : NULL;
    unsigned int want;
    char extra;
    if (!crcline || sscanf(crcline, "crc32 %8x%c", &want, &extra) != 1 || strlen(crcline) != 14) {
        snprintf(err, errlen, "%s is damaged: no checksum line", what);
        goto out;
    }
    size_t body_len = (size_t)(crcline - text);
    if ((uint32_t)crc32(0L, b.data, (uInt)body_len) != (uint32_t)want) {
        snprintf(err, errlen, "%s is damaged: checksum mismatch", what);
        goto out;
    }
    *last = '\0';
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    int version = 0;
    char magic[32];
    if (!line || sscanf(line, "%31s %d%c", magic, &version, &extra) != 2 ||
        strcmp(magic, REG_MAGIC)) {
        snprintf(err, errlen, "%s is not a tenant registry (bad header)", what);
        goto out;
    }
    if (version != REG_VERSION) {
        snprintf(err, errlen, "%s has format version %d; this bucketdb reads version %d", what,
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
                snprintf(err, errlen, "%s is damaged: line %d is not a valid tenant entry", what,
                         lineno);
                goto out;
            }
            tn_put_entry(r, e);
            n++;
        } else if (!strncmp(line, "deleted ", 8)) {
            tdead *d = malloc(sizeof *d);
            if (!d) {
                rc = BDB_ERR_NOMEM;
                goto out;
            }
            if (parse_dead_line(line + 8, d) != 0 ||
                bdb_map_get(r->dead, d->name, strlen(d->name)) ||
                bdb_map_set(r->dead, d->name, strlen(d->name), d) != BDB_OK) {
                free(d);
                snprintf(err, errlen, "%s is damaged: line %d is not a valid deleted-tenant entry",
                         what, lineno);
                goto out;
            }
        } else if (!strncmp(line, "count ", 6) && count == (size_t)-1) {
            uint64_t c;
            if (parse_u64(line + 6, &c)) {
                snprintf(err, errlen, "%s is damaged: bad count line", what);
                goto out;
            }
            count = (size_t)c;
        } else {
            snprintf(err, errlen, "%s is damaged: unexpected line %d", what, lineno);
            goto out;
        }
    }
    if (count != n) {
        snprintf(err, errlen, "%s is damaged: %zu tenant entries, count says %zu", what, n, count);
        goto out;
    }
    rc = BDB_OK;
out:
    bdb_buf_free(&b);
    return rc;
}
