/* server: lifecycle, routing and admission (who is asking: server_auth.c; the answer
 * helpers: respond.c). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "server/admin_token.h"
#include "common/rcache.h"
#include "common/timeutil.h"
#include "server/http/conn_guard.h"
#include "server/admission/devlimit.h"
#include "server/mqtt/mqtt_gw.h"
#include "storage/backend.h" /* storage: embedded or cassandra:// */
#include "storage/embedded/fleet/db_fleet.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs_fault.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const double hist_bounds[HIST_NB] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                     0.05,   0.1,   0.25,   0.5,   1.0,  2.5};

void hist_observe(hist *h, uint64_t us)
{
    double s = (double)us / 1e6;
    int i = 0;
    while (i < HIST_NB && s > hist_bounds[i])
        i++;
    atomic_fetch_add(&h->b[i], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_us, us);
}

uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

int req_bp_grow(bdb_server *s, req *r, uint64_t bytes)
{
    enum bdb_bp_reason why = bdb_bp_grow(s->bp, &r->adm.bp, bytes, bdb_monotonic_ms());
    if (why == BDB_BP_NONE)
        return 0;
    r->bp_refused = why;
    return -1;
}

static enum MHD_Result h_ping(bdb_server *s, struct MHD_Connection *c)
{
    const char *v = arg(c, "verbose");
    if (v && (!strcmp(v, "true") || !strcmp(v, "1"))) {
        const char body[] = "{\"version\":\"1.8.10\",\"bucketdb\":\"" BDB_VERSION "\"}\n";
        return respond(s, c, 200, "application/json", body, sizeof body - 1);
    }
    return respond(s, c, 204, NULL, "", 0);
}

static enum MHD_Result h_flush(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result r;
    req_ident id;
    if (req_auth(s, c, &id, &r) != 0)
        return r;
    if (id.who == WHO_TENANT) { /* it acts on every tenant: an operator's operation */
        atomic_fetch_add(&s->forbidden, 1);
        return respond_json_error(s, c, 403, "forbidden: /internal/flush needs the admin token", 0);
    }
    int rc = bdb_db_flush(s->db);
    if (rc == BDB_OK)
        rc = bdb_db_maintain(s->db);
    if (rc != BDB_OK)
        return respond_json_error(s, c, 500, bdb_strerror(rc), 0);
    return respond(s, c, 204, NULL, "", 0);
}

/* test_faults only (tests/integration/test_mqtt_checks.py): POST /internal/fault
 * makes every later counted call of the engine's storage (write, sync, rename,
 * unlink, truncate, create) fail with EIO, as a disk that died: the next write fails
 * and the engine turns read-only. Only a restart heals it. Admin token. */
static enum MHD_Result h_fault(bdb_server *s, struct MHD_Connection *c)
{
    enum MHD_Result r;
    req_ident id;
    if (req_auth(s, c, &id, &r) != 0)
        return r;
    if (id.who == WHO_TENANT) {
        atomic_fetch_add(&s->forbidden, 1);
        return respond_json_error(s, c, 403, "forbidden: /internal/fault needs the admin token", 0);
    }
    uint64_t n = bdb_vfs_fault_calls(s->fault_vfs) + 1;
    bdb_vfs_fault_fail_at(s->fault_vfs, n, EIO, 1);
    BDB_WARN("test_faults: storage calls from number %llu on fail with EIO", (unsigned long long)n);
    char body[64];
    int len = snprintf(body, sizeof body, "{\"fail_from_call\":%llu}\n", (unsigned long long)n);
    return respond(s, c, 200, "application/json", body, (size_t)len);
}

/* test_faults: the engine's VFS goes after the engine (bdb_db_close). */
static void fault_vfs_free(bdb_server *s)
{
    if (s->fault_vfs)
        bdb_vfs_fault_free(s->fault_vfs);
    s->fault_vfs = NULL;
}

/* the dashboard's static files (h_ui.c) */
enum MHD_Result h_ui(bdb_server *s, struct MHD_Connection *c, const char *url, const char *method);

