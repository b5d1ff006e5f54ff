/* h_write: ingestion endpoints. Every path ends in bdb_db_write, which returns only
 * when the batch is durable under the sync mode; the response is sent after that. */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/map.h"
#include "common/timeutil.h"
#include "ingest/gzip.h"
#include "ingest/devrule.h"
#include "ingest/json_ingest.h"
#include "ingest/lp_ingest.h"
#include "model/dedup.h"
#include "server/admission/admit.h"
#include "server/admission/quota.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Charges the growth of a decompression buffer to the request's in-flight
 * reservation (bdb_gzip_inflate asks before each growth). */
static int gunzip_grow(void *ctx, size_t extra)
{
    void **sr = ctx;
    return req_bp_grow(sr[0], sr[1], extra);
}

/* Returns the body to parse (decompressed if needed) or NULL with a response queued. */
static const bdb_buf *request_body(bdb_server *s, struct MHD_Connection *c, req *r, bdb_buf *tmp,
                                   enum MHD_Result *res)
{
    const char *enc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
    if (!enc || !strcasecmp(enc, "identity"))
        return &r->body;
    if (strcasecmp(enc, "gzip") && strcasecmp(enc, "deflate")) {
        *res = respond_json_error(s, c, 415, "unsupported Content-Encoding (use gzip)", 1);
        return NULL;
    }
    void *sr[2] = {s, r};
    int g =
        bdb_gzip_inflate(r->body.data, r->body.len, s->cfg.max_body_bytes, tmp, gunzip_grow, sr);
    if (g == BDB_ERR_AGAIN) {
        *res = respond_backpressure(s, c, r->bp_refused,
                                    r->adm.bp.tenant[0] ? r->adm.bp.tenant : NULL);
        return NULL;
    }
    if (g == BDB_ERR_LIMIT) {
        atomic_fetch_add(&s->body_too_large, 1);
        char msg[160];
        snprintf(msg, sizeof msg,
                 "request entity too large: decompressed body exceeds max-body-bytes %zu",
                 s->cfg.max_body_bytes);
        *res = respond_json_error(s, c, 413, msg, 1);
        return NULL;
    }
    if (g == BDB_ERR_NOMEM) { /* the server's fault, not the body's: retryable */
        *res =
            respond_json_error(s, c, 500, "write failed: out of memory decompressing the body", 1);
        return NULL;
    }
    if (g < 0) {
        *res = respond_json_error(s, c, 400, "unable to parse body: invalid gzip data", 1);
        return NULL;
    }
    return tmp;
}

/* Maps a storage failure to HTTP: read-only and I/O errors are the server's fault and
 * retryable elsewhere (503/500); a full disk is 507. Nothing of the batch counts as
 * written. */
static enum MHD_Result storage_error(bdb_server *s, struct MHD_Connection *c, int rc)
{
    atomic_fetch_add(&s->write_failures, 1);
    char msg[400];
    bdb_db_stats st;
    switch (rc) {
    case BDB_ERR_READONLY:
        bdb_db_get_stats(s->db, &st);
        snprintf(msg, sizeof msg, "storage is read-only, write not accepted: %s",
                 st.readonly_reason);
        return respond_json_error(s, c, 503, msg, 1);
    case BDB_ERR_LIMIT:
        snprintf(msg, sizeof msg, "a report carries more than %d metrics; nothing written",
                 BDB_MAX_REPORT_METRICS);
        return respond_json_error(s, c, 400, msg, 1);
    case BDB_ERR_NOSPACE:
        return respond_json_error(s, c, 507, "insufficient storage: disk full, write not accepted",
                                  1);
    case BDB_ERR_AGAIN: {
        /* ack=quorum: logged here, not confirmed by the storage backend; a retry writes
         * the same values again (docs/CASSANDRA.md#acknowledgements) */
        static const char m[] = "write not acknowledged: the storage backend did not confirm "
                                "it (ack=quorum); retry";
        snprintf(msg, sizeof msg, "{\"error\":\"%s\"}", m);
        return respond_retry_error(s, c, 503, 1, m, msg, strlen(msg));
    }
    default:
        snprintf(msg, sizeof msg, "write failed: %s", bdb_strerror(rc));
        return respond_json_error(s, c, 500, msg, 1);
    }
}

