/* merge: the engine's one newest-write-wins merge. Several places hold samples of one
 * series from several sources (head chunks, their side lists, block files, sink rows)
 * that may repeat a time with different values: flush and compaction (into block
 * chunks), the sink flush (one put per partition), raw reads (into arrays), and the
 * tiers, fleet aggregates and late recompute (reading the result). All of them merge
 * here, so that every answer keeps the same sample of a time.
 *
 * Use: begin a source with db_merger_source (its priority: a higher one is a later
 * write; its partition: kept with each sample for the block and sink outputs), push
 * its samples in the source's own order (db_merger_push, or a whole chunk with
 * db_merger_push_chunk / db_merger_add_head / db_merger_add_list), repeat per source,
 * then db_merger_sort. The result, m->t[0 .. m->n), is in ascending time with one
 * sample per time: the one of the highest priority; within one source, the one pushed
 * first (two sources of one priority should not share a time: which of them wins is
 * then unspecified). db_merger_emit, db_merger_each_part and
 * db_merger_samples sort and hand the result on in one step; db_merger_clear empties
 * the merger. More sources may be added after a sort: the result so far is merged
 * again with them (the late recompute sorts the few head samples first, so that the
 * whole is usually in order already).
 *
 * Cost: sources usually arrive in time order, so the sort first checks whether the
 * samples are already ascending (nothing to do) or form two ascending runs with the
 * second wholly before the first (a rotation); only otherwise does it qsort. No
 * allocation per sample: the buffers grow by doubling and are kept until
 * db_merger_free, so a flush reuses one merger for every series.
 *
 * Out of memory: a push that cannot grow the buffers drops the sample and sets oom;
 * the next sort (or emit, each_part, samples) then fails with BDB_ERR_NOMEM and
 * empties the merger, so that nobody takes part of the samples for all of them.
 *
 * A zeroed struct is an empty merger. Not thread-safe: one merger per thread. */
#ifndef BDB_MERGE_H
#define BDB_MERGE_H

#include "common/buf.h"
#include "storage/embedded/block/block.h"

#include <stddef.h>
#include <stdint.h>

struct hchunk;

typedef struct db_merger_samp {
    int64_t ts;
    uint64_t prio;
    uint64_t order; /* position inside its source: the sort is deterministic */
    int64_t part;   /* the source's partition (bucket start) */
    double v;
} db_merger_samp;

typedef struct db_merger {
    db_merger_samp *t; /* the pushed samples; after a sort, the merged result */
    size_t n, cap;
    uint64_t prio, order; /* the current source: its priority, the next sample's position */
    int64_t part;
    int64_t *ts; /* scratch: a head chunk's samples, or the chunk db_merger_emit encodes */
    double *v;
    size_t tn, tcap;
    bdb_buf enc;
    int oom; /* a sample was dropped for lack of memory: the next sort fails */
} db_merger;

void db_merger_free(db_merger *m);
/* Begins a source of priority prio in partition part; its samples are pushed next. */
void db_merger_source(db_merger *m, uint64_t prio, int64_t part);
/* One sample of the current source. */
void db_merger_push(db_merger *m, int64_t ts, double v);
/* The samples in [lo, hi) of one block chunk (bare or whole) as part of the current
 * source: BDB_OK, BDB_ERR_CORRUPT (the chunk does not decode; what decoded before the
 * damage stays pushed) or BDB_ERR_NOMEM (oom is set too). */
int db_merger_push_chunk(db_merger *m, const bdb_chunk_ref *c, int64_t lo, int64_t hi);
/* Head chunk c's samples in [lo, hi) (the newest of each time within the chunk) as a
 * source of its own. Out of memory sets oom. The caller holds the device's lock. */
void db_merger_add_head(db_merger *m, const struct hchunk *c, int64_t lo, int64_t hi, uint64_t prio,
                        int64_t part);
/* Each chunk of a head list (newest first) that overlaps [lo, hi) as a source of its
 * own, the oldest of the list at priority base + 1 and the newest at base + (length of
 * the list); chunks for which skip(skip_ctx, c) returns non-zero are left out (skip
 * may be NULL). Partition 0. Returns base + (length of the list): the base of a list
 * of newer chunks. */
uint64_t db_merger_add_list(db_merger *m, const struct hchunk *list, int64_t lo, int64_t hi,
                            uint64_t base, int (*skip)(const void *ctx, const struct hchunk *c),
                            const void *skip_ctx);
/* Merges what was pushed into m->t[0 .. m->n): BDB_OK, or BDB_ERR_NOMEM (emptied). */
int db_merger_sort(db_merger *m);
/* Empties the merger, keeping its buffers. */
void db_merger_clear(db_merger *m);
/* Sorts and writes the result to w as chunks of series key, at most max samples each
 * (max 0: BDB_ERR_INVALID) and one partition each; empties the merger. */
int db_merger_emit(db_merger *m, bdb_block_writer *w, const bdb_series_key *key, uint32_t max);
/* Sorts and calls put once per partition, in the order of each partition's first
 * sample, with that partition's samples in ascending time (a partition's samples need
 * not be adjacent: sub-buckets interleave them). Stops at put's first non-BDB_OK
 * return and returns it. Empties the merger. */
int db_merger_each_part(db_merger *m,
                        int (*put)(void *ctx, int64_t part, const int64_t *ts, const double *v,
                                   size_t n),
                        void *ctx);
/* Sorts and copies the result into the growable arrays (*ts, *v) of capacity *cap,
 * *n samples; on BDB_ERR_NOMEM *n is 0. Empties the merger. */
int db_merger_samples(db_merger *m, int64_t **ts, double **v, size_t *n, size_t *cap);

#endif
