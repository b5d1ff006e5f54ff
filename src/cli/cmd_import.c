/* import: writes a line-protocol or CSV file (or stdin) into a running server in
 * chunks, so memory stays bounded by one chunk whatever the file size. Line protocol
 * goes to POST /write as it is (following "# tenant: NAME" lines from export); CSV
 * rows become JSON reports for POST /api/v1/write/json, which keeps metric names
 * exactly (line protocol would turn a bare "pressure" into "pressure.value").
 *
 * Migrating an embedded data directory into a Cassandra-backed server is export from
 * a server on that directory piped into import against the new one: import has no
 * backend-specific path (docs/OPERATIONS.md#migrating-to-cassandra). */
#include "cli/cli.h"
#include "cli/http_client.h"
#include "cli/http_conn.h"
#include "cli/xfer.h"

#include "common/buf.h"
#include "common/timeutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RETRIES 5
#define MAX_LINE (1u << 20)

static void help(void)
{
    printf("usage: bucketdb import [options] [FILE]\n\n"
           "Writes line protocol or CSV (tenant,device,metric,time,value; time in Unix ms)\n"
           "from FILE or stdin into a running server, in chunks.\n\n"
           "  --server URL        server (default http://127.0.0.1:8086)\n"
           "  --token TOKEN       token ($BUCKETDB_TOKEN); the admin token for several tenants\n"
           "  --tenant NAME       write everything to NAME (default: the tenant named in the\n"
           "                      file, else the server's default)\n"
           "  --format lp|csv     default: csv if the file name ends in .csv, else lp\n"
           "  --precision P       line-protocol timestamps: ns (default), u, ms, s\n"
           "  --chunk-bytes N     request size (default 1048576)\n\n"
           "Progress goes to stderr when it is a terminal. Exit codes: 0 every line stored,\n"
           "1 some lines refused or a server, connection or file error, 2 usage error.\n");
}

struct imp {
    cli_conn c;
    const char *token, *precision, *forced_tenant;
    int csv, tty;
    char tenant[130]; /* current tenant from the file, "" = default */
    bdb_buf chunk;
    long chunk_lines;
    size_t chunk_bytes;
    long long lines, stored, rejected, requests, retries;
    int failed;
    int64_t t0, next_progress;
    char first_error[400];
};

static void progress(struct imp *m, int final)
{
    if (!m->tty)
        return;
    int64_t now = bdb_monotonic_ms();
    if (!final && now < m->next_progress)
        return;
    m->next_progress = now + 500;
    double s = (double)(now - m->t0) / 1000;
    fprintf(stderr, "\r  imported %lld lines, %lld refused, %.0f lines/s%s", m->stored, m->rejected,
            s > 0 ? (double)m->stored / s : 0, final ? "\n" : "   ");
}

static void flush_chunk(struct imp *m)
{
    if (m->chunk_lines == 0)
        return;
    const char *tenant = m->forced_tenant ? m->forced_tenant : m->tenant;
    bdb_buf path;
    bdb_buf_init(&path);
    if (m->csv) {
        bdb_buf_puts(&m->chunk, "]}");
        bdb_buf_puts(&path, "/api/v1/write/json");
    } else {
        bdb_buf_puts(&path, "/write?precision=");
        cli_url_escape(&path, m->precision);
    }
    if (*tenant) {
        bdb_buf_puts(&path, m->csv ? "?db=" : "&db=");
        cli_url_escape(&path, tenant);
    }
    bdb_buf_putc(&path, 0);
    cli_resp r;
    cli_resp_init(&r);
    long accepted = 0;
    for (int attempt = 0;; attempt++) {
        m->requests++;
        if (cli_conn_request(&m->c, "POST", (char *)path.data, m->token,
                             m->csv ? "application/json" : "text/plain", m->chunk.data,
                             m->chunk.len, NULL, NULL, &r) != 0) {
            snprintf(m->first_error, sizeof m->first_error, "%s", m->c.err);
            m->failed = 1;
            break;
        }
        if (r.status == 204 || r.status == 200) {
            accepted = m->chunk_lines;
            break;
        }
        if ((r.status == 429 || r.status == 503) && attempt < MAX_RETRIES) {
            m->retries++;
            sleep((unsigned)(r.retry_after > 0 && r.retry_after < 5 ? r.retry_after : 1));
            continue;
        }
        if (!m->first_error[0])
            snprintf(m->first_error, sizeof m->first_error, "HTTP %d: %.*s", r.status,
                     (int)(r.body.len > 300 ? 300 : r.body.len), (char *)r.body.data);
        if (r.status == 400) { /* the good lines of a partial write are stored */
            json_t *j = json_loadb((char *)r.body.data, r.body.len, 0, NULL);
            json_t *a = json_object_get(j, "accepted");
            if (json_is_integer(a))
                accepted = (long)json_integer_value(a);
            json_decref(j);
        } else {
            m->failed = 1;
        }
        break;
    }
    m->stored += accepted;
    m->rejected += m->chunk_lines - accepted;
    cli_resp_free(&r);
    bdb_buf_free(&path);
    bdb_buf_reset(&m->chunk);
    m->chunk_lines = 0;
    progress(m, 0);
}

