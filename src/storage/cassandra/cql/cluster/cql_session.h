/* cql_session: a client for a whole Cassandra cluster on top of cql_conn.
 *
 * Opening a session connects to the first contact point that answers, reads the
 * nodes and their tokens (cql_topology) and keeps a small pool of connections per
 * node of the local data center (the configured one, or the contact point's), opened
 * lazily. Every request is routed token-aware: the partition key's Murmur3 token
 * gives the replicas in ring order; replicas in the local DC are tried first, then
 * the other local nodes, and nodes of other DCs only when the consistency level is
 * not a LOCAL_* one. LOCAL_QUORUM is the default consistency; each call may name its
 * own.
 *
 * Retries (bounded by max_retries, with exponential backoff between base and max
 * plus jitter): Unavailable, Overloaded, Is_bootstrapping and Read_timeout always
 * move on to the next node; Write_timeout, a client-side timeout and a lost
 * connection only for idempotent statements (a write that timed out may have been
 * applied; bucketdb's telemetry writes are idempotent: same key, same value).
 * UNPREPARED is handled by cql_conn (re-prepare once). A node whose connection broke
 * is marked down and reconnected on the first request after its backoff expired
 * (doubling to reconnect_max_ms).
 *
 * The cluster is followed while the session runs: a control connection registered
 * for TOPOLOGY_CHANGE/STATUS_CHANGE events, and a re-read of system.local/peers after
 * each event and every topology_refresh_ms, add nodes that joined (with their DC,
 * rack and tokens, into the token map used for routing) and drop nodes that left;
 * a node reported UP is reconnected at once instead of after its backoff, a node
 * reported DOWN is skipped at once instead of after its requests time out. */
#ifndef BDB_CQL_SESSION_H
#define BDB_CQL_SESSION_H

#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cql_session cql_session;

typedef struct cql_session_opts {
    const char *hosts; /* contact points "h1,h2:9043,..." (port defaults to port) */
    int port;          /* 0: 9042 */
    const char *user, *password;
    const char *local_dc;   /* NULL or "": the data center of the first contact point */
    int consistency;        /* default consistency; < 0: LOCAL_QUORUM */
    int pool_size;          /* connections per node, 0: 2 (at most 8) */
    int max_retries;        /* 0: 6; -1: none */
    int backoff_base_ms;    /* 0: 20 */
    int backoff_max_ms;     /* 0: 1000 */
    int reconnect_max_ms;   /* 0: 5000 */
    int connect_timeout_ms; /* 0: 3000 */
    int request_timeout_ms; /* 0: 12000 */
    /* TLS to every node (cql_io.h; zero: plain TCP); the files are loaded at open,
     * BDB_ERR_INVALID naming the file when one does not load */
    cql_tls_opts tls;
    /* re-read of system.peers, 0: 30000; < 0: never (no control connection, no
     * events: the nodes found at open) */
    int topology_refresh_ms;
} cql_session_opts;

/* Connects to a contact point and discovers the cluster. BDB_ERR_IO when no contact
 * point answers, BDB_ERR_INVALID for bad options or credentials; message in err. */
int cql_session_open(const cql_session_opts *o, cql_session **out, char *err, size_t errlen);
void cql_session_close(cql_session *s);

/* The current token map (read-only; a snapshot valid until close: a topology
 * refresh publishes a new one) and the local DC in use. */
const cql_topology *cql_session_topology(const cql_session *s);
const char *cql_session_local_dc(const cql_session *s);

typedef struct cql_call {
    const char *query;       /* prepared on each connection it runs on */
    const cql_bytes *values; /* bind values (for a batch: nrows * nvalues, row-major) */
    uint16_t nvalues;
    uint16_t nrows;          /* batch rows (cql_session_batch only) */
    const void *routing_key; /* serialized partition key, or NULL (any node) */
    size_t routing_len;
    int consistency; /* < 0: the session default */
    /* the serial phase of a lightweight transaction (CQL_SERIAL, CQL_LOCAL_SERIAL);
     * 0: the server's default, SERIAL */
    int serial_consistency;
    int idempotent;
    int unprepared; /* execute: send as a QUERY (DDL), not prepared */
} cql_call;

/* Executes a prepared statement with retries. *out (may be NULL) gets the last
 * response (also the ERROR on failure). Returns BDB_OK or the last error's status. */
int cql_session_execute(cql_session *s, const cql_call *c, cql_response **out);
/* One UNLOGGED batch of nrows executions of the same statement (one partition). */
int cql_session_batch(cql_session *s, const cql_call *c, cql_response **out);
/* A paged read with retries (a read is idempotent; a retry restarts from the first
 * page, so page_fn must tolerate a restart: reset gets called first each time). */
int cql_session_query_paged(cql_session *s, const cql_call *c, int32_t page_size,
                            void (*reset)(void *ud), cql_page_fn page_fn, void *ud,
                            cql_response **err_out);

/* After a schema change: waits until every node reports the schema version of the
 * node asked (system.local vs system.peers), at most timeout_ms. BDB_OK, or
 * BDB_ERR_AGAIN when they still disagree (a node down keeps its old version). */
int cql_session_wait_schema(cql_session *s, int timeout_ms);

/* Counters since open: requests (calls), retries (attempts after the first),
 * failures (calls that failed after their retries), attempt_errors (failed attempts,
 * retried or not), timeouts (attempts that ended in a client-side timeout or a
 * server's Read_/Write_timeout), reconnects (a down node back), connect_failures. */
typedef struct cql_session_stats {
    uint64_t requests, retries, failures, reconnects, connect_failures;
    uint64_t timeouts, attempt_errors;
    uint64_t nodes, nodes_up;
} cql_session_stats;
void cql_session_get_stats(cql_session *s, cql_session_stats *st);

/* One node as the session sees it now: up = 0 while its last connect failed or the
 * cluster reported it DOWN (in its reconnect backoff); connections open and their
 * requests in flight; failed attempts sent to it. */
typedef struct cql_session_node {
    char host[64];
    int port;
    char dc[64];
    int up;
    uint64_t connections, in_flight, attempt_errors;
} cql_session_node;
/* Node i (0 .. stats.nodes - 1): BDB_OK, or BDB_ERR_NOTFOUND past the last. */
int cql_session_node_info(cql_session *s, size_t i, cql_session_node *out);

/* ---- pure helpers (exposed for tests) ---- */

/* The order in which nodes are tried for a token: replicas of the local DC in ring
 * order, the other nodes of the local DC, then (remote_ok) the other DCs' nodes in
 * ring order. With an empty ring every node in index order, local first. Returns how
 * many indexes were written (at most max). */
size_t cql_plan(const cql_topology *t, int has_token, int64_t token, const char *local_dc,
                int remote_ok, uint32_t *out, size_t max);
/* Whether a failed attempt with this error code may be tried again. */
int cql_should_retry(int32_t code, int idempotent);
/* Backoff before retry attempt n (1-based): base * 2^(n-1), capped at max. */
int cql_backoff_ms(int attempt, int base, int max);

#endif
