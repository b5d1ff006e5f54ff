/* devlimit: device profiles and the per-device limiter table (see devlimit.h). */
#include "server/admission/devlimit.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/map.h"
#include "storage/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* One limiter slot: 24 bytes. key 0 marks an empty slot (real keys are never 0). */
typedef struct dl_entry {
    uint64_t key;
    int64_t last_ms;   /* time of the last refill */
    uint32_t level_mr; /* milli-reports available (burst <= 1e6 reports fits) */
    uint32_t pad;
} dl_entry;

typedef struct dl_profile {
    uint64_t key;
    char *tenant, *device;
    uint32_t max_rps;
    int64_t interval_ms;
} dl_profile;

struct bdb_devlimit {
    pthread_mutex_t mu;
    char *path; /* <data>/profiles, or NULL */
    int64_t idle_ms;
    dl_entry *t;
    size_t cap, n, cursor;
    dl_profile *p; /* profiles */
    size_t np, pcap;
    uint32_t *pidx; /* open addressing over p: index + 1, 0 empty */
    size_t pidx_cap;
    size_t nlimited; /* profiles with max_rps > 0 */
    /* the store's document "profiles" (bdb_devlimit_open_store), or NULL; synced: the
     * profiles in memory are the store's (read or written since open) */
    bdb_sink *store;
    int synced;
};

#define DL_MIN_CAP 16
#define DL_DOC "profiles" /* the store's document (storage/sink.h doc_put) */

size_t bdb_devlimit_entry_size(void)
{
    return sizeof(dl_entry);
}

uint64_t bdb_devlimit_key(const char *tenant, const char *device, size_t dlen)
{
    size_t tl = strlen(tenant);
    uint64_t h = bdb_hash(tenant, tl);
    h ^= bdb_hash(device, dlen) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h ? h : 1;
}

/* ---- limiter table ---- */

static size_t slot_of(uint64_t key, size_t cap)
{
    return (size_t)(key * 0x9e3779b97f4a7c15ULL >> 7) & (cap - 1);
}

static int table_resize(bdb_devlimit *d, size_t ncap)
{
    dl_entry *nt = calloc(ncap, sizeof *nt);
    if (!nt)
        return -1;
    for (size_t i = 0; i < d->cap; i++) {
        if (!d->t[i].key)
            continue;
        size_t j = slot_of(d->t[i].key, ncap);
        while (nt[j].key)
            j = (j + 1) & (ncap - 1);
        nt[j] = d->t[i];
    }
    free(d->t);
    d->t = nt;
    d->cap = ncap;
    d->cursor = 0;
    return 0;
}

/* Backward-shift deletion keeps probe chains whole without tombstones. */
static void table_delete(bdb_devlimit *d, size_t i)
{
    size_t mask = d->cap - 1, j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!d->t[j].key)
            break;
        size_t home = slot_of(d->t[j].key, d->cap);
        /* move j into the hole i unless its home lies cyclically in (i, j] */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            d->t[i] = d->t[j];
            i = j;
        }
    }
    memset(&d->t[i], 0, sizeof d->t[i]);
    d->n--;
}

static int expired(const bdb_devlimit *d, const dl_entry *e, int64_t now_ms)
{
    return now_ms - e->last_ms > d->idle_ms;
}

static void maybe_shrink(bdb_devlimit *d)
{
    if (d->cap > DL_MIN_CAP && d->n * 16 < d->cap * 3)
        (void)table_resize(d, d->cap / 2); /* on failure the table stays as it is */
}

/* Looks at up to `slots` slots from the cursor and removes expired entries. */
static void sweep(bdb_devlimit *d, int64_t now_ms, size_t slots)
{
    for (size_t k = 0; k < slots && d->n; k++) {
        size_t i = d->cursor & (d->cap - 1);
        if (d->t[i].key && expired(d, &d->t[i], now_ms)) {
            table_delete(d, i); /* a later entry may have moved into i: look again */
            continue;
        }
        d->cursor = (i + 1) & (d->cap - 1);
    }
    maybe_shrink(d);
}

