/* plan: capacity and bucket arithmetic (see plan.h for the model and units). */
#include "model/plan.h"

#include "model/bucket.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const double bdb_plan_bucket_s[BDB_PLAN_NBUCKETS] = {600, 900, 3600, 21600, 86400};
const char *bdb_plan_bucket_name[BDB_PLAN_NBUCKETS] = {"10m", "15m", "1h", "6h", "1d"};

#define MB 1e6
#define GB 1e9

enum bdb_plan_verdict bdb_plan_verdict_of(double bytes)
{
    if (bytes < 1 * MB)
        return BDB_PLAN_TOO_SMALL;
    if (bytes < 10 * MB)
        return BDB_PLAN_SMALL_OK;
    if (bytes <= 100 * MB)
        return BDB_PLAN_TARGET;
    if (bytes <= 1 * GB)
        return BDB_PLAN_RISKY;
    return BDB_PLAN_FAILING;
}

const char *bdb_plan_verdict_name(enum bdb_plan_verdict v)
{
    static const char *n[] = {"too small", "ok", "target", "risky", "failing"};
    return (unsigned)v < 5 ? n[v] : "?";
}

const char *bdb_plan_verdict_mark(enum bdb_plan_verdict v)
{
    if (v == BDB_PLAN_SMALL_OK || v == BDB_PLAN_TARGET)
        return "\xe2\x9c\x93"; /* ✓ */
    if (v == BDB_PLAN_RISKY || v == BDB_PLAN_FAILING)
        return "\xe2\x9c\x97"; /* ✗ */
    return "";
}

double bdb_plan_partition_bytes(double rows_per_s, double bucket_s, double row_bytes)
{
    return rows_per_s * bucket_s * row_bytes;
}

