/* plan: capacity planning and bucket advice (docs/OPERATIONS.md). The arithmetic is
 * model/plan.c (unit-tested against the seeds' figures); this file parses flags,
 * optionally measures a running server's fleet, and prints a table or JSON. */
#include "cli/cli.h"
#include "cli/http_conn.h"
#include "cli/http_client.h"

#include "common/buf.h"
#include "model/plan.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf(
        "usage: bucketdb plan [options]\n\n"
        "Capacity and bucket-size plan for a fleet. Without options: the seeds' scenario\n"
        "(1,000,000 devices every 10s, 10 metrics, 100-byte rows, 30 days, aggregates 10%%,\n"
        "replication 3).\n\n"
        "  --devices N            devices in the fleet\n"
        "  --interval DUR         time between two reports of a device (10s; 500ms, 1m, 1h)\n"
        "  --metrics N            metrics per report (one row each)\n"
        "  --row-bytes N          stored bytes per row (100)\n"
        "  --retention DUR        raw retention (30d)\n"
        "  --aggregates PCT       aggregate storage as a share of raw (10%%)\n"
        "  --tiers LIST           compute aggregates from rollup tiers instead (1m,1h,1d)\n"
        "  --tier-row-bytes N     bytes per aggregate row (default: --row-bytes)\n"
        "  --replication N        replication factor (3)\n"
        "  --hot-devices N        devices that report --hot-factor times faster (0)\n"
        "  --hot-factor F         (10)\n"
        "  --bucket B             check this bucket (10m, 15m, 1h, 6h, 1d)\n"
        "  --gc-grace DUR         Cassandra gc_grace_seconds, checked against --repair-interval\n"
        "  --repair-interval DUR  how often repair runs\n"
        "  --query-range DUR      a typical query's range, or 'unbounded'\n"
        "  --measure URL          take devices, interval and metrics from a running server's\n"
        "                         /api/v1/devices (flags given explicitly still win)\n"
        "  --tenant NAME, --token TOKEN   for --measure ($BUCKETDB_TOKEN)\n"
        "  --json                 print JSON instead of a table\n\n"
        "Exit codes: 0 success, 1 --measure failed, 2 usage error.\n");
}

/* "10s", "500ms", "1.5h", "30d", "2w"; a plain number is seconds. -1 if bad. */
static double parse_dur(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || !(x >= 0) || !isfinite(x))
        return -1;
    if (!*end || !strcmp(end, "s"))
        return x;
    if (!strcmp(end, "ms"))
        return x / 1000;
    if (!strcmp(end, "m"))
        return x * 60;
    if (!strcmp(end, "h"))
        return x * 3600;
    if (!strcmp(end, "d"))
        return x * 86400;
    if (!strcmp(end, "w"))
        return x * 604800;
    return -1;
}

static double parse_num(const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || !isfinite(x))
        return -1;
    if (*end == '%' && !end[1])
        return x / 100;
    return *end ? -1 : x;
}

/* Measures the fleet from GET /api/v1/devices: device count, metrics per device and
 * each device's rows per second over its [first_time, last_time]. */
static int measure(const char *server, const char *tenant, const char *token, bdb_plan_in *in,
                   int given_dev, int given_int, int given_met, char *note, size_t notelen)
{
    cli_conn c;
    if (cli_conn_init(&c, server, 60) != 0) {
        fprintf(stderr, "bucketdb plan: %s\n", c.err);
        return -1;
    }
    bdb_buf path;
    bdb_buf_init(&path);
    bdb_buf_puts(&path, "/api/v1/devices");
    if (tenant) {
        bdb_buf_puts(&path, "?tenant=");
        cli_url_escape(&path, tenant);
    }
    bdb_buf_putc(&path, 0);
    cli_resp r;
    cli_resp_init(&r);
    int rc = cli_conn_request(&c, "GET", (char *)path.data, token, NULL, NULL, 0, NULL, NULL, &r);
    cli_conn_close(&c);
    bdb_buf_free(&path);
    if (rc != 0 || r.status != 200) {
        fprintf(stderr, "bucketdb plan: --measure %s: %s %.*s\n", server, rc ? c.err : "HTTP error",
                (int)r.body.len, (char *)r.body.data);
        cli_resp_free(&r);
        return -1;
    }
    json_error_t je;
    json_t *doc = json_loadb((char *)r.body.data, r.body.len, 0, &je);
    cli_resp_free(&r);
    json_t *devs = doc ? json_object_get(doc, "devices") : NULL;
    if (!json_is_array(devs)) {
        fprintf(stderr, "bucketdb plan: --measure: no device list in the answer\n");
        json_decref(doc);
        return -1;
    }
    size_t n = json_array_size(devs), timed = 0;
    double metrics = 0, rows_s = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(devs, i);
        double m = (double)json_array_size(json_object_get(d, "metrics"));
        double samples = json_number_value(json_object_get(d, "samples"));
        double span = (json_number_value(json_object_get(d, "last_time")) -
                       json_number_value(json_object_get(d, "first_time"))) /
                      1000.0;
        metrics += m;
        /* samples over the span between the first and last report: n reports span
         * n-1 intervals, so take one report's rows off */
        if (span > 0 && m > 0 && samples > m) {
            rows_s += (samples - m) / span;
            timed++;
        }
    }
    json_decref(doc);
    if (n == 0 || timed == 0) {
        fprintf(stderr,
                "bucketdb plan: --measure: the server has %zu device(s) and none "
                "with two reports yet; nothing to measure\n",
                n);
        return -1;
    }
    double avg_m = metrics / (double)n, avg_rows = rows_s / (double)timed;
    if (!given_dev)
        in->devices = (double)n;
    if (!given_met)
        in->metrics = avg_m;
    if (!given_int)
        in->interval_s = in->metrics / avg_rows;
    snprintf(note, notelen,
             "measured at %s: %zu devices, %.3g metrics per report, %.4g rows/s per device "
             "(%zu devices with two or more reports)",
             server, n, avg_m, avg_rows, timed);
    return 0;
}

