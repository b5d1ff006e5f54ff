/* cql_conn against a fake CQL server running in a thread on a loopback listener:
 * version negotiation (a server that accepts v4; one that answers v4 like Cassandra
 * 2.1 does, with a server error in a v3 frame; one with a protocol error; one that
 * hangs up), PasswordAuthenticator, paging, error mapping, re-prepare on UNPREPARED
 * for EXECUTE and BATCH, many requests in flight answered out of order, async
 * completion, request timeout, lost connection, close with requests pending and an
 * oversized frame. The fake server speaks only what these tests need. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ================================================================ fake server */

enum v4_mode {
    V4_ACCEPT,       /* speaks v4 */
    V4_CASSANDRA_21, /* answers a v4 frame with a server error in a v3 frame */
    V4_PROTOCOL_ERR, /* answers with PROTOCOL_ERROR in a v4 frame */
    V4_HANG_UP,      /* closes the connection */
    SILENT,          /* never answers anything */
};

typedef struct fake {
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    /* behaviour */
    int mode;
    int auth;
    int rows;             /* rows of "SELECT n" */
    atomic_int unprepare; /* answer this many EXECUTE / BATCH with UNPREPARED */
    int reverse;          /* answer the frames of one read in reverse order */
    /* observations */
    atomic_int connections, prepares, executes, batches, batch_stmts, last_consistency;
    atomic_int startup_ok; /* STARTUP carried CQL_VERSION 3.0.0 */
} fake;

static void put_frame(bdb_buf *out, uint8_t version, int16_t stream, uint8_t opcode,
                      const bdb_buf *body)
{
    cql_header h = {.version = version,
                    .response = 1,
                    .stream = stream,
                    .opcode = opcode,
                    .length = (uint32_t)body->len};
    bdb_buf_reserve(out, CQL_HEADER_LEN);
    cql_header_encode(out->data + out->len, &h);
    out->len += CQL_HEADER_LEN;
    bdb_buf_append(out, body->data, body->len);
}

static void error_body(bdb_buf *b, int32_t code, const char *msg)
{
    cql_put_int(b, code);
    cql_put_string(b, msg, strlen(msg));
}

static void fake_id(const char *q, size_t n, uint8_t id[16])
{
    memset(id, 0, 16);
    for (size_t i = 0; i < n; i++)
        id[i % 16] = (uint8_t)(id[i % 16] * 31 + (uint8_t)q[i]);
}

typedef struct qparams {
    uint16_t consistency;
    uint16_t nvalues;
    cql_bytes values[8];
    int32_t page_size;
    cql_bytes paging;
} qparams;

static void read_params(bdb_dec *d, qparams *p)
{
    memset(p, 0, sizeof *p);
    p->consistency = cql_get_short(d);
    uint8_t flags = cql_get_u8(d);
    if (flags & CQL_QF_VALUES) {
        p->nvalues = cql_get_short(d);
        for (uint16_t i = 0; i < p->nvalues; i++) {
            cql_bytes v = cql_get_bytes(d);
            if (i < 8)
                p->values[i] = v;
        }
    }
    if (flags & CQL_QF_PAGE_SIZE)
        p->page_size = cql_get_int(d);
    if (flags & CQL_QF_PAGING_STATE)
        p->paging = cql_get_bytes(d);
}

