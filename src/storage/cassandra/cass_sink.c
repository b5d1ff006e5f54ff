/* cass_sink: flushed samples into the Cassandra telemetry table (cass_sink.h). */
#include "storage/cassandra/cass_sink.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/bucket.h"
#include "storage/cassandra/cass_agg.h" /* tiers and fleet */
#include "storage/cassandra/cass_drop.h"
#include "storage/cassandra/cass_late.h"
#include "storage/cassandra/cass_owner.h"
#include "storage/cassandra/cass_state.h"
#include "storage/cassandra/cass_uri.h"
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/cluster/cql_token.h"
#include "storage/cassandra/cql/wire/cql_value.h"
#include "storage/cassandra/cass_doc.h"
#include "storage/cassandra/schema.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TTL_S INT64_C(630720000) /* Cassandra's limit: 20 years */
#define QUEUE_PER_WORKER 2

struct bdb_sink_ack;

typedef struct job {
    struct job *next;
    /* an acknowledgement's rows (ack_put): its group, and a metric per row (metrics,
     * pointing into mblob); a flush's: grp NULL, one metric */
    struct bdb_sink_ack *grp;
    char **metrics, *mblob;
    char *tenant, *device, *metric;
    int64_t partition, ttl_ms;
    int64_t *ts;
    double *v;
    size_t n;
} job;

typedef struct cass_sink {
    bdb_sink base;
    /* NULL until a contact point answered (offline_start): connect() is retried by
     * the first user after next_try_ms. */
    cql_session *_Atomic sess;
    cass_uri *u;
    pthread_mutex_t conn_mu;
    int64_t next_try_ms;
    int offline_logged;
    char ks[49];
    char desc[512];
    char insert_q[512], select_q[512];
    int write_cl, read_cl;
    int inflight, batch_rows;

    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_space, cv_done;
    job *head, *tail;
    size_t queued;       /* jobs in the queue */
    size_t pending;      /* queued + being sent */
    size_t ack_pending;  /* of acknowledgements' jobs (ack=quorum), not in pending */
    int first_err;       /* of the jobs since the last commit */
    size_t failed, sent; /* jobs since the last commit */
    int stopping;
    pthread_t *workers;
    int nworkers;

    _Atomic uint64_t batches, rows, batch_failures, expired_rows, reads, read_failures;
    _Atomic uint64_t commits, commit_failures;
    /* ack=quorum: rows sent, batches of rows failed, writes confirmed and refused */
    _Atomic uint64_t ack_rows, ack_failures, acks, ack_refusals;

    /* the keyspace's identity and the writer lease (cass_owner.h): claimed at the
     * first connection, renewed by the lease thread, given up at close */
    char *data_dir;
    /* set by the first connection, which may be a flush's (offline_start) while the
     * lease thread and writers read it: atomic */
    cass_owner *_Atomic owner;
    /* something was written since the last counted flush: the next commit counts one
     * (cass_owner_flushed); an idle flush writes nothing and counts nothing */
    atomic_int dirty;
    pthread_t lease_th;
    int lease_running;
    pthread_cond_t cv_lease;
    int report_due; /* under mu: the lease thread publishes at once (set_reporter) */
    /* the writer row's report (cass_sink_set_reporter): rep_mu is held while backlog
     * runs, so clearing it waits for a call in progress */
    _Atomic int64_t last_flush_ms;
    pthread_mutex_t rep_mu;
    uint64_t (*backlog)(void *ud);
    void *backlog_ud;
    char listen[256];
} cass_sink;

/* The sink /metrics reports (cass_sink_with_open): a server opens one. Guarded so
 * that a scrape never sees a sink being closed. */
static pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
static cass_sink *g_open;

/* ---------------------------------------------------------------- schema */

static int run_ddl(cql_session *sess, char *text, char *err, size_t errlen)
{
    /* Statements end with ';'; the generator's comments are whole "--" lines and its
     * statements hold no ';' inside strings. */
    bdb_buf stmt;
    bdb_buf_init(&stmt);
    int rc = BDB_OK;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line && rc == BDB_OK;
         line = strtok_r(NULL, "\n", &save)) {
        const char *t = line;
        while (*t == ' ')
            t++;
        if (!strncmp(t, "--", 2))
            continue;
        size_t n = strlen(line);
        int end = n && line[n - 1] == ';';
        bdb_buf_append(&stmt, line, end ? n - 1 : n);
        bdb_buf_putc(&stmt, '\n');
        if (!end)
            continue;
        bdb_buf_putc(&stmt, 0);
        cql_call c = {.query = (const char *)stmt.data,
                      .consistency = CQL_ONE,
                      .idempotent = 1, /* CREATE ... IF NOT EXISTS */
                      .unprepared = 1};
        cql_response *r = NULL;
        rc = cql_session_execute(sess, &c, &r);
        /* Every node must know a keyspace or table before the next statement (or a
         * prepare on another node) uses it. */
        if (rc == BDB_OK && r && r->result.kind == CQL_RESULT_SCHEMA_CHANGE &&
            cql_session_wait_schema(sess, 30000) != BDB_OK)
            BDB_WARN("cassandra: the nodes do not agree on the schema after 30 s (a node "
                     "down?); going on");
        if (rc != BDB_OK)
            snprintf(err, errlen, "schema statement failed: %s: %.200s",
                     r && r->h.opcode == CQL_OP_ERROR ? r->error.message : bdb_strerror(rc),
                     (const char *)stmt.data);
        cql_response_free(r);
        bdb_buf_reset(&stmt);
    }
    bdb_buf_free(&stmt);
    return rc;
}

