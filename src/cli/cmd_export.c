/* export: streams samples out of a running server (GET /api/v1/export) to a file or
 * stdout, as line protocol (as the server sends it) or CSV (converted line by line).
 * Memory stays bounded by one network buffer and one line, whatever the range.
 *
 * Several tenants go into one file: line protocol marks each tenant's part with a
 * comment line "# tenant: NAME" (which the line-protocol parser skips and `bucketdb
 * import` follows), CSV has a tenant column. */
#include "cli/cli.h"
#include "cli/http_client.h"
#include "cli/http_conn.h"
#include "cli/xfer.h"

#include "common/buf.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
    printf("usage: bucketdb export [options]\n\n"
           "Streams stored samples from a running server.\n\n"
           "  --server URL        server (default http://127.0.0.1:8086)\n"
           "  --token TOKEN       token ($BUCKETDB_TOKEN); the admin token for several tenants\n"
           "  --tenant LIST       comma-separated tenants (default: the server's default)\n"
           "  --device LIST       comma-separated devices (default: all)\n"
           "  --metric LIST       comma-separated metrics (default: all)\n"
           "  --from TIME, --to TIME   RFC 3339 or Unix ms (default: everything)\n"
           "  --format lp|csv     line protocol (default) or CSV tenant,device,metric,time,value\n"
           "  --device-tag NAME   the server's device tag, for CSV (default device)\n"
           "  --output FILE       write to FILE instead of stdout\n\n"
           "Progress goes to stderr when it is a terminal. Exit codes: 0 success, 1 server,\n"
           "connection or file error, 2 usage error.\n");
}

struct exp {
    FILE *out;
    int csv;
    const char *tenant, *device_tag;
    bdb_buf line, row;
    long long lines, bytes, bad;
    int64_t next_progress, t0;
    int tty, write_failed;
    int cut; /* the server ended the stream with its error marker */
};

static void progress(struct exp *e, int final)
{
    if (!e->tty)
        return;
    int64_t now = bdb_monotonic_ms();
    if (!final && now < e->next_progress)
        return;
    e->next_progress = now + 500;
    double s = (double)(now - e->t0) / 1000;
    fprintf(stderr, "\r  exported %lld lines, %.1f MB, %.0f lines/s%s", e->lines,
            (double)e->bytes / 1e6, s > 0 ? (double)e->lines / s : 0, final ? "\n" : "   ");
}

static void emit_line(struct exp *e, const char *p, size_t n)
{
    if (n == 0)
        return;
    size_t ml = sizeof XFER_EXPORT_ERROR_MARK - 1;
    if (n >= ml && !memcmp(p, XFER_EXPORT_ERROR_MARK, ml)) {
        /* kept in a line-protocol file too, so that importing it fails as well */
        fprintf(stderr, "bucketdb export: the server could not complete the export: %.*s\n",
                (int)(n - ml), p + ml);
        e->cut = 1;
        if (!e->csv && (fwrite(p, 1, n, e->out) != n || fputc('\n', e->out) == EOF))
            e->write_failed = 1;
        return;
    }
    e->lines++;
    if (!e->csv) {
        if (fwrite(p, 1, n, e->out) != n || fputc('\n', e->out) == EOF)
            e->write_failed = 1;
        return;
    }
    xfer_point pt;
    if (xfer_lp_parse(p, n, e->device_tag, &pt) != 0) {
        e->bad++;
        return;
    }
    bdb_buf_reset(&e->row);
    xfer_csv_field(&e->row, e->tenant, strlen(e->tenant));
    bdb_buf_putc(&e->row, ',');
    xfer_csv_field(&e->row, pt.device, strlen(pt.device));
    bdb_buf_putc(&e->row, ',');
    xfer_csv_field(&e->row, pt.metric, strlen(pt.metric));
    bdb_buf_printf(&e->row, ",%lld,", (long long)pt.time_ms);
    bdb_buf_double(&e->row, pt.value);
    bdb_buf_putc(&e->row, '\n');
    if (fwrite(e->row.data, 1, e->row.len, e->out) != e->row.len)
        e->write_failed = 1;
}

static int sink(void *ctx, const char *data, size_t len)
{
    struct exp *e = ctx;
    e->bytes += (long long)len;
    while (len) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (e->line.len) {
            bdb_buf_append(&e->line, data, take);
            if (nl) {
                emit_line(e, (char *)e->line.data, e->line.len);
                bdb_buf_reset(&e->line);
            }
        } else if (nl) {
            emit_line(e, data, take);
        } else {
            bdb_buf_append(&e->line, data, take);
        }
        data += take + (nl ? 1 : 0);
        len -= take + (nl ? 1 : 0);
    }
    progress(e, 0);
    return e->write_failed;
}

