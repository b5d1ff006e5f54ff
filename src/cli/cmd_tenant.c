/* tenant: manages the tenant registry of a running server through the admin API
 * (docs/TENANCY.md), with the admin token (--admin-token or $BUCKETDB_ADMIN_TOKEN;
 * the server keeps it in <data>/token). */
#include "cli/cli.h"
#include "cli/http_client.h"

#include "common/buf.h"
#include "server/tenants/tenants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(void)
{
    printf("usage: bucketdb tenant create NAME [quota options]\n"
           "       bucketdb tenant list\n"
           "       bucketdb tenant show NAME\n"
           "       bucketdb tenant update NAME [quota options]\n"
           "       bucketdb tenant delete NAME\n"
           "       bucketdb tenant rotate-token NAME\n\n"
           "Manages the tenants of a running server through its admin API.\n"
           "create and rotate-token print the tenant's token: it is shown only once.\n"
           "show prints the quotas and the usage beside them (devices, storage bytes).\n\n"
           "  --server URL              server address (default http://127.0.0.1:8086)\n"
           "  --admin-token TOKEN       the admin token (default $BUCKETDB_ADMIN_TOKEN; the\n"
           "                            server keeps it in <data>/token)\n\n"
           "quota options (0 = no limit):\n"
           "  --writes-per-second N     samples per second (token bucket)\n"
           "  --burst N                 samples the bucket holds (default 10 x the rate)\n"
           "  --max-devices N           devices the tenant may have\n"
           "  --storage-bytes N         bytes the tenant may store (block files + unflushed)\n"
           "  --retention DURATION      raw-data TTL, e.g. 90d; 0 = the server's retention_ms\n"
           "  --hot-threshold N         reports per partition per minute above which it is\n"
           "                            hot (0 = the server's hot_threshold)\n"
           "  --hot-policy NAME         none, subbucket, ratelimit, sample or default\n"
           "  --hot-subbuckets N        subbucket: sub-buckets of a hot device, 2..64\n"
           "  --hot-rate-limit N        ratelimit: reports kept per minute while hot\n"
           "  --hot-sample F            sample: fraction kept while hot, e.g. 0.1\n"
           "  --tier-retention-1m D     keep 1-minute rollups D (e.g. 2d); also -1h, -1d;\n"
           "                            default = the server's, forever = keep\n"
           "  --device-rule RULE        tags naming a device, e.g. host+device,host; \"\" =\n"
           "                            the server's device_rule (docs/API.md#mapping-rule)\n\n"
           "Exit codes: 0 success, 1 server or connection error, 2 usage error.\n");
}

static int all_digits(const char *v)
{
    if (!*v)
        return 0;
    for (; *v; v++)
        if (*v < '0' || *v > '9')
            return 0;
    return 1;
}

