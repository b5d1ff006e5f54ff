/* h_export: GET /api/v1/export streams stored samples back as line protocol, one
 * partition at a time, so memory stays bounded by one partition whatever the range.
 *
 * A metric "m.f" becomes measurement m, field f (what the default mapping made of
 * it); a metric without a dot becomes measurement <metric>, field "value". The device
 * is the device tag; the device's current tags follow; timestamps are nanoseconds, so
 * the output can be POSTed to /write as it is.
 *
 * The first partition is read before the status line, so a read that fails there
 * (the storage backend away: BDB_ERR_PARTIAL) answers 503. A read failing later ends
 * the stream with the line EXPORT_ERROR_MARK + reason and no last chunk: a line
 * protocol comment, which `bucketdb export` and `bucketdb import` refuse
 * (docs/API.md#get-apiv1export). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct exp {
    bdb_server *s;
    char *tenant;
    char **devices;
    size_t ndev, di;
    char **filter; /* metric filter, NULL = all */
    size_t nfilter;
    int64_t from, to;
    /* current device */
    int have_dev;
    bdb_device_snapshot snap;
    const char **metrics;
    size_t nmetrics;
    int64_t t, t_end;
    bdb_buf prefix_tags; /* ",device=...,k=v" already escaped */
    bdb_buf out;
    size_t out_pos;
    bdb_samples *samples;
    int failed;  /* a read failed: the stream must end as an error, not as complete */
    int fail_rc; /* its status */
};

/* Abort-on-OOM (docs/RELIABILITY.md): a device left out for want of memory would
 * make a complete-looking but short export. */
static void *need(void *p)
{
    if (!p) {
        fprintf(stderr, "bucketdb: out of memory in export\n");
        abort();
    }
    return p;
}

static void esc(bdb_buf *b, const char *s, size_t n, const char *special)
{
    for (size_t i = 0; i < n; i++) {
        if (strchr(special, s[i]))
            bdb_buf_putc(b, '\\');
        bdb_buf_putc(b, (uint8_t)s[i]);
    }
}

struct devlist {
    struct exp *e;
};

static int collect_dev(void *ctx, const bdb_device_info *d)
{
    struct exp *e = ctx;
    char **p = need(realloc(e->devices, (e->ndev + 1) * sizeof *p));
    e->devices = p;
    e->devices[e->ndev++] = need(strdup(d->device));
    return 0;
}

static int tags_cb(void *ctx, const bdb_device_info *d)
{
    struct exp *e = ctx;
    bdb_buf_reset(&e->prefix_tags);
    bdb_buf_putc(&e->prefix_tags, ',');
    esc(&e->prefix_tags, e->s->cfg.device_tag, strlen(e->s->cfg.device_tag), ",= ");
    bdb_buf_putc(&e->prefix_tags, '=');
    esc(&e->prefix_tags, d->device, strlen(d->device), ",= ");
    for (size_t i = 0; i < d->ntags; i++) {
        bdb_buf_putc(&e->prefix_tags, ',');
        esc(&e->prefix_tags, d->tags[i].key, d->tags[i].klen, ",= ");
        bdb_buf_putc(&e->prefix_tags, '=');
        esc(&e->prefix_tags, d->tags[i].val, d->tags[i].vlen, ",= ");
    }
    return 0;
}

static void drop_device(struct exp *e)
{
    if (!e->have_dev)
        return;
    for (size_t m = 0; m < e->nmetrics && e->samples; m++)
        bdb_samples_free(&e->samples[m]);
    free(e->samples);
    e->samples = NULL;
    free(e->metrics);
    e->metrics = NULL;
    bdb_device_snapshot_free(&e->snap);
    e->have_dev = 0;
}

/* A read failed: what is left of the stream is the marker line (h_export). */
static void fail(struct exp *e, int rc)
{
    e->failed = 1;
    e->fail_rc = rc;
    bdb_buf_reset(&e->out);
    e->out_pos = 0;
    bdb_buf_printf(&e->out, EXPORT_ERROR_MARK "%s\n", bdb_strerror(rc));
}

static int open_next_device(struct exp *e)
{
    while (e->di < e->ndev) {
        const char *dev = e->devices[e->di++];
        int src = bdb_db_device_snapshot(e->s->db, e->tenant, dev, &e->snap);
        if (src == BDB_ERR_NOMEM) { /* skipping the device would look complete */
            fail(e, src);
            return 0;
        }
        if (src != BDB_OK)
            continue;
        e->have_dev = 1;
        src = bdb_db_get_device(e->s->db, e->tenant, dev, tags_cb, e);
        if (src != BDB_OK) {
            drop_device(e);
            if (src == BDB_ERR_NOMEM) {
                fail(e, src);
                return 0;
            }
            continue;
        }
        e->metrics = need(calloc(e->snap.nmetrics + 1, sizeof *e->metrics));
        e->nmetrics = 0;
        for (size_t i = 0; i < e->snap.nmetrics; i++) {
            int keep = e->nfilter == 0;
            for (size_t k = 0; k < e->nfilter && !keep; k++)
                keep = !strcmp(e->filter[k], e->snap.metrics[i]);
            if (keep)
                e->metrics[e->nmetrics++] = e->snap.metrics[i];
        }
        e->samples = need(calloc(e->nmetrics + 1, sizeof *e->samples));
        e->t = e->from > e->snap.first_ts ? e->from : e->snap.first_ts;
        e->t_end = e->to < e->snap.last_ts + 1 ? e->to : e->snap.last_ts + 1;
        if (e->nmetrics == 0 || e->snap.last_ts == INT64_MIN || e->t >= e->t_end) {
            drop_device(e);
            continue;
        }
        return 1;
    }
    return 0;
}

