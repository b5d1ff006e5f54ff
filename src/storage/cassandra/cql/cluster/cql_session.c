/* cql_session: pools per node, token-aware DC-aware routing, retries and
 * reconnection over cql_conn (see cql_session.h). */
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/cluster/cql_session_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- pure helpers */

static int dc_is_local(const cql_topology *t, uint32_t i, const char *dc)
{
    return !dc || !dc[0] || !strcmp(t->nodes[i].dc, dc);
}

size_t cql_plan(const cql_topology *t, int has_token, int64_t token, const char *local_dc,
                int remote_ok, uint32_t *out, size_t max)
{
    size_t n = 0, nn = t->nnodes;
    if (nn == 0 || max == 0)
        return 0;
    unsigned char *used = calloc(nn, 1);
    uint32_t *ring = malloc(nn * sizeof *ring);
    if (!used || !ring)
        abort();
    size_t nr = has_token && t->nring ? cql_topology_replicas(t, token, nn, ring) : 0;
    /* pass 0: local ring order; 1: other local nodes; 2: remote ring order; 3: rest */
    for (int pass = 0; pass < 4 && n < max; pass++) {
        int local = pass < 2;
        if (!local && !remote_ok)
            break;
        size_t cnt = (pass % 2 == 0) ? nr : nn;
        for (size_t k = 0; k < cnt && n < max; k++) {
            uint32_t i = (pass % 2 == 0) ? ring[k] : (uint32_t)k;
            if (used[i] || t->nodes[i].removed || dc_is_local(t, i, local_dc) != local)
                continue;
            used[i] = 1;
            out[n++] = i;
        }
    }
    free(used);
    free(ring);
    return n;
}

int cql_should_retry(int32_t code, int idempotent)
{
    switch (code) {
    case CQL_ERR_UNAVAILABLE: /* not sent to replicas: nothing was applied */
    case CQL_ERR_OVERLOADED:
    case CQL_ERR_IS_BOOTSTRAPPING:
    case CQL_ERR_READ_TIMEOUT:
    case CQL_ERR_READ_FAILURE:
        return 1;
    case CQL_ERR_WRITE_TIMEOUT: /* may have been applied: only same-key-same-value writes */
    case CQL_ERR_WRITE_FAILURE:
    case CQL_ERR_CLIENT_TIMEOUT:
    case CQL_ERR_CLIENT_IO:
    case CQL_ERR_SERVER:
        return idempotent;
    default:
        return 0;
    }
}

int cql_backoff_ms(int attempt, int base, int max)
{
    if (attempt < 1)
        return 0;
    int64_t d = base;
    for (int i = 1; i < attempt && d < max; i++)
        d *= 2;
    return (int)(d < max ? d : max);
}