static void set_tenant(struct imp *m, const char *name)
{
    if (strcmp(name, m->tenant)) {
        flush_chunk(m);
        snprintf(m->tenant, sizeof m->tenant, "%s", name);
    }
}

static int add_csv(struct imp *m, char *row, long long lineno)
{
    char *f[6];
    int nf = xfer_csv_split(row, f, 6);
    if (nf == 5 && !strcmp(f[0], "tenant") && !strcmp(f[3], "time"))
        return 0; /* the header */
    char *end1, *end2;
    long long t = nf == 5 ? strtoll(f[3], &end1, 10) : 0;
    double v = nf == 5 ? strtod(f[4], &end2) : 0;
    if (nf != 5 || end1 == f[3] || *end1 || end2 == f[4] || *end2 || !*f[1] || !*f[2]) {
        fprintf(stderr,
                "bucketdb import: line %lld: want tenant,device,metric,time,value "
                "with time in Unix ms and a number\n",
                lineno);
        return -1;
    }
    set_tenant(m, f[0]);
    if (m->chunk_lines == 0)
        bdb_buf_puts(&m->chunk, "{\"reports\":[");
    else
        bdb_buf_putc(&m->chunk, ',');
    bdb_buf_puts(&m->chunk, "{\"device\":\"");
    bdb_buf_json_str(&m->chunk, f[1], strlen(f[1]));
    bdb_buf_printf(&m->chunk, "\",\"time\":%lld,\"metrics\":{\"", t);
    bdb_buf_json_str(&m->chunk, f[2], strlen(f[2]));
    bdb_buf_puts(&m->chunk, "\":");
    bdb_buf_double(&m->chunk, v);
    bdb_buf_puts(&m->chunk, "}}");
    m->chunk_lines++;
    return 0;
}

static int add_line(struct imp *m, char *line, size_t n, long long lineno)
{
    while (n && line[n - 1] == '\r')
        line[--n] = '\0';
    if (n == 0)
        return 0;
    if (!strncmp(line, XFER_EXPORT_ERROR_MARK, sizeof XFER_EXPORT_ERROR_MARK - 1)) {
        fprintf(stderr,
                "bucketdb import: line %lld: the export this file holds was cut short by the "
                "server (%s); export again\n",
                lineno, line + sizeof XFER_EXPORT_ERROR_MARK - 1);
        return -1;
    }
    if (line[0] == '#') {
        static const char mark[] = "# tenant: ";
        if (!strncmp(line, mark, sizeof mark - 1))
            set_tenant(m, line + sizeof mark - 1);
        return 0;
    }
    m->lines++;
    if (m->csv) {
        if (add_csv(m, line, lineno) != 0)
            return -1;
    } else {
        bdb_buf_append(&m->chunk, line, n);
        bdb_buf_putc(&m->chunk, '\n');
        m->chunk_lines++;
    }
    if (m->chunk.len >= m->chunk_bytes)
        flush_chunk(m);
    return 0;
}

