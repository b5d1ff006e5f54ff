/* h_status: /health and /metrics (Prometheus text exposition 0.0.4). Who may read
 * /metrics is decided before h_metrics (metrics_gate in server.c, metrics_auth). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/rcache.h"
#include "common/timeutil.h"
#include "server/http/conn_guard.h"
#include "server/admission/devlimit.h"
#include "server/mqtt/mqtt_gw.h"
#include "storage/backend.h" /* storage: the backend's metrics */

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* Why the server is unhealthy now, as a JSON array of strings appended to b; returns
 * how many reasons. Read-only storage; the head guard on (flushing behind); a
 * server-wide backpressure refusal (503) in the last BDB_BP_HEALTH_WINDOW_MS.
 * Refusals of one tenant over its share (429) do not make the server unhealthy. */
static int health_reasons(bdb_server *s, const bdb_db_stats *st, const bdb_bp_stats *bs,
                          int64_t now, bdb_buf *b)
{
    int n = 0;
    char msg[400];
    bdb_buf_putc(b, '[');
    if (st->readonly) {
        snprintf(msg, sizeof msg, "storage is read-only: %s", st->readonly_reason);
        bdb_buf_putc(b, '"');
        bdb_buf_json_str(b, msg, strlen(msg));
        bdb_buf_putc(b, '"');
        n++;
    }
    if (bs->head_shedding) {
        snprintf(msg, sizeof msg,
                 "shedding load: the storage head holds %llu bytes, over %d x head_max_bytes "
                 "%llu (flushing to disk is behind); writes get 503 until it is back under",
                 (unsigned long long)st->head_bytes, BDB_BP_HEAD_FACTOR,
                 (unsigned long long)s->cfg.head_max_bytes);
        bdb_buf_puts(b, n ? ",\"" : "\"");
        bdb_buf_json_str(b, msg, strlen(msg));
        bdb_buf_putc(b, '"');
        n++;
    }
    if (bs->last_server_reason != BDB_BP_NONE && bs->last_server_reason != BDB_BP_HEAD_MEMORY &&
        now - bs->last_server_ms < BDB_BP_HEALTH_WINDOW_MS) {
        snprintf(msg, sizeof msg,
                 "shedding load: writes refused with 503 (%s) %lld ms ago; in flight %llu of "
                 "%llu bytes, %llu of %d write requests",
                 bdb_bp_reason_name(bs->last_server_reason), (long long)(now - bs->last_server_ms),
                 (unsigned long long)bs->bytes, (unsigned long long)s->cfg.max_inflight_bytes,
                 (unsigned long long)bs->writes, s->cfg.max_inflight_writes);
        bdb_buf_puts(b, n ? ",\"" : "\"");
        bdb_buf_json_str(b, msg, strlen(msg));
        bdb_buf_putc(b, '"');
        n++;
    }
    bdb_buf_putc(b, ']');
    return n;
}

/* Why the server is degraded now: it keeps what it took, but something needs an
 * operator. Flushes failing in a row (a full disk, a backend down or refusing rows),
 * and a disk too full for the disk reserve (writes get 507 until a flush makes room:
 * not unhealthy, as the node serves reads and recovers by itself). The samples stay in the head and
 * the WAL and every flush_interval retries, so a load balancer should keep sending writes (200); a
 * 503 here would take a single node out of service while it still stores everything durably. Once
 * the head outgrows its guard the server sheds load and turns unhealthy instead. */
static int health_warnings(bdb_server *s, const bdb_db_stats *st, bdb_buf *b)
{
    int n = 0;
    bdb_buf_putc(b, '[');
    /* a streak that ended while the figures were read leaves since at 0: not failing */
    if (st->flush_fail_streak && st->flush_failing_since_ms) {
        char since[40], msg[400];
        bdb_format_time_ms(st->flush_failing_since_ms, since, (int)sizeof since);
        /* a full disk is retried after 1 ... 32 s (db_flush.c), anything else after
         * flush_interval_ms */
        long long every =
            st->flush_last_error == BDB_ERR_NOSPACE && s->cfg.flush_interval_ms > 32000
                ? 32000
                : (long long)s->cfg.flush_interval_ms;
        snprintf(msg, sizeof msg,
                 "flushing is failing: %llu flush(es) in a row since %s (last error: %s); "
                 "writes are kept in the WAL and retried every %lld ms",
                 (unsigned long long)st->flush_fail_streak, since,
                 bdb_strerror(st->flush_last_error), every);
        bdb_buf_putc(b, '"');
        bdb_buf_json_str(b, msg, strlen(msg));
        bdb_buf_putc(b, '"');
        n++;
    }
    /* the disk reserve is out, or writes are held for a flush (bits 1 and 2 of
     * space_low, db.h): writes get 507 until a flush made room */
    if (st->space_low) {
        char msg[400];
        unsigned long long f = st->disk_free_bytes == UINT64_MAX ? 0 : st->disk_free_bytes;
        if (st->space_low & 1)
            snprintf(msg, sizeof msg,
                     "disk nearly full: the disk reserve of %llu bytes is not in place (%llu "
                     "bytes free); writes are refused with 507 until there is room for it",
                     (unsigned long long)s->cfg.disk_reserve_bytes, f);
        else
            snprintf(msg, sizeof msg,
                     "disk nearly full: the WAL holds what a flush can still write (%llu bytes "
                     "free); writes are refused with 507 until a flush makes room",
                     f);
        bdb_buf_puts(b, n ? ",\"" : "\"");
        bdb_buf_json_str(b, msg, strlen(msg));
        bdb_buf_putc(b, '"');
        n++;
    }
    bdb_buf_putc(b, ']');
    return n;
}