static int create_schema(cql_session *sess, const cass_uri *u, char *err, size_t errlen)
{
    const cql_topology *t = cql_session_topology(sess);
    sch_opts so;
    sch_opts_default(&so);
    snprintf(so.keyspace, sizeof so.keyspace, "%s", u->ks);
    so.ttl_s = 0; /* every row has its tenant's USING TTL; 0 there must mean forever */
    so.bucket_s = u->bucket_s;
    for (size_t i = 0; i < t->nnodes; i++)
        if (t->nodes[i].is_local && t->nodes[i].release[0])
            sch_parse_version(t->nodes[i].release, so.ver);
    int rc;
    if (u->replication[0]) {
        rc = sch_parse_replication(u->replication, &so, err, errlen);
    } else {
        const char **dcs = calloc(t->nnodes + 1, sizeof *dcs);
        for (size_t i = 0; i < t->nnodes; i++)
            dcs[i] = t->nodes[i].dc;
        rc = sch_replication_from_nodes(&so, dcs, t->nnodes);
        free(dcs);
    }
    if (rc != BDB_OK)
        return rc;
    bdb_buf ddl, warn;
    bdb_buf_init(&ddl);
    bdb_buf_init(&warn);
    rc = sch_generate(&so, &ddl, &warn, err, errlen);
    if (rc == BDB_OK) {
        bdb_buf_putc(&ddl, 0);
        bdb_buf_putc(&warn, 0);
        if (warn.len > 1)
            BDB_WARN("cassandra schema: %s", (const char *)warn.data);
        rc = run_ddl(sess, (char *)ddl.data, err, errlen);
        if (rc == BDB_OK) /* state: columns newer than the keyspace (cass_state.c) */
            cass_state_upgrade(sess, u->ks);
        if (rc == BDB_OK) /* late arrivals: device_newest (cass_late.c) */
            cass_late_upgrade(sess, u->ks);
        if (rc == BDB_OK) /* the writer row's report (cass_owner.c) */
            cass_owner_upgrade(sess, u->ks);
    }
    bdb_buf_free(&ddl);
    bdb_buf_free(&warn);
    return rc;
}

/* ---------------------------------------------------------------- connecting */

static int connect_now(cass_sink *s, char *err, size_t errlen)
{
    const cass_uri *u = s->u;
    cql_session_opts so = {.hosts = u->hosts,
                           .user = u->user[0] ? u->user : NULL,
                           .password = u->user[0] ? u->password : NULL,
                           .local_dc = u->dc,
                           .consistency = u->write_cl,
                           .pool_size = u->pool,
                           .max_retries = u->retries ? u->retries : -1,
                           .request_timeout_ms = u->timeout_ms,
                           .tls = {.enabled = u->tls,
                                   .ca_file = u->ca,
                                   .cert_file = u->cert,
                                   .key_file = u->key,
                                   .insecure = !u->tls_verify}};
    cql_session *sess = NULL;
    cass_owner *claimed = NULL;
    int rc = cql_session_open(&so, &sess, err, errlen);
    if (rc == BDB_OK && u->create_schema)
        rc = create_schema(sess, u, err, errlen);
    /* nothing is written before the keyspace is this data directory's and the lease
     * is held (cass_owner.h) */
    if (rc == BDB_OK && s->data_dir)
        rc = cass_owner_claim(sess, u->ks, s->data_dir, u->write_cl, u->adopt, &claimed, err,
                              errlen);
    if (rc != BDB_OK) {
        cql_session_close(sess);
        return rc;
    }
    atomic_store(&s->owner, claimed);
    const cql_topology *t = cql_session_topology(sess);
    snprintf(
        s->desc, sizeof s->desc,
        "cassandra://%.200s/%s (%zu node(s), local DC %.63s, writes %s, reads %s, %d in flight)",
        u->hosts, s->ks, t->nnodes, cql_session_local_dc(sess), cql_consistency_name(s->write_cl),
        cql_consistency_name(s->read_cl), s->inflight);
    atomic_store(&s->sess, sess);
    return BDB_OK;
}

/* The session, connecting now if the cluster was away at start and the retry
 * interval passed; NULL while no contact point answers. */
static cql_session *session(cass_sink *s)
{
    cql_session *sess = atomic_load(&s->sess);
    if (sess)
        return sess;
    pthread_mutex_lock(&s->conn_mu);
    if (!atomic_load(&s->sess) && bdb_monotonic_ms() >= s->next_try_ms) {
        char err[512];
        if (connect_now(s, err, sizeof err) == BDB_OK) {
            BDB_INFO("cassandra: connected: %s", s->desc);
        } else {
            if (!s->offline_logged++)
                BDB_WARN("cassandra: still unreachable: %s", err);
            s->next_try_ms = bdb_monotonic_ms() + 2000;
        }
    }
    pthread_mutex_unlock(&s->conn_mu);
    return atomic_load(&s->sess);
}

