/* query: reads from a running server over HTTP (the data directory is locked by the
 * server, and going through the API keeps one code path for every reader): samples,
 * devices, an export, and the current state (/api/v1/state/...). */
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
           "       bucketdb query --devices [--limit N] [--cursor C] [options]\n"
           "       bucketdb query --export [options]\n"
           "       bucketdb query --latest --device ID [options]\n"
           "       bucketdb query --state STATE [--limit N] [--cursor C] [options]\n"
           "       bucketdb query --state-counts [options]\n"
           "       bucketdb query --fleet --metric M [--tag K:V]... [options]\n\n"
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
           "  --resolution R    raw | 1m | 1h | 1d | auto: aggregated windows from a rollup\n"
           "                    tier (auto picks one by the range; default raw)\n"
           "  --devices         list the tenant's devices instead, one page (--limit: page\n"
           "                    size, default 1000; --cursor: next_cursor of the previous\n"
           "                    page)\n"
           "  --export          stream samples as line protocol instead\n"
           "  --latest          the device's latest event and newest value per metric\n"
           "  --state STATE     devices in STATE now, in name order (--limit: page size,\n"
           "                    default 1000; --cursor: next_cursor of the previous page)\n"
           "  --state-counts    how many devices are in each state now\n"
           "  --fleet           fleet aggregates of --metric per window (--resolution 1h\n"
           "                    or 1d, default 1h): devices, readings, min, max, avg,\n"
           "                    stddev; pre-computed for the whole tenant, or with --tag\n"
           "                    computed over the devices with that tag (repeatable,\n"
           "                    all must match; 1m also allowed)\n"
           "  --tag K:V         device tag for --fleet\n\n"
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
               *format = NULL, *state = NULL, *cursor = NULL;
    const char *resolution = NULL; /* rollup */
    int devices = 0, export = 0, latest = 0, counts = 0;
    int fleet = 0; /* fleet: --fleet [--tag K:V]... */
    const char *tags[16];
    size_t ntags = 0;
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
        } else if (!strcmp(a, "--latest")) {
            latest = 1;
            continue;
        } else if (!strcmp(a, "--state-counts")) {
            counts = 1;
            continue;
        } else if (!strcmp(a, "--fleet")) {
            fleet = 1;
            continue;
        } else if (!strcmp(a, "--tag") && i + 1 < argc) {
            if (ntags == sizeof tags / sizeof tags[0]) {
                fprintf(stderr, "bucketdb query: at most 16 --tag options\n");
                return BDB_EXIT_USAGE;
            }
            tags[ntags++] = argv[++i];
            continue;
        } else if (!strcmp(a, "--state"))
            dst = &state;
        else if (!strcmp(a, "--cursor"))
            dst = &cursor;
        else if (!strcmp(a, "--server"))
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
        else if (!strcmp(a, "--resolution")) /* rollup */
            dst = &resolution;
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
    if (devices + export + latest + counts + fleet + (state != NULL) > 1) {
        fprintf(stderr, "bucketdb query: use only one of --devices, --export, --latest, "
                        "--state, --state-counts, --fleet\n");
        return BDB_EXIT_USAGE;
    }
    if ((ntags || fleet) && (!fleet || !metric)) {
        fprintf(stderr, "bucketdb query: --fleet needs --metric; --tag needs --fleet\n");
        return BDB_EXIT_USAGE;
    }
    bdb_buf path;
    bdb_buf_init(&path);
    int current = latest || counts || state;
    if (latest) {
        if (!device) {
            fprintf(stderr, "bucketdb query: --latest needs --device\n");
            bdb_buf_free(&path);
            return BDB_EXIT_USAGE;
        }
        bdb_buf_puts(&path, "/api/v1/state/latest");
        param(&path, "device", device);
    } else if (state) {
        bdb_buf_puts(&path, "/api/v1/state/devices");
        param(&path, "state", state);
        param(&path, "limit", limit);
        param(&path, "cursor", cursor);
    } else if (counts) {
        bdb_buf_puts(&path, "/api/v1/state/counts");
    } else if (fleet) {
        bdb_buf_puts(&path, ntags ? "/api/v1/fleet/query" : "/api/v1/fleet");
        for (size_t k = 0; k < ntags; k++)
            param(&path, "tag", tags[k]);
        param(&path, "format", format);
        param(&path, "resolution", resolution);
    } else if (devices) {
        bdb_buf_puts(&path, "/api/v1/devices");
        param(&path, "limit", limit);
        param(&path, "cursor", cursor);
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
        param(&path, "resolution", resolution); /* rollup */
    }
    param(&path, "tenant", tenant);
    if (!devices && !current) {
        param(&path, "metric", metric);
        param(&path, "from", from);
        param(&path, "to", to);
    }
    bdb_buf_putc(&path, 0);
    int rc = cli_http("query", server, "GET", (const char *)path.data, token, NULL);
    bdb_buf_free(&path);
    return rc;
}