char *bdb_plan_fmt_bytes(double bytes, int sig, char *out, size_t outlen)
{
    static const char *unit[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
    if (sig < 1)
        sig = 1;
    if (!(bytes > 0) || !isfinite(bytes)) {
        snprintf(out, outlen, "%s B", bytes == 0 ? "0" : "?");
        return out;
    }
    /* Round to sig digits first, so 999.6 MB at 3 digits becomes "1 GB". The small
     * epsilon keeps 8.64e6 from landing just under a power of ten after division. */
    double mag = floor(log10(bytes) + 1e-9);
    double q = pow(10, mag - sig + 1);
    double r = round(bytes / q) * q;
    int u = 0;
    while (u < 6 && r >= 1000 * (1 - 1e-12)) {
        r /= 1000;
        u++;
    }
    double m = floor(log10(r) + 1e-9);
    int dec = sig - 1 - (int)m;
    if (dec < 0)
        dec = 0;
    /* The seeds drop trailing zeros ("6 MB", not "6.0 MB"). */
    char num[48];
    snprintf(num, sizeof num, "%.*f", dec, r);
    if (strchr(num, '.')) {
        size_t n = strlen(num);
        while (num[n - 1] == '0')
            num[--n] = '\0';
        if (num[n - 1] == '.')
            num[--n] = '\0';
    }
    snprintf(out, outlen, "%s %s", num, unit[u]);
    return out;
}

void bdb_plan_in_default(bdb_plan_in *in)
{
    memset(in, 0, sizeof *in);
    in->devices = 1e6;
    in->interval_s = 10;
    in->metrics = 10;
    in->row_bytes = 100;
    in->retention_days = 30;
    in->agg_share = 0.10;
    in->rf = 3;
    in->hot_factor = 10;
}

static void warn(bdb_plan_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(bdb_plan_out *o, const char *fmt, ...)
{
    if (o->nwarnings >= BDB_PLAN_MAX_WARNINGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->warnings[o->nwarnings++], sizeof o->warnings[0], fmt, ap);
    va_end(ap);
}

/* The largest bucket whose partition stays <= 100 MB (the seeds: start from daily,
 * go smaller only when the partition would be too large), else the smallest. */
static int recommend(double rows_per_s, double row_bytes)
{
    for (int i = BDB_PLAN_NBUCKETS - 1; i >= 0; i--)
        if (bdb_plan_partition_bytes(rows_per_s, bdb_plan_bucket_s[i], row_bytes) <= 100 * MB)
            return i;
    return 0;
}

static int bucket_index(double seconds)
{
    for (int i = 0; i < BDB_PLAN_NBUCKETS; i++)
        if (fabs(bdb_plan_bucket_s[i] - seconds) < 0.5)
            return i;
    return -1;
}

static void check_bucket(bdb_plan_out *o, const char *what, double rows_per_s, double bucket_s,
                         double row_bytes)
{
    char b[32];
    double bytes = bdb_plan_partition_bytes(rows_per_s, bucket_s, row_bytes);
    enum bdb_plan_verdict v = bdb_plan_verdict_of(bytes);
    int i = bucket_index(bucket_s);
    const char *name = i >= 0 ? bdb_plan_bucket_name[i] : "?";
    bdb_plan_fmt_bytes(bytes, 3, b, sizeof b);
    if (v == BDB_PLAN_TOO_SMALL)
        warn(o,
             "bucket too small: %s with a %s bucket gives %s partitions (< 1 MB; overhead "
             "dominates); use a larger bucket",
             what, name, b);
    else if (v >= BDB_PLAN_RISKY)
        warn(o,
             "bucket too large: %s with a %s bucket gives %s partitions (> %s); use a smaller "
             "bucket",
             what, name, b, v == BDB_PLAN_FAILING ? "1 GB: failing" : "100 MB: risky");
}

static int bad(char *err, size_t errlen, const char *field, const char *rule)
{
    snprintf(err, errlen, "%s %s", field, rule);
    return -1;
}

int bdb_plan_compute(const bdb_plan_in *in, bdb_plan_out *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (!(in->devices > 0))
        return bad(err, errlen, "devices", "must be > 0");
    if (!(in->interval_s > 0))
        return bad(err, errlen, "interval", "must be > 0");
    if (!(in->metrics > 0))
        return bad(err, errlen, "metrics", "must be > 0");
    if (!(in->row_bytes > 0))
        return bad(err, errlen, "row-bytes", "must be > 0");
    if (!(in->retention_days > 0))
        return bad(err, errlen, "retention", "must be > 0");
    if (!(in->agg_share >= 0))
        return bad(err, errlen, "aggregates", "must be >= 0");
    if (!(in->rf >= 1))
        return bad(err, errlen, "replication", "must be >= 1");
    if (in->hot_devices < 0 || in->hot_devices > in->devices)
        return bad(err, errlen, "hot-devices", "must be between 0 and the number of devices");
    if (in->hot_devices > 0 && !(in->hot_factor > 1))
        return bad(err, errlen, "hot-factor", "must be > 1");
    if (in->ntiers > 8)
        return bad(err, errlen, "tiers", "at most 8");
    for (size_t i = 0; i < in->ntiers; i++)
        if (!(in->tier_s[i] > 0))
            return bad(err, errlen, "tiers", "each window must be > 0");

    double ordinary = in->devices - in->hot_devices;
    double hot_factor = in->hot_devices > 0 ? in->hot_factor : 1;
    /* device-reports per second of the fleet: each hot device counts hot_factor times */
    double dev_equiv = ordinary + in->hot_devices * hot_factor;
    o->reports_per_s = dev_equiv / in->interval_s;
    o->samples_per_s = o->reports_per_s * in->metrics;
    o->replica_writes_per_s = o->samples_per_s * in->rf;
    o->device_rows_per_s = in->metrics / in->interval_s;
    o->reports_per_day = 86400 / in->interval_s;
    o->device_day_bytes = o->reports_per_day * in->metrics * in->row_bytes;
    o->fleet_day_bytes = o->device_day_bytes * dev_equiv;
    o->retention_bytes = o->fleet_day_bytes * in->retention_days;
    if (in->ntiers) {
        double rb = in->tier_row_bytes > 0 ? in->tier_row_bytes : in->row_bytes, per_day = 0;
        for (size_t i = 0; i < in->ntiers; i++) {
            /* one row per metric per window that holds a report */
            double w = in->tier_s[i] > in->interval_s ? in->tier_s[i] : in->interval_s;
            per_day += 86400 / w * in->metrics * rb;
        }
        o->agg_bytes = per_day * in->devices * in->retention_days;
        o->agg_share = o->agg_bytes / o->retention_bytes;
    } else {
        o->agg_share = in->agg_share;
        o->agg_bytes = o->retention_bytes * in->agg_share;
    }
    o->total_bytes = o->retention_bytes + o->agg_bytes;
    o->cluster_bytes = o->total_bytes * in->rf;

    for (int i = 0; i < BDB_PLAN_NBUCKETS; i++) {
        bdb_plan_bucket *b = &o->buckets[i];
        b->name = bdb_plan_bucket_name[i];
        b->seconds = bdb_plan_bucket_s[i];
        b->rows = o->device_rows_per_s * b->seconds;
        b->bytes = bdb_plan_partition_bytes(o->device_rows_per_s, b->seconds, in->row_bytes);
        b->verdict = bdb_plan_verdict_of(b->bytes);
    }
    o->recommended = recommend(o->device_rows_per_s, in->row_bytes);
    double dev_reports_s = 1 / in->interval_s;
    int cls = bdb_rate_classify(dev_reports_s, BDB_FREQ_UNKNOWN);
    o->server_auto = bucket_index(bdb_bucket_for_class(cls) / 1000.0);
    o->hot_bucket = -1;

    /* The seeds' common mistakes (002 "Common Mistakes", "Best Practices"). */
    char b[32], c[32];
    const bdb_plan_bucket *rec = &o->buckets[o->recommended];
    if (rec->verdict >= BDB_PLAN_RISKY)
        warn(o,
             "bucket too large: even the smallest bucket (%s) gives %s partitions; split hot "
             "devices into sub-buckets (tenant --hot-policy subbucket) or send fewer rows",
             rec->name, bdb_plan_fmt_bytes(rec->bytes, 3, b, sizeof b));
    else if (rec->verdict == BDB_PLAN_TOO_SMALL)
        warn(o,
             "bucket too small: even a 1d bucket gives %s partitions (< 1 MB); seed 003 "
             "suggests monthly buckets below 1 event/minute, bucketdb's largest is 1d",
             bdb_plan_fmt_bytes(rec->bytes, 3, b, sizeof b));
    if (o->server_auto >= 0 && o->server_auto != o->recommended) {
        const bdb_plan_bucket *a = &o->buckets[o->server_auto];
        if (a->verdict == BDB_PLAN_TOO_SMALL || a->verdict >= BDB_PLAN_RISKY)
            warn(o,
                 "the server's automatic bucket for 1 report every %gs is %s (%s, %s); pin %s "
                 "with PUT /api/v1/devices/{id}/profile",
                 in->interval_s, a->name, bdb_plan_fmt_bytes(a->bytes, 3, c, sizeof c),
                 bdb_plan_verdict_name(a->verdict), rec->name);
    }
    if (in->bucket_s > 0)
        check_bucket(o, "the chosen bucket", o->device_rows_per_s, in->bucket_s, in->row_bytes);
    if (in->hot_devices > 0) {
        double hot_rows = o->device_rows_per_s * hot_factor;
        o->hot_bucket = recommend(hot_rows, in->row_bytes);
        double size = in->bucket_s > 0 ? in->bucket_s : rec->seconds;
        check_bucket(o, "a hot device", hot_rows, size, in->row_bytes);
    }
    if (in->gc_grace_s > 0 && in->repair_interval_s > 0 && in->gc_grace_s <= in->repair_interval_s)
        warn(o,
             "gc_grace_seconds %.0f is not longer than the repair interval %.0f s: tombstones "
             "can be purged before repair copies them and deleted data can come back",
             in->gc_grace_s, in->repair_interval_s);
    if (in->query_range_s < 0) {
        warn(o, "unbounded query range: always bound a query's time range (and limit it); "
                "bucketdb answers without from/to with the last hour only");
    } else if (in->query_range_s > 0) {
        double size = in->bucket_s > 0 ? in->bucket_s : rec->seconds;
        o->partitions_per_query = ceil(in->query_range_s / size);
        if (o->partitions_per_query > 20)
            warn(o,
                 "large IN list: a %.0f s query spans %.0f partitions of one device (> 20); read "
                 "them with parallel single-partition queries (as bucketdb does), not one IN",
                 in->query_range_s, o->partitions_per_query);
    }
    return 0;
}
