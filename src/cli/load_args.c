/* load_args: the flags of `bucketdb load`, split from cmd_load.c so that file keeps
 * one job (driving the fleet). */
#include "cli/load_args.h"

#include "common/timeutil.h"
#include "server/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf(
        "usage: bucketdb load [options]\n\n"
        "Simulates a device fleet writing line protocol to a running server over HTTP,\n"
        "or publishing it to an MQTT broker the server subscribes to.\n\n"
        "  --server URL          server (default http://127.0.0.1:8086)\n"
        "  --mqtt HOST:PORT      publish to this broker instead (MQTT 5, QoS 1): one message\n"
        "                        per report on bucketdb/TENANT/DEVICE/telemetry (TENANT is\n"
        "                        'default' without --tenant/--tenants), line protocol with\n"
        "                        ns times; a report counts as stored when the broker\n"
        "                        acknowledged it\n"
        "  --mqtt-user NAME, --mqtt-password PW   ($BUCKETDB_MQTT_PASSWORD)\n"
        "  --token TOKEN         token for writes ($BUCKETDB_TOKEN)\n"
        "  --tenant NAME         write to this tenant (default: the server's default tenant)\n"
        "  --tenants N           simulate N tenants PREFIX-1..PREFIX-N instead; with an admin\n"
        "                        token each is registered and writes with its own token\n"
        "  --tenant-prefix P     (default load)\n"
        "  --admin-token TOKEN   ($BUCKETDB_ADMIN_TOKEN) to register --tenants\n"
        "  --devices N           devices per tenant (10)\n"
        "  --metrics N           metrics per report, 1..64 (4)\n"
        "  --interval DUR        time between two reports of a device (10s)\n"
        "  --duration DUR        event time covered; with --live, wall time (10m)\n"
        "  --samples N           stop after N samples instead of --duration\n"
        "  --hot N               hot devices per tenant (0); they report --hot-factor x as often\n"
        "  --hot-factor F        (10)\n"
        "  --late F              share of reports delivered late, after newer ones (0)\n"
        "  --out-of-order F      share of reports sent after the device's next one (0)\n"
        "  --states LIST         device states (running,idle,fault); 'none' for none\n"
        "  --state-change P      chance that a device changes state at a report (0.02)\n"
        "  --seed N              random seed (1); the same flags store the same data\n"
        "  --end TIME            back-fill up to TIME (RFC 3339 or Unix ms; default now), so\n"
        "                        two runs with the same seed store identical samples\n"
        "  --batch N             reports per request (1000)\n"
        "  --connections N       keep-alive connections (or MQTT clients), one thread each (2)\n"
        "  --live                send in real time: each report at its own time\n"
        "  --max-seconds S       stop after S seconds of wall time (600)\n"
        "  --json                print the summary as JSON\n\n"
        "Progress is shown when stdout is a terminal. Exit codes: 0 every report was\n"
        "stored, 1 some were refused or a request failed, 2 usage error.\n");
}

/* ------------------------------------------------------------------ flags */