/* The first string of a non-empty JSON array of strings built above, quotes
 * included: up to the first quote that is not escaped (a backslash skips the byte
 * after it), never past the array. */
static void first_string(bdb_buf *out, const bdb_buf *arr)
{
    const char *first = (const char *)arr->data + 1; /* after '[' */
    const char *lim = (const char *)arr->data + arr->len, *p = first + 1;
    while (p < lim && *p != '"')
        p += *p == '\\' ? 2 : 1;
    if (p >= lim)
        p = lim - 1;
    bdb_buf_append(out, first, (size_t)(p - first) + 1);
}

enum MHD_Result h_health(bdb_server *s, struct MHD_Connection *c)
{
    bdb_db_stats st;
    bdb_db_get_stats(s->db, &st);
    int64_t now = bdb_monotonic_ms();
    /* Looks at the head without counting a refusal, so the state is current even when
     * no write has arrived since it drained. */
    bdb_bp_head_check(s->bp, st.head_bytes, s->cfg.head_max_bytes, 0, now);
    bdb_bp_stats bs;
    bdb_bp_get_stats(s->bp, &bs);
    bdb_buf reasons;
    bdb_buf_init(&reasons);
    int nr = health_reasons(s, &st, &bs, now, &reasons);
    bdb_buf warnings;
    bdb_buf_init(&warnings);
    int nw = health_warnings(s, &st, &warnings);
    bdb_buf b;
    bdb_buf_init(&b);
    const char *status = nr ? "unhealthy" : (nw ? "degraded" : "ok");
    bdb_buf_printf(&b, "{\"status\":\"%s\",\"version\":\"%s\",\"uptime_seconds\":%lld,", status,
                   BDB_VERSION, (long long)((bdb_now_ms() - s->start_ms) / 1000));
    /* "reason": why it is not ok (the first reason, else the first warning; null when
     * ok); "reasons" and "warnings": all of them. */
    bdb_buf_puts(&b, "\"reason\":");
    if (nr)
        first_string(&b, &reasons);
    else if (nw)
        first_string(&b, &warnings);
    else
        bdb_buf_puts(&b, "null");
    bdb_buf_puts(&b, ",\"reasons\":");
    bdb_buf_append(&b, reasons.data, reasons.len);
    bdb_buf_puts(&b, ",\"warnings\":");
    bdb_buf_append(&b, warnings.data, warnings.len);
    bdb_buf_free(&reasons);
    bdb_buf_free(&warnings);
    /* The backend raw samples are flushed to (blocks count block files only). */
    bdb_buf_printf(&b, ",\"storage\":{\"engine\":\"%s\",\"writable\":%s,\"reason\":",
                   bdb_backend_name(s->cfg.storage), st.readonly ? "false" : "true");
    if (st.readonly) {
        bdb_buf_putc(&b, '"');
        bdb_buf_json_str(&b, st.readonly_reason, strlen(st.readonly_reason));
        bdb_buf_putc(&b, '"');
    } else {
        bdb_buf_puts(&b, "null");
    }
    /* the disk reserve and whether writes are held for space (db_space.h) */
    bdb_buf_printf(&b,
                   ",\"disk\":{\"reserve_bytes\":%llu,\"reserve_in_place\":%s,"
                   "\"reserve_releases\":%llu,\"writes_held\":%s}",
                   (unsigned long long)s->cfg.disk_reserve_bytes,
                   s->cfg.disk_reserve_bytes && !(st.space_low & 1) ? "true" : "false",
                   (unsigned long long)st.space_releases, st.space_low ? "true" : "false");
    /* A flush that keeps failing leaves writes acknowledged through the WAL: the
     * status is "degraded" (see health_warnings) and this says since when and why. */
    bdb_buf_printf(&b, ",\"flush\":{\"failures_total\":%llu,\"failing_in_a_row\":%llu,",
                   (unsigned long long)st.flush_failures, (unsigned long long)st.flush_fail_streak);
    if (st.flush_fail_streak) {
        char since[40];
        bdb_format_time_ms(st.flush_failing_since_ms, since, (int)sizeof since);
        bdb_buf_printf(&b, "\"failing_since\":\"%s\",\"last_error\":\"%s\"}", since,
                       bdb_strerror(st.flush_last_error));
    } else {
        bdb_buf_puts(&b, "\"failing_since\":null,\"last_error\":null}");
    }
    bdb_buf_printf(&b,
                   ",\"devices\":%llu,\"series\":%llu,\"head_samples\":%llu,\"blocks\":%llu,"
                   "\"wal_segments\":%llu,\"wal_corruptions\":%llu,\"quarantined_blocks\":%llu},",
                   (unsigned long long)st.devices, (unsigned long long)st.series,
                   (unsigned long long)st.head_samples, (unsigned long long)st.blocks,
                   (unsigned long long)st.wal.segments_on_disk,
                   (unsigned long long)st.wal_corruptions, (unsigned long long)st.quarantined);
    bdb_buf_printf(&b,
                   "\"backpressure\":{\"shedding\":%s,\"inflight_bytes\":%llu,"
                   "\"max_inflight_bytes\":%llu,\"inflight_writes\":%llu,"
                   "\"max_inflight_writes\":%d,\"tenant_inflight_share\":%d,"
                   "\"tenants_in_flight\":%llu,\"peak_inflight_bytes\":%llu,"
                   "\"peak_inflight_writes\":%llu,\"head_bytes\":%llu,\"head_max_bytes\":%llu,"
                   "\"head_shedding\":%s,\"events\":{",
                   nr > (st.readonly ? 1 : 0) ? "true" : "false", (unsigned long long)bs.bytes,
                   (unsigned long long)s->cfg.max_inflight_bytes, (unsigned long long)bs.writes,
                   s->cfg.max_inflight_writes, s->cfg.tenant_inflight_share,
                   (unsigned long long)bs.tenants, (unsigned long long)bs.peak_bytes,
                   (unsigned long long)bs.peak_writes, (unsigned long long)st.head_bytes,
                   (unsigned long long)s->cfg.head_max_bytes, bs.head_shedding ? "true" : "false");
    for (int i = 0; i < BDB_BP_REASON_N; i++)
        bdb_buf_printf(&b, "%s\"%s\":%llu", i ? "," : "", bdb_bp_reason_name((enum bdb_bp_reason)i),
                       (unsigned long long)bs.events[i]);
    bdb_buf_puts(&b, "},\"last_tenant_refusal\":");
    if (bs.last_tenant_reason != BDB_BP_NONE) {
        /* /health needs no token (liveness probes), so the tenant is named to the admin
         * token only; anyone else gets null: B must not learn A's name here. */
        if (req_is_admin(s, c)) {
            bdb_buf_puts(&b, "{\"tenant\":\"");
            bdb_buf_json_str(&b, bs.last_tenant, strlen(bs.last_tenant));
            bdb_buf_putc(&b, '"');
        } else {
            bdb_buf_puts(&b, "{\"tenant\":null");
        }
        bdb_buf_printf(&b, ",\"reason\":\"%s\",\"ms_ago\":%lld}",
                       bdb_bp_reason_name(bs.last_tenant_reason),
                       (long long)(now - bs.last_tenant_ms));
    } else {
        bdb_buf_puts(&b, "null");
    }
    bdb_buf_puts(&b, "}}\n");
    enum MHD_Result r = respond(s, c, nr ? 503 : 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

static void family(bdb_buf *b, const char *name, const char *type, const char *help)
{
    bdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metric_u(bdb_buf *b, const char *name, const char *type, const char *help,
                     unsigned long long v)
{
    family(b, name, type, help);
    bdb_buf_printf(b, "%s %llu\n", name, v);
}

static void histogram(bdb_buf *b, const char *name, const char *help, hist *h, double scale)
{
    family(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < HIST_NB; i++) {
        cum += atomic_load(&h->b[i]);
        bdb_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds[i] * scale,
                       (unsigned long long)cum);
    }
    cum += atomic_load(&h->b[HIST_NB]);
    bdb_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    bdb_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
                   (double)atomic_load(&h->sum_us) / 1e6 * scale, name,
                   (unsigned long long)atomic_load(&h->count));
}

/* Partition sizes: whole partitions (every block's piece summed), measured by the
 * engine's usage tracker when the block files change (db_usage.c), so a scrape only
 * copies figures and never walks the blocks. The buckets are power-of-4 bounds from 64
 * KiB to 4 GiB (seed 002's guidance: 10-100 MB is the target). */
static void partition_metrics(bdb_server *s, bdb_buf *b)
{
    bdb_usage_opts uo = {s->cfg.partition_warn_bytes, 0};
    bdb_db_usage_start(s->db, &uo);
    bdb_partition_summary ps;
    bdb_db_partition_summary(s->db, &ps);
    family(b, "bucketdb_partition_size_bytes", "histogram",
           "Sizes of whole partitions in block files (pieces in several block windows summed; "
           "the head is not counted). Target 10-100 MB.");
    uint64_t cum = 0;
    for (int i = 0; i < BDB_PSIZE_NB; i++) {
        cum += ps.buckets[i];
        bdb_buf_printf(b, "bucketdb_partition_size_bytes_bucket{le=\"%llu\"} %llu\n",
                       (unsigned long long)bdb_psize_bounds[i], (unsigned long long)cum);
    }
    cum += ps.buckets[BDB_PSIZE_NB];
    bdb_buf_printf(b, "bucketdb_partition_size_bytes_bucket{le=\"+Inf\"} %llu\n",
                   (unsigned long long)cum);
    bdb_buf_printf(b, "bucketdb_partition_size_bytes_sum %llu\n", (unsigned long long)ps.sum);
    bdb_buf_printf(b, "bucketdb_partition_size_bytes_count %llu\n", (unsigned long long)ps.count);
    /* A summary: the quantile label is how Prometheus expects quantiles; they describe
     * the partitions that exist now (a snapshot), like the histogram above. */
    family(b, "bucketdb_partition_size_quantile_bytes", "summary",
           "Quantiles of whole-partition sizes in block files, within 1 %; 0 without "
           "partitions.");
    bdb_buf_printf(b, "bucketdb_partition_size_quantile_bytes{quantile=\"0.5\"} %llu\n",
                   (unsigned long long)ps.p50);
    bdb_buf_printf(b, "bucketdb_partition_size_quantile_bytes{quantile=\"0.95\"} %llu\n",
                   (unsigned long long)ps.p95);
    bdb_buf_printf(b, "bucketdb_partition_size_quantile_bytes{quantile=\"0.99\"} %llu\n",
                   (unsigned long long)ps.p99);
    bdb_buf_printf(b, "bucketdb_partition_size_quantile_bytes_sum %llu\n",
                   (unsigned long long)ps.sum);
    bdb_buf_printf(b, "bucketdb_partition_size_quantile_bytes_count %llu\n",
                   (unsigned long long)ps.count);
    metric_u(b, "bucketdb_partition_size_max_bytes", "gauge",
             "Largest whole partition in block files (exact).", ps.max);
    metric_u(b, "bucketdb_large_partitions", "gauge",
             "Partitions larger than partition_warn_bytes (each logged once per run).", ps.large);
    metric_u(b, "bucketdb_partition_warn_bytes", "gauge",
             "partition_warn_bytes: the large-partition threshold (0 = off).",
             s->cfg.partition_warn_bytes);
    family(b, "bucketdb_storage_usage_age_seconds", "gauge",
           "Seconds since the usage tracker last measured partitions and tenant storage.");
    bdb_buf_printf(b, "bucketdb_storage_usage_age_seconds %.3f\n",
                   ps.measured ? (double)(bdb_monotonic_ms() - ps.measured_ms) / 1e3 : 0.0);
    family(b, "bucketdb_storage_usage_scan_seconds", "gauge",
           "Duration of the usage tracker's last measurement.");
    bdb_buf_printf(b, "bucketdb_storage_usage_scan_seconds %.3f\n", (double)ps.scan_ms / 1e3);
}

struct storage_ctx {
    bdb_server *s;
    bdb_buf *b;
};

static int storage_cb(void *ctx, const bdb_tenant_info *t)
{
    struct storage_ctx *sc = ctx;
    bdb_storage_usage su;
    char key[BDB_TENANT_KEY_MAX + 1];
    bdb_tenants_storage_key(sc->s->tenants, t->name, key, sizeof key);
    bdb_db_tenant_storage(sc->s->db, key, &su);
    bdb_buf_printf(sc->b, "bucketdb_tenant_storage_bytes{tenant=\"%s\"} %llu\n", t->name,
                   (unsigned long long)su.bytes);
    return 0;
}

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    long n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory stream itself */
}