static void fmt_rate(char *out, size_t n, double v)
{
    if (v >= 100)
        snprintf(out, n, "%.0f", v);
    else
        snprintf(out, n, "%.4g", v);
}

static void print_table(const bdb_plan_in *in, const bdb_plan_out *o, const char *note)
{
    char a[32], b[32], c[32];
    if (*note)
        printf("%s\n\n", note);
    printf("Fleet: %.0f devices, a report every %gs, %g metrics per report, %g-byte rows\n",
           in->devices, in->interval_s, in->metrics, in->row_bytes);
    if (in->hot_devices > 0)
        printf("       %.0f of them hot, reporting %gx as often\n", in->hot_devices,
               in->hot_factor);
    printf("\nWrites\n");
    fmt_rate(a, sizeof a, o->reports_per_s);
    printf("  reports (writes)/s          %s\n", a);
    fmt_rate(a, sizeof a, o->samples_per_s);
    printf("  samples (rows)/s            %s\n", a);
    fmt_rate(a, sizeof a, o->replica_writes_per_s);
    char rl[64];
    snprintf(rl, sizeof rl, "replica writes/s (RF %g)", in->rf);
    printf("  %-28s%s\n", rl, a);
    printf("\nPartition size per device and bucket (target 10-100 MB)\n");
    printf("  bucket  rows         size       verdict\n");
    for (int i = 0; i < BDB_PLAN_NBUCKETS; i++) {
        const bdb_plan_bucket *k = &o->buckets[i];
        const char *mark = bdb_plan_verdict_mark(k->verdict);
        printf("  %-6s  %-11.0f  %-9s  %s %s%s%s\n", k->name, k->rows,
               bdb_plan_fmt_bytes(k->bytes, 3, a, sizeof a), *mark ? mark : " ",
               bdb_plan_verdict_name(k->verdict), i == o->recommended ? "   <- recommended" : "",
               i == o->server_auto ? "   (server's automatic choice)" : "");
    }
    if (o->hot_bucket >= 0)
        printf("  hot devices: %s\n", o->buckets[o->hot_bucket].name);
    printf("\nStorage\n");
    printf("  per device per day          %s  (%.6g reports x %g metrics x %g B)\n",
           bdb_plan_fmt_bytes(o->device_day_bytes, 3, a, sizeof a), o->reports_per_day, in->metrics,
           in->row_bytes);
    printf("  fleet per day               %s\n",
           bdb_plan_fmt_bytes(o->fleet_day_bytes, 3, a, sizeof a));
    char label[64];
    snprintf(label, sizeof label, "raw over %g days", in->retention_days);
    printf("  %-28s%s\n", label, bdb_plan_fmt_bytes(o->retention_bytes, 3, a, sizeof a));
    snprintf(label, sizeof label, "with aggregates (+%.3g%%)", o->agg_share * 100);
    printf("  %-28s%s  (aggregates %s)\n", label,
           bdb_plan_fmt_bytes(o->total_bytes, 3, b, sizeof b),
           bdb_plan_fmt_bytes(o->agg_bytes, 3, c, sizeof c));
    snprintf(label, sizeof label, "with replication (RF %g)", in->rf);
    printf("  %-28s%s\n", label, bdb_plan_fmt_bytes(o->cluster_bytes, 3, a, sizeof a));
    if (o->partitions_per_query > 0)
        printf("\nA %.0f s query reads %.0f partitions of one device\n", in->query_range_s,
               o->partitions_per_query);
    printf("\nWarnings%s\n", o->nwarnings ? "" : ": none");
    for (size_t i = 0; i < o->nwarnings; i++)
        printf("  - %s\n", o->warnings[i]);
}

