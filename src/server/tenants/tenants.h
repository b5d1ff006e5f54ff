/* tenants: the tenant registry. Each registered tenant has a name, the SHA-256 of its
 * token (the token itself is never stored: it is shown once, at creation or
 * rotation), quotas, a retention setting and its creation time; at run time also its
 * write-rate token bucket and its quota rejection counters.
 *
 * Persisted in <dir>/tenants (and, with a store, first in the store:
 * bdb_tenants_open_store), rewritten whole at every change (temp file, fsync,
 * rename, fsync of the directory), in a versioned text format ending in a CRC-32:
 *
 *   bucketdb-tenants 1
 *   tenant <name> sha256=<64 hex> created=<ms> rotated=<ms> writes_per_second=<n>
 *          burst=<n> max_devices=<n> storage_bytes=<n> retention_ms=<n>
 *          [hot_threshold=<n>] [hot_policy=<name>] [hot_subbuckets=<n>]
 *          [hot_rate_limit=<n>] [hot_sample=<fraction>]
 *          [tier_retention_1m=<ms>] [tier_retention_1h=<ms>] [tier_retention_1d=<ms>]
 *          [device_rule=<rule>]                                              (one line)
 *   (device_rule: the tenant's device rule, ingest/devrule.h, without blanks; written
 *    only when set)
 *   (tier_retention_*: rollup tier TTL, -1 = forever; written only when set)
 *   (the hot_* keys are written only when set, so a file without them reads as before)
 *   ...
 *   deleted <name> gen=<deletions so far> at=<ms of the last one> [purged=<p>]
 *          (tenants_gen.c; p: the generations below it had their data removed)
 *   ...
 *   count <number of tenant lines>
 *   crc32 <8 hex: CRC-32 of every byte before this line>
 *
 * A damaged file (bad checksum, unknown version, a line that does not parse) is
 * refused at open rather than read partly: tokens would silently stop working.
 *
 * Thread-safety: every function may be called from any thread. Changes (create,
 * update, delete, rotate) are serialised and persisted before they return; if the
 * file cannot be written the change is undone and an error returned. */
#ifndef BDB_TENANTS_H
#define BDB_TENANTS_H

#include <stddef.h>
#include <stdint.h>

#define BDB_TENANT_NAME_MAX 128
#define BDB_TOKEN_BYTES 32                  /* random bytes in a tenant token */
#define BDB_TOKEN_HEX (2 * BDB_TOKEN_BYTES) /* its hex length */
#define BDB_HASH_BYTES 32                   /* SHA-256 */
#define BDB_TENANT_RULE_MAX 256             /* device rule text with its NUL */

typedef struct bdb_quotas {
    uint64_t writes_per_second; /* samples per second; 0 = unlimited */
    uint64_t burst;             /* samples; 0 = 10 x writes_per_second */
    uint64_t max_devices;       /* 0 = unlimited */
    uint64_t storage_bytes;     /* 0 = unlimited; block files + unflushed head (quota.h) */
} bdb_quotas;

/* The limits a write can be refused for (labels of bucketdb_quota_rejections_total). */
enum bdb_quota_limit {
    BDB_LIMIT_RATE,
    BDB_LIMIT_BURST,
    BDB_LIMIT_DEVICES,
    BDB_LIMIT_STORAGE, /* "storage_bytes" (quota.h); run-time counters only, not in the file */
    BDB_LIMIT_N
};
const char *bdb_quota_limit_name(enum bdb_quota_limit l);

/* A tenant's hot partition settings (server/admission/hotpart.h); each 0 = the server's. */
typedef struct bdb_tenant_hot {
    uint64_t threshold;  /* reports per partition per minute */
    int policy;          /* enum bdb_hot_kind + 1 */
    uint32_t subbuckets; /* 2..64 */
    uint64_t rate_limit; /* reports kept per minute while hot */
    double sample;       /* fraction kept while hot, (0, 1] */
} bdb_tenant_hot;

/* 1 if every set field is in range (threshold and rate_limit <= 2^32-1, subbuckets
 * 2..64, sample in [0.000001, 1]). */
int bdb_tenant_hot_valid(const bdb_tenant_hot *h);

