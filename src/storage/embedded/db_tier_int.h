/* Private to db_tier*.c: one tier file in memory, and the file format functions
 * (db_tier_file.c; layout in docs/formats/tier.md). */
#ifndef BDB_DB_TIER_INT_H
#define BDB_DB_TIER_INT_H

#include "agg/rollup.h"
#include "common/buf.h"
#include "storage/vfs/vfs.h"

#include <stddef.h>
#include <stdint.h>

#define TIER_VERSION 1

typedef struct trec {
    char *device, *metric; /* NUL-terminated copies */
    size_t dlen, mlen;
    uint64_t off;
    uint32_t len; /* record bytes including its CRC */
} trec;

typedef struct tfile {
    char *path;
    enum bdb_res res;
    char *tenant;
    int64_t start, end; /* file window */
    uint64_t seq, wal_upto, size;
    uint64_t *inputs; /* seqs of the files this one replaced (compaction) */
    size_t ninputs;
    trec *recs; /* sorted by (device, metric) */
    size_t nrec;
    bdb_file *f; /* open for pread while the file is in the list */
} tfile;

/* Builds a file in memory: tf_begin, then tf_add per series in any order, then
 * tf_finish, which appends index and footer. */
typedef struct tbuilder {
    enum bdb_res res;
    char *tenant;
    int64_t start, end;
    bdb_buf b;
    bdb_buf idx;
    size_t nrec;
} tbuilder;

void tf_begin(tbuilder *tb, enum bdb_res res, const char *tenant, int64_t start, int64_t end,
              uint64_t seq, uint64_t wal_upto, const uint64_t *inputs, size_t ninputs);
/* Adds the windows of r inside the file window; nothing when there are none. */
void tf_add(tbuilder *tb, const char *device, size_t dlen, const char *metric, size_t mlen,
            const bdb_rollup *r);
void tf_finish(tbuilder *tb);
void tf_builder_free(tbuilder *tb);

/* Parses and checks a whole file image (header, index and every record's CRC).
 * BDB_ERR_CORRUPT with a reason in why. On success *out is filled (f NULL). */
int tf_parse(const uint8_t *p, size_t n, tfile *out, const char **why);
/* Only the header (for the superseded-file scan at load). */
int tf_parse_header(const uint8_t *p, size_t n, tfile *out);
void tf_free(tfile *t);
/* The record of (device, metric) or NULL. */
const trec *tf_find(const tfile *t, const char *device, const char *metric);
/* Reads one record from the open file and merges its windows in [lo, hi) into r.
 * BDB_ERR_CORRUPT if the CRC or the decoding fails. */
int tf_read_rec(const tfile *t, const trec *rec, int64_t lo, int64_t hi, bdb_rollup *r);

#endif
