/* load: a fleet simulator (docs/OPERATIONS.md#simulating-a-fleet). Devices of one or
 * more tenants send line-protocol reports over keep-alive HTTP connections, either
 * back-filled as fast as the server takes them or in real time (--live), with hot
 * devices, late and out-of-order events and device states.
 *
 * Determinism: every device has its own random stream (seeded from --seed, its
 * tenant and its number) and is driven by exactly one connection thread in time
 * order, so the data a run stores depends only on the flags, never on the number of
 * connections or on scheduling. Only the interleaving of requests varies.
 *
 * Bounds: the number of reports is fixed by --duration or --samples before the run
 * starts, and --max-seconds stops a run by wall time; retries after 429/503 are
 * bounded too.
 *
 * --mqtt publishes the same reports to a broker instead (mqtt_pub.h), one QoS 1
 * message per report; a report counts as stored when the broker acknowledged it. */
#include "cli/cli.h"
#include "cli/http_client.h"
#include "cli/http_conn.h"
#include "cli/load_args.h"
#include "cli/mqtt_pub.h"
#include "ingest/mqtt/mqtt_codec.h"

#include "common/buf.h"
#include "common/timeutil.h"
#include "server/config.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_RETRIES 5

struct tenant {
    char name[130];
    char *token; /* NULL: none needed or the caller's --token */
    int named;   /* 0: the server's default tenant (no db parameter) */
    atomic_llong samples, devices_seen;
};

struct device {
    uint64_t rng;
    int tenant, hot, state, sent_state, site;
    char id[32];
    int64_t phase_ms;
    double *val;
    bdb_buf held; /* an out-of-order report waiting for the device's next one */
};

struct run {
    struct load_opts o;
    struct tenant *tenants;
    struct device *devs;
    size_t ndev;
    char **state_names;
    size_t nstates;
    int64_t start_ms, ticks, wall0, deadline;
    long long max_reports, per_tick, *prefix;
    atomic_llong reports, lines_ok, lines_rejected, requests, retries, errors;
    atomic_llong samples_ok, first_time, last_time, mqtt_sent, mqtt_refused;
    atomic_int stop;
    char first_error[512];
    pthread_mutex_t mu;
};

static const char *field_names[] = {"temp",    "humidity", "pressure", "voltage",
                                    "current", "rpm",      "battery",  "signal"};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) /* [0, 1) */
{
    return (double)(splitmix(s) >> 11) / 9007199254740992.0;
}

/* ------------------------------------------------------------------ generation */

static void put_line(struct run *r, struct device *d, int64_t ts, bdb_buf *out)
{
    bdb_buf_puts(out, "sim,device=");
    bdb_buf_puts(out, d->id);
    bdb_buf_printf(out, ",site=site-%d ", d->site);
    for (long m = 0; m < r->o.metrics; m++) {
        d->val[m] += (unit(&d->rng) - 0.5) * 0.4;
        if (m < 8)
            bdb_buf_printf(out, "%s%s=%.2f", m ? "," : "", field_names[m], d->val[m]);
        else
            bdb_buf_printf(out, ",m%ld=%.2f", m, d->val[m]);
    }
    if (r->nstates) {
        if (unit(&d->rng) < r->o.state_change)
            d->state =
                (d->state + 1 + (int)(splitmix(&d->rng) % (r->nstates > 1 ? r->nstates - 1 : 1))) %
                (int)r->nstates;
        if (d->state != d->sent_state) {
            bdb_buf_printf(out, ",state=\"%s\"", r->state_names[d->state]);
            d->sent_state = d->state;
        }
    }
    bdb_buf_printf(out, " %lld\n", (long long)ts);
}

static void note_time(struct run *r, int64_t ts)
{
    long long v = atomic_load(&r->first_time);
    while (ts < v && !atomic_compare_exchange_weak(&r->first_time, &v, ts))
        ;
    v = atomic_load(&r->last_time);
    while (ts > v && !atomic_compare_exchange_weak(&r->last_time, &v, ts))
        ;
}

