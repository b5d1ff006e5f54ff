/* Private to src/server: the server object, request context and response helpers. */
#ifndef BDB_SERVER_INT_H
#define BDB_SERVER_INT_H

#include "common/buf.h"
#include "query/pool.h"
#include "server/admission/admit.h"
#include "server/admission/backpressure.h"
#include "server/config.h"
#include "server/server.h"
#include "server/tenants/tenants.h"
#include "server/tenants/tenants_purge.h"
#include "storage/embedded/core/db.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* An answer built while the storage backend (a sink: Cassandra) could not be read
 * holds only what the head and the local files hold; it says so with this header and
 * with "partial": true, "partial_reason" in its JSON (docs/API.md#partial-answers). */
#define H_PARTIAL_HEADER "X-Bucketdb-Partial"
#define H_PARTIAL_REASON "sink unavailable"
/* The last line of an export stream that could not complete (h_export.c); the CLI's
 * export and import look for it (src/cli/xfer.h has the same text). */
#define EXPORT_ERROR_MARK "# bucketdb-export-error: "

/* Latency histogram with fixed Prometheus buckets (seconds). */
#define HIST_NB 12
typedef struct hist {
    _Atomic uint64_t b[HIST_NB + 1]; /* last = +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_us;
} hist;
extern const double hist_bounds[HIST_NB];
void hist_observe(hist *h, uint64_t us);

struct bdb_server {
    bdb_config cfg;
    /* MQTT gateway (mqtt_gw.h); NULL when off. Atomic: it starts after the HTTP
     * daemon, whose /metrics reads it. */
    struct bdb_mqtt_gw *_Atomic mqtt;
    bdb_db *db;
    struct bdb_sink *sink; /* the backend's (storage/backend.h), owned by db; NULL embedded */
    bdb_pool *pool;
    struct bdb_rcache *catalogs; /* InfluxQL's tenant catalogs (NULL: off) */
    struct bdb_rcache *groups;   /* settled group windows, PromQL steps (NULL: off) */
    struct MHD_Daemon *mhd;
    struct bdb_conn_guard *guard; /* slow clients' deadlines (conn_guard.h) */
    int port;
    int auth_required;
    char token[65]; /* the admin token (<data>/token) */
    uint8_t admin_hash[BDB_HASH_BYTES];
    bdb_tenants *tenants;          /* registry, <data>/tenants */
    struct bdb_purge *purge;       /* deleted tenants' data removal (tenants_purge.h) */
    struct bdb_devlimit *devlimit; /* device profiles and limiter (devlimit.h) */
    bdb_admit *admit;              /* the admission of every write (admit.h) */
    int64_t start_ms;
    /* counters for /metrics */
    _Atomic uint64_t http_requests[6]; /* by status class 1xx..5xx, [0] unused */
    _Atomic uint64_t lp_lines_accepted, lp_lines_rejected, lp_samples;
    _Atomic uint64_t lp_strings_skipped;   /* string fields other than state, not stored */
    _Atomic uint64_t json_strings_skipped; /* string metric values of JSON reports */
    _Atomic uint64_t json_reports_accepted, json_reports_rejected, json_samples;
    _Atomic uint64_t body_too_large, auth_failures, bytes_received;
    _Atomic uint64_t forbidden; /* 403: a tenant token naming another tenant */
    _Atomic uint64_t queries, query_samples;
    _Atomic uint64_t write_failures;
    hist write_latency, query_latency, batch_size;
    /* in-flight budgets and the head guard (backpressure.h) */
    bdb_bp *bp;
    /* ingestion by tenants that are not registered (one "(other)" label) */
    _Atomic uint64_t other_samples, other_write_requests;
    /* hot partitions (hotpart.h, h_partitions.c) */
    struct bdb_hotpart *hot;
    _Atomic int64_t test_now_ms; /* test_clock: the wall clock while non-zero */
    struct bdb_vfs *fault_vfs;   /* test_faults: the engine's VFS (vfs_fault.h); else NULL */
};

/* One request being received: the body accumulates here up to max_body_bytes. */
/* Query parameters sent as a POST application/x-www-form-urlencoded body (form.c):
 * decoded in place in the request's body, each key and value NUL-terminated, sizes
 * kept (a value may hold %00). val is NULL for a field without '='. */
typedef struct form_arg {
    const char *key, *val;
    size_t klen, vlen;
} form_arg;

typedef struct form_args {
    form_arg *v;
    size_t n;
} form_args;

typedef struct req {
    bdb_buf body;
    form_args form; /* a POSTed query's parameters (form.c) */
    int too_large;
    uint64_t start_us;
    bdb_admit_ticket adm;          /* in-flight budgets (adm.bp); a write's admission */
    uint64_t parse_reserved;       /* of which reserved at admission for parsing */
    enum bdb_bp_reason bp_refused; /* BDB_BP_NONE, or why it is refused (body dropped) */
    int answered;                  /* a response was queued at the first call */
} req;

/* Answers a request refused by backpressure: 503 or 429 with Retry-After and
 * {"error","reason","retry_after"[,"tenant"]}; nothing of the request was written. */
enum MHD_Result respond_backpressure(bdb_server *s, struct MHD_Connection *c,
                                     enum bdb_bp_reason why, const char *tenant);
/* Adds bytes a request now holds (decompression) to its reservation: 0, or -1 with
 * r->bp_refused set (answer with respond_backpressure). */
int req_bp_grow(bdb_server *s, req *r, uint64_t bytes);
/* Counts a write that stored `samples` for tenant in the per-tenant ingestion
 * counters: registered tenants have their own, every other tenant shares the
 * "(other)" one, so /metrics has a bounded number of series. Every ingestion path
 * calls it after a successful bdb_db_write. */
void count_ingest(bdb_server *s, const char *tenant, uint64_t samples);

/* Response helpers: queue a response and return the MHD result. */
enum MHD_Result respond(bdb_server *s, struct MHD_Connection *c, unsigned status, const char *ctype,
                        const void *body, size_t len);
/* 204 for a write that stored everything it could, with X-Bucketdb-Not-Stored saying
 * what it could not (docs/API.md#mapping-rule). */
/* The device rule a tenant's writes follow: its own (admin API device_rule), else the
 * server's (docs/API.md#mapping-rule). */
struct bdb_devrule;
void server_device_rule(bdb_server *s, const char *tenant, struct bdb_devrule *out);
enum MHD_Result respond_stored_with_warning(bdb_server *s, struct MHD_Connection *c,
                                            const char *not_stored);
/* respond with one more header (hname: hval) when both are not NULL. */
enum MHD_Result respond_hdr(bdb_server *s, struct MHD_Connection *c, unsigned status,
                            const char *ctype, const void *body, size_t len, const char *hname,
                            const char *hval);
enum MHD_Result respond_json_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, int influx);
/* {"error": msg} (also in X-Influxdb-Error) with "Connection: close": for a request
 * whose body is not read, or whose framing cannot be trusted, so that no byte of it
 * is taken for the next request. */
