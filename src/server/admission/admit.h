/* admit: the one admission path of every ingestion protocol (HTTP writes, the MQTT
 * gateway). It decides whether a parsed batch may be written now, running every check
 * in one order (docs/RELIABILITY.md#admission), and keeps what the write holds
 * meanwhile in one ticket. The protocols only map its result to their own answer.
 *
 * Order (each step runs only when the ones before it admitted):
 *   reserve, before the payload is parsed (its size is known):
 *     1. head guard: wait up to BDB_BP_HEAD_WAIT_MS for the flush (backpressure.h);
 *     2. in-flight budgets: (1 + BDB_BP_PARSE_FACTOR) x bytes for the write;
 *   batch, once the payload is parsed:
 *     3. head guard again (the head may have grown while the payload arrived);
 *     4. storage quota (storage_bytes);                         takes nothing
 *     5. device quota (max_devices); when the batch adds devices the tenant's device
 *        lock is taken and held until done, so two writes cannot both take the last
 *        free device;                                           takes nothing
 *     6. tenant write rate (writes_per_second, burst);          refunded on a later
 *                                                               refusal or a failed write
 *     7. device profiles (max_rps of each device);              not refundable
 *     8. hot partitions (the tenant's policy; the sample policy keeps part of the
 *        batch);                                                counts every report
 * Checks that take nothing come first, so a batch they refuse costs no tokens; of the
 * ones that take, the refundable one comes first.
 *
 * Ticket: zero it (BDB_ADMIT_TICKET_INIT), reserve it once, call bdb_admit_batch
 * once or more (a refused call keeps only the reservation, so a caller that pauses
 * may ask again), write the result's batch, and call bdb_admit_done exactly once,
 * whatever happened in between: it releases everything the ticket holds.
 *
 * Thread-safety: one bdb_admit serves every thread; a ticket belongs to one. */
#ifndef BDB_ADMIT_H
#define BDB_ADMIT_H

#include "common/buf.h"
#include "model/batch.h"
#include "server/admission/backpressure.h"
#include "server/admission/hotpart.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct bdb_tenants;
struct bdb_db;
struct bdb_devlimit;

enum bdb_admit_verdict {
    BDB_ADMIT_OK = 0,
    BDB_ADMIT_HEAD,        /* the storage head is over its bound: server-wide */
    BDB_ADMIT_STORAGE,     /* the tenant stores storage_bytes or more */
    BDB_ADMIT_DEVICES,     /* the batch would add devices beyond max_devices */
    BDB_ADMIT_RATE,        /* over writes_per_second: admissible after retry_after_s */
    BDB_ADMIT_BURST,       /* more samples than the burst: never admissible */
    BDB_ADMIT_DEVICE_RATE, /* a device over its profile's max_rps */
    BDB_ADMIT_HOT,         /* a rate-limited hot device over its minute */
    BDB_ADMIT_N
};
/* The limit a verdict names: head_memory, storage_bytes, max_devices,
 * writes_per_second, burst, max_rps, hot_rate_limit ("" for OK). */
const char *bdb_admit_limit_name(enum bdb_admit_verdict v);

typedef struct bdb_admit_env {
    struct bdb_tenants *tenants; /* quotas and write rates */
    struct bdb_db *db;           /* head size, storage usage, device counts */
    bdb_bp *bp;                  /* in-flight budgets and head guard */
    struct bdb_devlimit *devlimit;
    bdb_hotpart *hot;
    /* The hot partition policy of a tenant (the server's with its overrides). */
    void (*hot_policy)(void *ctx, const char *tenant, bdb_hot_policy *out);
    void *hot_ctx;
    uint64_t head_max_bytes;
    uint64_t partition_warn_bytes; /* the storage usage tracker's option */
} bdb_admit_env;

typedef struct bdb_admit bdb_admit;