static int parse_ll(const char *flag, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "bucketdb load: %s '%s': want an integer from %lld to %lld\n", flag, v, lo,
                hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_share(const char *flag, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (end != v && *end == '%' && !end[1])
        x /= 100, end++;
    if (end == v || *end || !(x >= 0 && x <= 1)) {
        fprintf(stderr, "bucketdb load: %s '%s': want a share from 0 to 1 (or 0%%..100%%)\n", flag,
                v);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_dur(const char *flag, const char *v, int64_t *out)
{
    if (bdb_config_parse_duration(v, out) != 0 || *out <= 0) {
        fprintf(stderr, "bucketdb load: %s '%s': want a duration > 0 such as 500ms, 10s, 5m\n",
                flag, v);
        return -1;
    }
    return 0;
}

int load_parse_args(int argc, char **argv, struct load_opts *o)
{
    *o = (struct load_opts){.server = "http://127.0.0.1:8086",
                            .token = getenv("BUCKETDB_TOKEN"),
                            .admin_token = getenv("BUCKETDB_ADMIN_TOKEN"),
                            .mqtt_pass = getenv("BUCKETDB_MQTT_PASSWORD"),
                            .prefix = "load",
                            .states = "running,idle,fault",
                            .tenants = 0,
                            .devices = 10,
                            .metrics = 4,
                            .batch = 1000,
                            .conns = 2,
                            .hot_factor = 10,
                            .state_change = 0.02,
                            .interval_ms = 10000,
                            .duration_ms = 600000,
                            .max_ms = 600000,
                            .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 1;
        }
        if (!strcmp(a, "--live") || !strcmp(a, "--json")) {
            *(a[2] == 'l' ? &o->live : &o->json) = 1;
            continue;
        }
        if (i + 1 >= argc || strncmp(a, "--", 2)) {
            fprintf(stderr, "bucketdb load: %s (see --help)\n",
                    strncmp(a, "--", 2) ? "unexpected argument" : "option needs a value");
            return -1;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--server"))
            o->server = v;
        else if (!strcmp(a, "--token"))
            o->token = v;
        else if (!strcmp(a, "--admin-token"))
            o->admin_token = v;
        else if (!strcmp(a, "--tenant"))
            o->tenant = v;
        else if (!strcmp(a, "--tenant-prefix"))
            o->prefix = v;
        else if (!strcmp(a, "--states"))
            o->states = v;
        else if (!strcmp(a, "--mqtt"))
            o->mqtt = v;
        else if (!strcmp(a, "--mqtt-user"))
            o->mqtt_user = v;
        else if (!strcmp(a, "--mqtt-password"))
            o->mqtt_pass = v;
        else if (!strcmp(a, "--tenants"))
            rc = parse_ll(a, v, 1, LOAD_MAX_TENANTS, &x), o->tenants = (long)x;
        else if (!strcmp(a, "--devices"))
            rc = parse_ll(a, v, 1, 10000000, &x), o->devices = (long)x;
        else if (!strcmp(a, "--metrics"))
            rc = parse_ll(a, v, 1, 64, &x), o->metrics = (long)x;
        else if (!strcmp(a, "--hot"))
            rc = parse_ll(a, v, 0, 10000000, &x), o->hot = (long)x;
        else if (!strcmp(a, "--batch"))
            rc = parse_ll(a, v, 1, 1000000, &x), o->batch = (long)x;
        else if (!strcmp(a, "--connections"))
            rc = parse_ll(a, v, 1, 64, &x), o->conns = (long)x;
        else if (!strcmp(a, "--samples"))
            rc = parse_ll(a, v, 1, 1000000000000LL, &o->samples);
        else if (!strcmp(a, "--seed"))
            rc = parse_ll(a, v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(a, "--max-seconds"))
            rc = parse_ll(a, v, 1, 86400, &x), o->max_ms = x * 1000;
        else if (!strcmp(a, "--hot-factor"))
            rc = parse_ll(a, v, 2, 1000, &x), o->hot_factor = (double)x;
        else if (!strcmp(a, "--late"))
            rc = parse_share(a, v, &o->late);
        else if (!strcmp(a, "--out-of-order"))
            rc = parse_share(a, v, &o->ooo);
        else if (!strcmp(a, "--state-change"))
            rc = parse_share(a, v, &o->state_change);
        else if (!strcmp(a, "--interval"))
            rc = parse_dur(a, v, &o->interval_ms);
        else if (!strcmp(a, "--duration"))
            rc = parse_dur(a, v, &o->duration_ms);
        else if (!strcmp(a, "--end")) {
            if (bdb_parse_time_ms(v, &o->end_ms) != 0) {
                fprintf(stderr, "bucketdb load: --end '%s': want RFC 3339 or Unix ms\n", v);
                rc = -1;
            }
        } else {
            fprintf(stderr, "bucketdb load: unknown option '%s' (see --help)\n", a);
            return -1;
        }
        if (rc)
            return -1;
    }
    if (o->hot > o->devices) {
        fprintf(stderr, "bucketdb load: --hot %ld is more than --devices %ld\n", o->hot,
                o->devices);
        return -1;
    }
    if (o->late + o->ooo > 1) {
        fprintf(stderr, "bucketdb load: --late plus --out-of-order is more than 1\n");
        return -1;
    }
    if (o->interval_ms < o->hot_factor && o->hot) {
        fprintf(stderr, "bucketdb load: --interval is too short for --hot-factor\n");
        return -1;
    }
    if (o->tenants && o->tenant) {
        fprintf(stderr, "bucketdb load: use --tenant or --tenants, not both\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ report */
