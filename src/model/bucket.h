/* bucket: time-bucket sizes per device, learned from the observed reporting rate.
 *
 * A partition is (tenant, device, bucket start). A device's bucket size follows its
 * frequency class (seed 000 "Adaptive Bucket Sizing"): HIGH (> 1 report/s) 15 min,
 * MEDIUM (1/min .. 1/s) 1 h, LOW (< 1/min) 6 h. A profile may pin any of 10 min,
 * 15 min, 1 h, 6 h, 1 day.
 *
 * Every device keeps the history of its sizes: entry i applies from entries[i].from_ms
 * until entries[i+1].from_ms (entry 0 also covers all earlier times). A change takes
 * effect at a time aligned to both the old and the new size and not before the end of
 * the old bucket that holds the device's newest event, so buckets never overlap and a
 * bucket already written keeps its size. Queries enumerate partitions through the
 * history, so a range spanning a change finds every partition (seed 002's
 * "forgetting to query multiple buckets" cannot happen). */
#ifndef BDB_BUCKET_H
#define BDB_BUCKET_H

#include <stddef.h>
#include <stdint.h>

#define BDB_MS_MIN INT64_C(60000)
#define BDB_MS_HOUR INT64_C(3600000)
#define BDB_MS_DAY INT64_C(86400000)

enum bdb_freq_class { BDB_FREQ_UNKNOWN = 0, BDB_FREQ_LOW, BDB_FREQ_MEDIUM, BDB_FREQ_HIGH };

const char *bdb_freq_name(enum bdb_freq_class c);
int64_t bdb_bucket_for_class(enum bdb_freq_class c); /* UNKNOWN -> MEDIUM's 1 h */
/* Allowed sizes: "10m", "15m", "1h", "6h", "1d". Returns ms or 0 if not allowed. */
int64_t bdb_bucket_parse(const char *s);
/* "15m", "1h", ... for an allowed size; "?" otherwise. */
const char *bdb_bucket_name(int64_t size_ms);

typedef struct bdb_bucket_entry {
    int64_t from_ms;
    int64_t size_ms;
} bdb_bucket_entry;

typedef struct bdb_bucket_history {
    bdb_bucket_entry *e;
    uint32_t n, cap;
} bdb_bucket_history;

/* init, copy and push return BDB_OK or BDB_ERR_NOMEM (push: the history unchanged;
 * init, copy: nothing to free). */
int bdb_bucket_history_init(bdb_bucket_history *h, int64_t size_ms);
void bdb_bucket_history_free(bdb_bucket_history *h);
int bdb_bucket_history_copy(bdb_bucket_history *dst, const bdb_bucket_history *src);
int64_t bdb_bucket_size_at(const bdb_bucket_history *h, int64_t ts);
/* The partition holding ts: [*start, *end). */
void bdb_bucket_range(const bdb_bucket_history *h, int64_t ts, int64_t *start, int64_t *end);
/* Requests a change to new_size given the device's newest event time. Returns 1 and
 * fills *from_ms with the effective time if the history changed, 0 if nothing to do
 * (or no memory for the change: the size in force stays). */
int bdb_bucket_change(bdb_bucket_history *h, int64_t newest_ts, int64_t new_size, int64_t *from_ms);
/* Whether an entry as recorded may follow h's entries: what bdb_bucket_change makes,
 * a named size (bdb_bucket_name) starting after the last change (the first entry's
 * time is not used). Decoders refuse anything else: it did not come from here, and a
 * size like 1 ms would make a query walk billions of partitions. */
int bdb_bucket_history_next_ok(const bdb_bucket_history *h, int64_t from_ms, int64_t size_ms);
/* Appends an entry as recorded (replay / catalog load); entries must be in order. */
int bdb_bucket_history_push(bdb_bucket_history *h, int64_t from_ms, int64_t size_ms);
/* Calls cb for every partition intersecting [from, to) in time order; stops early if
 * cb returns non-zero (and returns that value). */
int bdb_bucket_enumerate(const bdb_bucket_history *h, int64_t from, int64_t to,
                         int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx);
/* Number of partitions intersecting [from, to) (saturates at limit+1). */
uint64_t bdb_bucket_count(const bdb_bucket_history *h, int64_t from, int64_t to, uint64_t limit);

/* Rate learner with hysteresis. Reports are counted per 10-minute window of event
 * time; when a window closes its rate picks a candidate class, with a 25% margin
 * around the class boundaries (so a device at 1.0/s does not flap between HIGH and
 * MEDIUM), and the class changes only after two consecutive windows agree. */
#define BDB_RATE_WINDOW_MS (10 * BDB_MS_MIN)
typedef struct bdb_rate_learner {
    int64_t win_start;
    uint32_t count;
    uint8_t cls, pending, pending_n;
} bdb_rate_learner;

/* Counts one report at event time ts. Returns 1 if the class changed (new class in
 * l->cls), else 0. */
int bdb_rate_observe(bdb_rate_learner *l, int64_t ts);
/* Class implied by a rate (reports per second) from the current class, with the margin. */
enum bdb_freq_class bdb_rate_classify(double per_sec, enum bdb_freq_class current);

#endif