/* Device quota of a device profile (h_query.c), which may create the device. */
int devq_check(bdb_server *s, struct MHD_Connection *c, const char *tenant, const bdb_batch *b,
               pthread_mutex_t **held, enum MHD_Result *r)
{
    uint64_t max, have, fresh;
    if (bdb_admit_devices(s->admit, tenant, b, held, &max, &have, &fresh) == 0)
        return 0;
    bdb_buf msg, out;
    bdb_buf_init(&msg);
    bdb_buf_init(&out);
    bdb_admit_devices_msg(&msg, tenant, max, have, fresh, "request");
    bdb_buf_putc(&msg, '\0');
    /* Waiting does not free a device; the Retry-After only paces retries. */
    bdb_quota_error_json(&out, (const char *)msg.data, tenant,
                         bdb_quota_limit_name(BDB_LIMIT_DEVICES), max, BDB_QUOTA_DEVICES_RETRY_S);
    *r = respond_retry_error(s, c, 429, BDB_QUOTA_DEVICES_RETRY_S, (const char *)msg.data, out.data,
                             out.len);
    bdb_buf_free(&out);
    bdb_buf_free(&msg);
    return -1;
}

/* Answers a write that admission refused (admit.h) with the status, Retry-After and
 * JSON body of its limit (docs/API.md#post-write, docs/TENANCY.md#quotas); nothing of
 * it was written. */
static enum MHD_Result refusal(bdb_server *s, struct MHD_Connection *c, const char *tenant,
                               const bdb_admit_result *ar)
{
    const char *limit = bdb_admit_limit_name(ar->verdict);
    if (ar->verdict == BDB_ADMIT_HEAD)
        return respond_backpressure(s, c, BDB_BP_HEAD_MEMORY, NULL);
    if (ar->verdict == BDB_ADMIT_DEVICE_RATE || ar->verdict == BDB_ADMIT_HOT)
        return respond_device_limit(s, c, ar->retry_after_s, ar->msg, tenant, ar->device,
                                    ar->device_len, limit, ar->limit, ar->value);
    bdb_buf out;
    bdb_buf_init(&out);
    enum MHD_Result res;
    if (ar->verdict == BDB_ADMIT_STORAGE) {
        char msg[512]; /* the same message as ar->msg: the noun is "request" */
        bdb_quota_storage_error(&out, msg, sizeof msg, tenant, ar->limit, ar->usage);
        res = respond_retry_error(s, c, 429, ar->retry_after_s, msg, out.data, out.len);
    } else if (ar->verdict == BDB_ADMIT_BURST) {
        bdb_quota_error_json(&out, ar->msg, tenant, limit, ar->limit, -1);
        res = respond_retry_error(s, c, 413, 0, ar->msg, out.data, out.len);
    } else { /* max_devices, writes_per_second */
        bdb_quota_error_json(&out, ar->msg, tenant, limit, ar->limit, ar->retry_after_s);
        res = respond_retry_error(s, c, 429, ar->retry_after_s, ar->msg, out.data, out.len);
    }
    bdb_buf_free(&out);
    return res;
}

/* What parsing made of a request: how many lines (or reports) were accepted and
 * rejected, the first problem, and where it was. */
struct outcome {
    size_t accepted, rejected;
    const char *first_error;
    const char *where; /* "line" (1-based) or "index" (0-based) */
    long pos;
    _Atomic uint64_t *samples, *acc, *rej; /* the protocol's counters */
    const char *not_stored;                /* NULL, or what was parsed but not stored */
};

/* Memory that parsing a body will take, reserved before parsing so that a request
 * the budget cannot hold is refused before it grows: the reports (one per line or
 * JSON object, with their array's doubling slack), the tags and metrics (one per '='
 * or ':'; their arrays and copied names), and the WAL record the engine encodes,
 * about the body's size. An estimate, on the high side for ordinary bodies. */
#define EST_PER_REPORT 128
#define EST_PER_ITEM 32
static uint64_t parse_estimate(const bdb_buf *body, int json)
{
    const uint8_t *p = body->data, *end = body->data + body->len;
    uint64_t reports = 1, items = 0;
    uint8_t rep = json ? '{' : '\n', item = json ? ':' : '=';
    for (; p < end; p++) {
        reports += *p == rep;
        items += *p == item;
    }
    return reports * EST_PER_REPORT + items * EST_PER_ITEM + body->len;
}

