/* db_features: the one place that names what follows the engine's write, flush and
 * maintenance paths (db_consumer.h). The order is the order of every phase (close runs
 * backwards): the late path notes a report before the others see it, the fleet tables
 * are written before the tiers (both from the same frozen series), sink usage
 * counts once every row of the flush is in, and the acknowledgement through the sink
 * comes last (the one consumer that waits in a write). */
#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/fleet/db_fleet_int.h"
#include "storage/embedded/hot/db_hot.h"
#include "storage/embedded/settled/db_settled.h"
#include "storage/embedded/sink/db_ack_sink.h"
#include "storage/embedded/sink/db_sink_usage.h"
#include "storage/embedded/state/db_latest.h"
#include "storage/embedded/tier/db_tier_int.h"

#include "bucketdb/bdb.h"

int db_features_register(bdb_db *db)
{
    const db_consumer *all[] = {
        &db_late_consumer,    /* late marking (db_tier_late.c) */
        &db_hot_consumer,     /* events per partition (db_hot.c) */
        &db_latest_consumer,  /* current-state index (db_latest.c) */
        &db_fleet_consumer,   /* fleet tables (db_fleet*.c) */
        &db_tier_consumer,    /* tiers 1m, 1h, 1d (db_tier*.c) */
        &db_sku_consumer,     /* sink bytes per tenant (db_sink_usage.c) */
        &db_settled_consumer, /* settled versions for readers' caches (db_settled.c) */
        &db_ack_consumer,     /* ack=quorum: the sink confirms before the 204 (db_ack_sink.c) */
    };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        int rc = db_consumer_register(db, all[i]);
        if (rc != BDB_OK)
            return rc;
    }
    return BDB_OK;
}