static void print_json(const bdb_plan_in *in, const bdb_plan_out *o, const char *note)
{
    bdb_buf j;
    bdb_buf_init(&j);
    bdb_buf_printf(&j, "{\"inputs\":{\"devices\":");
    bdb_buf_double(&j, in->devices);
#define NUM(k, v)                                                                                  \
    do {                                                                                           \
        bdb_buf_puts(&j, ",\"" k "\":");                                                           \
        bdb_buf_double(&j, (v));                                                                   \
    } while (0)
    NUM("interval_s", in->interval_s);
    NUM("metrics", in->metrics);
    NUM("row_bytes", in->row_bytes);
    NUM("retention_days", in->retention_days);
    NUM("replication", in->rf);
    NUM("hot_devices", in->hot_devices);
    NUM("hot_factor", in->hot_factor);
    bdb_buf_puts(&j, "},\"measured\":");
    if (*note) {
        bdb_buf_putc(&j, '"');
        bdb_buf_json_str(&j, note, strlen(note));
        bdb_buf_putc(&j, '"');
    } else {
        bdb_buf_puts(&j, "null");
    }
    bdb_buf_puts(&j, ",\"writes\":{\"reports_per_s\":");
    bdb_buf_double(&j, o->reports_per_s);
    NUM("samples_per_s", o->samples_per_s);
    NUM("replica_writes_per_s", o->replica_writes_per_s);
    bdb_buf_puts(&j, "},\"buckets\":[");
    for (int i = 0; i < BDB_PLAN_NBUCKETS; i++) {
        const bdb_plan_bucket *k = &o->buckets[i];
        bdb_buf_printf(&j, "%s{\"bucket\":\"%s\",\"seconds\":", i ? "," : "", k->name);
        bdb_buf_double(&j, k->seconds);
        NUM("rows", k->rows);
        NUM("bytes", k->bytes);
        bdb_buf_printf(&j, ",\"verdict\":\"%s\"}", bdb_plan_verdict_name(k->verdict));
    }
    bdb_buf_printf(&j, "],\"recommended_bucket\":\"%s\",\"server_automatic_bucket\":",
                   o->buckets[o->recommended].name);
    if (o->server_auto >= 0)
        bdb_buf_printf(&j, "\"%s\"", o->buckets[o->server_auto].name);
    else
        bdb_buf_puts(&j, "null");
    bdb_buf_puts(&j, ",\"hot_device_bucket\":");
    if (o->hot_bucket >= 0)
        bdb_buf_printf(&j, "\"%s\"", o->buckets[o->hot_bucket].name);
    else
        bdb_buf_puts(&j, "null");
    bdb_buf_puts(&j, ",\"storage\":{\"device_day_bytes\":");
    bdb_buf_double(&j, o->device_day_bytes);
    NUM("reports_per_device_day", o->reports_per_day);
    NUM("fleet_day_bytes", o->fleet_day_bytes);
    NUM("retention_raw_bytes", o->retention_bytes);
    NUM("aggregate_bytes", o->agg_bytes);
    NUM("aggregate_share", o->agg_share);
    NUM("total_bytes", o->total_bytes);
    NUM("replicated_bytes", o->cluster_bytes);
    bdb_buf_puts(&j, "},\"partitions_per_query\":");
    bdb_buf_double(&j, o->partitions_per_query);
    bdb_buf_puts(&j, ",\"warnings\":[");
    for (size_t i = 0; i < o->nwarnings; i++) {
        bdb_buf_puts(&j, i ? ",\"" : "\"");
        bdb_buf_json_str(&j, o->warnings[i], strlen(o->warnings[i]));
        bdb_buf_putc(&j, '"');
    }
    bdb_buf_puts(&j, "]}\n");
#undef NUM
    fwrite(j.data, 1, j.len, stdout);
    bdb_buf_free(&j);
}

static int bad_value(const char *flag, const char *v, const char *want)
{
    fprintf(stderr, "bucketdb plan: %s '%s': %s\n", flag, v, want);
    return BDB_EXIT_USAGE;
}

