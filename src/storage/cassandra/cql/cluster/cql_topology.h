/* cql_topology: the nodes of a cluster and their tokens, read through one connection
 * from system.local (the node itself) and system.peers (the others), and the token
 * ring built from them for token-aware routing.
 *
 * A node's address for clients is its rpc_address; a peer that reports 0.0.0.0 (bound
 * to every interface) is reached at its peer (listen) address, and the local node at
 * the address the connection used. */
#ifndef BDB_CQL_TOPOLOGY_H
#define BDB_CQL_TOPOLOGY_H

#include "storage/cassandra/cql/wire/cql_conn.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cql_node {
    char addr[64]; /* where clients connect */
    char dc[64];
    char rack[64];
    char host_id[37];
    char release[32];
    int is_local;    /* the node the discovery connection talked to */
    int removed;     /* gone from system.peers at a refresh: no tokens, never routed to */
    int64_t *tokens; /* sorted */
    size_t ntokens;
} cql_node;

typedef struct cql_ring_entry {
    int64_t token;
    uint32_t node; /* index into nodes */
} cql_ring_entry;

typedef struct cql_topology {
    char cluster[128];
    char partitioner[128];
    cql_node *nodes;
    size_t nnodes;
    cql_ring_entry *ring; /* every token of every node, sorted by token */
    size_t nring;
} cql_topology;

/* Reads system.local and system.peers through c. `host` is the address c connected
 * to (used for the local node when its rpc_address is a wildcard). On a server error
 * returns its status and writes the message to err. */
int cql_topology_discover(cql_conn *c, const char *host, cql_topology **out, char *err,
                          size_t errlen);
void cql_topology_free(cql_topology *t);
/* Builds the sorted ring from the nodes' tokens (discover does it; tests use it). */
int cql_topology_build_ring(cql_topology *t);
/* The node owning token: the first ring entry whose token is >= token, wrapping
 * around to the first entry. -1 on an empty ring. */
int cql_topology_owner(const cql_topology *t, int64_t token);
/* The owner and the next distinct nodes clockwise, up to n (SimpleStrategy's replica
 * placement): writes node indexes to out and returns how many. */
size_t cql_topology_replicas(const cql_topology *t, int64_t token, size_t n, uint32_t *out);

/* The index of the node with client address addr, or -1. */
int cql_topology_find(const cql_topology *t, const char *addr);

/* A refresh: merges a freshly discovered topology into the current one without
 * moving any node, because the session's per-node pools are indexed like cur's nodes.
 * A node of cur still in fresh (same address) keeps its index and takes fresh's DC,
 * rack, release and tokens; a node of cur missing from fresh stays at its index as
 * removed (no tokens); a node only in fresh is appended once it has tokens (a joining
 * node may be listed before its DC and tokens are known). At most max_nodes nodes
 * (BDB_ERR_LIMIT past that: the refresh is dropped, the old map stays). *out gets a
 * new topology with its ring built; *changed is set when a node was added, removed,
 * came back, or its DC, rack or tokens differ (the caller then swaps maps). */
int cql_topology_merge(const cql_topology *cur, const cql_topology *fresh, size_t max_nodes,
                       cql_topology **out, int *changed);

#endif
