/* fileset: the load rules of the engine's window files (tier files, fleet files).
 *
 * Such a file holds the windows of one time span, is published by a flush under a
 * sequence number (seq) that no other file of its kind takes, records the WAL
 * position its flush covered (wal_upto), and may replace others: a compaction's
 * output lists the seqs of its inputs. Every kind is written the same crash-safe way
 * (a .tmp file renamed into place, inputs unlinked only after their replacement is
 * published), so every kind is loaded by the same rules, kept here once:
 *
 *   - a leftover `.tmp` was never published: it is deleted;
 *   - a file another file lists as an input was replaced (a crash came between the
 *     compaction's rename and its unlinks): it is deleted, else its windows would
 *     count twice;
 *   - a file past the committed WAL position (its flush never saved its catalog, so
 *     its samples come back from the WAL) is deleted for the same reason;
 *   - a damaged file is moved to the quarantine directory, logged and not read;
 *   - running out of memory is never damage: the load stops and fails, touching
 *     nothing else, and is tried again by the caller.
 *
 * Each kind parses and keeps its files through bdb_fileset_kind; the file lists,
 * their order and the maintenance stay the kind's (their groups and merges differ). */
#ifndef BDB_FILESET_H
#define BDB_FILESET_H

#include "storage/vfs/vfs.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The seqs replaced by the files of a set: filled by the kind's `replaced`. */
typedef struct bdb_fileset_seqs bdb_fileset_seqs;
/* Adds n seqs: BDB_OK or BDB_ERR_NOMEM. */
int bdb_fileset_seqs_add(bdb_fileset_seqs *s, const uint64_t *seqs, size_t n);

typedef struct bdb_fileset_kind {
    const char *name; /* "tier": log lines, and the prefix of a quarantined file's name */
    const char *ext;  /* the published files' ending, ".tier"; other names are left alone */
    /* The seqs the file image (data, len bytes, the callee's to free) of directory sub
     * replaced, added to out. A file that does not parse adds nothing: the second pass
     * quarantines it. BDB_OK or BDB_ERR_NOMEM. */
    int (*replaced)(void *ctx, int sub, uint8_t *data, size_t len, bdb_fileset_seqs *out);
    /* Parses the file `name` of directory sub (path `dir/name`); data (len bytes) is
     * the callee's either way, to free or keep. BDB_OK with the parsed file in *f and
     * its *seq and *wal_upto; BDB_ERR_CORRUPT with the damage in *why (quarantined);
     * BDB_ERR_NOMEM or another error (a rewrite that found the disk full): the load
     * stops and fails. */
    int (*parse)(void *ctx, int sub, const char *dir, const char *name, uint8_t *data, size_t len,
                 void **f, uint64_t *seq, uint64_t *wal_upto, const char **why);
    /* Frees a parsed file that is not kept. */
    void (*discard)(void *ctx, void *f);
    /* Keeps a parsed file (path: its path, the caller's): BDB_OK; BDB_ERR_NOMEM stops
     * the load; any other error leaves the file out (the callee logs it). On error
     * the callee frees f. */
    int (*keep)(void *ctx, int sub, void *f, const char *path);
} bdb_fileset_kind;

/* Loads the files of dirs[0..ndirs) (directory i is `sub` i of the kind) by the rules
 * above, in two passes: the first removes .tmp files and collects replaced seqs, the
 * second parses, drops and keeps. wal_upto is the committed WAL position; damaged
 * files go to quarantine_dir/<kind name>-<file name>, counted in *quarantined; files
 * dropped as replaced or uncommitted are counted in *discarded. BDB_OK, or the error
 * that stopped it (BDB_ERR_NOMEM, an I/O error of a rewrite): the files kept so far
 * stay kept, for the caller to free. */
int bdb_fileset_load(bdb_vfs *vfs, const char *const *dirs, int ndirs, const char *quarantine_dir,
                     uint64_t wal_upto, const bdb_fileset_kind *kind, void *ctx,
                     _Atomic uint64_t *quarantined, _Atomic uint64_t *discarded);

#endif
