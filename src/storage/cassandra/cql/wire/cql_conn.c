/* cql_conn: see cql_conn.h. This file: the stream slots, the reader thread, opening
 * and closing, sending; the handshake is in cql_handshake.c, the statements (queries,
 * prepared statements, batches, paging) in cql_stmt.c, what they share in
 * cql_conn_int.h.
 *
 * Threads: the caller's threads send (under wmu, the write lock) and the reader thread
 * receives. `mu` guards the stream slots, the free-id stack, the prepared cache and
 * the broken/closing flags. Callbacks are always called with no lock held. Bytes go
 * through cql_io (TCP, or TLS whose own mutex lets the reader thread and the sender
 * holding wmu share one SSL).
 *
 * A request that times out keeps its stream id reserved ("orphaned") until its late
 * answer arrives, so that a late answer is never taken for the answer to a newer
 * request that reused the id.
 *
 * A request's completion may come (from the reader thread) while the sending thread
 * is still inside send() on its frame: the slot is then marked `writing` and the
 * completion is parked for the sender to deliver, so a frame is never freed under a
 * write in progress. */
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/wire/cql_conn_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cql_conn_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ================================================================ completion */

cql_response *cql_conn_client_error(int32_t code, const char *msg)
{
    cql_response *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->h.opcode = CQL_OP_ERROR;
    r->h.response = 1;
    r->error.code = code;
    r->error.message = strdup(msg);
    return r;
}

static int response_status(const cql_response *r)
{
    if (!r)
        return BDB_ERR_NOMEM;
    if (r->h.opcode == CQL_OP_ERROR)
        return cql_error_status(r->error.code);
    return BDB_OK;
}

static void free_slot_locked(cql_conn *c, int id)
{
    if (c->slots[id].state == SLOT_BUSY)
        c->busy--;
    c->slots[id].state = SLOT_FREE;
    c->slots[id].done = NULL;
    c->slots[id].writing = 0;
    c->slots[id].has_early = 0;
    c->slots[id].early = NULL;
    c->free_ids[c->nfree++] = (int16_t)id;
    pthread_cond_broadcast(&c->cv);
}

/* Completes every BUSY request with a synthesized error; orphans are just freed. */
static void fail_all(cql_conn *c, int32_t code, const char *msg)
{
    for (;;) {
        cql_done_fn done = NULL;
        void *ud = NULL;
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < c->nslots; i++) {
            slot *sl = &c->slots[i];
            if (sl->state == SLOT_ORPHANED) {
                free_slot_locked(c, i);
            } else if (sl->state == SLOT_BUSY && sl->writing) {
                if (!sl->has_early) { /* the sender delivers it */
                    sl->has_early = 1;
                    sl->early = cql_conn_client_error(code, msg);
                    sl->early_status = response_status(sl->early);
                }
            } else if (sl->state == SLOT_BUSY) {
                done = c->slots[i].done;
                ud = c->slots[i].ud;
                free_slot_locked(c, i);
                break;
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (!done)
            return;
        cql_response *r = cql_conn_client_error(code, msg);
        done(ud, response_status(r), r);
    }
}

static void mark_broken(cql_conn *c)
{
    pthread_mutex_lock(&c->mu);
    int was = c->broken;
    c->broken = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (!was)
        cql_io_shutdown(&c->io); /* wakes the reader thread */
}

static void check_timeouts(cql_conn *c, int64_t now)
{
    for (;;) {
        cql_done_fn done = NULL;
        void *ud = NULL;
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < c->nslots; i++) {
            slot *s = &c->slots[i];
            /* A slot still being written is bounded by the write's own deadline. */
            if (s->state == SLOT_BUSY && !s->writing && s->deadline <= now) {
                done = s->done;
                ud = s->ud;
                s->state = SLOT_ORPHANED;
                s->done = NULL;
                c->busy--;
                break;
            }
        }
        pthread_mutex_unlock(&c->mu);
        if (!done)
            return;
        char msg[96];
        snprintf(msg, sizeof msg, "no answer from the server within %d ms", c->request_timeout_ms);
        cql_response *r = cql_conn_client_error(CQL_ERR_CLIENT_TIMEOUT, msg);
        done(ud, response_status(r), r);
    }
}

