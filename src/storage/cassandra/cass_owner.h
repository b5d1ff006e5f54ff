/* cass_owner: which data directory a keyspace belongs to, and which server writes to it
 * now (issue 20's safety rails; docs/CASSANDRA.md#one-keyspace-one-writer).
 *
 * On this backend the catalog (devices, their bucket histories, where flushed data
 * lies in time), the state index and the tiers' and fleet tables' merge bases are
 * kept in the data directory. A server on a directory that holds another catalog (an
 * older copy, another keyspace's or server's) against a keyspace with data would
 * answer 404 for what it does not know and overwrite tier, fleet and device rows; two
 * servers on one keyspace overwrite each other's windows. An EMPTY directory (no
 * catalog, no file 'cluster') is safe: the engine rebuilds its catalog from the
 * registry and merges the windows it inherits (storage/embedded/sink/db_cat_sink.h).
 * So a server claims the keyspace before it writes:
 *  - identity: the keyspace's row 'keyspace' of table owner holds a random id, and the
 *    data directory's file 'cluster' the same id (and this directory's node id). An
 *    empty directory takes the keyspace's id (also a keyspace with data and no id, made
 *    by an older version). A keyspace with an id another directory's file holds, or a
 *    directory with a catalog and no file, is refused with the reason, unless the
 *    storage URI says adopt=true (the directory then takes the keyspace's id over,
 *    with a warning naming what its catalog misses and overwrites);
 *  - the writer lease: row 'writer' (node, host, pid, since) written with a TTL of
 *    CASS_OWNER_TTL_S by a lightweight transaction (IF NOT EXISTS / IF node = ...)
 *    and renewed every CASS_OWNER_RENEW_S. A live lease of another node refuses the
 *    start. This node's own lease (a restart) is taken over at once when the process
 *    that holds it is gone from this host; one held by a live process (a copy of the
 *    directory running elsewhere or here) refuses the start until it expires. A lease
 *    lost while running (another node took it after an outage longer than the TTL)
 *    makes every flush fail: the WAL keeps the samples, nothing is overwritten.
 *  - the flush generation: every flush Cassandra confirmed whole that wrote something
 *    counts one, recorded in the data directory's file 'cluster' and then in the
 *    keyspace's row 'generation' (cass_owner_flushed). The file is written first, so
 *    it is never behind the keyspace on the directory that flushed: one whose file is
 *    behind is an older copy (a restored backup) and is refused, as it misses what was
 *    flushed since (adopt=true takes the keyspace's generation over, with a warning).
 *    A crash between the two writes leaves the file one ahead, which is accepted
 *    (cass_owner_gen_check; docs/CASSANDRA.md#older-copies-of-the-data-directory);
 *  - what an operator needs to see (`bucketdb cluster status`) rides on the lease's
 *    writes: the writer row also holds the server's backlog, last flush, listen
 *    address and version (cass_owner_report), refreshed by each renewal. A keyspace
 *    whose owner table lacks those columns (schema=none on an older keyspace) gets the
 *    lease's columns only.
 *
 * Thread-safety: renew and valid may run on any thread; claim and free on one. */
#ifndef BDB_CASS_OWNER_H
#define BDB_CASS_OWNER_H

#include <stddef.h>
#include <stdint.h>

#define CASS_OWNER_TTL_S 30
#define CASS_OWNER_RENEW_S 10
#define CASS_OWNER_FILE "cluster"

struct cql_session;
typedef struct cass_owner cass_owner;

/* The figures a renewal publishes in the writer row; the caller (the sink) gathers
 * them, so this module needs none of its internals. */
typedef struct cass_owner_report {
    int64_t backlog_bytes; /* acknowledged, not yet confirmed by Cassandra; < 0 unknown */
    int64_t last_flush_ms; /* of the last flush Cassandra confirmed whole; 0 none yet */
    const char *listen;    /* the server's HTTP address; NULL or "" unknown */
} cass_owner_report;

/* Checks the identity of keyspace ks against data_dir (making both on a first start)
 * and takes the writer lease. write_cl: the consistency of the plain reads and
 * writes (the lease's transactions use SERIAL). adopt: take a keyspace whose identity
 * does not match, or the generation of an older copy, over instead of refusing.
 * BDB_OK, or BDB_ERR_EXISTS (refused: another directory's keyspace, an older copy of
 * this directory, another live writer; the reason in err), BDB_ERR_IO
 * and Cassandra's errors (err says which statement). */
int cass_owner_claim(struct cql_session *sess, const char *ks, const char *data_dir, int write_cl,
                     int adopt, cass_owner **out, char *err, size_t errlen);
/* Renews the lease and publishes rep (NULL: every figure unknown). BDB_OK, BDB_ERR_EXISTS when
 * another node holds it now (the lease is lost for good: valid() turns 0), or the error of the
 * statement (a retry later may succeed while the TTL lasts). */
int cass_owner_renew(cass_owner *o, struct cql_session *sess, const cass_owner_report *rep);
/* After a flush Cassandra confirmed whole: counts it in the file 'cluster' (atomically,
 * synced) and then in the keyspace's row 'generation' (a plain write at write_cl). An
 * error (err says which write) should fail the flush: a retry writes the same
 * generation again. Not thread-safe: the flushes call it one at a time. */
int cass_owner_flushed(cass_owner *o, struct cql_session *sess, char *err, size_t errlen);

/* The start's rule between the directory's generation dir (0 for a file without one)
 * and the keyspace's ks (0 for none): CASS_GEN_OK when dir is ks, or ks + 1 (a crash
 * between the file's write and the keyspace's); CASS_GEN_OLDER when dir < ks (an
 * older copy: the keyspace took flushes this directory never made); CASS_GEN_AHEAD
 * when dir > ks + 1 (the keyspace lost writes: restored from an older snapshot). */
enum { CASS_GEN_OK, CASS_GEN_OLDER, CASS_GEN_AHEAD };
int cass_owner_gen_check(int64_t dir, int64_t ks);

/* The file 'cluster' (docs/formats): parses text (NUL-terminated) into ks, id, node
 * and gen (-1 when the file has none: version 1). 1 parsed, -1 damaged. */
int cass_owner_file_parse(const char *text, char ks[64], char id[33], char node[33], int64_t *gen);

/* 1 while this server may write: the lease was never lost. */
int cass_owner_valid(const cass_owner *o);
/* Gives the lease up (a restart elsewhere need not wait for the TTL) and frees o. */
void cass_owner_free(cass_owner *o, struct cql_session *sess);
/* After the schema's CREATE TABLE IF NOT EXISTS: adds the report's columns to the
 * owner table of a keyspace made before them (cass_state.h's rule: looked up first,
 * a refused ALTER ignored). */
void cass_owner_upgrade(struct cql_session *sess, const char *ks);

#endif