/* Sets the request's parse reservation to the estimate: gives back what admission
 * reserved beyond it, or asks for the rest. 0, or -1 with a 503/429 queued (nothing
 * parsed). */
static int parse_reserve(bdb_server *s, struct MHD_Connection *c, req *r, const bdb_buf *body,
                         int json, enum MHD_Result *res)
{
    uint64_t est = parse_estimate(body, json);
    if (est <= r->parse_reserved) {
        bdb_bp_shrink(s->bp, &r->adm.bp, r->parse_reserved - est);
        r->parse_reserved = est;
        return 0;
    }
    if (req_bp_grow(s, r, est - r->parse_reserved) == 0) {
        r->parse_reserved = est;
        return 0;
    }
    *res = respond_backpressure(s, c, r->bp_refused, r->adm.bp.tenant[0] ? r->adm.bp.tenant : NULL);
    return -1;
}

/* The body to parse (decompressed if needed) with the request's reservation set to
 * what parsing it takes: every write endpoint reads its body this way. NULL with a
 * response queued (tmp freed). */
static const bdb_buf *body_to_parse(bdb_server *s, struct MHD_Connection *c, req *r, bdb_buf *tmp,
                                    int json, enum MHD_Result *res)
{
    const bdb_buf *body = request_body(s, c, r, tmp, res);
    if (body && parse_reserve(s, c, r, body, json, res) == 0)
        return body;
    bdb_buf_free(tmp);
    return NULL;
}

void server_device_rule(bdb_server *s, const char *tenant, bdb_devrule *out)
{
    char text[BDB_TENANT_RULE_MAX], why[300];
    if (bdb_tenants_device_rule(s->tenants, tenant, text, sizeof text) &&
        bdb_devrule_parse(text, out, why, sizeof why) == 0)
        return;
    bdb_config_device_rule(&s->cfg, out);
}

void count_ingest(bdb_server *s, const char *tenant, uint64_t samples)
{
    bdb_quota_storage_note(s->db, tenant, samples); /* storage quota: usage until measured */
    if (!bdb_tenants_count_ingest(s->tenants, tenant, samples)) {
        atomic_fetch_add(&s->other_samples, samples);
        atomic_fetch_add(&s->other_write_requests, 1);
    }
}

/* Writes the accepted part and answers: 204 when nothing was rejected, else 400 with
 * the Influx phrases ("partial write:" when some of the body was stored) and the
 * counts, so a client knows exactly what happened to its request. *wrc: the write's
 * result (untouched when nothing was written). */
static enum MHD_Result commit_and_answer(bdb_server *s, struct MHD_Connection *c, req *r,
                                         const char *tenant, bdb_batch *b, const struct outcome *o,
                                         int *wrc)
{
    bdb_dedup dd = {0, 0};
    if (o->accepted) {
        /* The whole request is admitted or refused before anything is written; with
         * the hot sample policy only the kept reports are written. */
        bdb_admit_result ar;
        if (bdb_admit_batch(s->admit, &r->adm, tenant, b, "request", bdb_monotonic_ms(), &ar) !=
            BDB_ADMIT_OK)
            return refusal(s, c, tenant, &ar);
        /* Reports of one device and millisecond are one sample per metric once stored:
         * the counters and `accepted` count what is kept (model/dedup.h). */
        bdb_dedup_count(ar.batch, &dd);
        int rc = bdb_db_write(s->db, tenant, ar.batch);
        *wrc = rc;
        if (rc != BDB_OK)
            return storage_error(s, c, rc);
        uint64_t written = bdb_batch_samples(ar.batch) - dd.samples;
        atomic_fetch_add(o->samples, written);
        hist_observe(&s->batch_size, written);
        count_ingest(s, tenant, written);
    }
    size_t accepted = o->accepted - dd.reports;
    atomic_fetch_add(o->acc, accepted);
    atomic_fetch_add(o->rej, o->rejected);
    hist_observe(&s->write_latency, now_us() - r->start_us);
    if (o->rejected == 0)
        return o->not_stored ? respond_stored_with_warning(s, c, o->not_stored)
                             : respond(s, c, 204, NULL, "", 0);
    int lines = !strcmp(o->where, "line");
    char where[48] = "", over[96] = "";
    if (lines)
        snprintf(where, sizeof where, "line %ld; ", o->pos);
    if (dd.reports)
        snprintf(over, sizeof over, ", %zu overridden by a later one of the same device and ms",
                 dd.reports);
    char msg[900];
    snprintf(msg, sizeof msg, "%s%s (%s%zu %s(s) accepted%s, %zu rejected)",
             o->accepted ? "partial write: " : "", o->first_error, where, accepted,
             lines ? "line" : "report", over, o->rejected);
    bdb_buf out;
    bdb_buf_init(&out);
    bdb_buf_puts(&out, "{\"error\":\"");
    bdb_buf_json_str(&out, msg, strlen(msg));
    bdb_buf_printf(&out, "\",\"%s\":%ld,\"accepted\":%zu,", o->where, o->pos, accepted);
    if (dd.reports)
        bdb_buf_printf(&out, "\"overridden\":%zu,", dd.reports);
    bdb_buf_printf(&out, "\"rejected\":%zu}\n", o->rejected);
    enum MHD_Result res = respond_body_error(s, c, 400, msg, out.data, out.len);
    bdb_buf_free(&out);
    return res;
}