/* ---------------------------------------------------------------- writes */

static void job_free(job *j)
{
    free(j->metrics);
    free(j->mblob);
    free(j->tenant);
    free(j->device);
    free(j->metric);
    free(j->ts);
    free(j->v);
    free(j);
}

static void split_partition(int64_t part, int64_t *bucket, int32_t *sub)
{
    /* The engine's partition id is the bucket start (minute-aligned) plus the
     * sub-bucket (< 64). */
    int64_t b = bdb_floor_div(part, BDB_MS_MIN) * BDB_MS_MIN;
    *bucket = b;
    *sub = (int32_t)(part - b);
}

static void routing_key(bdb_buf *out, const char *tn, const char *dn, int64_t bucket, int32_t sub)
{
    uint8_t b8[8], b4[4];
    cql_be64(b8, (uint64_t)bucket);
    cql_be32(b4, (uint32_t)sub);
    cql_bytes parts[4] = {{(const uint8_t *)tn, (int32_t)strlen(tn)},
                          {(const uint8_t *)dn, (int32_t)strlen(dn)},
                          {b8, 8},
                          {b4, 4}};
    cql_composite_key(out, parts, 4);
}

static int send_job(cass_sink *s, const job *j, char *msg, size_t msglen)
{
    int64_t bucket;
    int32_t sub;
    split_partition(j->partition, &bucket, &sub);
    /* Per row 8 values; the fixed-size ones live in one scratch array. */
    enum { NV = 8 };
    cql_bytes *vals = calloc(j->n * NV, sizeof *vals);
    uint8_t *scratch = malloc(j->n * 32 + 16);
    if (!vals || !scratch)
        abort();
    uint8_t *kb = scratch + j->n * 32;
    cql_be64(kb, (uint64_t)bucket);
    cql_be32(kb + 8, (uint32_t)sub);
    int64_t now = bdb_now_ms();
    uint16_t nrows = 0;
    for (size_t i = 0; i < j->n; i++) {
        int64_t ttl = 0;
        if (j->ttl_ms > 0) {
            ttl = (j->ts[i] + j->ttl_ms - now) / 1000;
            if (ttl <= 0) { /* expired already: reads would not return it anyway */
                atomic_fetch_add(&s->expired_rows, 1);
                continue;
            }
            if (ttl > MAX_TTL_S)
                ttl = MAX_TTL_S;
        }
        uint8_t *p = scratch + (size_t)nrows * 32;
        cql_be64(p, (uint64_t)j->ts[i]);
        uint64_t bits;
        memcpy(&bits, &j->v[i], 8);
        cql_be64(p + 8, bits);
        cql_be32(p + 16, (uint32_t)ttl);
        cql_bytes *r = vals + (size_t)nrows * NV;
        r[0] = (cql_bytes){(const uint8_t *)j->tenant, (int32_t)strlen(j->tenant)};
        r[1] = (cql_bytes){(const uint8_t *)j->device, (int32_t)strlen(j->device)};
        r[2] = (cql_bytes){kb, 8};
        r[3] = (cql_bytes){kb + 8, 4};
        r[4] = (cql_bytes){p, 8};
        const char *metric = j->metrics ? j->metrics[i] : j->metric;
        r[5] = (cql_bytes){(const uint8_t *)metric, (int32_t)strlen(metric)};
        r[6] = (cql_bytes){p + 8, 8};
        r[7] = (cql_bytes){p + 16, 4};
        nrows++;
    }
    int rc = BDB_OK;
    if (nrows) {
        bdb_buf rk;
        bdb_buf_init(&rk);
        routing_key(&rk, j->tenant, j->device, bucket, sub);
        cql_call c = {.query = s->insert_q,
                      .values = vals,
                      .nvalues = NV,
                      .nrows = nrows,
                      .routing_key = rk.data,
                      .routing_len = rk.len,
                      .consistency = s->write_cl,
                      .idempotent = 1};
        cql_response *r = NULL;
        cql_session *sess = session(s);
        rc = sess ? cql_session_batch(sess, &c, &r) : BDB_ERR_IO;
        if (rc != BDB_OK) {
            atomic_fetch_add(&s->batch_failures, 1);
            snprintf(msg, msglen, "batch of %u rows for %s/%s failed: %s", nrows, j->tenant,
                     j->device,
                     r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                          : bdb_strerror(rc));
        } else {
            atomic_fetch_add(&s->batches, 1);
            atomic_fetch_add(&s->rows, nrows);
        }
        cql_response_free(r);
        bdb_buf_free(&rk);
    }
    free(vals);
    free(scratch);
    return rc;
}

/* ---------------------------------------------------------------- acknowledgements */

static int lease_lost(cass_sink *s);

/* One write batch's rows in flight (ack=quorum, storage/sink.h): counted by the
 * workers under s->mu, waited for on cv_done. */
struct bdb_sink_ack {
    cass_sink *s;
    size_t pending;
    int err;
};

