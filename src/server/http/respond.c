/* respond: the answer helpers every handler uses: a body with the headers Influx
 * clients look for, JSON errors (also in X-Influxdb-Error), 429/503 with Retry-After,
 * and the refusals of backpressure (docs/TENANCY.md#backpressure). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum MHD_Result respond(bdb_server *s, struct MHD_Connection *c, unsigned status, const char *ctype,
                        const void *body, size_t len)
{
    return respond_hdr(s, c, status, ctype, body, len, NULL, NULL);
}

enum MHD_Result respond_hdr(bdb_server *s, struct MHD_Connection *c, unsigned status,
                            const char *ctype, const void *body, size_t len, const char *hname,
                            const char *hval)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Influxdb-Version", "1.8.10");
    MHD_add_response_header(resp, "X-Influxdb-Build", "OSS");
    MHD_add_response_header(resp, "X-Bucketdb-Version", BDB_VERSION);
    if (status == 503 || status == 429)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (hname && hval)
        MHD_add_response_header(resp, hname, hval);
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    if (status >= 100 && status < 600)
        atomic_fetch_add(&s->http_requests[status / 100], 1);
    return r;
}

enum MHD_Result respond_stored_with_warning(bdb_server *s, struct MHD_Connection *c,
                                            const char *not_stored)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "X-Influxdb-Version", "1.8.10");
    MHD_add_response_header(resp, "X-Influxdb-Build", "OSS");
    MHD_add_response_header(resp, "X-Bucketdb-Version", BDB_VERSION);
    MHD_add_response_header(resp, "X-Bucketdb-Not-Stored", not_stored);
    enum MHD_Result r = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&s->http_requests[2], 1);
    return r;
}

enum MHD_Result respond_retry_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                    int64_t retry_after_s, const char *msg, const void *body,
                                    size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "X-Influxdb-Version", "1.8.10");
    MHD_add_response_header(resp, "X-Influxdb-Build", "OSS");
    MHD_add_response_header(resp, "X-Bucketdb-Version", BDB_VERSION);
    if (msg) {
        /* Influx clients read the reason from this header too; keep it one line. */
        char hdr[512];
        snprintf(hdr, sizeof hdr, "%s", msg);
        for (char *p = hdr; *p; p++)
            if (*p == '\n' || *p == '\r')
                *p = ' ';
        MHD_add_response_header(resp, "X-Influxdb-Error", hdr);
    }
    if (retry_after_s > 0) {
        char ra[24];
        snprintf(ra, sizeof ra, "%lld", (long long)retry_after_s);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&s->http_requests[status / 100], 1);
    return r;
}

enum MHD_Result respond_device_limit(bdb_server *s, struct MHD_Connection *c, int64_t retry_after_s,
                                     const char *msg, const char *tenant, const char *dev,
                                     size_t dlen, const char *limit_name, uint64_t limit,
                                     uint64_t value)
{
    bdb_buf out;
    bdb_buf_init(&out);
    bdb_buf_puts(&out, "{\"error\":\"");
    bdb_buf_json_str(&out, msg, strlen(msg));
    char tname[BDB_TENANT_NAME_MAX + 1]; /* the name, not its storage key */
    tenant = bdb_tenant_key_name(tenant, tname);
    bdb_buf_puts(&out, "\",\"tenant\":\"");
    bdb_buf_json_str(&out, tenant, strlen(tenant));
    bdb_buf_puts(&out, "\",\"device\":\"");
    bdb_buf_json_str(&out, dev, dlen);
    bdb_buf_printf(&out, "\",\"limit\":\"%s\",\"%s\":%llu,\"value\":%llu,\"retry_after\":%lld}\n",
                   limit_name, limit_name, (unsigned long long)limit, (unsigned long long)value,
                   (long long)retry_after_s);
    enum MHD_Result r = respond_retry_error(s, c, 429, retry_after_s, msg, out.data, out.len);
    bdb_buf_free(&out);
    return r;
}

enum MHD_Result respond_body_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, const void *body, size_t len)
{
    return respond_retry_error(s, c, status, status == 503 || status == 429 ? 1 : 0, msg, body,
                               len);
}

enum MHD_Result respond_json_error_close(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                         const char *msg)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_puts(&b, "{\"error\":\"");
    bdb_buf_json_str(&b, msg, strlen(msg));
    bdb_buf_puts(&b, "\"}\n");
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(b.len, b.data, MHD_RESPMEM_MUST_COPY);
    bdb_buf_free(&b);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "X-Influxdb-Version", "1.8.10");
    MHD_add_response_header(resp, "X-Influxdb-Build", "OSS");
    MHD_add_response_header(resp, "X-Bucketdb-Version", BDB_VERSION);
    MHD_add_response_header(resp, "X-Influxdb-Error", msg);
    /* libmicrohttpd closes the connection after a response carrying this header */
    MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result r = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&s->http_requests[status / 100], 1);
    return r;
}