static enum MHD_Result dispatch(bdb_server *s, struct MHD_Connection *c, const char *url,
                                const char *method, req *r)
{
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int post = !strcmp(method, "POST");
    if (r->bp_refused != BDB_BP_NONE)
        return respond_backpressure(s, c, r->bp_refused,
                                    r->adm.bp.tenant[0] ? r->adm.bp.tenant : NULL);
    if (r->too_large) {
        atomic_fetch_add(&s->body_too_large, 1);
        char msg[160];
        snprintf(msg, sizeof msg, "request entity too large: body exceeds max-body-bytes %zu",
                 s->cfg.max_body_bytes);
        return respond_json_error(s, c, 413, msg, 1);
    }
    if (!strcmp(url, "/write") || !strcmp(url, "/api/v2/write")) {
        if (!post)
            return respond_json_error(s, c, 405, "use POST", 1);
        return h_write_lp(s, c, r, url[1] == 'a');
    }
    if (!strcmp(url, "/api/v1/write/json")) {
        if (!post)
            return respond_json_error(s, c, 405, "use POST", 0);
        return h_write_json(s, c, r);
    }
    if (!strcmp(url, "/ping"))
        return h_ping(s, c);
    if (!strcmp(url, "/query"))
        return h_influx_query(s, c, r);
    if (!strcmp(url, "/api/v2/query"))
        return h_influx_v2_query(s, c);
    if (!strncmp(url, "/prometheus/", 12)) /* Prometheus' query API (h_prom.c) */
        return h_prom(s, c, url + 11, method);
    if (!strcmp(url, "/api/v1/query")) {
        if (!get)
            return respond_json_error(s, c, 405, "use GET", 0);
        return h_query(s, c);
    }
    if (!strcmp(url, "/api/v1/late")) /* late data (h_query.c) */
        return get ? h_late(s, c) : respond_json_error(s, c, 405, "use GET", 0);
    if (!strcmp(url, "/api/v1/devices") || !strncmp(url, "/api/v1/devices/", 16))
        return h_devices(s, c, url + 15, method);
    if (!strncmp(url, "/api/v1/state/", 14)) /* state: current state (h_state.c) */
        return h_state(s, c, url + 14, method);
    if (!strncmp(url, "/api/v1/fleet", 13) && (!url[13] || url[13] == '/'))
        return h_fleet(s, c, url + 13, method); /* fleet aggregates (h_fleet.c) */
    if (!strcmp(url, "/api/v1/export")) {
        if (!get)
            return respond_json_error(s, c, 405, "use GET", 0);
        return h_export(s, c);
    }
    if (!strcmp(url, "/api/v1/admin") || !strncmp(url, "/api/v1/admin/", 14))
        return h_admin(s, c, url + 13, method, r);
    if (!strcmp(url, "/health"))
        return h_health(s, c);
    if (!strcmp(url, "/metrics")) {
        enum MHD_Result mr;
        if (metrics_gate(s, c, &mr) != 0) /* metrics_auth */
            return mr;
        return h_metrics(s, c);
    }
    if (!strcmp(url, "/api/v1/partitions/hot")) { /* hot partitions (h_partitions.c) */
        if (!get)
            return respond_json_error(s, c, 405, "use GET", 0);
        return h_partitions_hot(s, c);
    }
    if (!strcmp(url, "/api/v1/telemetry_by_tenant")) {
        if (!get)
            return respond_json_error(s, c, 405, "use GET", 0);
        return h_telemetry_by_tenant(s, c);
    }
    if (!strcmp(url, "/internal/clock") && s->cfg.test_clock) { /* tests only */
        if (!post)
            return respond_json_error(s, c, 405, "use POST", 0);
        return h_clock(s, c);
    }
    if (!strcmp(url, "/internal/fault") && s->fault_vfs) { /* test_faults only */
        if (!post)
            return respond_json_error(s, c, 405, "use POST", 0);
        return h_fault(s, c);
    }
    if (!strcmp(url, "/internal/flush")) {
        if (!post)
            return respond_json_error(s, c, 405, "use POST", 0);
        return h_flush(s, c);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/ui") || !strncmp(url, "/ui/", 4)) /* dashboard */
        return h_ui(s, c, url, method);
    char msg[300];
    snprintf(msg, sizeof msg, "no such endpoint: %s %.200s", method, url);
    return respond_json_error(s, c, 404, msg, 0);
}

static int is_write_path(const char *url)
{
    return !strcmp(url, "/write") || !strcmp(url, "/api/v2/write") ||
           !strcmp(url, "/api/v1/write/json");
}

struct framing {
    int ncl, nte;
    const char *te;
};

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    struct framing *f = cls;
    if (!strcasecmp(key, "Content-Length"))
        f->ncl++;
    else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->nte++;
        f->te = value;
    }
    return MHD_YES;
}