/* ------------------------------------------------------------------ sending */

struct tbuf { /* one thread's pending lines for one tenant */
    bdb_buf lines, late;
    long nlines, nlate, flushes;
};

static void set_error(struct run *r, const char *fmt, const char *a, const char *b)
{
    pthread_mutex_lock(&r->mu);
    if (!r->first_error[0])
        snprintf(r->first_error, sizeof r->first_error, fmt, a, b);
    pthread_mutex_unlock(&r->mu);
}

static int past_deadline(struct run *r)
{
    return bdb_monotonic_ms() >= r->deadline;
}

struct link { /* one thread's way to the server */
    cli_conn c;
    cli_mqtt m; /* with --mqtt */
    char client_id[64];
};

static void count_stored(struct run *r, struct tenant *tn, long accepted, long rejected)
{
    atomic_fetch_add(&r->lines_ok, accepted);
    atomic_fetch_add(&r->lines_rejected, rejected);
    atomic_fetch_add(&r->samples_ok, (long long)accepted * r->o.metrics);
    atomic_fetch_add(&tn->samples, (long long)accepted * r->o.metrics);
}

/* One message per report on bucketdb/<tenant>/<device>/telemetry, its time in ns
 * (the gateway reads line protocol with nanosecond times, as Telegraf sends it). A
 * failed connection is opened again at the next batch, so one broker restart costs
 * the reports in flight, which the summary shows as sent but not acknowledged. */
static void send_batch_mqtt(struct run *r, struct link *l, int t, bdb_buf *body, long nlines)
{
    struct tenant *tn = &r->tenants[t];
    cli_mqtt *m = &l->m;
    if (m->fd < 0 && !past_deadline(r)) {
        cli_mqtt_close(m);
        if (cli_mqtt_connect(m, r->o.mqtt, l->client_id, r->o.mqtt_user, r->o.mqtt_pass, 30) != 0) {
            atomic_fetch_add(&r->errors, 1);
            set_error(r, "%s%s", m->err, "");
        }
    }
    long long a0 = m->acked, f0 = m->refused;
    bdb_buf topic, msg;
    bdb_buf_init(&topic);
    bdb_buf_init(&msg);
    const char *p = (const char *)body->data, *end = p + body->len;
    int ok = m->fd >= 0;
    while (ok && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *dv = memmem(p, n, ",device=", 8);
        size_t dn = dv ? strcspn(dv + 8, ", ") : 0;
        bdb_buf_reset(&topic);
        bdb_buf_printf(&topic, "bucketdb/%s/%.*s/telemetry", tn->named ? tn->name : "default",
                       (int)dn, dv ? dv + 8 : "");
        bdb_buf_putc(&topic, 0);
        bdb_buf_reset(&msg);
        bdb_buf_append(&msg, p, n);
        bdb_buf_puts(&msg, "000000");
        if (cli_mqtt_publish(m, (char *)topic.data, msg.data, msg.len) != 0)
            ok = 0;
        else
            atomic_fetch_add(&r->mqtt_sent, 1);
        p += n + 1;
    }
    if (ok && cli_mqtt_drain(m) != 0)
        ok = 0;
    if (!ok) {
        atomic_fetch_add(&r->errors, 1);
        set_error(r, "%s%s", m->err[0] ? m->err : "MQTT connection failed", "");
    }
    long acked = (long)(m->acked - a0), refused = (long)(m->refused - f0);
    if (refused) {
        atomic_fetch_add(&r->mqtt_refused, refused);
        set_error(r, "broker refused a message: %s%s", bdb_mqtt_reason_str(m->last_reason), "");
    }
    bdb_buf_free(&topic);
    bdb_buf_free(&msg);
    count_stored(r, tn, acked, nlines - acked);
}