/* Builds the answer to one request into out (nothing for SLOW); returns -1 to close. */
static int answer(fake *f, const cql_header *h, const uint8_t *body, bdb_buf *out)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_dec d;
    bdb_dec_init(&d, body, h->length);
    uint8_t v = h->version;
    int16_t s = h->stream;
    int rc = 0;
    if (f->mode == SILENT)
        goto done;
    if (v == 4 && f->mode != V4_ACCEPT) {
        if (f->mode == V4_HANG_UP) {
            rc = -1;
        } else if (f->mode == V4_CASSANDRA_21) {
            error_body(&b, CQL_ERR_SERVER,
                       "io.netty.handler.codec.DecoderException: org.apache.cassandra.transport."
                       "ProtocolException: Invalid or unsupported protocol version: 4");
            put_frame(out, 3, 0, CQL_OP_ERROR, &b);
        } else {
            error_body(&b, CQL_ERR_PROTOCOL, "Invalid or unsupported protocol version (4)");
            put_frame(out, 4, 0, CQL_OP_ERROR, &b);
        }
        goto done;
    }
    switch (h->opcode) {
    case CQL_OP_OPTIONS: {
        const char *keys[] = {"CQL_VERSION", "COMPRESSION"}, *vals[] = {"3.2.0", "snappy", "lz4"};
        uint16_t counts[] = {1, 2};
        cql_put_string_multimap(&b, keys, counts, vals, 2);
        put_frame(out, v, s, CQL_OP_SUPPORTED, &b);
        break;
    }
    case CQL_OP_STARTUP: {
        uint16_t n = cql_get_short(&d);
        for (uint16_t i = 0; i < n; i++) {
            char *k = cql_get_string_dup(&d), *val = cql_get_string_dup(&d);
            if (k && val && !strcmp(k, "CQL_VERSION") && !strcmp(val, "3.0.0"))
                f->startup_ok = 1;
            free(k);
            free(val);
        }
        if (f->auth) {
            const char *cls = "org.apache.cassandra.auth.PasswordAuthenticator";
            cql_put_string(&b, cls, strlen(cls));
            put_frame(out, v, s, CQL_OP_AUTHENTICATE, &b);
        } else {
            put_frame(out, v, s, CQL_OP_READY, &b);
        }
        break;
    }
    case CQL_OP_AUTH_RESPONSE: {
        cql_bytes t = cql_get_bytes(&d);
        static const char good[] = "\0cassandra\0cassandra";
        if (t.len == (int32_t)sizeof good - 1 && !memcmp(t.p, good, sizeof good - 1)) {
            cql_put_bytes(&b, NULL, CQL_NULL);
            put_frame(out, v, s, CQL_OP_AUTH_SUCCESS, &b);
        } else {
            error_body(&b, CQL_ERR_BAD_CREDENTIALS, "Username and/or password are incorrect");
            put_frame(out, v, s, CQL_OP_ERROR, &b);
        }
        break;
    }
    case CQL_OP_REGISTER:
        put_frame(out, v, s, CQL_OP_READY, &b);
        break;
    case CQL_OP_QUERY: {
        size_t qn;
        const char *q = cql_get_long_string(&d, &qn);
        qparams p;
        read_params(&d, &p);
        f->last_consistency = p.consistency;
        if (qn >= 4 && !memcmp(q, "SLOW", 4))
            break;
        if (qn >= 5 && !memcmp(q, "CLOSE", 5)) {
            rc = -1;
            break;
        }
        if (qn >= 11 && !memcmp(q, "UNAVAILABLE", 11)) {
            error_body(&b, CQL_ERR_UNAVAILABLE, "Cannot achieve consistency level QUORUM");
            cql_put_short(&b, CQL_QUORUM);
            cql_put_int(&b, 2);
            cql_put_int(&b, 1);
            put_frame(out, v, s, CQL_OP_ERROR, &b);
        } else if (qn >= 8 && !memcmp(q, "SELECT n", 8)) {
            int32_t off = p.paging.len == 4 ? (int32_t)cql_get_be32(p.paging.p) : 0;
            int32_t cnt = p.page_size > 0 ? p.page_size : f->rows;
            if (off + cnt > f->rows)
                cnt = f->rows - off;
            int more = off + cnt < f->rows;
            cql_put_int(&b, CQL_RESULT_ROWS);
            cql_put_int(&b, CQL_META_GLOBAL_TABLES_SPEC | (more ? CQL_META_HAS_MORE_PAGES : 0));
            cql_put_int(&b, 1);
            if (more) {
                uint8_t st[4];
                cql_be32(st, (uint32_t)(off + cnt));
                cql_put_bytes(&b, st, 4);
            }
            cql_put_string(&b, "ks", 2);
            cql_put_string(&b, "nums", 4);
            cql_put_string(&b, "n", 1);
            cql_put_short(&b, CQL_TYPE_INT);
            cql_put_int(&b, cnt);
            for (int32_t i = 0; i < cnt; i++) {
                uint8_t val[4];
                cql_be32(val, (uint32_t)(off + i));
                cql_put_bytes(&b, val, 4);
            }
            put_frame(out, v, s, CQL_OP_RESULT, &b);
        } else if (qn >= 4 && !memcmp(q, "ECHO", 4)) {
            cql_put_int(&b, CQL_RESULT_ROWS);
            cql_put_int(&b, CQL_META_GLOBAL_TABLES_SPEC);
            cql_put_int(&b, 1);
            cql_put_string(&b, "ks", 2);
            cql_put_string(&b, "t", 1);
            cql_put_string(&b, "v", 1);
            cql_put_short(&b, CQL_TYPE_BLOB);
            cql_put_int(&b, 1);
            cql_put_bytes(&b, p.values[0].p, p.nvalues ? p.values[0].len : CQL_NULL);
            put_frame(out, v, s, CQL_OP_RESULT, &b);
        } else if (qn >= 3 && !memcmp(q, "USE", 3)) {
            cql_put_int(&b, CQL_RESULT_SET_KEYSPACE);
            cql_put_string(&b, "ks", 2);
            put_frame(out, v, s, CQL_OP_RESULT, &b);
        } else {
            cql_put_int(&b, CQL_RESULT_VOID);
            put_frame(out, v, s, CQL_OP_RESULT, &b);
        }
        break;
    }
    case CQL_OP_PREPARE: {
        size_t qn;
        const char *q = cql_get_long_string(&d, &qn);
        uint8_t id[16];
        fake_id(q, qn, id);
        f->prepares++;
        cql_put_int(&b, CQL_RESULT_PREPARED);
        cql_put_short_bytes(&b, id, 16);
        cql_put_int(&b, CQL_META_GLOBAL_TABLES_SPEC);
        cql_put_int(&b, 1);
        if (v >= 4) {
            cql_put_int(&b, 1);
            cql_put_short(&b, 0);
        }
        cql_put_string(&b, "ks", 2);
        cql_put_string(&b, "t", 1);
        cql_put_string(&b, "v", 1);
        cql_put_short(&b, CQL_TYPE_INT);
        cql_put_int(&b, CQL_META_NO_METADATA);
        cql_put_int(&b, 0);
        put_frame(out, v, s, CQL_OP_RESULT, &b);
        break;
    }
    case CQL_OP_EXECUTE:
    case CQL_OP_BATCH: {
        uint16_t idn = 0;
        const uint8_t *id = NULL;
        if (h->opcode == CQL_OP_EXECUTE) {
            f->executes++;
            id = cql_get_short_bytes(&d, &idn);
        } else {
            f->batches++;
            cql_get_u8(&d);
            uint16_t n = cql_get_short(&d);
            f->batch_stmts += n;
            for (uint16_t i = 0; i < n; i++) {
                if (cql_get_u8(&d) == 1) {
                    uint16_t l;
                    const uint8_t *x = cql_get_short_bytes(&d, &l);
                    if (!id) {
                        id = x;
                        idn = l;
                    }
                } else {
                    size_t l;
                    cql_get_long_string(&d, &l);
                }
                uint16_t nv = cql_get_short(&d);
                for (uint16_t j = 0; j < nv; j++)
                    cql_get_bytes(&d);
            }
            f->last_consistency = cql_get_short(&d);
        }
        if (id && f->unprepare > 0) {
            f->unprepare--;
            error_body(&b, CQL_ERR_UNPREPARED, "Prepared query with ID not found");
            cql_put_short_bytes(&b, id, idn);
            put_frame(out, v, s, CQL_OP_ERROR, &b);
        } else {
            cql_put_int(&b, CQL_RESULT_VOID);
            put_frame(out, v, s, CQL_OP_RESULT, &b);
        }
        break;
    }
    default:
        error_body(&b, CQL_ERR_PROTOCOL, "unexpected opcode");
        put_frame(out, v, s, CQL_OP_ERROR, &b);
    }
