/* cql_topology: see cql_topology.h. */
#include "storage/cassandra/cql/cluster/cql_topology.h"

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void copy_text(char *dst, size_t cap, cql_bytes v)
{
    size_t n = v.len > 0 ? (size_t)v.len : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(dst, v.p, n);
    dst[n] = '\0';
}

static void copy_inet(char *dst, size_t cap, cql_bytes v)
{
    dst[0] = '\0';
    if (v.len == 4 || v.len == 16)
        inet_ntop(v.len == 4 ? AF_INET : AF_INET6, v.p, dst, (socklen_t)cap);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* tokens: set<text> of decimal Murmur3 tokens. */
static int parse_tokens(cql_node *n, cql_bytes v)
{
    cql_coll_iter it;
    int cnt = cql_coll_begin(&it, v, 0);
    if (cnt == BDB_ERR_NOTFOUND)
        return BDB_OK; /* a node still joining has none */
    if (cnt < 0)
        return BDB_ERR_CORRUPT;
    n->tokens = calloc((size_t)(cnt ? cnt : 1), sizeof *n->tokens);
    if (!n->tokens)
        return BDB_ERR_NOMEM;
    cql_bytes e;
    int rc;
    while ((rc = cql_coll_next(&it, &e)) == 1) {
        char tmp[32];
        copy_text(tmp, sizeof tmp, e);
        char *end;
        errno = 0;
        long long t = strtoll(tmp, &end, 10);
        if (end == tmp || *end || errno)
            return BDB_ERR_CORRUPT; /* not a Murmur3 token */
        n->tokens[n->ntokens++] = t;
    }
    if (rc < 0)
        return BDB_ERR_CORRUPT;
    qsort(n->tokens, n->ntokens, sizeof *n->tokens, cmp_i64);
    return BDB_OK;
}

static int col_index(const cql_meta *m, const char *name)
{
    for (int32_t i = 0; m->cols && i < m->ncols; i++)
        if (!strcmp(m->cols[i].name, name))
            return i;
    return -1;
}

static cql_bytes cell(const cql_result *r, int32_t row, int col)
{
    if (col < 0)
        return (cql_bytes){NULL, CQL_NULL};
    return r->cells[(size_t)row * (size_t)r->meta.ncols + (size_t)col];
}

static int add_nodes(cql_topology *t, const cql_result *r, int local, const char *host)
{
    if (r->kind != CQL_RESULT_ROWS)
        return BDB_ERR_CORRUPT;
    const cql_meta *m = &r->meta;
    int c_peer = col_index(m, "peer"), c_rpc = col_index(m, "rpc_address"),
        c_dc = col_index(m, "data_center"), c_rack = col_index(m, "rack"),
        c_id = col_index(m, "host_id"), c_rel = col_index(m, "release_version"),
        c_tok = col_index(m, "tokens"), c_cluster = col_index(m, "cluster_name"),
        c_part = col_index(m, "partitioner");
    if (r->nrows == 0)
        return BDB_OK;
    cql_node *nodes = realloc(t->nodes, (t->nnodes + (size_t)r->nrows) * sizeof *nodes);
    if (!nodes)
        return BDB_ERR_NOMEM;
    t->nodes = nodes;
    for (int32_t i = 0; i < r->nrows; i++) {
        cql_node *n = &t->nodes[t->nnodes];
        memset(n, 0, sizeof *n);
        t->nnodes++;
        n->is_local = local;
        copy_inet(n->addr, sizeof n->addr, cell(r, i, c_rpc));
        if (!n->addr[0] || !strcmp(n->addr, "0.0.0.0") || !strcmp(n->addr, "::")) {
            if (local)
                snprintf(n->addr, sizeof n->addr, "%s", host);
            else
                copy_inet(n->addr, sizeof n->addr, cell(r, i, c_peer));
        }
        copy_text(n->dc, sizeof n->dc, cell(r, i, c_dc));
        copy_text(n->rack, sizeof n->rack, cell(r, i, c_rack));
        copy_text(n->release, sizeof n->release, cell(r, i, c_rel));
        cql_bytes id = cell(r, i, c_id);
        if (id.len == 16)
            cql_uuid_format(id.p, n->host_id);
        if (local) {
            copy_text(t->cluster, sizeof t->cluster, cell(r, i, c_cluster));
            copy_text(t->partitioner, sizeof t->partitioner, cell(r, i, c_part));
        }
        int rc = parse_tokens(n, cell(r, i, c_tok));
        if (rc != BDB_OK)
            return rc;
    }
    return BDB_OK;
}

static int cmp_entry(const void *a, const void *b)
{
    const cql_ring_entry *x = a, *y = b;
    return x->token < y->token ? -1 : x->token > y->token;
}

int cql_topology_build_ring(cql_topology *t)
{
    size_t total = 0;
    for (size_t i = 0; i < t->nnodes; i++)
        total += t->nodes[i].ntokens;
    free(t->ring);
    t->ring = calloc(total ? total : 1, sizeof *t->ring);
    t->nring = 0;
    if (!t->ring)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < t->nnodes; i++)
        for (size_t k = 0; k < t->nodes[i].ntokens; k++)
            t->ring[t->nring++] = (cql_ring_entry){t->nodes[i].tokens[k], (uint32_t)i};
    qsort(t->ring, t->nring, sizeof *t->ring, cmp_entry);
    return BDB_OK;
}

