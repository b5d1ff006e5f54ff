/* cql_io against a TLS echo server running in a thread on a loopback listener, with
 * a key and certificates made here (OpenSSL API, EC P-256): the handshake with the
 * node's certificate verified (CA, IP SAN), refused for a wrong CA and for a name
 * the certificate does not carry, accepted unverified when insecure; a required
 * client certificate; the context's file errors; and one reader thread and one
 * writer thread sharing a TLS connection for megabytes in both directions (the
 * mutex design of cql_io.h; run under ASan in CI). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bucketdb/bdb.h"
#include "common/timeutil.h"
#include "storage/cassandra/cql/wire/cql_io.h"

#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char g_dir[64];

static void path(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}

/* ================================================================ certificates */

static EVP_PKEY *new_key(void)
{
    EVP_PKEY *k = EVP_EC_gen("P-256");
    assert_non_null(k);
    return k;
}

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    assert_non_null(e);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
}

/* A certificate for key signed by ca_key (self-signed when ca is NULL). */
static X509 *new_cert(EVP_PKEY *key, const char *cn, X509 *ca, EVP_PKEY *ca_key, int is_ca,
                      const char *san)
{
    X509 *x = X509_new();
    assert_non_null(x);
    X509_set_version(x, 2);
    static long serial = 1;
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, key);
    X509_NAME *n = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(x, ca ? X509_get_subject_name(ca) : n);
    add_ext(x, ca ? ca : x, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
    if (san)
        add_ext(x, ca ? ca : x, NID_subject_alt_name, san);
    assert_true(X509_sign(x, ca_key ? ca_key : key, EVP_sha256()) > 0);
    return x;
}

static void write_cert(const char *name, X509 *x)
{
    char p[128];
    path(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    PEM_write_X509(f, x);
    fclose(f);
}

static void write_key(const char *name, EVP_PKEY *k)
{
    char p[128];
    path(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
    fclose(f);
}

/* ca.pem signs node.pem (SAN IP 127.0.0.1 only) and client.pem; other-ca.pem
 * signs nothing we use. */
static void make_files(void)
{
    EVP_PKEY *cak = new_key(), *nk = new_key(), *clk = new_key(), *ok = new_key();
    X509 *ca = new_cert(cak, "test CA", NULL, NULL, 1, NULL);
    X509 *node = new_cert(nk, "test node", ca, cak, 0, "IP:127.0.0.1");
    X509 *client = new_cert(clk, "test client", ca, cak, 0, NULL);
    X509 *other = new_cert(ok, "other CA", NULL, NULL, 1, NULL);
    write_cert("ca.pem", ca);
    write_cert("node.pem", node);
    write_key("node.key", nk);
    write_cert("client.pem", client);
    write_key("client.key", clk);
    write_cert("other-ca.pem", other);
    write_key("other.key", ok);
    X509_free(ca);
    X509_free(node);
    X509_free(client);
    X509_free(other);
    EVP_PKEY_free(cak);
    EVP_PKEY_free(nk);
    EVP_PKEY_free(clk);
    EVP_PKEY_free(ok);
}

/* ================================================================ echo server */

typedef struct server {
    int lfd, port;
    SSL_CTX *ctx;
    pthread_t th;
    atomic_int stop;
    atomic_int handshakes, refused;
} server;

/* Echoes every byte back until the client closes (blocking socket, one client at a
 * time: enough for these tests). */
static void *server_main(void *arg)
{
    server *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        struct timeval tv = {.tv_sec = 10};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
            atomic_fetch_add(&s->handshakes, 1);
            uint8_t buf[16384];
            for (;;) {
                int n = SSL_read(ssl, buf, sizeof buf);
                if (n <= 0)
                    break;
                if (SSL_write(ssl, buf, n) != n)
                    break;
            }
        } else {
            atomic_fetch_add(&s->refused, 1);
        }
        SSL_free(ssl);
        close(fd);
    }
    return NULL;
}