static void dispatch(cql_conn *c, cql_response *r)
{
    int16_t id = r->h.stream;
    if (id < 0) {
        if (r->h.opcode == CQL_OP_EVENT && c->on_event)
            c->on_event(c->event_ud, &r->event);
        cql_response_free(r);
        return;
    }
    cql_done_fn done = NULL;
    void *ud = NULL;
    pthread_mutex_lock(&c->mu);
    if (id < c->nslots && c->slots[id].state == SLOT_BUSY && c->slots[id].writing) {
        slot *sl = &c->slots[id];
        if (!sl->has_early) { /* parked: the sender delivers it after its write */
            sl->has_early = 1;
            sl->early = r;
            sl->early_status = response_status(r);
            r = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        cql_response_free(r);
        return;
    }
    if (id < c->nslots && c->slots[id].state != SLOT_FREE) {
        if (c->slots[id].state == SLOT_BUSY) {
            done = c->slots[id].done;
            ud = c->slots[id].ud;
        }
        free_slot_locked(c, id);
    }
    pthread_mutex_unlock(&c->mu);
    if (done)
        done(ud, response_status(r), r);
    else
        cql_response_free(r); /* late answer to a timed-out request */
}

/* Decodes and dispatches every complete frame in rbuf. Returns BDB_OK or an error
 * that breaks the connection. */
static int drain_frames(cql_conn *c)
{
    size_t off = 0;
    int rc = BDB_OK;
    while (c->rbuf.len - off >= CQL_HEADER_LEN) {
        cql_header h;
        rc = cql_header_decode(c->rbuf.data + off, &h, c->max_frame);
        if (rc == BDB_OK && (!h.response || h.version != c->version))
            rc = BDB_ERR_CORRUPT;
        if (rc != BDB_OK) {
            BDB_WARN("cql: %s from the server (version byte 0x%02x, length %u): closing",
                     rc == BDB_ERR_LIMIT ? "frame over the size limit" : "malformed frame",
                     c->rbuf.data[off], cql_get_be32(c->rbuf.data + off + 5));
            break;
        }
        if (c->rbuf.len - off - CQL_HEADER_LEN < h.length)
            break;
        uint8_t *body = NULL;
        if (h.length) {
            body = malloc(h.length);
            if (!body) {
                rc = BDB_ERR_NOMEM;
                break;
            }
            memcpy(body, c->rbuf.data + off + CQL_HEADER_LEN, h.length);
        }
        off += CQL_HEADER_LEN + h.length;
        cql_response *r;
        int drc = cql_response_decode(&h, body, h.length, &r);
        if (drc != BDB_OK) {
            /* The frame boundary is intact, so only this request fails. */
            BDB_WARN("cql: undecodable %s on stream %d (%s)", cql_opcode_name(h.opcode), h.stream,
                     bdb_strerror(drc));
            r = cql_conn_client_error(CQL_ERR_CLIENT_IO, "undecodable response from the server");
            if (!r)
                continue;
            r->h.stream = h.stream;
            if (h.stream < 0) {
                cql_response_free(r);
                continue;
            }
            r->error.code = CQL_ERR_SERVER;
        }
        dispatch(c, r);
    }
    if (off) {
        memmove(c->rbuf.data, c->rbuf.data + off, c->rbuf.len - off);
        c->rbuf.len -= off;
    }
    return rc;
}

static void *reader_main(void *arg)
{
    cql_conn *c = arg;
    int64_t next_check = bdb_monotonic_ms() + 100;
    const char *why = "connection closed by the server";
    for (;;) {
        pthread_mutex_lock(&c->mu);
        int stop = c->closing || c->broken;
        pthread_mutex_unlock(&c->mu);
        if (stop) {
            why = "connection broken";
            break;
        }
        bdb_buf_reserve(&c->rbuf, 64 * 1024);
        ssize_t r =
            cql_io_read_some(&c->io, c->rbuf.data + c->rbuf.len, c->rbuf.cap - c->rbuf.len, 100);
        if (r < 0) {
            if (c->io.reason[0] && strcmp(c->io.reason, "connection closed by the node"))
                why = c->io.reason;
            break;
        }
        if (r > 0) {
            c->rbuf.len += (size_t)r;
            if (drain_frames(c) != BDB_OK) {
                why = "protocol violation by the server";
                break;
            }
        }
        int64_t now = bdb_monotonic_ms();
        if (now >= next_check) {
            check_timeouts(c, now);
            next_check = now + 100;
        }
    }
    pthread_mutex_lock(&c->mu);
    int closing = c->closing;
    c->broken = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (closing)
        fail_all(c, CQL_ERR_CLIENT_CLOSED, "connection closed");
    else
        fail_all(c, CQL_ERR_CLIENT_IO, why);
    return NULL;
}

/* ================================================================ open / close */

static void conn_free(cql_conn *c)
{
    if (!c)
        return;
    cql_prepared_free_all(c->prepared);
    cql_io_close(&c->io);
    free(c->slots);
    free(c->free_ids);
    free(c->cql_version);
    free(c->authenticator);
    bdb_buf_free(&c->rbuf);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->wmu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

int cql_conn_open(const cql_conn_opts *o, cql_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !o->host || !*o->host) {
        cql_conn_set_err(err, errlen, "no host given");
        return BDB_ERR_INVALID;
    }
    int port = o->port > 0 ? o->port : 9042;
    int ctimeout = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    int maxv = o->max_version ? o->max_version : CQL_VERSION_MAX;
    int minv = o->min_version ? o->min_version : CQL_VERSION_MIN;
    if (maxv > CQL_VERSION_MAX || minv < CQL_VERSION_MIN || minv > maxv) {
        cql_conn_set_err(err, errlen, "protocol versions %d..%d: this client speaks %d..%d", minv,
                         maxv, CQL_VERSION_MIN, CQL_VERSION_MAX);
        return BDB_ERR_INVALID;
    }
    cql_conn *c = calloc(1, sizeof *c);
    if (!c)
        return BDB_ERR_NOMEM;
    c->io.fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->wmu, NULL);
    pthread_cond_init(&c->cv, NULL);
    bdb_buf_init(&c->rbuf);
    c->request_timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 12000;
    c->max_frame = o->max_frame ? o->max_frame : CQL_FRAME_DEFAULT_MAX;
    if (c->max_frame > CQL_FRAME_LIMIT)
        c->max_frame = CQL_FRAME_LIMIT;
    c->on_event = o->on_event;
    c->event_ud = o->event_ud;
    c->nslots = o->max_in_flight > 0 ? o->max_in_flight : 1024;
    if (c->nslots > 32768)
        c->nslots = 32768;
    c->slots = calloc((size_t)c->nslots, sizeof *c->slots);
    c->free_ids = calloc((size_t)c->nslots, sizeof *c->free_ids);
    if (!c->slots || !c->free_ids) {
        conn_free(c);
        return BDB_ERR_NOMEM;
    }
    for (int i = 0; i < c->nslots; i++) /* pop order 0, 1, 2... */
        c->free_ids[i] = (int16_t)(c->nslots - 1 - i);
    c->nfree = c->nslots;

    int rc = cql_conn_handshake(c, o, port, ctimeout, minv, maxv, err, errlen);
    if (rc == BDB_OK) {
        if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
            cql_conn_set_err(err, errlen, "cannot start the reader thread");
            rc = BDB_ERR_NOMEM;
        } else {
            c->reader_started = 1;
        }
    }
    if (rc != BDB_OK) {
        conn_free(c);
        return rc;
    }
    if (!c->cql_version)
        c->cql_version = strdup("");
    if (!c->authenticator)
        c->authenticator = strdup("");
    *out = c;
    return BDB_OK;
}