done:
    bdb_buf_free(&b);
    return rc;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void serve_conn(fake *f, int fd)
{
    bdb_buf in, reply;
    bdb_buf_init(&in);
    bdb_buf_init(&reply);
    bdb_buf *answers = NULL;
    size_t nans = 0, cap = 0;
    while (!f->stop) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        bdb_buf_reserve(&in, 65536);
        ssize_t r = recv(fd, in.data + in.len, in.cap - in.len, 0);
        if (r <= 0)
            break;
        in.len += (size_t)r;
        size_t off = 0;
        int closing = 0;
        nans = 0;
        while (in.len - off >= CQL_HEADER_LEN) {
            cql_header h;
            if (cql_header_decode(in.data + off, &h, 1 << 20) != BDB_OK) {
                closing = 1;
                break;
            }
            if (in.len - off - CQL_HEADER_LEN < h.length)
                break;
            if (nans == cap) {
                cap = cap ? cap * 2 : 16;
                answers = realloc(answers, cap * sizeof *answers);
            }
            bdb_buf_init(&answers[nans]);
            if (answer(f, &h, in.data + off + CQL_HEADER_LEN, &answers[nans]) < 0)
                closing = 1;
            nans++;
            off += CQL_HEADER_LEN + h.length;
            if (closing)
                break;
        }
        memmove(in.data, in.data + off, in.len - off);
        in.len -= off;
        bdb_buf_reset(&reply);
        for (size_t i = 0; i < nans; i++) {
            bdb_buf *a = &answers[f->reverse ? nans - 1 - i : i];
            bdb_buf_append(&reply, a->data, a->len);
            bdb_buf_free(a);
        }
        if (reply.len && send_all(fd, reply.data, reply.len) < 0)
            break;
        if (closing)
            break;
    }
    free(answers);
    bdb_buf_free(&in);
    bdb_buf_free(&reply);
    close(fd);
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    while (!f->stop) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        f->connections++;
        serve_conn(f, fd);
    }
    return NULL;
}

