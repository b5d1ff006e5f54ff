/* cql_session_int: the session's private structures, shared by cql_session.c (pools,
 * routing, requests) and cql_refresh.c (following the cluster's topology). */
#ifndef BDB_CQL_SESSION_INT_H
#define BDB_CQL_SESSION_INT_H

#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_MAX 8
#define PLAN_MAX 256
#define NODES_MAX PLAN_MAX /* nodes a session follows, counting removed ones */

/* A pooled connection. Users hold a reference while they run a request on it; a
 * broken one is taken out of its slot at once and closed when the last user lets go
 * (cql_conn_close joins the reader thread, so never under a user). */
typedef struct sconn {
    cql_conn *c;
    int refs;
    int retired;
} sconn;

typedef struct snode {
    pthread_mutex_t mu;
    char host[64];
    int port;
    sconn *slot[POOL_MAX];
    int down;            /* last connect failed, or a DOWN event */
    int64_t next_try_ms; /* monotonic: no connect attempt before */
    int backoff_ms;
    _Atomic uint64_t attempt_errors; /* failed attempts on this node (/metrics) */
    _Atomic int removed;             /* left the cluster (topology refresh) */
} snode;

struct cql_session {
    cql_session_opts o;
    char *user, *password;
    cql_tls *tls; /* from o.tls, shared by every connection; NULL: plain TCP */
    char local_dc[64];
    /* Topology refresh (cql_refresh.c): the map is copy-on-write. Requests load
     * topo once and plan on that snapshot; a refresh builds a new map and swaps the
     * pointer. Replaced maps are kept until close rather than freed, so a reader
     * never needs a lock or a reference count; they only pile up when the cluster
     * really changes (a refresh that finds nothing new keeps the map). Node i of
     * every map is nodes[i]: nodes are only appended (published before the map that
     * names them) and a node that left stays, marked removed. */
    _Atomic(cql_topology *) topo;
    cql_topology **old_topos;
    size_t nold;
    snode **nodes; /* NODES_MAX slots; individually allocated, stable addresses */
    _Atomic size_t nnodes;
    int port; /* every node's client port: the contact point's */
    pthread_t rf_thread;
    int rf_started, rf_stop, rf_events; /* rf_stop, rf_events, rf_wake, rf_down under rf_mu */
    int rf_wake;                        /* an UP or NEW_NODE event came */
    char rf_down[8][64];                /* addresses reported DOWN, not yet marked */
    int rf_ndown;
    pthread_mutex_t rf_mu;
    pthread_cond_t rf_cv;
    cql_conn *ctrl; /* the refresher's connection, registered for events */
    _Atomic uint64_t requests, retries, failures, reconnects, connect_failures, rr;
    _Atomic uint64_t timeouts, attempt_errors;
};

/* A node's state, its pool empty (host copied; port is every node's client port). */
snode *sess_new_node(const char *host, int port);
/* A connection to nd with the session's credentials, TLS and timeouts; on_event
 * (NULL for pooled connections) receives server events, with s as its argument. */
int sess_open_conn(cql_session *s, snode *nd, cql_event_fn on_event, cql_conn **out, char *err,
                   size_t errlen);
/* The refresher thread and its control connection: started by open (unless
 * topology_refresh_ms < 0), stopped first thing at close. */
int sess_refresh_start(cql_session *s);
void sess_refresh_stop(cql_session *s);

#endif
