/* oom_preload: an LD_PRELOAD library for tests/crash/test_oom.py that makes the real
 * (release) bucketdb binary run out of memory at a chosen allocation, with no test
 * hook in the server.
 *
 * Disarmed at start, so the server starts normally. SIGUSR2 arms it: counting from
 * then, allocation number BDB_OOM_NTH (malloc, calloc, realloc, posix_memalign,
 * aligned_alloc; 1 = the first one) fails with ENOMEM. With BDB_OOM_PERSIST=1 every
 * later one fails too, as when memory is really exhausted; without it only that one
 * does, so the failure reaches the allocation sites deep in a request instead of the
 * HTTP library's first one. Counting is global over all threads, so the
 * test arms it and then drives one path (ingest, flush, query) at a time.
 * The allocations go to glibc's __libc_* entry points, so the library needs no dlsym
 * (which may itself allocate). Built by the test with `cc -shared -fPIC`. */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t m);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

static atomic_int armed;
static atomic_long count;
static long nth = 1;
static int persist;

static void on_usr2(int sig)
{
    (void)sig;
    atomic_store(&count, 0);
    atomic_store(&armed, 1);
}

/* A crash other than the policy's abort is a bug: print where it happened (the log is
 * all the test keeps), then die of the same signal. */
static void on_crash(int sig)
{
    void *pc[32];
    static const char hdr[] = "oom_preload: crashed; backtrace (addr2line -e bucketdb):\n";
    write(2, hdr, sizeof hdr - 1);
    backtrace_symbols_fd(pc, backtrace(pc, 32), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void init(void)
{
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc now, while allocating still works */
    const char *e = getenv("BDB_OOM_NTH");
    if (e && atol(e) > 0)
        nth = atol(e);
    e = getenv("BDB_OOM_PERSIST");
    persist = e && *e == '1';
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, NULL);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

/* 1 when this allocation must fail */
static int fail_now(void)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return 0;
    long k = atomic_fetch_add(&count, 1) + 1;
    return persist ? k >= nth : k == nth;
}

void *malloc(size_t n)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (n && fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (fail_now())
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *aligned_alloc(size_t align, size_t n)
{
    if (fail_now()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_memalign(align, n);
}