static int quota_cb(void *ctx, const bdb_tenant_info *t)
{
    bdb_buf *b = ctx;
    for (int l = 0; l < BDB_LIMIT_N; l++)
        bdb_buf_printf(b, "bucketdb_quota_rejections_total{tenant=\"%s\",limit=\"%s\"} %llu\n",
                       t->name, bdb_quota_limit_name((enum bdb_quota_limit)l),
                       (unsigned long long)t->rejections[l]);
    return 0;
}

static int ingest_samples_cb(void *ctx, const bdb_tenant_info *t)
{
    bdb_buf_printf(ctx, "bucketdb_tenant_samples_ingested_total{tenant=\"%s\"} %llu\n", t->name,
                   (unsigned long long)t->ingested_samples);
    return 0;
}

static int ingest_requests_cb(void *ctx, const bdb_tenant_info *t)
{
    bdb_buf_printf(ctx, "bucketdb_tenant_write_requests_total{tenant=\"%s\"} %llu\n", t->name,
                   (unsigned long long)t->ingested_requests);
    return 0;
}

enum MHD_Result h_metrics(bdb_server *s, struct MHD_Connection *c)
{
    bdb_db_stats st;
    bdb_db_get_stats(s->db, &st);
    bdb_buf b;
    bdb_buf_init(&b);
    family(&b, "bucketdb_build_info", "gauge", "Build information.");
    bdb_buf_printf(&b, "bucketdb_build_info{version=\"%s\"} 1\n", BDB_VERSION);
    family(&b, "bucketdb_samples_ingested_total", "counter",
           "Samples durably written, by protocol.");
    bdb_buf_printf(&b, "bucketdb_samples_ingested_total{protocol=\"line\"} %llu\n",
                   (unsigned long long)atomic_load(&s->lp_samples));
    bdb_buf_printf(&b, "bucketdb_samples_ingested_total{protocol=\"json\"} %llu\n",
                   (unsigned long long)atomic_load(&s->json_samples));
    family(&b, "bucketdb_lines_total", "counter", "Line-protocol lines by result.");
    bdb_buf_printf(&b, "bucketdb_lines_total{result=\"accepted\"} %llu\n",
                   (unsigned long long)atomic_load(&s->lp_lines_accepted));
    bdb_buf_printf(&b, "bucketdb_lines_total{result=\"rejected\"} %llu\n",
                   (unsigned long long)atomic_load(&s->lp_lines_rejected));
    family(&b, "bucketdb_string_fields_not_stored_total", "counter",
           "String fields other than state (line protocol) and string metric values (JSON), "
           "parsed but not stored, by protocol.");
    bdb_buf_printf(&b, "bucketdb_string_fields_not_stored_total{protocol=\"line\"} %llu\n",
                   (unsigned long long)atomic_load(&s->lp_strings_skipped));
    bdb_buf_printf(&b, "bucketdb_string_fields_not_stored_total{protocol=\"json\"} %llu\n",
                   (unsigned long long)atomic_load(&s->json_strings_skipped));
    family(&b, "bucketdb_attributes_not_kept_total", "counter",
           "String attributes not kept because their device had the most names already.");
    bdb_buf_printf(&b, "bucketdb_attributes_not_kept_total %llu\n",
                   (unsigned long long)bdb_db_attrs_dropped(s->db));
    family(&b, "bucketdb_json_reports_total", "counter", "JSON reports by result.");
    bdb_buf_printf(&b, "bucketdb_json_reports_total{result=\"accepted\"} %llu\n",
                   (unsigned long long)atomic_load(&s->json_reports_accepted));
    bdb_buf_printf(&b, "bucketdb_json_reports_total{result=\"rejected\"} %llu\n",
                   (unsigned long long)atomic_load(&s->json_reports_rejected));
    family(&b, "bucketdb_http_responses_total", "counter", "HTTP responses by status class.");
    for (int i = 1; i <= 5; i++)
        bdb_buf_printf(&b, "bucketdb_http_responses_total{code=\"%dxx\"} %llu\n", i,
                       (unsigned long long)atomic_load(&s->http_requests[i]));
    metric_u(&b, "bucketdb_http_request_bytes_total", "counter", "Request body bytes received.",
             atomic_load(&s->bytes_received));
    metric_u(&b, "bucketdb_body_too_large_total", "counter", "Requests refused with 413.",
             atomic_load(&s->body_too_large));
    metric_u(&b, "bucketdb_http_slow_closed_total", "counter",
             "Connections closed for missing the header deadline or the minimum body rate.",
             bdb_conn_guard_closed(s->guard));
    metric_u(&b, "bucketdb_auth_failures_total", "counter", "Requests refused with 401.",
             atomic_load(&s->auth_failures));
    metric_u(&b, "bucketdb_write_failures_total", "counter",
             "Writes refused because storage failed (5xx).", atomic_load(&s->write_failures));
    metric_u(&b, "bucketdb_forbidden_total", "counter",
             "Requests refused with 403 (a tenant token naming another tenant).",
             atomic_load(&s->forbidden));
    metric_u(&b, "bucketdb_registered_tenants", "gauge", "Tenants in the tenant registry.",
             bdb_tenants_count(s->tenants));
    /* One series per registered tenant and limit: the label set is bounded by the
     * registry, never by what clients send. */
    family(&b, "bucketdb_quota_rejections_total", "counter",
           "Write requests refused by a tenant quota, by tenant and limit (registered "
           "tenants only).");
    bdb_tenants_list(s->tenants, quota_cb, &b);
    metric_u(&b, "bucketdb_device_rate_rejections_total", "counter",
             "Write requests refused because a device exceeded its profile's max_rps.",
             bdb_admit_count(s->admit, BDB_ADMIT_DEVICE_RATE));
    metric_u(&b, "bucketdb_device_limiter_entries", "gauge",
             "Devices with live rate-limiter state (idle ones expire).",
             bdb_devlimit_entries(s->devlimit));
    histogram(&b, "bucketdb_write_duration_seconds",
              "Write request latency, receive to durable acknowledgement.", &s->write_latency, 1);
    family(&b, "bucketdb_write_batch_samples", "histogram", "Samples per write batch.");
    {
        /* batch sizes reuse the latency buckets scaled to counts */
        uint64_t cum = 0;
        for (int i = 0; i < HIST_NB; i++) {
            cum += atomic_load(&s->batch_size.b[i]);
            bdb_buf_printf(&b, "bucketdb_write_batch_samples_bucket{le=\"%g\"} %llu\n",
                           hist_bounds[i] * 1e6, (unsigned long long)cum);
        }
        cum += atomic_load(&s->batch_size.b[HIST_NB]);
        bdb_buf_printf(&b, "bucketdb_write_batch_samples_bucket{le=\"+Inf\"} %llu\n",
                       (unsigned long long)cum);
        bdb_buf_printf(&b, "bucketdb_write_batch_samples_sum %llu\n",
                       (unsigned long long)atomic_load(&s->batch_size.sum_us));
        bdb_buf_printf(&b, "bucketdb_write_batch_samples_count %llu\n",
                       (unsigned long long)atomic_load(&s->batch_size.count));
    }
    /* Ingestion per tenant: registered tenants plus one "(other)" series for every
     * unregistered tenant (a name no tenant can have), so cardinality stays bounded. */
    family(&b, "bucketdb_tenant_samples_ingested_total", "counter",
           "Samples durably written, by tenant (registered tenants, others as \"(other)\").");
    bdb_tenants_list(s->tenants, ingest_samples_cb, &b);
    bdb_buf_printf(&b, "bucketdb_tenant_samples_ingested_total{tenant=\"(other)\"} %llu\n",
                   (unsigned long long)atomic_load(&s->other_samples));
    family(&b, "bucketdb_tenant_write_requests_total", "counter",
           "Write requests that stored samples, by tenant (registered tenants, others as "
           "\"(other)\").");
    bdb_tenants_list(s->tenants, ingest_requests_cb, &b);
    bdb_buf_printf(&b, "bucketdb_tenant_write_requests_total{tenant=\"(other)\"} %llu\n",
                   (unsigned long long)atomic_load(&s->other_write_requests));
    /* Backpressure (backpressure.h). */
    bdb_bp_stats bs;
    bdb_bp_get_stats(s->bp, &bs);
    family(&b, "bucketdb_backpressure_events_total", "counter",
           "Requests refused by backpressure, by reason (429: tenant_*, 503: the others).");
    for (int i = 0; i < BDB_BP_REASON_N; i++)
        bdb_buf_printf(&b, "bucketdb_backpressure_events_total{reason=\"%s\"} %llu\n",
                       bdb_bp_reason_name((enum bdb_bp_reason)i), (unsigned long long)bs.events[i]);
    metric_u(&b, "bucketdb_inflight_request_bytes", "gauge",
             "Bytes held now by requests being received or processed (bodies, batches).", bs.bytes);
    metric_u(&b, "bucketdb_inflight_request_bytes_limit", "gauge",
             "max_inflight_bytes: the budget of bucketdb_inflight_request_bytes.",
             s->cfg.max_inflight_bytes);
    metric_u(&b, "bucketdb_inflight_write_requests", "gauge", "Write requests in flight now.",
             bs.writes);
    metric_u(&b, "bucketdb_inflight_write_requests_limit", "gauge",
             "max_inflight_writes: the budget of bucketdb_inflight_write_requests.",
             (unsigned long long)s->cfg.max_inflight_writes);
    metric_u(&b, "bucketdb_head_shedding", "gauge",
             "1 while writes are refused because the head is over 2 x head_max_bytes.",
             (unsigned long long)bs.head_shedding);
    metric_u(&b, "bucketdb_queries_total", "counter", "Range queries answered.",
             atomic_load(&s->queries));
    histogram(&b, "bucketdb_query_duration_seconds", "Range query latency.", &s->query_latency, 1);
    metric_u(&b, "bucketdb_devices", "gauge", "Devices known.", st.devices);
    metric_u(&b, "bucketdb_series", "gauge", "Series (device x metric) known.", st.series);
    metric_u(&b, "bucketdb_tenants", "gauge", "Tenants known.", st.tenants);
    bdb_purge_stats ps; /* deleted tenants' data (tenants_purge.h) */
    bdb_purge_get_stats(s->purge, &ps);
    metric_u(&b, "bucketdb_tenant_purges_total", "counter",
             "Generations of deleted tenants whose data was removed.", ps.purged);
    metric_u(&b, "bucketdb_tenant_purge_failures_total", "counter",
             "Removals of a deleted tenant's data that failed (each is retried).", ps.failures);
    metric_u(&b, "bucketdb_tenant_purges_pending", "gauge",
             "Generations of deleted tenants whose data is not removed yet.",
             bdb_tenants_purge_pending(s->tenants));
    metric_u(&b, "bucketdb_head_samples", "gauge", "Samples in the in-memory head.",
             st.head_samples);
    metric_u(&b, "bucketdb_head_bytes", "gauge", "Bytes held by the in-memory head.",
             st.head_bytes);
    metric_u(&b, "bucketdb_head_max_bytes", "gauge",
             "head_max_bytes: a flush is due above it, writes are shed above twice it.",
             s->cfg.head_max_bytes);
    metric_u(&b, "bucketdb_out_of_order_samples_total", "counter",
             "Samples that arrived older than their series' newest.", st.ooo_samples);
    metric_u(&b, "bucketdb_read_cache_hits_total", "counter",
             "Reads of derived windows answered from the read cache.", st.rcache_hits);
    metric_u(&b, "bucketdb_read_cache_misses_total", "counter",
             "Reads of derived windows the read cache did not hold (built from the files).",
             st.rcache_misses);
    metric_u(&b, "bucketdb_read_cache_evictions_total", "counter",
             "Read cache entries evicted to stay under read_cache_bytes.", st.rcache_evictions);
    metric_u(&b, "bucketdb_read_cache_entries", "gauge", "Entries in the read cache.",
             st.rcache_entries);
    metric_u(&b, "bucketdb_read_cache_bytes", "gauge",
             "Bytes the read cache accounts for (values, keys, entries).", st.rcache_bytes);
    metric_u(&b, "bucketdb_read_cache_max_bytes", "gauge", "read_cache_bytes: the cache's limit.",
             st.rcache_max_bytes);
    bdb_rcache_stats cs = {0};
    if (s->catalogs)
        bdb_rcache_stats_get(s->catalogs, &cs);
    metric_u(&b, "bucketdb_catalog_cache_hits_total", "counter",
             "InfluxQL statements that found their tenant's catalog kept.", cs.hits);
    metric_u(&b, "bucketdb_catalog_cache_misses_total", "counter",
             "InfluxQL statements that listed their tenant's devices.", cs.misses);
    metric_u(&b, "bucketdb_catalog_cache_bytes", "gauge",
             "Bytes the kept catalogs account for; catalog_cache_bytes is the limit.", cs.bytes);
    bdb_rcache_stats gs = {0};
    if (s->groups)
        bdb_rcache_stats_get(s->groups, &gs);
    metric_u(&b, "bucketdb_group_cache_hits_total", "counter",
             "InfluxQL group statements and PromQL range queries that found their settled "
             "part kept.",
             gs.hits);
    metric_u(&b, "bucketdb_group_cache_misses_total", "counter",
             "InfluxQL group statements and PromQL range queries that read their settled part.",
             gs.misses);
    metric_u(&b, "bucketdb_group_cache_bytes", "gauge",
             "Bytes the kept group windows account for; group_cache_bytes is the limit.", gs.bytes);
    metric_u(&b, "bucketdb_blocks", "gauge", "Block files.", st.blocks);
    metric_u(&b, "bucketdb_block_bytes", "gauge", "Bytes in block files.", st.block_bytes);
    metric_u(&b, "bucketdb_block_samples", "gauge", "Samples in block files.", st.block_samples);
    metric_u(&b, "bucketdb_flushes_total", "counter", "Head flushes to blocks.", st.flushes);
    metric_u(&b, "bucketdb_flush_failures_total", "counter",
             "Head flushes that failed (their samples stay in the WAL; the next flush retries).",
             st.flush_failures);
    metric_u(&b, "bucketdb_flush_failing", "gauge",
             "Flushes failed in a row now (0 once one succeeds); alert when it stays above 0.",
             st.flush_fail_streak);
    metric_u(&b, "bucketdb_compactions_total", "counter", "Window compactions.", st.compactions);
    metric_u(&b, "bucketdb_pending_compactions", "gauge",
             "Blocks waiting to be merged into their window's block.", st.pending_compactions);
    metric_u(&b, "bucketdb_retention_dropped_blocks_total", "counter",
             "Blocks dropped by retention.", st.retention_drops);
    metric_u(&b, "bucketdb_quarantined_blocks_total", "counter",
             "Damaged block files moved aside at start.", st.quarantined);
    metric_u(&b, "bucketdb_bucket_changes_total", "counter",
             "Device bucket-size changes learned from rates.", st.bucket_changes);
    metric_u(&b, "bucketdb_wal_corruptions_total", "counter",
             "Damaged WAL places found and cut at recovery.", st.wal_corruptions);
    metric_u(&b, "bucketdb_wal_replayed_records_total", "counter", "WAL records replayed at start.",
             st.wal_replayed_records);
    metric_u(&b, "bucketdb_wal_fsyncs_total", "counter", "WAL fsync calls.", st.wal.fsyncs);
    family(&b, "bucketdb_wal_fsync_seconds_total", "counter", "Time spent in WAL fsync.");
    bdb_buf_printf(&b, "bucketdb_wal_fsync_seconds_total %.6f\n",
                   (double)st.wal.fsync_ns_total / 1e9);
    metric_u(&b, "bucketdb_wal_bytes_total", "counter", "Bytes appended to the WAL.", st.wal.bytes);
    metric_u(&b, "bucketdb_wal_segments", "gauge", "WAL segment files.", st.wal.segments_on_disk);
    metric_u(&b, "bucketdb_storage_readonly", "gauge",
             "1 when storage refuses writes after a failed fsync.",
             (unsigned long long)st.readonly);
    metric_u(&b, "bucketdb_disk_writes_held", "gauge",
             "1 while writes get 507 for lack of disk space (the disk reserve is not in place, "
             "or the WAL holds what a flush can still write).",
             st.space_low ? 1ull : 0ull);
    metric_u(&b, "bucketdb_disk_reserve_releases_total", "counter",
             "Times the disk reserve was given to a flush that ran out of space.",
             st.space_releases);
    metric_u(&b, "bucketdb_disk_free_bytes", "gauge",
             "Free bytes on the data directory's file system (0 when unknown).",
             st.disk_free_bytes == UINT64_MAX ? 0ull : (unsigned long long)st.disk_free_bytes);

