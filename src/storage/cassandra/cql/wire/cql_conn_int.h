/* cql_conn_int: what the three files of one CQL connection share (private to them):
 * cql_conn.c (stream slots, reader thread, open/close, sending), cql_handshake.c
 * (version negotiation, STARTUP, authentication) and cql_stmt.c (queries, prepared
 * statements, batches, paging).
 *
 * Locking as cql_conn.c describes: `mu` guards the stream slots, the free-id stack,
 * the prepared cache and the broken/closing flags; `wmu` is held around each write. */
#ifndef BDB_CQL_CONN_INT_H
#define BDB_CQL_CONN_INT_H

#include "storage/cassandra/cql/wire/cql_conn.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

enum slot_state { SLOT_FREE, SLOT_BUSY, SLOT_ORPHANED };

/* While `writing`, the sending thread may still be reading the request frame (which
 * the request's owner frees when it completes), so a completion that arrives then is
 * parked in `early` and delivered by the sender once its write has returned. */
typedef struct slot {
    cql_done_fn done;
    void *ud;
    int64_t deadline;
    uint8_t state;
    uint8_t writing;
    uint8_t has_early;
    int early_status;
    cql_response *early;
} slot;

struct cql_conn {
    cql_io io;
    uint8_t version;
    int request_timeout_ms;
    uint32_t max_frame;
    char *cql_version;
    char *authenticator;
    cql_event_fn on_event;
    void *event_ud;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* a stream id was freed */
    pthread_mutex_t wmu;
    slot *slots;
    int nslots;
    int16_t *free_ids;
    int nfree;
    int busy; /* BUSY slots (orphans not counted) */
    int broken;
    int closing;
    cql_prepared *prepared; /* cql_stmt.c's cache, freed by cql_prepared_free_all */

    pthread_t reader;
    int reader_started;
    bdb_buf rbuf;
};

/* Writes a message to err when there is room for one. */
void cql_conn_set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A response synthesized on this side (an ERROR with a CQL_ERR_CLIENT_* code), or NULL
 * on out-of-memory. */
cql_response *cql_conn_client_error(int32_t code, const char *msg);

/* One synchronous caller waiting for one async completion. */
typedef struct cql_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    cql_response *resp;
} cql_sync;

void cql_sync_init(cql_sync *w);
void cql_sync_done(void *ud, int status, cql_response *resp); /* the cql_done_fn */
/* rc is what the async call returned: on BDB_OK waits for the completion and returns
 * its status and response (freed when out is NULL); releases w either way. */
int cql_sync_wait(cql_sync *w, int rc, cql_response **out);

/* cql_handshake.c: on a connection whose slots are set up and whose io is not yet
 * open, connects (port, connect timeout and version range already defaulted),
 * settles the protocol version, then STARTUP and authentication. Errors as
 * cql_conn_open. */
int cql_conn_handshake(cql_conn *c, const cql_conn_opts *o, int port, int ctimeout, int minv,
                       int maxv, char *err, size_t errlen);

/* cql_stmt.c: frees a connection's prepared-statement cache. */
void cql_prepared_free_all(cql_prepared *p);

#endif
