/* cql_refresh: the session follows the cluster (see cql_session.h and
 * cql_session_int.h). */
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "storage/cassandra/cql/cluster/cql_session_int.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Nodes join and leave while bucketdb runs. A refresher thread keeps one control
 * connection registered for TOPOLOGY_CHANGE and STATUS_CHANGE events and re-reads
 * system.local/system.peers through it after every event (and again 2 s later: the
 * peers row of a joining node may lag its NEW_NODE event), every
 * topology_refresh_ms, and whenever its control connection had to be reopened
 * (events may have been missed meanwhile). New nodes get a pool and a place in the
 * token map; nodes gone from system.peers are marked removed. */

#define FOLLOWUP_MS 2000
#define CTRL_RETRY_MS 1000

/* On the control connection's reader thread: only notes the event and wakes the
 * refresher. */
static void on_event(void *ud, const cql_event *ev)
{
    cql_session *s = ud;
    if (!ev->type || !strcmp(ev->type, "SCHEMA_CHANGE"))
        return;
    char addr[64] = "";
    if (ev->addr_len == 4 || ev->addr_len == 16)
        inet_ntop(ev->addr_len == 4 ? AF_INET : AF_INET6, ev->addr, addr, sizeof addr);
    int down = ev->change && !strcmp(ev->change, "DOWN");
    pthread_mutex_lock(&s->rf_mu);
    s->rf_events++;
    if (!down)
        s->rf_wake = 1;
    else if (addr[0] && s->rf_ndown < (int)(sizeof s->rf_down / sizeof s->rf_down[0]))
        snprintf(s->rf_down[s->rf_ndown++], sizeof s->rf_down[0], "%s", addr);
    pthread_cond_signal(&s->rf_cv);
    pthread_mutex_unlock(&s->rf_mu);
}

static int rf_stopping(cql_session *s)
{
    pthread_mutex_lock(&s->rf_mu);
    int stop = s->rf_stop;
    pthread_mutex_unlock(&s->rf_mu);
    return stop;
}

/* The control connection: a node up first, then one marked down, never a removed
 * one; registered for events. host gets its address. */
static cql_conn *open_ctrl(cql_session *s, char *host, size_t hostlen)
{
    static const char *const evs[] = {"TOPOLOGY_CHANGE", "STATUS_CHANGE"};
    size_t nn = atomic_load(&s->nnodes);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < nn && !rf_stopping(s); i++) {
            snode *nd = s->nodes[i];
            pthread_mutex_lock(&nd->mu);
            int down = nd->down;
            pthread_mutex_unlock(&nd->mu);
            if (atomic_load(&nd->removed) || down != pass)
                continue;
            cql_conn *c = NULL;
            char err[256];
            if (sess_open_conn(s, nd, on_event, &c, err, sizeof err) != BDB_OK)
                continue;
            if (cql_conn_register(c, evs, 2) != BDB_OK) {
                cql_conn_close(c);
                continue;
            }
            snprintf(host, hostlen, "%s", nd->host);
            return c;
        }
    return NULL;
}

/* After an event: a node back UP is tried at the next request that wants it instead
 * of after the rest of its reconnect backoff. */
static void wake_down_nodes(cql_session *s)
{
    size_t nn = atomic_load(&s->nnodes);
    for (size_t i = 0; i < nn; i++) {
        snode *nd = s->nodes[i];
        pthread_mutex_lock(&nd->mu);
        if (nd->down)
            nd->next_try_ms = 0;
        pthread_mutex_unlock(&nd->mu);
    }
}

/* A node left the cluster or is reported down: its idle connections close now, busy
 * ones when their last user lets go (as for a broken connection in node_get). */
static void retire_pool(snode *nd)
{
    pthread_mutex_lock(&nd->mu);
    for (int k = 0; k < POOL_MAX; k++) {
        sconn *sc = nd->slot[k];
        if (!sc)
            continue;
        nd->slot[k] = NULL;
        sc->retired = 1;
        if (sc->refs == 0) {
            cql_conn_close(sc->c);
            free(sc);
        }
    }
    pthread_mutex_unlock(&nd->mu);
}

/* The cluster's failure detector reports addr DOWN (crashed, or frozen: its
 * connections stay open and every request to it would wait for its timeout): the
 * node is marked down now, its connections retired, and requests skip it until its
 * reconnect backoff ends or an UP event comes. */
static void mark_down(cql_session *s, const char *addr)
{
    size_t nn = atomic_load(&s->nnodes);
    for (size_t i = 0; i < nn; i++) {
        snode *nd = s->nodes[i];
        if (strcmp(nd->host, addr) || atomic_load(&nd->removed))
            continue;
        pthread_mutex_lock(&nd->mu);
        int was = nd->down;
        if (!was) {
            nd->down = 1;
            nd->backoff_ms = s->o.reconnect_max_ms;
            nd->next_try_ms = bdb_monotonic_ms() + nd->backoff_ms;
        }
        pthread_mutex_unlock(&nd->mu);
        if (!was) {
            BDB_WARN("cassandra: node %s:%d reported down by the cluster", nd->host, nd->port);
            retire_pool(nd);
        }
    }
}

/* Reads the topology through the control connection and, when it changed, publishes
 * the merged map: new nodes' pools first, then the map naming them. Only the
 * refresher thread writes nodes, nnodes, topo and old_topos after open. */