/* Queues j for the workers. Bounded: the caller (a flush, or a writer in ack=quorum)
 * waits while the workers are busy and the queue is full. Counted in its
 * acknowledgement's group, or in the flush's pending. */
static void enqueue(cass_sink *s, job *j)
{
    pthread_mutex_lock(&s->mu);
    while (s->queued >= (size_t)s->nworkers * QUEUE_PER_WORKER)
        pthread_cond_wait(&s->cv_space, &s->mu);
    if (s->tail)
        s->tail->next = j;
    else
        s->head = j;
    s->tail = j;
    s->queued++;
    if (j->grp) {
        j->grp->pending++;
        s->ack_pending++;
    } else {
        s->pending++;
    }
    pthread_cond_signal(&s->cv_job);
    pthread_mutex_unlock(&s->mu);
}

/* Caller holds s->mu. */
static void ack_done(cass_sink *s, struct bdb_sink_ack *g, int rc, const char *msg)
{
    if (rc != BDB_OK && g->err == BDB_OK) {
        g->err = rc;
        atomic_fetch_add(&s->ack_failures, 1);
        BDB_WARN("cassandra: ack=quorum: %s; the write is not acknowledged", msg);
    }
    s->ack_pending--;
    if (--g->pending == 0)
        pthread_cond_broadcast(&s->cv_done);
}

static int sink_ack_begin(bdb_sink *base, struct bdb_sink_ack **out)
{
    cass_sink *s = (cass_sink *)base;
    *out = NULL;
    if (!s->u->ack_quorum)
        return BDB_OK;
    if (lease_lost(s))
        return BDB_ERR_EXISTS;
    struct bdb_sink_ack *g = calloc(1, sizeof *g);
    if (!g)
        return BDB_ERR_NOMEM;
    g->s = s;
    *out = g;
    return BDB_OK;
}

static int sink_ack_put(struct bdb_sink_ack *g, const char *tn, const char *dn, int64_t partition,
                        int64_t ttl_ms, const bdb_sink_row *rows, size_t n)
{
    cass_sink *s = g->s;
    for (size_t off = 0; off < n; off += (size_t)s->batch_rows) {
        size_t k = n - off < (size_t)s->batch_rows ? n - off : (size_t)s->batch_rows;
        size_t blob = 0;
        for (size_t i = 0; i < k; i++)
            blob += strlen(rows[off + i].metric) + 1;
        job *j = calloc(1, sizeof *j);
        if (!j)
            return BDB_ERR_NOMEM;
        j->grp = g;
        j->tenant = strdup(tn);
        j->device = strdup(dn);
        j->partition = partition;
        j->ttl_ms = ttl_ms;
        j->n = k;
        j->ts = malloc(k * sizeof *j->ts);
        j->v = malloc(k * sizeof *j->v);
        j->metrics = malloc(k * sizeof *j->metrics);
        j->mblob = malloc(blob);
        if (!j->tenant || !j->device || !j->ts || !j->v || !j->metrics || !j->mblob) {
            job_free(j);
            return BDB_ERR_NOMEM;
        }
        char *p = j->mblob;
        for (size_t i = 0; i < k; i++) {
            const bdb_sink_row *r = &rows[off + i];
            size_t l = strlen(r->metric) + 1;
            memcpy(p, r->metric, l);
            j->metrics[i] = p;
            p += l;
            j->ts[i] = r->ts;
            j->v[i] = r->v;
        }
        atomic_fetch_add(&s->ack_rows, k);
        enqueue(s, j); /* bounded with the flushes' rows */
    }
    return BDB_OK;
}

static int sink_ack_end(struct bdb_sink_ack *g)
{
    cass_sink *s = g->s;
    pthread_mutex_lock(&s->mu);
    while (g->pending)
        pthread_cond_wait(&s->cv_done, &s->mu);
    int rc = g->err;
    pthread_mutex_unlock(&s->mu);
    if (rc == BDB_OK && lease_lost(s))
        rc = BDB_ERR_EXISTS;
    atomic_fetch_add(rc == BDB_OK ? &s->acks : &s->ack_refusals, 1);
    free(g);
    return rc;
}