void cql_conn_close(cql_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->closing = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    cql_io_shutdown(&c->io);
    if (c->reader_started)
        pthread_join(c->reader, NULL);
    fail_all(c, CQL_ERR_CLIENT_CLOSED, "connection closed");
    conn_free(c);
}

int cql_conn_version(const cql_conn *c)
{
    return c->version;
}

const char *cql_conn_cql_version(const cql_conn *c)
{
    return c->cql_version ? c->cql_version : "";
}

const char *cql_conn_authenticator(const cql_conn *c)
{
    return c->authenticator ? c->authenticator : "";
}

int cql_conn_usable(cql_conn *c)
{
    pthread_mutex_lock(&c->mu);
    int ok = !c->broken && !c->closing;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

int cql_conn_in_flight(cql_conn *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->busy;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* ================================================================ requests */

/* wait_ms > 0: wait that long for a free stream id. */
static int send_frame(cql_conn *c, bdb_buf *frame, cql_done_fn done, void *ud, int wait_ms)
{
    if (frame->len < CQL_HEADER_LEN)
        return BDB_ERR_INVALID;
    int64_t now = bdb_monotonic_ms();
    int64_t deadline = now + c->request_timeout_ms;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->closing) {
            pthread_mutex_unlock(&c->mu);
            return BDB_ERR_SHUTDOWN;
        }
        if (c->broken) {
            pthread_mutex_unlock(&c->mu);
            return BDB_ERR_IO;
        }
        if (c->nfree > 0)
            break;
        int64_t left = now + wait_ms - bdb_monotonic_ms();
        if (left <= 0) {
            pthread_mutex_unlock(&c->mu);
            return BDB_ERR_AGAIN;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t step = left > 100 ? 100 : left;
        ts.tv_nsec += (long)(step * 1000000);
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    int id = c->free_ids[--c->nfree];
    c->slots[id] =
        (slot){.done = done, .ud = ud, .deadline = deadline, .state = SLOT_BUSY, .writing = 1};
    c->busy++;
    pthread_mutex_unlock(&c->mu);

    frame->data[0] = c->version; /* request direction */
    cql_frame_set_stream(frame->data, (int16_t)id);
    pthread_mutex_lock(&c->wmu);
    int rc = cql_io_write_all(&c->io, frame->data, frame->len, deadline);
    pthread_mutex_unlock(&c->wmu);
    if (rc != BDB_OK) {
        /* A partial frame leaves the stream unusable: break the connection; the
         * reader thread completes this request with the others. */
        BDB_WARN("cql: write to %s failed (%s%s%s): closing the connection", c->io.peer,
                 bdb_strerror(rc), c->io.wreason[0] ? ": " : "", c->io.wreason);
        mark_broken(c);
    }
    /* The frame is no longer read: deliver a completion that came meanwhile. */
    pthread_mutex_lock(&c->mu);
    slot *sl = &c->slots[id];
    sl->writing = 0;
    cql_done_fn edone = NULL;
    void *eud = NULL;
    cql_response *early = NULL;
    int estatus = BDB_OK;
    if (sl->has_early) {
        edone = sl->done;
        eud = sl->ud;
        early = sl->early;
        estatus = sl->early_status;
        free_slot_locked(c, id);
    }
    pthread_mutex_unlock(&c->mu);
    if (edone)
        edone(eud, estatus, early);
    return BDB_OK;
}

int cql_conn_send(cql_conn *c, bdb_buf *frame, cql_done_fn done, void *ud)
{
    return send_frame(c, frame, done, ud, 0);
}

void cql_sync_done(void *ud, int status, cql_response *resp)
{
    cql_sync *w = ud;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->resp = resp;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int cql_sync_wait(cql_sync *w, int rc, cql_response **out)
{
    if (rc == BDB_OK) {
        pthread_mutex_lock(&w->mu);
        while (!w->done) /* the reader thread always completes (timeouts included) */
            pthread_cond_wait(&w->cv, &w->mu);
        pthread_mutex_unlock(&w->mu);
        rc = w->status;
        if (out)
            *out = w->resp;
        else
            cql_response_free(w->resp);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    return rc;
}

void cql_sync_init(cql_sync *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

int cql_conn_request(cql_conn *c, bdb_buf *frame, cql_response **out)
{
    if (out)
        *out = NULL;
    cql_sync w;
    cql_sync_init(&w);
    int rc = send_frame(c, frame, cql_sync_done, &w, c->request_timeout_ms);
    return cql_sync_wait(&w, rc, out);
}

int cql_conn_register(cql_conn *c, const char *const *events, uint16_t n)
{
    bdb_buf f;
    bdb_buf_init(&f);
    cql_msg_register(&f, c->version, events, n);
    cql_response *r = NULL;
    int rc = cql_conn_request(c, &f, &r);
    if (rc == BDB_OK && r->h.opcode != CQL_OP_READY)
        rc = BDB_ERR_CORRUPT;
    cql_response_free(r);
    bdb_buf_free(&f);
    return rc;
}