static void sleep_ms(int ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- pool */

static void sconn_release(snode *nd, sconn *sc)
{
    pthread_mutex_lock(&nd->mu);
    int last = --sc->refs == 0 && sc->retired;
    pthread_mutex_unlock(&nd->mu);
    if (last) {
        cql_conn_close(sc->c);
        free(sc);
    }
}

int sess_open_conn(cql_session *s, snode *nd, cql_event_fn on_event, cql_conn **out, char *err,
                   size_t errlen)
{
    cql_conn_opts co = {.host = nd->host,
                        .port = nd->port,
                        .user = s->user,
                        .password = s->password,
                        .tls = s->tls,
                        .connect_timeout_ms = s->o.connect_timeout_ms,
                        .request_timeout_ms = s->o.request_timeout_ms,
                        .on_event = on_event,
                        .event_ud = on_event ? s : NULL};
    return cql_conn_open(&co, out, err, errlen);
}

/* A connection of node i with a reference taken, or NULL when the node is down (in
 * its backoff, or a reconnect failed now). */
static sconn *node_get(cql_session *s, uint32_t i)
{
    snode *nd = s->nodes[i];
    if (atomic_load(&nd->removed))
        return NULL;
    pthread_mutex_lock(&nd->mu);
    sconn *best = NULL;
    int free_slot = -1;
    for (int k = 0; k < s->o.pool_size; k++) {
        sconn *sc = nd->slot[k];
        if (sc && !cql_conn_usable(sc->c)) {
            nd->slot[k] = NULL; /* broken: closed when its last user lets go */
            sc->retired = 1;
            if (sc->refs == 0) {
                cql_conn_close(sc->c);
                free(sc);
            }
            sc = NULL;
        }
        if (!sc) {
            if (free_slot < 0)
                free_slot = k;
            continue;
        }
        if (!best || cql_conn_in_flight(sc->c) < cql_conn_in_flight(best->c))
            best = sc;
    }
    /* Grow the pool while the best connection is busy; reconnect a down node only
     * after its backoff. */
    int64_t now = bdb_monotonic_ms();
    if (free_slot >= 0 && (!best || cql_conn_in_flight(best->c) > 0) &&
        (!nd->down || now >= nd->next_try_ms)) {
        char err[256];
        cql_conn *c = NULL;
        if (sess_open_conn(s, nd, NULL, &c, err, sizeof err) == BDB_OK) {
            sconn *sc = calloc(1, sizeof *sc);
            if (!sc)
                abort();
            sc->c = c;
            nd->slot[free_slot] = sc;
            if (nd->down) {
                BDB_INFO("cassandra: node %s:%d is back", nd->host, nd->port);
                atomic_fetch_add(&s->reconnects, 1);
            }
            nd->down = 0;
            nd->backoff_ms = 0;
            if (!best || cql_conn_in_flight(best->c) > 0)
                best = sc;
        } else if (!best) {
            if (!nd->down)
                BDB_WARN("cassandra: node %s:%d unreachable: %s", nd->host, nd->port, err);
            atomic_fetch_add(&s->connect_failures, 1);
            nd->down = 1;
            nd->backoff_ms = nd->backoff_ms ? nd->backoff_ms * 2 : 100;
            if (nd->backoff_ms > s->o.reconnect_max_ms)
                nd->backoff_ms = s->o.reconnect_max_ms;
            nd->next_try_ms = now + nd->backoff_ms;
        }
    }
    if (best)
        best->refs++;
    pthread_mutex_unlock(&nd->mu);
    return best;
}

/* ---------------------------------------------------------------- open / close */

snode *sess_new_node(const char *host, int port)
{
    snode *nd = calloc(1, sizeof *nd);
    if (!nd)
        abort();
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->port = port;
    pthread_mutex_init(&nd->mu, NULL);
    return nd;
}

static int add_contact_node(cql_session *s, const char *host, int port)
{
    s->nodes[0] = sess_new_node(host, port);
    atomic_store(&s->nnodes, 1);
    return BDB_OK;
}

int cql_session_open(const cql_session_opts *o, cql_session **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o->hosts || !o->hosts[0]) {
        snprintf(err, errlen, "no contact point given");
        return BDB_ERR_INVALID;
    }
    cql_session *s = calloc(1, sizeof *s);
    if (!s)
        return BDB_ERR_NOMEM;
    s->o = *o;
    s->o.hosts = NULL;
    s->o.local_dc = NULL;
    if (s->o.port <= 0)
        s->o.port = 9042;
    if (s->o.consistency < 0)
        s->o.consistency = CQL_LOCAL_QUORUM;
    if (s->o.pool_size <= 0)
        s->o.pool_size = 2;
    if (s->o.pool_size > POOL_MAX)
        s->o.pool_size = POOL_MAX;
    if (s->o.max_retries == 0)
        s->o.max_retries = 6;
    if (s->o.max_retries < 0)
        s->o.max_retries = 0;
    if (s->o.backoff_base_ms <= 0)
        s->o.backoff_base_ms = 20;
    if (s->o.backoff_max_ms <= 0)
        s->o.backoff_max_ms = 1000;
    if (s->o.reconnect_max_ms <= 0)
        s->o.reconnect_max_ms = 5000;
    if (s->o.connect_timeout_ms <= 0)
        s->o.connect_timeout_ms = 3000;
    s->user = o->user ? strdup(o->user) : NULL;
    s->password = o->password ? strdup(o->password) : NULL;
    if (o->tls.enabled) {
        int trc = cql_tls_new(&o->tls, &s->tls, err, errlen);
        if (trc != BDB_OK) {
            cql_session_close(s);
            return trc;
        }
    }

    /* Try the contact points in order until one answers and tells the topology. */
    char *hosts = strdup(o->hosts), *save = NULL;
    int rc = BDB_ERR_IO;
    char cerr[256] = "";
    char chost[64] = "";
    int cport = s->o.port;
    cql_topology *topo = NULL;
    for (char *h = strtok_r(hosts, ",", &save); h && !topo; h = strtok_r(NULL, ",", &save)) {
        snprintf(chost, sizeof chost, "%s", h);
        cport = s->o.port;
        char *colon = strrchr(chost, ':');
        if (colon) {
            *colon = 0;
            cport = atoi(colon + 1);
        }
        cql_conn_opts co = {.host = chost,
                            .port = cport,
                            .tls = s->tls,
                            .user = s->user,
                            .password = s->password,
                            .connect_timeout_ms = s->o.connect_timeout_ms,
                            .request_timeout_ms = s->o.request_timeout_ms};
        cql_conn *c;
        rc = cql_conn_open(&co, &c, cerr, sizeof cerr);
        if (rc == BDB_ERR_INVALID)
            break; /* bad credentials or no common version: the same on every node */
        if (rc != BDB_OK)
            continue;
        rc = cql_topology_discover(c, chost, &topo, cerr, sizeof cerr);
        cql_conn_close(c);
    }
    free(hosts);
    if (!topo) {
        snprintf(err, errlen, "no Cassandra contact point answered (last %s:%d: %s)", chost, cport,
                 cerr[0] ? cerr : bdb_strerror(rc));
        cql_session_close(s);
        return rc == BDB_OK ? BDB_ERR_IO : rc;
    }
    atomic_store(&s->topo, topo);
    /* Every node listens for clients on the port the contact point used. */
    s->port = cport;
    s->nodes = calloc(NODES_MAX, sizeof *s->nodes);
    if (!s->nodes)
        abort();
    if (topo->nnodes == 0) {
        rc = add_contact_node(s, chost, cport);
    } else {
        size_t nn = topo->nnodes < NODES_MAX ? topo->nnodes : NODES_MAX;
        for (size_t i = nn; i < topo->nnodes; i++)
            free(topo->nodes[i].tokens); /* more than NODES_MAX: the first ones */
        topo->nnodes = nn;
        if (cql_topology_build_ring(topo) != BDB_OK)
            abort();
        for (size_t i = 0; i < nn; i++) {
            s->nodes[i] = sess_new_node(topo->nodes[i].addr, cport);
            if (topo->nodes[i].is_local && !s->local_dc[0])
                snprintf(s->local_dc, sizeof s->local_dc, "%s", topo->nodes[i].dc);
        }
        atomic_store(&s->nnodes, nn);
    }
    if (o->local_dc && o->local_dc[0]) {
        int found = 0;
        for (size_t i = 0; i < topo->nnodes; i++)
            found |= !strcmp(topo->nodes[i].dc, o->local_dc);
        if (!found) {
            bdb_buf b;
            bdb_buf_init(&b);
            for (size_t i = 0; i < topo->nnodes; i++)
                bdb_buf_printf(&b, "%s%s", i ? ", " : "", topo->nodes[i].dc);
            bdb_buf_putc(&b, 0);
            snprintf(err, errlen, "local data center '%s' is not in the cluster (its nodes: %s)",
                     o->local_dc, (char *)b.data);
            bdb_buf_free(&b);
            cql_session_close(s);
            return BDB_ERR_INVALID;
        }
        snprintf(s->local_dc, sizeof s->local_dc, "%s", o->local_dc);
    }
    if (rc == BDB_OK && s->o.topology_refresh_ms >= 0)
        rc = sess_refresh_start(s);
    *out = s;
    return rc;
}