static void *worker(void *arg)
{
    cass_sink *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping)
            pthread_cond_wait(&s->cv_job, &s->mu);
        if (!s->head)
            break;
        job *j = s->head;
        s->head = j->next;
        if (!s->head)
            s->tail = NULL;
        s->queued--;
        pthread_cond_signal(&s->cv_space);
        pthread_mutex_unlock(&s->mu);
        char msg[512];
        /* A flush is all or nothing: once a batch failed after its retries, the rest
         * is dropped at once (the WAL keeps it for the next flush). An
         * acknowledgement's rows go whatever a flush did: they have their own group. */
        struct bdb_sink_ack *g = j->grp;
        int rc = g ? BDB_OK : s->first_err;
        if (rc == BDB_OK)
            rc = send_job(s, j, msg, sizeof msg);
        job_free(j);
        pthread_mutex_lock(&s->mu);
        if (g) {
            ack_done(s, g, rc, msg);
            continue;
        }
        if (rc != BDB_OK && s->first_err == BDB_OK) {
            s->first_err = rc;
            BDB_WARN("cassandra: %s", msg); /* one line per flush, the count at commit */
        }
        s->failed += rc != BDB_OK;
        s->sent++;
        if (--s->pending == 0)
            pthread_cond_broadcast(&s->cv_done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A server that lost the writer lease writes nothing more (cass_owner.h). */
static int lease_lost(cass_sink *s)
{
    cass_owner *o = atomic_load(&s->owner);
    return o && !cass_owner_valid(o);
}

/* Before a write: refused once the lease is lost; else the next commit counts a flush. */
static int write_refused(cass_sink *s)
{
    if (lease_lost(s))
        return 1;
    atomic_store(&s->dirty, 1);
    return 0;
}

static int sink_put(bdb_sink *base, const char *tn, const char *dn, const char *metric,
                    int64_t partition, int64_t ttl_ms, const int64_t *ts, const double *v, size_t n)
{
    cass_sink *s = (cass_sink *)base;
    if (write_refused(s))
        return BDB_ERR_EXISTS;
    pthread_mutex_lock(&s->mu);
    int failed = s->first_err;
    pthread_mutex_unlock(&s->mu);
    if (failed != BDB_OK)
        return failed; /* this flush has failed already: stop feeding it */
    for (size_t off = 0; off < n; off += (size_t)s->batch_rows) {
        size_t k = n - off < (size_t)s->batch_rows ? n - off : (size_t)s->batch_rows;
        job *j = calloc(1, sizeof *j);
        if (!j)
            abort();
        j->tenant = strdup(tn);
        j->device = strdup(dn);
        j->metric = strdup(metric);
        j->partition = partition;
        j->ttl_ms = ttl_ms;
        j->n = k;
        j->ts = malloc(k * sizeof *j->ts);
        j->v = malloc(k * sizeof *j->v);
        if (!j->tenant || !j->device || !j->metric || !j->ts || !j->v)
            abort();
        memcpy(j->ts, ts + off, k * sizeof *j->ts);
        memcpy(j->v, v + off, k * sizeof *j->v);
        enqueue(s, j);
    }
    return BDB_OK;
}

static int sink_commit(bdb_sink *base)
{
    cass_sink *s = (cass_sink *)base;
    pthread_mutex_lock(&s->mu);
    while (s->pending)
        pthread_cond_wait(&s->cv_done, &s->mu);
    int rc = s->first_err;
    if (rc == BDB_OK && lease_lost(s))
        rc = BDB_ERR_EXISTS;
    if (s->failed)
        BDB_WARN("cassandra: %zu of %zu batches failed or were dropped after the first failure; "
                 "the WAL keeps them for the next flush",
                 s->failed, s->sent);
    s->first_err = BDB_OK;
    s->failed = s->sent = 0;
    pthread_mutex_unlock(&s->mu);
    /* the flush generation (cass_owner.h): part of the commit, so that a flush whose
     * generation was not recorded fails and is made again */
    cass_owner *o = atomic_load(&s->owner);
    if (rc == BDB_OK && o && atomic_exchange(&s->dirty, 0)) {
        char err[512];
        cql_session *sess = atomic_load(&s->sess);
        rc = sess ? cass_owner_flushed(o, sess, err, sizeof err) : BDB_ERR_IO;
        if (rc != BDB_OK) {
            atomic_store(&s->dirty, 1);
            BDB_WARN("cassandra: counting the flush failed: %s; the flush fails and the WAL "
                     "keeps it for the next one",
                     sess ? err : "not connected");
        }
    }
    atomic_fetch_add(rc == BDB_OK ? &s->commits : &s->commit_failures, 1);
    if (rc == BDB_OK)
        atomic_store(&s->last_flush_ms, bdb_now_ms());
    return rc;
}

/* ---------------------------------------------------------------- reads */

struct rsample {
    size_t m;
    int64_t ts;
    double v;
};

struct readctx {
    const char *const *metrics;
    const size_t *order; /* metric indexes sorted by name */
    size_t nmetrics;
    struct rsample *r;
    size_t n, cap;
    int bad;
};

static void read_reset(void *ud)
{
    ((struct readctx *)ud)->n = 0;
}

static int find_metric(const struct readctx *x, const char *name, size_t len)
{
    size_t lo = 0, hi = x->nmetrics;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const char *m = x->metrics[x->order[mid]];
        int c = strncmp(m, name, len);
        if (c == 0)
            c = m[len] ? 1 : 0;
        if (c == 0)
            return (int)x->order[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static int read_page(void *ud, const cql_response *page)
{
    struct readctx *x = ud;
    const cql_result *res = &page->result;
    if (res->kind != CQL_RESULT_ROWS || res->meta.ncols != 3) {
        x->bad = 1;
        return 1;
    }
    for (int32_t i = 0; i < res->nrows; i++) {
        const cql_bytes *c = res->cells + (size_t)i * 3;
        int64_t ts;
        double v;
        if (c[1].len < 0 || cql_dec_bigint(c[0], &ts) != BDB_OK ||
            cql_dec_double(c[2], &v) != BDB_OK)
            continue; /* a null value: not a sample */
        int m = find_metric(x, (const char *)c[1].p, (size_t)c[1].len);
        if (m < 0)
            continue;
        if (x->n == x->cap) {
            x->cap = x->cap ? x->cap * 2 : 256;
            struct rsample *nr = realloc(x->r, x->cap * sizeof *nr);
            if (!nr)
                abort();
            x->r = nr;
        }
        x->r[x->n++] = (struct rsample){(size_t)m, ts, v};
    }
    return 0;
}

static const char *const *sort_names;
static int name_cmp(const void *a, const void *b)
{
    return strcmp(sort_names[*(const size_t *)a], sort_names[*(const size_t *)b]);
}

static int sink_read(bdb_sink *base, const char *tn, const char *dn, const int64_t *buckets,
                     size_t nbuckets, uint32_t nsub, int64_t lo, int64_t hi,
                     const char *const *metrics, size_t nmetrics, bdb_sink_add_fn add, void *ud)
{
    cass_sink *s = (cass_sink *)base;
    if (nmetrics == 0)
        return BDB_OK;
    size_t *order = malloc(nmetrics * sizeof *order);
    if (!order)
        return BDB_ERR_NOMEM;
    for (size_t i = 0; i < nmetrics; i++)
        order[i] = i;
    /* qsort has no context argument; the sort is short and under a lock. */
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&sort_mu);
    sort_names = metrics;
    qsort(order, nmetrics, sizeof *order, name_cmp);
    pthread_mutex_unlock(&sort_mu);
    struct readctx x = {metrics, order, nmetrics, NULL, 0, 0, 0};
    int rc = BDB_OK;
    for (size_t b = 0; b < nbuckets && rc == BDB_OK; b++) {
        for (uint32_t sub = 0; sub < nsub && rc == BDB_OK; sub++) {
            uint8_t kb[8], sb[4], lob[8], hib[8];
            cql_be64(kb, (uint64_t)buckets[b]);
            cql_be32(sb, sub);
            cql_be64(lob, (uint64_t)lo);
            cql_be64(hib, (uint64_t)hi);
            cql_bytes vals[6] = {{(const uint8_t *)tn, (int32_t)strlen(tn)},
                                 {(const uint8_t *)dn, (int32_t)strlen(dn)},
                                 {kb, 8},
                                 {sb, 4},
                                 {lob, 8},
                                 {hib, 8}};
            bdb_buf rk;
            bdb_buf_init(&rk);
            routing_key(&rk, tn, dn, buckets[b], (int32_t)sub);
            cql_call c = {.query = s->select_q,
                          .values = vals,
                          .nvalues = 6,
                          .routing_key = rk.data,
                          .routing_len = rk.len,
                          .consistency = s->read_cl,
                          .idempotent = 1};
            cql_response *err = NULL;
            x.n = 0;
            atomic_fetch_add(&s->reads, 1);
            cql_session *sess = session(s);
            rc = sess ? cql_session_query_paged(sess, &c, 5000, read_reset, read_page, &x, &err)
                      : BDB_ERR_IO;
            if (rc == BDB_OK && x.bad)
                rc = BDB_ERR_CORRUPT;
            if (rc != BDB_OK) {
                atomic_fetch_add(&s->read_failures, 1);
                BDB_WARN("cassandra: read of %s/%s failed: %s", tn, dn,
                         err && err->error.message ? err->error.message : bdb_strerror(rc));
            } else {
                for (size_t i = 0; i < x.n; i++)
                    add(ud, x.r[i].m, x.r[i].ts, x.r[i].v);
            }
            cql_response_free(err);
            bdb_buf_free(&rk);
        }
    }
    free(x.r);
    free(order);
    return rc;
}

/* ---------------------------------------------------------------- life cycle */

static const char *sink_describe(bdb_sink *base)
{
    return ((cass_sink *)base)->desc;
}

static void sink_close(bdb_sink *base)
{
    cass_sink *s = (cass_sink *)base;
    if (!s)
        return;
    pthread_mutex_lock(&g_open_mu);
    if (g_open == s)
        g_open = NULL;
    pthread_mutex_unlock(&g_open_mu);
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv_job);
    pthread_cond_broadcast(&s->cv_lease);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->nworkers; i++)
        pthread_join(s->workers[i], NULL);
    free(s->workers);
    if (s->lease_running)
        pthread_join(s->lease_th, NULL);
    cass_owner_free(atomic_load(&s->owner), atomic_load(&s->sess));
    free(s->data_dir);
    pthread_cond_destroy(&s->cv_lease);
    pthread_mutex_destroy(&s->rep_mu);
    cql_session_close(atomic_load(&s->sess));
    free(s->u);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv_job);
    pthread_cond_destroy(&s->cv_space);
    pthread_cond_destroy(&s->cv_done);
    free(s);
}