enum MHD_Result respond_json_error_close(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                         const char *msg);
/* An error with a prepared JSON body; msg (if not NULL) also goes to X-Influxdb-Error. */
enum MHD_Result respond_body_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, const void *body, size_t len);
/* A query parameter: the URL's, else (for a query POSTed as a form) the body's. */
const char *arg(struct MHD_Connection *c, const char *name);
/* Every query parameter, the URL's then the form body's, as MHD_get_connection_values_n
 * does; stops where it returns MHD_NO. */
void args_each(struct MHD_Connection *c, MHD_KeyValueIteratorN it, void *cls);
/* form.c: a POST to a query endpoint (GET only otherwise) with Content-Type
 * application/x-www-form-urlencoded carries its parameters in the body. 1 if this
 * request is one. */
int form_query_request(struct MHD_Connection *c, const char *url, const char *method);
/* Decodes r->body into r->form: 0, or -1 out of memory. */
int form_parse(req *r);
void form_free(req *r);
/* The form of the request the calling thread handles now (NULL: none); arg and
 * args_each read it. */
void form_current(const form_args *f);
/* url_value if not NULL, else the current form's value of name (or NULL). */
const char *form_arg_or(const char *url_value, const char *name);
/* A count (limit, max_rps): decimal digits only, at most max; 0 with *out set, or -1. */
int count_param(const char *v, uint64_t max, uint64_t *out);
/* A time query parameter (from, to, bucket): 0 when absent or empty (*out untouched),
 * 1 when set, -1 with a 400 queued in *r naming the parameter: not a time, or outside
 * BDB_QT_MIN_MS..BDB_QT_MAX_MS (the range is in the message). Every handler parses
 * times through it, so none computes with a time the engine cannot hold. */
int time_param(bdb_server *s, struct MHD_Connection *c, const char *name, int64_t *out,
               enum MHD_Result *r);
/* A 429 (or other) error with a prepared JSON body and an explicit Retry-After. */
enum MHD_Result respond_retry_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                    int64_t retry_after_s, const char *msg, const void *body,
                                    size_t len);
/* The 429 of one device over its limit (a max_rps profile, a rate-limited hot
 * partition): {"error":msg,"tenant","device","limit":limit_name,<limit_name>:limit,
 * "value":value,"retry_after"}. The device is whole however long it is (it points into
 * the request's batch, dlen bytes). */
enum MHD_Result respond_device_limit(bdb_server *s, struct MHD_Connection *c, int64_t retry_after_s,
                                     const char *msg, const char *tenant, const char *dev,
                                     size_t dlen, const char *limit_name, uint64_t limit,
                                     uint64_t value);

/* Who made a request (docs/TENANCY.md). */
enum req_who {
    WHO_ANON,   /* no token, and none required */
    WHO_ADMIN,  /* the admin token (<data>/token) */
    WHO_TENANT, /* a registered tenant's token */
};
typedef struct req_ident {
    enum req_who who;
    char tenant[BDB_TENANT_NAME_MAX + 1]; /* WHO_TENANT: the token's tenant */
    char key[BDB_TENANT_KEY_MAX + 1];     /* WHO_TENANT: its storage key, found with it */
    int bad_token;                        /* WHO_ANON: credentials were sent but match no token */
} req_ident;
/* Authenticates: 0 with *id filled, or -1 with a 401 queued (a wrong token or none
 * where one is required). Where none is required, credentials that match no token
 * are ignored, as InfluxDB with auth off ignores them: WHO_ANON with bad_token set,
 * so that whatever then needs a token can say the one sent was wrong. */
