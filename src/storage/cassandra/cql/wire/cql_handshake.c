/* cql_handshake: opening a CQL connection (cql_conn.h): the protocol version settled
 * with OPTIONS (the highest the node accepts, lower on rejection, a fresh socket each
 * try), then STARTUP and SASL PLAIN authentication. Runs on the opening thread before
 * the reader thread starts, so every request here is one blocking round trip. */
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/wire/cql_conn_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <stdlib.h>
#include <string.h>

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
        cql_conn_set_err(err, errlen, "STARTUP failed: %s", bdb_strerror(rc));
        goto out;
    }
    if (r->h.opcode == CQL_OP_AUTHENTICATE) {
        c->authenticator = strdup(r->authenticator ? r->authenticator : "");
        if (!o->user || !o->password) {
            cql_conn_set_err(err, errlen,
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
                cql_conn_set_err(err, errlen, "authentication failed: %s", bdb_strerror(rc));
                goto out;
            }
            if (r->h.opcode == CQL_OP_AUTH_SUCCESS)
                break;
            if (r->h.opcode != CQL_OP_AUTH_CHALLENGE || step >= 4)
                break;
        }
    }
    if (r->h.opcode == CQL_OP_ERROR) {
        cql_conn_set_err(err, errlen, "%s: %s", cql_error_name(r->error.code),
                         r->error.message ? r->error.message : "");
        rc = r->error.code == CQL_ERR_BAD_CREDENTIALS ? BDB_ERR_INVALID
                                                      : cql_error_status(r->error.code);
    } else if (r->h.opcode != CQL_OP_READY && r->h.opcode != CQL_OP_AUTH_SUCCESS) {
        cql_conn_set_err(err, errlen, "unexpected %s during the handshake",
                         cql_opcode_name(r->h.opcode));
        rc = BDB_ERR_CORRUPT;
    }
out:
    cql_response_free(r);
    bdb_buf_free(&f);
    bdb_buf_free(&tok);
    return rc;
}

int cql_conn_handshake(cql_conn *c, const cql_conn_opts *o, int port, int ctimeout, int minv,
                       int maxv, char *err, size_t errlen)
{
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
            cql_conn_set_err(err, errlen, "OPTIONS answered with %s%s%s",
                             cql_opcode_name(r->h.opcode), r->error.message ? ": " : "",
                             r->error.message ? r->error.message : "");
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
            cql_conn_set_err(err, errlen, "no answer to OPTIONS from %s:%d within %d ms", o->host,
                             port, ctimeout);
            break;
        } else if (rc == BDB_ERR_IO && o->tls && tls_failure(&c->io)) {
            /* A TLS alert after the handshake (TLS 1.3 sends a refused client
             * certificate's alert then): no other version will fare better. */
            cql_conn_set_err(err, errlen,
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
        cql_conn_set_err(err, errlen, "%s:%d speaks none of protocol versions %d..%d%s", o->host,
                         port, minv, maxv,
                         o->tls
                             ? " (it closed the TLS connection: does it want a client certificate?)"
                             : " (or it speaks TLS only: see --tls)");
        v = next;
    }
    bdb_buf_free(&f);
    if (rc == BDB_OK)
        rc = startup(c, o, ctimeout, err, errlen);
    return rc;
}