/* RFC 9112 section 6.3: a body whose length two headers state differently is read
 * one way by us and maybe another way by a proxy in front, which lets a client hide a
 * request inside another (request smuggling). libmicrohttpd takes the first
 * Content-Length, prefers chunked over Content-Length and reads a Transfer-Encoding
 * other than exactly "chunked" as no encoding: refuse all of these and close. 0 when
 * the framing is sound, else -1 with the answer queued in *res. */
static int check_framing(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *res)
{
    struct framing f = {0, 0, NULL};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &f);
    if (f.ncl > 1) {
        *res = respond_json_error_close(s, c, 400, "more than one Content-Length header");
        return -1;
    }
    if (f.nte > 1 || (f.nte && f.ncl)) {
        *res = respond_json_error_close(
            s, c, 400,
            f.ncl ? "both Content-Length and Transfer-Encoding: send one of them"
                  : "more than one Transfer-Encoding header");
        return -1;
    }
    if (f.nte && strcasecmp(f.te, "chunked")) {
        *res =
            respond_json_error_close(s, c, 501, "unsupported Transfer-Encoding (only chunked is)");
        return -1;
    }
    return 0;
}

/* First call for a request, headers in, body not read yet: the framing, the body
 * size, and admission against the in-flight budgets and the head guard
 * (backpressure.h). A body over max_body_bytes by its Content-Length, or with unsound
 * framing, is answered at once and the connection closed, without reading it (a
 * client that sent "Expect: 100-continue" gets that answer instead of 100). A request
 * refused by backpressure has its body read and dropped, never buffered, and is
 * answered at the end, or at once after "Expect: 100-continue". */
static enum MHD_Result admit(bdb_server *s, struct MHD_Connection *c, const char *url,
                             const char *method, req *r)
{
    r->bp_refused = BDB_BP_NONE;
    enum MHD_Result res;
    if (check_framing(s, c, &res) != 0) {
        r->answered = r->too_large = 1; /* too_large: any body that still comes is dropped */
        return res;
    }
    const char *cls = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    /* libmicrohttpd has checked the digits and answered 413 itself past 64 bits */
    unsigned long long cl = cls ? strtoull(cls, NULL, 10) : 0;
    if (cl > s->cfg.max_body_bytes) {
        r->answered = r->too_large = 1;
        atomic_fetch_add(&s->body_too_large, 1);
        char msg[160];
        snprintf(msg, sizeof msg, "request entity too large: body exceeds max-body-bytes %zu",
                 s->cfg.max_body_bytes);
        return respond_json_error_close(s, c, 413, msg);
    }
    int write = !strcmp(method, "POST") && is_write_path(url);
    if (!write && cl == 0 && !te)
        return MHD_YES; /* no body, no write: nothing to hold */
    char tenant[BDB_TENANT_NAME_MAX + 1] = "";
    if (write && req_peek_tenant(s, c, !strcmp(url, "/api/v2/write"), tenant) != 0)
        tenant[0] = '\0'; /* refused later (401/400): only the server-wide budgets apply */
    enum bdb_bp_reason why = write
                                 ? bdb_admit_reserve(s->admit, &r->adm, tenant, cl)
                                 : bdb_bp_admit(s->bp, &r->adm.bp, NULL, cl, 0, bdb_monotonic_ms());
    if (why == BDB_BP_NONE) {
        r->parse_reserved = write ? cl * BDB_BP_PARSE_FACTOR : 0;
        if (cl) { /* the body's buffer, exactly as reserved */
            r->body.data = malloc(cl);
            if (!r->body.data)
                abort();
            r->body.cap = cl;
        }
        return MHD_YES;
    }
    r->bp_refused = why;
    snprintf(r->adm.bp.tenant, sizeof r->adm.bp.tenant, "%s", tenant);
    const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
    if (expect && !strcasecmp(expect, "100-continue")) {
        r->answered = 1;
        return respond_backpressure(s, c, why, tenant[0] ? tenant : NULL);
    }
    return MHD_YES;
}

/* Appends a piece of the body, growing the buffer (and the reservation) only when a
 * body is longer than its Content-Length said or has none (chunked). */