static server *server_start(int require_client_cert)
{
    server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    char cert[128], key[128], ca[128];
    path(cert, sizeof cert, "node.pem");
    path(key, sizeof key, "node.key");
    path(ca, sizeof ca, "ca.pem");
    s->ctx = SSL_CTX_new(TLS_server_method());
    assert_int_equal(SSL_CTX_use_certificate_file(s->ctx, cert, SSL_FILETYPE_PEM), 1);
    assert_int_equal(SSL_CTX_use_PrivateKey_file(s->ctx, key, SSL_FILETYPE_PEM), 1);
    if (require_client_cert) {
        assert_int_equal(SSL_CTX_load_verify_locations(s->ctx, ca, NULL), 1);
        SSL_CTX_set_verify(s->ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->lfd, 8), 0);
    socklen_t al = sizeof a;
    getsockname(s->lfd, (struct sockaddr *)&a, &al);
    s->port = ntohs(a.sin_port);
    pthread_create(&s->th, NULL, server_main, s);
    return s;
}

static void server_stop(server *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    close(s->lfd);
    SSL_CTX_free(s->ctx);
    free(s);
}

static cql_tls *tls_new(const char *ca, const char *cert, const char *key, int insecure)
{
    char pca[128], pcert[128], pkey[128];
    if (ca)
        path(pca, sizeof pca, ca);
    if (cert)
        path(pcert, sizeof pcert, cert);
    if (key)
        path(pkey, sizeof pkey, key);
    cql_tls_opts o = {.enabled = 1,
                      .ca_file = ca ? pca : NULL,
                      .cert_file = cert ? pcert : NULL,
                      .key_file = key ? pkey : NULL,
                      .insecure = insecure};
    cql_tls *t = NULL;
    char err[512];
    int rc = cql_tls_new(&o, &t, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("cql_tls_new: %s", err);
    return t;
}

/* ================================================================ tests */

static void test_host_is_ip(void **state)
{
    (void)state;
    assert_true(cql_io_host_is_ip("127.0.0.1"));
    assert_true(cql_io_host_is_ip("::1"));
    assert_true(cql_io_host_is_ip("fe80::1"));
    assert_false(cql_io_host_is_ip("localhost"));
    assert_false(cql_io_host_is_ip("cass-1.example.com"));
    assert_false(cql_io_host_is_ip("127.0.0.1.example"));
    assert_false(cql_io_host_is_ip(""));
}

static void test_bad_files(void **state)
{
    (void)state;
    char err[512], missing[128], ca[128], cert[128], key[128], okey[128];
    path(missing, sizeof missing, "missing.pem");
    path(ca, sizeof ca, "ca.pem");
    path(cert, sizeof cert, "client.pem");
    path(key, sizeof key, "client.key");
    path(okey, sizeof okey, "other.key");
    cql_tls *t = NULL;
    cql_tls_opts o = {.enabled = 1, .ca_file = missing};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_ERR_INVALID);
    assert_null(t);
    assert_non_null(strstr(err, "missing.pem"));
    assert_non_null(strstr(err, "CA file"));
    /* a key that is not a certificate */
    o = (cql_tls_opts){.enabled = 1, .ca_file = key};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_ERR_INVALID);
    o = (cql_tls_opts){.enabled = 1, .ca_file = ca, .cert_file = missing, .key_file = key};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_ERR_INVALID);
    assert_non_null(strstr(err, "cannot open the client certificate"));
    o = (cql_tls_opts){.enabled = 1, .ca_file = ca, .cert_file = cert, .key_file = okey};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_ERR_INVALID);
    assert_non_null(strstr(err, "mismatch"));
    assert_non_null(strstr(err, "other.key"));
    o = (cql_tls_opts){.enabled = 1, .ca_file = ca, .key_file = key};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_ERR_INVALID);
    o = (cql_tls_opts){.enabled = 1, .ca_file = ca, .cert_file = cert, .key_file = key};
    assert_int_equal(cql_tls_new(&o, &t, err, sizeof err), BDB_OK);
    cql_tls_free(t);
}

static void echo_once(cql_io *io)
{
    const uint8_t msg[] = "hello over TLS";
    int64_t dl = bdb_monotonic_ms() + 5000;
    assert_int_equal(cql_io_write_all(io, msg, sizeof msg, dl), BDB_OK);
    uint8_t back[sizeof msg];
    assert_int_equal(cql_io_read_all(io, back, sizeof back, dl), BDB_OK);
    assert_memory_equal(back, msg, sizeof msg);
}