/* Counts the samples of lines that were stored, from the answer's accepted count. */
static void send_batch(struct run *r, struct link *l, int t, bdb_buf *body, long nlines)
{
    if (nlines == 0)
        return;
    if (r->o.mqtt) {
        send_batch_mqtt(r, l, t, body, nlines);
        return;
    }
    cli_conn *c = &l->c;
    struct tenant *tn = &r->tenants[t];
    bdb_buf path;
    bdb_buf_init(&path);
    bdb_buf_puts(&path, "/write?precision=ms");
    if (tn->named) {
        bdb_buf_puts(&path, "&db=");
        cli_url_escape(&path, tn->name);
    }
    bdb_buf_putc(&path, 0);
    const char *token = tn->token ? tn->token : r->o.token;
    cli_resp resp;
    cli_resp_init(&resp);
    long accepted = 0, rejected = nlines;
    for (int attempt = 0;; attempt++) {
        atomic_fetch_add(&r->requests, 1);
        if (cli_conn_request(c, "POST", (char *)path.data, token, "text/plain", body->data,
                             body->len, NULL, NULL, &resp) != 0) {
            atomic_fetch_add(&r->errors, 1);
            set_error(r, "%s%s", c->err, "");
            break;
        }
        if (resp.status == 204 || resp.status == 200) {
            accepted = nlines;
            rejected = 0;
            break;
        }
        bdb_buf_putc(&resp.body, 0);
        if ((resp.status == 429 || resp.status == 503) && attempt < MAX_RETRIES &&
            !past_deadline(r)) {
            atomic_fetch_add(&r->retries, 1);
            int wait = resp.retry_after > 0 ? resp.retry_after : 1;
            sleep((unsigned)(wait > 5 ? 5 : wait));
            continue;
        }
        atomic_fetch_add(&r->errors, 1);
        char st[16];
        snprintf(st, sizeof st, "HTTP %d", resp.status);
        set_error(r, "%s: %s", st, (char *)resp.body.data);
        if (resp.status == 400) { /* partial write: the good lines are stored */
            json_t *j = json_loads((char *)resp.body.data, 0, NULL);
            json_t *a = j ? json_object_get(j, "accepted") : NULL;
            if (json_is_integer(a)) {
                accepted = (long)json_integer_value(a);
                rejected = nlines - accepted;
            }
            json_decref(j);
        }
        break;
    }
    cli_resp_free(&resp);
    bdb_buf_free(&path);
    count_stored(r, tn, accepted, rejected);
}

/* Sends a tenant's pending lines; every third request also carries the late reports
 * held back so far, so they arrive after newer events (or all of them at the end). */
static void flush_tenant(struct run *r, struct link *c, int t, struct tbuf *b, int final)
{
    b->flushes++;
    if (b->nlate && (final || b->flushes % 3 == 0)) {
        bdb_buf_append(&b->lines, b->late.data, b->late.len);
        b->nlines += b->nlate;
        bdb_buf_reset(&b->late);
        b->nlate = 0;
    }
    send_batch(r, c, t, &b->lines, b->nlines);
    bdb_buf_reset(&b->lines);
    b->nlines = 0;
}

struct worker {
    struct run *r;
    int idx;
    pthread_t th;
};

/* --samples: report j of device i at tick k has the fleet-wide number
 * k * per_tick + prefix[i] + j (devices in order inside a tick), and only numbers
 * below the budget are sent. The cut is the same whatever the thread timing. */