static void body_append(bdb_server *s, req *r, const char *data, size_t n)
{
    if (r->too_large || r->bp_refused != BDB_BP_NONE)
        return; /* dropped */
    if (r->body.len + n > s->cfg.max_body_bytes) {
        r->too_large = 1;
        bdb_buf_free(&r->body);
        return;
    }
    if (!r->adm.bp.admitted) /* a body nobody announced: account it from here on */
        bdb_bp_admit(s->bp, &r->adm.bp, NULL, 0, 0, bdb_monotonic_ms());
    if (r->body.len + n > r->body.cap) {
        size_t want = r->body.cap < 65536 ? 65536 : r->body.cap * 2;
        if (want < r->body.len + n)
            want = r->body.len + n;
        if (want > s->cfg.max_body_bytes)
            want = s->cfg.max_body_bytes;
        if (req_bp_grow(s, r, want - r->body.cap) != 0) {
            /* over the budget mid-body: drop what we have, answer at the end */
            bdb_buf_free(&r->body);
            bdb_bp_release(s->bp, &r->adm.bp);
            r->parse_reserved = 0;
            return;
        }
        uint8_t *p = realloc(r->body.data, want);
        if (!p)
            abort();
        r->body.data = p;
        r->body.cap = want;
    }
    memcpy(r->body.data + r->body.len, data, n);
    r->body.len += n;
}

/* The slow-client guard's record of a connection (on_connection), or NULL. */
static bdb_guarded *guarded(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    bdb_server *s = cls;
    req *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->start_us = now_us();
        *con_cls = r;
        bdb_conn_guard_body_start(s->guard, guarded(c));
        return admit(s, c, url, method, r);
    }
    if (*upload_size) {
        atomic_fetch_add(&s->bytes_received, *upload_size);
        bdb_conn_guard_body_bytes(s->guard, guarded(c), *upload_size);
        body_append(s, r, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    bdb_conn_guard_answering(s->guard, guarded(c));
    if (r->answered)
        return MHD_YES;
    if (!r->too_large && r->bp_refused == BDB_BP_NONE && form_query_request(c, url, method)) {
        /* a query POSTed as a form: its parameters are the body's (form.c) */
        if (form_parse(r) != 0)
            return respond_json_error(s, c, 503, "out of memory reading the form", 0);
        form_current(&r->form);
        enum MHD_Result res = dispatch(s, c, url, "GET", r);
        form_current(NULL);
        return res;
    }
    return dispatch(s, c, url, method, r);
}

/* Connections opened and closed: the slow-client guard follows each one. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    bdb_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? bdb_conn_guard_open(s->guard, ci->connect_fd) : NULL;
    } else {
        bdb_conn_guard_close(s->guard, *socket_context);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    bdb_server *s = cls;
    (void)toe;
    bdb_conn_guard_idle(s->guard, guarded(c)); /* the next request's headers from now */
    req *r = *con_cls;
    if (r) {
        /* a write handler released its ticket (bdb_admit_done); this is what any other
         * request holds, and a write refused before its handler ran */
        bdb_bp_release(s->bp, &r->adm.bp);
        bdb_buf_free(&r->body);
        form_free(r);
        free(r);
        *con_cls = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    BDB_DEBUG("http: %s", msg);
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, socklen_t *len,
                        int *loopback)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    if (!colon)
        return -1;
    size_t hl = (size_t)(colon - listen);
    if (hl >= sizeof host)
        return -1;
    memcpy(host, listen, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai;
    if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) != 0)
        return -1;
    memcpy(ss, ai->ai_addr, ai->ai_addrlen);
    *len = ai->ai_addrlen;
    if (ai->ai_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ai->ai_addr;
        *loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (ai->ai_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ai->ai_addr;
        *loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    } else {
        *loopback = 0;
    }
    freeaddrinfo(ai);
    return 0;
}

int bdb_server_check_listen(const bdb_config *cfg, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    int loopback;
    if (parse_listen(cfg->listen, &ss, &sslen, &loopback) != 0) {
        snprintf(err, errlen, "listen: cannot resolve '%s' (expected host:port)", cfg->listen);
        return BDB_ERR_INVALID;
    }
    if (!loopback && !strcmp(cfg->auth, "off") && !cfg->allow_insecure_listen) {
        snprintf(err, errlen,
                 "refusing to listen on %s, which is not a loopback address, with auth = off: "
                 "anyone who can reach it could read and write every tenant. Use auth = auto "
                 "or on, or accept the risk with --allow-insecure-listen "
                 "(allow_insecure_listen = true)",
                 cfg->listen);
        return BDB_ERR_INVALID;
    }
    return BDB_OK;
}

