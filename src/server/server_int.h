/* Private to src/server: the server object, request context and response helpers. */
#ifndef BDB_SERVER_INT_H
#define BDB_SERVER_INT_H

#include "common/buf.h"
#include "query/pool.h"
#include "server/config.h"
#include "server/server.h"
#include "storage/embedded/db.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>

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
    bdb_db *db;
    bdb_pool *pool;
    struct MHD_Daemon *mhd;
    int port;
    int auth_required;
    char token[65];
    int64_t start_ms;
    /* counters for /metrics */
    _Atomic uint64_t http_requests[6];  /* by status class 1xx..5xx, [0] unused */
    _Atomic uint64_t lp_lines_accepted, lp_lines_rejected, lp_samples;
    _Atomic uint64_t json_reports_accepted, json_reports_rejected, json_samples;
    _Atomic uint64_t body_too_large, auth_failures, bytes_received;
    _Atomic uint64_t queries, query_samples;
    _Atomic uint64_t write_failures;
    hist write_latency, query_latency, batch_size;
};

/* One request being received: the body accumulates here up to max_body_bytes. */
typedef struct req {
    bdb_buf body;
    int too_large;
    uint64_t start_us;
} req;

/* Response helpers: queue a response and return the MHD result. */
enum MHD_Result respond(bdb_server *s, struct MHD_Connection *c, unsigned status,
                        const char *ctype, const void *body, size_t len);
enum MHD_Result respond_json_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, int influx);
/* An error with a prepared JSON body; msg (if not NULL) also goes to X-Influxdb-Error. */
enum MHD_Result respond_body_error(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const char *msg, const void *body, size_t len);
const char *arg(struct MHD_Connection *c, const char *name);
/* Tenant of the request after authentication; NULL if a response was queued. */
const char *req_tenant(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r);
uint64_t now_us(void);

/* handlers */
enum MHD_Result h_write_lp(bdb_server *s, struct MHD_Connection *c, req *r);
enum MHD_Result h_write_json(bdb_server *s, struct MHD_Connection *c, req *r);
enum MHD_Result h_query(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_devices(bdb_server *s, struct MHD_Connection *c, const char *rest,
                          const char *method);
enum MHD_Result h_export(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_health(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_metrics(bdb_server *s, struct MHD_Connection *c);
enum MHD_Result h_influx_query(bdb_server *s, struct MHD_Connection *c, req *r);

#endif