typedef struct bdb_tenant_info {
    char name[BDB_TENANT_NAME_MAX + 1];
    bdb_quotas quotas;
    int64_t retention_ms; /* 0 = the server's retention; stored, NOT enforced yet */
    int64_t created_ms, token_rotated_ms;
    bdb_tenant_hot hot;                    /* optional keys hot_* of the file line */
    int64_t tier_retention_ms[3];          /* rollup tiers 1m, 1h, 1d: 0 = server's, -1 = forever */
    char device_rule[BDB_TENANT_RULE_MAX]; /* ingest/devrule.h text; "" = the server's */
    uint64_t rejections[BDB_LIMIT_N];      /* since the server started */
    uint64_t ingested_samples;             /* durably written since the server started */
    uint64_t ingested_requests;            /* write requests that stored something */
} bdb_tenant_info;

/* A partial update: only the fields whose has_* flag is set change. */
typedef struct bdb_tenant_patch {
    int has_writes_per_second, has_burst, has_max_devices, has_storage_bytes, has_retention;
    bdb_quotas quotas;
    int64_t retention_ms;
    /* hot partition settings: a set flag replaces that field (0 = back to the server's) */
    int has_hot_threshold, has_hot_policy, has_hot_subbuckets, has_hot_rate_limit, has_hot_sample;
    bdb_tenant_hot hot;
    int has_tier_retention[3]; /* rollup tier TTL: 0 = the server's, -1 = forever */
    int64_t tier_retention_ms[3];
    int has_device_rule; /* "" = back to the server's device rule */
    char device_rule[BDB_TENANT_RULE_MAX];
} bdb_tenant_patch;

/* The longest retention a tenant may be given (retention_ms and each tier's), as the
 * quotas are bounded by BDB_QUOTA_MAX_RATE: 100 years (36500d). Longer values could
 * only be typos, and near INT64_MAX they overflow "now - retention". */
#define BDB_TENANT_RETENTION_MAX_MS (36500 * INT64_C(86400000))

typedef struct bdb_tenants bdb_tenants;

/* 1 if name is 1..128 characters of A-Z a-z 0-9 _ - . */
int bdb_tenant_name_valid(const char *name);

/* The rule for a name a tenant is registered under (docs/TENANCY.md#tenant-names):
 * bdb_tenant_name_valid, starting with a letter or a digit (so never ".", ".." or a
 * hidden-file name), and none of the reserved names admin, api and default (nor
 * default_tenant, the name anonymous requests act on, when not NULL), in any case.
 * 0, or -1 with why (when not NULL) saying what is wrong. Only registration checks
 * this: names registered before the rule, and unregistered names in requests, work. */
int bdb_tenant_name_registrable(const char *name, const char *default_tenant, char *why,
                                size_t whylen);

/* SHA-256 of a token (OpenSSL EVP). */
void bdb_token_hash(const char *token, size_t len, uint8_t out[BDB_HASH_BYTES]);
/* Constant-time comparison of two hashes (CRYPTO_memcmp): 1 if equal. */
int bdb_hash_equal(const uint8_t a[BDB_HASH_BYTES], const uint8_t b[BDB_HASH_BYTES]);
/* A new token: BDB_TOKEN_BYTES random bytes as lower-case hex. BDB_OK or BDB_ERR_IO. */
int bdb_token_generate(char out[BDB_TOKEN_HEX + 1]);

/* Opens (loads) the registry of <dir>/tenants; a missing file is an empty registry.
 * Errors: BDB_ERR_CORRUPT (damaged file; err says what), BDB_ERR_IO, BDB_ERR_NOMEM. */
int bdb_tenants_open(const char *dir, bdb_tenants **out, char *err, size_t errlen);
/* The same with a store (a sink with doc_put and doc_get, storage/sink.h: Cassandra's
 * docs table) that keeps the registry as the document "tenants", the file's bytes,
 * and is its truth (docs/TENANCY.md#where-the-registry-lives):
 *  - at open: the store's document when it has one (the file is rewritten from it);
 *    none: the file (stored there when it exists: a deployment moving up); the store
 *    not reachable: the file, with a warning, and with no file the open fails
 *    (BDB_ERR_IO) unless offline_start (no tenant then). A document that fails its
 *    checks is refused (BDB_ERR_CORRUPT), never used in part.
 *  - every change: written to the store first, then to the file; one the store does
 *    not confirm fails with BDB_ERR_AGAIN and changes nothing. A registry that could
 *    not be read from the store at open is made the store's (its document adopted, or
 *    this registry stored when it has none) before the first change.
 * A store without those ops (or NULL) is bdb_tenants_open. store must outlive r. */
