/* cql_conn: see cql_conn.h.
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
#include "storage/cassandra/cql_conn.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum slot_state { SLOT_FREE, SLOT_BUSY, SLOT_ORPHANED };

/* While `writing`, the sending thread may still be reading the request frame (which
 * the request's owner frees when it completes), so a completion that arrives then is
 * parked in `early` and delivered by the sender once its write has returned. */
typedef struct slot {
    cql_done_fn done;
    void *ud;
    int64_t deadline;
    uint8_t state;
    uint8_t writing;
    uint8_t has_early;
    int early_status;
    cql_response *early;
} slot;

struct cql_prepared {
    struct cql_prepared *next;
    char *query;
    uint8_t *id; /* guarded by the connection's mu (re-prepare replaces it) */
    uint16_t id_len;
    cql_response *resp; /* the PREPARED result, owner of the metadata */
};

struct cql_conn {
    cql_io io;
    uint8_t version;
    int request_timeout_ms;
    uint32_t max_frame;
    char *cql_version;
    char *authenticator;
    cql_event_fn on_event;
    void *event_ud;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* a stream id was freed */
    pthread_mutex_t wmu;
    slot *slots;
    int nslots;
    int16_t *free_ids;
    int nfree;
    int busy; /* BUSY slots (orphans not counted) */
    int broken;
    int closing;
    cql_prepared *prepared;

