/* quota: the arithmetic of tenant quotas, free of I/O and clocks so that it can be
 * tested with an injected time, and the storage-quota decision every ingestion path
 * makes (it reads the registry and the engine's usage tracker, both in memory).
 *
 * Unit of the write rate: samples. A report's numeric metric values are one sample
 * each; a report that carries only a state (no metric) costs one. A request costs the
 * sum over its accepted reports and is admitted or refused whole, before anything of
 * it is written (docs/TENANCY.md).
 *
 * The token bucket keeps its level in milli-samples (integers), refills at `rate`
 * samples per second up to `burst` samples, and computes Retry-After exactly: the
 * whole seconds until the bucket holds the cost. */
#ifndef BDB_QUOTA_H
#define BDB_QUOTA_H

#include "common/buf.h"
#include "model/batch.h"
#include "server/tenants/tenants.h"
#include "storage/embedded/core/db.h"

#include <stdint.h>

/* Largest accepted writes_per_second and burst (keeps the arithmetic in 64 bits). */
#define BDB_QUOTA_MAX_RATE UINT64_C(1000000000000)
/* burst when a tenant sets writes_per_second but no burst: this many seconds' worth
 * (Telegraf flushes every 10 s by default, one request per flush). */
#define BDB_QUOTA_DEFAULT_BURST_SECONDS 10
/* Retry-After of a device-quota refusal: waiting frees no device (an operator must
 * raise the quota), so it only paces clients that retry every 429. */
#define BDB_QUOTA_DEVICES_RETRY_S 60
/* Retry-After of a storage-quota refusal. Space comes back only when retention deletes
 * a block file holding the tenant's data or an operator raises storage_bytes (the
 * usage is measured again within a second of either); no client can wait for that
 * precisely, so the value only paces automatic retries: 5 minutes, a fraction of the
 * 2 h block window by which retention frees space. */
#define BDB_QUOTA_STORAGE_RETRY_S 300

typedef struct bdb_tbucket {
    int64_t level_ms; /* milli-samples available */
    int64_t last_ms;  /* time of the last refill (caller's clock, ms) */
    int primed;       /* 0 until the first use: a new bucket starts full */
} bdb_tbucket;

/* Effective burst: burst, or BDB_QUOTA_DEFAULT_BURST_SECONDS x rate when burst is 0. */
uint64_t bdb_quota_burst(uint64_t rate, uint64_t burst);

/* Refills for the time since the last call (a clock going backwards refills nothing),
 * then takes `cost` samples if the bucket holds them.
 * Returns 1 (taken), 0 (refused: *retry_after_s = whole seconds until the bucket will
 * hold `cost`, at least 1), or -1 (cost > burst: no wait is ever enough; nothing
 * taken). rate > 0 samples/s, burst > 0 samples. */
int bdb_tbucket_take(bdb_tbucket *tb, uint64_t rate, uint64_t burst, uint64_t cost, int64_t now_ms,
                     int64_t *retry_after_s);
/* Gives back what a take took when the write then failed (capped at burst). */
void bdb_tbucket_refund(bdb_tbucket *tb, uint64_t burst, uint64_t cost);
/* Samples available at now_ms (refilled, not taken), rounded down. */
uint64_t bdb_tbucket_level(bdb_tbucket *tb, uint64_t rate, uint64_t burst, int64_t now_ms);

/* Cost of a batch in samples (see the top of this file). */
uint64_t bdb_quota_cost(const bdb_batch *b);

/* 1 when a tenant with `current` devices may add `new_devices` under `max` (0 = no
 * limit). */
int bdb_quota_devices_ok(uint64_t current, uint64_t new_devices, uint64_t max);

/* The JSON body of a quota refusal:
 * {"error":msg,"tenant":tenant,"limit":limit,"value":value[,"retry_after":s]}
 * (retry_after_s < 0 leaves it out). */
void bdb_quota_error_json(bdb_buf *b, const char *msg, const char *tenant, const char *limit,
                          uint64_t value, int64_t retry_after_s);

/* Storage quota (docs/TENANCY.md#storage-quota), for every ingestion path, before
 * anything of the request is written. Returns 1 (may write: not registered, no
 * storage_bytes, below it, or usage not measured yet since the start) or 0 (its
 * storage is at or over storage_bytes: *limit and *usage set, the refusal counted
 * under BDB_LIMIT_STORAGE). The request's own size is not known before it is
 * written, so nothing is reserved: a tenant ends at most the requests admitted while
 * it was below over its limit. uo: the usage tracker's options (NULL = leave them);
 * the tracker is started if it is not running. */
int bdb_quota_storage_admit(bdb_tenants *reg, bdb_db *db, const bdb_usage_opts *uo,
                            const char *tenant, uint64_t *limit, uint64_t *usage);
/* The refusal's message; noun names what was refused ("request", "message"). */
void bdb_quota_storage_msg(char *msg, size_t msglen, const char *tenant, uint64_t limit,
                           uint64_t usage, const char *noun);
/* The refusal: msg (for X-Influxdb-Error) and the JSON body of bdb_quota_error_json
 * with "usage" added; Retry-After is BDB_QUOTA_STORAGE_RETRY_S. */
void bdb_quota_storage_error(bdb_buf *b, char *msg, size_t msglen, const char *tenant,
                             uint64_t limit, uint64_t usage);
/* After a successful bdb_db_write of `samples` samples: counts them in the tenant's
 * storage until the next measurement. */
void bdb_quota_storage_note(bdb_db *db, const char *tenant, uint64_t samples);

#endif