/* The entry of key, created full when absent or expired; NULL on allocation failure. */
static dl_entry *entry_get(bdb_devlimit *d, uint64_t key, uint32_t burst, int64_t now_ms)
{
    size_t i = slot_of(key, d->cap);
    while (d->t[i].key) {
        if (d->t[i].key == key) {
            dl_entry *e = &d->t[i];
            if (expired(d, e, now_ms)) { /* idle >= 1 s: a live bucket would be full */
                e->level_mr = burst * 1000u;
                e->last_ms = now_ms;
            }
            return e;
        }
        i = (i + 1) & (d->cap - 1);
    }
    if ((d->n + 1) * 4 > d->cap * 3) {
        if (table_resize(d, d->cap * 2) != 0)
            return NULL;
        i = slot_of(key, d->cap);
        while (d->t[i].key)
            i = (i + 1) & (d->cap - 1);
    }
    d->t[i].key = key;
    d->t[i].last_ms = now_ms;
    d->t[i].level_mr = burst * 1000u;
    d->n++;
    return &d->t[i];
}

static uint32_t burst_of(uint32_t rps)
{
    return rps ? rps : 1;
}

static void refill(dl_entry *e, uint32_t rps, int64_t now_ms)
{
    if (now_ms <= e->last_ms)
        return; /* a clock going back refills nothing */
    uint64_t cap = (uint64_t)burst_of(rps) * 1000u;
    uint64_t dt = (uint64_t)(now_ms - e->last_ms);
    uint64_t add = dt >= 1000000 ? cap : dt * rps; /* rps milli-reports per ms */
    uint64_t lv = e->level_mr + add;
    e->level_mr = (uint32_t)(lv > cap ? cap : lv);
    e->last_ms = now_ms;
}

static int64_t retry_for(const dl_entry *e, uint32_t rps, uint64_t need_mr)
{
    uint64_t missing = need_mr - e->level_mr;
    uint64_t ms = (missing + rps - 1) / rps;
    int64_t s = (int64_t)((ms + 999) / 1000);
    return s < 1 ? 1 : s;
}

static int take_locked(bdb_devlimit *d, uint64_t key, uint32_t rps, uint32_t cost, int64_t now_ms,
                       int64_t *retry_after_s, int commit)
{
    if (cost > burst_of(rps))
        return -1;
    dl_entry *e = entry_get(d, key, burst_of(rps), now_ms);
    if (!e)
        return 1; /* out of memory: do not refuse writes for want of limiter state */
    refill(e, rps, now_ms);
    uint64_t need = (uint64_t)cost * 1000u;
    if (e->level_mr < need) {
        *retry_after_s = retry_for(e, rps, need);
        return 0;
    }
    if (commit)
        e->level_mr -= (uint32_t)need;
    return 1;
}

int bdb_devlimit_take(bdb_devlimit *d, uint64_t key, uint32_t max_rps, uint32_t cost,
                      int64_t now_ms, int64_t *retry_after_s)
{
    if (!key)
        key = 1;
    pthread_mutex_lock(&d->mu);
    sweep(d, now_ms, 2);
    int v = take_locked(d, key, max_rps, cost, now_ms, retry_after_s, 1);
    pthread_mutex_unlock(&d->mu);
    return v;
}

size_t bdb_devlimit_entries(bdb_devlimit *d)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->n;
    pthread_mutex_unlock(&d->mu);
    return n;
}

size_t bdb_devlimit_capacity(bdb_devlimit *d)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->cap;
    pthread_mutex_unlock(&d->mu);
    return n;
}

size_t bdb_devlimit_table_bytes(bdb_devlimit *d)
{
    return bdb_devlimit_capacity(d) * sizeof(dl_entry);
}

/* ---- profiles ---- */

static dl_profile *prof_find(bdb_devlimit *d, const char *tenant, const char *dev, size_t dlen,
                             uint64_t key)
{
    if (!d->pidx_cap)
        return NULL;
    size_t i = slot_of(key, d->pidx_cap);
    while (d->pidx[i]) {
        dl_profile *p = &d->p[d->pidx[i] - 1];
        if (p->key == key && !strcmp(p->tenant, tenant) && strlen(p->device) == dlen &&
            !memcmp(p->device, dev, dlen))
            return p;
        i = (i + 1) & (d->pidx_cap - 1);
    }
    return NULL;
}

static int pidx_rebuild(bdb_devlimit *d, size_t ncap)
{
    uint32_t *ni = calloc(ncap, sizeof *ni);
    if (!ni)
        return -1;
    for (size_t k = 0; k < d->np; k++) {
        size_t i = slot_of(d->p[k].key, ncap);
        while (ni[i])
            i = (i + 1) & (ncap - 1);
        ni[i] = (uint32_t)(k + 1);
    }
    free(d->pidx);
    d->pidx = ni;
    d->pidx_cap = ncap;
    return 0;
}