static enum MHD_Result write_lp(bdb_server *s, struct MHD_Connection *c, req *r, int v2, int *wrc)
{
    enum MHD_Result res;
    const char *tenant = req_tenant_in(s, c, &res, v2);
    if (!tenant)
        return res;
    const char *ps = arg(c, "precision");
    int prec = bdb_lp_parse_precision(ps);
    if (v2 && ps && *ps && strcmp(ps, "ns") && strcmp(ps, "us") && strcmp(ps, "ms") &&
        strcmp(ps, "s")) {
        char msg[128];
        snprintf(msg, sizeof msg, "invalid precision '%.20s' (/api/v2/write takes ns, us, ms or s)",
                 ps);
        return respond_json_error(s, c, 400, msg, 1);
    }
    if (prec < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "invalid precision '%.20s' (use ns, u, ms, s, m or h)", ps);
        return respond_json_error(s, c, 400, msg, 1);
    }
    bdb_buf tmp;
    bdb_buf_init(&tmp);
    const bdb_buf *body = body_to_parse(s, c, r, &tmp, 0, &res);
    if (!body)
        return res;
    bdb_lp_limits lim;
    bdb_lp_limits_default(&lim);
    lim.max_line_len = s->cfg.max_line_bytes;
    lim.max_tags = s->cfg.max_tags;
    lim.max_fields = s->cfg.max_fields;
    lim.max_key_len = s->cfg.max_key_bytes;
    lim.max_tag_value_len = s->cfg.max_tag_value_bytes;
    bdb_lp_parser *p = bdb_lp_parser_new(&lim);
    bdb_batch *b = bdb_batch_new();
    bdb_devrule rule;
    server_device_rule(s, tenant, &rule);
    bdb_lp_map map = {s->cfg.device_tag,
                      &rule,
                      !strcmp(s->cfg.metric_naming, "field"),
                      s->cfg.max_future_ms,
                      s->cfg.max_key_bytes,
                      s->cfg.max_tag_value_bytes};
    map.max_age_ms = bdb_db_retention_ms(s->db, tenant); /* docs/TENANCY.md#retention */
    bdb_lp_result lr;
    int prc = !p || !b ? BDB_ERR_NOMEM
                       : bdb_lp_ingest(p, (const char *)body->data, body->len,
                                       (enum bdb_lp_precision)prec, bdb_now_ms(), &map, b, &lr);
    bdb_lp_parser_free(p);
    bdb_buf_free(&tmp);
    if (prc != BDB_OK) { /* out of memory: nothing of the body is written (alloc.h) */
        bdb_batch_free(b);
        return storage_error(s, c, prc);
    }
    struct outcome o = {lr.accepted,
                        lr.rejected,
                        lr.first_error,
                        "line",
                        (long)lr.first_bad_line,
                        &s->lp_samples,
                        &s->lp_lines_accepted,
                        &s->lp_lines_rejected,
                        NULL};
    char skipped[256];
    if (lr.strings_skipped) {
        atomic_fetch_add(&s->lp_strings_skipped, lr.strings_skipped);
        snprintf(skipped, sizeof skipped, "%zu string field(s) other than state; first: %s",
                 lr.strings_skipped, lr.first_skipped);
        o.not_stored = skipped;
    }
    res = commit_and_answer(s, c, r, tenant, b, &o, wrc);
    bdb_batch_free(b);
    return res;
}

