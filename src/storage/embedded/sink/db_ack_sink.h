/* db_ack_sink: a write acknowledged only once the sink confirmed its samples
 * (ack=quorum on Cassandra; storage/sink.h, ack_begin). */
#ifndef BDB_DB_ACK_SINK_H
#define BDB_DB_ACK_SINK_H

#include "storage/embedded/core/db_consumer.h"

extern const db_consumer db_ack_consumer;

#endif
