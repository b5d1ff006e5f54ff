/* cass_uri: the storage URI of the Cassandra backend, cassandra://[user:password@]
 * host[:port][,host...]/keyspace?option=value&... (docs/CASSANDRA.md lists every
 * option, its default and its range), parsed into settings. */
#ifndef BDB_CASS_URI_H
#define BDB_CASS_URI_H

#include <stdint.h>
#include <stddef.h>

typedef struct cass_uri {
    char hosts[1024];
    char ks[49];
    char dc[64];
    int write_cl, read_cl;
    char replication[512];
    char user[128], password[256];
    int inflight, batch_rows, pool, retries, timeout_ms;
    int create_schema;
    int offline_start;
    /* start on a data directory that is not the keyspace's (cass_owner.h): its id is
     * taken over, with the hazards docs/CASSANDRA.md names */
    int adopt;
    /* ack=quorum: a write is acknowledged once Cassandra confirmed its rows at the
     * write consistency, not only once the WAL holds it (ack=wal, the default) */
    int ack_quorum;
    int64_t bucket_s;
    int tls, tls_verify;               /* tls=, tls_verify= */
    char ca[512], cert[512], key[512]; /* ca=, cert=, key= (PEM files) */
} cass_uri;

/* Fills o with the URI's settings and the defaults for what it leaves out (the
 * password from $CQL_PASSWORD unless the URI has one). BDB_OK; BDB_ERR_INVALID with
 * err naming the option and what it must be (a text value longer than its field
 * included: dc 63, replication 511, user 127, password 255, host list 1,023,
 * ca/cert/key 511 bytes); BDB_ERR_NOMEM. */
int cass_uri_parse(const char *uri, cass_uri *o, char *err, size_t errlen);

#endif
