/* cass_metrics: the Cassandra backend's families for /metrics (cass_sink.h). Kept
 * apart from cass_sink.c, which is the write and read path; this only formats the
 * counters the sink and the session keep. */
#include "common/buf.h"
#include "storage/cassandra/cass_sink.h"
#include "storage/cassandra/cql/cluster/cql_session.h"

#include <stdio.h>
#include <string.h>

struct mctx {
    bdb_buf *b;
    uint64_t wal_bytes, wal_segments;
};

static void fam(bdb_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
    bdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                   (unsigned long long)v);
}

/* Host names come from system.peers or the URI: printable, but keep the label valid
 * whatever they hold. */
static void label(bdb_buf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            bdb_buf_putc(b, '\\');
        if (*v == '\n')
            bdb_buf_puts(b, "\\n");
        else
            bdb_buf_putc(b, (uint8_t)*v);
    }
}

static void node_series(bdb_buf *b, const char *name, const cql_session_node *n, uint64_t v)
{
    bdb_buf_printf(b, "%s{node=\"", name);
    label(b, n->host);
    bdb_buf_printf(b, ":%d\",dc=\"", n->port);
    label(b, n->dc);
    bdb_buf_printf(b, "\"} %llu\n", (unsigned long long)v);
}

static void write_metrics(bdb_sink *sink, cql_session *sess, void *ud)
{
    struct mctx *m = ud;
    bdb_buf *b = m->b;
    cass_sink_stats st;
    cass_sink_get_stats(sink, &st);
    fam(b, "bucketdb_cassandra_connected", "gauge",
        "1 once a contact point answered (0 while an offline_start server waits for one).",
        sess != NULL);
    fam(b, "bucketdb_cassandra_rows_confirmed_total", "counter",
        "Sample rows Cassandra confirmed at the write consistency.", st.rows);
    fam(b, "bucketdb_cassandra_batches_total", "counter", "Batches Cassandra confirmed.",
        st.batches);
    fam(b, "bucketdb_cassandra_batch_failures_total", "counter",
        "Batches that failed after their retries (their flush fails; the WAL keeps them).",
        st.batch_failures);
    fam(b, "bucketdb_cassandra_inflight_batches", "gauge",
        "Batches queued or being sent now (at most 2 x inflight queued).", st.inflight_batches);
    fam(b, "bucketdb_cassandra_expired_rows_total", "counter",
        "Rows not written because their TTL had run out already.", st.expired_rows);
    fam(b, "bucketdb_cassandra_flushes_total", "counter",
        "Flushes Cassandra confirmed whole (then their WAL segments are deleted).", st.commits);
    fam(b, "bucketdb_cassandra_flush_failures_total", "counter",
        "Flushes that failed; the head and the WAL keep their samples for the next one.",
        st.commit_failures);
    fam(b, "bucketdb_cassandra_ack_writes_total", "counter",
        "ack=quorum: write batches acknowledged after Cassandra confirmed every row.", st.acks);
    fam(b, "bucketdb_cassandra_ack_refusals_total", "counter",
        "ack=quorum: write batches answered 503 (or not PUBACKed): a row was not confirmed.",
        st.ack_refusals);
    fam(b, "bucketdb_cassandra_ack_rows_total", "counter",
        "ack=quorum: sample rows sent before an acknowledgement (the flush sends them again).",
        st.ack_rows);
    fam(b, "bucketdb_cassandra_ack_batch_failures_total", "counter",
        "ack=quorum: batches of rows that failed after their retries.", st.ack_failures);
    fam(b, "bucketdb_cassandra_wal_pending_bytes", "gauge",
        "WAL bytes on disk: samples acknowledged but not yet confirmed by Cassandra.",
        m->wal_bytes);
    fam(b, "bucketdb_cassandra_wal_pending_segments", "gauge",
        "WAL segment files waiting for Cassandra to confirm their flush.", m->wal_segments);
    fam(b, "bucketdb_cassandra_reads_total", "counter", "Partition reads from Cassandra.",
        st.reads);
    fam(b, "bucketdb_cassandra_read_failures_total", "counter",
        "Partition reads that failed after their retries.", st.read_failures);
    fam(b, "bucketdb_cassandra_requests_total", "counter",
        "CQL requests through the session (each with its retries).", st.requests);
    fam(b, "bucketdb_cassandra_retries_total", "counter",
        "Attempts after the first (on the next node of the plan, after a backoff).", st.retries);
    fam(b, "bucketdb_cassandra_errors_total", "counter",
        "Failed attempts (retried or not): server errors, timeouts, lost connections.",
        st.attempt_errors);
    fam(b, "bucketdb_cassandra_timeouts_total", "counter",
        "Attempts that timed out: client-side request timeout or the server's "
        "Read_timeout/Write_timeout.",
        st.timeouts);
    fam(b, "bucketdb_cassandra_failures_total", "counter",
        "Requests that failed after all their retries.", st.failures);
    fam(b, "bucketdb_cassandra_reconnects_total", "counter", "Nodes back after being down.",
        st.reconnects);
    fam(b, "bucketdb_cassandra_connect_failures_total", "counter",
        "Connection attempts to a node that failed.", st.connect_failures);
    fam(b, "bucketdb_cassandra_nodes", "gauge",
        "Nodes of the cluster (followed while running; nodes that left are not counted).",
        st.nodes);
    fam(b, "bucketdb_cassandra_nodes_up", "gauge",
        "Nodes not marked down (down from a failed connect or the cluster's DOWN event "
        "until a connect succeeds).",
        st.nodes_up);
    if (!sess)
        return;
    static const char *const names[4] = {
        "bucketdb_cassandra_node_up", "bucketdb_cassandra_node_connections",
        "bucketdb_cassandra_node_in_flight", "bucketdb_cassandra_node_errors_total"};
    static const char *const helps[4] = {
        "1 while the node is usable, 0 while down (its last connect failed or the cluster "
        "reported it down).",
        "Connections open to the node.", "Requests in flight on the node's connections.",
        "Failed attempts sent to the node."};
    /* Bounded by the cluster's size (at most the session's 256 node slots); nodes that
     * left the cluster are skipped, joined ones appear without a restart. */
    for (int k = 0; k < 4; k++) {
        bdb_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", names[k], helps[k], names[k],
                       k == 3 ? "counter" : "gauge");
        cql_session_node n;
        for (size_t i = 0; cql_session_node_info(sess, i, &n) == 0; i++) {
            uint64_t v = k == 0   ? (uint64_t)n.up
                         : k == 1 ? n.connections
                         : k == 2 ? n.in_flight
                                  : n.attempt_errors;
            node_series(b, names[k], &n, v);
        }
    }
}

void cass_sink_metrics(bdb_buf *b, uint64_t wal_bytes, uint64_t wal_segments)
{
    struct mctx m = {b, wal_bytes, wal_segments};
    cass_sink_with_open(write_metrics, &m);
}
