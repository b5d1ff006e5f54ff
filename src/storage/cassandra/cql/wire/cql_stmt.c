/* cql_stmt: the statements of a CQL connection (cql_conn.h): simple queries,
 * prepared statements cached per connection, EXECUTE and BATCH re-sent once after an
 * UNPREPARED answer (the node restarted or evicted the statement), paged queries. */
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/wire/cql_conn_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cql_prepared {
    struct cql_prepared *next;
    char *query;
    uint8_t *id; /* guarded by the connection's mu (re-prepare replaces it) */
    uint16_t id_len;
    cql_response *resp; /* the PREPARED result, owner of the metadata */
};

void cql_prepared_free_all(cql_prepared *p)
{
    while (p) {
        cql_prepared *next = p->next;
        free(p->query);
        free(p->id);
        cql_response_free(p->resp);
        free(p);
        p = next;
    }
}

/* ================================================================ queries */

int cql_query(cql_conn *c, const char *query, const cql_query_params *p, cql_response **out)
{
    cql_query_params dflt = {.consistency = CQL_ONE};
    bdb_buf f;
    bdb_buf_init(&f);
    cql_msg_query(&f, c->version, query, strlen(query), p ? p : &dflt);
    int rc = cql_conn_request(c, &f, out);
    bdb_buf_free(&f);
    return rc;
}

int cql_query_async(cql_conn *c, const char *query, const cql_query_params *p, cql_done_fn done,
                    void *ud)
{
    cql_query_params dflt = {.consistency = CQL_ONE};
    bdb_buf f;
    bdb_buf_init(&f);
    cql_msg_query(&f, c->version, query, strlen(query), p ? p : &dflt);
    int rc = cql_conn_send(c, &f, done, ud);
    bdb_buf_free(&f);
    return rc;
}

/* ================================================================ prepared */

const cql_meta *cql_prepared_binds(const cql_prepared *p)
{
    return &p->resp->result.meta;
}

const cql_meta *cql_prepared_result(const cql_prepared *p)
{
    return &p->resp->result.result_meta;
}

const char *cql_prepared_query(const cql_prepared *p)
{
    return p->query;
}

/* Stores a (re-)prepared id; the statement keeps its first metadata. */
static int set_prepared_id(cql_conn *c, cql_prepared *p, cql_bytes id)
{
    uint8_t *copy = malloc(id.len > 0 ? (size_t)id.len : 1);
    if (!copy)
        return BDB_ERR_NOMEM;
    memcpy(copy, id.p, (size_t)id.len);
    pthread_mutex_lock(&c->mu);
    free(p->id);
    p->id = copy;
    p->id_len = (uint16_t)id.len;
    pthread_mutex_unlock(&c->mu);
    return BDB_OK;
}