static fake *fake_start(int mode, int auth)
{
    fake *f = calloc(1, sizeof *f);
    f->mode = mode;
    f->auth = auth;
    f->rows = 250;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->lfd, 8), 0);
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    pthread_create(&f->th, NULL, fake_main, f);
    return f;
}

static void fake_stop(fake *f)
{
    f->stop = 1;
    pthread_join(f->th, NULL);
    close(f->lfd);
    free(f);
}

static cql_conn *open_ok(fake *f, int max_version)
{
    cql_conn_opts o = {.host = "127.0.0.1",
                       .port = f->port,
                       .max_version = max_version,
                       .user = f->auth ? "cassandra" : NULL,
                       .password = f->auth ? "cassandra" : NULL};
    char err[256] = "";
    cql_conn *c = NULL;
    int rc = cql_conn_open(&o, &c, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("open failed: %s (%s)", bdb_strerror(rc), err);
    return c;
}

/* ================================================================ negotiation */

static void test_negotiates_v4_when_accepted(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 0);
    assert_int_equal(cql_conn_version(c), 4);
    assert_string_equal(cql_conn_cql_version(c), "3.2.0");
    assert_int_equal(f->connections, 1);
    assert_true(f->startup_ok);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_falls_back_to_v3(void **state)
{
    (void)state;
    int modes[] = {V4_CASSANDRA_21, V4_PROTOCOL_ERR, V4_HANG_UP};
    for (size_t i = 0; i < 3; i++) {
        fake *f = fake_start(modes[i], 0);
        cql_conn *c = open_ok(f, 0);
        assert_int_equal(cql_conn_version(c), 3);
        assert_int_equal(f->connections, 2); /* one try at v4, one at v3 */
        /* The v3 connection works. */
        cql_response *r = NULL;
        assert_int_equal(cql_query(c, "USE ks", NULL, &r), BDB_OK);
        assert_int_equal(r->result.kind, CQL_RESULT_SET_KEYSPACE);
        cql_response_free(r);
        cql_conn_close(c);
        fake_stop(f);
    }
    /* Asking for v3 only costs one connection. */
    fake *f = fake_start(V4_CASSANDRA_21, 0);
    cql_conn *c = open_ok(f, 3);
    assert_int_equal(cql_conn_version(c), 3);
    assert_int_equal(f->connections, 1);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_no_common_version(void **state)
{
    (void)state;
    fake *f = fake_start(V4_CASSANDRA_21, 0);
    cql_conn_opts o = {.host = "127.0.0.1", .port = f->port, .min_version = 4};
    char err[256] = "";
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(err, "protocol versions 4..4"));
    /* Nonsense ranges are refused before connecting. */
    o.min_version = 2;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_INVALID);
    fake_stop(f);
}