void cql_session_close(cql_session *s)
{
    if (!s)
        return;
    sess_refresh_stop(s);
    size_t nn = atomic_load(&s->nnodes);
    for (size_t i = 0; i < nn; i++) {
        snode *nd = s->nodes[i];
        for (int k = 0; k < POOL_MAX; k++)
            if (nd->slot[k]) {
                cql_conn_close(nd->slot[k]->c);
                free(nd->slot[k]);
            }
        pthread_mutex_destroy(&nd->mu);
        free(nd);
    }
    free(s->nodes);
    cql_topology_free(atomic_load(&s->topo));
    for (size_t i = 0; i < s->nold; i++)
        cql_topology_free(s->old_topos[i]);
    free(s->old_topos);
    free(s->user);
    free(s->password);
    cql_tls_free(s->tls);
    free(s);
}

const cql_topology *cql_session_topology(const cql_session *s)
{
    return atomic_load(&((cql_session *)s)->topo);
}

const char *cql_session_local_dc(const cql_session *s)
{
    return s->local_dc;
}

void cql_session_get_stats(cql_session *s, cql_session_stats *st)
{
    memset(st, 0, sizeof *st);
    st->requests = atomic_load(&s->requests);
    st->retries = atomic_load(&s->retries);
    st->failures = atomic_load(&s->failures);
    st->reconnects = atomic_load(&s->reconnects);
    st->connect_failures = atomic_load(&s->connect_failures);
    st->timeouts = atomic_load(&s->timeouts);
    st->attempt_errors = atomic_load(&s->attempt_errors);
    size_t nn = atomic_load(&s->nnodes);
    for (size_t i = 0; i < nn; i++) {
        snode *nd = s->nodes[i];
        if (atomic_load(&nd->removed))
            continue;
        st->nodes++;
        pthread_mutex_lock(&nd->mu);
        st->nodes_up += !nd->down;
        pthread_mutex_unlock(&nd->mu);
    }
}