/* The TTL given to a deleted tenant's data (a generation of its name older than the
 * current one, tenants_gen.c): 1 ms, so retention treats all of it (but what is
 * dated in the future, until then) as expired: reads skip it and maintenance deletes
 * or rewrites away its blocks, the same way as any expired data; the rest goes by
 * the purge (tenants_purge.h). */
#define DELETED_TTL_MS 1

/* A tenant's own raw-data TTL for the engine (db.h tenant_retention): 0 when it has
 * none or is not registered, which means the server's retention_ms. */
static int64_t tenant_ttl(void *ctx, const char *tenant)
{
    bdb_tenant_info ti;
    if (bdb_tenants_key_deleted(ctx, tenant))
        return DELETED_TTL_MS;
    return bdb_tenants_get(ctx, tenant, &ti) == BDB_OK ? ti.retention_ms : 0;
}

/* The backlog the Cassandra writer row publishes (bdb_backend_set_reporter): the WAL
 * on disk, which with a sink holds what was acknowledged and not yet confirmed. */
static uint64_t server_backlog(void *ctx)
{
    bdb_db_stats st;
    bdb_db_get_stats(((bdb_server *)ctx)->db, &st);
    return st.wal.bytes_on_disk;
}

/* A tenant's own rollup tier TTL (db_tier.h retention hook), else the server's. */
static int64_t tenant_tier_ttl(void *ctx, const char *tenant, enum bdb_res res, int64_t dflt)
{
    if (bdb_tenants_key_deleted(ctx, tenant))
        return DELETED_TTL_MS;
    return bdb_tenants_tier_retention(ctx, tenant, (int)res - 1, dflt);
}

