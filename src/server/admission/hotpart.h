/* hotpart: hot partition detection and the mitigation decision for every ingested
 * report (docs/TENANCY.md, "Hot partitions"; seed 000, "Hot Partition Mitigation").
 *
 * Detection: reports offered for a partition (tenant, device, its current bucket) are
 * counted per minute of the injected wall clock (fixed minutes, aligned to the clock's
 * minute). When the count of the current minute passes the tenant's threshold the
 * partition is hot: an episode starts (logged once), and ends (logged once) when a
 * whole minute closes at or below the threshold. Offered reports count, kept or not,
 * so a device held back by its policy stays hot while it floods. Counting is per
 * device: a device writes into one partition at a time unless it back-fills, and a
 * back-filling device's count is then an upper bound for each of its partitions.
 *
 * Mitigation while hot (the policy of the tenant when the episode started):
 *  - none:      only listed and counted.
 *  - subbucket: the episode callback asks the engine to spread the device's samples
 *               over N sub-buckets (bdb_db_set_subbuckets); every report is kept.
 *  - ratelimit: at most max_per_minute reports of the device are kept per minute; a
 *               batch with more is refused whole (nothing of it stored), as a device
 *               over its profile's max_rps is; the refused reports are counted.
 *  - sample:    a deterministic fraction of the device's reports is kept (report k
 *               of the episode is kept when floor(k * f) > floor((k - 1) * f)); the
 *               others are acknowledged to the client but not stored, and counted.
 *
 * Memory: one 24-byte slot per device active in the last two minutes (64-bit hash of
 * tenant and device), in an open-addressing table kept between 3/16 and 3/4 full; an
 * idle device's slot is dropped at the next minute's sweep. Names are kept only for
 * hot devices (an episode record each).
 *
 * Thread-safety: every function may be called from any thread (one mutex; a batch
 * takes it once). Callbacks run outside the mutex. */
#ifndef BDB_HOTPART_H
#define BDB_HOTPART_H

#include "common/timeutil.h"
#include "model/batch.h"

#include <stddef.h>
#include <stdint.h>

enum bdb_hot_kind { BDB_HOT_NONE = 0, BDB_HOT_SUBBUCKET, BDB_HOT_RATELIMIT, BDB_HOT_SAMPLE };
/* "none", "subbucket", "ratelimit", "sample"; parse returns -1 for anything else. */
const char *bdb_hot_kind_name(int kind);
int bdb_hot_kind_parse(const char *s);

typedef struct bdb_hot_policy {
    uint64_t threshold;      /* reports per partition per minute; above it is hot; 0 = off */
    int kind;                /* enum bdb_hot_kind */
    uint32_t subbuckets;     /* subbucket: N, 2..64 */
    uint64_t max_per_minute; /* ratelimit: reports kept per minute while hot, >= 1 */
    double sample;           /* sample: fraction kept while hot, (0, 1] */
} bdb_hot_policy;

/* Checks a policy's values; 0, or -1 with a message naming the field. */
int bdb_hot_policy_check(const bdb_hot_policy *p, char *err, size_t errlen);

typedef struct bdb_hotpart_opts {
    bdb_clock clock; /* zero = real time */
    /* Called once when an episode starts (hot = 1) and once when it ends (hot = 0),
     * with the policy of the episode. May block (the server logs a WAL record). */
    void (*episode)(void *ctx, const char *tenant, const char *device, int hot,
                    const bdb_hot_policy *p);
    void *episode_ctx;
} bdb_hotpart_opts;

typedef struct bdb_hotpart bdb_hotpart;

bdb_hotpart *bdb_hotpart_new(const bdb_hotpart_opts *o);
void bdb_hotpart_free(bdb_hotpart *h);

/* What admission decided for one report. */
enum bdb_hot_decision { BDB_HOT_KEEP = 0, BDB_HOT_DROP = 1, BDB_HOT_REJECT = 2 };

typedef struct bdb_hot_verdict {
    size_t dropped;         /* sampled out: acknowledged, not stored */
    size_t rejected;        /* reports of the refused device(s) */
    const char *device;     /* first refused device, when refused: points into the */
    size_t device_len;      /* reports given, so it is whole and lives as long as they */
    uint64_t limit;         /* its max_per_minute */
    int64_t retry_after_ms; /* until the next minute */
} bdb_hot_verdict;

/* The decision for n reports of one tenant under policy p: dec[i] gets KEEP or DROP,
 * or, when a rate-limited hot device has more reports than its minute allows, every
 * report of such devices gets REJECT and the function returns 0 (the caller refuses
 * the whole batch; nothing of it was counted as kept). Returns 1 otherwise. Every
 * report counts toward detection either way. For the MQTT gateway, n = 1 is a report
 * at a time. */
int bdb_hotpart_decide(bdb_hotpart *h, const char *tenant, const bdb_hot_policy *p,
                       const bdb_report *r, size_t n, uint8_t *dec, bdb_hot_verdict *v);

/* Batch form for the HTTP path: returns 1 and *out = NULL (store b as is), 1 and *out
 * = a new batch holding the kept reports (free it), or 0 (refuse; v says why). */
int bdb_hotpart_admit_batch(bdb_hotpart *h, const char *tenant, const bdb_hot_policy *p,
                            const bdb_batch *b, bdb_batch **out, bdb_hot_verdict *v);

/* One hot partition (copies; valid during the callback). */
typedef struct bdb_hot_info {
    const char *tenant, *device;
    int64_t since_ms;       /* episode start (wall clock) */
    uint64_t writes_minute; /* reports offered in the current minute */
    uint64_t writes_prev;   /* in the previous complete minute */
    uint64_t peak;          /* most in one minute during the episode */
    int64_t last_event_ms;  /* newest event time offered (its partition is the hot one) */
    bdb_hot_policy policy;  /* applied */
    uint64_t kept, rejected, sampled_out; /* this episode */
} bdb_hot_info;

/* Hot partitions of a tenant (all when tenant is NULL), in (tenant, device) order. */
int bdb_hotpart_list(bdb_hotpart *h, const char *tenant,
                     int (*cb)(void *ctx, const bdb_hot_info *i), void *ctx);

/* Totals per tenant that ever had a hot partition, since the process started. */
typedef struct bdb_hot_tenant_stats {
    const char *tenant;
    uint64_t hot_now, episodes, rejected, sampled_out;
} bdb_hot_tenant_stats;
void bdb_hotpart_stats(bdb_hotpart *h, void (*cb)(void *ctx, const bdb_hot_tenant_stats *s),
                       void *ctx);

/* Ends episodes whose minute closed quiet and drops idle slots; the other calls do it
 * too when they see a new minute. */
void bdb_hotpart_tick(bdb_hotpart *h);

/* Slots in use, slot capacity, bytes of the table (for the memory figure). */
size_t bdb_hotpart_entries(bdb_hotpart *h);
size_t bdb_hotpart_table_bytes(bdb_hotpart *h);

#endif