typedef struct bdb_admit_ticket {
    bdb_bp_ticket bp;      /* the in-flight reservation */
    const char *tenant;    /* as given to bdb_admit_batch */
    uint64_t cost;         /* samples taken from the tenant's rate, 0 when none */
    pthread_mutex_t *devq; /* the tenant's device lock while held */
    bdb_batch *kept;       /* the hot sample policy's kept reports */
    bdb_buf msg;           /* a refusal's message (allocated only when refused) */
} bdb_admit_ticket;
#define BDB_ADMIT_TICKET_INIT                                                                      \
    {                                                                                              \
        {                                                                                          \
            {                                                                                      \
                0                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

typedef struct bdb_admit_result {
    enum bdb_admit_verdict verdict;
    const bdb_batch *batch; /* OK: what to write (the batch, or the kept reports) */
    /* refused: */
    const char *msg;       /* names the tenant, the limit and by how much; lives until done */
    int64_t retry_after_s; /* seconds after which a retry can pass; -1: none can */
    uint64_t limit;        /* the limit's value */
    uint64_t value;        /* what the batch asked: samples, new devices, a device's reports */
    uint64_t usage;        /* storage: bytes stored; devices: devices the tenant has */
    const char *device;    /* device verdicts: the first refused device (points into the */
    size_t device_len;     /* batch, so it lives as long as the batch) */
} bdb_admit_result;

/* NULL when out of memory. The env's objects must outlive it. */
bdb_admit *bdb_admit_new(const bdb_admit_env *env);
void bdb_admit_free(bdb_admit *a);

/* Steps 1-2 for a write of `bytes` (0 when unknown) by tenant (NULL or "": only the
 * server-wide budgets apply). BDB_BP_NONE (t holds the reservation) or why not
 * (nothing held; counted). */
enum bdb_bp_reason bdb_admit_reserve(bdb_admit *a, bdb_admit_ticket *t, const char *tenant,
                                     uint64_t bytes);

/* Steps 3-8 for batch b of tenant (its storage key; the pointer must stay valid until
 * done). noun names the unit in the message ("request", "message"). now_ms: the
 * monotonic clock of the rate limiters. Fills *r and returns its verdict. */
enum bdb_admit_verdict bdb_admit_batch(bdb_admit *a, bdb_admit_ticket *t, const char *tenant,
                                       const bdb_batch *b, const char *noun, int64_t now_ms,
                                       bdb_admit_result *r);

/* Releases everything t holds: the device lock, the rate's tokens unless write_rc is
 * BDB_OK (the batch was written), the kept reports, the message, the reservation.
 * write_rc: bdb_db_write's result, or any error when nothing was written. */
void bdb_admit_done(bdb_admit *a, bdb_admit_ticket *t, int write_rc);

/* Head guard alone: 0 within bounds (at once or after waiting up to
 * BDB_BP_HEAD_WAIT_MS), -1 to refuse (counted as head_memory). */
int bdb_admit_head_wait(bdb_admit *a);

/* Device quota alone, for anything that may create a device (a device profile): 0
 * with *held set to the lock to release with bdb_admit_devices_unlock (NULL when the
 * batch adds no device or the tenant has no max_devices), or -1 refused (counted
 * under max_devices; *max, *have and *fresh say by how much). */
int bdb_admit_devices(bdb_admit *a, const char *tenant, const bdb_batch *b, pthread_mutex_t **held,
                      uint64_t *max, uint64_t *have, uint64_t *fresh);
void bdb_admit_devices_unlock(pthread_mutex_t *held);
/* The device quota refusal's message (appended to out). */
void bdb_admit_devices_msg(bdb_buf *out, const char *tenant, uint64_t max, uint64_t have,
                           uint64_t fresh, const char *noun);

/* Batches refused by each verdict since start ([BDB_ADMIT_OK]: admitted). */
uint64_t bdb_admit_count(const bdb_admit *a, enum bdb_admit_verdict v);

#endif