struct bdb_sink;
int bdb_tenants_open_store(const char *dir, struct bdb_sink *store, int offline_start,
                           bdb_tenants **out, char *err, size_t errlen);
void bdb_tenants_close(bdb_tenants *r);
const char *bdb_tenants_path(const bdb_tenants *r);

/* Every change below also fails with BDB_ERR_AGAIN when the registry has a store that
 * did not confirm it (bdb_tenants_open_store): nothing changed.
 *
 * Creates a tenant and returns its new token. Errors: BDB_ERR_INVALID (bad name or
 * quota), BDB_ERR_EXISTS, BDB_ERR_IO (not persisted; nothing changed). */
int bdb_tenants_create(bdb_tenants *r, const char *name, const bdb_quotas *q, int64_t retention_ms,
                       int64_t now_ms, char token[BDB_TOKEN_HEX + 1]);
/* The same with every setting a patch carries (quotas, retention, hot, tier retention,
 * device rule; NULL: none), in one change: the admin API's create, so that a tenant
 * is never stored without the settings it was created with. */
int bdb_tenants_create_with(bdb_tenants *r, const char *name, const bdb_tenant_patch *p,
                            int64_t now_ms, char token[BDB_TOKEN_HEX + 1]);
/* Errors: BDB_ERR_NOTFOUND, BDB_ERR_INVALID, BDB_ERR_IO. out (may be NULL) gets the
 * updated tenant. */
int bdb_tenants_update(bdb_tenants *r, const char *name, const bdb_tenant_patch *p,
                       bdb_tenant_info *out);
/* Removes the tenant and, in the same file write, starts a new generation of its
 * name (tenants_gen.c): from then on the name's storage key is a fresh one, and every
 * older key counts as deleted (bdb_tenants_key_deleted). now_ms: wall clock, kept as
 * the deletion time. Requests see the change once the file is durable. Errors:
 * BDB_ERR_NOTFOUND, BDB_ERR_NOMEM, BDB_ERR_IO (nothing changed). */
int bdb_tenants_delete(bdb_tenants *r, const char *name, int64_t now_ms);

/* Takes back a create that could not be completed (the caller failed right after
 * it): the tenant goes from the registry without a deletion being recorded. */
int bdb_tenants_undo_create(bdb_tenants *r, const char *name);

/* ---- deleted tenants and storage keys (tenants_gen.c; docs/TENANCY.md) ----
 * A request acts on a tenant name; the storage engine stores it under the name's
 * storage key: the name itself until a tenant of that name is deleted, then
 * "<name>@<n>" after the n-th deletion. Every function of this header that takes a
 * name also takes the current storage key of a registered tenant. */
#define BDB_TENANT_KEY_MAX (BDB_TENANT_NAME_MAX + 21) /* name, '@', a 64-bit number */
/* The storage key of name into out: BDB_OK, or BDB_ERR_LIMIT when outlen is short. */
int bdb_tenants_storage_key(bdb_tenants *r, const char *name, char *out, size_t outlen);
/* 1 if key is a generation of its name older than the current one: its data belongs
 * to a deleted tenant and must neither be read nor kept. */
int bdb_tenants_key_deleted(bdb_tenants *r, const char *key);
/* 1 (with the number of deletions and the last one's time) if a tenant of this name
 * was ever deleted, else 0. */
int bdb_tenants_deleted(bdb_tenants *r, const char *name, uint64_t *gen, int64_t *at_ms);
/* Purging deleted generations (tenants_purge.c removes their data): the key of the
 * oldest generation of some deleted name whose data is not purged yet into out, 1;
 * 0 when every deleted generation is purged; BDB_ERR_LIMIT when outlen is short. */
