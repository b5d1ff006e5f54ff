#include "common/alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* armed is the only word the fast path reads; the counters are touched only while
 * armed, so an unarmed process shares no cache line between allocating threads. */
static atomic_int armed;
static atomic_uint_fast64_t seen, injected;
static enum bdb_alloc_mode fail_mode;
static uint64_t fail_nth;

/* Returns 1 if this allocation must fail. Called only while armed. */
static int inject_slow(void)
{
    uint64_t k = atomic_fetch_add(&seen, 1) + 1;
    int fail = fail_mode == BDB_ALLOC_FAIL_NTH ? k == fail_nth : k >= fail_nth;
    if (fail) {
        atomic_fetch_add(&injected, 1);
        errno = ENOMEM;
    }
    return fail;
}

static inline int inject(void)
{
    if (__builtin_expect(atomic_load_explicit(&armed, memory_order_relaxed), 0))
        return inject_slow();
    return 0;
}

void *bdb_malloc(size_t n)
{
    return inject() ? NULL : malloc(n);
}

void *bdb_calloc(size_t n, size_t size)
{
    return inject() ? NULL : calloc(n, size);
}

void *bdb_realloc(void *p, size_t n)
{
    return inject() ? NULL : realloc(p, n);
}

char *bdb_strdup(const char *s)
{
    return inject() ? NULL : strdup(s);
}

char *bdb_strndup(const char *s, size_t n)
{
    return inject() ? NULL : strndup(s, n);
}

void bdb_alloc_fail_arm(enum bdb_alloc_mode mode, uint64_t nth)
{
    atomic_store(&armed, 0);
    fail_mode = mode;
    fail_nth = nth;
    atomic_store(&seen, 0);
    atomic_store(&injected, 0);
    atomic_store(&armed, 1); /* seq_cst: the settings above are visible before this */
}

void bdb_alloc_fail_disarm(void)
{
    atomic_store(&armed, 0);
}

uint64_t bdb_alloc_fail_count(void)
{
    return atomic_load(&seen);
}

uint64_t bdb_alloc_fail_injected(void)
{
    return atomic_load(&injected);
}