int cql_session_node_info(cql_session *s, size_t i, cql_session_node *out)
{
    /* i counts the nodes still in the cluster: removed ones are skipped */
    const cql_topology *t = atomic_load(&s->topo);
    size_t nn = atomic_load(&s->nnodes), at = 0;
    for (; at < nn; at++)
        if (!atomic_load(&s->nodes[at]->removed) && i-- == 0)
            break;
    if (at >= nn)
        return BDB_ERR_NOTFOUND;
    snode *nd = s->nodes[at];
    memset(out, 0, sizeof *out);
    snprintf(out->host, sizeof out->host, "%s", nd->host);
    out->port = nd->port;
    if (t && at < t->nnodes)
        snprintf(out->dc, sizeof out->dc, "%s", t->nodes[at].dc);
    out->attempt_errors = atomic_load(&nd->attempt_errors);
    pthread_mutex_lock(&nd->mu);
    out->up = !nd->down;
    for (int k = 0; k < POOL_MAX; k++)
        if (nd->slot[k]) {
            out->connections++;
            out->in_flight += (uint64_t)cql_conn_in_flight(nd->slot[k]->c);
        }
    pthread_mutex_unlock(&nd->mu);
    return BDB_OK;
}

/* ---------------------------------------------------------------- requests */

enum { K_EXEC, K_BATCH, K_PAGED };

struct paged {
    int32_t page_size;
    void (*reset)(void *);
    cql_page_fn fn;
    void *ud;
};

