/* db_latest: the current-state index of the embedded engine (private to db*.c).
 *
 * Per device: the latest event time, the current state and the time of the report
 * that set it, per metric the newest (time, value), and per string attribute the
 * newest (time, value), at most BDB_MAX_DEVICE_ATTRS names. Per tenant: state -> the set
 * of devices in it (ordered by device name, for paging) with its size. The public
 * readers are in db.h (bdb_db_latest, bdb_db_state_devices, bdb_db_state_counts).
 *
 * The write path calls db_latest_apply for every applied report, WAL replay included,
 * so the index after a restart is the saved file plus the replayed WAL. The file
 * <data>/latest is saved by every flush (db_latest_save) after the catalog and before
 * the WAL segments it covers are deleted. Format and recovery rules: the header
 * comment of db_latest_file.c and docs/STORAGE.md#current-state.
 *
 * Locking: db_latest_apply runs under the device's stripe lock, which also guards the
 * device's entry. Two leaf mutexes follow the stripe in the locking order: the index's
 * tenant map (taken when a device gets its entry) and each tenant's state sets (taken
 * when a device changes state). Neither is held while taking a stripe. */
#ifndef BDB_DB_LATEST_H
#define BDB_DB_LATEST_H

#include "storage/embedded/core/db_int.h"

#include <stddef.h>
#include <stdint.h>

/* The index follows the engine as a consumer (db_consumer.h): reserve, apply and
 * release on the write path, commit (db_latest_save), open, forget_tenant and close.
 * Its state is set for every open db: db_latest_open runs at open before anything can
 * use it, so the functions below (except db_latest_free) rely on it. */
struct db_consumer;
extern const struct db_consumer db_latest_consumer;

/* Creates the index and loads <data>/latest. Call after the catalog is loaded and
 * before WAL replay. When the file is older than the catalog (a flush saved the
 * catalog but failed to save this file), db->wal_upto is lowered so that replay also
 * covers the segments in between (a failed save keeps them). A missing file is
 * rebuilt: states from the catalog, metric values from the whole remaining WAL.
 * Errors: BDB_ERR_CORRUPT (the file is damaged: refused, see docs/STORAGE.md),
 * BDB_ERR_IO. */
int db_latest_open(bdb_db *db);
/* Safe when the index was never made. */
void db_latest_free(bdb_db *db);

/* What applying one report needs, held from before the write's WAL append until
 * after its apply (db_latest_reserve): the device's entry, free metric slots in it and
 * the set of the report's state. Zeroed when nothing is held. */
typedef struct db_latest_resv {
    struct lt_dev *e;
    uint32_t metrics;
    struct lt_state *st;
    /* attributes: a copy per attribute of the report ("name\0value\0"), NULL for one
     * dropped by the device limit; taken by the apply; slots of e->a held */
    char **abuf;
    uint32_t nattrs, aslots;
} db_latest_resv;

/* Allocates and holds everything db_latest_apply will need for this report of d
 * (state may be NULL; ser: the series of the report's nm metrics), so that the apply, run later
 * with the reservation still held, allocates nothing even if other writers apply to d in between.
 * Caller holds d's stripe lock. What it creates stays invisible to readers until a report is
 * applied to it. BDB_OK, or BDB_ERR_NOMEM with nothing held and no trace left. */
int db_latest_reserve(bdb_db *db, device *d, const char *state, size_t slen,
                      struct series *const *ser, uint32_t nm, const bdb_kv *attrs, uint32_t na,
                      db_latest_resv *r);
/* Lets go of a reservation, applied or not (an unapplied one leaves no trace). Caller
 * holds the device's stripe lock. Safe on a zeroed reservation. */
void db_latest_release(bdb_db *db, db_latest_resv *r);

/* Applies one report of device d at ts, under the report's reservation r (NULL in
 * replay; its entry saves looking the device up again): ser[k] is the series of metric k, valued
 * vals[k]. Caller holds d's stripe lock. O(nm) when the report lists its metrics in
 * name order (each is looked for right after the previous one), else O(nm log metrics
 * of d). attrs: the report's string attributes (newest event wins per name). With a
 * reservation of
 * this report held it allocates nothing; without one (WAL replay) it allocates when
 * the device or a metric is new or the device enters a state no device of its tenant
 * is in. BDB_OK or BDB_ERR_NOMEM (the report applied in part: the write path then
 * makes the engine read-only, see bdb_db_write). */
int db_latest_apply(bdb_db *db, device *d, const db_latest_resv *r, int64_t ts, const char *state,
                    size_t slen, struct series *const *ser, const double *vals, uint32_t nm,
                    const bdb_kv *attrs, uint32_t na);

/* Writes <data>/latest for a flush whose WAL cut sealed segment wal_upto. Call with
 * writers running, after the cut (every report in segments <= wal_upto is applied by
 * then) and before those segments are deleted. The snapshot may also hold later
 * reports; the WAL is cut again after the snapshot so that each of them is durable in
 * a segment that replay will read. Errors: BDB_ERR_IO, BDB_ERR_NOSPACE,
 * BDB_ERR_READONLY. */
int db_latest_save(bdb_db *db, uint64_t wal_upto);

/* Dropping a tenant (db_drop.c): removes the entries of t's devices and t's state
 * sets, before the catalog frees the devices. No writer may be applying to t (the
 * caller holds flush_lock exclusively, or replays). Takes each stripe in turn. */
void db_latest_forget_tenant(bdb_db *db, const tenant *t);

#endif