/* The other writes, refused once the lease is lost. Tier and fleet windows go out
 * after the commit of the flush they belong to (sink.h), which counted that flush
 * already: they do not make the next one count (a stop with nothing new to flush
 * then writes nothing, as before the generation). The rest are counted by the next
 * commit. */
static int g_tier_put(bdb_sink *b, const char *t, const char *d, const char *m, int res,
                      const struct bdb_rollup *r, const int32_t *ttl)
{
    return lease_lost((cass_sink *)b) ? BDB_ERR_EXISTS : cass_agg_tier_put(b, t, d, m, res, r, ttl);
}
static int g_fleet_put(bdb_sink *b, const char *t, const char *m, int res,
                       const struct bdb_fleet *f, const int32_t *ttl)
{
    return lease_lost((cass_sink *)b) ? BDB_ERR_EXISTS : cass_agg_fleet_put(b, t, m, res, f, ttl);
}
static int g_state_put(bdb_sink *b, const bdb_sink_state *v, size_t n)
{
    return write_refused((cass_sink *)b) ? BDB_ERR_EXISTS : cass_state_put(b, v, n);
}
static int g_device_put(bdb_sink *b, const bdb_sink_device *v, size_t n)
{
    return write_refused((cass_sink *)b) ? BDB_ERR_EXISTS : cass_device_put(b, v, n);
}
static int g_count_put(bdb_sink *b, const bdb_sink_count *v, size_t n)
{
    return write_refused((cass_sink *)b) ? BDB_ERR_EXISTS : cass_count_put(b, v, n);
}
static int g_late_put(bdb_sink *b, const struct bdb_sink_late *v, size_t n)
{
    return write_refused((cass_sink *)b) ? BDB_ERR_EXISTS : cass_late_put(b, v, n);
}
static int g_drop_tenant(bdb_sink *b, const char *t, const bdb_sink_device *d, const uint32_t *ns,
                         size_t n)
{
    return write_refused((cass_sink *)b) ? BDB_ERR_EXISTS : cass_drop_tenant(b, t, d, ns, n);
}