int bdb_tenants_purge_next(bdb_tenants *r, char *out, size_t outlen);
/* Records durably that the data of key's generation is purged (it must be the one
 * purge_next gave). BDB_OK, BDB_ERR_NOTFOUND (not the next generation to purge, e.g.
 * recorded already), BDB_ERR_IO (the record stays as it was: purging again is
 * harmless). */
int bdb_tenants_purge_done(bdb_tenants *r, const char *key);
/* The keys of every purged generation (malloc'd array of malloc'd strings, *n of
 * them): the purge looks at them again at start, for data a write that was in
 * flight during the purge put back. BDB_OK or BDB_ERR_NOMEM. */
int bdb_tenants_purged_keys(bdb_tenants *r, char ***keys, size_t *n);
/* Deleted generations whose data is not purged yet. */
uint64_t bdb_tenants_purge_pending(bdb_tenants *r);
/* The tenant name of a storage key, for messages: key itself, or out holding the part
 * before '@'. */
const char *bdb_tenant_key_name(const char *key, char out[BDB_TENANT_NAME_MAX + 1]);
/* A new token for the tenant; the old one stops working at once.
 * Errors: BDB_ERR_NOTFOUND, BDB_ERR_IO. */
int bdb_tenants_rotate(bdb_tenants *r, const char *name, int64_t now_ms,
                       char token[BDB_TOKEN_HEX + 1]);

/* The rollup tier TTL in ms (0 = forever) for tier 0..2 (1m, 1h, 1d) of a tenant: its
 * override, or dflt (the server's) when it has none or is not registered. For the
 * engine's tier retention hook (db_tier.h). */
int64_t bdb_tenants_tier_retention(bdb_tenants *r, const char *name, int tier, int64_t dflt);
/* The tenant's own device rule text into out (cap bytes): 1, or 0 when it has none
 * or is not registered (the server's rule applies). For every write request. */
int bdb_tenants_device_rule(bdb_tenants *r, const char *name, char *out, size_t cap);
/* BDB_OK or BDB_ERR_NOTFOUND. */
int bdb_tenants_get(bdb_tenants *r, const char *name, bdb_tenant_info *out);
/* Calls cb for every tenant in name order (on copies, outside the lock); a non-zero
 * return stops. */
int bdb_tenants_list(bdb_tenants *r, int (*cb)(void *ctx, const bdb_tenant_info *t), void *ctx);
size_t bdb_tenants_count(bdb_tenants *r);

/* The tenant whose token has this hash: 1 and its name copied, or 0. */
int bdb_tenants_find_by_hash(bdb_tenants *r, const uint8_t hash[BDB_HASH_BYTES],
                             char name[BDB_TENANT_NAME_MAX + 1]);
/* The same, with the tenant's storage key into key (keylen at least
 * BDB_TENANT_KEY_MAX + 1) found in the same step: a key looked up by name after the
 * token could be a newer generation's if the tenant was deleted in between, and a
 * deleted tenant's write would land in the name's next tenant. */
int bdb_tenants_find_by_hash_key(bdb_tenants *r, const uint8_t hash[BDB_HASH_BYTES],
                                 char name[BDB_TENANT_NAME_MAX + 1], char *key, size_t keylen);

/* Write-rate admission for a tenant. Returns 1 (admitted: cost taken from its
 * bucket, or it has no rate limit, or it is not registered), 0 (refused for
 * BDB_LIMIT_RATE: *retry_after_s set) or -1 (refused for BDB_LIMIT_BURST: the cost
 * exceeds the burst). *limit_value receives the limit's value when refused. A
 * refusal is counted in the tenant's rejections. now_ms: a monotonic clock. */
int bdb_tenants_admit(bdb_tenants *r, const char *name, uint64_t cost, int64_t now_ms,
                      int64_t *retry_after_s, uint64_t *limit_value);
/* Gives back an admitted cost when the write failed. */
void bdb_tenants_refund(bdb_tenants *r, const char *name, uint64_t cost);
/* Counts a write request that stored `samples`: 1 if the tenant is registered, 0
 * if not (nothing counted). */
int bdb_tenants_count_ingest(bdb_tenants *r, const char *name, uint64_t samples);
/* Counts a refusal decided outside (the device limit). */
void bdb_tenants_count_rejection(bdb_tenants *r, const char *name, enum bdb_quota_limit l);

#endif