static void test_connect_failures(void **state)
{
    (void)state;
    /* A port nobody listens on: take one from a closed listener. */
    fake *f = fake_start(V4_ACCEPT, 0);
    int port = f->port;
    fake_stop(f);
    cql_conn_opts o = {.host = "127.0.0.1", .port = port, .connect_timeout_ms = 2000};
    char err[256] = "";
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_IO);
    assert_non_null(strstr(err, "cannot connect"));
    /* A server that accepts and never answers: the handshake times out. */
    f = fake_start(SILENT, 0);
    o.port = f->port;
    o.connect_timeout_ms = 300;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_AGAIN);
    assert_non_null(strstr(err, "no answer"));
    fake_stop(f);
    o.host = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_INVALID);
}

static void test_password_authenticator(void **state)
{
    (void)state;
    fake *f = fake_start(V4_CASSANDRA_21, 1);
    cql_conn_opts o = {.host = "127.0.0.1", .port = f->port};
    char err[256] = "";
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_INVALID);
    assert_non_null(strstr(err, "requires authentication"));
    o.user = "cassandra";
    o.password = "wrong";
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_ERR_INVALID);
    assert_non_null(strstr(err, "Username and/or password are incorrect"));
    c = open_ok(f, 0);
    assert_int_equal(cql_conn_version(c), 3);
    assert_string_equal(cql_conn_authenticator(c),
                        "org.apache.cassandra.auth.PasswordAuthenticator");
    cql_conn_close(c);
    fake_stop(f);
}

/* ================================================================ requests */

typedef struct page_acc {
    int pages;
    int rows;
    int in_order;
} page_acc;

static int count_page(void *ud, const cql_response *r)
{
    page_acc *a = ud;
    a->pages++;
    for (int32_t i = 0; i < r->result.nrows; i++) {
        int32_t v;
        assert_int_equal(cql_dec_int(r->result.cells[i], &v), BDB_OK);
        if (v != a->rows)
            a->in_order = 0;
        a->rows++;
    }
    return 0;
}