int cmd_import(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:8086", *format = NULL, *file = NULL;
    struct imp *m = calloc(1, sizeof *m);
    m->token = getenv("BUCKETDB_TOKEN");
    m->precision = "ns";
    m->chunk_bytes = 1 << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            free(m);
            return BDB_EXIT_OK;
        }
        if (a[0] != '-' || !strcmp(a, "-")) {
            file = a;
            continue;
        }
        const char *chunk = NULL;
        if (!strcmp(a, "--server"))
            dst = &server;
        else if (!strcmp(a, "--token"))
            dst = &m->token;
        else if (!strcmp(a, "--tenant"))
            dst = &m->forced_tenant;
        else if (!strcmp(a, "--format"))
            dst = &format;
        else if (!strcmp(a, "--precision"))
            dst = &m->precision;
        else if (!strcmp(a, "--chunk-bytes"))
            dst = &chunk;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "bucketdb import: %s '%s' (see --help)\n",
                    dst ? "missing value for" : "unknown option", a);
            free(m);
            return BDB_EXIT_USAGE;
        }
        *dst = argv[++i];
        if (chunk) {
            char *end;
            long long v = strtoll(chunk, &end, 10);
            if (end == chunk || *end || v < 1024 || v > (64LL << 20)) {
                fprintf(stderr, "bucketdb import: --chunk-bytes '%s': want 1024 to 67108864\n",
                        chunk);
                free(m);
                return BDB_EXIT_USAGE;
            }
            m->chunk_bytes = (size_t)v;
        }
    }
    if (!format)
        format =
            file && strlen(file) > 4 && !strcmp(file + strlen(file) - 4, ".csv") ? "csv" : "lp";
    if (strcmp(format, "lp") && strcmp(format, "csv")) {
        fprintf(stderr, "bucketdb import: --format '%s': use lp or csv\n", format);
        free(m);
        return BDB_EXIT_USAGE;
    }
    m->csv = !strcmp(format, "csv");
    if (cli_conn_init(&m->c, server, 120) != 0) {
        fprintf(stderr, "bucketdb import: %s\n", m->c.err);
        free(m);
        return BDB_EXIT_USAGE;
    }
    FILE *in = file && strcmp(file, "-") ? fopen(file, "r") : stdin;
    if (!in) {
        fprintf(stderr, "bucketdb import: cannot open %s\n", file);
        free(m);
        return BDB_EXIT_FAIL;
    }
    m->tty = isatty(2);
    m->t0 = bdb_monotonic_ms();
    bdb_buf_init(&m->chunk);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    int rc = BDB_EXIT_OK;
    while (!m->failed && (n = getline(&line, &cap, in)) >= 0) {
        lineno++;
        if ((size_t)n > MAX_LINE) {
            fprintf(stderr, "bucketdb import: line %lld is longer than %u bytes\n", lineno,
                    MAX_LINE);
            rc = BDB_EXIT_FAIL;
            break;
        }
        if (n && line[n - 1] == '\n')
            line[--n] = '\0';
        if (add_line(m, line, (size_t)n, lineno) != 0) {
            rc = BDB_EXIT_FAIL;
            break;
        }
    }
    if (rc == BDB_EXIT_OK && ferror(in)) {
        fprintf(stderr, "bucketdb import: reading %s failed\n", file ? file : "stdin");
        rc = BDB_EXIT_FAIL;
    }
    if (rc == BDB_EXIT_OK)
        flush_chunk(m);
    progress(m, 1);
    free(line);
    if (in != stdin)
        fclose(in);
    cli_conn_close(&m->c);
    fprintf(stderr, "bucketdb import: %lld lines read, %lld stored, %lld refused, %lld requests\n",
            m->lines, m->stored, m->rejected, m->requests);
    if (m->first_error[0])
        fprintf(stderr, "bucketdb import: first error: %s\n", m->first_error);
    if (m->failed || m->rejected)
        rc = BDB_EXIT_FAIL;
    bdb_buf_free(&m->chunk);
    free(m);
    return rc;
}