static int claim_report(struct run *r, int64_t k, size_t i, int j)
{
    if (r->max_reports > 0 && k * r->per_tick + r->prefix[i] + j >= r->max_reports)
        return 0;
    atomic_fetch_add(&r->reports, 1);
    return 1;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->r;
    struct link c;
    memset(&c, 0, sizeof c);
    cli_conn_init(&c.c, r->o.server, 60);
    c.m.fd = -1;
    if (r->o.mqtt) {
        snprintf(c.client_id, sizeof c.client_id, "bdbload-%ld-%d", (long)getpid(), w->idx);
        if (cli_mqtt_connect(&c.m, r->o.mqtt, c.client_id, r->o.mqtt_user, r->o.mqtt_pass, 30) !=
            0) {
            atomic_fetch_add(&r->errors, 1);
            set_error(r, "%s%s", c.m.err, "");
        }
    }
    long nt = r->o.tenants;
    struct tbuf *bufs = calloc((size_t)nt, sizeof *bufs);
    for (long t = 0; t < nt; t++) {
        bdb_buf_init(&bufs[t].lines);
        bdb_buf_init(&bufs[t].late);
    }
    bdb_buf line;
    bdb_buf_init(&line);
    int full = 0;
    for (int64_t k = 0; k < r->ticks && !full && !atomic_load(&r->stop); k++) {
        if (r->o.live) { /* send tick k once its whole interval has passed */
            int64_t due = r->wall0 + (k + 1) * r->o.interval_ms;
            while (!atomic_load(&r->stop) && bdb_monotonic_ms() < due && !past_deadline(r))
                usleep(20000);
            if (past_deadline(r)) {
                atomic_store(&r->stop, 1);
                break;
            }
        }
        for (size_t i = (size_t)w->idx; i < r->ndev && !full; i += (size_t)r->o.conns) {
            struct device *d = &r->devs[i];
            struct tbuf *b = &bufs[d->tenant];
            int per = d->hot ? (int)r->o.hot_factor : 1;
            for (int j = 0; j < per; j++) {
                if (!claim_report(r, k, i, j)) {
                    full = 1;
                    break;
                }
                int64_t ts = r->start_ms + k * r->o.interval_ms + d->phase_ms +
                             (int64_t)j * r->o.interval_ms / per;
                note_time(r, ts);
                bdb_buf_reset(&line);
                put_line(r, d, ts, &line);
                double u = unit(&d->rng);
                if (u < r->o.late) {
                    bdb_buf_append(&b->late, line.data, line.len);
                    b->nlate++;
                } else if (u < r->o.late + r->o.ooo && d->held.len == 0) {
                    bdb_buf_append(&d->held, line.data, line.len);
                } else {
                    bdb_buf_append(&b->lines, line.data, line.len);
                    b->nlines++;
                    if (d->held.len) { /* the older report after the newer one */
                        bdb_buf_append(&b->lines, d->held.data, d->held.len);
                        b->nlines++;
                        bdb_buf_reset(&d->held);
                    }
                }
                if (b->nlines >= r->o.batch)
                    flush_tenant(r, &c, d->tenant, b, 0);
            }
            if (past_deadline(r))
                atomic_store(&r->stop, 1);
        }
        if (r->o.live)
            for (long t = 0; t < nt; t++)
                flush_tenant(r, &c, (int)t, &bufs[t], 0);
    }
    /* Whatever is still held goes out now, so every generated report is sent. */
    for (size_t i = (size_t)w->idx; i < r->ndev; i += (size_t)r->o.conns) {
        struct device *d = &r->devs[i];
        if (d->held.len) {
            bdb_buf_append(&bufs[d->tenant].lines, d->held.data, d->held.len);
            bufs[d->tenant].nlines++;
            bdb_buf_reset(&d->held);
        }
    }
    for (long t = 0; t < nt; t++) {
        flush_tenant(r, &c, (int)t, &bufs[t], 1);
        bdb_buf_free(&bufs[t].lines);
        bdb_buf_free(&bufs[t].late);
    }
    free(bufs);
    bdb_buf_free(&line);
    cli_conn_close(&c.c);
    if (r->o.mqtt)
        cli_mqtt_close(&c.m);
    return NULL;
}

/* ------------------------------------------------------------------ tenants */

