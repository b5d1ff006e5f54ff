/* db_space: the disk reserve, a file of disk_reserve_bytes in the data directory that
 * holds back room only a flush may use. The WAL can fill the disk; a flush needs room
 * for its blocks and tier files while the WAL it covers still exists, so without a
 * reserve a full disk stays full: every flush fails, the WAL keeps its segments, and
 * freeing a little space only lets the WAL grow again (issue 18).
 *
 * Life: made at open (after replay); given back (unlinked) when a flush fails for
 * lack of space, so that the retry has the room; made again after a flush succeeds.
 * While it is not in place, writes are refused with BDB_ERR_NOSPACE (the WAL must
 * not eat the room the flush needs); the background thread tries to make it again
 * every second. Short of space, flushes start early and writes are held before the
 * WAL outgrows what its flush could write (db_space_tight, db_space_crossed). Off
 * (and no file) when the size is 0. Free space is read with
 * statvfs on the data directory: the reserve is about the real disk, so it goes
 * around the VFS. */
#ifndef BDB_DB_SPACE_H
#define BDB_DB_SPACE_H

#include <stdint.h>

struct bdb_db;

/* The reserve's file name inside the data directory. */
#define DB_SPACE_FILE "reserve"

/* Bits of db->space_low; writes are refused while any is set. OUT: the reserve is not
 * in place. HOLD: the WAL has grown to what a flush could still write with the free
 * space and the reserve; cleared when db_space_tight looks again after a flush. */
#define DB_SPACE_OUT 1
#define DB_SPACE_HOLD 2

/* At open: makes or resizes the reserve, or removes it when the size is 0. A disk
 * too full for it is not an error: writes are refused until it can be made. */
void db_space_open(struct bdb_db *db);
/* After a flush failed with BDB_ERR_NOSPACE: refuses writes and unlinks the reserve.
 * 1 when it was in place (a retry is worth it), 0 when off or already out. */
int db_space_release(struct bdb_db *db);
/* Makes the reserve again if it is missing and the disk has the room; writes are
 * taken again once it is in place. BDB_OK (in place or off) or BDB_ERR_NOSPACE. */
int db_space_restore(struct bdb_db *db);
/* Whether a flush is due now because free space runs short: the free bytes are
 * under twice the WAL on disk, so a flush of all of it could still complete (a
 * flush writes about 0.5 to 1.5 times the WAL it covers), or the write path asked.
 * Also sets the write path's two marks from the free space and WAL now (the LSN at
 * which a write asks for a flush, and the one at which writes are held) and lifts a
 * hold the new marks allow. Called every second and after each flush. 0 when off. */
int db_space_tight(struct bdb_db *db);
/* The write path, when a write's WAL LSN reached db->space_flush_lsn: asks the
 * background thread for a flush and moves the mark on to the hold mark; past that,
 * holds writes (DB_SPACE_HOLD). Out of line: it runs once per mark. */
void db_space_crossed(struct bdb_db *db, uint64_t lsn);
/* Free bytes on the data directory's file system (for unprivileged users), or
 * UINT64_MAX when unknown. */
uint64_t db_space_free(const struct bdb_db *db);

#endif
