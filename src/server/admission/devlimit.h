/* devlimit: device profiles (max reports per second, expected reporting interval) and
 * the per-device rate limiter they drive (docs/TENANCY.md, "Device profiles").
 *
 * Profiles are few and durable: <data>/profiles, rewritten whole on each change
 * (temp file, fsync, rename, fsync of the directory) and ending with a crc32 line;
 * with a store (Cassandra), the same bytes are its document "profiles", written
 * first, so that they outlive the server's disk.
 *
 * Limiter state is many and disposable: one 24-byte entry per active device (64-bit
 * hash of tenant and device, last refill time, level in milli-reports) in an
 * open-addressing table with linear probing, kept between 3/16 and 3/4 full. An
 * entry idle longer than idle_ms is expired lazily (found expired on lookup, or met
 * by a sweep of a few slots per call), so memory follows the devices active within
 * idle_ms, not every device ever seen. An expired device starts again with a full
 * bucket, which is what an idle bucket would hold anyway.
 *
 * The clock is the caller's (ms); every function is thread-safe (one mutex). */
#ifndef BDB_DEVLIMIT_H
#define BDB_DEVLIMIT_H

#include "model/batch.h"

#include <stddef.h>
#include <stdint.h>

#define BDB_DEVLIMIT_MAX_RPS 1000000u
#define BDB_DEVLIMIT_DEFAULT_IDLE_MS (10 * 60 * 1000)

typedef struct bdb_devlimit bdb_devlimit;

/* data_dir NULL: profiles are kept in memory only. Loads <data>/profiles if present.
 * BDB_OK, BDB_ERR_CORRUPT (err says why), BDB_ERR_IO or BDB_ERR_NOMEM. */
int bdb_devlimit_open(const char *data_dir, int64_t idle_ms, bdb_devlimit **out, char *err,
                      size_t errlen);
/* As bdb_devlimit_open, with a store that keeps named documents (the Cassandra
 * keyspace: storage/sink.h doc_put/doc_get; NULL or one without them: the file
 * alone). The store's document "profiles" (the file's bytes) is the truth where it
 * answers: the file is rewritten from it; a store without it gets the file; a store
 * that cannot be reached leaves the file in force (logged), and the first change
 * reads the store again first. Every change goes to the store first: one it does not
 * confirm fails with BDB_ERR_AGAIN and changes nothing. A damaged document:
 * BDB_ERR_CORRUPT. */
struct bdb_sink;
int bdb_devlimit_open_store(const char *data_dir, struct bdb_sink *store, int64_t idle_ms,
                            bdb_devlimit **out, char *err, size_t errlen);
void bdb_devlimit_free(bdb_devlimit *d);

/* Sets (max_rps 0 = no limit) a device's profile and saves it (the store first, see
 * bdb_devlimit_open_store): BDB_OK, BDB_ERR_INVALID, BDB_ERR_NOMEM, BDB_ERR_AGAIN (the
 * store did not confirm: nothing changed), BDB_ERR_IO (the file). */
int bdb_devlimit_set_profile(bdb_devlimit *d, const char *tenant, const char *device,
                             uint32_t max_rps, int64_t expected_interval_ms);
/* 1 and the values when the device has a profile, else 0. */
int bdb_devlimit_get_profile(bdb_devlimit *d, const char *tenant, const char *device,
                             uint32_t *max_rps, int64_t *expected_interval_ms);
size_t bdb_devlimit_profiles(bdb_devlimit *d);

/* Raw limiter, by key (tests and callers without profiles): takes `cost` reports
 * from the device's bucket (rate max_rps/s, burst max(1, max_rps)). 1 taken; 0
 * refused with *retry_after_s (whole seconds, >= 1); -1 cost above the burst. */
int bdb_devlimit_take(bdb_devlimit *d, uint64_t key, uint32_t max_rps, uint32_t cost,
                      int64_t now_ms, int64_t *retry_after_s);
uint64_t bdb_devlimit_key(const char *tenant, const char *device, size_t dlen);

/* Admission of a whole batch: every device of the batch with a max_rps profile must
 * have room for its reports in this batch, else nothing is taken. 1 admitted; 0 or -1
 * refused (as take) with the first refused device's name in *dev and *dev_len (it
 * points into b, so it is whole whatever max_key_bytes allows, and lives as long as
 * b), its limit and the reports it has in the batch. */
int bdb_devlimit_admit(bdb_devlimit *d, const char *tenant, const bdb_batch *b, int64_t now_ms,
                       const char **dev, size_t *dev_len, uint32_t *limit, uint32_t *value,
                       int64_t *retry_after_s);

/* Entries in the limiter table, its slot count, and bytes of its slots. */
size_t bdb_devlimit_entries(bdb_devlimit *d);
size_t bdb_devlimit_capacity(bdb_devlimit *d);
size_t bdb_devlimit_table_bytes(bdb_devlimit *d);
/* Size of one slot. */
size_t bdb_devlimit_entry_size(void);

#endif