/* Registers tenant t (or rotates its token if it exists) and keeps its token. */
static int register_tenant(struct run *r, struct tenant *tn)
{
    cli_conn c;
    if (cli_conn_init(&c, r->o.server, 60) != 0)
        return -1;
    bdb_buf body, path;
    bdb_buf_init(&body);
    bdb_buf_init(&path);
    bdb_buf_printf(&body, "{\"name\":\"%s\"}", tn->name);
    cli_resp resp;
    cli_resp_init(&resp);
    int rc = cli_conn_request(&c, "POST", "/api/v1/admin/tenants", r->o.admin_token,
                              "application/json", body.data, body.len, NULL, NULL, &resp);
    if (rc == 0 && resp.status == 409) {
        bdb_buf_printf(&path, "/api/v1/admin/tenants/%s/token", tn->name);
        bdb_buf_putc(&path, 0);
        rc = cli_conn_request(&c, "POST", (char *)path.data, r->o.admin_token, NULL, NULL, 0, NULL,
                              NULL, &resp);
    }
    int ok = -1;
    if (rc != 0) {
        fprintf(stderr, "bucketdb load: tenant %s: %s\n", tn->name, c.err);
    } else if (resp.status != 200 && resp.status != 201) {
        fprintf(stderr, "bucketdb load: tenant %s: HTTP %d %.*s\n", tn->name, resp.status,
                (int)resp.body.len, (char *)resp.body.data);
    } else {
        json_t *j = json_loadb((char *)resp.body.data, resp.body.len, 0, NULL);
        const char *tok = json_string_value(json_object_get(j, "token"));
        if (tok) {
            tn->token = strdup(tok);
            ok = 0;
        } else {
            fprintf(stderr, "bucketdb load: tenant %s: no token in the answer\n", tn->name);
        }
        json_decref(j);
    }
    cli_resp_free(&resp);
    bdb_buf_free(&body);
    bdb_buf_free(&path);
    cli_conn_close(&c);
    return ok;
}

static void progress(struct run *r, int final)
{
    double secs = (double)(bdb_monotonic_ms() - r->wall0) / 1000;
    long long s = atomic_load(&r->samples_ok);
    printf("\r  sent %lld samples  %.0f samples/s  %lld requests  %lld errors%s", s,
           secs > 0 ? (double)s / secs : 0, (long long)atomic_load(&r->requests),
           (long long)atomic_load(&r->errors), final ? "\n" : "   ");
    fflush(stdout);
}