    pthread_t reader;
    int reader_started;
    bdb_buf rbuf;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ================================================================ handshake I/O */

/* One request and its answer on a fresh socket, before the reader thread runs. A
 * response in another protocol version is decoded all the same (the caller uses
 * its version to negotiate). */
static int hs_roundtrip(cql_io *io, bdb_buf *frame, int timeout_ms, uint32_t max_frame,
                        cql_response **out)
{
    *out = NULL;
    int64_t deadline = bdb_monotonic_ms() + timeout_ms;
    int rc = cql_io_write_all(io, frame->data, frame->len, deadline);
    if (rc != BDB_OK)
        return rc;
    uint8_t hb[CQL_HEADER_LEN];
    rc = cql_io_read_all(io, hb, sizeof hb, deadline);
    if (rc != BDB_OK)
        return rc;
    cql_header h;
    rc = cql_header_decode(hb, &h, max_frame);
    if (rc != BDB_OK || !h.response)
        return BDB_ERR_CORRUPT;
    uint8_t *body = h.length ? malloc(h.length) : NULL;
    if (h.length && !body)
        return BDB_ERR_NOMEM;
    rc = cql_io_read_all(io, body, h.length, deadline);
    if (rc != BDB_OK) {
        free(body);
        return rc;
    }
    return cql_response_decode(&h, body, h.length, out);
}

/* ================================================================ completion */

static cql_response *client_error(int32_t code, const char *msg)
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
                    sl->early = client_error(code, msg);
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
        cql_response *r = client_error(code, msg);
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
        cql_response *r = client_error(CQL_ERR_CLIENT_TIMEOUT, msg);
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
            r = client_error(CQL_ERR_CLIENT_IO, "undecodable response from the server");
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
    cql_prepared *p = c->prepared;
    while (p) {
        cql_prepared *next = p->next;
        free(p->query);
        free(p->id);
        cql_response_free(p->resp);
        free(p);
        p = next;
    }
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

/* Whether a handshake request failed on a TLS error (an alert, a bad record) rather
 * than on the connection just closing. */
static int tls_failure(const cql_io *io)
{
    const char *closed = "connection closed by the node";
    return (io->reason[0] && strcmp(io->reason, closed)) ||
           (io->wreason[0] && strcmp(io->wreason, closed));
}

/* Whether an answer to our first request says "not this protocol version". */
static int version_rejected(const cql_response *r, uint8_t asked)
{
    if (r->h.version != asked)
        return 1;
    if (r->h.opcode != CQL_OP_ERROR)
        return 0;
    if (r->error.code == CQL_ERR_PROTOCOL)
        return 1;
    return r->error.message && strstr(r->error.message, "protocol version") != NULL;
}

/* STARTUP and authentication on a socket whose version is settled. */
static int startup(cql_conn *c, const cql_conn_opts *o, int timeout_ms, char *err, size_t errlen)
{
    bdb_buf f, tok;
    bdb_buf_init(&f);
    bdb_buf_init(&tok);
    cql_response *r = NULL;
    cql_msg_startup(&f, c->version, NULL);
    int rc = hs_roundtrip(&c->io, &f, timeout_ms, c->max_frame, &r);
    if (rc != BDB_OK) {
        set_err(err, errlen, "STARTUP failed: %s", bdb_strerror(rc));
        goto out;
    }
    if (r->h.opcode == CQL_OP_AUTHENTICATE) {
        c->authenticator = strdup(r->authenticator ? r->authenticator : "");
        if (!o->user || !o->password) {
            set_err(err, errlen,
                    "the server requires authentication (%s): give a user and password",
                    c->authenticator);
            rc = BDB_ERR_INVALID;
            goto out;
        }
        cql_sasl_plain(&tok, o->user, o->password);
        /* PLAIN is one step; a bounded number of challenges covers other servers. */
        for (int step = 0;; step++) {
            cql_response_free(r);
            r = NULL;
            bdb_buf_reset(&f);
            cql_msg_auth_response(&f, c->version, tok.data, (int32_t)tok.len);
            rc = hs_roundtrip(&c->io, &f, timeout_ms, c->max_frame, &r);
            if (rc != BDB_OK) {
                set_err(err, errlen, "authentication failed: %s", bdb_strerror(rc));
                goto out;
            }
            if (r->h.opcode == CQL_OP_AUTH_SUCCESS)
                break;
            if (r->h.opcode != CQL_OP_AUTH_CHALLENGE || step >= 4)
                break;
        }
    }
    if (r->h.opcode == CQL_OP_ERROR) {
        set_err(err, errlen, "%s: %s", cql_error_name(r->error.code),
                r->error.message ? r->error.message : "");
        rc = r->error.code == CQL_ERR_BAD_CREDENTIALS ? BDB_ERR_INVALID
                                                      : cql_error_status(r->error.code);
    } else if (r->h.opcode != CQL_OP_READY && r->h.opcode != CQL_OP_AUTH_SUCCESS) {
        set_err(err, errlen, "unexpected %s during the handshake", cql_opcode_name(r->h.opcode));
        rc = BDB_ERR_CORRUPT;
    }
out:
    cql_response_free(r);
    bdb_buf_free(&f);
    bdb_buf_free(&tok);
    return rc;
}

int cql_conn_open(const cql_conn_opts *o, cql_conn **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!o || !o->host || !*o->host) {
        set_err(err, errlen, "no host given");
        return BDB_ERR_INVALID;
    }
    int port = o->port > 0 ? o->port : 9042;
    int ctimeout = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
    int maxv = o->max_version ? o->max_version : CQL_VERSION_MAX;
    int minv = o->min_version ? o->min_version : CQL_VERSION_MIN;
    if (maxv > CQL_VERSION_MAX || minv < CQL_VERSION_MIN || minv > maxv) {
        set_err(err, errlen, "protocol versions %d..%d: this client speaks %d..%d", minv, maxv,
                CQL_VERSION_MIN, CQL_VERSION_MAX);
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

    /* Version negotiation: OPTIONS at the highest version, lower on rejection. */
    int rc = BDB_ERR_INVALID;
    bdb_buf f;
    bdb_buf_init(&f);
    int v = maxv;
    while (v >= minv) {
        rc = cql_io_connect(&c->io, o->host, port, o->tls, ctimeout, err, errlen);
        if (rc != BDB_OK)
            break;
        cql_response *r = NULL;
        bdb_buf_reset(&f);
        cql_msg_options(&f, (uint8_t)v);
        rc = hs_roundtrip(&c->io, &f, ctimeout, c->max_frame, &r);
        int next = v - 1;
        if (rc == BDB_OK && !version_rejected(r, (uint8_t)v)) {
            if (r->h.opcode == CQL_OP_SUPPORTED) {
                for (uint16_t i = 0; i < r->nsup; i++)
                    if (!strcmp(r->sup_keys[i], "CQL_VERSION") && r->sup_nvals[i] > 0 &&
                        !c->cql_version)
                        c->cql_version = strdup(r->sup_vals[i][0]);
                cql_response_free(r);
                c->version = (uint8_t)v;
                break;
            }
            set_err(err, errlen, "OPTIONS answered with %s%s%s", cql_opcode_name(r->h.opcode),
                    r->error.message ? ": " : "", r->error.message ? r->error.message : "");
            cql_response_free(r);
            rc = BDB_ERR_CORRUPT;
            break;
        }
        if (rc == BDB_OK) {
            BDB_DEBUG("cql: %s:%d rejected protocol v%d (answered in v%d)", o->host, port, v,
                      r->h.version);
            if (r->h.version < v && r->h.version >= minv)
                next = r->h.version;
        } else if (rc == BDB_ERR_AGAIN || rc == BDB_ERR_NOMEM) {
            set_err(err, errlen, "no answer to OPTIONS from %s:%d within %d ms", o->host, port,
                    ctimeout);
            break;
        } else if (rc == BDB_ERR_IO && o->tls && tls_failure(&c->io)) {
            /* A TLS alert after the handshake (TLS 1.3 sends a refused client
             * certificate's alert then): no other version will fare better. */
            set_err(err, errlen,
                    "TLS connection to %s:%d refused after the handshake: %s (a node with "
                    "require_client_auth drops a client without a certificate it trusts)",
                    o->host, port, c->io.reason[0] ? c->io.reason : c->io.wreason);
            cql_response_free(r);
            break;
        }
        /* Closed, undecodable or rejected: the server does not speak v. */
        cql_response_free(r);
        cql_io_close(&c->io);
        rc = BDB_ERR_INVALID;
        set_err(err, errlen, "%s:%d speaks none of protocol versions %d..%d%s", o->host, port, minv,
                maxv,
                o->tls ? " (it closed the TLS connection: does it want a client certificate?)"
                       : " (or it speaks TLS only: see --tls)");
        v = next;
    }
    bdb_buf_free(&f);
    if (rc == BDB_OK)
        rc = startup(c, o, ctimeout, err, errlen);
    if (rc == BDB_OK) {
        if (pthread_create(&c->reader, NULL, reader_main, c) != 0) {
            set_err(err, errlen, "cannot start the reader thread");
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

typedef struct sync_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int status;
    cql_response *resp;
} sync_wait;

static void sync_done(void *ud, int status, cql_response *resp)
{
    sync_wait *w = ud;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->resp = resp;
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int sync_wait_for(sync_wait *w, int rc, cql_response **out)
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

static void sync_init(sync_wait *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
}

int cql_conn_request(cql_conn *c, bdb_buf *frame, cql_response **out)
{
    if (out)
        *out = NULL;
    sync_wait w;
    sync_init(&w);
    int rc = send_frame(c, frame, sync_done, &w, c->request_timeout_ms);
    return sync_wait_for(&w, rc, out);
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
            cql_response *r = client_error(CQL_ERR_CLIENT_IO, "cannot re-send after re-preparing");
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
    sync_wait w;
    sync_init(&w);
    /* Wait for a stream id like cql_conn_request does. */
    int64_t deadline = bdb_monotonic_ms() + c->request_timeout_ms;
    int rc;
    while ((rc = cql_execute_async(c, p, params, sync_done, &w)) == BDB_ERR_AGAIN &&
           bdb_monotonic_ms() < deadline)
        usleep(1000);
    return sync_wait_for(&w, rc, out);
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
    sync_wait w;
    sync_init(&w);
    int64_t deadline = bdb_monotonic_ms() + c->request_timeout_ms;
    int rc;
    while ((rc = cql_batch_async(c, type, items, n, consistency, sync_done, &w)) == BDB_ERR_AGAIN &&
           bdb_monotonic_ms() < deadline)
        usleep(1000);
    return sync_wait_for(&w, rc, out);
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