static int one_attempt(cql_session *s, cql_conn *c, int kind, const cql_call *call, uint16_t cl,
                       const struct paged *pg, cql_response **resp)
{
    cql_prepared *p;
    if (kind == K_EXEC && call->unprepared) {
        cql_query_params qp = {.consistency = cl,
                               .serial_consistency = (uint16_t)call->serial_consistency,
                               .values = call->values,
                               .nvalues = call->nvalues};
        return cql_query(c, call->query, &qp, resp);
    }
    int rc = cql_prepare(c, call->query, &p, resp);
    if (rc != BDB_OK)
        return rc;
    (void)s;
    if (kind == K_BATCH) {
        cql_batch_item *items = calloc(call->nrows ? call->nrows : 1, sizeof *items);
        if (!items)
            return BDB_ERR_NOMEM;
        for (uint16_t r = 0; r < call->nrows; r++)
            items[r] =
                (cql_batch_item){p, NULL, call->values + (size_t)r * call->nvalues, call->nvalues};
        rc = cql_batch(c, CQL_BATCH_UNLOGGED, items, call->nrows, cl, resp);
        free(items);
        return rc;
    }
    cql_query_params qp = {.consistency = cl,
                           .serial_consistency = (uint16_t)call->serial_consistency,
                           .values = call->values,
                           .nvalues = call->nvalues};
    if (kind == K_EXEC)
        return cql_execute(c, p, &qp, resp);
    if (pg->reset)
        pg->reset(pg->ud);
    qp.page_size = pg->page_size;
    return cql_query_paged(c, NULL, p, &qp, pg->fn, pg->ud, resp);
}

static int run(cql_session *s, int kind, const cql_call *call, const struct paged *pg,
               cql_response **out)
{
    if (out)
        *out = NULL;
    atomic_fetch_add(&s->requests, 1);
    uint16_t cl = (uint16_t)(call->consistency >= 0 ? call->consistency : s->o.consistency);
    int remote_ok = cl != CQL_LOCAL_QUORUM && cl != CQL_LOCAL_ONE && cl != CQL_LOCAL_SERIAL;
    int64_t token = 0;
    if (call->routing_key)
        token = cql_murmur3_token(call->routing_key, call->routing_len);
    uint32_t plan[PLAN_MAX];
    /* One snapshot of the map for the whole request (see struct cql_session). */
    const cql_topology *topo = atomic_load(&s->topo);
    size_t n = topo && topo->nnodes > 0 && topo->nnodes <= atomic_load(&s->nnodes)
                   ? cql_plan(topo, call->routing_key != NULL, token, s->local_dc, remote_ok, plan,
                              PLAN_MAX)
                   : 0;
    if (n == 0) { /* no topology (single contact node): that node */
        plan[0] = 0;
        n = 1;
    }
    if (!call->routing_key && !call->unprepared && n > 1) {
        /* spread unrouted requests over the local nodes; DDL (unprepared) always
         * starts at the same node, which then has every change it was sent */
        uint32_t rot = (uint32_t)(atomic_fetch_add(&s->rr, 1) % n);
        uint32_t tmp[PLAN_MAX];
        for (size_t k = 0; k < n; k++)
            tmp[k] = plan[(k + rot) % n];
        memcpy(plan, tmp, n * sizeof *plan);
    }
    int idem = call->idempotent || kind == K_PAGED;
    int rc = BDB_ERR_IO;
    cql_response *resp = NULL;
    size_t pi = 0;
    for (int attempt = 0; attempt <= s->o.max_retries; attempt++) {
        if (attempt > 0) {
            atomic_fetch_add(&s->retries, 1);
            int d = cql_backoff_ms(attempt, s->o.backoff_base_ms, s->o.backoff_max_ms);
            sleep_ms(d / 2 + (int)((unsigned)rand() % (unsigned)(d / 2 + 1))); /* jitter */
        }
        sconn *sc = NULL;
        uint32_t ni = 0;
        for (size_t k = 0; k < n && !sc; k++) {
            ni = plan[(pi + k) % n];
            if ((sc = node_get(s, ni)))
                pi = (pi + k) % n;
        }
        cql_response_free(resp);
        resp = NULL;
        if (!sc) {
            rc = BDB_ERR_IO; /* every node down: wait and look again */
            pi++;
            continue;
        }
        rc = one_attempt(s, sc->c, kind, call, cl, pg, &resp);
        sconn_release(s->nodes[ni], sc);
        if (rc == BDB_OK)
            break;
        int32_t code =
            resp && resp->h.opcode == CQL_OP_ERROR ? resp->error.code : CQL_ERR_CLIENT_IO;
        atomic_fetch_add(&s->attempt_errors, 1);
        atomic_fetch_add(&s->nodes[ni]->attempt_errors, 1);
        if (code == CQL_ERR_CLIENT_TIMEOUT || code == CQL_ERR_WRITE_TIMEOUT ||
            code == CQL_ERR_READ_TIMEOUT)
            atomic_fetch_add(&s->timeouts, 1);
        if (!cql_should_retry(code, idem))
            break;
        pi++; /* the next node of the plan */
    }
    if (rc != BDB_OK)
        atomic_fetch_add(&s->failures, 1);
    if (out)
        *out = resp;
    else
        cql_response_free(resp);
    return rc;
}

