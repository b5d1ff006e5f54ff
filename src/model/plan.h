/* plan: capacity planning and bucket advice for a fleet (`bucketdb plan`).
 *
 * Pure arithmetic over the inputs an operator knows (seed 000 "Capacity Planning",
 * seed 002 "Choosing the Right Bucket Size"): a row is one metric of one report, as
 * in the seeds' schema (PRIMARY KEY (..., event_time, metric_name)), so
 *
 *   partition bytes = rows per second per device x bucket seconds x row bytes
 *   storage per device per day = reports per day x metrics x row bytes
 *
 * All sizes are decimal (1 MB = 10^6 bytes), as the seeds' figures are: 8,640 x 10 x
 * 100 bytes is "8.64 MB", 86,400 x 1 KB is "86 MB". No I/O here; the command prints. */
#ifndef BDB_PLAN_H
#define BDB_PLAN_H

#include <stddef.h>

/* The bucket options a device may use (model/bucket.h), smallest first. */
#define BDB_PLAN_NBUCKETS 5
extern const double bdb_plan_bucket_s[BDB_PLAN_NBUCKETS];   /* 600 ... 86400 */
extern const char *bdb_plan_bucket_name[BDB_PLAN_NBUCKETS]; /* "10m" ... "1d" */

/* Seed 002's guidelines: target 10-100 MB; below 1 MB too small; above 100 MB risky;
 * above 1 GB failing. Between 1 and 10 MB the seed's matrix still marks a size ✓. */
enum bdb_plan_verdict {
    BDB_PLAN_TOO_SMALL = 0, /* < 1 MB: per-partition overhead dominates */
    BDB_PLAN_SMALL_OK,      /* 1 MB .. 10 MB: acceptable, under the target */
    BDB_PLAN_TARGET,        /* 10 MB .. 100 MB */
    BDB_PLAN_RISKY,         /* > 100 MB: timeouts */
    BDB_PLAN_FAILING,       /* > 1 GB: serious problems guaranteed */
};

enum bdb_plan_verdict bdb_plan_verdict_of(double bytes);
/* "too small", "ok", "target", "risky", "failing". */
const char *bdb_plan_verdict_name(enum bdb_plan_verdict v);
/* The seed's matrix mark: "✓" (ok, target), "✗" (risky, failing), "" (too small). */
const char *bdb_plan_verdict_mark(enum bdb_plan_verdict v);

/* bytes of one partition: rows_per_s x bucket_s x row_bytes. */
double bdb_plan_partition_bytes(double rows_per_s, double bucket_s, double row_bytes);

/* Formats bytes with `sig` significant digits in the largest decimal unit that keeps
 * the number >= 1: (8.64e6, 3) -> "8.64 MB", (8.64e8, 2) -> "860 MB",
 * (3.6e5, 2) -> "360 KB", (6e6, 2) -> "6 MB" (trailing zeros dropped, as in the
 * seeds). Returns out. */
char *bdb_plan_fmt_bytes(double bytes, int sig, char *out, size_t outlen);

/* Inputs. Zero means "not given" where a field says so. */
typedef struct bdb_plan_in {
    double devices;        /* fleet size (> 0) */
    double interval_s;     /* seconds between two reports of one device (> 0) */
    double metrics;        /* metrics per report = rows per report (> 0) */
    double row_bytes;      /* stored bytes per row (> 0) */
    double retention_days; /* raw retention (> 0) */
    double agg_share;      /* aggregates as a share of raw storage (seed: ~0.10) */
    double rf;             /* replication factor (>= 1) */
    /* optional: aggregate tiers computed instead of agg_share (tier_s[i] seconds per
     * window; one row per metric per window, tier_row_bytes each, kept as long as raw) */
    double tier_s[8];
    size_t ntiers;
    double tier_row_bytes;
    /* optional checks for the seeds' common mistakes; 0 = not given */
    double bucket_s;          /* the bucket the operator intends to use */
    double gc_grace_s;        /* Cassandra gc_grace_seconds */
    double repair_interval_s; /* how often repair runs */
    double query_range_s;     /* a typical query's range; < 0 = unbounded */
    double hot_devices;       /* devices reporting faster than the rest */
    double hot_factor;        /* how much faster (> 1) */
} bdb_plan_in;

/* Sets the seed's scenario: 1M devices, every 10 s, 10 metrics, 100 B rows, 30 days,
 * aggregates 10 %, RF 3. */
void bdb_plan_in_default(bdb_plan_in *in);

typedef struct bdb_plan_bucket {
    const char *name;
    double seconds, rows, bytes;
    enum bdb_plan_verdict verdict;
} bdb_plan_bucket;

#define BDB_PLAN_MAX_WARNINGS 12

typedef struct bdb_plan_out {
    double reports_per_s;        /* fleet writes/s (one report = one batch per device) */
    double samples_per_s;        /* fleet rows/s */
    double replica_writes_per_s; /* samples_per_s x rf: what the cluster absorbs */
    double device_rows_per_s;    /* per ordinary device */
    double reports_per_day;      /* per device */
    double device_day_bytes;     /* raw per device per day */
    double fleet_day_bytes;      /* raw per fleet per day */
    double retention_bytes;      /* raw over retention */
    double agg_bytes;            /* aggregates over retention */
    double agg_share;            /* agg_bytes / retention_bytes */
    double total_bytes;          /* raw + aggregates */
    double cluster_bytes;        /* total x rf */
    bdb_plan_bucket buckets[BDB_PLAN_NBUCKETS];
    int recommended;             /* index into buckets: the largest bucket whose partitions stay
                                    <= 100 MB, else the smallest */
    int server_auto;             /* index of the bucket the server's rate learner would pick */
    int hot_bucket;              /* for hot devices (hot_devices > 0), else -1 */
    double partitions_per_query; /* query_range / recommended bucket, 0 if no range */
    size_t nwarnings;
    char warnings[BDB_PLAN_MAX_WARNINGS][240];
} bdb_plan_out;

/* Validates in and computes out. Returns 0, or -1 with a message naming the bad
 * input in err. */
int bdb_plan_compute(const bdb_plan_in *in, bdb_plan_out *out, char *err, size_t errlen);

#endif
