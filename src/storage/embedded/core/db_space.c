/* db_space: the disk reserve (db_space.h). */
#include "storage/embedded/core/db_space.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/path.h"
#include "storage/embedded/core/db_int.h"

#include "bucketdb/bdb.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Below this much WAL a flush needs too little room to be worth starting early: a
 * disk this close to full answers 507 and waits for the operator. */
#define DB_SPACE_MIN_WAL (64u << 10)

uint64_t db_space_free(const bdb_db *db)
{
    struct statvfs sv;
    if (statvfs(db->dir, &sv) != 0)
        return UINT64_MAX;
    return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Makes the file hold exactly n allocated bytes. posix_fallocate allocates without
 * writing (ext4, xfs, tmpfs), so a restart costs no I/O; a reserve left by the last
 * run is already allocated and passes at once even on a full disk. */
static int make_reserve(bdb_db *db, uint64_t n)
{
    char *p = bdb_path_join(db->dir, DB_SPACE_FILE, NULL);
    if (!p)
        return BDB_ERR_NOMEM;
    int e = 0;
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        e = errno;
    } else {
        e = posix_fallocate(fd, 0, (off_t)n);       /* returns the error, errno untouched */
        if (e == 0 && ftruncate(fd, (off_t)n) != 0) /* a larger one from a bigger setting */
            e = errno;
        if (e == 0 && fsync(fd) != 0)
            e = errno;
        close(fd);
        if (e)
            unlink(p); /* a partial reserve would hold space without being counted */
    }
    free(p);
    errno = e;
    return e == 0 ? BDB_OK : e == ENOSPC ? BDB_ERR_NOSPACE : BDB_ERR_IO;
}

static void unlink_reserve(bdb_db *db, int *existed)
{
    char *p = bdb_path_join(db->dir, DB_SPACE_FILE, NULL);
    int e = errno;
    *existed = p && unlink(p) == 0;
    errno = e;
    free(p);
}

void db_space_open(bdb_db *db)
{
    int existed;
    atomic_store(&db->space_flush_lsn, UINT64_MAX);
    atomic_store(&db->space_hold_lsn, UINT64_MAX);
    if (db->o.disk_reserve_bytes == 0) {
        unlink_reserve(db, &existed); /* the setting was turned off: give the room back */
        return;
    }
    atomic_fetch_or(&db->space_low, DB_SPACE_OUT);
    if (db_space_restore(db) != BDB_OK)
        BDB_WARN("disk reserve: cannot make %llu bytes in %s (%s, %llu bytes free); writes "
                 "are refused until there is room (docs/OPERATIONS.md#disk-space)",
                 (unsigned long long)db->o.disk_reserve_bytes, db->dir, strerror(errno),
                 (unsigned long long)db_space_free(db));
    db_space_tight(db); /* arms the write path's marks */
}

int db_space_release(bdb_db *db)
{
    if (db->o.disk_reserve_bytes == 0 ||
        (atomic_fetch_or(&db->space_low, DB_SPACE_OUT) & DB_SPACE_OUT))
        return 0;
    int existed;
    unlink_reserve(db, &existed);
    if (existed)
        atomic_fetch_add(&db->space_releases, 1);
    BDB_WARN("disk full: the disk reserve (%llu bytes) is %s; writes are refused (507) until "
             "it is made again",
             (unsigned long long)db->o.disk_reserve_bytes,
             existed ? "given to the flush" : "missing (deleted by hand?)");
    /* without a file there is no room to give, but the retry costs one failed flush,
     * and writes now stop until a flush succeeds and the reserve is back */
    return 1;
}

int db_space_restore(bdb_db *db)
{
    if (db->o.disk_reserve_bytes == 0 || !(atomic_load(&db->space_low) & DB_SPACE_OUT))
        return BDB_OK;
    int rc = make_reserve(db, db->o.disk_reserve_bytes);
    if (rc == BDB_OK) {
        atomic_fetch_and(&db->space_low, ~DB_SPACE_OUT);
        BDB_INFO("disk reserve of %llu bytes in place; writes are accepted",
                 (unsigned long long)db->o.disk_reserve_bytes);
    }
    return rc;
}

int db_space_tight(bdb_db *db)
{
    if (db->o.disk_reserve_bytes == 0)
        return 0;
    bdb_wal_stats ws;
    bdb_wal_get_stats(db->wal, &ws);
    uint64_t f = db_space_free(db), w = ws.bytes_on_disk;
    if (f == UINT64_MAX)
        return atomic_exchange(&db->space_flush_asked, 0);
    /* The two marks for the write path, in WAL bytes from now. Ask for a flush once x
     * more bytes would break f - x >= 2 (w + x). Hold writes once x more would leave
     * a flush of the WAL (c = 3/2 of it) without room even with the reserve given to
     * it: 1.5 (w + x) > f - x + r. The hold mark is never below the ask mark. */
    uint64_t r = atomic_load(&db->space_low) & DB_SPACE_OUT ? 0 : db->o.disk_reserve_bytes;
    uint64_t ask = f > 2 * w ? (f - 2 * w) / 3 : 0;
    if (w + ask < DB_SPACE_MIN_WAL)
        ask = DB_SPACE_MIN_WAL - w;
    uint64_t room = f + r, need = w + w / 2;
    uint64_t hold = room > need ? (room - need) * 2 / 5 : 0;
    if (hold < ask)
        hold = ask;
    atomic_store(&db->space_hold_lsn, ws.written_lsn + hold);
    atomic_store(&db->space_flush_lsn, ws.written_lsn + ask);
    if (hold > 0)
        atomic_fetch_and(&db->space_low, ~DB_SPACE_HOLD);
    if (atomic_exchange(&db->space_flush_asked, 0))
        return 1;
    return w >= DB_SPACE_MIN_WAL && f / 2 < w;
}

void db_space_crossed(bdb_db *db, uint64_t lsn)
{
    uint64_t hold = atomic_load(&db->space_hold_lsn);
    if (lsn >= hold) {
        if (!(atomic_fetch_or(&db->space_low, DB_SPACE_HOLD) & DB_SPACE_HOLD))
            BDB_WARN("disk nearly full: the WAL holds what a flush can still write with "
                     "%llu bytes free; writes are refused (507) until a flush makes room",
                     (unsigned long long)db_space_free(db));
        atomic_store(&db->space_flush_lsn, UINT64_MAX);
    } else {
        atomic_store(&db->space_flush_lsn, hold);
    }
    if (!atomic_exchange(&db->space_flush_asked, 1) && db->bg_running) {
        pthread_mutex_lock(&db->bg_mu);
        pthread_cond_signal(&db->bg_cv);
        pthread_mutex_unlock(&db->bg_mu);
    }
}