static void test_verified_handshake(void **state)
{
    (void)state;
    server *s = server_start(0);
    cql_tls *t = tls_new("ca.pem", NULL, NULL, 0);
    cql_io io;
    char err[512] = "";
    int rc = cql_io_connect(&io, "127.0.0.1", s->port, t, 5000, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("connect: %s", err);
    assert_non_null(io.ssl);
    echo_once(&io);
    cql_io_close(&io);
    cql_tls_free(t);
    server_stop(s);
}

static void test_wrong_ca_and_wrong_name(void **state)
{
    (void)state;
    server *s = server_start(0);
    cql_tls *t = tls_new("other-ca.pem", NULL, NULL, 0);
    cql_io io;
    char err[512] = "", want[64];
    snprintf(want, sizeof want, "127.0.0.1:%d", s->port);
    assert_int_equal(cql_io_connect(&io, "127.0.0.1", s->port, t, 5000, err, sizeof err),
                     BDB_ERR_INVALID);
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(err, "unable to get local issuer certificate"));
    assert_int_equal(io.fd, -1);
    cql_tls_free(t);
    /* The right CA, but the certificate names 127.0.0.1 only. */
    t = tls_new("ca.pem", NULL, NULL, 0);
    assert_int_equal(cql_io_connect(&io, "localhost", s->port, t, 5000, err, sizeof err),
                     BDB_ERR_INVALID);
    assert_non_null(strstr(err, "localhost"));
    assert_non_null(strstr(err, "mismatch"));
    cql_tls_free(t);
    /* insecure: no verification at all, the bytes still flow encrypted */
    t = tls_new("other-ca.pem", NULL, NULL, 1);
    assert_int_equal(cql_io_connect(&io, "localhost", s->port, t, 5000, err, sizeof err), BDB_OK);
    echo_once(&io);
    cql_io_close(&io);
    cql_tls_free(t);
    server_stop(s);
}

static void test_client_certificate(void **state)
{
    (void)state;
    server *s = server_start(1);
    cql_tls *t = tls_new("ca.pem", NULL, NULL, 0);
    cql_io io;
    char err[512] = "";
    /* TLS 1.3: the client's handshake completes before the server checks the
     * certificate, so the refusal shows up on the first read. */
    int rc = cql_io_connect(&io, "127.0.0.1", s->port, t, 5000, err, sizeof err);
    if (rc == BDB_OK) {
        const uint8_t msg[] = "x";
        uint8_t b[1];
        int64_t dl = bdb_monotonic_ms() + 5000;
        cql_io_write_all(&io, msg, 1, dl);
        assert_int_equal(cql_io_read_all(&io, b, 1, dl), BDB_ERR_IO);
        assert_non_null(strstr(io.reason, "certificate required"));
        cql_io_close(&io);
    } else {
        assert_non_null(strstr(err, "certificate"));
    }
    cql_tls_free(t);
    t = tls_new("ca.pem", "client.pem", "client.key", 0);
    rc = cql_io_connect(&io, "127.0.0.1", s->port, t, 5000, err, sizeof err);
    if (rc != BDB_OK)
        fail_msg("connect: %s", err);
    echo_once(&io);
    cql_io_close(&io);
    cql_tls_free(t);
    server_stop(s);
}

/* A plain-TCP peer: accepts one connection, reads what comes, answers `reply`
 * (not TLS) and hangs up, as a node without client encryption would. */
typedef struct plain_peer {
    int lfd, port;
    const char *reply;
    pthread_t th;
} plain_peer;

