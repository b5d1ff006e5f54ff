/* backpressure: the server's in-flight budgets and the storage-head guard, so that
 * memory stays bounded when clients send faster than storage can absorb
 * (docs/TENANCY.md#backpressure).
 *
 * Budgets. B = max_inflight_bytes counts the bytes requests hold while they are
 * being received and processed: the body as received, a decompressed body, and an
 * estimate of the parsed batch and its WAL record. A write announcing Content-Length
 * n reserves (1 + BDB_BP_PARSE_FACTOR) x n when its headers arrive; once the body is
 * in (and decompressed), the parse part is set to the estimate made from the body
 * itself (h_write.c), giving back the excess or asking for more. W =
 * max_inflight_writes counts write requests from the moment their headers arrive
 * until they are answered. A tenant may hold at most share% of each
 * (tenant_inflight_share; at least one write).
 *
 * Admission rule, decided when a request's headers arrive (Content-Length known) and
 * again whenever a request needs more bytes (chunked bodies, decompression):
 *   1. if the tenant would hold more than its share of B or W: refused, 429
 *      (reason tenant_bytes / tenant_writes): this tenant sends too much at once;
 *   2. else if the server would hold more than B or W: refused, 503
 *      (inflight_bytes / inflight_writes): the server is overloaded.
 * A refused request takes nothing from the budgets.
 *
 * Head guard: while the storage head holds more than BDB_BP_HEAD_FACTOR x
 * head_max_bytes (flushing does not keep up), a write waits up to
 * BDB_BP_HEAD_WAIT_MS for the flush, then is refused with 503 (head_memory). No
 * hysteresis below that: after a flush the head keeps one open chunk per series it
 * wrote to, which with many series can stay above head_max_bytes.
 *
 * The decision functions (bdb_bp_decide, bdb_bp_head_over) are pure, for unit
 * tests; the rest keeps the counters under one mutex. Thread-safe. */
#ifndef BDB_BACKPRESSURE_H
#define BDB_BACKPRESSURE_H

#include <stddef.h>
#include <stdint.h>

#define BDB_BP_HEAD_FACTOR 2
/* What a write reserves at admission for parsing, per byte of Content-Length (a
 * line-protocol body of short lines takes about this much again once parsed). */
#define BDB_BP_PARSE_FACTOR 4
/* A write that finds the head guard on waits this long for the flush to bring the
 * head back under head_max_bytes before it is refused (a short burst is absorbed;
 * a flush that does not keep up sheds load). */
#define BDB_BP_HEAD_WAIT_MS 1000
/* Retry-After (seconds) of a refusal: in-flight work drains within a request's
 * time; the head within a flush. */
#define BDB_BP_RETRY_INFLIGHT_S 1
#define BDB_BP_RETRY_HEAD_S 2
/* /health stays "unhealthy" this long after the last server-wide refusal. */
#define BDB_BP_HEALTH_WINDOW_MS 5000
/* Longest tenant name accounted (the registry's limit). */
#define BDB_BP_TENANT_MAX 128

enum bdb_bp_reason {
    BDB_BP_NONE = -1,
    BDB_BP_INFLIGHT_BYTES = 0, /* 503 */
    BDB_BP_INFLIGHT_WRITES,    /* 503 */
    BDB_BP_TENANT_BYTES,       /* 429 */
    BDB_BP_TENANT_WRITES,      /* 429 */
    BDB_BP_HEAD_MEMORY,        /* 503 */
    BDB_BP_REASON_N
};
/* Label of bucketdb_backpressure_events_total{reason}. */
const char *bdb_bp_reason_name(enum bdb_bp_reason r);
/* 429 for the tenant reasons, 503 for the others. */
unsigned bdb_bp_status(enum bdb_bp_reason r);
int64_t bdb_bp_retry_after(enum bdb_bp_reason r);

typedef struct bdb_bp_limits {
    uint64_t max_bytes;  /* B */
    uint64_t max_writes; /* W */
    unsigned share_pct;  /* 1..100 */
} bdb_bp_limits;

/* A tenant's share of a budget: max x share / 100, at least 1. */
uint64_t bdb_bp_share(uint64_t max, unsigned share_pct);