static void summary(struct run *r, double secs)
{
    long long samples = atomic_load(&r->samples_ok), first = atomic_load(&r->first_time),
              last = atomic_load(&r->last_time);
    if (first == INT64_MAX)
        first = last = 0;
    if (r->o.json) {
        bdb_buf j;
        bdb_buf_init(&j);
        bdb_buf_printf(
            &j,
            "{\"seed\":%lld,\"tenants\":%ld,\"devices\":%zu,\"metrics\":%ld,"
            "\"reports\":%lld,\"lines_stored\":%lld,\"lines_rejected\":%lld,"
            "\"samples\":%lld,\"requests\":%lld,\"retries\":%lld,\"errors\":%lld,"
            "\"first_time\":%lld,\"last_time\":%lld,\"seconds\":%.3f,"
            "\"samples_per_s\":%.0f,\"stopped_early\":%s,\"per_tenant\":[",
            r->o.seed, r->o.tenants, r->ndev, r->o.metrics, (long long)atomic_load(&r->reports),
            (long long)atomic_load(&r->lines_ok), (long long)atomic_load(&r->lines_rejected),
            samples, (long long)atomic_load(&r->requests), (long long)atomic_load(&r->retries),
            (long long)atomic_load(&r->errors), first, last, secs,
            secs > 0 ? (double)samples / secs : 0, atomic_load(&r->stop) ? "true" : "false");
        for (long t = 0; t < r->o.tenants; t++) {
            struct tenant *tn = &r->tenants[t];
            bdb_buf_puts(&j, t ? ",{\"tenant\":" : "{\"tenant\":");
            if (tn->named) {
                bdb_buf_putc(&j, '"');
                bdb_buf_json_str(&j, tn->name, strlen(tn->name));
                bdb_buf_putc(&j, '"');
            } else {
                bdb_buf_puts(&j, "null");
            }
            bdb_buf_printf(&j, ",\"devices\":%ld,\"samples\":%lld}", r->o.devices,
                           (long long)atomic_load(&tn->samples));
        }
        bdb_buf_puts(&j, "]");
        if (r->o.mqtt) /* acknowledged = lines_stored: the broker's PUBACKs */
            bdb_buf_printf(
                &j, ",\"mqtt_sent\":%lld,\"mqtt_acknowledged\":%lld,\"mqtt_refused\":%lld",
                (long long)atomic_load(&r->mqtt_sent), (long long)atomic_load(&r->lines_ok),
                (long long)atomic_load(&r->mqtt_refused));
        if (r->first_error[0]) {
            bdb_buf_puts(&j, ",\"first_error\":\"");
            bdb_buf_json_str(&j, r->first_error, strlen(r->first_error));
            bdb_buf_putc(&j, '"');
        }
        bdb_buf_puts(&j, "}\n");
        fwrite(j.data, 1, j.len, stdout);
        bdb_buf_free(&j);
        return;
    }
    printf("bucketdb load: %ld tenant(s), %zu devices, %lld reports, %lld samples stored in "
           "%.1f s (%.0f samples/s)\n",
           r->o.tenants, r->ndev, (long long)atomic_load(&r->reports), samples, secs,
           secs > 0 ? (double)samples / secs : 0);
    printf("  requests %lld, retries %lld, errors %lld, lines rejected %lld%s\n",
           (long long)atomic_load(&r->requests), (long long)atomic_load(&r->retries),
           (long long)atomic_load(&r->errors), (long long)atomic_load(&r->lines_rejected),
           atomic_load(&r->stop) ? ", stopped early (--max-seconds)" : "");
    if (r->o.mqtt)
        printf("  MQTT %s: %lld messages sent, %lld acknowledged by the broker, %lld refused\n",
               r->o.mqtt, (long long)atomic_load(&r->mqtt_sent),
               (long long)atomic_load(&r->lines_ok), (long long)atomic_load(&r->mqtt_refused));
    printf("  event times %lld .. %lld (Unix ms), seed %lld\n", first, last, r->o.seed);
    if (r->first_error[0])
        printf("  first error: %s\n", r->first_error);
}

/* ------------------------------------------------------------------ main */