int bdb_server_start(const bdb_config *cfg, bdb_server **out)
{
    char lerr[512];
    if (bdb_server_check_listen(cfg, lerr, sizeof lerr) != BDB_OK) {
        BDB_ERROR("%s", lerr);
        return BDB_ERR_INVALID;
    }
#ifdef __GLIBC__
    /* Memory freed by a request goes back to the system, so the resident size follows
     * the in-flight budgets (docs/TENANCY.md#backpressure): buffers from 128 KiB up
     * (bodies, batches) are always mapped and unmapped, instead of glibc raising that
     * threshold after the first large free and keeping such buffers in its heaps; and
     * the connection threads share a few heaps instead of up to 8 per core. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_ARENA_MAX, 4);
#endif
    bdb_server *s = calloc(1, sizeof *s);
    if (!s)
        return BDB_ERR_NOMEM;
    s->cfg = *cfg;
    s->start_ms = bdb_now_ms();
    struct sockaddr_storage ss;
    socklen_t sslen;
    int loopback;
    if (parse_listen(cfg->listen, &ss, &sslen, &loopback) != 0) {
        BDB_ERROR("listen: cannot resolve '%s' (expected host:port)", cfg->listen);
        free(s);
        return BDB_ERR_INVALID;
    }
    s->auth_required = !strcmp(cfg->auth, "on") || (!strcmp(cfg->auth, "auto") && !loopback);
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = cfg->data;
    o.sync_mode = !strcmp(cfg->sync, "periodic") ? BDB_WAL_SYNC_PERIODIC : BDB_WAL_SYNC_BATCH;
    o.periodic_ms = (int)cfg->sync_interval_ms;
    o.wal_segment_bytes = cfg->wal_segment_bytes;
    o.block_window_ms = cfg->block_window_ms;
    o.flush_interval_ms = cfg->flush_interval_ms;
    o.head_max_bytes = cfg->head_max_bytes;
    o.disk_reserve_bytes = cfg->disk_reserve_bytes;
    o.read_cache_bytes = cfg->read_cache_bytes;
    /* config: 0 = keep forever; the engine's 0 means its default, < 0 forever */
    const int64_t tiers[3] = {cfg->tier_retention_1m, cfg->tier_retention_1h,
                              cfg->tier_retention_1d};
    for (int i = 0; i < 3; i++)
        o.tier_retention_ms[i] = tiers[i] > 0 ? tiers[i] : -1;
    char terr[600];
    int rc;
    o.retention_ms = cfg->retention_ms;
    o.clock = server_clock(s);       /* hot partitions: test_clock makes it settable */
    o.tenant_retention = tenant_ttl; /* its ctx: the registry, opened below */
    /* late data (db_tier_late.c) */
    o.late_threshold_ms = cfg->late_threshold;
    if (cfg->test_faults) { /* tests only: POST /internal/fault (h_fault) */
        s->fault_vfs = bdb_vfs_fault_new(bdb_vfs_posix(), 1);
        o.vfs = s->fault_vfs;
        BDB_WARN("test_faults is on: POST /internal/fault can make this server's storage fail; "
                 "never use it in production");
    }
    /* storage: the sink flushed data goes to, none for the embedded engine */
    rc = bdb_backend_open(cfg->storage, cfg->data, BDB_TENANT_NAME_MAX, cfg->max_key_bytes, &o.sink,
                          terr, sizeof terr);
    if (rc != BDB_OK) {
        BDB_ERROR("storage: %s", terr);
        /* the keyspace is another directory's or another server's: a configuration to
         * change, not the data directory's lock (which BDB_ERR_EXISTS tells serve) */
        if (rc == BDB_ERR_EXISTS)
            rc = BDB_ERR_INVALID;
        fault_vfs_free(s);
        free(s);
        return rc;
    }
    if (o.sink)
        BDB_INFO("storage: %s", o.sink->ops->describe(o.sink));
    /* The tenant registry, kept in the backend too when it takes documents (Cassandra:
     * a node that lost its data directory gets its tenants and tokens back). Opened
     * after the backend, before the engine. */
    rc = bdb_tenants_open_store(cfg->data, o.sink, bdb_backend_offline_start(cfg->storage),
                                &s->tenants, terr, sizeof terr);
    if (rc != BDB_OK) {
        if (rc == BDB_ERR_CORRUPT && !(o.sink && o.sink->ops->doc_get))
            BDB_ERROR("tenant registry: %s. Restore the file from a backup, or move it aside "
                      "and create the tenants again (their tokens change)",
                      terr);
        else
            BDB_ERROR("tenant registry: %s", terr[0] ? terr : bdb_strerror(rc));
        if (o.sink)
            o.sink->ops->close(o.sink);
        fault_vfs_free(s);
        free(s);
        return rc;
    }
    /* The registry is open before the engine, whose flush and maintenance threads ask
     * it for each tenant's TTL from the start. */
    o.tenant_retention_ctx = s->tenants;
    rc = bdb_db_open(&o, &s->db);
    if (rc != BDB_OK) {
        if (o.sink) /* storage: a failed open leaves the sink to us */
            o.sink->ops->close(o.sink);
        BDB_ERROR("cannot open data directory %s: %s", cfg->data, bdb_strerror(rc));
        bdb_tenants_close(s->tenants);
        fault_vfs_free(s);
        free(s);
        return rc;
    }
    bdb_db_tier_set_retention_hook(s->db, tenant_tier_ttl, s->tenants); /* tier TTL per tenant */
    bdb_db_fleet_attach(s->db); /* fleet: late recomputes reach the fleet tables (db_fleet.h) */
    /* the admin token: the keyspace's where the backend keeps documents */
    rc = bdb_admin_token_open(cfg->data, o.sink, s->token, s->admin_hash, terr, sizeof terr);
    if (rc != BDB_OK) {
        if (rc == BDB_ERR_IO)
            BDB_ERROR("cannot read or create the token file in %s: %s", cfg->data, strerror(errno));
        else
            BDB_ERROR("admin token: %s", terr);
        bdb_db_close(s->db);
        bdb_tenants_close(s->tenants);
        fault_vfs_free(s);
        free(s);
        return rc;
    }
    /* device profiles: in the backend too when it keeps documents, as the tenants */
    rc = bdb_devlimit_open_store(cfg->data, o.sink, cfg->device_limiter_idle, &s->devlimit, terr,
                                 sizeof terr);
    if (rc != BDB_OK) {
        BDB_ERROR("device profiles: %s", terr[0] ? terr : bdb_strerror(rc));
        bdb_tenants_close(s->tenants);
        bdb_db_close(s->db);
        fault_vfs_free(s);
        free(s);
        return rc;
    }
    hot_start(s);                                  /* hot partitions (h_partitions.c) */
    s->purge = bdb_purge_start(s->tenants, s->db); /* deleted tenants' data */
    if (!s->purge)
        BDB_ERROR("cannot start the purge of deleted tenants' data: their data stays "
                  "unreachable until a start succeeds");
    s->pool = bdb_pool_new(cfg->query_workers);
    if (cfg->catalog_cache_bytes && !(s->catalogs = bdb_rcache_new(cfg->catalog_cache_bytes)))
        abort(); /* the server's policy on allocation failure (docs/RELIABILITY.md) */
    if (cfg->group_cache_bytes && !(s->groups = bdb_rcache_new(cfg->group_cache_bytes)))
        abort();
    bdb_bp_limits bl = {cfg->max_inflight_bytes, (uint64_t)cfg->max_inflight_writes,
                        (unsigned)cfg->tenant_inflight_share};
    s->bp = bdb_bp_new(&bl);
    if (!s->bp)
        abort();
    bdb_admit_env ae = {s->tenants,
                        s->db,
                        s->bp,
                        s->devlimit,
                        s->hot,
                        hot_policy_of,
                        s,
                        cfg->head_max_bytes,
                        cfg->partition_warn_bytes};
    s->admit = bdb_admit_new(&ae);
    if (!s->admit)
        abort();
    s->guard = bdb_conn_guard_start(cfg->http_header_timeout, cfg->http_body_min_rate);
    if (!s->guard)
        abort();
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &ss, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->http_threads_max, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)300, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->mhd) {
        BDB_ERROR("cannot listen on %s: %s", cfg->listen, strerror(errno));
        bdb_conn_guard_stop(s->guard);
        bdb_pool_free(s->pool);
        bdb_rcache_free(s->catalogs);
        bdb_rcache_free(s->groups);
        bdb_bp_free(s->bp);
        bdb_admit_free(s->admit);
        bdb_tenants_close(s->tenants);
        bdb_devlimit_free(s->devlimit);
        hot_stop(s);
        bdb_purge_stop(s->purge);
        bdb_db_close(s->db);
        fault_vfs_free(s);
        free(s);
        return BDB_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : 0;
    struct bdb_mqtt_gw *gw = NULL;
    if (bdb_mqtt_gw_start(s, &gw) != BDB_OK) {
        bdb_server_stop(s);
        return BDB_ERR_INVALID;
    }
    atomic_store(&s->mqtt, gw);
    /* the writer row's report (cluster status): set once nothing here can fail, so
     * that every path that closes the engine has cleared it first (bdb_server_stop) */
    s->sink = o.sink;
    char listen[300];
    const char *colon = strrchr(cfg->listen, ':');
    snprintf(listen, sizeof listen, "%.*s:%d", colon ? (int)(colon - cfg->listen) : 0, cfg->listen,
             s->port);
    bdb_backend_set_reporter(cfg->storage, s->sink, listen, server_backlog, s);
    *out = s;
    return BDB_OK;
}