static enum MHD_Result write_json(bdb_server *s, struct MHD_Connection *c, req *r, int *wrc)
{
    enum MHD_Result res;
    const char *tenant = req_tenant(s, c, &res);
    if (!tenant)
        return res;
    bdb_buf tmp;
    bdb_buf_init(&tmp);
    const bdb_buf *body = body_to_parse(s, c, r, &tmp, 1, &res);
    if (!body)
        return res;
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_key_len = s->cfg.max_key_bytes;
    lim.max_value_len = s->cfg.max_tag_value_bytes;
    lim.max_tags = s->cfg.max_tags;
    lim.max_metrics = s->cfg.max_fields;
    lim.max_future_ms = s->cfg.max_future_ms;
    lim.max_age_ms = bdb_db_retention_ms(s->db, tenant);
    bdb_devrule rule;
    server_device_rule(s, tenant, &rule);
    lim.rule = &rule;
    lim.device_tag = s->cfg.device_tag;
    bdb_batch *b = bdb_batch_new();
    bdb_json_result jr;
    int prc = b ? bdb_json_ingest((const char *)body->data, body->len, bdb_now_ms(), &lim, b, &jr)
                : BDB_ERR_NOMEM;
    bdb_buf_free(&tmp);
    if (prc == BDB_ERR_NOMEM) { /* nothing of the body is written (alloc.h) */
        bdb_batch_free(b);
        return storage_error(s, c, prc);
    }
    if (prc == BDB_ERR_LIMIT || jr.fatal) {
        bdb_batch_free(b);
        char msg[700];
        snprintf(msg, sizeof msg, "unable to parse JSON body: %s", jr.first_error);
        return respond_json_error(s, c, prc == BDB_ERR_LIMIT ? 413 : 400, msg, 0);
    }
    struct outcome o = {jr.accepted,
                        jr.rejected,
                        jr.first_error,
                        "index",
                        jr.first_bad_index,
                        &s->json_samples,
                        &s->json_reports_accepted,
                        &s->json_reports_rejected,
                        NULL};
    char skipped[256];
    if (jr.strings_skipped) {
        atomic_fetch_add(&s->json_strings_skipped, jr.strings_skipped);
        snprintf(skipped, sizeof skipped, "%zu string metric value(s); first: %s",
                 jr.strings_skipped, jr.first_skipped);
        o.not_stored = skipped;
    }
    res = commit_and_answer(s, c, r, tenant, b, &o, wrc);
    bdb_batch_free(b);
    return res;
}

/* Every write endpoint ends here, whatever it answered: its admission ticket is
 * released once, and the body goes with the reservation that covered it. */
static enum MHD_Result write_done(bdb_server *s, req *r, enum MHD_Result res, int wrc)
{
    bdb_admit_done(s->admit, &r->adm, wrc);
    bdb_buf_free(&r->body);
    return res;
}

enum MHD_Result h_write_lp(bdb_server *s, struct MHD_Connection *c, req *r, int v2)
{
    int wrc = BDB_ERR_INVALID; /* nothing written */
    enum MHD_Result res = write_lp(s, c, r, v2, &wrc);
    return write_done(s, r, res, wrc);
}

enum MHD_Result h_write_json(bdb_server *s, struct MHD_Connection *c, req *r)
{
    int wrc = BDB_ERR_INVALID;
    enum MHD_Result res = write_json(s, c, r, &wrc);
    return write_done(s, r, res, wrc);
}

enum MHD_Result h_influx_v2_query(bdb_server *s, struct MHD_Connection *c)
{
    /* In v2's error shape, which the v2 client libraries read and show. */
    const char body[] =
        "{\"code\":\"not implemented\",\"message\":\"the InfluxDB 2 query API (Flux) is not "
        "served by bucketdb; query with InfluxQL on /query (the InfluxDB 1.x API, "
        "docs/INFLUX.md) or GET /api/v1/query (docs/API.md)\"}\n";
    return respond(s, c, 501, "application/json", body, sizeof body - 1);
}