int req_auth(bdb_server *s, struct MHD_Connection *c, req_ident *id, enum MHD_Result *r);
/* 1 when the request carries the admin token, else 0; answers nothing (/health). */
int req_is_admin(bdb_server *s, struct MHD_Connection *c);
/* metrics_auth: 0 when the request may read /metrics, or -1 with a 401 (no or a wrong
 * token where the admin token is needed) or 403 (a tenant token) queued. */
int metrics_gate(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r);
/* Tenant of the request after authentication and the isolation check (a tenant token
 * naming another tenant gets 403), as its storage key (bdb_tenants_storage_key: the
 * name, or "<name>@<n>" once a tenant of that name was deleted), which is what the
 * engine and the registry's per-request functions take; NULL if a response was
 * queued. The pointer stays
 * valid until the next call on the same thread (handlers run on their connection's
 * thread). */
const char *req_tenant(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r);
/* The same where InfluxDB 2's `bucket` parameter names the tenant as `db` does
 * (use_bucket = 1, /api/v2/write; elsewhere `bucket` is a bucket width). */
const char *req_tenant_in(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r,
                          int use_bucket);
/* The tenant a request will be accounted to, from its headers and parameters as
 * req_tenant decides it but without answering: 0, or -1 when req_tenant will refuse
 * the request (it is then accounted to no tenant). */
int req_peek_tenant(bdb_server *s, struct MHD_Connection *c, int use_bucket,
                    char out[BDB_TENANT_NAME_MAX + 1]);
/* Device quota for a device profile, which may create a device (bdb_admit_devices):
 * 0 with *held to release with bdb_admit_devices_unlock after the change, or -1 with
 * a 429 queued. */
int devq_check(bdb_server *s, struct MHD_Connection *c, const char *tenant, const bdb_batch *b,
               pthread_mutex_t **held, enum MHD_Result *r);
uint64_t now_us(void);

/* handlers */
/* v2: /api/v2/write, which takes only InfluxDB 2's precisions (ns, us, ms, s). */
enum MHD_Result h_write_lp(bdb_server *s, struct MHD_Connection *c, req *r, int v2);
enum MHD_Result h_write_json(bdb_server *s, struct MHD_Connection *c, req *r);
enum MHD_Result h_query(bdb_server *s, struct MHD_Connection *c);
/* late data (h_query.c): GET /api/v1/late, and its block of /metrics */
enum MHD_Result h_late(bdb_server *s, struct MHD_Connection *c);
void h_late_metrics(bdb_server *s, bdb_buf *b);
enum MHD_Result h_devices(bdb_server *s, struct MHD_Connection *c, const char *rest,
                          const char *method);
enum MHD_Result h_export(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_health(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_metrics(bdb_server *s, struct MHD_Connection *c);
/* Prometheus' query API under /prometheus (h_prom.c); rest follows "/prometheus". */
enum MHD_Result h_prom(bdb_server *s, struct MHD_Connection *c, const char *rest,
                       const char *method);
/* The answer of the native GET /api/v1/query to a Prometheus client (a `query`
 * parameter): Prometheus' error JSON pointing at the /prometheus prefix. */
enum MHD_Result prom_native_query_error(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_influx_query(bdb_server *s, struct MHD_Connection *c, req *r);
/* InfluxDB 2's query API (Flux), which is not served: a v2-shaped error saying so. */
enum MHD_Result h_influx_v2_query(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_admin(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method, req *r);
/* state: /api/v1/state/{latest,devices,counts} (h_state.c); rest is what follows
 * "/api/v1/state/". */
enum MHD_Result h_state(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method);
/* fleet: /api/v1/fleet and /api/v1/fleet/query (h_fleet.c); rest follows "/api/v1/fleet". */
enum MHD_Result h_fleet(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method);
/* hot partitions and telemetry_by_tenant (h_partitions.c) */
enum MHD_Result h_partitions_hot(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_telemetry_by_tenant(bdb_server *s, struct MHD_Connection *c);
/* test_clock only: POST /internal/clock?now_ms=<ms> or advance_ms=<ms>, admin token. */
enum MHD_Result h_clock(bdb_server *s, struct MHD_Connection *c);
/* The hot partition policy of a tenant: the server's, with the tenant's overrides
 * (bdb_admit_env.hot_policy; ctx is the server). */
void hot_policy_of(void *ctx, const char *tenant, bdb_hot_policy *p);
/* The wall clock the server acts on (test_clock aware). */
bdb_clock server_clock(bdb_server *s);
/* Sets up s->hot (after s->db and s->tenants); frees it. */
void hot_start(bdb_server *s);
/* The hot partition families of /metrics. */
void hot_metrics(bdb_server *s, bdb_buf *b);
void hot_stop(bdb_server *s);

#endif