int bdb_server_port(const bdb_server *s)
{
    return s->port;
}

const char *bdb_server_token(const bdb_server *s)
{
    return s->token;
}

int bdb_server_auth_required(const bdb_server *s)
{
    return s->auth_required;
}

int bdb_server_stop(bdb_server *s)
{
    if (!s)
        return BDB_OK;
    bdb_mqtt_gw_stop(atomic_load(&s->mqtt)); /* between messages: nothing half-written */
    /* Stop accepting first, let in-flight requests finish, then close storage. */
    MHD_stop_daemon(s->mhd);
    bdb_conn_guard_stop(s->guard); /* after the daemon: no connection is left */
    bdb_pool_free(s->pool);
    bdb_rcache_free(s->catalogs);
    bdb_rcache_free(s->groups);
    bdb_bp_free(s->bp);
    hot_stop(s);
    bdb_purge_stop(s->purge); /* a drop running ends first */
    bdb_backend_set_reporter(s->cfg.storage, s->sink, NULL, NULL, NULL); /* before db goes */
    int rc = bdb_db_close(s->db);
    fault_vfs_free(s);
    bdb_tenants_close(s->tenants);
    bdb_devlimit_free(s->devlimit);
    bdb_admit_free(s->admit);
    free(s);
    return rc;
}