    partition_metrics(s, &b);
    hot_metrics(s, &b); /* hot partitions, promotions (h_partitions.c) */
    /* Registered tenants only, like the quota series: bounded by the registry. */
    family(&b, "bucketdb_tenant_storage_bytes", "gauge",
           "Bytes a registered tenant stores: its share of block files (with Cassandra: "
           "the bytes of its rows Cassandra confirmed, one replica) plus 16 bytes per "
           "unflushed sample (what its storage_bytes quota is checked against).");
    struct storage_ctx sc = {s, &b};
    bdb_tenants_list(s->tenants, storage_cb, &sc);

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    family(&b, "process_cpu_seconds_total", "counter", "CPU time.");
    bdb_buf_printf(&b, "process_cpu_seconds_total %.3f\n",
                   (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
    long rss_pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        long size;
        if (fscanf(f, "%ld %ld", &size, &rss_pages) != 2)
            rss_pages = 0;
        fclose(f);
    }
    metric_u(&b, "process_resident_memory_bytes", "gauge", "Resident memory.",
             (unsigned long long)rss_pages * (unsigned long long)sysconf(_SC_PAGESIZE));
    metric_u(&b, "process_open_fds", "gauge", "Open file descriptors.",
             (unsigned long long)count_fds());
    family(&b, "process_start_time_seconds", "gauge", "Start time, Unix seconds.");
    bdb_buf_printf(&b, "process_start_time_seconds %lld\n", (long long)(s->start_ms / 1000));
    bdb_mqtt_gw_metrics(atomic_load(&s->mqtt), &b);
    h_late_metrics(s, &b); /* late data: late events, windows recomputed (h_query.c) */
    /* storage: the backend's own families (Cassandra's counters, nodes, the WAL waiting
     * for it); nothing with the embedded engine */
    bdb_backend_metrics(s->cfg.storage, &b, st.wal.bytes_on_disk, st.wal.segments_on_disk);

    enum MHD_Result r =
        respond(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}