static size_t first_at_or_after(const cql_topology *t, int64_t token)
{
    size_t lo = 0, hi = t->nring;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->ring[mid].token < token)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == t->nring ? 0 : lo;
}

int cql_topology_owner(const cql_topology *t, int64_t token)
{
    if (!t->nring)
        return -1;
    return (int)t->ring[first_at_or_after(t, token)].node;
}

size_t cql_topology_replicas(const cql_topology *t, int64_t token, size_t n, uint32_t *out)
{
    size_t got = 0;
    if (!t->nring)
        return 0;
    size_t start = first_at_or_after(t, token);
    for (size_t k = 0; k < t->nring && got < n && got < t->nnodes; k++) {
        uint32_t node = t->ring[(start + k) % t->nring].node;
        int seen = 0;
        for (size_t j = 0; j < got; j++)
            seen |= out[j] == node;
        if (!seen)
            out[got++] = node;
    }
    return got;
}

void cql_topology_free(cql_topology *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nnodes; i++)
        free(t->nodes[i].tokens);
    free(t->nodes);
    free(t->ring);
    free(t);
}

int cql_topology_find(const cql_topology *t, const char *addr)
{
    for (size_t i = 0; i < t->nnodes; i++)
        if (!strcmp(t->nodes[i].addr, addr))
            return (int)i;
    return -1;
}

static int same_tokens(const cql_node *a, const cql_node *b)
{
    return a->ntokens == b->ntokens &&
           (!a->ntokens || !memcmp(a->tokens, b->tokens, a->ntokens * sizeof *a->tokens));
}

/* dst = src's description with its own copy of the tokens. */
static int copy_node(cql_node *dst, const cql_node *src)
{
    *dst = *src;
    dst->removed = 0;
    dst->tokens = NULL;
    if (src->ntokens) {
        dst->tokens = malloc(src->ntokens * sizeof *dst->tokens);
        if (!dst->tokens)
            return BDB_ERR_NOMEM;
        memcpy(dst->tokens, src->tokens, src->ntokens * sizeof *dst->tokens);
    }
    return BDB_OK;
}

