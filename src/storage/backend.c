/* backend: the storage backends by name (backend.h). */
#include "storage/backend.h"
#include "storage/cassandra/cass_sink.h"
#include "storage/cassandra/cass_uri.h"
#include "storage/cassandra/schema.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>

static int is_cassandra(const char *url)
{
    const char *name = bdb_backend_name(url);
    return name && !strcmp(name, "cassandra");
}

int bdb_backend_open(const char *url, const char *data_dir, size_t max_tenant_bytes,
                     size_t max_key_bytes, bdb_sink **out, char *err, size_t errlen)
{
    *out = NULL;
    const char *name = bdb_backend_name(url);
    if (!name) {
        snprintf(err, errlen, "storage: expected embedded or cassandra://..., got '%.200s'",
                 url ? url : "");
        return BDB_ERR_INVALID;
    }
    if (!is_cassandra(url))
        return BDB_OK;
    /* A key over Cassandra's 64 KiB would make every flush fail: refused at start. */
    int rc = sch_check_key_limits(max_tenant_bytes, max_key_bytes, err, errlen);
    return rc != BDB_OK ? rc : cass_sink_open(url, data_dir, out, err, errlen);
}

void bdb_backend_metrics(const char *url, struct bdb_buf *b, uint64_t wal_bytes,
                         uint64_t wal_segments)
{
    /* the counters, per-node up/down and the WAL waiting for Cassandra (cass_metrics.c) */
    if (is_cassandra(url))
        cass_sink_metrics(b, wal_bytes, wal_segments);
}

void bdb_backend_set_reporter(const char *url, bdb_sink *sink, const char *listen,
                              uint64_t (*backlog)(void *ud), void *ud)
{
    if (sink && is_cassandra(url))
        cass_sink_set_reporter(sink, listen, backlog, ud);
}

int bdb_backend_offline_start(const char *url)
{
    if (!is_cassandra(url))
        return 0;
    cass_uri u;
    char err[300];
    return cass_uri_parse(url, &u, err, sizeof err) == BDB_OK && u.offline_start;
}