/* Produces the lines of the next partition into e->out (after a failure: the marker
 * line); returns 0 at the end. */
static int produce(struct exp *e)
{
    bdb_buf_reset(&e->out);
    e->out_pos = 0;
    while (e->out.len == 0) {
        if (!e->have_dev && !open_next_device(e))
            return e->failed;
        if (e->t >= e->t_end) {
            drop_device(e);
            continue;
        }
        int64_t ps, pe;
        bdb_bucket_range(&e->snap.hist, e->t, &ps, &pe);
        int64_t lo = e->t, hi = pe < e->t_end ? pe : e->t_end;
        e->t = hi;
        const char *dev = e->devices[e->di - 1];
        int rc = bdb_db_read(e->s->db, e->tenant, dev, e->metrics, e->nmetrics, lo, hi, e->samples,
                             NULL);
        if (rc != BDB_OK) {
            /* A partial read (the backend away) is a failure too: an export holds
             * everything or says it does not. Before the status line h_export answers
             * an error; after it the stream ends with the marker line (below). */
            BDB_ERROR("export %s/%s: read failed: %s; stream ended early", e->tenant, dev,
                      bdb_strerror(rc));
            fail(e, rc);
            return 1;
        }
        for (size_t m = 0; m < e->nmetrics; m++) {
            const char *name = e->metrics[m];
            /* Split at the first dot that leaves both sides non-empty, so the line
             * parses and imports as the same metric; else measurement <metric>. */
            const char *dot = name[0] ? strchr(name + 1, '.') : NULL;
            if (dot && !dot[1])
                dot = NULL;
            size_t ml = dot ? (size_t)(dot - name) : strlen(name);
            const char *field = dot ? dot + 1 : "value";
            for (size_t i = 0; i < e->samples[m].n; i++) {
                esc(&e->out, name, ml, ", ");
                bdb_buf_append(&e->out, e->prefix_tags.data, e->prefix_tags.len);
                bdb_buf_putc(&e->out, ' ');
                esc(&e->out, field, strlen(field), ",= ");
                bdb_buf_putc(&e->out, '=');
                bdb_buf_double(&e->out, e->samples[m].v[i]);
                bdb_buf_putc(&e->out, ' ');
                bdb_buf_i64(&e->out, e->samples[m].ts[i]);
                bdb_buf_puts(&e->out, "000000\n");
            }
        }
    }
    return 1;
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct exp *e = cls;
    if (e->out_pos >= e->out.len && (e->failed || !produce(e)))
        /* after a failed read, no last chunk: the client sees a cut transfer */
        return e->failed ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = e->out.len - e->out_pos;
    if (n > max)
        n = max;
    memcpy(buf, e->out.data + e->out_pos, n);
    e->out_pos += n;
    return (ssize_t)n;
}

static void free_exp(void *cls)
{
    struct exp *e = cls;
    drop_device(e);
    for (size_t i = 0; i < e->ndev; i++)
        free(e->devices[i]);
    free(e->devices);
    for (size_t i = 0; i < e->nfilter; i++)
        free(e->filter[i]);
    free(e->filter);
    free(e->tenant);
    bdb_buf_free(&e->prefix_tags);
    bdb_buf_free(&e->out);
    free(e);
}

static void add_list(char ***v, size_t *n, const char *csv)
{
    char *copy = need(strdup(csv)), *save;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!*t)
            continue;
        char **p = need(realloc(*v, (*n + 1) * sizeof *p));
        *v = p;
        (*v)[(*n)++] = need(strdup(t));
    }
    free(copy);
}

enum MHD_Result h_export(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    struct exp *e = calloc(1, sizeof *e);
    if (!e)
        return MHD_NO;
    e->s = s;
    e->tenant = need(strdup(tenant));
    e->from = INT64_MIN / 4;
    e->to = INT64_MAX / 4;
    if (time_param(s, c, "from", &e->from, &res) < 0 || time_param(s, c, "to", &e->to, &res) < 0) {
        free_exp(e);
        return res;
    }
    const char *dev = arg(c, "device");
    if (dev && *dev)
        add_list(&e->devices, &e->ndev, dev);
    else if (bdb_db_list_devices(s->db, tenant, collect_dev, e) == BDB_ERR_NOMEM) {
        free_exp(e); /* a list with devices left out would export as complete */
        return respond_json_error(s, c, 503, "out of memory listing the devices", 1);
    }
    const char *m = arg(c, "metric");
    if (m && *m)
        add_list(&e->filter, &e->nfilter, m);
    /* The first lines before the status line: a backend that is away (or any failed
     * read) then gets an error status instead of a 200 that ends short. */
    produce(e);
    if (e->failed) {
        char msg[300];
        snprintf(msg, sizeof msg, "export failed: %s", bdb_strerror(e->fail_rc));
        int st = e->fail_rc == BDB_ERR_PARTIAL || e->fail_rc == BDB_ERR_NOMEM ? 503 : 500;
        free_exp(e);
        return respond_json_error(s, c, (unsigned)st, msg, 0);
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 65536, reader, e, free_exp);
    if (!resp) {
        free_exp(e);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
    res = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&s->http_requests[2], 1);
    return res;
}
