/* map: an open-addressing hash map from byte-string keys to pointers.
 * Keys are copied into the map (NUL-terminated), or, in a map made by
 * bdb_map_new_borrowed, kept as the caller's pointers; values are owned by the caller.
 * Keys are shorter than 4 GiB. Not thread-safe: callers hold their own lock. */
#ifndef BDB_MAP_H
#define BDB_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct bdb_map bdb_map;

/* Returns NULL when out of memory. */
bdb_map *bdb_map_new(void);
/* A map that stores the key pointers it is given, without a copy: each key's bytes
 * must stay unchanged until its entry is deleted or the map freed (the catalog's
 * device map: its keys are the devices' names, which live as long as the map). */
bdb_map *bdb_map_new_borrowed(void);
void bdb_map_free(bdb_map *m);
size_t bdb_map_count(const bdb_map *m);
uint64_t bdb_hash(const void *p, size_t n);
/* Returns the value or NULL. */
void *bdb_map_get(const bdb_map *m, const void *key, size_t klen);
void *bdb_map_get_h(const bdb_map *m, const void *key, size_t klen, uint64_t hash);
/* Inserts or replaces; returns the previous value or NULL. Out of memory leaves the
 * map as it was and returns NULL: callers that may insert a new key use
 * bdb_map_set instead, which tells the two apart. */
void *bdb_map_put(bdb_map *m, const void *key, size_t klen, void *val);
void *bdb_map_put_h(bdb_map *m, const void *key, size_t klen, uint64_t hash, void *val);
/* Inserts or replaces: BDB_OK, or BDB_ERR_NOMEM with the map unchanged. */
int bdb_map_set(bdb_map *m, const void *key, size_t klen, void *val);
int bdb_map_set_h(bdb_map *m, const void *key, size_t klen, uint64_t hash, void *val);
/* Removes; returns the removed value or NULL. */
void *bdb_map_del(bdb_map *m, const void *key, size_t klen);
/* Iteration: pass *pos = 0 first; returns 0 when done. Do not modify during iteration. */
int bdb_map_next(const bdb_map *m, size_t *pos, const void **key, size_t *klen, void **val);

#endif