static void refresh(cql_session *s, cql_conn *c, const char *host)
{
    cql_topology *cur = atomic_load(&s->topo), *fresh = NULL, *merged = NULL;
    if (cur->nnodes == 0)
        return; /* a contact point without system tables: nothing to follow */
    char err[256] = "";
    int changed = 0;
    int rc = cql_topology_discover(c, host, &fresh, err, sizeof err);
    if (rc == BDB_OK)
        rc = cql_topology_merge(cur, fresh, NODES_MAX, &merged, &changed);
    cql_topology_free(fresh);
    if (rc != BDB_OK) {
        BDB_WARN("cassandra: topology refresh through %s failed: %s", host,
                 err[0] ? err : bdb_strerror(rc));
        return;
    }
    cql_topology **old = changed ? realloc(s->old_topos, (s->nold + 1) * sizeof *old) : NULL;
    if (!old) {
        cql_topology_free(merged);
        return; /* unchanged (or out of memory: the next refresh tries again) */
    }
    s->old_topos = old;
    size_t nn = atomic_load(&s->nnodes);
    for (size_t i = nn; i < merged->nnodes; i++) {
        const cql_node *n = &merged->nodes[i];
        s->nodes[i] = sess_new_node(n->addr, s->port);
        BDB_INFO("cassandra: node %s:%d joined (DC %s, rack %s, %zu tokens)", n->addr, s->port,
                 n->dc, n->rack, n->ntokens);
    }
    atomic_store(&s->nnodes, merged->nnodes);
    for (size_t i = 0; i < nn; i++) {
        int was = atomic_load(&s->nodes[i]->removed), now = merged->nodes[i].removed;
        const cql_node *o = &cur->nodes[i], *n = &merged->nodes[i];
        if (!now && (strcmp(o->dc, n->dc) || strcmp(o->rack, n->rack) || o->ntokens != n->ntokens))
            BDB_INFO("cassandra: node %s:%d now DC %s, rack %s, %zu tokens", n->addr, s->port,
                     n->dc, n->rack, n->ntokens);
        if (was == now)
            continue;
        atomic_store(&s->nodes[i]->removed, now);
        BDB_INFO("cassandra: node %s:%d %s", s->nodes[i]->host, s->port,
                 now ? "left the cluster" : "is in the cluster again");
        if (now)
            retire_pool(s->nodes[i]);
    }
    s->old_topos[s->nold++] = cur;
    atomic_store(&s->topo, merged);
}

static void *refresher(void *arg)
{
    cql_session *s = arg;
    int period = s->o.topology_refresh_ms > 0 ? s->o.topology_refresh_ms : 30000;
    int64_t next_full = bdb_monotonic_ms() + period, followup = 0, ctrl_retry = 0;
    char host[64] = "";
    pthread_mutex_lock(&s->rf_mu);
    while (!s->rf_stop) {
        int64_t now = bdb_monotonic_ms();
        int ctrl_ok = s->ctrl && cql_conn_usable(s->ctrl);
        int64_t due = next_full;
        if (followup && followup < due)
            due = followup;
        if (!ctrl_ok && ctrl_retry < due)
            due = ctrl_retry;
        if (!s->rf_events && now < due) {
            struct timespec ts = {(time_t)(due / 1000), (long)(due % 1000) * 1000000L};
            pthread_cond_timedwait(&s->rf_cv, &s->rf_mu, &ts);
            continue;
        }
        int ev = s->rf_events > 0, wake = s->rf_wake, ndown = s->rf_ndown;
        char down[8][64];
        memcpy(down, s->rf_down, sizeof down);
        s->rf_events = s->rf_wake = s->rf_ndown = 0;
        pthread_mutex_unlock(&s->rf_mu);
        for (int k = 0; k < ndown; k++)
            mark_down(s, down[k]);
        if (!ctrl_ok) {
            cql_conn_close(s->ctrl);
            s->ctrl = open_ctrl(s, host, sizeof host);
            ctrl_retry = now + CTRL_RETRY_MS;
            ev |= s->ctrl != NULL; /* events may have been missed meanwhile */
            wake |= s->ctrl != NULL;
        }
        if (s->ctrl && (ev || now >= next_full || (followup && now >= followup))) {
            if (wake)
                wake_down_nodes(s);
            refresh(s, s->ctrl, host);
            next_full = bdb_monotonic_ms() + period;
            followup = ev ? bdb_monotonic_ms() + FOLLOWUP_MS : 0;
        }
        pthread_mutex_lock(&s->rf_mu);
    }
    pthread_mutex_unlock(&s->rf_mu);
    return NULL;
}

int sess_refresh_start(cql_session *s)
{
    /* bdb_monotonic_ms is CLOCK_MONOTONIC: the timed wait uses the same clock */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->rf_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->rf_mu, NULL);
    if (pthread_create(&s->rf_thread, NULL, refresher, s) != 0) {
        pthread_mutex_destroy(&s->rf_mu);
        pthread_cond_destroy(&s->rf_cv);
        return BDB_ERR_NOMEM;
    }
    s->rf_started = 1;
    return BDB_OK;
}

void sess_refresh_stop(cql_session *s)
{
    if (!s->rf_started)
        return;
    pthread_mutex_lock(&s->rf_mu);
    s->rf_stop = 1;
    pthread_cond_signal(&s->rf_cv);
    pthread_mutex_unlock(&s->rf_mu);
    pthread_join(s->rf_thread, NULL);
    cql_conn_close(s->ctrl); /* its reader thread may still signal rf_cv */
    s->ctrl = NULL;
    pthread_mutex_destroy(&s->rf_mu);
    pthread_cond_destroy(&s->rf_cv);
    s->rf_started = 0;
}
