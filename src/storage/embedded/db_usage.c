/* db_usage: what a tenant uses, for quotas. Reads the catalog maps only, under
 * cat_lock shared (db_int.h's locking order: nothing else is taken meanwhile). */
#include "storage/embedded/db_int.h"

#include "bucketdb/bdb.h"

#include <string.h>

int bdb_db_tenant_usage(bdb_db *db, const char *tenant_name, const bdb_batch *b, uint64_t *devices,
                        uint64_t *new_devices)
{
    if (!tenant_name || !*tenant_name)
        return BDB_ERR_INVALID;
    size_t n = 0;
    const bdb_report *r = b ? bdb_batch_reports(b, &n) : NULL;
    bdb_map *fresh = n ? bdb_map_new() : NULL; /* distinct devices not in the catalog */
    if (n && !fresh)
        return BDB_ERR_NOMEM;
    pthread_rwlock_rdlock(&db->cat_lock);
    tenant *t = cat_tenant(db, tenant_name, strlen(tenant_name), 0);
    *devices = t ? bdb_map_count(t->devices) : 0;
    for (size_t i = 0; i < n; i++) {
        if (t && cat_device(db, t, r[i].device, r[i].device_len, 0))
            continue;
        if (!bdb_map_get(fresh, r[i].device, r[i].device_len))
            bdb_map_put(fresh, r[i].device, r[i].device_len, (void *)&r[i]);
    }
    pthread_rwlock_unlock(&db->cat_lock);
    *new_devices = fresh ? bdb_map_count(fresh) : 0;
    if (fresh)
        bdb_map_free(fresh);
    return BDB_OK;
}

uint64_t bdb_db_head_bytes(bdb_db *db)
{
    return atomic_load(&db->head_bytes);
}