int cmd_tenant(int argc, char **argv)
{
    const char *server = "http://127.0.0.1:8086", *token = NULL;
    const char *quota_names[4] = {"writes_per_second", "burst", "max_devices", "storage_bytes"};
    const char *quota_flags[4] = {"--writes-per-second", "--burst", "--max-devices",
                                  "--storage-bytes"};
    const char *quota_vals[4] = {NULL, NULL, NULL, NULL};
    const char *retention = NULL, *device_rule = NULL;
    /* hot partition settings (docs/TENANCY.md#hot-partitions) */
    const char *hot_names[5] = {"threshold", "policy", "subbuckets", "rate_limit", "sample"};
    const char *hot_flags[5] = {"--hot-threshold", "--hot-policy", "--hot-subbuckets",
                                "--hot-rate-limit", "--hot-sample"};
    const char *hot_vals[5] = {NULL, NULL, NULL, NULL, NULL};
    /* rollup tier TTL (docs/TENANCY.md) */
    const char *tier_names[3] = {"1m", "1h", "1d"};
    const char *tier_flags[3] = {"--tier-retention-1m", "--tier-retention-1h",
                                 "--tier-retention-1d"};
    const char *tier_vals[3] = {NULL, NULL, NULL};
    const char *pos[3] = {NULL, NULL, NULL};
    size_t npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (npos == 2) {
                fprintf(stderr, "bucketdb tenant: unexpected argument '%s' (see --help)\n", a);
                return BDB_EXIT_USAGE;
            }
            pos[npos++] = a;
            continue;
        }
        const char **dst = NULL;
        if (!strcmp(a, "--server"))
            dst = &server;
        else if (!strcmp(a, "--admin-token"))
            dst = &token;
        else if (!strcmp(a, "--retention"))
            dst = &retention;
        else if (!strcmp(a, "--device-rule"))
            dst = &device_rule;
        for (int q = 0; q < 4 && !dst; q++)
            if (!strcmp(a, quota_flags[q]))
                dst = &quota_vals[q];
        for (int k = 0; k < 5 && !dst; k++)
            if (!strcmp(a, hot_flags[k]))
                dst = &hot_vals[k];
        for (int k = 0; k < 3 && !dst; k++)
            if (!strcmp(a, tier_flags[k]))
                dst = &tier_vals[k];
        if (!dst) {
            fprintf(stderr, "bucketdb tenant: unknown option '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb tenant: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        *dst = argv[++i];
    }
    const char *verb = pos[0], *name = pos[1];
    if (!verb) {
        fprintf(stderr, "bucketdb tenant: missing subcommand (create, list, show, update, "
                        "delete, rotate-token; see --help)\n");
        return BDB_EXIT_USAGE;
    }
    int is_create = !strcmp(verb, "create"), is_update = !strcmp(verb, "update");
    int is_list = !strcmp(verb, "list");
    if (!is_create && !is_update && !is_list && strcmp(verb, "show") && strcmp(verb, "delete") &&
        strcmp(verb, "rotate-token")) {
        fprintf(stderr, "bucketdb tenant: unknown subcommand '%s' (see --help)\n", verb);
        return BDB_EXIT_USAGE;
    }
    if (is_list ? name != NULL : name == NULL) {
        fprintf(stderr, "bucketdb tenant %s: %s\n", verb,
                is_list ? "takes no tenant name" : "needs a tenant name");
        return BDB_EXIT_USAGE;
    }
    if (name && !bdb_tenant_name_valid(name)) {
        fprintf(stderr,
                "bucketdb tenant: invalid tenant name '%s': use 1..128 characters of "
                "A-Z a-z 0-9 _ - .\n",
                name);
        return BDB_EXIT_USAGE;
    }
    char why[300];
    if (is_create && bdb_tenant_name_registrable(name, NULL, why, sizeof why) != 0) {
        /* The server also refuses its own default_tenant, which the CLI cannot know. */
        fprintf(stderr, "bucketdb tenant create: %s\n", why);
        return BDB_EXIT_USAGE;
    }
    int has_settings = retention != NULL;
    for (int q = 0; q < 4; q++) {
        if (!quota_vals[q])
            continue;
        has_settings = 1;
        if (!all_digits(quota_vals[q])) {
            fprintf(stderr, "bucketdb tenant: %s must be a non-negative integer\n", quota_flags[q]);
            return BDB_EXIT_USAGE;
        }
    }
    int has_hot = 0;
    for (int k = 0; k < 5; k++) {
        if (!hot_vals[k])
            continue;
        has_settings = has_hot = 1;
        /* the server checks ranges; here only what keeps the JSON body well-formed */
        const char *ok = k == 1   ? "abcdefghijklmnopqrstuvwxyz"
                         : k == 4 ? "0123456789."
                                  : "0123456789";
        if (!*hot_vals[k] || strspn(hot_vals[k], ok) != strlen(hot_vals[k])) {
            fprintf(stderr, "bucketdb tenant: %s: invalid value '%s'\n", hot_flags[k], hot_vals[k]);
            return BDB_EXIT_USAGE;
        }
    }
    int has_tier = 0;
    for (int k = 0; k < 3; k++) {
        if (!tier_vals[k])
            continue;
        has_settings = has_tier = 1;
        /* a duration, default or forever: checked by the server; here JSON-safe only */
        const char *ok = "0123456789abcdefghijklmnopqrstuvwxyz";
        if (!*tier_vals[k] || strspn(tier_vals[k], ok) != strlen(tier_vals[k])) {
            fprintf(stderr, "bucketdb tenant: %s: invalid value '%s'\n", tier_flags[k],
                    tier_vals[k]);
            return BDB_EXIT_USAGE;
        }
    }
    if (device_rule)
        has_settings = 1; /* checked by the server, sent JSON-escaped */
    if (has_settings && !is_create && !is_update) {
        fprintf(stderr, "bucketdb tenant %s: quota options apply to create and update only\n",
                verb);
        return BDB_EXIT_USAGE;
    }
    if (is_update && !has_settings) {
        fprintf(stderr, "bucketdb tenant update: nothing to change (give a quota or hot option)\n");
        return BDB_EXIT_USAGE;
    }
    if (!token || !*token)
        token = getenv("BUCKETDB_ADMIN_TOKEN");
    if (!token || !*token) {
        fprintf(stderr, "bucketdb tenant: needs the admin token: --admin-token TOKEN or "
                        "BUCKETDB_ADMIN_TOKEN (the server keeps it in <data>/token)\n");
        return BDB_EXIT_USAGE;
    }
    if (strpbrk(token, "\r\n")) {
        fprintf(stderr, "bucketdb tenant: the admin token must be one line\n");
        return BDB_EXIT_USAGE;
    }
    bdb_buf path, body;
    bdb_buf_init(&path);
    bdb_buf_init(&body);
    bdb_buf_puts(&path, "/api/v1/admin/tenants");
    if (name)
        bdb_buf_printf(&path, "/%s", name);
    const char *method = "GET";
    if (is_create || is_update) {
        method = is_create ? "POST" : "PATCH";
        bdb_buf_putc(&body, '{');
        if (is_create)
            bdb_buf_printf(&body, "\"name\":\"%s\",", name); /* validated: no escaping */
        bdb_buf_puts(&body, "\"quotas\":{");
        int first = 1;
        for (int q = 0; q < 4; q++) {
            if (!quota_vals[q])
                continue;
            bdb_buf_printf(&body, "%s\"%s\":%s", first ? "" : ",", quota_names[q], quota_vals[q]);
            first = 0;
        }
        bdb_buf_putc(&body, '}');
        if (has_hot) {
            bdb_buf_puts(&body, ",\"hot\":{");
            for (int k = 0, n = 0; k < 5; k++) {
                if (!hot_vals[k])
                    continue;
                bdb_buf_printf(&body, k == 1 ? "%s\"%s\":\"%s\"" : "%s\"%s\":%s", n++ ? "," : "",
                               hot_names[k], hot_vals[k]);
            }
            bdb_buf_putc(&body, '}');
        }
        if (has_tier) {
            bdb_buf_puts(&body, ",\"tier_retention\":{");
            for (int k = 0, n = 0; k < 3; k++)
                if (tier_vals[k])
                    bdb_buf_printf(&body, "%s\"%s\":\"%s\"", n++ ? "," : "", tier_names[k],
                                   tier_vals[k]);
            bdb_buf_putc(&body, '}');
        }
        if (device_rule) {
            bdb_buf_puts(&body, ",\"device_rule\":\"");
            bdb_buf_json_str(&body, device_rule, strlen(device_rule));
            bdb_buf_putc(&body, '"');
        }
        if (retention) {
            bdb_buf_puts(&body, ",\"retention_ms\":\"");
            bdb_buf_json_str(&body, retention, strlen(retention));
            bdb_buf_putc(&body, '"');
        }
        bdb_buf_putc(&body, '}');
        bdb_buf_putc(&body, 0);
        if (is_create)
            bdb_buf_reset(&path), bdb_buf_puts(&path, "/api/v1/admin/tenants");
    } else if (!strcmp(verb, "delete")) {
        method = "DELETE";
    } else if (!strcmp(verb, "rotate-token")) {
        method = "POST";
        bdb_buf_puts(&path, "/token");
    }
    bdb_buf_putc(&path, 0);
    int rc = cli_http("tenant", server, method, (const char *)path.data, token,
                      body.len ? (const char *)body.data : NULL);
    if (rc == BDB_EXIT_OK && (is_create || !strcmp(verb, "rotate-token")))
        fprintf(stderr, "bucketdb tenant: the token above is shown only once; store it now\n");
    if (rc == BDB_EXIT_OK && !strcmp(verb, "delete"))
        printf("tenant '%s' deleted (its data can no longer be read; its token no longer "
               "works)\n",
               name);
    bdb_buf_free(&path);
    bdb_buf_free(&body);
    return rc;
}
