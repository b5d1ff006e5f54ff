/* db_cat_sink: the engine's catalog rebuilt from the sink's device registry, and the
 * windows a flush must merge with the sink's rows (docs/CASSANDRA.md, "A new data
 * directory on a keyspace").
 *
 * A server started without a catalog on a sink that lists its registry (a lost
 * or new data directory on a keyspace another directory filled) would answer 404 for
 * every flushed device (raw reads route by the catalog's bucket history and metric
 * names) and its flushes would replace tier, fleet and registry rows with windows
 * holding only its own samples (its local tier and fleet files, each flush's merge
 * base, are empty). So at open, before the WAL replay, every device of the registry
 * enters the catalog with its tags, first and last event, samples, bucket history,
 * pinned size, class and metric names, and its last event is kept as the device's
 * *inherited horizon*: windows starting at or before it may hold rows the local files
 * do not have. A flush that writes such a window the local files lack merges the
 * sink's row into its partial first (db_tier.c, db_fleet_flush.c), so the local files
 * hold the complete window from then on and every later flush adds to it. Windows
 * after the horizon need no read. The horizons are saved in the catalog (image
 * version 4), so a restart keeps them.
 *
 * Thread-safety: the horizons are written at open only (rebuild, catalog load) and
 * read by the flush thread afterwards. */
#ifndef BDB_DB_CAT_SINK_H
#define BDB_DB_CAT_SINK_H

#include "common/buf.h"
#include "storage/embedded/core/db_int.h"

#include <stddef.h>
#include <stdint.h>

/* Without a catalog file (a directory that never committed a flush) and with a sink
 * that lists tenants and devices: every registered device into the catalog (cat_lock not needed:
 * open, single thread). BDB_OK (also when there is nothing to do), or the sink's error (BDB_ERR_IO,
 * _AGAIN: the open fails rather than start on a catalog that would corrupt the sink's rows), or
 * BDB_ERR_NOMEM. */
int cat_sink_rebuild(bdb_db *db);
/* The device's inherited horizon (its last event when its catalog entry came from
 * the sink), INT64_MIN when none. */
int64_t cat_inherited(const bdb_db *db, const char *tn, const char *dn);
/* The largest horizon of any device of tenant tn (fleet windows), INT64_MIN none. */
int64_t cat_inherited_tenant(const bdb_db *db, const char *tn);
/* Sets a horizon (catalog load). BDB_OK or BDB_ERR_NOMEM. */
int cat_inherited_set(bdb_db *db, const char *tn, size_t tl, const char *dn, size_t dl,
                      int64_t last);
/* The horizons in the catalog image: uvarint n, then n x (str tenant, str device,
 * varint last). */
void cat_inherited_encode(const bdb_db *db, bdb_buf *out);
void cat_inherited_free(bdb_db *db);

#endif
