/* h_state: current state over HTTP (docs/API.md#current-state), answered from the
 * engine's state index (db_latest.c), never from a scan of samples or devices:
 *   GET /api/v1/state/latest?device=D          a device's latest event
 *   GET /api/v1/state/devices?state=S          devices in state S now, paged
 *   GET /api/v1/state/counts                   devices per state
 * Same authentication and tenant rules as /api/v1/query (req_tenant). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_PAGE_DEFAULT 1000

static void json_str(bdb_buf *b, const char *s)
{
    bdb_buf_putc(b, '"');
    bdb_buf_json_str(b, s, strlen(s));
    bdb_buf_putc(b, '"');
}

/* JSON has no NaN or infinities: such a value is written as null. */
static void json_num(bdb_buf *b, double v)
{
    if (v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
        bdb_buf_puts(b, "null");
    else
        bdb_buf_double(b, v);
}

static int latest_cb(void *ctx, const bdb_latest *l)
{
    bdb_buf *b = ctx;
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    bdb_buf_puts(b, "{\"tenant\":");
    json_str(b, bdb_tenant_key_name(l->tenant, tname));
    bdb_buf_puts(b, ",\"device\":");
    json_str(b, l->device);
    bdb_buf_printf(b, ",\"time\":%lld,\"state\":", (long long)l->event_ts);
    if (l->state) {
        json_str(b, l->state);
        bdb_buf_printf(b, ",\"state_time\":%lld", (long long)l->state_ts);
    } else {
        bdb_buf_puts(b, "null,\"state_time\":null");
    }
    /* values: the metrics of the latest event; metrics: every metric's newest value,
     * which may come from an earlier report than the latest event. */
    bdb_buf_puts(b, ",\"values\":{");
    int first = 1;
    for (size_t i = 0; i < l->nmetrics; i++) {
        if (!l->metrics[i].in_event)
            continue;
        if (!first)
            bdb_buf_putc(b, ',');
        first = 0;
        json_str(b, l->metrics[i].name);
        bdb_buf_putc(b, ':');
        json_num(b, l->metrics[i].value);
    }
    bdb_buf_puts(b, "},\"metrics\":{");
    for (size_t i = 0; i < l->nmetrics; i++) {
        if (i)
            bdb_buf_putc(b, ',');
        json_str(b, l->metrics[i].name);
        bdb_buf_printf(b, ":{\"time\":%lld,\"value\":", (long long)l->metrics[i].ts);
        json_num(b, l->metrics[i].value);
        bdb_buf_putc(b, '}');
    }
    /* string fields other than the state: each name's newest value */
    bdb_buf_puts(b, "},\"attributes\":{");
    for (size_t i = 0; i < l->nattrs; i++) {
        if (i)
            bdb_buf_putc(b, ',');
        json_str(b, l->attrs[i].name);
        bdb_buf_puts(b, ":{\"value\":");
        json_str(b, l->attrs[i].value);
        bdb_buf_printf(b, ",\"time\":%lld}", (long long)l->attrs[i].ts);
    }
    bdb_buf_puts(b, "}}\n");
    return 0;
}

static enum MHD_Result latest(bdb_server *s, struct MHD_Connection *c, const char *tenant)
{
    const char *device = arg(c, "device");
    if (!device || !*device)
        return respond_json_error(s, c, 400, "missing parameter 'device'", 0);
    bdb_buf b;
    bdb_buf_init(&b);
    int rc = bdb_db_latest(s->db, tenant, device, latest_cb, &b);
    enum MHD_Result res;
    if (rc == BDB_ERR_NOTFOUND) {
        char msg[400], tname[BDB_TENANT_NAME_MAX + 1];
        snprintf(msg, sizeof msg, "device '%.200s' has no report in tenant '%s'", device,
                 bdb_tenant_key_name(tenant, tname));
        res = respond_json_error(s, c, 404, msg, 0);
    } else if (rc != BDB_OK) {
        res = respond_json_error(s, c, 500, bdb_strerror(rc), 0);
    } else {
        res = respond(s, c, 200, "application/json", b.data, b.len);
    }
    bdb_buf_free(&b);
    return res;
}

struct page_out {
    bdb_buf *b;
    size_t n;
    char *last; /* a copy: the engine's names live during the callback only */
};

static int device_cb(void *ctx, const char *device, int64_t state_ts)
{
    struct page_out *o = ctx;
    if (o->n++)
        bdb_buf_putc(o->b, ',');
    bdb_buf_puts(o->b, "{\"device\":");
    json_str(o->b, device);
    bdb_buf_printf(o->b, ",\"state_time\":%lld}", (long long)state_ts);
    free(o->last);
    o->last = strdup(device);
    if (!o->last)
        abort();
    return 0;
}

static enum MHD_Result devices(bdb_server *s, struct MHD_Connection *c, const char *tenant)
{
    const char *state = arg(c, "state");
    if (!state)
        return respond_json_error(s, c, 400, "missing parameter 'state'", 0);
    size_t limit = STATE_PAGE_DEFAULT;
    const char *lim = arg(c, "limit");
    if (lim) {
        uint64_t v;
        if (count_param(lim, BDB_STATE_PAGE_MAX, &v) != 0 || v < 1) {
            char msg[120];
            snprintf(msg, sizeof msg, "invalid 'limit': must be an integer 1..%d",
                     BDB_STATE_PAGE_MAX);
            return respond_json_error(s, c, 400, msg, 0);
        }
        limit = (size_t)v;
    }
    const char *cursor = arg(c, "cursor");
    if (cursor && !*cursor)
        cursor = NULL;
    bdb_buf rows, b;
    bdb_buf_init(&rows);
    bdb_buf_init(&b);
    struct page_out o = {&rows, 0, NULL};
    int more = 0;
    uint64_t total = 0;
    int rc =
        bdb_db_state_devices(s->db, tenant, state, cursor, limit, device_cb, &o, &more, &total);
    enum MHD_Result res;
    if (rc != BDB_OK) {
        res = respond_json_error(s, c, 500, bdb_strerror(rc), 0);
        goto out;
    }
    char tname[BDB_TENANT_NAME_MAX + 1];
    bdb_buf_puts(&b, "{\"tenant\":");
    json_str(&b, bdb_tenant_key_name(tenant, tname));
    bdb_buf_puts(&b, ",\"state\":");
    json_str(&b, state);
    bdb_buf_printf(&b, ",\"total\":%llu,\"count\":%zu,\"devices\":[", (unsigned long long)total,
                   o.n);
    bdb_buf_append(&b, rows.data, rows.len);
    bdb_buf_puts(&b, "],\"next_cursor\":");
    if (more && o.last)
        json_str(&b, o.last);
    else
        bdb_buf_puts(&b, "null");
    bdb_buf_puts(&b, "}\n");
    res = respond(s, c, 200, "application/json", b.data, b.len);
out:
    free(o.last);
    bdb_buf_free(&rows);
    bdb_buf_free(&b);
    return res;
}

struct counts_out {
    bdb_buf *b;
    size_t n;
    uint64_t sum;
};

static int count_cb(void *ctx, const char *state, uint64_t n)
{
    struct counts_out *o = ctx;
    if (o->n++)
        bdb_buf_putc(o->b, ',');
    json_str(o->b, state);
    bdb_buf_printf(o->b, ":%llu", (unsigned long long)n);
    o->sum += n;
    return 0;
}

static enum MHD_Result counts(bdb_server *s, struct MHD_Connection *c, const char *tenant)
{
    bdb_buf b;
    bdb_buf_init(&b);
    char tname[BDB_TENANT_NAME_MAX + 1];
    bdb_buf_puts(&b, "{\"tenant\":");
    json_str(&b, bdb_tenant_key_name(tenant, tname));
    bdb_buf_puts(&b, ",\"states\":{");
    struct counts_out o = {&b, 0, 0};
    uint64_t none = 0;
    int rc = bdb_db_state_counts(s->db, tenant, count_cb, &o, &none);
    enum MHD_Result res;
    if (rc != BDB_OK) {
        res = respond_json_error(s, c, 500, bdb_strerror(rc), 0);
    } else {
        bdb_buf_printf(&b, "},\"no_state\":%llu,\"devices\":%llu}\n", (unsigned long long)none,
                       (unsigned long long)(o.sum + none));
        res = respond(s, c, 200, "application/json", b.data, b.len);
    }
    bdb_buf_free(&b);
    return res;
}

enum MHD_Result h_state(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return respond_json_error(s, c, 405, "use GET", 0);
    int which = 0;
    if (!strcmp(rest, "latest"))
        which = 1;
    else if (!strcmp(rest, "devices"))
        which = 2;
    else if (!strcmp(rest, "counts"))
        which = 3;
    if (!which) {
        char msg[300];
        snprintf(msg, sizeof msg,
                 "no such endpoint: /api/v1/state/%.200s (use latest, devices or counts)", rest);
        return respond_json_error(s, c, 404, msg, 0);
    }
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    atomic_fetch_add(&s->queries, 1);
    if (which == 1)
        return latest(s, c, tenant);
    if (which == 2)
        return devices(s, c, tenant);
    return counts(s, c, tenant);
}