static int prof_put(bdb_devlimit *d, const char *tenant, const char *dev, uint32_t rps,
                    int64_t interval_ms)
{
    uint64_t key = bdb_devlimit_key(tenant, dev, strlen(dev));
    dl_profile *p = prof_find(d, tenant, dev, strlen(dev), key);
    if (p) {
        d->nlimited += (rps > 0) - (p->max_rps > 0);
        p->max_rps = rps;
        p->interval_ms = interval_ms;
        return 0;
    }
    if (d->np == d->pcap) {
        size_t nc = d->pcap ? d->pcap * 2 : 16;
        dl_profile *np = realloc(d->p, nc * sizeof *np);
        if (!np)
            return -1;
        d->p = np;
        d->pcap = nc;
    }
    if ((d->np + 1) * 2 > d->pidx_cap && pidx_rebuild(d, d->pidx_cap ? d->pidx_cap * 2 : 32) != 0)
        return -1;
    p = &d->p[d->np];
    p->key = key;
    p->tenant = strdup(tenant);
    p->device = strdup(dev);
    if (!p->tenant || !p->device) {
        free(p->tenant);
        free(p->device);
        return -1;
    }
    p->max_rps = rps;
    p->interval_ms = interval_ms;
    d->np++;
    d->nlimited += rps > 0;
    size_t i = slot_of(key, d->pidx_cap);
    while (d->pidx[i])
        i = (i + 1) & (d->pidx_cap - 1);
    d->pidx[i] = (uint32_t)d->np;
    return 0;
}

/* Names are written with bytes <= ' ', '%' and 0x7f as %XX, so fields split on ' '. */
static void put_esc(bdb_buf *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p <= ' ' || *p == '%' || *p == 0x7f)
            bdb_buf_printf(b, "%%%02X", *p);
        else
            bdb_buf_putc(b, (char)*p);
    }
}