int cql_prepare(cql_conn *c, const char *query, cql_prepared **out, cql_response **err_out)
{
    *out = NULL;
    if (err_out)
        *err_out = NULL;
    pthread_mutex_lock(&c->mu);
    for (cql_prepared *p = c->prepared; p; p = p->next)
        if (!strcmp(p->query, query)) {
            pthread_mutex_unlock(&c->mu);
            *out = p;
            return BDB_OK;
        }
    pthread_mutex_unlock(&c->mu);

    bdb_buf f;
    bdb_buf_init(&f);
    cql_msg_prepare(&f, c->version, query, strlen(query));
    cql_response *r = NULL;
    int rc = cql_conn_request(c, &f, &r);
    bdb_buf_free(&f);
    if (rc == BDB_OK && (r->h.opcode != CQL_OP_RESULT || r->result.kind != CQL_RESULT_PREPARED))
        rc = BDB_ERR_CORRUPT;
    if (rc != BDB_OK) {
        if (err_out && r && r->h.opcode == CQL_OP_ERROR)
            *err_out = r;
        else
            cql_response_free(r);
        return rc;
    }
    cql_prepared *p = calloc(1, sizeof *p);
    if (!p || !(p->query = strdup(query))) {
        free(p);
        cql_response_free(r);
        return BDB_ERR_NOMEM;
    }
    p->resp = r;
    rc = set_prepared_id(c, p, r->result.prepared_id);
    if (rc != BDB_OK) {
        free(p->query);
        free(p);
        cql_response_free(r);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    /* Another thread may have prepared the same text meanwhile: keep the first. */
    for (cql_prepared *q = c->prepared; q; q = q->next)
        if (!strcmp(q->query, query)) {
            pthread_mutex_unlock(&c->mu);
            free(p->query);
            free(p->id);
            cql_response_free(p->resp);
            free(p);
            *out = q;
            return BDB_OK;
        }
    p->next = c->prepared;
    c->prepared = p;
    pthread_mutex_unlock(&c->mu);
    *out = p;
    return BDB_OK;
}

/* A request that refers to prepared statements, kept until it completes so that it
 * can be re-sent after an UNPREPARED answer. The ids sit at known offsets in the
 * frame and are patched in place (a node's ids for one text have one length: an
 * MD5); a different length fails the request with the server's error. */
typedef struct exec_ctx {
    cql_conn *c;
    bdb_buf frame;
    cql_prepared **stmts;
    size_t *id_off;
    uint16_t nstmts;
    uint16_t reprepared;      /* re-prepares done, at most one per statement */
    cql_prepared *pending;    /* the statement being re-prepared */
    cql_response *unprepared; /* the UNPREPARED answer, returned if re-preparing fails */
    cql_done_fn done;
    void *ud;
} exec_ctx;

static void exec_ctx_finish(exec_ctx *x, int status, cql_response *resp)
{
    cql_done_fn done = x->done;
    void *ud = x->ud;
    cql_response_free(x->unprepared);
    bdb_buf_free(&x->frame);
    free(x->stmts);
    free(x->id_off);
    free(x);
    done(ud, status, resp);
}

static void exec_done(void *ud, int status, cql_response *resp);

static void reprepare_done(void *ud, int status, cql_response *resp)
{
    exec_ctx *x = ud;
    cql_response *unprep = x->unprepared;
    x->unprepared = NULL;
    if (status == BDB_OK && resp->h.opcode == CQL_OP_RESULT &&
        resp->result.kind == CQL_RESULT_PREPARED &&
        resp->result.prepared_id.len == x->pending->id_len &&
        set_prepared_id(x->c, x->pending, resp->result.prepared_id) == BDB_OK) {
        for (uint16_t i = 0; i < x->nstmts; i++)
            if (x->stmts[i] == x->pending)
                memcpy(x->frame.data + x->id_off[i], resp->result.prepared_id.p,
                       (size_t)resp->result.prepared_id.len);
        cql_response_free(resp);
        cql_response_free(unprep);
        int rc = cql_conn_send(x->c, &x->frame, exec_done, x);
        if (rc != BDB_OK) {
            cql_response *r =
                cql_conn_client_error(CQL_ERR_CLIENT_IO, "cannot re-send after re-preparing");
            exec_ctx_finish(x, rc, r);
        }
        return;
    }
    /* Re-preparing failed: the caller gets that error (or the UNPREPARED one). */
    if (status != BDB_OK) {
        cql_response_free(unprep);
        exec_ctx_finish(x, status, resp);
    } else {
        cql_response_free(resp);
        exec_ctx_finish(x, cql_error_status(CQL_ERR_UNPREPARED), unprep);
    }
}

static void exec_done(void *ud, int status, cql_response *resp)
{
    exec_ctx *x = ud;
    if (resp && resp->h.opcode == CQL_OP_ERROR && resp->error.code == CQL_ERR_UNPREPARED &&
        x->reprepared < x->nstmts) {
        /* Which statement? The one whose id the server names, else the first. */
        cql_prepared *p = NULL;
        cql_bytes bad = resp->error.unprepared_id;
        pthread_mutex_lock(&x->c->mu);
        for (uint16_t i = 0; i < x->nstmts && !p; i++)
            if (bad.len == x->stmts[i]->id_len &&
                !memcmp(x->frame.data + x->id_off[i], bad.p, (size_t)bad.len))
                p = x->stmts[i];
        pthread_mutex_unlock(&x->c->mu);
        if (!p && x->nstmts)
            p = x->stmts[0];
        if (p) {
            x->reprepared++;
            x->pending = p;
            x->unprepared = resp;
            BDB_DEBUG("cql: re-preparing after UNPREPARED: %s", p->query);
            bdb_buf f;
            bdb_buf_init(&f);
            cql_msg_prepare(&f, x->c->version, p->query, strlen(p->query));
            int rc = cql_conn_send(x->c, &f, reprepare_done, x);
            bdb_buf_free(&f);
            if (rc == BDB_OK)
                return;
            x->unprepared = NULL;
        }
    }
    exec_ctx_finish(x, status, resp);
}

static exec_ctx *exec_ctx_new(cql_conn *c, uint16_t nstmts, cql_done_fn done, void *ud)
{
    exec_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->stmts = calloc(nstmts ? nstmts : 1, sizeof *x->stmts);
    x->id_off = calloc(nstmts ? nstmts : 1, sizeof *x->id_off);
    if (!x->stmts || !x->id_off) {
        free(x->stmts);
        free(x->id_off);
        free(x);
        return NULL;
    }
    bdb_buf_init(&x->frame);
    x->c = c;
    x->done = done;
    x->ud = ud;
    return x;
}

static void exec_ctx_abort(exec_ctx *x)
{
    bdb_buf_free(&x->frame);
    free(x->stmts);
    free(x->id_off);
    free(x);
}

int cql_execute_async(cql_conn *c, cql_prepared *p, const cql_query_params *params,
                      cql_done_fn done, void *ud)
{
    cql_query_params dflt = {.consistency = CQL_ONE};
    exec_ctx *x = exec_ctx_new(c, 1, done, ud);
    if (!x)
        return BDB_ERR_NOMEM;
    x->nstmts = 1;
    x->stmts[0] = p;
    x->id_off[0] = CQL_HEADER_LEN + 2;
    pthread_mutex_lock(&c->mu);
    cql_msg_execute(&x->frame, c->version, p->id, p->id_len, params ? params : &dflt);
    pthread_mutex_unlock(&c->mu);
    int rc = cql_conn_send(c, &x->frame, exec_done, x);
    if (rc != BDB_OK)
        exec_ctx_abort(x);
    return rc;
}

int cql_execute(cql_conn *c, cql_prepared *p, const cql_query_params *params, cql_response **out)
{
    if (out)
        *out = NULL;
    cql_sync w;
    cql_sync_init(&w);
    /* Wait for a stream id like cql_conn_request does. */
    int64_t deadline = bdb_monotonic_ms() + c->request_timeout_ms;
    int rc;
    while ((rc = cql_execute_async(c, p, params, cql_sync_done, &w)) == BDB_ERR_AGAIN &&
           bdb_monotonic_ms() < deadline)
        usleep(1000);
    return cql_sync_wait(&w, rc, out);
}

/* Encodes a BATCH, recording where each prepared id lands in the frame. */
static int batch_encode(exec_ctx *x, uint8_t type, const cql_batch_item *items, uint16_t n,
                        uint16_t consistency)
{
    cql_conn *c = x->c;
    bdb_buf *b = &x->frame;
    cql_batch_stmt *st = calloc(n ? n : 1, sizeof *st);
    if (!st)
        return BDB_ERR_NOMEM;
    pthread_mutex_lock(&c->mu);
    for (uint16_t i = 0; i < n; i++) {
        if (items[i].stmt) {
            st[i].id = items[i].stmt->id;
            st[i].id_len = items[i].stmt->id_len;
            x->stmts[x->nstmts] = items[i].stmt;
            x->nstmts++;
        } else {
            st[i].query = items[i].query ? items[i].query : "";
            st[i].query_len = strlen(st[i].query);
        }
        st[i].values = items[i].values;
        st[i].nvalues = items[i].nvalues;
    }
    cql_msg_batch(b, c->version, type, st, n, consistency, 0, 0);
    pthread_mutex_unlock(&c->mu);
    free(st);
    /* Walk the encoded body to find the id offsets: type(1) n(2), then per item
     * kind(1) and either [long string] or [short bytes], then [short] + values. */
    bdb_dec d;
    bdb_dec_init(&d, b->data + CQL_HEADER_LEN, b->len - CQL_HEADER_LEN);
    cql_get_u8(&d);
    cql_get_short(&d);
    uint16_t k = 0;
    for (uint16_t i = 0; i < n; i++) {
        uint8_t kind = cql_get_u8(&d);
        if (kind == 1) {
            x->id_off[k++] = (size_t)(d.p - b->data) + 2;
            uint16_t l;
            cql_get_short_bytes(&d, &l);
        } else {
            size_t l;
            cql_get_long_string(&d, &l);
        }
        uint16_t nv = cql_get_short(&d);
        for (uint16_t j = 0; j < nv; j++)
            cql_get_bytes(&d);
    }
    return d.err ? BDB_ERR_CORRUPT : BDB_OK;
}

int cql_batch_async(cql_conn *c, uint8_t type, const cql_batch_item *items, uint16_t n,
                    uint16_t consistency, cql_done_fn done, void *ud)
{
    exec_ctx *x = exec_ctx_new(c, n, done, ud);
    if (!x)
        return BDB_ERR_NOMEM;
    int rc = batch_encode(x, type, items, n, consistency);
    if (rc == BDB_OK)
        rc = cql_conn_send(c, &x->frame, exec_done, x);
    if (rc != BDB_OK)
        exec_ctx_abort(x);
    return rc;
}

int cql_batch(cql_conn *c, uint8_t type, const cql_batch_item *items, uint16_t n,
              uint16_t consistency, cql_response **out)
{
    if (out)
        *out = NULL;
    cql_sync w;
    cql_sync_init(&w);
    int64_t deadline = bdb_monotonic_ms() + c->request_timeout_ms;
    int rc;
    while ((rc = cql_batch_async(c, type, items, n, consistency, cql_sync_done, &w)) ==
               BDB_ERR_AGAIN &&
           bdb_monotonic_ms() < deadline)
        usleep(1000);
    return cql_sync_wait(&w, rc, out);
}

/* ================================================================ paging */

int cql_query_paged(cql_conn *c, const char *query, cql_prepared *p, const cql_query_params *params,
                    cql_page_fn page_fn, void *ud, cql_response **err_out)
{
    if (err_out)
        *err_out = NULL;
    cql_query_params qp = params ? *params : (cql_query_params){.consistency = CQL_ONE};
    if (qp.page_size <= 0)
        qp.page_size = 5000;
    qp.paging_state = (cql_bytes){NULL, 0};
    uint8_t *state = NULL;
    int rc = BDB_OK;
    /* Bounded: every page is a round trip that moves the paging state forward. */
    for (long page = 0; page < 10000000L; page++) {
        cql_response *r = NULL;
        rc = p ? cql_execute(c, p, &qp, &r) : cql_query(c, query, &qp, &r);
        if (rc != BDB_OK) {
            if (err_out)
                *err_out = r;
            else
                cql_response_free(r);
            break;
        }
        int stop = page_fn(ud, r);
        const cql_meta *m = &r->result.meta;
        int more = r->h.opcode == CQL_OP_RESULT && r->result.kind == CQL_RESULT_ROWS &&
                   (m->flags & CQL_META_HAS_MORE_PAGES) && m->paging_state.len > 0;
        if (more && !stop) {
            uint8_t *ns = malloc((size_t)m->paging_state.len);
            if (!ns) {
                cql_response_free(r);
                rc = BDB_ERR_NOMEM;
                break;
            }
            memcpy(ns, m->paging_state.p, (size_t)m->paging_state.len);
            free(state);
            state = ns;
            qp.paging_state = (cql_bytes){state, m->paging_state.len};
        }
        cql_response_free(r);
        if (!more || stop)
            break;
    }
    free(state);
    return rc;
}
