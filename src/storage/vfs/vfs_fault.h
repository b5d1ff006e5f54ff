/* vfs_fault: a VFS for tests that wraps another and injects faults.
 *
 * - Fail the Nth counted call (counting pwrite, sync, rename, unlink, truncate, open
 *   with create, directory sync) with a chosen errno, once or for every later call too.
 * - Power-loss simulation: writes are kept in memory per file until sync(); at
 *   bdb_vfs_fault_crash() every unsynced write is kept, dropped, torn (only a prefix
 *   of 512 B or 4 KiB sectors survives) or reordered per the chosen mode, and the
 *   result is what the underlying VFS holds afterwards. Renames and unlinks count as
 *   durable only after sync_dir on their directory. */
#ifndef BDB_VFS_FAULT_H
#define BDB_VFS_FAULT_H

#include "storage/vfs/vfs.h"

#include <stdint.h>

enum bdb_fault_crash_mode {
    BDB_CRASH_KEEP,    /* every unsynced write reaches the disk */
    BDB_CRASH_DROP,    /* no unsynced write reaches the disk */
    BDB_CRASH_TEAR,    /* a random prefix of sectors of each unsynced write survives */
    BDB_CRASH_REORDER, /* a random subset of unsynced writes survives */
};

bdb_vfs *bdb_vfs_fault_new(bdb_vfs *under, uint64_t seed);
void bdb_vfs_fault_free(bdb_vfs *v);
/* Fail counted call number n (1-based) with err; sticky = also every call after it. */
void bdb_vfs_fault_fail_at(bdb_vfs *v, uint64_t n, int err, int sticky);
uint64_t bdb_vfs_fault_calls(bdb_vfs *v); /* counted calls so far */
/* Power goes off just before counted call n (1-based; 0 = never): that call and every
 * later counted call fail with EIO and have no effect, and, unlike a failing sync
 * under fail_at, unsynced writes stay pending, so a bdb_vfs_fault_crash() afterwards
 * decides their fate. This is how crash tests place the crash point at every call in
 * turn: run the operation to its end (it sees errors after the cut), then crash. */
void bdb_vfs_fault_power_off_at(bdb_vfs *v, uint64_t n);
/* Simulates power loss: applies the mode to unsynced state, then every open file of
 * this VFS becomes unusable (calls return BDB_ERR_IO). The caller then reopens the
 * storage through a fresh VFS over `under`. sector = 512 or 4096 for TEAR. */
void bdb_vfs_fault_crash(bdb_vfs *v, enum bdb_fault_crash_mode mode, int sector);

#endif