static int unesc(char *s)
{
    char *w = s;
    for (char *r = s; *r; r++) {
        if (*r == '%') {
            unsigned v;
            if (!r[1] || !r[2] || sscanf(r + 1, "%2x", &v) != 1 || v == 0)
                return -1;
            *w++ = (char)v;
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = '\0';
    return 0;
}

/* The profiles as the file holds them (and the store's document). */
static void encode(const bdb_devlimit *d, bdb_buf *b)
{
    bdb_buf_puts(b, "bucketdb-profiles 1\n");
    for (size_t k = 0; k < d->np; k++) {
        bdb_buf_puts(b, "P ");
        put_esc(b, d->p[k].tenant);
        bdb_buf_putc(b, ' ');
        put_esc(b, d->p[k].device);
        bdb_buf_printf(b, " %u %lld\n", d->p[k].max_rps, (long long)d->p[k].interval_ms);
    }
    uint32_t crc = (uint32_t)crc32(0L, b->data, (uInt)b->len);
    bdb_buf_printf(b, "crc32 %08x\n", crc);
}

static int write_file(const bdb_devlimit *d, const bdb_buf *b)
{
    if (!d->path)
        return BDB_OK;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", d->path);
    int rc = BDB_ERR_IO;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
        size_t off = 0;
        while (off < b->len) {
            ssize_t w = write(fd, b->data + off, b->len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        int ok = off == b->len && fsync(fd) == 0;
        ok = (close(fd) == 0) && ok;
        if (ok && rename(tmp, d->path) == 0) {
            char dir[4200];
            snprintf(dir, sizeof dir, "%s", d->path);
            char *sl = strrchr(dir, '/');
            if (sl)
                *sl = '\0';
            int dfd = open(sl ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                rc = fsync(dfd) == 0 ? BDB_OK : BDB_ERR_IO;
                close(dfd);
            }
        } else {
            unlink(tmp);
        }
    }
    return rc;
}

static void profiles_clear(bdb_devlimit *d)
{
    for (size_t k = 0; k < d->np; k++) {
        free(d->p[k].tenant);
        free(d->p[k].device);
    }
    d->np = 0;
    d->nlimited = 0;
    if (d->pidx)
        memset(d->pidx, 0, d->pidx_cap * sizeof *d->pidx);
}

/* Adds the profiles of text (len bytes, NUL after them; changed in place), named what
 * in errors. BDB_OK, BDB_ERR_CORRUPT (err says why), BDB_ERR_NOMEM. */
static int parse(bdb_devlimit *d, char *text, size_t len, const char *what, char *err,
                 size_t errlen)
{
    /* the last line is "crc32 XXXXXXXX" over everything before it */
    char *crcline = NULL;
    if (len >= 15 && text[len - 1] == '\n') {
        crcline = text + len - 15;
        if (crcline > text && crcline[-1] != '\n')
            crcline = NULL;
    }
    unsigned want;
    if (!crcline || sscanf(crcline, "crc32 %8x", &want) != 1 ||
        (uint32_t)crc32(0L, (const Bytef *)text, (uInt)(crcline - text)) != want) {
        snprintf(err, errlen, "%s: checksum mismatch or truncated file", what);
        return BDB_ERR_CORRUPT;
    }
    *crcline = '\0';
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    if (!line || strcmp(line, "bucketdb-profiles 1")) {
        snprintf(err, errlen, "%s: unknown header", what);
        return BDB_ERR_CORRUPT;
    }
    while ((line = strtok_r(NULL, "\n", &save))) {
        char t[1100], dv[3200];
        unsigned rps;
        long long iv;
        if (sscanf(line, "P %1099s %3199s %u %lld", t, dv, &rps, &iv) != 4 || unesc(t) ||
            unesc(dv)) {
            snprintf(err, errlen, "%s: malformed line", what);
            return BDB_ERR_CORRUPT;
        }
        if (prof_put(d, t, dv, rps, iv) != 0)
            return BDB_ERR_NOMEM;
    }
    return BDB_OK;
}

/* The file into b (NUL after its bytes): BDB_OK, BDB_ERR_NOTFOUND, BDB_ERR_IO. */
static int read_file(const bdb_devlimit *d, bdb_buf *b)
{
    FILE *f = fopen(d->path, "rb");
    if (!f)
        return errno == ENOENT ? BDB_ERR_NOTFOUND : BDB_ERR_IO;
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
        bdb_buf_append(b, chunk, r);
    fclose(f);
    bdb_buf_putc(b, '\0');
    b->len--;
    return BDB_OK;
}

static int load(bdb_devlimit *d, char *err, size_t errlen)
{
    bdb_buf b;
    bdb_buf_init(&b);
    int rc = read_file(d, &b);
    if (rc == BDB_OK)
        rc = parse(d, (char *)b.data, b.len, d->path, err, errlen);
    bdb_buf_free(&b);
    return rc == BDB_ERR_NOTFOUND ? BDB_OK : rc;
}

/* The store's document is the truth where it answers (as for the tenant registry,
 * tenants_store.c): profiles set on a server whose disk was lost come back on its
 * replacement. Returns BDB_OK with the profiles of the document, or of the file when
 * the store has none (the file is then stored up) or cannot be reached (then
 * synced stays 0 and the first change reads the store again); BDB_ERR_CORRUPT for a
 * damaged document. */
static int load_store(bdb_devlimit *d, char *err, size_t errlen)
{
    void *doc = NULL;
    size_t len = 0;
    char derr[256] = "";
    const char *where = d->store->ops->describe(d->store);
    int rc = d->store->ops->doc_get(d->store, DL_DOC, &doc, &len, derr, sizeof derr);
    if (rc == BDB_OK) {
        char what[400];
        snprintf(what, sizeof what, "the device profile document of %s", where);
        rc = parse(d, doc, len, what, err, errlen);
        if (rc == BDB_OK) {
            /* parse cut the text: the file gets the bytes again */
            bdb_buf b;
            bdb_buf_init(&b);
            encode(d, &b);
            if (write_file(d, &b) != BDB_OK)
                BDB_WARN("device profiles: cannot write %s; the store's copy stays the truth",
                         d->path ? d->path : "-");
            bdb_buf_free(&b);
            d->synced = 1;
            BDB_INFO("device profiles: %zu from %s", d->np, where);
        }
        free(doc);
        return rc;
    }
    free(doc);
    if (rc == BDB_ERR_CORRUPT) {
        snprintf(err, errlen, "the device profile document of %s is refused: %s", where, derr);
        return rc;
    }
    int frc = d->path ? load(d, err, errlen) : BDB_OK;
    if (frc != BDB_OK)
        return frc;
    if (rc != BDB_ERR_NOTFOUND) {
        BDB_WARN("device profiles: %s cannot be reached (%s): using %s; profile changes fail "
                 "until it answers",
                 where, derr[0] ? derr : bdb_strerror(rc), d->path ? d->path : "none");
        return BDB_OK;
    }
    d->synced = 1;
    if (d->np) { /* a deployment moving its profiles up */
        bdb_buf b;
        bdb_buf_init(&b);
        encode(d, &b);
        if (d->store->ops->doc_put(d->store, DL_DOC, b.data, b.len) != BDB_OK)
            BDB_WARN("device profiles: cannot store %s in %s; stored with the next change", d->path,
                     where);
        else
            BDB_WARN("device profiles: %s had none; stored %s there (%zu)", where, d->path, d->np);
        bdb_buf_free(&b);
    }
    return BDB_OK;
}

int bdb_devlimit_open(const char *data_dir, int64_t idle_ms, bdb_devlimit **out, char *err,
                      size_t errlen)
{
    return bdb_devlimit_open_store(data_dir, NULL, idle_ms, out, err, errlen);
}

int bdb_devlimit_open_store(const char *data_dir, bdb_sink *store, int64_t idle_ms,
                            bdb_devlimit **out, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    bdb_devlimit *d = calloc(1, sizeof *d);
    if (!d)
        return BDB_ERR_NOMEM;
    pthread_mutex_init(&d->mu, NULL);
    /* Below 1 s an expired bucket could be refilled earlier than its rate allows. */
    d->idle_ms = idle_ms < 1000 ? 1000 : idle_ms;
    d->cap = DL_MIN_CAP;
    d->t = calloc(d->cap, sizeof *d->t);
    if (!d->t) {
        free(d);
        return BDB_ERR_NOMEM;
    }
    if (data_dir) {
        size_t n = strlen(data_dir) + sizeof "/profiles";
        d->path = malloc(n);
        if (!d->path) {
            bdb_devlimit_free(d);
            return BDB_ERR_NOMEM;
        }
        snprintf(d->path, n, "%s/profiles", data_dir);
    }
    if (store && store->ops->doc_get && store->ops->doc_put)
        d->store = store;
    int rc = d->store ? load_store(d, err, errlen) : d->path ? load(d, err, errlen) : BDB_OK;
    if (rc != BDB_OK) {
        bdb_devlimit_free(d);
        return rc;
    }
    *out = d;
    return BDB_OK;
}

void bdb_devlimit_free(bdb_devlimit *d)
{
    if (!d)
        return;
    for (size_t k = 0; k < d->np; k++) {
        free(d->p[k].tenant);
        free(d->p[k].device);
    }
    free(d->p);
    free(d->pidx);
    free(d->t);
    free(d->path);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* The profiles of the encoded text old in place of the ones in memory (a refused
 * change undone; old was encoded from memory, so it parses). */
static void restore(bdb_devlimit *d, bdb_buf *old)
{
    char err[64];
    profiles_clear(d);
    bdb_buf_putc(old, '\0');
    if (parse(d, (char *)old->data, old->len - 1, "profiles", err, sizeof err) != BDB_OK)
        BDB_ERROR("device profiles: out of memory undoing a change; restart to reload them");
}

/* Before the first change after an open that could not reach the store: the store's
 * profiles (newer than the file, if another server changed them meanwhile) replace
 * the ones in memory. BDB_OK, BDB_ERR_AGAIN (still not reachable), BDB_ERR_CORRUPT. */
static int adopt_store(bdb_devlimit *d)
{
    void *doc = NULL;
    size_t len = 0;
    char err[256] = "";
    int rc = d->store->ops->doc_get(d->store, DL_DOC, &doc, &len, err, sizeof err);
    if (rc == BDB_OK) {
        profiles_clear(d);
        rc = parse(d, doc, len, "the device profile document", err, sizeof err);
        if (rc != BDB_OK)
            BDB_ERROR("device profiles: %s", err);
    }
    free(doc);
    if (rc == BDB_ERR_NOTFOUND)
        rc = BDB_OK;
    if (rc == BDB_OK)
        d->synced = 1;
    return rc == BDB_OK || rc == BDB_ERR_CORRUPT || rc == BDB_ERR_NOMEM ? rc : BDB_ERR_AGAIN;
}

int bdb_devlimit_set_profile(bdb_devlimit *d, const char *tenant, const char *device,
                             uint32_t max_rps, int64_t expected_interval_ms)
{
    if (max_rps > BDB_DEVLIMIT_MAX_RPS || expected_interval_ms < 0)
        return BDB_ERR_INVALID;
    pthread_mutex_lock(&d->mu);
    int rc = d->store && !d->synced ? adopt_store(d) : BDB_OK;
    bdb_buf old, b;
    bdb_buf_init(&old);
    bdb_buf_init(&b);
    encode(d, &old); /* what to go back to when the store refuses the change */
    if (rc == BDB_OK && prof_put(d, tenant, device, max_rps, expected_interval_ms) != 0)
        rc = BDB_ERR_NOMEM;
    if (rc == BDB_OK)
        encode(d, &b);
    /* the store first: a change it did not confirm changes nothing, here or there */
    if (rc == BDB_OK && d->store &&
        d->store->ops->doc_put(d->store, DL_DOC, b.data, b.len) != BDB_OK)
        rc = BDB_ERR_AGAIN;
    if (rc == BDB_OK)
        rc = write_file(d, &b);
    else
        restore(d, &old);
    bdb_buf_free(&old);
    bdb_buf_free(&b);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

int bdb_devlimit_get_profile(bdb_devlimit *d, const char *tenant, const char *device,
                             uint32_t *max_rps, int64_t *expected_interval_ms)
{
    pthread_mutex_lock(&d->mu);
    dl_profile *p = prof_find(d, tenant, device, strlen(device),
                              bdb_devlimit_key(tenant, device, strlen(device)));
    if (p) {
        *max_rps = p->max_rps;
        *expected_interval_ms = p->interval_ms;
    }
    pthread_mutex_unlock(&d->mu);
    return p != NULL;
}

size_t bdb_devlimit_profiles(bdb_devlimit *d)
{
    pthread_mutex_lock(&d->mu);
    size_t n = d->np;
    pthread_mutex_unlock(&d->mu);
    return n;
}

struct dev_cost {
    uint64_t key;
    uint32_t rps, cost;
    const char *dev;
    size_t dlen;
};

static int cmp_cost(const void *a, const void *b)
{
    uint64_t x = ((const struct dev_cost *)a)->key, y = ((const struct dev_cost *)b)->key;
    return x < y ? -1 : x > y;
}

int bdb_devlimit_admit(bdb_devlimit *d, const char *tenant, const bdb_batch *b, int64_t now_ms,
                       const char **dev, size_t *dev_len, uint32_t *limit, uint32_t *value,
                       int64_t *retry_after_s)
{
    size_t n;
    const bdb_report *r = bdb_batch_reports(b, &n);
    pthread_mutex_lock(&d->mu);
    if (!d->nlimited || !n) {
        pthread_mutex_unlock(&d->mu);
        return 1;
    }
    struct dev_cost *dc = malloc(n * sizeof *dc);
    if (!dc) {
        pthread_mutex_unlock(&d->mu);
        return 1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = bdb_devlimit_key(tenant, r[i].device, r[i].device_len);
        dl_profile *p = prof_find(d, tenant, r[i].device, r[i].device_len, key);
        if (p && p->max_rps)
            dc[m++] = (struct dev_cost){key, p->max_rps, 1, r[i].device, r[i].device_len};
    }
    qsort(dc, m, sizeof *dc, cmp_cost);
    size_t u = 0; /* one element per device, with its report count */
    for (size_t i = 0; i < m; i++) {
        if (u && dc[u - 1].key == dc[i].key)
            dc[u - 1].cost++;
        else
            dc[u++] = dc[i];
    }
    sweep(d, now_ms, 2);
    int v = 1;
    for (size_t i = 0; i < u && v == 1; i++) {
        v = take_locked(d, dc[i].key, dc[i].rps, dc[i].cost, now_ms, retry_after_s, 0);
        if (v != 1) {
            *dev = dc[i].dev;
            *dev_len = dc[i].dlen;
            *limit = dc[i].rps;
            *value = dc[i].cost;
        }
    }
    if (v == 1) /* everyone has room: take */
        for (size_t i = 0; i < u; i++)
            (void)take_locked(d, dc[i].key, dc[i].rps, dc[i].cost, now_ms, retry_after_s, 1);
    free(dc);
    pthread_mutex_unlock(&d->mu);
    return v;
}
