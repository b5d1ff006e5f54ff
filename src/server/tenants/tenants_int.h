/* tenants_int.h: what tenants.c (the registry in memory, changes, reads, admission)
 * and tenants_file.c (its file: encode, atomic write, load) share. Not for other
 * modules: they use tenants.h. */
#ifndef BDB_TENANTS_INT_H
#define BDB_TENANTS_INT_H

#include "common/buf.h"
#include "common/map.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"
#include "storage/sink.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define REG_FILE "tenants"
#define REG_MAGIC "bucketdb-tenants"
#define REG_VERSION 1
#define REG_MAX_BYTES (64u << 20) /* refuse absurd files rather than read them */
#define TN_DOC_KEY "tenants"      /* the registry's document in the store (doc_put) */

/* A deleted name (tenants_gen.c): how many times a tenant of that name was deleted,
 * which is the generation its storage key carries now, and when the last deletion was. */
typedef struct tdead {
    char name[BDB_TENANT_NAME_MAX + 1];
    uint64_t gen;
    int64_t at_ms;
    uint64_t purged; /* generations below it had their data removed (tenants_purge.c) */
} tdead;

typedef struct tentry {
    bdb_tenant_info info;
    uint8_t hash[BDB_HASH_BYTES];
    bdb_tbucket tb;
    int leaving; /* its deletion is being written: left out of the file encoded */
} tentry;

struct bdb_tenants {
    char *dir, *path;
    pthread_mutex_t mu;      /* guards the maps and the entries */
    pthread_mutex_t save_mu; /* serialises changes (held across the file write) */
    bdb_map *by_name;        /* name -> tentry */
    bdb_map *by_hash;        /* hash bytes -> tentry */
    bdb_map *dead;           /* name -> tdead: names whose tenant was deleted */
    /* The store (bdb_tenants_open_store), NULL without one. synced: the registry in
     * memory is the store's (read from it, or pushed to it); until then every change
     * first reads the store again (tn_begin_change). stored: the bytes the store
     * confirmed last. Both under save_mu. */
    bdb_sink *store;
    int synced;
    bdb_buf stored;
};

/* tenants.c: an empty registry of dir (NULL: out of memory); the maps (caller holds
 * mu), hex, quota bounds */
bdb_tenants *tn_new(const char *dir);
void tn_put_entry(bdb_tenants *r, tentry *e);
void tn_drop_entry(bdb_tenants *r, tentry *e);
void tn_free_entries(bdb_tenants *r);
void tn_to_hex(const uint8_t *p, size_t n, char *out);
int tn_from_hex(const char *s, size_t slen, uint8_t *out, size_t n);
int tn_quotas_valid(const bdb_quotas *q);

/* tenants_gen.c (caller holds mu) */
/* The entry of a name, or of a storage key "name@gen" whose generation is the
 * name's current one; NULL otherwise. */
tentry *tn_find(bdb_tenants *r, const char *name_or_key);
/* bdb_tenants_storage_key with mu held. */
int tn_storage_key_locked(bdb_tenants *r, const char *name, char *out, size_t outlen);
/* The deleted names in name order (NULL: out of memory); caller frees the array. */
tdead **tn_sorted_dead(bdb_tenants *r, size_t *n);
void tn_free_dead(bdb_tenants *r);

/* tenants_file.c */
/* Entries in name order; caller holds mu and frees the array (NULL: out of memory). */
tentry **tn_sorted_entries(bdb_tenants *r, size_t *n);
int tn_tier_retention_valid(const int64_t v[3]);
/* 1 if rule is empty or a device rule (ingest/devrule.h) in canonical form: no blanks,
 * so that it is one token of the file line. */
int tn_device_rule_valid(const char *rule);
/* Takes save_mu for a change; with a store not synced yet, first makes the registry
 * the store's (tn_sync). BDB_OK (save_mu held), or BDB_ERR_AGAIN (the store cannot be
 * reached), BDB_ERR_CORRUPT, BDB_ERR_IO, BDB_ERR_NOMEM (save_mu not held). */
int tn_begin_change(bdb_tenants *r);
/* Writes the registry to the store (if any; BDB_ERR_AGAIN when it does not confirm,
 * nothing written) and then to <dir>/tenants (temporary name, fsync, rename,
 * directory fsync); caller holds save_mu, not mu. BDB_OK, BDB_ERR_AGAIN, BDB_ERR_IO,
 * BDB_ERR_NOSPACE. */
int tn_persist(bdb_tenants *r);
/* The two steps of tn_persist: encode (caller holds mu) and write (caller holds
 * save_mu, not mu), for a change that must not be seen before it is durable. */
int tn_encode(bdb_tenants *r, bdb_buf *b);
int tn_write(bdb_tenants *r, const bdb_buf *b);
/* The local file alone. */
int tn_write_file(bdb_tenants *r, const bdb_buf *b);
/* Reads <dir>/tenants into the maps (a missing file is an empty registry); err says
 * what is wrong with a damaged one (BDB_ERR_CORRUPT). */
int tn_load(bdb_tenants *r, char *err, size_t errlen);
/* The bytes of a file: BDB_OK, BDB_ERR_NOTFOUND (no file), BDB_ERR_IO, BDB_ERR_CORRUPT
 * (larger than REG_MAX_BYTES). */
int tn_read_file(const char *path, bdb_buf *b, char *err, size_t errlen);
/* Parses an encoded registry (the file's format, from the file or the store) into the
 * maps, which must be empty; what names its origin in err. BDB_OK, BDB_ERR_CORRUPT,
 * BDB_ERR_NOMEM; on an error the maps may hold part of it (the caller drops them). */
int tn_parse(bdb_tenants *r, const void *data, size_t len, const char *what, char *err,
             size_t errlen);

#endif