int cql_topology_merge(const cql_topology *cur, const cql_topology *fresh, size_t max_nodes,
                       cql_topology **out, int *changed)
{
    *out = NULL;
    *changed = 0;
    size_t added = 0;
    for (size_t j = 0; j < fresh->nnodes; j++)
        added += cql_topology_find(cur, fresh->nodes[j].addr) < 0;
    if (cur->nnodes + added > max_nodes)
        return BDB_ERR_LIMIT;
    cql_topology *t = calloc(1, sizeof *t);
    if (!t)
        return BDB_ERR_NOMEM;
    t->nodes = calloc(cur->nnodes + added ? cur->nnodes + added : 1, sizeof *t->nodes);
    if (!t->nodes) {
        free(t);
        return BDB_ERR_NOMEM;
    }
    /* The cluster keeps its name and partitioner; fresh's are as good as cur's. */
    snprintf(t->cluster, sizeof t->cluster, "%s",
             fresh->cluster[0] ? fresh->cluster : cur->cluster);
    snprintf(t->partitioner, sizeof t->partitioner, "%s",
             fresh->partitioner[0] ? fresh->partitioner : cur->partitioner);
    int rc = BDB_OK;
    for (size_t i = 0; i < cur->nnodes && rc == BDB_OK; i++) {
        const cql_node *old = &cur->nodes[i];
        int j = cql_topology_find(fresh, old->addr);
        cql_node *n = &t->nodes[t->nnodes++];
        if (j < 0) {
            /* gone: keep the slot (its index is the pool's), drop it from the ring */
            rc = copy_node(n, old);
            free(n->tokens);
            n->tokens = NULL;
            n->ntokens = 0;
            n->removed = 1;
            n->is_local = 0;
            *changed |= !old->removed;
            continue;
        }
        const cql_node *f = &fresh->nodes[j];
        rc = copy_node(n, f);
        *changed |= old->removed || strcmp(old->dc, f->dc) || strcmp(old->rack, f->rack) ||
                    !same_tokens(old, f);
    }
    for (size_t j = 0; j < fresh->nnodes && rc == BDB_OK; j++) {
        if (cql_topology_find(cur, fresh->nodes[j].addr) >= 0 ||
            cql_topology_find(t, fresh->nodes[j].addr) >= 0)
            continue; /* known, or listed twice */
        if (fresh->nodes[j].ntokens == 0)
            continue; /* still joining (no tokens, maybe no DC yet): a later refresh */
        rc = copy_node(&t->nodes[t->nnodes++], &fresh->nodes[j]);
        *changed = 1;
    }
    if (rc == BDB_OK)
        rc = cql_topology_build_ring(t);
    if (rc != BDB_OK) {
        cql_topology_free(t);
        *changed = 0;
        return rc;
    }
    *out = t;
    return BDB_OK;
}

static int select_rows(cql_conn *c, const char *q, cql_response **out, char *err, size_t errlen)
{
    cql_query_params p = {.consistency = CQL_ONE};
    int rc = cql_query(c, q, &p, out);
    if (rc != BDB_OK && err) {
        const cql_response *r = *out;
        snprintf(err, errlen, "%s: %s", q,
                 r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                      : bdb_strerror(rc));
    }
    return rc;
}

int cql_topology_discover(cql_conn *c, const char *host, cql_topology **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    cql_topology *t = calloc(1, sizeof *t);
    if (!t)
        return BDB_ERR_NOMEM;
    cql_response *r = NULL;
    /* SELECT *: the columns differ between versions (2.1's system.local has no
     * rpc_address); the ones this needs are looked up by name. */
    int rc = select_rows(c, "SELECT * FROM system.local", &r, err, errlen);
    if (rc == BDB_OK)
        rc = add_nodes(t, &r->result, 1, host);
    cql_response_free(r);
    r = NULL;
    if (rc == BDB_OK)
        rc = select_rows(c, "SELECT * FROM system.peers", &r, err, errlen);
    if (rc == BDB_OK)
        rc = add_nodes(t, &r->result, 0, host);
    cql_response_free(r);
    if (rc == BDB_OK)
        rc = cql_topology_build_ring(t);
    if (rc != BDB_OK) {
        if (err && !err[0])
            snprintf(err, errlen, "cannot read the topology: %s", bdb_strerror(rc));
        cql_topology_free(t);
        return rc;
    }
    *out = t;
    return BDB_OK;
}