/* a document is the writer's too: a server that lost the lease must not replace it */
static int g_doc_put(bdb_sink *b, const char *k, const void *data, size_t len)
{
    return lease_lost((cass_sink *)b) ? BDB_ERR_EXISTS : cass_doc_put(b, k, data, len);
}

static const bdb_sink_ops cass_ops = {
    .put = sink_put,
    .commit = sink_commit,
    .read = sink_read,
    .describe = sink_describe,
    .close = sink_close,
    /* tiers and fleet (cass_agg.c) */
    .tier_put = g_tier_put,
    .tier_read = cass_agg_tier_read,
    .fleet_put = g_fleet_put,
    .fleet_read = cass_agg_fleet_read,
    /* state, registry, counters (cass_state.c) */
    .state_put = g_state_put,
    .device_put = g_device_put,
    .count_put = g_count_put,
    .state_get = cass_state_get,
    .state_list = cass_state_list,
    .device_list = cass_device_list,
    .tenant_list = cass_tenant_list,
    .count_list = cass_count_list,
    /* late arrivals (cass_late.c) */
    .late_put = g_late_put,
    .late_list = cass_late_list,

    .drop_tenant = g_drop_tenant,
    .ack_begin = sink_ack_begin,
    .ack_put = sink_ack_put,
    .ack_end = sink_ack_end,
    /* named documents: the tenant registry (cass_doc.c) */
    .doc_put = g_doc_put,
    .doc_get = cass_doc_get,
};

/* tiers and fleet: cass_agg.c sends through this sink's session */
cql_session *cass_sink_session(bdb_sink *base, const char **ks, int *write_cl, int *read_cl)
{
    cass_sink *s = (cass_sink *)base;
    *ks = s->ks;
    *write_cl = s->write_cl;
    *read_cl = s->read_cl;
    return session(s);
}

void cass_sink_get_stats(bdb_sink *base, cass_sink_stats *st)
{
    cass_sink *s = (cass_sink *)base;
    memset(st, 0, sizeof *st);
    st->batches = atomic_load(&s->batches);
    st->rows = atomic_load(&s->rows);
    st->batch_failures = atomic_load(&s->batch_failures);
    st->expired_rows = atomic_load(&s->expired_rows);
    st->reads = atomic_load(&s->reads);
    st->read_failures = atomic_load(&s->read_failures);
    st->commits = atomic_load(&s->commits);
    st->commit_failures = atomic_load(&s->commit_failures);
    st->ack_rows = atomic_load(&s->ack_rows);
    st->ack_failures = atomic_load(&s->ack_failures);
    st->acks = atomic_load(&s->acks);
    st->ack_refusals = atomic_load(&s->ack_refusals);
    pthread_mutex_lock(&s->mu);
    st->inflight_batches = s->pending + s->ack_pending;
    pthread_mutex_unlock(&s->mu);
    cql_session_stats ss;
    memset(&ss, 0, sizeof ss);
    if (atomic_load(&s->sess))
        cql_session_get_stats(atomic_load(&s->sess), &ss);
    st->requests = ss.requests;
    st->retries = ss.retries;
    st->failures = ss.failures;
    st->reconnects = ss.reconnects;
    st->timeouts = ss.timeouts;
    st->attempt_errors = ss.attempt_errors;
    st->connect_failures = ss.connect_failures;
    st->nodes = ss.nodes;
    st->nodes_up = ss.nodes_up;
}