/* The schema_version cells of a one-column result, formatted; NULL cells skipped. */
static int versions(cql_conn *c, const char *q, char (*out)[37], int max)
{
    cql_query_params qp = {.consistency = CQL_ONE};
    cql_response *r = NULL;
    int n = -1;
    if (cql_query(c, q, &qp, &r) == BDB_OK && r->result.kind == CQL_RESULT_ROWS &&
        r->result.meta.ncols == 1) {
        n = 0;
        for (int32_t i = 0; i < r->result.nrows && n < max; i++) {
            uint8_t u[16];
            if (cql_dec_uuid(r->result.cells[i], u) == BDB_OK)
                cql_uuid_format(u, out[n++]);
        }
    }
    cql_response_free(r);
    return n;
}

int cql_session_wait_schema(cql_session *s, int timeout_ms)
{
    int64_t deadline = bdb_monotonic_ms() + timeout_ms;
    for (;;) {
        sconn *sc = NULL;
        uint32_t ni = 0;
        size_t nn = atomic_load(&s->nnodes);
        for (ni = 0; ni < nn && !sc; ni++)
            sc = node_get(s, ni);
        if (!sc)
            return BDB_ERR_IO;
        ni--;
        char local[1][37], peers[PLAN_MAX][37];
        int nl = versions(sc->c, "SELECT schema_version FROM system.local", local, 1);
        int np = versions(sc->c, "SELECT schema_version FROM system.peers", peers, PLAN_MAX);
        sconn_release(s->nodes[ni], sc);
        int agree = nl == 1 && np >= 0;
        for (int i = 0; agree && i < np; i++)
            agree = !strcmp(peers[i], local[0]);
        if (agree)
            return BDB_OK;
        if (bdb_monotonic_ms() >= deadline)
            return BDB_ERR_AGAIN;
        sleep_ms(100);
    }
}

int cql_session_execute(cql_session *s, const cql_call *c, cql_response **out)
{
    return run(s, K_EXEC, c, NULL, out);
}

int cql_session_batch(cql_session *s, const cql_call *c, cql_response **out)
{
    return run(s, K_BATCH, c, NULL, out);
}

int cql_session_query_paged(cql_session *s, const cql_call *c, int32_t page_size,
                            void (*reset)(void *ud), cql_page_fn page_fn, void *ud,
                            cql_response **err_out)
{
    struct paged pg = {page_size, reset, page_fn, ud};
    return run(s, K_PAGED, c, &pg, err_out);
}
