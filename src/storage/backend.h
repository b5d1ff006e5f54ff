/* backend: the storage a server runs on, named by its `storage` setting (CONFIG.md):
 * "embedded" (the engine's own block files) or "cassandra://..." (flushed data in
 * Cassandra through a sink, storage/sink.h). The one place the server reaches a
 * backend through: it includes no backend's header, and a new backend is added here.
 *
 * Thread-safety: every function may be called from any thread. */
#ifndef BDB_STORAGE_BACKEND_H
#define BDB_STORAGE_BACKEND_H

#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct bdb_buf;

/* "embedded" or "cassandra" for a valid url, NULL for one no backend takes. Inline:
 * the configuration's check needs no backend linked in. */
static inline const char *bdb_backend_name(const char *url)
{
    if (url && !strcmp(url, "embedded"))
        return "embedded";
    return url && !strncmp(url, "cassandra://", 12) ? "cassandra" : NULL;
}

/* The sink the engine flushes to for url, made after the backend's checks (for
 * Cassandra: that keys up to max_tenant_bytes and max_key_bytes fit its key limit,
 * then the connection, the schema, and the keyspace claimed for data_dir:
 * cass_owner.h); *out is NULL for the embedded engine (no sink).
 * Errors: BDB_ERR_INVALID (unknown url, bad option), BDB_ERR_LIMIT (keys too long for
 * the backend), BDB_ERR_EXISTS (the keyspace is another data directory's, or another
 * server writes to it), BDB_ERR_IO (no node answered) or the backend's status; the
 * message is in err. */
int bdb_backend_open(const char *url, const char *data_dir, size_t max_tenant_bytes,
                     size_t max_key_bytes, bdb_sink **out, char *err, size_t errlen);

/* Appends the backend's own /metrics families to b (nothing for the embedded engine).
 * wal_bytes and wal_segments: the engine's WAL on disk, which with a sink waits for
 * the backend's confirmation. */
void bdb_backend_metrics(const char *url, struct bdb_buf *b, uint64_t wal_bytes,
                         uint64_t wal_segments);

/* What the backend publishes about the server using sink (for Cassandra the writer
 * row `bucketdb cluster status` reads, docs/CASSANDRA.md#cluster-status): listen, the
 * server's HTTP address, and backlog(ud), the engine's WAL bytes on disk, called on
 * a backend thread now and then (every 10 s). backlog NULL clears; once that call
 * returns backlog is not called again. No-op without a sink. */
void bdb_backend_set_reporter(const char *url, bdb_sink *sink, const char *listen,
                              uint64_t (*backlog)(void *ud), void *ud);

/* 1 if url lets a server start while no node answers (Cassandra's offline_start),
 * which then decides whether the tenant registry may start from the data directory
 * alone or empty (tenants.h, bdb_tenants_open_store). 0 otherwise. */
int bdb_backend_offline_start(const char *url);

#endif