int cmd_plan(int argc, char **argv)
{
    bdb_plan_in in;
    bdb_plan_in_default(&in);
    const char *measure_url = NULL, *tenant = NULL, *token = getenv("BUCKETDB_TOKEN");
    int json = 0, given_dev = 0, given_int = 0, given_met = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (strncmp(a, "--", 2)) {
            fprintf(stderr, "bucketdb plan: unexpected argument '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb plan: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        const char *v = argv[++i];
        double x;
        if (!strcmp(a, "--devices")) {
            if ((x = parse_num(v)) <= 0)
                return bad_value(a, v, "a number of devices > 0");
            in.devices = x;
            given_dev = 1;
        } else if (!strcmp(a, "--interval")) {
            if ((x = parse_dur(v)) <= 0)
                return bad_value(a, v, "a duration > 0 such as 10s, 500ms, 1m");
            in.interval_s = x;
            given_int = 1;
        } else if (!strcmp(a, "--metrics")) {
            if ((x = parse_num(v)) <= 0)
                return bad_value(a, v, "a number > 0");
            in.metrics = x;
            given_met = 1;
        } else if (!strcmp(a, "--row-bytes")) {
            if ((x = parse_num(v)) <= 0)
                return bad_value(a, v, "bytes > 0");
            in.row_bytes = x;
        } else if (!strcmp(a, "--retention")) {
            if ((x = parse_dur(v)) <= 0)
                return bad_value(a, v, "a duration > 0 such as 30d");
            in.retention_days = x / 86400;
        } else if (!strcmp(a, "--aggregates")) {
            if ((x = parse_num(v)) < 0)
                return bad_value(a, v, "a share such as 10% or 0.1");
            in.agg_share = x;
        } else if (!strcmp(a, "--tiers")) {
            char tmp[256];
            snprintf(tmp, sizeof tmp, "%s", v);
            in.ntiers = 0;
            for (char *s, *t = strtok_r(tmp, ",", &s); t; t = strtok_r(NULL, ",", &s)) {
                if (in.ntiers >= 8 || (x = parse_dur(t)) <= 0)
                    return bad_value(a, v, "up to 8 window durations such as 1m,1h,1d");
                in.tier_s[in.ntiers++] = x;
            }
        } else if (!strcmp(a, "--tier-row-bytes")) {
            if ((x = parse_num(v)) <= 0)
                return bad_value(a, v, "bytes > 0");
            in.tier_row_bytes = x;
        } else if (!strcmp(a, "--replication") || !strcmp(a, "--rf")) {
            if ((x = parse_num(v)) < 1)
                return bad_value(a, v, "a replication factor >= 1");
            in.rf = x;
        } else if (!strcmp(a, "--hot-devices")) {
            if ((x = parse_num(v)) < 0)
                return bad_value(a, v, "a number >= 0");
            in.hot_devices = x;
        } else if (!strcmp(a, "--hot-factor")) {
            if ((x = parse_num(v)) <= 1)
                return bad_value(a, v, "a factor > 1");
            in.hot_factor = x;
        } else if (!strcmp(a, "--bucket")) {
            int k = -1;
            for (int b = 0; b < BDB_PLAN_NBUCKETS; b++)
                if (!strcmp(v, bdb_plan_bucket_name[b]))
                    k = b;
            if (k < 0)
                return bad_value(a, v, "one of 10m, 15m, 1h, 6h, 1d");
            in.bucket_s = bdb_plan_bucket_s[k];
        } else if (!strcmp(a, "--gc-grace")) {
            if ((x = parse_dur(v)) <= 0)
                return bad_value(a, v, "a duration such as 10d or 864000");
            in.gc_grace_s = x;
        } else if (!strcmp(a, "--repair-interval")) {
            if ((x = parse_dur(v)) <= 0)
                return bad_value(a, v, "a duration such as 7d");
            in.repair_interval_s = x;
        } else if (!strcmp(a, "--query-range")) {
            if (!strcmp(v, "unbounded"))
                in.query_range_s = -1;
            else if ((x = parse_dur(v)) <= 0)
                return bad_value(a, v, "a duration such as 7d, or 'unbounded'");
            else
                in.query_range_s = x;
        } else if (!strcmp(a, "--measure")) {
            measure_url = v;
        } else if (!strcmp(a, "--tenant")) {
            tenant = v;
        } else if (!strcmp(a, "--token")) {
            token = v;
        } else {
            fprintf(stderr, "bucketdb plan: unknown option '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
    }
    char note[320] = "";
    if (measure_url && measure(measure_url, tenant, token, &in, given_dev, given_int, given_met,
                               note, sizeof note) != 0)
        return BDB_EXIT_FAIL;
    bdb_plan_out o;
    char err[160];
    if (bdb_plan_compute(&in, &o, err, sizeof err) != 0) {
        fprintf(stderr, "bucketdb plan: %s\n", err);
        return BDB_EXIT_USAGE;
    }
    if (json)
        print_json(&in, &o, note);
    else
        print_table(&in, &o, note);
    return BDB_EXIT_OK;
}
