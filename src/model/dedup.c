#include "model/dedup.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Open addressing over report indices + 1 (0 = empty); the caller sizes it to a power
 * of two at least twice the entries, so probing always ends. */
typedef struct {
    uint32_t *slot;
    uint64_t *hash;
    size_t mask;
} table;

static int table_init(table *t, size_t entries)
{
    size_t cap = 16;
    while (cap < 2 * entries)
        cap *= 2;
    t->slot = bdb_calloc(cap, sizeof *t->slot);
    t->hash = bdb_malloc(cap * sizeof *t->hash);
    t->mask = cap - 1;
    if (!t->slot || !t->hash) {
        free(t->slot);
        free(t->hash);
        return BDB_ERR_NOMEM;
    }
    return BDB_OK;
}

static void table_free(table *t)
{
    free(t->slot);
    free(t->hash);
}

static uint64_t series_hash(const bdb_report *r)
{
    return bdb_hash(r->device, r->device_len) ^ ((uint64_t)r->ts_ms * 0x9e3779b97f4a7c15ull);
}

static int same_series(const bdb_report *a, const bdb_report *b)
{
    return a->ts_ms == b->ts_ms && a->device_len == b->device_len &&
           memcmp(a->device, b->device, a->device_len) == 0;
}

/* The metric's name, or NULL for the state, which one report may carry once. */
static uint64_t item_hash(uint64_t series, const char *name, size_t n)
{
    return series ^ (name ? bdb_hash(name, n) * 0xff51afd7ed558ccdull : 0x5a5a5a5a5a5a5a5aull);
}

/* The items (metrics and states) of the reports that share a series, newest report
 * first: an item already in the table belongs to a later report, which overrides it. */
typedef struct {
    table t;
    uint32_t *item; /* parallel to t.slot: metric index + 1, 0 = the state */
} items;

/* 1 when report ri's metric m (the state when m < 0) is already in the table, else
 * adds it and returns 0. */
static int seen_before(items *it, const bdb_report *reps, uint64_t series, uint32_t ri, int m)
{
    const bdb_report *r = &reps[ri];
    const char *name = m >= 0 ? r->metrics[m].name : NULL;
    size_t nlen = m >= 0 ? r->metrics[m].nlen : 0;
    uint64_t h = item_hash(series, name, nlen);
    for (size_t i = h & it->t.mask;; i = (i + 1) & it->t.mask) {
        uint32_t s = it->t.slot[i];
        if (!s) {
            it->t.slot[i] = ri + 1;
            it->t.hash[i] = h;
            it->item[i] = (uint32_t)(m + 1);
            return 0;
        }
        if (it->t.hash[i] != h)
            continue;
        const bdb_report *o = &reps[s - 1];
        uint32_t om = it->item[i];
        if (!same_series(o, r) || (om == 0) != (m < 0))
            continue;
        if (m < 0 ||
            (o->metrics[om - 1].nlen == nlen && memcmp(o->metrics[om - 1].name, name, nlen) == 0))
            return 1;
    }
}

/* Marks the reports whose (device, time) another report shares: 1 in (*in_dup)[i],
 * allocated only when there is one (*in_dup stays NULL otherwise), and the number of
 * items (metrics + 1) they hold in *items_n. One slot of 8 bytes per entry (32 bits
 * of hash, 32 of index + 1) keeps the table small: this runs for every write. */
static int find_shared(const bdb_report *reps, size_t n, unsigned char **in_dup, size_t *items_n)
{
    /* Filled to at most 2/3: a batch of 5,000 reports takes 64 KiB, under the server's
     * mmap threshold (server.c), so it comes from the heap rather than fresh pages.
     * Cleared by writing: a larger table is mapped, and pages read before they are
     * written fault twice, the second time with a TLB flush on every core. */
    size_t cap = 16;
    while (cap < n + n / 2)
        cap *= 2;
    uint64_t *slot = bdb_malloc(cap * sizeof *slot);
    if (!slot)
        return BDB_ERR_NOMEM;
    memset(slot, 0, cap * sizeof *slot);
    size_t mask = cap - 1;
    *in_dup = NULL;
    *items_n = 0;
    for (uint32_t ri = 0; ri < n; ri++) {
        uint64_t h = series_hash(&reps[ri]);
        uint64_t tag = h >> 32;
        for (size_t i = h & mask;; i = (i + 1) & mask) {
            uint64_t e = slot[i];
            if (!e) {
                slot[i] = tag << 32 | (ri + 1);
                break;
            }
            uint32_t s = (uint32_t)e - 1;
            if (e >> 32 != tag || !same_series(&reps[s], &reps[ri]))
                continue;
            if (!*in_dup && !(*in_dup = bdb_calloc(n, 1))) {
                free(slot);
                return BDB_ERR_NOMEM;
            }
            /* the first report of the series is reached through the slot */
            if (!(*in_dup)[s]) {
                (*in_dup)[s] = 1;
                *items_n += reps[s].nmetrics + 1;
            }
            (*in_dup)[ri] = 1;
            *items_n += reps[ri].nmetrics + 1;
            break;
        }
    }
    free(slot);
    return BDB_OK;
}

int bdb_dedup_count(const bdb_batch *b, bdb_dedup *d)
{
    memset(d, 0, sizeof *d);
    size_t n;
    const bdb_report *reps = bdb_batch_reports(b, &n);
    if (n < 2 || n > UINT32_MAX - 1)
        return BDB_OK;
    /* First, per report: is any (device, time) there twice? Nearly always not, and
     * then that is all the work. */
    unsigned char *in_dup;
    size_t items_n;
    if (find_shared(reps, n, &in_dup, &items_n) != BDB_OK)
        return BDB_ERR_NOMEM;
    if (!in_dup)
        return BDB_OK;
    /* Then, only over the reports that share a series: newest first, an item
     * already seen is overridden. */
    items it;
    int rc = table_init(&it.t, items_n);
    it.item = rc == BDB_OK ? bdb_malloc((it.t.mask + 1) * sizeof *it.item) : NULL;
    if (rc == BDB_OK && !it.item) {
        table_free(&it.t);
        rc = BDB_ERR_NOMEM;
    }
    if (rc == BDB_OK) {
        for (size_t k = n; k-- > 0;) {
            if (!in_dup[k])
                continue;
            const bdb_report *r = &reps[k];
            uint64_t sh = series_hash(r);
            size_t lost = 0;
            for (uint32_t m = 0; m < r->nmetrics; m++)
                lost += (size_t)seen_before(&it, reps, sh, (uint32_t)k, (int)m);
            int state_lost = r->state ? seen_before(&it, reps, sh, (uint32_t)k, -1) : 1;
            d->samples += lost;
            /* attributes are not tracked per name: a report carrying any is never
             * counted as wholly overridden */
            d->reports += lost == r->nmetrics && state_lost && !r->nattrs;
        }
        free(it.item);
        table_free(&it.t);
    }
    free(in_dup);
    if (rc != BDB_OK)
        memset(d, 0, sizeof *d);
    return rc;
}
