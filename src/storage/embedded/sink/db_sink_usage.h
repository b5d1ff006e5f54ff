/* db_sink_usage: the storage a tenant uses when flushed samples go to a sink
 * (Cassandra) instead of block files, for the storage_bytes quota
 * (docs/TENANCY.md#storage-quota).
 *
 * Measure: the bytes of the telemetry rows the sink confirmed, as cass_sink encodes
 * them: tenant + device + metric (their lengths) + 32 fixed bytes (bucket 8,
 * sub_bucket 4, event_time 8, value 8, USING TTL 4). One replica: the quota is about
 * the tenant's data, not the cluster's disk (replication multiplies every tenant
 * alike). Cassandra's own overhead (cell headers, SSTable index, compression) is not
 * visible to a client and is not guessed.
 *
 * Why counted at the flush rather than rebuilt from the engine's per-partition event
 * counts (db_hot.c): those count reports, not rows (a report carries any number of
 * metrics, one row each), and know nothing of metric-name lengths; the flush sees
 * every row it sends.
 *
 * Kept per (tenant, expiry day): a row sent with a TTL expires at event time + TTL, so
 * it leaves the usage at the end of the UTC day holding that instant (at most a day
 * late, never early); rows without a TTL stay. A row written again (same key) is
 * counted again: Cassandra overwrites it, so usage is on the high side by rewrites.
 *
 * Durability: the table is saved in the data directory ("sink_usage", written with
 * bdb_vfs_write_atomic) by each flush that sent rows, after the sink confirmed them
 * and before the catalog records the flush's WAL cut. The file also keeps the WAL cut
 * it was saved at and that flush's own additions, so when a crash comes between the
 * two saves (the catalog still has the older cut, replay will send the flush again)
 * the load takes those additions off and the usage stays exact. With a sink that
 * keeps documents, each flush that saved the file puts the same bytes as the
 * document BDB_SKU_DOC, which a directory without the file loads (whole: the cut is
 * another server's) so that the measure outlives a lost disk.
 *   "BDBSKU01" | u32 version=1 | u64 wal_upto | u64 n_cur | u64 n_last |
 *   (n_cur + n_last) x (str tenant | i64le day | u64le bytes) | u32 crc32 of all before
 * day = floor(expiry ms / 86,400,000), or INT64_MAX for rows without a TTL. */
#ifndef BDB_DB_SINK_USAGE_H
#define BDB_DB_SINK_USAGE_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_SKU_FOREVER INT64_MAX
#define BDB_SKU_ROW_FIXED 32 /* bucket 8 + sub_bucket 4 + event_time 8 + value 8 + TTL 4 */
#define BDB_SKU_FILE "sink_usage"
/* The sink's document holding a copy of the file (sink.h doc_put): a directory
 * without the file takes the measure from it. */
#define BDB_SKU_DOC "sink_usage"

/* ---- the table (pure: no I/O, no clock; time is passed in) ---- */
typedef struct bdb_sku bdb_sku;
bdb_sku *bdb_sku_new(void); /* NULL: out of memory */
void bdb_sku_free(bdb_sku *t);
void bdb_sku_clear(bdb_sku *t);
/* Bytes of one telemetry row as the Cassandra sink sends it. */
uint64_t bdb_sku_row_bytes(size_t tenant_len, size_t device_len, size_t metric_len);
/* Expiry day of a row at event time ts with TTL ttl_ms (<= 0: BDB_SKU_FOREVER). */
int64_t bdb_sku_day(int64_t ts, int64_t ttl_ms);
/* Adds bytes to (tenant, day). BDB_OK, BDB_ERR_NOMEM (unchanged). */
int bdb_sku_add(bdb_sku *t, const char *tenant, size_t tlen, int64_t day, uint64_t bytes);
/* Adds (sign > 0) or takes off (sign < 0, never below 0) every entry of src. */
int bdb_sku_merge(bdb_sku *dst, const bdb_sku *src, int sign);
/* The tenant's bytes of rows not expired at now_ms (whole days: see the top). */
uint64_t bdb_sku_tenant(const bdb_sku *t, const char *tenant, size_t tlen, int64_t now_ms);
/* Forgets the days over at now_ms. */
void bdb_sku_prune(bdb_sku *t, int64_t now_ms);
/* The file (see the top). decode: BDB_OK or BDB_ERR_CORRUPT (what is wrong in err),
 * BDB_ERR_NOMEM; cur and last are cleared first. */
void bdb_sku_encode(const bdb_sku *cur, const bdb_sku *last, uint64_t wal_upto, bdb_buf *out);
int bdb_sku_decode(const void *p, size_t len, bdb_sku *cur, bdb_sku *last, uint64_t *wal_upto,
                   char *err, size_t errlen);

/* ---- the engine's side (db_sink.c, db_flush.c, db_usage.c call these) ---- */
struct bdb_db;
/* A put of n rows of (tenant, device, metric) with the tenant's TTL was handed to the
 * sink during the current flush (counted once the flush commits). */
void db_sku_note(struct bdb_db *db, const char *tn, const char *dn, const char *metric,
                 int64_t ttl_ms, const int64_t *ts, size_t n);
/* End of a flush's sink part: rc != BDB_OK drops what it noted; BDB_OK adds it and
 * saves the file with the flush's WAL cut `sealed`. Returns rc: it runs after the
 * flush published its tier and fleet files, so failing it then would make its retry
 * count their samples twice. Out of memory leaves rows out of the measure and a
 * failed save is done again by the next flush (both logged). */
int db_sku_flush_done(struct bdb_db *db, int rc, uint64_t sealed);
/* The tenant's confirmed sink bytes now (0 without a sink). */
uint64_t db_sku_tenant_bytes(struct bdb_db *db, const char *tn);
/* At open, after the catalog (its WAL cut decides what the file's last flush is):
 * loads the file. */
void db_sku_open(struct bdb_db *db);
void db_sku_close(struct bdb_db *db);

/* Registered by db_features.c: open (with a sink), flush (db_sku_flush_done), close. */
struct db_consumer;
extern const struct db_consumer db_sku_consumer;

#endif