/* Renews the writer lease every CASS_OWNER_RENEW_S until the sink closes. */
static void *lease_main(void *arg)
{
    cass_sink *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += CASS_OWNER_RENEW_S;
        /* report_due: a reporter set while this thread was not waiting (starting, or
         * in a renewal) would have lost its wake-up and waited a whole period */
        if (!s->report_due)
            pthread_cond_timedwait(&s->cv_lease, &s->mu, &until);
        s->report_due = 0;
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->mu);
        cql_session *sess = atomic_load(&s->sess);
        cass_owner *o = atomic_load(&s->owner);
        if (sess && o) {
            char listen[sizeof s->listen];
            cass_owner_report rep = {.backlog_bytes = -1,
                                     .last_flush_ms = atomic_load(&s->last_flush_ms),
                                     .listen = listen};
            pthread_mutex_lock(&s->rep_mu);
            if (s->backlog)
                rep.backlog_bytes = (int64_t)s->backlog(s->backlog_ud);
            memcpy(listen, s->listen, sizeof listen);
            pthread_mutex_unlock(&s->rep_mu);
            cass_owner_renew(o, sess, &rep);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int cass_sink_open(const char *uri, const char *data_dir, bdb_sink **out, char *err, size_t errlen)
{
    *out = NULL;
    cass_uri u;
    int rc = cass_uri_parse(uri, &u, err, errlen);
    if (rc != BDB_OK)
        return rc;
    cass_sink *s = calloc(1, sizeof *s);
    if (!s)
        return BDB_ERR_NOMEM;
    s->base.ops = &cass_ops;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv_job, NULL);
    pthread_cond_init(&s->cv_space, NULL);
    pthread_cond_init(&s->cv_done, NULL);
    pthread_cond_init(&s->cv_lease, NULL);
    pthread_mutex_init(&s->rep_mu, NULL);
    if (data_dir && !(s->data_dir = strdup(data_dir)))
        abort();
    snprintf(s->ks, sizeof s->ks, "%s", u.ks);
    s->write_cl = u.write_cl;
    s->read_cl = u.read_cl;
    s->inflight = u.inflight;
    s->batch_rows = u.batch_rows;
    pthread_mutex_init(&s->conn_mu, NULL);
    s->u = malloc(sizeof *s->u);
    if (!s->u)
        abort();
    *s->u = u;
    rc = connect_now(s, err, errlen);
    if (rc == BDB_ERR_IO && u.offline_start) {
        /* The WAL and the head take writes meanwhile; flushes fail until it answers. */
        BDB_WARN("cassandra: %s; starting anyway (offline_start): flushes and reads of "
                 "flushed data fail until a node answers",
                 err);
        s->offline_logged = 1;
        s->next_try_ms = bdb_monotonic_ms() + 2000;
        snprintf(s->desc, sizeof s->desc, "cassandra://%.200s/%s (not connected yet)", u.hosts,
                 s->ks);
        rc = BDB_OK;
    }
    if (rc != BDB_OK) {
        sink_close(&s->base);
        return rc;
    }
    snprintf(s->insert_q, sizeof s->insert_q,
             "INSERT INTO %s.telemetry (tenant_id, device_id, bucket, sub_bucket, event_time, "
             "metric_name, metric_value) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?",
             s->ks);
    snprintf(s->select_q, sizeof s->select_q,
             "SELECT event_time, metric_name, metric_value FROM %s.telemetry WHERE tenant_id = ? "
             "AND device_id = ? AND bucket = ? AND sub_bucket = ? AND event_time >= ? AND "
             "event_time < ?",
             s->ks);
    s->nworkers = u.inflight;
    s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
    if (!s->workers)
        abort();
    for (int i = 0; i < s->nworkers; i++)
        if (pthread_create(&s->workers[i], NULL, worker, s) != 0)
            abort();
    if (data_dir) {
        if (pthread_create(&s->lease_th, NULL, lease_main, s) != 0)
            abort();
        s->lease_running = 1;
    }
    pthread_mutex_lock(&g_open_mu);
    if (!g_open)
        g_open = s;
    pthread_mutex_unlock(&g_open_mu);
    *out = &s->base;
    return BDB_OK;
}

int cass_sink_with_open(void (*fn)(bdb_sink *s, cql_session *sess, void *ud), void *ud)
{
    pthread_mutex_lock(&g_open_mu);
    cass_sink *s = g_open;
    if (s)
        fn(&s->base, atomic_load(&s->sess), ud);
    pthread_mutex_unlock(&g_open_mu);
    return s != NULL;
}

void cass_sink_set_reporter(bdb_sink *base, const char *listen, uint64_t (*backlog)(void *ud),
                            void *ud)
{
    cass_sink *s = (cass_sink *)base;
    pthread_mutex_lock(&s->rep_mu);
    s->backlog = backlog;
    s->backlog_ud = ud;
    snprintf(s->listen, sizeof s->listen, "%s", listen ? listen : "");
    pthread_mutex_unlock(&s->rep_mu);
    if (backlog) { /* publish now rather than at the next renewal */
        pthread_mutex_lock(&s->mu);
        s->report_due = 1;
        pthread_cond_broadcast(&s->cv_lease);
        pthread_mutex_unlock(&s->mu);
    }
}