static void test_paging(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 0);
    cql_query_params p = {.consistency = CQL_LOCAL_QUORUM, .page_size = 100};
    page_acc a = {.in_order = 1};
    assert_int_equal(cql_query_paged(c, "SELECT n FROM nums", NULL, &p, count_page, &a, NULL),
                     BDB_OK);
    assert_int_equal(a.pages, 3);
    assert_int_equal(a.rows, 250);
    assert_true(a.in_order);
    assert_int_equal(f->last_consistency, CQL_LOCAL_QUORUM);
    /* A page size above the row count gives one page. */
    p.page_size = 1000;
    a = (page_acc){.in_order = 1};
    assert_int_equal(cql_query_paged(c, "SELECT n FROM nums", NULL, &p, count_page, &a, NULL),
                     BDB_OK);
    assert_int_equal(a.pages, 1);
    assert_int_equal(a.rows, 250);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_server_error(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 0);
    cql_response *r = NULL;
    assert_int_equal(cql_query(c, "UNAVAILABLE", NULL, &r), BDB_ERR_AGAIN);
    assert_int_equal(r->h.opcode, CQL_OP_ERROR);
    assert_int_equal(r->error.code, CQL_ERR_UNAVAILABLE);
    assert_int_equal(r->error.required, 2);
    assert_int_equal(r->error.alive, 1);
    assert_true(cql_error_retryable(r->error.code));
    cql_response_free(r);
    /* The paged form returns the error response too. */
    page_acc a = {0};
    assert_int_equal(cql_query_paged(c, "UNAVAILABLE", NULL, NULL, count_page, &a, &r),
                     BDB_ERR_AGAIN);
    assert_non_null(r);
    assert_string_equal(r->error.message, "Cannot achieve consistency level QUORUM");
    cql_response_free(r);
    assert_int_equal(a.pages, 0);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_reprepare_execute_and_batch(void **state)
{
    (void)state;
    for (int v = 3; v <= 4; v++) {
        fake *f = fake_start(V4_ACCEPT, 0);
        cql_conn *c = open_ok(f, v);
        cql_prepared *p = NULL, *p2 = NULL;
        assert_int_equal(cql_prepare(c, "INSERT INTO t (v) VALUES (?)", &p, NULL), BDB_OK);
        assert_int_equal(cql_prepared_binds(p)->ncols, 1);
        assert_int_equal(cql_prepared_binds(p)->cols[0].type->id, CQL_TYPE_INT);
        assert_int_equal(cql_prepared_binds(p)->npk, v >= 4 ? 1 : 0);
        /* Same text: the cached statement, no new PREPARE. */
        assert_int_equal(cql_prepare(c, "INSERT INTO t (v) VALUES (?)", &p2, NULL), BDB_OK);
        assert_ptr_equal(p, p2);
        assert_int_equal(f->prepares, 1);

        bdb_buf val;
        bdb_buf_init(&val);
        cql_enc_int(&val, 42);
        cql_bytes vals[1] = {{val.data, (int32_t)val.len}};
        cql_query_params qp = {.consistency = CQL_ONE, .values = vals, .nvalues = 1};
        f->unprepare = 1;
        cql_response *r = NULL;
        assert_int_equal(cql_execute(c, p, &qp, &r), BDB_OK);
        assert_int_equal(r->result.kind, CQL_RESULT_VOID);
        cql_response_free(r);
        assert_int_equal(f->prepares, 2);
        assert_int_equal(f->executes, 2);

        cql_batch_item items[3];
        for (int i = 0; i < 3; i++)
            items[i] = (cql_batch_item){.stmt = p, .values = vals, .nvalues = 1};
        f->unprepare = 1;
        assert_int_equal(cql_batch(c, CQL_BATCH_UNLOGGED, items, 3, CQL_QUORUM, &r), BDB_OK);
        cql_response_free(r);
        assert_int_equal(f->prepares, 3);
        assert_int_equal(f->batches, 2);
        assert_int_equal(f->batch_stmts, 6);
        assert_int_equal(f->last_consistency, CQL_QUORUM);

        /* A statement the server keeps forgetting: one re-prepare, then its error. */
        f->unprepare = 5;
        assert_int_equal(cql_execute(c, p, &qp, &r), BDB_ERR_NOTFOUND);
        assert_int_equal(r->error.code, CQL_ERR_UNPREPARED);
        cql_response_free(r);
        bdb_buf_free(&val);
        cql_conn_close(c);
        fake_stop(f);
    }
}

/* EXECUTE and BATCH own their request frame (kept to re-send after UNPREPARED) and
 * free it when they complete, which can happen while the sender is still returning
 * from send(): under ASan this loop catches a frame freed under a write. */
