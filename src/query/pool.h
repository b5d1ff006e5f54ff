/* pool: a fixed set of worker threads that run query tasks, so a query over many
 * partitions reads them in parallel while all multi-partition queries together never
 * run more than `workers` partition reads at once (a single-partition read runs on
 * the caller's thread). */
#ifndef BDB_POOL_H
#define BDB_POOL_H

#include <stddef.h>

typedef struct bdb_pool bdb_pool;

bdb_pool *bdb_pool_new(int workers);
void bdb_pool_free(bdb_pool *p); /* waits for queued tasks */
int bdb_pool_workers(const bdb_pool *p);
/* Runs fn(arg, i) for i in [0, n) on the pool and returns when all are done. */
void bdb_pool_run(bdb_pool *p, void (*fn)(void *arg, size_t i), void *arg, size_t n);

#endif
