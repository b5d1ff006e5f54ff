/* query: reads from a running server over HTTP (the data directory is locked by the
 * server, and going through the API keeps one code path for every reader). */
#include "cli/cli.h"
#include "cli/http_client.h"

#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
    printf("usage: bucketdb query --device ID [options]\n"
           "       bucketdb query --devices [options]\n"
           "       bucketdb query --export [options]\n\n"
           "Reads from a running server.\n\n"
           "  --server URL      server address (default http://127.0.0.1:8086)\n"
           "  --tenant NAME     tenant (default: the server's default tenant)\n"
           "  --token TOKEN     token, when the server requires one\n"
           "  --device ID       device to read\n"
           "  --metric LIST     comma-separated metric names (default: all)\n"
           "  --from TIME       RFC 3339 or Unix ms (default: 1 hour ago)\n"
           "  --to TIME         RFC 3339 or Unix ms (default: now)\n"
           "  --limit N         at most N samples\n"
           "  --order asc|desc  time order (default asc)\n"
           "  --format json|csv output format (default json)\n"
           "  --devices         list the tenant's devices instead\n"
           "  --export          stream samples as line protocol instead\n\n"
           "Exit codes: 0 success, 1 server or connection error, 2 usage error.\n");
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

int cmd_query(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:8086", *tenant = NULL, *token = NULL, *device = NULL,
               *metric = NULL, *from = NULL, *to = NULL, *limit = NULL, *order = NULL,
               *format = NULL;
    int devices = 0, export = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        } else if (!strcmp(a, "--devices")) {
            devices = 1;
            continue;
        } else if (!strcmp(a, "--export")) {
            export = 1;
            continue;
        } else if (!strcmp(a, "--server"))
            dst = &server;
        else if (!strcmp(a, "--tenant"))
            dst = &tenant;
        else if (!strcmp(a, "--token"))
            dst = &token;
        else if (!strcmp(a, "--device"))
            dst = &device;
        else if (!strcmp(a, "--metric"))
            dst = &metric;
        else if (!strcmp(a, "--from"))
            dst = &from;
        else if (!strcmp(a, "--to"))
            dst = &to;
        else if (!strcmp(a, "--limit"))
            dst = &limit;
        else if (!strcmp(a, "--order"))
            dst = &order;
        else if (!strcmp(a, "--format"))
            dst = &format;
        if (!dst) {
            fprintf(stderr, "bucketdb query: unknown option '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb query: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        *dst = argv[++i];
    }
    if (!token)
        token = getenv("BUCKETDB_TOKEN");
    bdb_buf path;
    bdb_buf_init(&path);
    if (devices) {
        bdb_buf_puts(&path, "/api/v1/devices");
    } else if (export) {
        bdb_buf_puts(&path, "/api/v1/export");
        param(&path, "device", device);
    } else {
        if (!device) {
            fprintf(stderr, "bucketdb query: --device is required (or --devices, --export)\n");
            return BDB_EXIT_USAGE;
        }
        bdb_buf_puts(&path, "/api/v1/query");
        param(&path, "device", device);
        param(&path, "limit", limit);
        param(&path, "order", order);
        param(&path, "format", format);
    }
    param(&path, "tenant", tenant);
    if (!devices) {
        param(&path, "metric", metric);
        param(&path, "from", from);
        param(&path, "to", to);
    }
    bdb_buf_putc(&path, 0);
    int rc = cli_http("query", server, "GET", (const char *)path.data, token, NULL);
    bdb_buf_free(&path);
    return rc;
}
