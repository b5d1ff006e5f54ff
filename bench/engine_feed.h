/* engine_feed: what bench/headmem.c and bench/ingestcpu.c share, the two benches that
 * write the engine directly (no server, no HTTP): their arguments, and an engine on a
 * directory with an injected clock that follows the data and no background thread.
 * Header-only: each bench is one .c file built by hand (see its header). */
#ifndef BDB_BENCH_ENGINE_FEED_H
#define BDB_BENCH_ENGINE_FEED_H

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "storage/embedded/core/db.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* argv[i] as an integer in [lo, hi], def when absent; exits 2 naming prog otherwise. */
static long ef_arg(const char *prog, int argc, char **argv, int i, long def, long lo, long hi)
{
    if (argc <= i)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "%s: argument %d must be an integer in [%ld, %ld]\n", prog, i, lo, hi);
        exit(2);
    }
    return v;
}

static int64_t ef_clock(void *ctx)
{
    return *(const int64_t *)ctx;
}

/* An engine on dir whose clock reads *now (the bench moves it with the data), with
 * periodic WAL syncs and no background thread; exits 1 naming prog when it cannot
 * open. */
static bdb_db *ef_open(const char *prog, const char *dir, int64_t *now)
{
    bdb_log_set_level(BDB_LOG_ERROR);
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    o.sync_mode = BDB_WAL_SYNC_PERIODIC;
    o.clock = (bdb_clock){ef_clock, now};
    bdb_db *db = NULL;
    if (bdb_db_open(&o, &db) != BDB_OK) {
        fprintf(stderr, "%s: cannot open %s\n", prog, dir);
        exit(1);
    }
    return db;
}

#endif