int cmd_load(int argc, char **argv)
{
    struct run *r = calloc(1, sizeof *r);
    int prc = load_parse_args(argc, argv, &r->o);
    if (prc) {
        free(r);
        return prc > 0 ? BDB_EXIT_OK : BDB_EXIT_USAGE;
    }
    struct load_opts *o = &r->o;
    int rc = BDB_EXIT_FAIL;
    pthread_mutex_init(&r->mu, NULL);
    /* tenants */
    int multi = o->tenants > 0;
    if (!multi)
        o->tenants = 1;
    r->tenants = calloc((size_t)o->tenants, sizeof *r->tenants);
    for (long t = 0; t < o->tenants; t++) {
        struct tenant *tn = &r->tenants[t];
        if (multi)
            snprintf(tn->name, sizeof tn->name, "%.100s-%ld", o->prefix, t + 1);
        else if (o->tenant)
            snprintf(tn->name, sizeof tn->name, "%.128s", o->tenant);
        tn->named = multi || o->tenant;
        if (multi && o->admin_token && register_tenant(r, tn) != 0)
            goto out;
    }
    /* states */
    char *states = strdup(o->states);
    if (strcmp(states, "none"))
        for (char *sv, *t = strtok_r(states, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
            r->state_names = realloc(r->state_names, (r->nstates + 1) * sizeof *r->state_names);
            r->state_names[r->nstates++] = t;
        }
    /* devices */
    r->ndev = (size_t)(o->tenants * o->devices);
    r->devs = calloc(r->ndev, sizeof *r->devs);
    for (size_t i = 0; i < r->ndev; i++) {
        struct device *d = &r->devs[i];
        long t = (long)i / o->devices, k = (long)i % o->devices;
        d->rng = (uint64_t)o->seed * 0x100000001b3ULL ^ ((uint64_t)t << 40) ^ (uint64_t)k;
        splitmix(&d->rng);
        d->tenant = (int)t;
        d->hot = k < o->hot;
        d->site = (int)(k % 5);
        snprintf(d->id, sizeof d->id, "dev-%06ld", k + 1);
        d->phase_ms = (int64_t)(splitmix(&d->rng) % (uint64_t)o->interval_ms);
        if (d->hot) /* spread a hot device's reports inside one sub-interval */
            d->phase_ms %= o->interval_ms / (int64_t)o->hot_factor;
        d->val = malloc((size_t)o->metrics * sizeof *d->val);
        for (long m = 0; m < o->metrics; m++)
            d->val[m] = 10 + 40 * unit(&d->rng);
        d->state = r->nstates ? (int)(splitmix(&d->rng) % r->nstates) : 0;
        d->sent_state = -1;
        bdb_buf_init(&d->held);
    }
    /* time layout */
    r->prefix = calloc(r->ndev, sizeof *r->prefix);
    for (size_t i = 0; i < r->ndev; i++) {
        r->prefix[i] = r->per_tick;
        r->per_tick += r->devs[i].hot ? (long long)o->hot_factor : 1;
    }
    if (o->samples) {
        r->max_reports = (o->samples + o->metrics - 1) / o->metrics;
        r->ticks = (r->max_reports + r->per_tick - 1) / r->per_tick;
    } else {
        r->ticks = o->duration_ms / o->interval_ms;
        if (r->ticks < 1)
            r->ticks = 1;
    }
    int64_t now = o->end_ms && !o->live ? o->end_ms : bdb_now_ms();
    /* back-fill ends before now, so no event is in the future */
    r->start_ms = o->live ? now : now - (r->ticks + 1) * o->interval_ms;
    r->wall0 = bdb_monotonic_ms();
    r->deadline = r->wall0 + o->max_ms;
    atomic_store(&r->first_time, INT64_MAX);
    atomic_store(&r->last_time, INT64_MIN);
    struct worker *ws = calloc((size_t)o->conns, sizeof *ws);
    for (long i = 0; i < o->conns; i++) {
        ws[i].r = r;
        ws[i].idx = (int)i;
        pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
    }
    int tty = isatty(1) && !o->json;
    /* The main thread only watches: progress twice a second on a terminal. */
    for (long i = 0; i < o->conns; i++) {
        while (tty && pthread_tryjoin_np(ws[i].th, NULL) != 0) {
            progress(r, 0);
            usleep(500000);
        }
        if (!tty)
            pthread_join(ws[i].th, NULL);
    }
    if (tty)
        progress(r, 1);
    free(ws);
    double secs = (double)(bdb_monotonic_ms() - r->wall0) / 1000;
    summary(r, secs);
    rc = atomic_load(&r->errors) || atomic_load(&r->lines_rejected) ? BDB_EXIT_FAIL : BDB_EXIT_OK;
    for (size_t i = 0; i < r->ndev; i++) {
        free(r->devs[i].val);
        bdb_buf_free(&r->devs[i].held);
    }
    free(r->devs);
    free(r->prefix);
    free(r->state_names);
    free(states);
out:
    for (long t = 0; t < o->tenants; t++)
        free(r->tenants[t].token);
    free(r->tenants);
    pthread_mutex_destroy(&r->mu);
    free(r);
    return rc;
}
