/* rcache: a bounded, thread-safe cache of immutable values under byte-string keys,
 * least recently used first out.
 *
 * It cannot go stale by construction, not by invalidation: a caller keys a value on
 * things that never change once made (a block file's seq, a tier file's seq, which a
 * compaction or a rewrite replaces by a new seq) and stores only what is a pure
 * function of them. An entry nobody asks for again (its file replaced) leaves by
 * eviction like any other.
 *
 * Memory: every entry counts its value's bytes (as the caller states them), its key's
 * and RCACHE_ENTRY_OVERHEAD; a put that would pass the limit evicts the least recently
 * used entries first, and a value larger than the limit alone is not kept. A limit of
 * 0 keeps nothing (every get misses). Values are handed out by reference, counted, so
 * an evicted value is freed when its last reader releases it.
 *
 * Counters (hits, misses, evictions, entries, bytes) for /metrics: bdb_rcache_stats.
 * The table of keys seen (bdb_rcache_admit) takes RCACHE_SEEN_SLOTS x 8 bytes beside
 * the limit. */
#ifndef BDB_RCACHE_H
#define BDB_RCACHE_H

#include <stddef.h>
#include <stdint.h>

/* What an entry costs beyond its key and value: the entry itself and its hash slot. */
#define RCACHE_ENTRY_OVERHEAD 96

typedef struct bdb_rcache bdb_rcache;
typedef struct bdb_rcache_ent bdb_rcache_ent;

/* NULL when out of memory. max_bytes 0: a cache that keeps nothing. */
bdb_rcache *bdb_rcache_new(uint64_t max_bytes);
/* Frees every entry; no reference may be held any more. Safe on NULL. */
void bdb_rcache_free(bdb_rcache *c);

/* The value under key, or NULL (a miss, counted). A hit returns a reference: the
 * value (*len bytes) stays valid until bdb_rcache_release(c, *ref). */
const void *bdb_rcache_get(bdb_rcache *c, const void *key, size_t klen, size_t *len,
                           bdb_rcache_ent **ref);
void bdb_rcache_release(bdb_rcache *c, bdb_rcache_ent *ref);

/* Keeps val (len bytes, malloc'd: the cache owns it from here, and frees it with free())
 * under key, evicting as needed. A key already present keeps its first value (the
 * same by contract) and val is freed. Out of memory, or a value the limit cannot
 * hold: val is freed and nothing kept (a cache may always forget). */
void bdb_rcache_put(bdb_rcache *c, const void *key, size_t klen, void *val, size_t len);
/* As bdb_rcache_put for a value that free_fn frees (NULL: free()), which the caller
 * goes on reading: returns the value now under key with a reference in *ref (val, or
 * the value another reader put first, and then val is freed). NULL when nothing is
 * kept (out of memory, past the limit): val is still the caller's. */
const void *bdb_rcache_put_ref(bdb_rcache *c, const void *key, size_t klen, void *val, size_t len,
                               void (*free_fn)(void *), bdb_rcache_ent **ref);

/* Whether a value just missed is worth building and keeping: 1 when the key missed
 * recently already (a panel asked again), else 0, and the key is remembered (a hash in
 * a fixed table of RCACHE_SEEN_SLOTS, newer keys taking older ones' slots). A read of
 * something asked once (a one-off query over cold data) then pays nothing for the
 * cache: it reads as without one. */
#define RCACHE_SEEN_SLOTS 8192
int bdb_rcache_admit(bdb_rcache *c, const void *key, size_t klen);

typedef struct bdb_rcache_stats {
    uint64_t hits, misses, evictions, entries, bytes, max_bytes;
} bdb_rcache_stats;
void bdb_rcache_stats_get(bdb_rcache *c, bdb_rcache_stats *st);

#endif