static void test_many_executes_and_batches(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 3);
    cql_prepared *p;
    assert_int_equal(cql_prepare(c, "INSERT INTO t (v) VALUES (?)", &p, NULL), BDB_OK);
    uint8_t four[4] = {0, 0, 0, 1};
    cql_bytes vals[1] = {{four, 4}};
    cql_query_params qp = {.consistency = CQL_ONE, .values = vals, .nvalues = 1};
    cql_batch_item items[20];
    for (int i = 0; i < 20; i++)
        items[i] = (cql_batch_item){.stmt = p, .values = vals, .nvalues = 1};
    for (int i = 0; i < 1000; i++) {
        cql_response *r = NULL;
        assert_int_equal(cql_execute(c, p, &qp, &r), BDB_OK);
        cql_response_free(r);
        assert_int_equal(cql_batch(c, CQL_BATCH_UNLOGGED, items, 20, CQL_ONE, &r), BDB_OK);
        cql_response_free(r);
    }
    assert_int_equal(f->executes, 1000);
    assert_int_equal(f->batches, 1000);
    cql_conn_close(c);
    fake_stop(f);
}

/* Many threads, many requests in flight, answers out of order: every answer must
 * reach the request it belongs to. */
typedef struct worker {
    cql_conn *c;
    int id;
    int ok;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < 200; i++) {
        char tag[32];
        int n = snprintf(tag, sizeof tag, "w%d-%d", w->id, i);
        cql_bytes vals[1] = {{(const uint8_t *)tag, n}};
        cql_query_params p = {.consistency = CQL_ONE, .values = vals, .nvalues = 1};
        cql_response *r = NULL;
        if (cql_query(w->c, "ECHO ?", &p, &r) == BDB_OK && r->result.nrows == 1 &&
            r->result.cells[0].len == n && !memcmp(r->result.cells[0].p, tag, (size_t)n))
            w->ok++;
        cql_response_free(r);
    }
    return NULL;
}

static void test_concurrent_out_of_order(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    f->reverse = 1;
    cql_conn_opts o = {.host = "127.0.0.1", .port = f->port, .max_in_flight = 4};
    char err[256];
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_OK);
    pthread_t th[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){.c = c, .id = i};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].ok, 200);
    }
    assert_int_equal(cql_conn_in_flight(c), 0);
    cql_conn_close(c);
    fake_stop(f);
}

typedef struct async_acc {
    atomic_int done, ok;
    atomic_int codes[4];
} async_acc;

static void async_cb(void *ud, int status, cql_response *r)
{
    async_acc *a = ud;
    if (status == BDB_OK && r && r->h.opcode == CQL_OP_RESULT)
        a->ok++;
    if (r && r->h.opcode == CQL_OP_ERROR && r->error.code < 0 && r->error.code >= -3)
        a->codes[-r->error.code]++;
    cql_response_free(r);
    a->done++;
}

static int wait_count(atomic_int *v, int want, int ms)
{
    int64_t end = bdb_monotonic_ms() + ms;
    while (*v < want && bdb_monotonic_ms() < end)
        usleep(2000);
    return *v;
}

