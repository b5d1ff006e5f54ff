/* alloc: the engine's and parsers' allocation calls, thin over libc, plus a test-only
 * failure injector.
 *
 * Every allocation of src/storage/embedded, src/storage/vfs, src/ingest, src/model,
 * src/agg and src/common goes through these so that a test can make the Nth one fail
 * and check that the caller returns BDB_ERR_NOMEM without leaking or leaving shared
 * state half-updated (tests/unit/storage/embedded/alloc_fail_test.c). They behave
 * exactly like their libc namesakes; release them with free().
 *
 * The injector is compiled into every build: while it is disarmed an allocation costs
 * one relaxed atomic load and a branch that is never taken. Arming it is for tests
 * only; it counts allocations of every thread. */
#ifndef BDB_ALLOC_H
#define BDB_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *bdb_malloc(size_t n);
void *bdb_calloc(size_t n, size_t size);
void *bdb_realloc(void *p, size_t n);
char *bdb_strdup(const char *s);
char *bdb_strndup(const char *s, size_t n);

/* Injector. The allocation counter restarts at each arming; the first allocation
 * after arming is number 1. */
enum bdb_alloc_mode {
    BDB_ALLOC_FAIL_NTH = 1,  /* only allocation number nth fails */
    BDB_ALLOC_FAIL_FROM = 2, /* allocation number nth and every later one fail */
};
void bdb_alloc_fail_arm(enum bdb_alloc_mode mode, uint64_t nth);
void bdb_alloc_fail_disarm(void);
uint64_t bdb_alloc_fail_count(void);    /* allocations seen since arming */
uint64_t bdb_alloc_fail_injected(void); /* failures injected since arming */

#endif