static void param(bdb_buf *b, const char *k, const char *v)
{
    if (!v)
        return;
    bdb_buf_putc(b, b->data && memchr(b->data, '?', b->len) ? '&' : '?');
    bdb_buf_puts(b, k);
    bdb_buf_putc(b, '=');
    cli_url_escape(b, v);
}

int cmd_export(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:8086", *token = getenv("BUCKETDB_TOKEN"),
               *tenants = NULL, *device = NULL, *metric = NULL, *from = NULL, *to = NULL,
               *format = "lp", *output = NULL, *device_tag = "device";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        }
        if (!strcmp(a, "--server"))
            dst = &server;
        else if (!strcmp(a, "--token"))
            dst = &token;
        else if (!strcmp(a, "--tenant"))
            dst = &tenants;
        else if (!strcmp(a, "--device"))
            dst = &device;
        else if (!strcmp(a, "--metric"))
            dst = &metric;
        else if (!strcmp(a, "--from"))
            dst = &from;
        else if (!strcmp(a, "--to"))
            dst = &to;
        else if (!strcmp(a, "--format"))
            dst = &format;
        else if (!strcmp(a, "--output"))
            dst = &output;
        else if (!strcmp(a, "--device-tag"))
            dst = &device_tag;
        if (!dst) {
            fprintf(stderr, "bucketdb export: unknown option '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb export: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        *dst = argv[++i];
    }
    if (strcmp(format, "lp") && strcmp(format, "csv")) {
        fprintf(stderr, "bucketdb export: --format '%s': use lp or csv\n", format);
        return BDB_EXIT_USAGE;
    }
    cli_conn c;
    if (cli_conn_init(&c, server, 120) != 0) {
        fprintf(stderr, "bucketdb export: %s\n", c.err);
        return BDB_EXIT_USAGE;
    }
    struct exp e = {.csv = !strcmp(format, "csv"), .device_tag = device_tag};
    e.out = output ? fopen(output, "w") : stdout;
    if (!e.out) {
        fprintf(stderr, "bucketdb export: cannot create %s\n", output);
        return BDB_EXIT_FAIL;
    }
    e.tty = isatty(2);
    e.t0 = bdb_monotonic_ms();
    bdb_buf_init(&e.line);
    bdb_buf_init(&e.row);
    if (e.csv)
        fputs("tenant,device,metric,time,value\n", e.out);
    char *list = strdup(tenants ? tenants : "");
    int rc = BDB_EXIT_OK, several = tenants && strchr(tenants, ',');
    char *sv, *t = strtok_r(list, ",", &sv);
    do {
        e.tenant = t ? t : "";
        bdb_buf path;
        bdb_buf_init(&path);
        bdb_buf_puts(&path, "/api/v1/export");
        param(&path, "tenant", t);
        param(&path, "device", device);
        param(&path, "metric", metric);
        param(&path, "from", from);
        param(&path, "to", to);
        bdb_buf_putc(&path, 0);
        if (!e.csv && (several || t))
            fprintf(e.out, "# tenant: %s\n", e.tenant);
        cli_resp r;
        cli_resp_init(&r);
        int hrc =
            cli_conn_request(&c, "GET", (char *)path.data, token, NULL, NULL, 0, sink, &e, &r);
        if (e.line.len) { /* a last line without a newline */
            emit_line(&e, (char *)e.line.data, e.line.len);
            bdb_buf_reset(&e.line);
        }
        if (hrc != 0) {
            fprintf(stderr, "bucketdb export: %s\n", c.err);
            rc = BDB_EXIT_FAIL;
        } else if (r.status != 200) {
            fprintf(stderr, "bucketdb export: tenant %s: HTTP %d %.*s\n",
                    *e.tenant ? e.tenant : "(default)", r.status, (int)r.body.len,
                    (char *)r.body.data);
            rc = BDB_EXIT_FAIL;
        }
        if (e.cut)
            rc = BDB_EXIT_FAIL;
        cli_resp_free(&r);
        bdb_buf_free(&path);
        if (e.write_failed)
            break;
    } while (rc == BDB_EXIT_OK && (t = strtok_r(NULL, ",", &sv)) != NULL);
    cli_conn_close(&c);
    free(list);
    progress(&e, 1);
    if (fflush(e.out) != 0 || e.write_failed) {
        fprintf(stderr, "bucketdb export: writing %s failed\n", output ? output : "stdout");
        rc = BDB_EXIT_FAIL;
    }
    if (output && fclose(e.out) != 0)
        rc = BDB_EXIT_FAIL;
    if (e.bad) {
        fprintf(stderr, "bucketdb export: %lld line(s) could not be converted to CSV\n", e.bad);
        rc = BDB_EXIT_FAIL;
    }
    if (output || e.tty)
        fprintf(stderr, "bucketdb export: %lld samples%s%s\n", e.lines, output ? " to " : "",
                output ? output : "");
    bdb_buf_free(&e.line);
    bdb_buf_free(&e.row);
    return rc;
}