static void test_async(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    f->reverse = 1;
    cql_conn *c = open_ok(f, 0);
    async_acc a = {0};
    int sent = 0;
    for (int i = 0; i < 100; i++) {
        int rc = cql_query_async(c, "INSERT x", NULL, async_cb, &a);
        if (rc == BDB_ERR_AGAIN) { /* all stream ids busy: let some finish */
            usleep(1000);
            i--;
            continue;
        }
        assert_int_equal(rc, BDB_OK);
        sent++;
    }
    assert_int_equal(wait_count(&a.done, sent, 10000), 100);
    assert_int_equal(a.ok, 100);

    /* Async EXECUTE with a re-prepare on the reader thread. */
    cql_prepared *p;
    assert_int_equal(cql_prepare(c, "UPDATE t SET v = ? WHERE k = 1", &p, NULL), BDB_OK);
    bdb_buf val;
    bdb_buf_init(&val);
    cql_enc_int(&val, 7);
    cql_bytes vals[1] = {{val.data, 4}};
    cql_query_params qp = {.consistency = CQL_ONE, .values = vals, .nvalues = 1};
    f->unprepare = 1;
    a = (async_acc){0};
    assert_int_equal(cql_execute_async(c, p, &qp, async_cb, &a), BDB_OK);
    assert_int_equal(wait_count(&a.done, 1, 10000), 1);
    assert_int_equal(a.ok, 1);
    bdb_buf_free(&val);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_timeout_then_usable(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    /* SLOW is never answered; the timeout also bounds the USE after it, so it leaves
     * room for a loaded machine under ASan. */
    cql_conn_opts o = {.host = "127.0.0.1", .port = f->port, .request_timeout_ms = 1500};
    char err[256];
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_OK);
    cql_response *r = NULL;
    assert_int_equal(cql_query(c, "SLOW", NULL, &r), BDB_ERR_AGAIN);
    assert_int_equal(r->error.code, CQL_ERR_CLIENT_TIMEOUT);
    assert_true(cql_error_retryable(r->error.code));
    cql_response_free(r);
    assert_true(cql_conn_usable(c));
    assert_int_equal(cql_query(c, "USE ks", NULL, &r), BDB_OK);
    cql_response_free(r);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_lost_connection(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 0);
    async_acc a = {0};
    assert_int_equal(cql_query_async(c, "SLOW", NULL, async_cb, &a), BDB_OK);
    cql_response *r = NULL;
    assert_int_equal(cql_query(c, "CLOSE", NULL, &r), BDB_ERR_IO);
    assert_int_equal(r->error.code, CQL_ERR_CLIENT_IO);
    cql_response_free(r);
    assert_int_equal(wait_count(&a.done, 1, 5000), 1);
    assert_int_equal(a.codes[-CQL_ERR_CLIENT_IO], 1);
    assert_false(cql_conn_usable(c));
    assert_int_equal(cql_query_async(c, "USE ks", NULL, async_cb, &a), BDB_ERR_IO);
    cql_conn_close(c);
    fake_stop(f);
}

static void test_close_with_pending(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    cql_conn *c = open_ok(f, 0);
    async_acc a = {0};
    for (int i = 0; i < 5; i++)
        assert_int_equal(cql_query_async(c, "SLOW", NULL, async_cb, &a), BDB_OK);
    assert_int_equal(cql_conn_in_flight(c), 5);
    cql_conn_close(c);
    assert_int_equal(a.done, 5);
    assert_int_equal(a.codes[-CQL_ERR_CLIENT_CLOSED], 5);
    fake_stop(f);
}

static void test_oversized_frame(void **state)
{
    (void)state;
    fake *f = fake_start(V4_ACCEPT, 0);
    f->rows = 5000;
    cql_conn_opts o = {.host = "127.0.0.1", .port = f->port, .max_frame = 4096};
    char err[256];
    cql_conn *c = NULL;
    assert_int_equal(cql_conn_open(&o, &c, err, sizeof err), BDB_OK);
    cql_response *r = NULL;
    assert_int_equal(cql_query(c, "SELECT n FROM nums", NULL, &r), BDB_ERR_IO);
    assert_int_equal(r->error.code, CQL_ERR_CLIENT_IO);
    cql_response_free(r);
    assert_false(cql_conn_usable(c));
    cql_conn_close(c);
    fake_stop(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negotiates_v4_when_accepted),
        cmocka_unit_test(test_falls_back_to_v3),
        cmocka_unit_test(test_no_common_version),
        cmocka_unit_test(test_connect_failures),
        cmocka_unit_test(test_password_authenticator),
        cmocka_unit_test(test_paging),
        cmocka_unit_test(test_server_error),
        cmocka_unit_test(test_reprepare_execute_and_batch),
        cmocka_unit_test(test_many_executes_and_batches),
        cmocka_unit_test(test_concurrent_out_of_order),
        cmocka_unit_test(test_async),
        cmocka_unit_test(test_timeout_then_usable),
        cmocka_unit_test(test_lost_connection),
        cmocka_unit_test(test_close_with_pending),
        cmocka_unit_test(test_oversized_frame),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