enum MHD_Result respond_json_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, int influx)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_puts(&b, "{\"error\":\"");
    bdb_buf_json_str(&b, msg, strlen(msg));
    bdb_buf_puts(&b, "\"}\n");
    enum MHD_Result r = respond_body_error(s, c, status, influx ? msg : NULL, b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

const char *arg(struct MHD_Connection *c, const char *name)
{
    return form_arg_or(MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name), name);
}

int count_param(const char *v, uint64_t max, uint64_t *out)
{
    if (!v || !isdigit((unsigned char)*v)) /* strtoull would take " 5", "+5" and "-5" */
        return -1;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end || errno || n > max)
        return -1;
    *out = n;
    return 0;
}

int time_param(bdb_server *s, struct MHD_Connection *c, const char *name, int64_t *out,
               enum MHD_Result *r)
{
    const char *v = arg(c, name);
    if (!v || !*v)
        return 0;
    int rc = bdb_parse_query_time(v, out);
    if (rc == BDB_OK)
        return 1;
    char msg[300];
    if (rc == BDB_ERR_LIMIT) {
        char lo[40], hi[40];
        bdb_format_time_ms(BDB_QT_MIN_MS, lo, sizeof lo);
        bdb_format_time_ms(BDB_QT_MAX_MS, hi, sizeof hi);
        snprintf(msg, sizeof msg, "'%s' is outside the supported time range %lld..%lld ms (%s..%s)",
                 name, (long long)BDB_QT_MIN_MS, (long long)BDB_QT_MAX_MS, lo, hi);
    } else {
        snprintf(msg, sizeof msg,
                 "invalid '%s': use RFC 3339 (2024-01-15T14:00:00Z) or Unix milliseconds", name);
    }
    *r = respond_json_error(s, c, 400, msg, 0);
    return -1;
}

enum MHD_Result respond_backpressure(bdb_server *s, struct MHD_Connection *c,
                                     enum bdb_bp_reason why, const char *tenant)
{
    bdb_bp_stats st;
    bdb_bp_get_stats(s->bp, &st);
    const bdb_config *cf = &s->cfg;
    unsigned share = (unsigned)cf->tenant_inflight_share;
    int64_t retry = bdb_bp_retry_after(why);
    char msg[600];
    switch (why) {
    case BDB_BP_TENANT_BYTES:
        snprintf(msg, sizeof msg,
                 "too much in flight for tenant '%s': its requests may hold %llu bytes at once "
                 "(tenant_inflight_share %u%% of max_inflight_bytes %llu); nothing of this "
                 "request was written; retry after %lld s",
                 tenant ? tenant : "",
                 (unsigned long long)bdb_bp_share(cf->max_inflight_bytes, share), share,
                 (unsigned long long)cf->max_inflight_bytes, (long long)retry);
        break;
    case BDB_BP_TENANT_WRITES:
        snprintf(msg, sizeof msg,
                 "too much in flight for tenant '%s': it may have %llu write requests in flight "
                 "(tenant_inflight_share %u%% of max_inflight_writes %d); nothing of this "
                 "request was written; retry after %lld s",
                 tenant ? tenant : "",
                 (unsigned long long)bdb_bp_share((uint64_t)cf->max_inflight_writes, share), share,
                 cf->max_inflight_writes, (long long)retry);
        break;
    case BDB_BP_INFLIGHT_WRITES:
        snprintf(msg, sizeof msg,
                 "server overloaded: %llu write requests in flight (max_inflight_writes %d); "
                 "nothing of this request was written; retry after %lld s",
                 (unsigned long long)st.writes, cf->max_inflight_writes, (long long)retry);
        break;
    case BDB_BP_HEAD_MEMORY:
        snprintf(msg, sizeof msg,
                 "server overloaded: the storage head holds %llu bytes, more than %d x "
                 "head_max_bytes %llu (flushing to disk is behind); nothing of this request was "
                 "written; retry after %lld s",
                 (unsigned long long)bdb_db_head_bytes(s->db), BDB_BP_HEAD_FACTOR,
                 (unsigned long long)cf->head_max_bytes, (long long)retry);
        break;
    default:
        snprintf(msg, sizeof msg,
                 "server overloaded: requests in flight hold %llu bytes (max_inflight_bytes "
                 "%llu); nothing of this request was written; retry after %lld s",
                 (unsigned long long)st.bytes, (unsigned long long)cf->max_inflight_bytes,
                 (long long)retry);
        break;
    }
    unsigned status = bdb_bp_status(why);
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_puts(&b, "{\"error\":\"");
    bdb_buf_json_str(&b, msg, strlen(msg));
    bdb_buf_printf(&b, "\",\"reason\":\"%s\",\"retry_after\":%lld", bdb_bp_reason_name(why),
                   (long long)retry);
    if (status == 429 && tenant) {
        char tname[BDB_TENANT_NAME_MAX + 1];
        tenant = bdb_tenant_key_name(tenant, tname);
        bdb_buf_puts(&b, ",\"tenant\":\"");
        bdb_buf_json_str(&b, tenant, strlen(tenant));
        bdb_buf_putc(&b, '"');
    }
    bdb_buf_puts(&b, "}\n");
    enum MHD_Result r = respond_retry_error(s, c, status, retry, msg, b.data, b.len);
    bdb_buf_free(&b);
    return r;
}