/* The admission rule above for a request that holds own_bytes already and asks for
 * add_bytes and add_writes (0 or 1) more; total_* are the server's holdings and
 * tenant_* the tenant's, own_bytes included (tenant_* are 0 when the request has no
 * tenant: only the server-wide budgets apply). A request that is alone (nothing else
 * held, by the server or by its tenant) is never refused by that budget, so one
 * request larger than a budget still goes through on an idle server. Returns
 * BDB_BP_NONE (admit) or why not. */
enum bdb_bp_reason bdb_bp_decide(const bdb_bp_limits *l, uint64_t total_bytes,
                                 uint64_t total_writes, uint64_t tenant_bytes,
                                 uint64_t tenant_writes, int has_tenant, uint64_t own_bytes,
                                 uint64_t add_bytes, uint64_t add_writes);

/* 1 when the head guard is on: head_bytes > BDB_BP_HEAD_FACTOR x head_max (head_max
 * 0, or so large that the product overflows, disables it). */
int bdb_bp_head_over(uint64_t head_bytes, uint64_t head_max);

typedef struct bdb_bp bdb_bp;

/* What one request holds; zero-initialise. */
typedef struct bdb_bp_ticket {
    char tenant[BDB_BP_TENANT_MAX + 1]; /* "" = no tenant accounting */
    uint64_t bytes;
    int write; /* 1 while it holds a write slot */
    int admitted;
} bdb_bp_ticket;

bdb_bp *bdb_bp_new(const bdb_bp_limits *l);
void bdb_bp_free(bdb_bp *bp);

/* Admits a request of `bytes` (its Content-Length, 0 if unknown) for tenant (NULL or
 * "" = none); write = 1 for a write request. On BDB_BP_NONE *t holds the reservation;
 * otherwise nothing was taken and the refusal is counted. now_ms: monotonic. */
enum bdb_bp_reason bdb_bp_admit(bdb_bp *bp, bdb_bp_ticket *t, const char *tenant, uint64_t bytes,
                                int write, int64_t now_ms);
/* Adds `bytes` to an admitted reservation under the same rule (chunked body,
 * decompression, the parsed batch). On refusal nothing is added and the refusal is
 * counted. */
enum bdb_bp_reason bdb_bp_grow(bdb_bp *bp, bdb_bp_ticket *t, uint64_t bytes, int64_t now_ms);
/* Gives back `bytes` of an admitted reservation (an estimate that came out lower). */
void bdb_bp_shrink(bdb_bp *bp, bdb_bp_ticket *t, uint64_t bytes);
/* Gives back everything the ticket holds (safe on a ticket never admitted). */
void bdb_bp_release(bdb_bp *bp, bdb_bp_ticket *t);

/* Head guard: updates the shedding state from the head's size and returns 1 when
 * writes are to be refused; with refuse = 1 the caller refuses one and it is
 * counted (reason head_memory); refuse = 0 only looks (/health). */
int bdb_bp_head_check(bdb_bp *bp, uint64_t head_bytes, uint64_t head_max, int refuse,
                      int64_t now_ms);
/* Counts a refusal decided elsewhere. */
void bdb_bp_count(bdb_bp *bp, enum bdb_bp_reason r, int64_t now_ms);

typedef struct bdb_bp_stats {
    uint64_t bytes, writes;                  /* in flight now */
    uint64_t peak_bytes, peak_writes;        /* highest since start */
    uint64_t tenants;                        /* tenants with something in flight */
    uint64_t events[BDB_BP_REASON_N];        /* refusals by reason since start */
    int head_shedding;                       /* head guard on */
    enum bdb_bp_reason last_server_reason;   /* last 503 refusal, BDB_BP_NONE if none */
    int64_t last_server_ms, last_tenant_ms;  /* monotonic time of the last 503 / 429 */
    enum bdb_bp_reason last_tenant_reason;   /* last 429 refusal */
    char last_tenant[BDB_BP_TENANT_MAX + 1]; /* its tenant */
} bdb_bp_stats;

void bdb_bp_get_stats(bdb_bp *bp, bdb_bp_stats *st);

#endif