static void *plain_main(void *arg)
{
    plain_peer *pp = arg;
    struct pollfd p = {.fd = pp->lfd, .events = POLLIN};
    if (poll(&p, 1, 5000) <= 0)
        return NULL;
    int fd = accept(pp->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    uint8_t buf[4096];
    struct pollfd q = {.fd = fd, .events = POLLIN};
    if (poll(&q, 1, 5000) > 0 && recv(fd, buf, sizeof buf, 0) > 0 && pp->reply)
        send(fd, pp->reply, strlen(pp->reply), MSG_NOSIGNAL);
    close(fd);
    return NULL;
}

static void plain_start(plain_peer *pp, const char *reply)
{
    pp->reply = reply;
    pp->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(pp->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(pp->lfd, 4), 0);
    socklen_t al = sizeof a;
    getsockname(pp->lfd, (struct sockaddr *)&a, &al);
    pp->port = ntohs(a.sin_port);
    pthread_create(&pp->th, NULL, plain_main, pp);
}

static void test_peer_without_tls(void **state)
{
    (void)state;
    cql_tls *t = tls_new("ca.pem", NULL, NULL, 0);
    const char *replies[] = {NULL, "HTTP/1.0 400 Bad Request\r\n\r\n"};
    for (int i = 0; i < 2; i++) {
        plain_peer pp;
        plain_start(&pp, replies[i]);
        cql_io io;
        char err[512] = "", want[64];
        snprintf(want, sizeof want, "127.0.0.1:%d", pp.port);
        int64_t t0 = bdb_monotonic_ms();
        assert_int_equal(cql_io_connect(&io, "127.0.0.1", pp.port, t, 3000, err, sizeof err),
                         BDB_ERR_IO);
        assert_true(bdb_monotonic_ms() - t0 < 3000);
        assert_non_null(strstr(err, want));
        assert_non_null(strstr(err, "TLS handshake"));
        assert_int_equal(io.fd, -1);
        pthread_join(pp.th, NULL);
        close(pp.lfd);
    }
    cql_tls_free(t);
}

/* One writer thread and one reader thread on the same TLS connection (what
 * cql_conn does): 4 MiB written in odd-sized pieces while the reader, polling
 * with cql_io_read_some, checks every echoed byte. */
typedef struct duplex {
    cql_io *io;
    size_t total;
    atomic_int write_rc;
} duplex;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 131 + (i >> 9));
}

static void *writer_main(void *arg)
{
    duplex *d = arg;
    uint8_t buf[7919];
    size_t off = 0;
    int64_t dl = bdb_monotonic_ms() + 30000;
    while (off < d->total) {
        size_t n = d->total - off < sizeof buf ? d->total - off : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(off + i);
        int rc = cql_io_write_all(d->io, buf, n, dl);
        if (rc != BDB_OK) {
            atomic_store(&d->write_rc, rc);
            return NULL;
        }
        off += n;
    }
    return NULL;
}

static void test_reader_and_writer_threads(void **state)
{
    (void)state;
    server *s = server_start(0);
    cql_tls *t = tls_new("ca.pem", NULL, NULL, 0);
    cql_io io;
    char err[512] = "";
    assert_int_equal(cql_io_connect(&io, "127.0.0.1", s->port, t, 5000, err, sizeof err), BDB_OK);
    duplex d = {.io = &io, .total = 4u << 20};
    pthread_t w;
    pthread_create(&w, NULL, writer_main, &d);
    size_t got = 0;
    uint8_t buf[65536];
    int64_t dl = bdb_monotonic_ms() + 60000;
    int bad = 0;
    while (got < d.total && bdb_monotonic_ms() < dl) {
        ssize_t n = cql_io_read_some(&io, buf, sizeof buf, 100);
        assert_true(n >= 0);
        for (ssize_t i = 0; i < n; i++)
            bad += buf[i] != pattern(got + (size_t)i);
        got += (size_t)(n > 0 ? n : 0);
    }
    pthread_join(w, NULL);
    assert_int_equal(atomic_load(&d.write_rc), BDB_OK);
    assert_int_equal(got, d.total);
    assert_int_equal(bad, 0);
    /* shutdown wakes a reader: read_some reports the close, no hang */
    cql_io_shutdown(&io);
    assert_int_equal(cql_io_read_some(&io, buf, sizeof buf, 1000), -1);
    cql_io_close(&io);
    cql_tls_free(t);
    server_stop(s);
}

static int setup(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_dir, sizeof g_dir, "/tmp/cql_io_test.XXXXXX");
    if (!mkdtemp(g_dir))
        return -1;
    make_files();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    const char *names[] = {"ca.pem",     "node.pem",     "node.key", "client.pem",
                           "client.key", "other-ca.pem", "other.key"};
    char p[128];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        path(p, sizeof p, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_is_ip),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_verified_handshake),
        cmocka_unit_test(test_wrong_ca_and_wrong_name),
        cmocka_unit_test(test_client_certificate),
        cmocka_unit_test(test_peer_without_tls),
        cmocka_unit_test(test_reader_and_writer_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
