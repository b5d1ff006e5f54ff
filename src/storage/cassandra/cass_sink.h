/* cass_sink: the Cassandra implementation of the engine's sink (storage/sink.h).
 *
 * Flushed raw samples go to the telemetry table of the keyspace (schema.h), one row
 * per (tenant, device, bucket, sub_bucket, event_time, metric): each put is cut into
 * UNLOGGED batches of one partition (at most batch_rows rows) that a fixed set of
 * worker threads sends through a cql_session (token-aware, retries; the writes are
 * idempotent), so at most `inflight` batches are in flight and a put blocks while
 * the queue is full. Every row carries USING TTL = the tenant's TTL minus the
 * sample's age, so it expires at event time + TTL as in the embedded engine (0 =
 * never; rows already past it are not written). Reads query each partition of the
 * range (event_time slice) and keep the requested metrics.
 *
 * URI: cassandra://HOST[:PORT][,HOST[:PORT]...]/KEYSPACE[?key=value&...] with keys
 *   dc=NAME              local data center (default: the first contact point's)
 *   consistency=CL       both reads and writes (default LOCAL_QUORUM)
 *   write_consistency=CL, read_consistency=CL
 *   replication=simple:N | dc1:3,dc2:3   for a keyspace created here (default: per
 *                        DC found, min(3, its nodes))
 *   user=NAME            PasswordAuthenticator (password from $CQL_PASSWORD or
 *   password=P           this key)
 *   inflight=N           batches in flight, 1..256 (default 16)
 *   batch_rows=N         rows per batch, 1..1000 (default 100)
 *   pool=N               connections per node, 1..8 (default 2)
 *   retries=N            attempts after the first, 0..20 (default 6)
 *   timeout_ms=N         per request, 100..600000 (default 12000)
 *   schema=create|none   create the keyspace and tables if missing (default create)
 *   bucket=DUR           telemetry bucket option of the created schema (default 1h)
 *   offline_start=BOOL   true: open even when no contact point answers; the sink
 *                        connects (and creates the schema) later, trying at most
 *                        every 2 s from a flush or read (default false)
 *   tls=BOOL             TLS to every node (default false); the node's certificate
 *                        is verified (chain and the address dialled) unless
 *   tls_verify=false     (insecure: encrypted, but anyone on the path can pose as a node)
 *   ca=FILE              PEM CA certificates to verify against (default: the system's)
 *   cert=FILE, key=FILE  PEM client certificate and key (require_client_auth) */
#ifndef BDB_CASS_SINK_H
#define BDB_CASS_SINK_H

#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

/* Parses the URI, connects, discovers the cluster and (schema=create) applies the
 * schema idempotently (waiting for schema agreement). BDB_ERR_INVALID (bad URI, with the key or
 * value named), BDB_ERR_IO (no node answered), or a server error's status; message in err. */
/* data_dir: the data directory of the engine the sink serves; the keyspace is
 * claimed for it (cass_owner.h) before anything is written (NULL: no claim, for tools
 * that only read). */
int cass_sink_open(const char *uri, const char *data_dir, bdb_sink **out, char *err, size_t errlen);

/* Counters since open (rows = rows Cassandra confirmed; commits = flushes confirmed
 * whole, commit_failures = flushes that failed and stay in the WAL), the batches in
 * flight now (queued or being sent), and the session's counters (cql_session.h). */
typedef struct cass_sink_stats {
    uint64_t batches, rows, batch_failures, expired_rows, reads, read_failures;
    uint64_t commits, commit_failures, inflight_batches;
    /* ack=quorum: rows sent for acknowledgements, their batches that failed, writes
     * confirmed and writes refused (not acknowledged) */
    uint64_t ack_rows, ack_failures, acks, ack_refusals;
    uint64_t requests, retries, failures, reconnects, nodes, nodes_up;
    uint64_t timeouts, attempt_errors, connect_failures;
} cass_sink_stats;
/* s must come from cass_sink_open. */
void cass_sink_get_stats(bdb_sink *s, cass_sink_stats *st);

/* What the writer row (cass_owner.h) publishes that only the server knows: its listen
 * address, and its backlog (the engine's WAL bytes on disk), which backlog(ud) returns
 * on the lease thread at each renewal (every CASS_OWNER_RENEW_S, no per-sample work).
 * Setting renews at once; backlog NULL clears, and once that call returns backlog is
 * not running and is not called again (clear it before what ud points at goes). */
void cass_sink_set_reporter(bdb_sink *s, const char *listen, uint64_t (*backlog)(void *ud),
                            void *ud);

struct cql_session;
/* Calls fn with the first Cassandra sink open in this process (a server has one) and
 * its session (NULL while not connected, offline_start), holding a lock that keeps the
 * sink open meanwhile; returns 1, or 0 (fn not called) when none is open. */
int cass_sink_with_open(void (*fn)(bdb_sink *s, struct cql_session *sess, void *ud), void *ud);

/* tiers and fleet (cass_agg.c): the sink's session, connecting first if the cluster
 * was away and the retry interval passed (NULL while no node answers), its keyspace
 * and its write and read consistency levels. */
struct cql_session *cass_sink_session(bdb_sink *s, const char **ks, int *write_cl, int *read_cl);

struct bdb_buf;
/* /metrics: appends the bucketdb_cassandra_* families (docs/API.md) to b when a
 * Cassandra sink is open, nothing otherwise. wal_bytes and wal_segments are the
 * engine's WAL on disk: with this sink its segments are deleted only once Cassandra
 * confirmed their flush, so they are what waits for Cassandra (cass_metrics.c). */
void cass_sink_metrics(struct bdb_buf *b, uint64_t wal_bytes, uint64_t wal_segments);

#endif
