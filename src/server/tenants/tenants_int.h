/* tenants_int.h: what tenants.c (the registry in memory, changes, reads, admission)
 * and tenants_file.c (its file: encode, atomic write, load) share. Not for other
 * modules: they use tenants.h. */
#ifndef BDB_TENANTS_INT_H
#define BDB_TENANTS_INT_H

#include "common/buf.h"
#include "common/map.h"
#include "server/admission/quota.h"
#include "server/tenants/tenants.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define REG_FILE "tenants"
#define REG_MAGIC "bucketdb-tenants"
#define REG_VERSION 1
#define REG_MAX_BYTES (64u << 20) /* refuse absurd files rather than read them */

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
};

/* tenants.c: the maps (caller holds mu), hex, quota bounds */
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
/* Writes the registry to <dir>/tenants (temporary name, fsync, rename, directory
 * fsync); caller holds save_mu, not mu. BDB_OK, BDB_ERR_IO, BDB_ERR_NOSPACE. */
int tn_persist(bdb_tenants *r);
/* The two steps of tn_persist: encode (caller holds mu) and write (caller holds
 * save_mu, not mu), for a change that must not be seen before it is durable. */
int tn_encode(bdb_tenants *r, bdb_buf *b);
int tn_write(bdb_tenants *r, const bdb_buf *b);
/* Reads <dir>/tenants into the maps (a missing file is an empty registry); err says
 * what is wrong with a damaged one (BDB_ERR_CORRUPT). */
int tn_load(bdb_tenants *r, char *err, size_t errlen);

#endif
